//! `MemStorage`: an in-memory backend bounded in bytes, with readers attached while a body is
//! written.
//!
//! Each write owns one partial-body cell that keeps the chunks as `Bytes`; readers share them (no
//! copy per reader, no whole-body copy at finish). The index maps a key to its *current* write
//! only, tagged with a write id, so a superseded writer can never touch the newer entry.
//! Eviction is a CLOCK sweep over complete objects only: an in-progress body is never evicted
//! from under its readers, and a chunk that would take the writes in progress past the capacity
//! is refused instead (its write aborts: `NoRoom`, or `TooLarge` for a body larger than the whole
//! storage), so the capacity bounds everything charged,
//! as `DiskStorage`'s does. The CLOCK queue is compacted when stale records (of replaced or
//! purged objects) outnumber live ones, so it stays O(objects) whatever the write pattern.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Context;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;

use crate::cell::{BodyCell, CellLimits, Cursor};
use crate::error::{BodyError, StorageError, WriteError};
use crate::fence::{Admission, FenceTable, WriteFence};
use crate::state::{AbortReason, WriteState};
use crate::sync::RwLock;
use crate::traits::{
    BodyReader, BodySource, BodyWriter, ByteRange, CacheKey, Capabilities, Hit, ObjectMeta,
    Storage, StorageUsage,
};

/// In-memory storage holding at most `capacity` bytes, complete objects and writes in progress
/// together. Writes in progress are never evicted: a chunk that would take them past the
/// capacity (after every complete object went) aborts its write with `NoRoom` (`TooLarge` when
/// the body alone outgrew the capacity), before anything is evicted for it. (Until session 14 writes in progress were not bounded: a
/// proxy whose clients started many large fills and hung up grew past its capacity by a whole
/// object per abandoned fill.)
///
/// Accounting: a write's bytes are charged as they arrive, to the write itself, whether or not
/// it is still the key's current write (one replaced, purged or expired while in progress goes
/// on for its readers, and its bytes are real memory: until this was so, such a write grew
/// past the capacity uncharged). A write's charge is released when it ends without becoming
/// the key's complete object (aborted, dropped, or finished after being replaced), and a
/// complete object's when it is evicted, purged, replaced or expires. Bytes still referenced
/// by readers of a removed object stay alive until those readers are dropped; they are not
/// charged.
#[derive(Clone, Debug)]
pub struct MemStorage {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Lock order: `index`, then the fence table's own lock.
    index: RwLock<Index>,
    fences: FenceTable,
    next_id: AtomicU64,
    capacity: u64,
    max_object_size: u64,
}

#[derive(Debug, Default)]
struct Index {
    map: HashMap<CacheKey, Entry>,
    /// CLOCK order of complete objects, as (key, write id). A record goes stale when its object
    /// is replaced or purged; stale records are skipped by the sweep and dropped by
    /// [`Index::compact_if_stale`], so the queue stays O(complete objects).
    clock: VecDeque<(CacheKey, u64)>,
    /// Complete objects in `map` (each has exactly one current record in `clock`).
    complete: usize,
    used: u64,
    /// The part of `used` that complete objects hold: all eviction can free.
    complete_bytes: u64,
}

/// Stale records tolerated beyond one per complete object before the queue is compacted.
const CLOCK_SLACK: usize = 16;

#[derive(Debug)]
struct Entry {
    id: u64,
    object: Arc<MemObject>,
    complete: bool,
}

#[derive(Debug)]
struct MemObject {
    meta: ObjectMeta,
    cell: Arc<BodyCell>,
    referenced: AtomicBool,
    /// The bytes charged for this write (see [`MemStorage`]'s accounting). Changed only under
    /// the index lock; atomic so the entry and the writer can share it.
    charged: AtomicU64,
}

impl MemObject {
    /// Takes this write's charge off `used` (once: the charge is zeroed), under the index lock.
    fn release(&self, index: &mut Index) {
        index.used -= self.charged.swap(0, Ordering::Relaxed);
    }
}

impl MemStorage {
    /// Storage bounded to `capacity` bytes; one object may use all of it.
    pub fn new(capacity: u64) -> Self {
        Self::with_max_object_size(capacity, capacity)
    }

    /// Storage bounded to `capacity` bytes, each object to `max_object_size` bytes.
    pub fn with_max_object_size(capacity: u64, max_object_size: u64) -> Self {
        MemStorage {
            shared: Arc::new(Shared {
                index: RwLock::new(Index::default()),
                fences: FenceTable::new(),
                next_id: AtomicU64::new(1),
                capacity,
                max_object_size: max_object_size.min(capacity),
            }),
        }
    }

    /// Bytes currently charged (complete objects plus every write in progress).
    pub fn used_bytes(&self) -> u64 {
        self.shared.index.read().used
    }

    /// Number of keys with a current object (complete or in progress).
    pub fn len(&self) -> usize {
        self.shared.index.read().map.len()
    }

    /// True when no key has an object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Index {
    /// Unindexes `key`. A complete object's charge goes with it; a write in progress keeps its
    /// own until it ends (it goes on for the readers bound to it).
    fn remove(&mut self, key: &CacheKey) -> Option<Entry> {
        let entry = self.map.remove(key)?;
        if entry.complete {
            self.complete -= 1;
            self.complete_bytes -= entry.object.charged.load(Ordering::Relaxed);
            entry.object.release(self);
            self.compact_if_stale();
        }
        Some(entry)
    }

    /// Drop stale CLOCK records once they outnumber the live ones (plus slack). Each compaction
    /// walks the queue once and at least half of it is stale records, each made by one removal:
    /// amortised O(1) per removal, and the queue never exceeds `2 * complete + CLOCK_SLACK + 1`.
    fn compact_if_stale(&mut self) {
        if self.clock.len() <= 2 * self.complete + CLOCK_SLACK {
            return;
        }
        let map = &self.map;
        self.clock.retain(|(key, id)| {
            map.get(key)
                .is_some_and(|entry| entry.id == *id && entry.complete)
        });
    }

    /// Record a newly complete object in the CLOCK.
    fn push_complete(&mut self, key: CacheKey, id: u64) {
        self.complete += 1;
        self.clock.push_back((key, id));
        self.compact_if_stale();
    }

    fn remove_if_current(&mut self, key: &CacheKey, id: u64) -> Option<Entry> {
        match self.map.get(key) {
            Some(entry) if entry.id == id => self.remove(key),
            _ => None,
        }
    }

    /// Evict complete objects (CLOCK) until within capacity or none is left to evict.
    fn evict(&mut self, capacity: u64) {
        while self.used > capacity {
            let Some((key, id)) = self.clock.pop_front() else {
                return;
            };
            let Some(entry) = self.map.get(&key) else {
                continue;
            };
            if entry.id != id || !entry.complete {
                continue;
            }
            // An expired object gets no second chance (the clock is read only for those).
            let expired = entry
                .object
                .meta
                .expires_at
                .is_some_and(|at| at <= SystemTime::now());
            if !expired && entry.object.referenced.swap(false, Ordering::Relaxed) {
                self.clock.push_back((key, id));
                continue;
            }
            self.remove(&key);
        }
    }
}

impl Shared {
    /// Abort a write, drop it from the index and release its charge, in that order, under the
    /// index lock.
    fn abort_write(&self, key: &CacheKey, id: u64, object: &MemObject, reason: AbortReason) {
        let mut index = self.index.write();
        object.cell.abort(reason);
        index.remove_if_current(key, id);
        object.release(&mut index);
    }

    /// Purge (`abort`) or invalidate `key`: fence out earlier writes and unindex its object.
    /// An in-progress write is aborted `Purged`, or, invalidated, detached: it goes on for its
    /// readers, stays charged until it ends, and its `finish` finds it is not current.
    fn remove(&self, key: &CacheKey, abort: bool) -> bool {
        let mut index = self.index.write();
        self.fences.purge(key);
        let Some(entry) = index.remove(key) else {
            return false;
        };
        if abort {
            entry.object.cell.abort(AbortReason::Purged);
        }
        true
    }
}

#[async_trait]
impl Storage for MemStorage {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
            .with_partial_reads(true)
            .with_range_reads(true)
            .with_max_object_size(Some(self.shared.max_object_size))
            .with_expiry(true)
    }

    fn usage(&self) -> Option<StorageUsage> {
        Some(StorageUsage {
            used_bytes: self.used_bytes(),
            capacity_bytes: Some(self.shared.capacity),
        })
    }

    /// Cancel safety: no await; the lookup happens entirely in the first poll.
    async fn lookup(&self, key: &CacheKey) -> Result<Option<Hit>, StorageError> {
        let object = {
            let index = self.shared.index.read();
            let Some(entry) = index.map.get(key) else {
                return Ok(None);
            };
            Arc::clone(&entry.object)
        };
        // Attached before the state is read: an abort made only while no reader is attached
        // (`BodySource::abort_if_unread`, a fill whose readers all left) is then either
        // prevented by this reader or seen below, never a hit that then fails (found by
        // review: the state was read first, and such an abort could land in between).
        let cursor = object.cell.cursor();
        // An entry whose write was just aborted by a limit may still be indexed for a moment;
        // it is already marked aborted, so it is treated as a miss.
        if matches!(object.cell.state(), WriteState::Aborted(_)) {
            return Ok(None);
        }
        // Expired: a miss, and the object goes now (only objects with an expiry read the clock).
        if object
            .meta
            .expires_at
            .is_some_and(|at| at <= SystemTime::now())
        {
            let mut index = self.shared.index.write();
            if index
                .map
                .get(key)
                .is_some_and(|entry| Arc::ptr_eq(&entry.object, &object))
            {
                // A write still in progress goes on for the readers bound to it, as a
                // superseded one does; it is no longer the key's object.
                index.remove(key);
            }
            return Ok(None);
        }
        if !object.referenced.load(Ordering::Relaxed) {
            object.referenced.store(true, Ordering::Relaxed);
        }
        Ok(Some(Hit {
            meta: object.meta.clone(),
            body: Box::new(MemReader { cursor }),
        }))
    }

    fn fence(&self, key: &CacheKey) -> WriteFence {
        self.shared.fences.fence(key)
    }

    /// Cancel safety: no await; the write begins entirely in the first poll.
    async fn begin_write_fenced(
        &self,
        key: &CacheKey,
        meta: ObjectMeta,
        fence: WriteFence,
    ) -> Result<Box<dyn BodyWriter>, StorageError> {
        if !self.shared.fences.issued(&fence, key) {
            return Err(StorageError::ForeignFence);
        }
        let limit = self.shared.max_object_size;
        if let Some(declared) = meta.expected_len
            && declared > limit
        {
            return Err(StorageError::TooLarge { limit, declared });
        }
        let cell = BodyCell::new(
            true,
            CellLimits {
                expected_len: meta.expected_len,
                max_len: Some(limit),
            },
        );
        let object = Arc::new(MemObject {
            meta,
            cell,
            referenced: AtomicBool::new(false),
            charged: AtomicU64::new(0),
        });
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let admission = {
            let mut index = self.shared.index.write();
            // A declared length that the writes in progress leave no room for is refused here,
            // before the key's current object is replaced (a `replace` keeps its stale copy)
            // and without a fence record (as `DiskStorage`'s refusal for room). Found by review:
            // it replaced the object, then its first chunk was refused, leaving the key empty.
            // A body of unknown length is still refused at the chunk that does not fit.
            if let Some(declared) = object.meta.expected_len
                && (index.used - index.complete_bytes).saturating_add(declared)
                    > self.shared.capacity
            {
                return Err(StorageError::NoRoom {
                    capacity: self.shared.capacity,
                });
            }
            let admission = self.shared.fences.admit(&fence);
            match admission {
                Admission::Admitted => {
                    index.remove(key);
                    index.map.insert(
                        key.clone(),
                        Entry {
                            id,
                            object: Arc::clone(&object),
                            complete: false,
                        },
                    );
                }
                // Never indexed: it cannot be looked up, and `finish` finds it is not current.
                Admission::Superseded => {}
                Admission::Purged => {
                    object.cell.abort(AbortReason::Purged);
                }
            }
            admission
        };
        drop(fence);
        Ok(Box::new(MemWriter {
            shared: Arc::clone(&self.shared),
            key: key.clone(),
            id,
            object,
            done: admission == Admission::Purged,
        }))
    }

    /// Cancel safety: no await; the purge happens entirely in the first poll.
    async fn purge(&self, key: &CacheKey) -> Result<bool, StorageError> {
        Ok(self.shared.remove(key, true))
    }

    /// Cancel safety: no await; the invalidation happens entirely in the first poll.
    async fn invalidate(&self, key: &CacheKey) -> Result<bool, StorageError> {
        Ok(self.shared.remove(key, false))
    }
}

/// Writer for one `MemStorage` object.
#[derive(Debug)]
struct MemWriter {
    shared: Arc<Shared>,
    key: CacheKey,
    id: u64,
    object: Arc<MemObject>,
    /// Set once the write reached a terminal state through this writer.
    done: bool,
}

#[async_trait]
impl BodyWriter for MemWriter {
    async fn write(&mut self, chunk: Bytes) -> Result<(), WriteError> {
        let n = chunk.len() as u64;
        let capacity = self.shared.capacity;
        let mut index = self.shared.index.write();
        // Current or not (replaced, purged or expired while in progress), the write's bytes
        // are memory: every write is bounded and charged alike.
        if (index.used - index.complete_bytes).saturating_add(n) > capacity {
            // No room even if every complete object went: refused before anything is
            // evicted for it (the lock order index -> cell, as `purge`'s). `TooLarge` if the
            // body alone would not fit, `NoRoom` if other writes in progress hold the room
            // (the same body may fit later).
            let own = self
                .object
                .charged
                .load(Ordering::Relaxed)
                .saturating_add(n);
            let reason = if own > capacity {
                AbortReason::TooLarge { limit: capacity }
            } else {
                AbortReason::NoRoom { capacity }
            };
            self.object.cell.abort(reason.clone());
            index.remove_if_current(&self.key, self.id);
            self.object.release(&mut index);
            self.done = true;
            return Err(WriteError::Aborted(reason));
        }
        match self.object.cell.append(chunk) {
            Ok(_) => {
                self.object.charged.fetch_add(n, Ordering::Relaxed);
                index.used += n;
                index.evict(capacity);
                Ok(())
            }
            Err(reason) => {
                // The cell is aborted already (limit, purge, ...): make sure it is unindexed.
                index.remove_if_current(&self.key, self.id);
                self.object.release(&mut index);
                self.done = true;
                Err(WriteError::Aborted(reason))
            }
        }
    }

    async fn finish(mut self: Box<Self>) -> Result<u64, WriteError> {
        self.done = true;
        let mut index = self.shared.index.write();
        match self.object.cell.complete() {
            Ok(len) => {
                if let Some(entry) = index.map.get_mut(&self.key)
                    && entry.id == self.id
                {
                    entry.complete = true;
                    index.complete_bytes += self.object.charged.load(Ordering::Relaxed);
                    index.push_complete(self.key.clone(), self.id);
                    index.evict(self.shared.capacity);
                } else {
                    // Complete, but no longer the key's object: nothing keeps it but its
                    // readers (uncharged, as any removed object's).
                    self.object.release(&mut index);
                }
                Ok(len)
            }
            Err(reason) => {
                index.remove_if_current(&self.key, self.id);
                self.object.release(&mut index);
                Err(WriteError::Aborted(reason))
            }
        }
    }

    fn abort(mut self: Box<Self>, reason: AbortReason) {
        self.done = true;
        self.shared
            .abort_write(&self.key, self.id, &self.object, reason);
    }

    fn state(&self) -> WriteState {
        self.object.cell.state()
    }

    fn is_current(&self) -> bool {
        let index = self.shared.index.read();
        !self.object.cell.state().is_terminal()
            && index
                .map
                .get(&self.key)
                .is_some_and(|entry| entry.id == self.id)
    }

    fn source(&self) -> Option<Arc<dyn BodySource>> {
        Some(Arc::new(MemSource {
            object: Arc::clone(&self.object),
        }))
    }
}

impl Drop for MemWriter {
    fn drop(&mut self) {
        if !self.done {
            self.shared
                .abort_write(&self.key, self.id, &self.object, AbortReason::WriterDropped);
        }
    }
}

/// Opens readers bound to one `MemStorage` write.
#[derive(Debug)]
struct MemSource {
    object: Arc<MemObject>,
}

impl BodySource for MemSource {
    fn open(&self) -> Box<dyn BodyReader> {
        Box::new(MemReader {
            cursor: self.object.cell.cursor(),
        })
    }

    fn state(&self) -> WriteState {
        self.object.cell.state()
    }

    fn reader_count(&self) -> Option<usize> {
        Some(self.object.cell.reader_count())
    }

    fn abort_if_unread(&self, reason: AbortReason) -> Option<bool> {
        Some(self.object.cell.abort_if_unread(reason))
    }
}

/// Reader over retained chunks: returns shared slices of the writer's `Bytes`.
#[derive(Debug)]
pub(crate) struct MemReader {
    pub(crate) cursor: Cursor,
}

#[async_trait]
impl BodyReader for MemReader {
    async fn read(&mut self) -> Result<Option<Bytes>, BodyError> {
        std::future::poll_fn(|cx: &mut Context<'_>| self.cursor.poll_next_chunk(cx)).await
    }

    async fn seek(&mut self, range: ByteRange) -> Result<(), BodyError> {
        std::future::poll_fn(|cx: &mut Context<'_>| {
            self.cursor.poll_seek(range.start, range.end, cx)
        })
        .await
    }

    fn state(&self) -> WriteState {
        self.cursor.state()
    }

    fn position(&self) -> u64 {
        self.cursor.position()
    }
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use super::*;

    async fn store(storage: &MemStorage, key: &str, body: &'static [u8]) {
        let mut writer = storage
            .begin_write(&key.into(), ObjectMeta::default())
            .await
            .unwrap();
        writer.write(Bytes::from_static(body)).await.unwrap();
        writer.finish().await.unwrap();
    }

    fn records(storage: &MemStorage) -> usize {
        storage.shared.index.read().clock.len()
    }

    /// Issue 15: 10,000 rewrites of one key leave O(1) eviction records, not 10,000.
    #[tokio::test]
    async fn rewrites_keep_eviction_records_bounded() {
        let storage = MemStorage::new(1 << 20);
        for _ in 0..10_000 {
            store(&storage, "k", b"body").await;
        }
        assert_eq!(storage.len(), 1);
        assert!(
            records(&storage) <= 2 + CLOCK_SLACK,
            "{}",
            records(&storage)
        );
    }

    /// Purges (and writes that replace complete objects with in-progress ones) too.
    #[tokio::test]
    async fn purges_keep_eviction_records_bounded() {
        let storage = MemStorage::new(1 << 20);
        for i in 0..10_000 {
            let key = format!("k{}", i % 100);
            store(&storage, &key, b"body").await;
            if i % 2 == 0 {
                storage.purge(&key.as_str().into()).await.unwrap();
            } else {
                // Replaced by a write that is then dropped (aborted).
                drop(
                    storage
                        .begin_write(&key.as_str().into(), ObjectMeta::default())
                        .await
                        .unwrap(),
                );
            }
        }
        assert!(storage.is_empty());
        assert!(
            records(&storage) <= 1 + CLOCK_SLACK,
            "{}",
            records(&storage)
        );
        // Eviction still works afterwards, and in CLOCK order.
        let small = MemStorage::new(8);
        store(&small, "a", b"1234").await;
        store(&small, "b", b"1234").await;
        store(&small, "c", b"1234").await;
        assert!(small.used_bytes() <= 8);
        assert_eq!(small.len(), 2);
    }
}
