//! One shard of the store: a dense slot array, an index from key to slot, and sampled eviction.
//!
//! Layout: `slots` holds every entry contiguously; `index` (a `hashbrown::HashTable<u32>` keyed by
//! the precomputed key hash) maps a key to its slot. Deleting swap-removes, so the array never has
//! holes and `slots[random index]` is a uniformly random entry: sampling `k` victims is O(k) at any
//! size. The swap moves one entry, whose index entry is found by hash and slot number (one probe,
//! no key comparison).
//!
//! Concurrency: lookups hold the shard's read lock; they only write the entry's relaxed recency
//! stamp (skipped when unchanged) and, for a stale entry, CAS its refresh gate. Every structural
//! change (insert, remove, evict, swap) holds the write lock, so no reader can observe a slot index
//! that a swap-remove invalidates. `tests/loom.rs` checks these transitions.

use std::any::Any;
use std::borrow::Borrow;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::admission::FrequencySketch;
use crate::error::InsertError;
use crate::pool::{Candidate, EvictionPool};
use crate::rng::XorShift64;
use crate::stats::{CachePadded, ShardCounters};
use crate::sync::{AtomicU64, Ordering, RwLock, WriteGuard};

/// A fill error as stored for negative caching (downcast to the caller's `E` on the way out).
pub(crate) type ErasedError = Arc<dyn Any + Send + Sync>;

/// Expiry value for entries that never expire.
pub(crate) const NEVER: u64 = u64::MAX;
/// Refresh-gate value while one refresh of the entry is running.
const GATE_BUSY: u64 = u64::MAX;
/// Live entries rank above every stale entry (ranks of stale entries are their expiry time).
const LIVE_RANK_BASE: u64 = 1 << 62;
/// Invalidation fences per shard, selected by key hash: a remove fences only fills whose key hashes
/// to the same stripe, so unrelated fills in the shard rarely lose their publish.
pub(crate) const FENCE_STRIPES: usize = 16;

/// What an entry holds. The error is boxed so the variant is one thin pointer: cached errors are
/// rare, and a small `Stored` keeps a `u64 -> u64` slot at 40 bytes.
pub(crate) enum Stored<V> {
    Value(V),
    Error(Box<ErasedError>),
}

/// Entries removed under the lock, dropped after it is released. The common case (one victim)
/// needs no allocation.
struct Evicted<K, V> {
    first: Option<Slot<K, V>>,
    rest: Vec<Slot<K, V>>,
}

impl<K, V> Evicted<K, V> {
    fn new() -> Self {
        Self {
            first: None,
            rest: Vec::new(),
        }
    }

    fn push(&mut self, slot: Slot<K, V>) {
        if self.first.is_none() {
            self.first = Some(slot);
        } else {
            self.rest.push(slot);
        }
    }

    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    fn is_empty(&self) -> bool {
        self.first.is_none()
    }
}

/// The hot part of one entry: everything a hit or an eviction sample reads, and nothing else.
///
/// A hit reads one of these at a random place in the slot array, so at 100K+ entries the array's
/// size decides whether that read comes from the last-level cache or from memory. The weight and
/// the refresh gate, read only by writes, evictions and stale reads, live in the parallel [`Cold`]
/// array instead (measured: with them inline, a `u64 -> u64` slot was 64 bytes and get-hit at 100K
/// entries was ~115 ns; see docs/benchmarks.md).
pub(crate) struct Slot<K, V> {
    key: K,
    stored: Stored<V>,
    /// Fresh while `now < expires_at`.
    expires_at: u64,
    /// Coarse-clock millisecond of the last access (relaxed: a recency hint, never a decision).
    last_access: AtomicU64,
}

/// The cold part of the entry at the same index in [`Table::cold`]: never read by a fresh hit.
struct Cold {
    /// The key's full hash: re-locates the entry in the index (swaps, pooled candidates).
    hash: u64,
    weight: u64,
    /// A stale-while-revalidate refresh may start when `now >= refresh_gate`; `GATE_BUSY` while one
    /// runs; a failed refresh sets it to the retry time.
    refresh_gate: AtomicU64,
}

impl Cold {
    fn new(hash: u64, weight: u64) -> Self {
        Self {
            hash,
            weight,
            refresh_gate: AtomicU64::new(0),
        }
    }
}

impl<K, V> Slot<K, V> {
    fn new(key: K, stored: Stored<V>, expires_at: u64, now: u64) -> Self {
        Self {
            key,
            stored,
            expires_at,
            last_access: AtomicU64::new(now),
        }
    }

    /// The end of the window in which the entry may still be served (stale values only).
    #[inline]
    fn usable_until(&self, swr_ms: u64) -> u64 {
        match self.stored {
            Stored::Value(_) => self.expires_at.saturating_add(swr_ms),
            Stored::Error(_) => self.expires_at,
        }
    }

    #[inline]
    fn is_dead(&self, now: u64, swr_ms: u64) -> bool {
        now >= self.usable_until(swr_ms)
    }

    #[inline]
    fn touch(&self, now: u64) {
        if self.last_access.load(Ordering::Relaxed) != now {
            self.last_access.store(now, Ordering::Relaxed);
        }
    }

    /// Eviction rank, smaller is a better victim: stale entries by expiry, then live ones by recency.
    #[inline]
    fn rank(&self, now: u64) -> u64 {
        if now >= self.expires_at {
            self.expires_at.min(LIVE_RANK_BASE - 1)
        } else {
            LIVE_RANK_BASE.saturating_add(self.last_access.load(Ordering::Relaxed))
        }
    }
}

/// Settings every shard of a cache shares.
#[derive(Debug, Clone)]
pub(crate) struct ShardConfig {
    pub(crate) samples: usize,
    pub(crate) swr_ms: u64,
}

/// A value read from the store with its timing.
pub(crate) struct Snapshot<V> {
    pub(crate) value: V,
    pub(crate) expires_at: u64,
    pub(crate) stale: bool,
}

/// What a read-through lookup found.
pub(crate) enum Probe<V> {
    Fresh(V),
    /// Past its TTL, inside the stale window; `refresh` is true for the one caller that claimed the
    /// entry's refresh.
    Stale {
        value: V,
        refresh: bool,
    },
    Negative(ErasedError),
    Miss,
}

/// How a write interacts with the invalidation fence.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WriteMode {
    /// A direct write: bumps the key's fence, so older in-flight fills cannot overwrite it.
    Plain,
    /// A fill's publish: stored only if the key's fence still has the value read before the fill.
    Fenced(u64),
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteOutcome {
    Stored,
    /// TTL (plus stale window) of zero: nothing stored, any old entry removed.
    Expired,
    /// The admission filter preferred the victim.
    Declined,
    /// The key was invalidated after the fill started.
    Fenced,
}

/// The lock-protected part of a shard.
pub(crate) struct Table<K, V> {
    slots: Vec<Slot<K, V>>,
    /// `cold[i]` belongs to `slots[i]`: the two arrays are pushed and swap-removed together.
    cold: Vec<Cold>,
    index: HashTable<u32>,
    weight: u64,
    capacity: u64,
    pool: EvictionPool,
    rng: XorShift64,
}

impl<K: Eq, V> Table<K, V> {
    #[inline]
    fn find<Q>(&self, hash: u64, q: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let slots = &self.slots;
        self.index
            .find(hash, |&j| slots[j as usize].key.borrow() == q)
            .map(|&j| j as usize)
    }

    /// Finds an entry by hash alone (used to re-locate pooled candidates).
    fn find_by_hash(&self, hash: u64) -> Option<usize> {
        let cold = &self.cold;
        self.index
            .find(hash, |&j| cold[j as usize].hash == hash)
            .map(|&j| j as usize)
    }

    fn push(&mut self, slot: Slot<K, V>, hash: u64, weight: u64) {
        if self.slots.len() == self.slots.capacity() {
            // Grow by doubling, but never past the shard's capacity (every entry weighs at least
            // 1), so a full cache does not carry up to 2x unused slot memory.
            let len = self.slots.len();
            let room = usize::try_from(self.capacity)
                .unwrap_or(usize::MAX)
                .saturating_sub(len);
            let more = len.max(4).min(room).max(1);
            self.slots.reserve_exact(more);
            self.cold
                .reserve_exact(self.slots.capacity() - self.cold.len());
        }
        let idx = u32::try_from(self.slots.len()).expect("a shard holds fewer than 2^32 entries");
        self.weight += weight;
        self.slots.push(slot);
        self.cold.push(Cold::new(hash, weight));
        let cold = &self.cold;
        self.index
            .insert_unique(hash, idx, |&j| cold[j as usize].hash);
    }

    /// Swap-removes the entry at `idx`, fixing the index of the entry moved into its place.
    fn remove_at(&mut self, idx: usize) -> Slot<K, V> {
        let last = self.slots.len() - 1;
        let hash = self.cold[idx].hash;
        match self.index.find_entry(hash, |&j| j as usize == idx) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => debug_assert!(false, "slot {idx} missing from the index"),
        }
        if idx != last {
            let moved = self.cold[last].hash;
            match self.index.find_mut(moved, |&j| j as usize == last) {
                Some(j) => *j = idx as u32,
                None => debug_assert!(false, "slot {last} missing from the index"),
            }
        }
        let slot = self.slots.swap_remove(idx);
        self.weight -= self.cold.swap_remove(idx).weight;
        slot
    }

    fn remove_key<Q>(&mut self, hash: u64, q: &Q) -> Option<Slot<K, V>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.find(hash, q).map(|i| self.remove_at(i))
    }

    /// Picks an eviction victim other than `exclude`: an already-dead sample at once, otherwise the
    /// best of `samples` random slots merged with the candidate pool. O(samples + pool), never a walk.
    fn choose_victim(
        &mut self,
        now: u64,
        cfg: &ShardConfig,
        exclude: Option<usize>,
    ) -> Option<usize> {
        let len = self.slots.len();
        if len == 0 || (len == 1 && exclude == Some(0)) {
            return None;
        }
        let mut best: Option<(u64, usize)> = None;
        for _ in 0..cfg.samples.max(1) {
            let i = self.rng.below(len);
            if Some(i) == exclude {
                continue;
            }
            let s = &self.slots[i];
            if s.is_dead(now, cfg.swr_ms) {
                return Some(i);
            }
            let rank = s.rank(now);
            if self.pool.is_enabled() {
                self.pool.offer(Candidate {
                    rank,
                    hash: self.cold[i].hash,
                    idx: i as u32,
                });
            } else if best.is_none_or(|(r, _)| rank < r) {
                best = Some((rank, i));
            }
        }
        if self.pool.is_enabled() {
            while let Some(c) = self.pool.pop_best() {
                let idx = match self.cold.get(c.idx as usize) {
                    Some(s) if s.hash == c.hash => Some(c.idx as usize),
                    _ => self.find_by_hash(c.hash),
                };
                let Some(idx) = idx else { continue };
                if Some(idx) == exclude {
                    continue;
                }
                let rank = self.slots[idx].rank(now);
                if rank <= c.rank || self.pool.best_rank().is_none_or(|b| rank <= b) {
                    return Some(idx);
                }
                // Touched since it was pooled: re-rank it and look again.
                self.pool.offer(Candidate {
                    rank,
                    hash: c.hash,
                    idx: idx as u32,
                });
            }
        } else if let Some((_, i)) = best {
            return Some(i);
        }
        // Every sample hit `exclude` (tiny shards): take any other entry.
        (0..len).find(|&i| Some(i) != exclude)
    }
}

/// A shard: its table behind a lock, its invalidation fences, counters and admission sketch.
/// Aligned to 128 bytes so one shard's lock word never shares a cache line with its neighbour's.
#[repr(align(128))]
pub(crate) struct Shard<K, V> {
    table: RwLock<Table<K, V>>,
    fences: [AtomicU64; FENCE_STRIPES],
    pub(crate) counters: CachePadded<ShardCounters>,
    sketch: Option<FrequencySketch>,
}

#[inline]
fn stripe(hash: u64) -> usize {
    (hash >> 24) as usize % FENCE_STRIPES
}

impl<K: Eq, V: Clone> Shard<K, V> {
    pub(crate) fn new(capacity: u64, pool_size: usize, seed: u64, admission: bool) -> Self {
        Self {
            table: RwLock::new(Table {
                slots: Vec::new(),
                cold: Vec::new(),
                index: HashTable::new(),
                weight: 0,
                capacity,
                pool: EvictionPool::new(pool_size),
                rng: XorShift64::new(seed),
            }),
            fences: std::array::from_fn(|_| AtomicU64::new(0)),
            counters: CachePadded::default(),
            sketch: admission.then(|| FrequencySketch::new(capacity)),
        }
    }

    #[inline]
    fn record_access(&self, hash: u64) {
        if let Some(s) = &self.sketch {
            s.record(hash);
        }
    }

    /// The hit path of `get`: a fresh value or `None`.
    #[inline]
    pub(crate) fn get<Q>(&self, hash: u64, q: &Q, now: u64) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.record_access(hash);
        let t = self.table.read();
        if let Some(i) = t.find(hash, q) {
            let s = &t.slots[i];
            if let Stored::Value(v) = &s.stored
                && now < s.expires_at
            {
                s.touch(now);
                self.counters.hits.incr();
                return Some(v.clone());
            }
        }
        drop(t);
        self.counters.misses.incr();
        None
    }

    /// A fresh or stale value with its expiry (does not claim a refresh).
    pub(crate) fn lookup<Q>(&self, hash: u64, q: &Q, now: u64, swr_ms: u64) -> Option<Snapshot<V>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.record_access(hash);
        let t = self.table.read();
        if let Some(i) = t.find(hash, q) {
            let s = &t.slots[i];
            if let Stored::Value(v) = &s.stored
                && !s.is_dead(now, swr_ms)
            {
                s.touch(now);
                let stale = now >= s.expires_at;
                if stale {
                    self.counters.stale_hits.incr();
                } else {
                    self.counters.hits.incr();
                }
                return Some(Snapshot {
                    value: v.clone(),
                    expires_at: s.expires_at,
                    stale,
                });
            }
        }
        drop(t);
        self.counters.misses.incr();
        None
    }

    /// A fresh value, without counting or touching (the leader's re-check before it fills).
    pub(crate) fn peek_fresh<Q>(&self, hash: u64, q: &Q, now: u64) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        let s = &t.slots[t.find(hash, q)?];
        match &s.stored {
            Stored::Value(v) if now < s.expires_at => Some(v.clone()),
            _ => None,
        }
    }

    /// Whether a fresh value is stored (no recency update, no counters).
    pub(crate) fn contains<Q>(&self, hash: u64, q: &Q, now: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        t.find(hash, q).is_some_and(|i| {
            let s = &t.slots[i];
            matches!(s.stored, Stored::Value(_)) && now < s.expires_at
        })
    }

    /// The read-through lookup: fresh, stale (claiming the refresh if it is open), cached error, or miss.
    pub(crate) fn probe<Q>(&self, hash: u64, q: &Q, now: u64, swr_ms: u64) -> Probe<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.record_access(hash);
        let t = self.table.read();
        if let Some(i) = t.find(hash, q) {
            let s = &t.slots[i];
            if !s.is_dead(now, swr_ms) {
                match &s.stored {
                    Stored::Value(v) if now < s.expires_at => {
                        s.touch(now);
                        self.counters.hits.incr();
                        return Probe::Fresh(v.clone());
                    }
                    Stored::Value(v) => {
                        s.touch(now);
                        self.counters.stale_hits.incr();
                        return Probe::Stale {
                            value: v.clone(),
                            refresh: claim_gate(&t.cold[i].refresh_gate, now),
                        };
                    }
                    Stored::Error(e) => {
                        self.counters.negative_hits.incr();
                        return Probe::Negative(ErasedError::clone(e));
                    }
                }
            }
        }
        drop(t);
        self.counters.misses.incr();
        Probe::Miss
    }

    /// Claims the refresh of a stale entry: true for exactly one caller until the entry is replaced
    /// or the refresh is released.
    pub(crate) fn claim_refresh<Q>(&self, hash: u64, q: &Q, now: u64, swr_ms: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        t.find(hash, q).is_some_and(|i| {
            let s = &t.slots[i];
            matches!(s.stored, Stored::Value(_))
                && now >= s.expires_at
                && !s.is_dead(now, swr_ms)
                && claim_gate(&t.cold[i].refresh_gate, now)
        })
    }

    /// Releases a claimed refresh that could not run: the next stale read may claim it at `retry_at`.
    pub(crate) fn release_refresh<Q>(&self, hash: u64, q: &Q, retry_at: u64)
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        if let Some(i) = t.find(hash, q) {
            let _ = t.cold[i].refresh_gate.compare_exchange(
                GATE_BUSY,
                retry_at,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// The key's current invalidation fence; read it before a fill starts.
    #[inline]
    pub(crate) fn fence(&self, hash: u64) -> u64 {
        self.fences[stripe(hash)].load(Ordering::Acquire)
    }

    fn bump_fence(&self, hash: u64) {
        self.fences[stripe(hash)].fetch_add(1, Ordering::Release);
    }

    fn fence_holds(&self, hash: u64, mode: WriteMode) -> bool {
        match mode {
            WriteMode::Plain => {
                self.bump_fence(hash);
                true
            }
            WriteMode::Fenced(f) => self.fences[stripe(hash)].load(Ordering::Acquire) == f,
        }
    }

    /// Writes a value (or cached error) for `key`, evicting as needed so the shard's weight stays
    /// within its capacity when the lock is released.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write(
        &self,
        hash: u64,
        key: K,
        stored: Stored<V>,
        expires_at: u64,
        weight: u64,
        now: u64,
        cfg: &ShardConfig,
        mode: WriteMode,
    ) -> Result<WriteOutcome, InsertError> {
        let mut t = self.table.write();
        if !self.fence_holds(hash, mode) {
            return Ok(WriteOutcome::Fenced);
        }
        let weight = weight.max(1);
        let slot = Slot::new(key, stored, expires_at, now);
        if weight > t.capacity {
            let limit = t.capacity;
            let old = t.remove_key(hash, &slot.key);
            drop(t);
            drop(old);
            self.counters.rejections.incr();
            return Err(InsertError::TooHeavy { weight, limit });
        }
        if slot.is_dead(now, cfg.swr_ms) {
            let old = t.remove_key(hash, &slot.key);
            drop(t);
            drop(old);
            return Ok(WriteOutcome::Expired);
        }
        if let Some(i) = t.find(hash, &slot.key) {
            let old = std::mem::replace(&mut t.slots[i], slot);
            let old_weight = std::mem::replace(&mut t.cold[i], Cold::new(hash, weight)).weight;
            t.weight = t.weight - old_weight + weight;
            let evicted = self.evict_to_fit(&mut t, now, cfg, Some(i));
            drop(t);
            drop((old, evicted));
            self.counters.inserts.incr();
            return Ok(WriteOutcome::Stored);
        }
        let mut evicted = Evicted::new();
        while t.weight + weight > t.capacity {
            let Some(v) = t.choose_victim(now, cfg, None) else {
                break;
            };
            if evicted.is_empty()
                && let Some(sketch) = &self.sketch
                && now < t.slots[v].expires_at
                && !sketch.admit(hash, t.cold[v].hash)
            {
                drop(t);
                self.counters.rejections.incr();
                return Ok(WriteOutcome::Declined);
            }
            let victim = t.remove_at(v);
            self.count_removal(&victim, now);
            evicted.push(victim);
        }
        t.push(slot, hash, weight);
        drop(t);
        drop(evicted);
        self.counters.inserts.incr();
        Ok(WriteOutcome::Stored)
    }

    /// Records a failed fill for `key`: a value still inside its stale window is kept (stale-if-error)
    /// and its refresh reopens at `retry_at`; otherwise the error is cached until `expires_at`
    /// (`None`: negative caching off, nothing stored).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_error(
        &self,
        hash: u64,
        key: K,
        error: ErasedError,
        expires_at: Option<u64>,
        retry_at: u64,
        now: u64,
        cfg: &ShardConfig,
        mode: WriteMode,
    ) -> Result<WriteOutcome, InsertError> {
        {
            let t = self.table.read();
            if let Some(i) = t.find(hash, &key) {
                let s = &t.slots[i];
                if matches!(s.stored, Stored::Value(_)) && !s.is_dead(now, cfg.swr_ms) {
                    t.cold[i].refresh_gate.store(retry_at, Ordering::Release);
                    return Ok(WriteOutcome::Stored);
                }
            }
        }
        match expires_at {
            Some(at) => self.write(
                hash,
                key,
                Stored::Error(Box::new(error)),
                at,
                1,
                now,
                cfg,
                mode,
            ),
            None => Ok(WriteOutcome::Expired),
        }
    }

    fn count_removal(&self, victim: &Slot<K, V>, now: u64) {
        if now >= victim.expires_at {
            self.counters.expirations.incr();
        } else {
            self.counters.evictions.incr();
        }
    }

    /// Evicts until the weight fits the capacity, never evicting `keep` (tracked across swaps).
    fn evict_to_fit(
        &self,
        t: &mut WriteGuard<'_, Table<K, V>>,
        now: u64,
        cfg: &ShardConfig,
        mut keep: Option<usize>,
    ) -> Evicted<K, V> {
        let mut evicted = Evicted::new();
        while t.weight > t.capacity {
            let Some(v) = t.choose_victim(now, cfg, keep) else {
                break;
            };
            let last = t.slots.len() - 1;
            let victim = t.remove_at(v);
            if keep == Some(last) {
                keep = Some(v);
            }
            self.count_removal(&victim, now);
            evicted.push(victim);
        }
        evicted
    }

    /// Removes `q`'s entry and fences fills of its key that started earlier.
    pub(crate) fn remove<Q>(&self, hash: u64, q: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let mut t = self.table.write();
        self.bump_fence(hash);
        let slot = t.remove_key(hash, q);
        drop(t);
        match slot?.stored {
            Stored::Value(v) => Some(v),
            Stored::Error(_) => None,
        }
    }

    /// Removes everything and fences every fill that started earlier. Returns the number removed.
    pub(crate) fn clear(&self) -> usize {
        let mut t = self.table.write();
        for f in &self.fences {
            f.fetch_add(1, Ordering::Release);
        }
        let slots = std::mem::take(&mut t.slots);
        t.cold = Vec::new();
        t.index.clear();
        t.weight = 0;
        t.pool.clear();
        drop(t);
        slots.len()
    }

    /// Removes every entry past its TTL and stale window. O(entries in this shard).
    pub(crate) fn purge_expired(&self, now: u64, swr_ms: u64) -> usize {
        let mut t = self.table.write();
        let mut removed = Vec::new();
        let mut i = t.slots.len();
        while i > 0 {
            i -= 1;
            if t.slots[i].is_dead(now, swr_ms) {
                removed.push(t.remove_at(i));
            }
        }
        drop(t);
        self.counters.expirations.add(removed.len() as u64);
        removed.len()
    }

    /// Sets this shard's capacity and evicts down to it before returning.
    pub(crate) fn set_capacity(&self, capacity: u64, now: u64, cfg: &ShardConfig) -> usize {
        let mut t = self.table.write();
        t.capacity = capacity;
        let evicted = self.evict_to_fit(&mut t, now, cfg, None);
        drop(t);
        evicted.len()
    }

    /// Evicts `ceil(len * fraction)` entries chosen by the eviction policy.
    pub(crate) fn shrink(&self, fraction: f64, now: u64, cfg: &ShardConfig) -> usize {
        let mut t = self.table.write();
        let target = ((t.slots.len() as f64) * fraction).ceil() as usize;
        let mut evicted = Evicted::new();
        while evicted.len() < target {
            let Some(v) = t.choose_victim(now, cfg, None) else {
                break;
            };
            let victim = t.remove_at(v);
            self.count_removal(&victim, now);
            evicted.push(victim);
        }
        drop(t);
        evicted.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.table.read().slots.len()
    }

    pub(crate) fn weight(&self) -> u64 {
        self.table.read().weight
    }

    /// Entry count and weight read together.
    pub(crate) fn size(&self) -> (usize, u64) {
        let t = self.table.read();
        (t.slots.len(), t.weight)
    }
}

/// Claims a stale entry's refresh gate: succeeds for one caller while the gate is open.
#[inline]
fn claim_gate(gate: &AtomicU64, now: u64) -> bool {
    let g = gate.load(Ordering::Acquire);
    g != GATE_BUSY
        && now >= g
        && gate
            .compare_exchange(g, GATE_BUSY, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use super::*;

    fn cfg() -> ShardConfig {
        ShardConfig {
            samples: 5,
            swr_ms: 0,
        }
    }

    fn put(s: &Shard<u64, u64>, k: u64, now: u64) -> WriteOutcome {
        s.write(
            k.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            k,
            Stored::Value(k),
            NEVER,
            1,
            now,
            &cfg(),
            WriteMode::Plain,
        )
        .unwrap()
    }

    fn h(k: u64) -> u64 {
        k.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    #[test]
    fn a_u64_slot_keeps_only_what_a_hit_reads() {
        assert_eq!(std::mem::size_of::<Slot<u64, u64>>(), 40);
    }

    #[test]
    fn slot_array_never_grows_past_the_capacity() {
        let s: Shard<u64, u64> = Shard::new(1000, 16, 1, false);
        for k in 0..5000 {
            put(&s, k, 0);
        }
        assert_eq!(s.len(), 1000);
        assert_eq!(s.table.read().slots.capacity(), 1000);
    }

    #[test]
    fn swap_remove_keeps_index_consistent() {
        let s: Shard<u64, u64> = Shard::new(100, 16, 1, false);
        for k in 0..50 {
            put(&s, k, 0);
        }
        for k in (0..50).step_by(3) {
            assert_eq!(s.remove(h(k), &k), Some(k));
        }
        for k in 0..50 {
            let expect = (k % 3 != 0).then_some(k);
            assert_eq!(s.get(h(k), &k, 0), expect, "key {k}");
        }
        assert_eq!(s.len(), 50 - 17);
    }

    #[test]
    fn eviction_prefers_the_least_recently_used_with_a_pool() {
        // 100 entries touched at times 1..=100; then insert 50 more. With sampling + pool the
        // survivors should be skewed to recent ones.
        let s: Shard<u64, u64> = Shard::new(100, 16, 7, false);
        for k in 0..100 {
            put(&s, k, k + 1);
        }
        for k in 100..150 {
            put(&s, k, 200);
        }
        assert_eq!(s.len(), 100);
        let old_survivors = (0..50).filter(|k| s.contains(h(*k), k, 0)).count();
        let new_survivors = (50..100).filter(|k| s.contains(h(*k), k, 0)).count();
        assert!(
            old_survivors < new_survivors,
            "{old_survivors} vs {new_survivors}"
        );
    }

    #[test]
    fn dead_samples_are_evicted_first() {
        let s: Shard<u64, u64> = Shard::new(10, 16, 3, false);
        let c = cfg();
        for k in 0..10 {
            let exp = if k == 4 { 5 } else { NEVER };
            s.write(h(k), k, Stored::Value(k), exp, 1, 0, &c, WriteMode::Plain)
                .unwrap();
        }
        // At t=10 key 4 is dead; every other entry was touched at 0 so all rank alike.
        put(&s, 99, 10);
        assert!(!s.contains(h(4), &4, 10));
        assert_eq!(s.counters.expirations.get(), 1);
        assert_eq!(s.counters.evictions.get(), 0);
    }

    #[test]
    fn fenced_write_is_dropped_after_a_remove() {
        let s: Shard<u64, u64> = Shard::new(10, 16, 3, false);
        let f = s.fence(h(1));
        assert_eq!(s.remove(h(1), &1), None);
        let out = s
            .write(
                h(1),
                1,
                Stored::Value(1),
                NEVER,
                1,
                0,
                &cfg(),
                WriteMode::Fenced(f),
            )
            .unwrap();
        assert_eq!(out, WriteOutcome::Fenced);
        assert!(!s.contains(h(1), &1, 0));
        let f = s.fence(h(1));
        let out = s
            .write(
                h(1),
                1,
                Stored::Value(1),
                NEVER,
                1,
                0,
                &cfg(),
                WriteMode::Fenced(f),
            )
            .unwrap();
        assert_eq!(out, WriteOutcome::Stored);
    }

    #[test]
    fn refresh_gate_is_claimed_once() {
        let c = ShardConfig {
            samples: 5,
            swr_ms: 100,
        };
        let s: Shard<u64, u64> = Shard::new(10, 16, 3, false);
        s.write(h(1), 1, Stored::Value(1), 10, 1, 0, &c, WriteMode::Plain)
            .unwrap();
        assert!(
            !s.claim_refresh(h(1), &1, 5, 100),
            "fresh entries need no refresh"
        );
        assert!(s.claim_refresh(h(1), &1, 20, 100));
        assert!(!s.claim_refresh(h(1), &1, 20, 100));
        s.release_refresh(h(1), &1, 30);
        assert!(!s.claim_refresh(h(1), &1, 25, 100));
        assert!(s.claim_refresh(h(1), &1, 30, 100));
        assert!(
            !s.claim_refresh(h(1), &1, 110, 100),
            "dead entries are not refreshed"
        );
    }
}
