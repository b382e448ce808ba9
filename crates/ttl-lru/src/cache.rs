//! [`Cache`]: the handle, its shared state, and the plain store API (insert, get, lookup, remove,
//! capacity, clear, purge). The read-through API lives in `read_through.rs`.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crate::budget::Budget;
use crate::builder::CacheBuilder;
use crate::clock::{ClockSource, duration_to_ms};
use crate::error::InsertError;
use crate::listener::{Listener, RemovalCause};
use crate::shard::{
    ErasedError, NEVER, Shard, ShardConfig, Stored, Write, WriteMode, WriteOutcome,
};
use crate::stats::{CachePadded, FillCounters, Stats};
use crate::tally::Tally;

/// A weigher: the weight of an entry, counted against capacity.
pub(crate) type Weigher<K, V> = Arc<dyn Fn(&K, &V) -> u64 + Send + Sync>;
/// [`CacheBuilder::time_to_idle_by`](crate::CacheBuilder::time_to_idle_by)'s function.
pub(crate) type IdleBy<K, V> = Arc<dyn Fn(&K, &V) -> Option<Duration> + Send + Sync>;

/// A bounded, sharded TTL cache with sampled eviction (the adaptive policy by default, sampled
/// LRU on request: [`Admission`](crate::Admission)) and coalesced read-through.
///
/// Cheap to clone (an `Arc` inside); clones share the same store. See the [crate docs](crate).
///
/// # Re-entrancy
/// The key's `Hash`, `Eq` and `Clone` and the value's `Clone` run under a shard's lock (a
/// lookup compares and clones there). They must not call into the same cache: a thread that
/// does can wait on its own lock for ever. The weigher, `time_to_idle_by`'s function, the
/// eviction listener and every fill run with no lock held and may use the cache.
pub struct Cache<K, V> {
    pub(crate) inner: Arc<Inner<K, V>>,
}

impl<K, V> Clone for Cache<K, V> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K, V> std::fmt::Debug for Cache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("name", &self.inner.name)
            .field("shards", &self.inner.shards.len())
            .field("capacity", &*self.inner.capacity.lock())
            .finish_non_exhaustive()
    }
}

/// State shared by every clone of a cache.
pub(crate) struct Inner<K, V> {
    pub(crate) name: Option<String>,
    pub(crate) shards: Box<[Shard<K, V>]>,
    pub(crate) hasher: ahash::RandomState,
    pub(crate) clock: ClockSource,
    pub(crate) cfg: ShardConfig,
    /// Total capacity; the mutex serialises `set_capacity` calls' state changes (capacity,
    /// shares, budget), not their evictions, which run after it is released.
    pub(crate) capacity: parking_lot::Mutex<u64>,
    /// The capacity not in use, shared by the shards (`budget.rs`).
    pub(crate) budget: Budget,
    pub(crate) default_ttl_ms: u64,
    pub(crate) negative_ttl_ms: u64,
    pub(crate) weigher: Option<Weigher<K, V>>,
    /// Per-entry time-to-idle for writes that give none of their own.
    pub(crate) idle_by: Option<IdleBy<K, V>>,
    pub(crate) fills: CachePadded<FillCounters>,
    /// Hits, misses, inserts, evictions, expirations, fills and waits, counted per thread (see
    /// `tally.rs`).
    pub(crate) tally: Tally,
    pub(crate) group: coalesce::Group<K, V, ErasedError>,
    /// The eviction listener, also held by every shard (`listener.rs`).
    pub(crate) listener: Option<Arc<Listener<K, V>>>,
    /// How `tracing` events label keys (`observe.rs`).
    pub(crate) key_label: crate::observe::KeyLabel<K>,
    #[cfg(feature = "metrics")]
    pub(crate) metrics: crate::metrics::Metrics,
}

/// Whether a [`lookup`](Cache::lookup) found a value within its TTL or past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Within its TTL.
    Fresh,
    /// Past its TTL but inside the stale-while-revalidate window.
    Stale,
}

/// A value read by [`Cache::lookup`], with its timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<V> {
    value: V,
    expires_in: Option<Duration>,
    freshness: Freshness,
}

impl<V> Entry<V> {
    /// The value.
    pub fn value(&self) -> &V {
        &self.value
    }
    /// The value, by move.
    pub fn into_value(self) -> V {
        self.value
    }
    /// Time left until the TTL ends (`Some(ZERO)` once stale), `None` for entries that never expire.
    pub fn expires_in(&self) -> Option<Duration> {
        self.expires_in
    }
    /// Fresh or stale.
    pub fn freshness(&self) -> Freshness {
        self.freshness
    }
    /// Within its TTL.
    pub fn is_fresh(&self) -> bool {
        self.freshness == Freshness::Fresh
    }
    /// Past its TTL, inside the stale window.
    pub fn is_stale(&self) -> bool {
        self.freshness == Freshness::Stale
    }
}

/// A snapshot of an invalidation fence for [`Cache::insert_fenced`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence(u64);

impl<K, V> Cache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Starts configuring a cache holding at most `capacity` entries (or units of weight with a
    /// weigher). Capacity 0 is valid: nothing is ever stored (every insert is rejected with
    /// [`InsertError::TooHeavy`]) while read-through calls still coalesce their fills.
    pub fn builder(capacity: u64) -> CacheBuilder<K, V> {
        CacheBuilder::new(capacity)
    }

    /// A cache with default settings.
    pub fn new(capacity: u64) -> Self {
        Self::builder(capacity).build()
    }

    pub(crate) fn from_inner(inner: Arc<Inner<K, V>>) -> Self {
        Self { inner }
    }

    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, q: &Q) -> u64 {
        self.inner.hasher.hash_one(q)
    }

    #[inline]
    pub(crate) fn shard(&self, hash: u64) -> &Shard<K, V> {
        self.inner.shard(hash)
    }

    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.inner.clock.now_ms()
    }

    pub(crate) fn weigh(&self, key: &K, value: &V) -> u64 {
        self.inner.weigher.as_ref().map_or(1, |w| w(key, value))
    }

    /// The cache's registry name, if any.
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// Stores `value` under `key` for `ttl` (`Duration::MAX`: never expires), replacing any entry.
    /// Evicts (by the cache's [`Admission`](crate::Admission) policy, expired entries first) so
    /// the capacity holds when this returns.
    ///
    /// Returns `Ok(true)` if stored, `Ok(false)` if not: a TTL of zero with no stale window (the
    /// entry would be born expired; an old entry for the key is removed), or the admission
    /// policy kept the existing entries (the default, [`Admission::Adaptive`](crate::Admission),
    /// may decline a new key in a full cache while it is less frequent than what it would
    /// evict; the key's next insert or fill counts toward it; never a replacement of a stored
    /// key; counted in [`Stats::rejections`](crate::Stats), not reported to the eviction
    /// listener, since it was never stored). A direct insert also fences in-flight fills of this key that
    /// started before it, so they cannot overwrite it with an older value.
    ///
    /// # Errors
    /// [`InsertError::TooHeavy`] when the entry weighs more than its shard can hold (always with
    /// capacity 0); any old entry for the key is removed.
    pub fn insert(&self, key: K, value: V, ttl: Duration) -> Result<bool, InsertError> {
        let now = self.now();
        let expires_at = now.saturating_add(duration_to_ms(ttl));
        self.write_value(key, value, expires_at, None, now, WriteMode::Plain)
    }

    /// [`insert`](Self::insert) with a time-to-idle of this entry's own: it is fresh until
    /// `min(written + ttl, last access + idle)`, whatever the cache's
    /// [`time_to_idle`](crate::CacheBuilder::time_to_idle) (which it replaces for this entry,
    /// shorter or longer; `Duration::MAX` for none). A later write of the key without one
    /// gives it the cache's again. An idle time of zero stores nothing (the entry would be
    /// idle at birth): like a TTL of zero, it returns `Ok(false)` and removes any old entry.
    ///
    /// The entry's last access is the recency stamp hits already record, refreshed at most once
    /// per [`recency_resolution`](crate::CacheBuilder::recency_resolution), with the same
    /// caveat as the cache's setting: keep `idle` well above the resolution. Cost: the first
    /// entry of a shard whose idle time differs from the cache's gives that shard a column of
    /// 8 bytes per value (kept until the shard is cleared); a hit then reads it only when the
    /// entry's stamp is older than the smallest idle time the shard has held.
    ///
    /// # Errors
    /// As [`insert`](Self::insert).
    pub fn insert_with_idle(
        &self,
        key: K,
        value: V,
        ttl: Duration,
        idle: Duration,
    ) -> Result<bool, InsertError> {
        let now = self.now();
        let expires_at = now.saturating_add(duration_to_ms(ttl));
        let idle_ms = Some(duration_to_ms(idle));
        self.write_value(key, value, expires_at, idle_ms, now, WriteMode::Plain)
    }

    /// [`insert`](Self::insert) with the builder's `default_ttl`.
    ///
    /// # Errors
    /// As [`insert`](Self::insert).
    pub fn put(&self, key: K, value: V) -> Result<bool, InsertError> {
        let now = self.now();
        let expires_at = now.saturating_add(self.inner.default_ttl_ms);
        self.write_value(key, value, expires_at, None, now, WriteMode::Plain)
    }

    /// The key's invalidation fence: take it before fetching a value from the source of truth,
    /// then store the result with [`insert_fenced`](Self::insert_fenced). Read-through uses this.
    pub fn fence<Q>(&self, key: &Q) -> Fence
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        Fence(self.shard(hash).fence(hash))
    }

    /// Stores like [`insert`](Self::insert), unless the key was removed, inserted, invalidated or
    /// cleared after `fence` was taken (then returns `Ok(false)` and stores nothing): a value
    /// fetched before an invalidation never lands after it. Does not fence other writers.
    /// Writes of other keys do not count, unless more of them went to the key's shard since
    /// `fence` than the shard remembers (64 to 1,024, by its share of the capacity): then the
    /// write is dropped too, conservatively.
    ///
    /// # Errors
    /// As [`insert`](Self::insert).
    pub fn insert_fenced(
        &self,
        fence: Fence,
        key: K,
        value: V,
        ttl: Duration,
    ) -> Result<bool, InsertError> {
        let now = self.now();
        let expires_at = now.saturating_add(duration_to_ms(ttl));
        self.write_value(
            key,
            value,
            expires_at,
            None,
            now,
            WriteMode::Fenced(fence.0),
        )
    }

    /// Writes a value; `idle_ms` is its own time-to-idle (`None`: the builder's
    /// `time_to_idle_by` decides, or else the cache's setting).
    pub(crate) fn write_value(
        &self,
        key: K,
        value: V,
        expires_at: u64,
        idle_ms: Option<u64>,
        now: u64,
        mode: WriteMode,
    ) -> Result<bool, InsertError> {
        let hash = self.hash(&key);
        let weight = self.weigh(&key, &value);
        let idle_ms = match (&self.inner.idle_by, idle_ms) {
            (Some(by), None) => by(&key, &value).map(duration_to_ms),
            (_, idle_ms) => idle_ms,
        };
        let first = self.shard(hash).write(
            hash,
            key,
            Stored::Value(value),
            expires_at,
            idle_ms,
            weight,
            now,
            &self.inner.cfg,
            mode,
        );
        let out = self.settle_write(hash, first, expires_at, idle_ms, weight, now, mode)?;
        if out == WriteOutcome::Fenced {
            self.inner.fills.fenced.incr();
        }
        Ok(out == WriteOutcome::Stored)
    }

    /// Finishes a shard's write: if its shard had nothing left to evict for it (all of a full
    /// cache's entries sit in other shards), evicts from the other shards and writes again.
    #[allow(clippy::too_many_arguments)] // the shard write's arguments, passed on
    pub(crate) fn settle_write(
        &self,
        hash: u64,
        mut write: Result<Write<K, V>, InsertError>,
        expires_at: u64,
        idle_ms: Option<u64>,
        weight: u64,
        now: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome, InsertError> {
        loop {
            match write? {
                Write::Done(out) => return Ok(out),
                Write::NoRoom { key, stored, short } => {
                    self.inner.evict_elsewhere(hash, short, now);
                    write = self.shard(hash).write(
                        hash,
                        key,
                        stored,
                        expires_at,
                        idle_ms,
                        weight,
                        now,
                        &self.inner.cfg,
                        mode,
                    );
                }
            }
        }
    }

    /// The value if present and within its TTL. The hit path: a shard read lock (one swap on
    /// this thread's own line), a relaxed recency store (skipped when unchanged), a count in
    /// this thread's stripe, a clone. No allocation, no write to a line other threads write.
    #[inline]
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        self.shard(hash).get(hash, key, self.now())
    }

    /// The value with its expiry and freshness; stale entries (inside the stale-while-revalidate
    /// window) are returned too, marked [`Freshness::Stale`]. Cached errors are not returned.
    pub fn lookup<Q>(&self, key: &Q) -> Option<Entry<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let now = self.now();
        let snap = self
            .shard(hash)
            .lookup(hash, key, now, self.inner.cfg.swr_ms)?;
        Some(Entry {
            value: snap.value,
            expires_in: (snap.expires_at != NEVER)
                .then(|| Duration::from_millis(snap.expires_at.saturating_sub(now))),
            freshness: if snap.stale {
                Freshness::Stale
            } else {
                Freshness::Fresh
            },
        })
    }

    /// Whether a value within its TTL is stored (does not count as an access).
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        self.shard(hash).contains(hash, key, self.now())
    }

    /// Removes the key's entry, returning its value (also if expired). A fill of this key that
    /// started earlier will not store its result; its callers still get it, including callers that
    /// join it after this remove. [`invalidate`](Self::invalidate) also detaches that fill, so
    /// later callers start a fresh one.
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        self.shard(hash)
            .remove_as(hash, key, RemovalCause::Removed, self.now())
    }

    /// Removes `key`'s entry as [`remove`](Self::remove) does, unless the key was written
    /// (inserted, removed, invalidated) since `fence`: then what is stored is newer than
    /// whatever made the caller want it gone, and it stays. A clear, or more writes to the
    /// shard than it remembers, count as "not written": the entry is removed.
    pub(crate) fn remove_unless_written_since(&self, fence: Fence, key: &K) -> Option<V> {
        let hash = self.hash(key);
        self.shard(hash)
            .remove_unless_written_since(hash, key, fence.0, self.now())
    }

    /// Removes `key`'s entry and detaches its in-flight fill (the owned-key form of
    /// [`remove`](Self::remove) that also makes the next read-through caller start afresh).
    pub fn invalidate(&self, key: &K) -> Option<V> {
        let hash = self.hash(key);
        // The flight is detached however the removal ends: with a listener it clones the value
        // (user code), and a panic there used to skip this, so later callers joined the flight
        // from before the invalidation and got its value.
        let _forget = ForgetOnDrop(|| {
            self.inner.group.forget(key);
        });
        self.shard(hash)
            .remove_as(hash, key, RemovalCause::Invalidated, self.now())
    }

    /// Claims the right to refresh `key`'s stale entry (past its TTL, inside the stale window):
    /// true for exactly one caller until a new value is written or the claim is released. For
    /// callers that revalidate by hand (`lookup`, then `insert_fenced`); read-through uses it too.
    pub fn try_claim_refresh<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        self.shard(hash)
            .claim_refresh(hash, key, self.now(), self.inner.cfg.swr_ms)
    }

    /// Releases a refresh claimed with [`try_claim_refresh`](Self::try_claim_refresh) that will
    /// not write a value (it failed): the entry may be claimed again after `retry_after`.
    pub fn release_refresh<Q>(&self, key: &Q, retry_after: Duration)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let at = self.now().saturating_add(duration_to_ms(retry_after));
        self.shard(hash).release_refresh(hash, key, at);
    }

    /// Entries currently stored (fresh, stale and expired-but-not-yet-purged).
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(Shard::len).sum()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total weight stored (equals `len` without a weigher).
    pub fn weight(&self) -> u64 {
        self.inner.shards.iter().map(Shard::weight).sum()
    }

    /// The capacity (entries, or weight with a weigher).
    pub fn capacity(&self) -> u64 {
        *self.inner.capacity.lock()
    }

    /// Changes the capacity. When shrinking, evicts down to the new bound before returning
    /// (from every shard, by each shard's eviction policy); afterwards the cache holds up to
    /// `capacity` entries, however many shards it has. Returns the number of entries evicted.
    pub fn set_capacity(&self, capacity: u64) -> usize {
        self.inner.set_capacity(capacity)
    }

    /// Removes every entry and detaches every in-flight fill: fills that started before will not
    /// store their results; their waiters still receive them (none is left waiting), and later
    /// callers start fresh fills. Returns the number of entries removed.
    pub fn clear(&self) -> usize {
        self.inner.clear()
    }

    /// Same as [`clear`](Self::clear): every entry is invalid from now on.
    pub fn invalidate_all(&self) -> usize {
        self.inner.clear()
    }

    /// Removes entries past their TTL and stale window; returns how many. Walks every shard
    /// (O(entries), one shard lock at a time): maintenance, never on the insert path.
    pub fn purge_expired(&self) -> usize {
        self.inner.purge_expired()
    }

    /// Evicts `ceil(len * fraction)` entries from every shard by the eviction policy (capacity
    /// unchanged). `fraction` is clamped to `[0, 1]`. Returns how many were evicted.
    pub fn shrink(&self, fraction: f64) -> usize {
        self.inner.shrink(fraction)
    }

    /// The number of read-through fills in flight (in the coalescing group, not the store).
    pub fn fills_in_flight(&self) -> usize {
        self.inner.group.in_flight()
    }

    /// A snapshot of the counters and current size.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for shard in self.inner.shards.iter() {
            s.add_shard(&shard.counters);
            let (len, weight) = shard.size();
            s.size += len as u64;
            s.weight += weight;
        }
        s.add_tally(&self.inner.tally);
        s.add_fills(&self.inner.fills);
        s.listener_panics = self.inner.listener.as_ref().map_or(0, |l| l.panics.get());
        s.lookups = s.hits + s.misses + s.stale_hits + s.negative_hits;
        s.capacity = self.capacity();
        s
    }

    /// The TTL [`put`](Self::put) uses (`Duration::MAX` when entries never expire).
    pub fn default_ttl(&self) -> Duration {
        ms_to_duration(self.inner.default_ttl_ms)
    }
}

pub(crate) fn ms_to_duration(ms: u64) -> Duration {
    if ms == u64::MAX {
        Duration::MAX
    } else {
        Duration::from_millis(ms)
    }
}

impl<K, V> Inner<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    #[inline]
    pub(crate) fn shard(&self, hash: u64) -> &Shard<K, V> {
        &self.shards[self.shard_index(hash)]
    }

    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        shard_of(hash, self.shards.len())
    }

    /// Sets the capacity; when it shrinks, evicts (a share from every shard per round, by each
    /// shard's policy) until the budget is out of debt.
    ///
    /// The capacity lock orders concurrent resizes' state changes (capacity, shares, budget);
    /// it is released before the evictions, which call the eviction listener: a listener may
    /// call into the cache (`stats`, `capacity`, even `set_capacity`), which take that lock.
    /// Evictions of concurrent resizes then run side by side, each until the budget, which
    /// reflects the last resize, is out of debt.
    pub(crate) fn set_capacity(&self, capacity: u64) -> usize {
        let mut total = self.capacity.lock();
        let old = std::mem::replace(&mut *total, capacity);
        // The adaptive policy's simulations first (outside every shard lock: they are the one
        // lock a shard only `try_lock`s), then each shard's share of the new capacity.
        if let Some(sims) = self.shards.first().and_then(|s| s.simulations()) {
            sims.resize(capacity);
        }
        let shares = crate::builder::split_capacity(capacity, self.shards.len());
        for (s, &share) in self.shards.iter().zip(&shares) {
            s.set_limit(capacity, share);
        }
        self.budget.resize(old, capacity);
        drop(total);
        let now = self.clock.now_ms();
        let mut evicted = 0;
        while self.budget.free() < 0 {
            // Each shard gives in proportion to what it holds, so the shrink keeps the same
            // share of every shard (an even split of the debt emptied the shards holding less
            // than their split, their recent entries with the rest).
            let debt = u128::from(self.budget.free().unsigned_abs());
            let weights: Vec<u64> = self.shards.iter().map(|s| s.weight()).collect();
            let held = u128::from(weights.iter().sum::<u64>()).max(1);
            let mut round = 0;
            for (s, &weight) in self.shards.iter().zip(&weights) {
                if self.budget.free() >= 0 {
                    break;
                }
                let share = (debt * u128::from(weight)).div_ceil(held).max(1);
                round += s.evict_for_budget(share as u64, now, &self.cfg);
            }
            evicted += round;
            if round == 0 {
                // Every shard was empty when visited. Credit is only held under a shard's lock
                // and none can be taken while in debt, so this cannot happen; stop rather than
                // spin if it ever did.
                break;
            }
        }
        if capacity < old {
            // The memory of what left goes back too (a pressure watcher shrinks to get it).
            for (s, &share) in self.shards.iter().zip(&shares) {
                s.compact(share);
            }
        }
        evicted
    }

    /// Makes `short` units of room for a write to `hash`'s shard by evicting from the shards
    /// after it (that shard had nothing left to evict).
    pub(crate) fn evict_elsewhere(&self, hash: u64, short: u64, now: u64) {
        let home = self.shard_index(hash);
        let n = self.shards.len();
        let mut freed = 0;
        for step in 1..=n {
            if freed >= short {
                break;
            }
            freed += self.shards[(home + step) % n].evict_weight(short - freed, now, &self.cfg);
        }
    }

    pub(crate) fn clear(&self) -> usize {
        let removed = self.shards.iter().map(Shard::clear).sum();
        self.group.forget_all();
        removed
    }

    pub(crate) fn purge_expired(&self) -> usize {
        let now = self.clock.now_ms();
        self.shards
            .iter()
            .map(|s| s.purge_expired(now, self.cfg.swr_ms))
            .sum()
    }

    pub(crate) fn shrink(&self, fraction: f64) -> usize {
        let fraction = if fraction.is_nan() {
            0.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        let now = self.clock.now_ms();
        self.shards
            .iter()
            .map(|s| s.shrink(fraction, now, &self.cfg))
            .sum()
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(Shard::len).sum()
    }

    pub(crate) fn weight(&self) -> u64 {
        self.shards.iter().map(Shard::weight).sum()
    }
}

/// The shard of `hash` among `shards`. Bits 24..56: clear of hashbrown's bucket bits (low)
/// and tag bits (top 7).
#[inline]
pub(crate) fn shard_of(hash: u64, shards: usize) -> usize {
    ((((hash >> 24) & 0xFFFF_FFFF) * shards as u64) >> 32) as usize
}

/// What a hit writes, checked through the logging atomics of test builds (`atomic.rs`): the
/// invariant "a hit writes nothing another thread's hits write" as a test that fails if a
/// shared write is added to the default hit path (issue 17).
/// Runs its closure when dropped, unwinding included.
struct ForgetOnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for ForgetOnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use super::*;
    use crate::admission::Admission;
    use crate::atomic::writes_during;
    use crate::clock::ManualClock;

    /// The addresses of this thread's own counter stripe of `c` (its lock mark and counters).
    fn own_line(c: &Cache<u64, u64>) -> std::ops::Range<usize> {
        let me = c.inner.tally.mine().expect("this thread has a stripe");
        let at = std::ptr::from_ref(me) as usize;
        at..at + std::mem::size_of_val(me)
    }

    fn shared_writes(c: &Cache<u64, u64>, writes: &[usize]) -> Vec<usize> {
        let own = own_line(c);
        writes
            .iter()
            .copied()
            .filter(|a| !own.contains(a))
            .collect()
    }

    fn filled(admission: Admission, clock: &ManualClock) -> Cache<u64, u64> {
        let c: Cache<u64, u64> = Cache::builder(1000)
            .shards(1)
            .admission(admission)
            .clock(clock.clone())
            .build();
        for k in 0..100 {
            assert_eq!(c.insert(k, k, Duration::MAX), Ok(true));
        }
        c
    }

    /// A read-through miss nobody raced re-reads nothing after its join: the shard's store
    /// count is what its lookup saw. A write in between, or a cached error of another type
    /// (a miss for this caller, but not an empty key), makes its leader look again.
    #[test]
    fn a_leader_re_reads_the_store_only_after_a_write_that_may_have_stored() {
        let clock = ManualClock::new();
        let c: Cache<u64, u64> = Cache::builder(1000)
            .shards(1)
            .negative_ttl(Duration::from_secs(60))
            .clock(clock)
            .build();
        let peeks = || {
            c.inner.shards[0]
                .peeks
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let fill = |k: u64| move || async move { Ok::<u64, ()>(k) };
        for k in 0..100 {
            let got =
                futures::executor::block_on(c.get_or_try_insert(k, |_| Duration::MAX, fill(k)));
            assert_eq!(got.ok().map(|f| f.value), Some(k));
        }
        assert_eq!(peeks(), 0, "100 uncontended misses");
        let failed = futures::executor::block_on(c.get_or_try_insert(
            1000,
            |_| Duration::MAX,
            || async { Err::<u64, &str>("down") },
        ));
        assert!(failed.is_err());
        let got =
            futures::executor::block_on(c.get_or_try_insert(1000, |_| Duration::MAX, fill(7)));
        assert_eq!(got.ok().map(|f| f.value), Some(7));
        assert_eq!(peeks(), 1, "a cached error of another type is re-read");
    }

    /// A shrink gives the memory of what it evicted back: the slot arrays keep room for the
    /// new share, not the old one's (a pressure watcher shrinks the cache to get memory).
    /// With a weigher and a time-to-idle column too, and the cache still works after.
    #[test]
    fn set_capacity_down_gives_back_the_arrays_room() {
        let c: Cache<u64, u64> = Cache::builder(100_000)
            .shards(4)
            .weigher(|_, _| 1)
            .time_to_idle_by(|k, _| (k % 2 == 0).then_some(Duration::from_secs(3600)))
            .build();
        for k in 0..100_000 {
            assert_eq!(c.insert(k, k, Duration::MAX), Ok(true));
        }
        let room = |c: &Cache<u64, u64>| -> Vec<(usize, usize)> {
            c.inner.shards.iter().map(|s| s.slots_for_test()).collect()
        };
        assert!(room(&c).iter().all(|&(cap, _)| cap >= 20_000));
        c.set_capacity(1000);
        for (cap, len) in room(&c) {
            assert!(
                len <= 1000 && cap <= 2 * 250.max(len),
                "room {cap} for {len}"
            );
        }
        // With weights the share is weight, not entries: the room follows what is held.
        let heavy: Cache<u64, u64> = Cache::builder(100_000_000)
            .shards(4)
            .weigher(|_, _| 1000)
            .build();
        for k in 0..100_000 {
            assert_eq!(heavy.insert(k, k, Duration::MAX), Ok(true));
        }
        heavy.set_capacity(1_000_000);
        // Each shard gave its share of weight, not all it had (about 250 entries stay in each).
        for (cap, len) in room(&heavy) {
            assert!(len >= 100, "a weighted shrink emptied a shard: {len} left");
            assert!(
                len <= 1000 && cap <= 2 * len.max(4),
                "weighted: room {cap} for {len}"
            );
        }
        // The arrays still take new entries (the default policy may decline some of these: a
        // newcomer stored is what shows the room).
        let stored = (0..2000)
            .filter(|&k| c.insert(k, k, Duration::MAX).unwrap())
            .count();
        assert_eq!(c.len(), 1000);
        assert!(stored > 0);
    }

    #[test]
    fn a_default_hit_writes_only_its_own_threads_line() {
        let clock = ManualClock::new();
        let c = filled(Admission::Always, &clock);
        for k in 0..100 {
            c.get(&k); // takes this thread's stripe
        }
        let ((), writes) = writes_during(|| {
            for k in 0..100 {
                assert_eq!(c.get(&k), Some(k));
                assert!(c.lookup(&k).is_some());
                let fill = || async { Ok::<u64, ()>(0) };
                let hit =
                    futures::executor::block_on(c.get_or_try_insert(k, |_| Duration::MAX, fill));
                assert_eq!(hit.ok().map(|f| f.value), Some(k));
            }
        });
        // Each hit takes and leaves its reader mark and counts itself: the log sees them.
        assert!(writes.len() >= 600, "{} writes logged", writes.len());
        assert_eq!(shared_writes(&c, &writes), Vec::<usize>::new());
    }

    #[test]
    fn a_hit_rewrites_its_recency_stamp_at_most_once_per_resolution() {
        let clock = ManualClock::new();
        let c = filled(Admission::Always, &clock);
        c.get(&0);
        clock.advance(DEFAULT_STAMP_AGE);
        let ((), writes) = writes_during(|| {
            for _ in 0..3 {
                for k in 0..100 {
                    assert_eq!(c.get(&k), Some(k));
                }
            }
        });
        let stamps = shared_writes(&c, &writes);
        assert_eq!(stamps.len(), 100, "one stamp per entry, on its first hit");
        let mut distinct = stamps.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 100);
    }

    /// With TinyLFU, a hit on a hot key (its counters saturated, its doorkeeper bit set) writes
    /// one shared word: the shard's sketch record count, once per 64 lookups of a thread.
    #[test]
    fn a_tinylfu_hit_on_a_hot_key_adds_to_the_shared_record_count_once_per_64() {
        let clock = ManualClock::new();
        let c = filled(Admission::TinyLfu, &clock);
        for _ in 0..30 {
            for k in 0..64 {
                c.get(&k);
            }
        }
        let ((), writes) = writes_during(|| {
            for _ in 0..10 {
                for k in 0..64 {
                    assert_eq!(c.get(&k), Some(k));
                }
            }
        });
        let shared = shared_writes(&c, &writes);
        assert_eq!(shared.len(), 640 / 64, "{shared:?}");
        assert!(
            shared.iter().all(|&a| a == shared[0]),
            "one word: {shared:?}"
        );
    }

    /// A read-through miss counts its fill (and a follower its wait) in its own thread's
    /// stripe: the cache-wide counters are written only by rare events (errors, timeouts,
    /// refreshes, fences). Before session 11 every fill and every wait did a `fetch_add` on
    /// one word of the whole cache.
    #[test]
    fn a_read_through_miss_counts_in_its_own_threads_line() {
        let clock = ManualClock::new();
        let c = filled(Admission::Always, &clock);
        let fills = std::ptr::from_ref(&c.inner.fills) as usize;
        let fills = fills..fills + std::mem::size_of_val(&c.inner.fills);
        let ((), writes) = writes_during(|| {
            for k in 1_000..1_100 {
                let fill = || async move { Ok::<u64, ()>(k) };
                let got =
                    futures::executor::block_on(c.get_or_try_insert(k, |_| Duration::MAX, fill));
                assert_eq!(got.ok().map(|f| f.value), Some(k));
            }
        });
        let cache_wide: Vec<usize> = writes
            .iter()
            .copied()
            .filter(|a| fills.contains(a))
            .collect();
        assert_eq!(
            cache_wide,
            Vec::<usize>::new(),
            "no fill wrote a cache-wide counter"
        );
        assert_eq!(c.stats().fills, 100);
        let own = own_line(&c);
        assert!(
            writes.iter().any(|a| own.contains(a)),
            "counted in the stripe"
        );
    }

    /// A hit on a cached error writes, of the crate's memory, only its own thread's line (the
    /// error's `Arc` count aside, which every reader of a shared error bumps). Before session
    /// 11 it also added to its shard's `negative_hits` counter, one word for every thread.
    #[test]
    fn a_negative_hit_writes_only_its_own_threads_line() {
        let c: Cache<u64, u64> = Cache::builder(1000)
            .shards(1)
            .negative_ttl(Duration::from_secs(3600))
            .build();
        let fail = || async { Err::<u64, &'static str>("origin said no") };
        for k in 0..10 {
            let got = futures::executor::block_on(c.get_or_try_insert(k, |_| Duration::MAX, fail));
            assert!(matches!(got, Err(crate::FetchError::Failed(_))));
        }
        let ((), writes) = writes_during(|| {
            for _ in 0..10 {
                for k in 0..10 {
                    let got = futures::executor::block_on(c.get_or_try_insert(
                        k,
                        |_| Duration::MAX,
                        fail,
                    ));
                    assert!(matches!(got, Err(crate::FetchError::Failed(_))));
                }
            }
        });
        assert!(!writes.is_empty(), "the hits took their reader marks");
        assert_eq!(shared_writes(&c, &writes), Vec::<usize>::new());
        assert_eq!(c.stats().negative_hits, 100);
    }

    /// A weighted cache's share is in weight units, which say nothing of its entry count: its
    /// frequency sketches are sized for at most `WEIGHTED_SKETCH_ENTRIES` entries a shard, at
    /// build and after a resize. Before, a 16 GiB cache of byte-weighed values got the largest
    /// sketch, 192 MiB, in each of its 16 shards (3 GiB) before it held anything.
    #[test]
    fn a_weighted_cache_sizes_its_sketches_by_entries_not_weight() {
        for admission in [crate::Admission::TinyLfu, crate::Admission::Adaptive] {
            let entries_only = Cache::<u64, Vec<u8>>::builder(1 << 16)
                .admission(admission)
                .shards(1)
                .build();
            let bound = entries_only.inner.shards[0].sketch_words_for_test();
            let c = Cache::<u64, Vec<u8>>::builder(1 << 34)
                .admission(admission)
                .shards(16)
                .weigher(|_, v: &Vec<u8>| v.len() as u64)
                .build();
            c.set_capacity(1 << 35);
            for shard in c.inner.shards.iter() {
                let words = shard.sketch_words_for_test();
                assert!(words > 0 && words <= bound, "{admission:?}: {words} words");
            }
            c.insert(1, vec![0; 100], Duration::MAX).unwrap();
            assert_eq!(c.get(&1).map(|v| v.len()), Some(100));
        }
    }

    const DEFAULT_STAMP_AGE: Duration = crate::builder::DEFAULT_RECENCY_RESOLUTION;
}
