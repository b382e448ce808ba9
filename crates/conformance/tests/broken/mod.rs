//! `BuggyStorage`: the from-scratch backend of `custom_backend.rs`, with one realistic bug
//! switched on at a time ([`Bug`]). The teeth tests run the suite against each and check that it
//! fails, naming the case that catches the bug.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use async_trait::async_trait;
use bytes::Bytes;
use stream_cache::{
    AbortReason, Admission, BodyError, BodyReader, BodySource, BodyWriter, ByteRange, CacheKey,
    Capabilities, FenceTable, Hit, ObjectMeta, Storage, StorageError, WriteError, WriteFence,
    WriteState,
};

/// One realistic bug each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// No bug: the control, which must pass.
    None,
    /// Readers report an aborted write as a clean end (`Ok(None)`): the Pingora bug.
    AbortAsCleanEnd,
    /// One waker slot per body: a reader that starts waiting replaces the waker of the reader
    /// that waited before it, which is then never woken (a lost wake-up for late readers).
    SingleWakerSlot,
    /// Readers of one body share a read position, set before an await and used after it (a
    /// shared file handle with seek-then-read): under concurrency chunks come out of order.
    SharedReadPosition,
    /// `purge` unindexes an in-progress write without aborting it: its readers hang.
    PurgeLeavesReadersHanging,
    /// `seek` treats the range end as inclusive (as in HTTP `Range`): one byte too many.
    RangeEndInclusive,
    /// `finish` does not compare the length written with the declared length.
    FinishIgnoresLength,
    /// Dropping a writer schedules its abort on a reaper task instead of applying it in `Drop`.
    DropNoticedLater,
    /// `begin_write_fenced` ignores purges made after the fence was taken: a purge is undone
    /// by a fill that was already running.
    PurgeUndoneByOlderWrite,
    /// `begin_write_fenced` ignores newer writes made visible after the fence was taken: an
    /// older write replaces a newer one.
    OlderWriteReplacesNewer,
    /// A `seek` that must wait for its start returns `Pending` without registering its waker.
    SeekNeverRegistersWaker,
    /// An abort is reported as a clean end, but only to readers that have a byte range.
    AbortAsCleanEndForRanges,
    /// A range whose end is one past the final length of a partial body that completes is
    /// treated as satisfiable (an off-by-one in the completion check).
    RangeEndOnePastSatisfiable,
    /// Readers opened through `BodyWriter::source` (the followers of `StreamCache`) report an
    /// abort as a clean end.
    SourceReaderAbortAsCleanEnd,
    /// A checksum is stored at `finish` but never compared when the body is read.
    ChecksumNotVerified,
    /// The checksum is compared only once the whole body was read: damaged bytes are served
    /// first, then the error (a client resuming from those bytes keeps them).
    ChecksumVerifiedAtEnd,
    /// A reader with a byte range ends cleanly once it reached its range's end, even while the
    /// write is open (the body may yet end before that range: then the range is unsatisfiable).
    RangeEndsCleanBeforeFinish,
    /// `BodySource::reader_count` says `Some(0)` whatever is open: `StreamCache` would abort
    /// bodies clients are reading under `NoReaderPolicy::Abort`.
    ReaderCountStuckAtZero,
    /// A read takes its chunk (moving the position) before awaiting its "I/O": a read dropped
    /// there loses the chunk, and the body still ends cleanly, with a hole.
    PositionBeforeIo,
    /// `invalidate` unindexes the key (detaching a write in progress) but records no purge in
    /// the fence table: a fill that was already running stores the old body again.
    InvalidateForgetsFences,
}

/// Largest chunk one read returns.
const READ_CHUNK: usize = 16 * 1024;

/// One write's body, shared by its writer and readers.
struct Body {
    state: Mutex<BodyState>,
    bug: Bug,
}

#[derive(Default)]
struct BodyState {
    bytes: Vec<u8>,
    expected_len: Option<u64>,
    /// `None` while the write is open. RULE: set once, never changed afterwards.
    end: Option<Result<(), AbortReason>>,
    waiters: Vec<Waker>,
    /// The shared read position of `Bug::SharedReadPosition`.
    shared_pos: u64,
    /// A checksum of the bytes, taken at `finish` and verified at the end of every read.
    sum: Option<u64>,
}

fn checksum(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

impl BodyState {
    fn write_state(&self) -> WriteState {
        let len = self.bytes.len() as u64;
        match &self.end {
            None => WriteState::Partial(len),
            Some(Ok(())) => WriteState::Complete(len),
            Some(Err(reason)) => WriteState::Aborted(reason.clone()),
        }
    }

    /// RULE: a waiting reader keeps exactly one waker in the list (replaced on re-poll).
    fn wait(&mut self, waker: &Waker, bug: Bug) {
        if bug == Bug::SingleWakerSlot {
            self.waiters = vec![waker.clone()];
            return;
        }
        if !self.waiters.iter().any(|w| w.will_wake(waker)) {
            self.waiters.push(waker.clone());
        }
    }
}

impl Body {
    /// Change the state under the lock, then wake every waiter after releasing it.
    fn update<T>(&self, change: impl FnOnce(&mut BodyState) -> T) -> T {
        let (result, waiters) = {
            let mut state = self.state.lock().unwrap();
            let result = change(&mut state);
            (result, std::mem::take(&mut state.waiters))
        };
        waiters.into_iter().for_each(Waker::wake);
        result
    }

    /// Abort if still open; returns the reason the write actually ended with.
    fn abort(&self, reason: AbortReason) -> AbortReason {
        self.update(|state| match &state.end {
            Some(Err(earlier)) => earlier.clone(),
            Some(Ok(())) => reason,
            None => {
                state.end = Some(Err(reason.clone()));
                reason
            }
        })
    }
}

#[derive(Clone)]
struct Current {
    id: u64,
    meta: ObjectMeta,
    body: Arc<Body>,
}

/// The backend of `custom_backend.rs`, with `bug` switched on.
#[derive(Clone)]
pub struct BuggyStorage {
    bug: Bug,
    index: Arc<Mutex<HashMap<CacheKey, Current>>>,
    fences: FenceTable,
    next_id: Arc<AtomicU64>,
    max_object_size: u64,
}

impl BuggyStorage {
    /// Bit rot: flip one byte in the middle of every stored body (the conformance damage hook).
    pub fn damage(&self) {
        for current in self.index.lock().unwrap().values() {
            let mut state = current.body.state.lock().unwrap();
            let middle = state.bytes.len() / 2;
            if let Some(byte) = state.bytes.get_mut(middle) {
                *byte ^= 0x20;
            }
        }
    }

    /// An empty storage with `bug`, accepting objects of up to `max_object_size` bytes.
    pub fn new(bug: Bug, max_object_size: u64) -> Self {
        BuggyStorage {
            bug,
            index: Arc::default(),
            fences: FenceTable::new(),
            next_id: Arc::default(),
            max_object_size,
        }
    }
}

/// RULE: mark the body aborted *before* removing it from the index, under the index lock, so no
/// lookup can attach to it in between and no reader can see a clean end.
fn abort_and_unindex(
    index: &Mutex<HashMap<CacheKey, Current>>,
    key: &CacheKey,
    id: u64,
    body: &Body,
    reason: AbortReason,
) -> AbortReason {
    let mut index = index.lock().unwrap();
    let actual = body.abort(reason);
    if index.get(key).is_some_and(|current| current.id == id) {
        index.remove(key);
    }
    actual
}

#[async_trait]
impl Storage for BuggyStorage {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
            .with_partial_reads(true)
            .with_range_reads(true)
            .with_max_object_size(Some(self.max_object_size))
    }

    async fn lookup(&self, key: &CacheKey) -> Result<Option<Hit>, StorageError> {
        let Some(current) = self.index.lock().unwrap().get(key).cloned() else {
            return Ok(None);
        };
        if matches!(current.body.state.lock().unwrap().end, Some(Err(_))) {
            return Ok(None);
        }
        Ok(Some(Hit {
            meta: current.meta,
            body: Box::new(BuggyReader::new(current.body)),
        }))
    }

    fn fence(&self, key: &CacheKey) -> WriteFence {
        self.fences.fence(key)
    }

    async fn begin_write_fenced(
        &self,
        key: &CacheKey,
        meta: ObjectMeta,
        fence: WriteFence,
    ) -> Result<Box<dyn BodyWriter>, StorageError> {
        if !self.fences.issued(&fence, key) {
            return Err(StorageError::ForeignFence);
        }
        if let Some(declared) = meta.expected_len
            && declared > self.max_object_size
        {
            return Err(StorageError::TooLarge {
                limit: self.max_object_size,
                declared,
            });
        }
        let body = Arc::new(Body {
            state: Mutex::default(),
            bug: self.bug,
        });
        body.state.lock().unwrap().expected_len = meta.expected_len;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // RULE: a new write replaces the key's object (readers of the old one keep their body),
        // unless its fence says a purge or a newer write came after it started.
        let mut index = self.index.lock().unwrap();
        let admission = match (self.fences.admit(&fence), self.bug) {
            (Admission::Purged, Bug::PurgeUndoneByOlderWrite)
            | (Admission::Superseded, Bug::OlderWriteReplacesNewer) => Admission::Admitted,
            (admission, _) => admission,
        };
        match admission {
            Admission::Admitted => {
                index.insert(
                    key.clone(),
                    Current {
                        id,
                        meta,
                        body: Arc::clone(&body),
                    },
                );
            }
            Admission::Superseded => {}
            Admission::Purged => {
                body.abort(AbortReason::Purged);
            }
        }
        drop(index);
        Ok(Box::new(BuggyWriter {
            storage: self.clone(),
            key: key.clone(),
            id,
            body,
            done: admission == Admission::Purged,
        }))
    }

    async fn purge(&self, key: &CacheKey) -> Result<bool, StorageError> {
        let mut index = self.index.lock().unwrap();
        self.fences.purge(key);
        let Some(current) = index.remove(key) else {
            return Ok(false);
        };
        // RULE: an in-progress write is aborted, waking its readers (a complete one is kept for
        // the readers already reading it).
        if self.bug != Bug::PurgeLeavesReadersHanging {
            current.body.abort(AbortReason::Purged);
        }
        Ok(true)
    }

    async fn invalidate(&self, key: &CacheKey) -> Result<bool, StorageError> {
        let mut index = self.index.lock().unwrap();
        // RULE: as `purge`, but an in-progress write is detached (it goes on for its readers,
        // never to be indexed again), not aborted.
        if self.bug != Bug::InvalidateForgetsFences {
            self.fences.purge(key);
        }
        Ok(index.remove(key).is_some())
    }
}

struct BuggyWriter {
    storage: BuggyStorage,
    key: CacheKey,
    id: u64,
    body: Arc<Body>,
    done: bool,
}

impl BuggyWriter {
    fn fail(&mut self, reason: AbortReason) -> WriteError {
        self.done = true;
        let index = &self.storage.index;
        WriteError::Aborted(abort_and_unindex(
            index, &self.key, self.id, &self.body, reason,
        ))
    }
}

#[async_trait]
impl BodyWriter for BuggyWriter {
    async fn write(&mut self, chunk: Bytes) -> Result<(), WriteError> {
        let limit = self.storage.max_object_size;
        let violation = self.body.update(|state| {
            if let Some(end) = &state.end {
                return Some(end.clone().err().unwrap_or(AbortReason::WriterDropped));
            }
            let new_len = (state.bytes.len() + chunk.len()) as u64;
            if new_len > limit {
                return Some(AbortReason::TooLarge { limit });
            }
            if let Some(expected) = state.expected_len
                && new_len > expected
            {
                return Some(AbortReason::LengthMismatch {
                    expected,
                    written: new_len,
                });
            }
            state.bytes.extend_from_slice(&chunk);
            None
        });
        match violation {
            None => Ok(()),
            Some(reason) => Err(self.fail(reason)),
        }
    }

    async fn finish(mut self: Box<Self>) -> Result<u64, WriteError> {
        // RULE: a declared length that was not met is an abort, not a completion.
        let bug = self.body.bug;
        let outcome = self.body.update(|state| {
            let len = state.bytes.len() as u64;
            let expected_len = match bug {
                Bug::FinishIgnoresLength => None,
                _ => state.expected_len,
            };
            match (&state.end, expected_len) {
                (Some(Err(reason)), _) => Err(reason.clone()),
                (_, Some(expected)) if expected != len => Err(AbortReason::LengthMismatch {
                    expected,
                    written: len,
                }),
                _ => {
                    state.end = Some(Ok(()));
                    state.sum = Some(checksum(&state.bytes));
                    Ok(len)
                }
            }
        });
        self.done = true;
        outcome.map_err(|reason| self.fail(reason))
    }

    fn abort(mut self: Box<Self>, reason: AbortReason) {
        let _ = self.fail(reason);
    }

    fn state(&self) -> WriteState {
        self.body.state.lock().unwrap().write_state()
    }

    fn source(&self) -> Option<Arc<dyn BodySource>> {
        Some(Arc::new(BuggySource(Arc::clone(&self.body))))
    }
}

/// RULE: dropping a writer without `finish` aborts the write, synchronously, here.
impl Drop for BuggyWriter {
    fn drop(&mut self) {
        if !self.done && self.body.bug == Bug::DropNoticedLater {
            let (index, key, id, body) = (
                Arc::clone(&self.storage.index),
                self.key.clone(),
                self.id,
                Arc::clone(&self.body),
            );
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                abort_and_unindex(&index, &key, id, &body, AbortReason::WriterDropped);
            });
            return;
        }
        if !self.done {
            let _ = self.fail(AbortReason::WriterDropped);
        }
    }
}

struct BuggySource(Arc<Body>);

impl BodySource for BuggySource {
    fn open(&self) -> Box<dyn BodyReader> {
        let mut reader = BuggyReader::new(Arc::clone(&self.0));
        reader.from_source = true;
        Box::new(reader)
    }

    fn state(&self) -> WriteState {
        self.0.state.lock().unwrap().write_state()
    }

    fn reader_count(&self) -> Option<usize> {
        (self.0.bug == Bug::ReaderCountStuckAtZero).then_some(0)
    }
}

struct BuggyReader {
    body: Arc<Body>,
    pos: u64,
    end: Option<u64>,
    /// Opened through `BodyWriter::source`.
    from_source: bool,
}

impl BuggyReader {
    fn new(body: Arc<Body>) -> Self {
        BuggyReader {
            body,
            pos: 0,
            end: None,
            from_source: false,
        }
    }

    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, BodyError>> {
        let mut state = self.body.state.lock().unwrap();
        // RULE: a stored checksum is verified before any byte of the body is served.
        if !matches!(
            self.body.bug,
            Bug::ChecksumNotVerified | Bug::ChecksumVerifiedAtEnd
        ) && matches!(state.end, Some(Ok(())))
            && state.sum.is_some_and(|sum| sum != checksum(&state.bytes))
        {
            return Poll::Ready(Err(BodyError::Aborted(AbortReason::Corrupt)));
        }
        let len = state.bytes.len() as u64;
        let limit = self.end.unwrap_or(u64::MAX).min(len);
        if self.pos < limit {
            let upto = limit.min(self.pos + READ_CHUNK as u64);
            let chunk = Bytes::copy_from_slice(&state.bytes[self.pos as usize..upto as usize]);
            self.pos = upto;
            return Poll::Ready(Ok(Some(chunk)));
        }
        match &state.end {
            None if self.body.bug == Bug::RangeEndsCleanBeforeFinish
                && self.end.is_some_and(|end| self.pos >= end) =>
            {
                Poll::Ready(Ok(None))
            }
            // RULE: while the write is open, wait: never `Ok(None)`.
            None => {
                state.wait(cx.waker(), self.body.bug);
                Poll::Pending
            }
            // RULE: after an abort, every written byte and then the error, every time.
            Some(Err(_)) if self.body.bug == Bug::AbortAsCleanEnd => Poll::Ready(Ok(None)),
            Some(Err(_))
                if self.body.bug == Bug::AbortAsCleanEndForRanges && self.end.is_some() =>
            {
                Poll::Ready(Ok(None))
            }
            Some(Err(_))
                if self.body.bug == Bug::SourceReaderAbortAsCleanEnd && self.from_source =>
            {
                Poll::Ready(Ok(None))
            }
            Some(Err(reason)) => Poll::Ready(Err(BodyError::Aborted(reason.clone()))),
            Some(Ok(())) => match self.end {
                Some(end)
                    if end > len
                        && !(self.body.bug == Bug::RangeEndOnePastSatisfiable
                            && end == len + 1) =>
                {
                    Poll::Ready(Err(BodyError::RangeNotSatisfiable {
                        start: self.pos,
                        end: Some(end),
                        len,
                    }))
                }
                // (`ChecksumVerifiedAtEnd`: verified here only.)
                _ if self.body.bug != Bug::ChecksumNotVerified
                    && state.sum.is_some_and(|sum| sum != checksum(&state.bytes)) =>
                {
                    Poll::Ready(Err(BodyError::Aborted(AbortReason::Corrupt)))
                }
                _ => Poll::Ready(Ok(None)),
            },
        }
    }

    fn poll_seek(&mut self, range: ByteRange, cx: &mut Context<'_>) -> Poll<Result<(), BodyError>> {
        if let Some(end) = range.end
            && end < range.start
        {
            return Poll::Ready(Err(BodyError::InvalidRange {
                start: range.start,
                end,
            }));
        }
        let mut state = self.body.state.lock().unwrap();
        let len = state.bytes.len() as u64;
        let complete = matches!(state.end, Some(Ok(())));
        let past_end = |at: u64| complete && at > len;
        if past_end(range.start) || range.end.is_some_and(past_end) {
            return Poll::Ready(Err(BodyError::RangeNotSatisfiable {
                start: range.start,
                end: range.end,
                len,
            }));
        }
        if range.start > len {
            return match &state.end {
                None => {
                    if self.body.bug != Bug::SeekNeverRegistersWaker {
                        state.wait(cx.waker(), self.body.bug);
                    }
                    Poll::Pending
                }
                Some(Err(reason)) => Poll::Ready(Err(BodyError::Aborted(reason.clone()))),
                Some(Ok(())) => unreachable!("checked above"),
            };
        }
        self.pos = range.start;
        self.end = match self.body.bug {
            Bug::RangeEndInclusive => range.end.map(|end| end + 1),
            _ => range.end,
        };
        Poll::Ready(Ok(()))
    }
}

#[async_trait]
impl BodyReader for BuggyReader {
    async fn read(&mut self) -> Result<Option<Bytes>, BodyError> {
        if self.body.bug == Bug::SharedReadPosition {
            self.body.state.lock().unwrap().shared_pos = self.pos;
            tokio::task::yield_now().await; // the "I/O" between seek and read
            self.pos = self.body.state.lock().unwrap().shared_pos;
            let chunk = poll_fn(|cx| self.poll_read(cx)).await;
            self.body.state.lock().unwrap().shared_pos = self.pos;
            return chunk;
        }
        if self.body.bug == Bug::PositionBeforeIo {
            let chunk = poll_fn(|cx| self.poll_read(cx)).await;
            tokio::task::yield_now().await; // the "I/O", after the position moved
            return chunk;
        }
        poll_fn(|cx| self.poll_read(cx)).await
    }

    async fn seek(&mut self, range: ByteRange) -> Result<(), BodyError> {
        poll_fn(|cx| self.poll_seek(range, cx)).await
    }

    fn state(&self) -> WriteState {
        self.body.state.lock().unwrap().write_state()
    }

    fn position(&self) -> u64 {
        self.pos
    }
}
