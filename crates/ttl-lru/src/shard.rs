//! One shard of the store: its table (`table.rs`) behind its shard lock, its invalidation
//! fences, counters and admission sketch; every store operation of a shard is a method here.
//!
//! Concurrency: lookups hold the shard's read lock (`shard_lock.rs`); they only write the
//! entry's relaxed recency stamp (skipped when unchanged) and, for a stale entry, CAS its
//! refresh gate. Every structural change (insert, remove, evict, swap) holds the write lock, so
//! no reader can observe a place that a swap-remove invalidates. User data taken out under the
//! lock (old values, victims) is dropped after it is released. `tests/loom.rs` checks these
//! transitions.

mod idle;
mod notify;
mod snapshot;

pub(crate) use snapshot::Unwritten;

use std::any::Any;
use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

use crate::adaptive::{HitBuffers, State};
use crate::admission::{Admission, FrequencySketch};
use crate::budget::{Budget, MAX_BUDGET};
use crate::error::InsertError;
use crate::listener::{Listener, RemovalCause};
use crate::minisim::MiniSims;
use crate::shard_lock::{ShardLock, WriteGuard};
use crate::stats::{CachePadded, ShardCounters};
use crate::sync::{AtomicU64, Ordering};
use crate::table::{At, Columns, ErrorSlot, MAX_ENTRIES, Pick, Removed, Slot, Table};
use crate::tally::{Event, Stripe, Tally};

/// A fill error as stored for negative caching (downcast to the caller's `E` on the way out).
pub(crate) type ErasedError = Arc<dyn Any + Send + Sync>;

/// Expiry value for entries that never expire.
pub(crate) const NEVER: u64 = u64::MAX;
/// Refresh-gate value while one refresh of the entry is running.
const GATE_BUSY: u64 = u64::MAX;

/// What a write stores.
pub(crate) enum Stored<V> {
    Value(V),
    Error(ErasedError),
}

/// Entries removed under the lock, dropped after it is released. The common case (one victim)
/// needs no allocation.
struct Evicted<K, V> {
    first: Option<Removed<K, V>>,
    rest: Vec<Removed<K, V>>,
}

impl<K, V> Evicted<K, V> {
    fn new() -> Self {
        Self {
            first: None,
            rest: Vec::new(),
        }
    }

    fn push(&mut self, removed: Removed<K, V>) {
        if self.first.is_none() {
            self.first = Some(removed);
        } else {
            self.rest.push(removed);
        }
    }

    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    fn is_empty(&self) -> bool {
        self.first.is_none()
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
        /// When the stale window ends (coarse-clock ms): a refresh still running then is
        /// abandoned.
        until: u64,
    },
    Negative(ErasedError),
    /// No usable entry; the shard's store count as the lookup saw it (see
    /// [`Shard::stored_since`]).
    Miss(Stores),
}

/// A shard's count of writes that may have stored a value, as one lookup saw it under the
/// shard's lock. A read-through leader compares it with the count when it has joined: if no
/// such write came in between, the key still has no fresh value and the store need not be
/// read again (`Cache::recheck`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stores(u64);

/// How a write interacts with the invalidation fence.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WriteMode {
    /// A direct write: records the key in the shard's write log, so older in-flight fills of
    /// the key cannot overwrite it.
    Plain,
    /// A fill's publish: stored only if no write of the key (or clear) happened since the
    /// shard's write count was this (`fence.rs`).
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

/// What a shard's write did, or that it needs room made elsewhere.
pub(crate) enum Write<K, V> {
    Done(WriteOutcome),
    /// The cache's budget had too little free and this shard holds nothing else to evict: the
    /// caller evicts `short` units of weight from other shards and writes again. (Only a cache
    /// whose entries all sit in other shards gets here: a small or just-shrunk one.)
    NoRoom {
        key: K,
        stored: Stored<V>,
        short: u64,
    },
}

/// What every shard of a cache gets from the cache.
pub(crate) struct FromCache {
    /// The cache's capacity, shared by every shard (`budget.rs`).
    pub(crate) budget: Budget,
    /// The whole cache's capacity: no entry may weigh more.
    pub(crate) capacity: u64,
    pub(crate) columns: Columns,
    /// The cache's hasher: the table re-hashes stored keys with it.
    pub(crate) hasher: ahash::RandomState,
    pub(crate) tally: Tally,
    /// The cache's miniature simulations (adaptive policy only; `minisim.rs`).
    pub(crate) minis: Option<Arc<MiniSims>>,
}

/// A shard: its table behind a lock, its invalidation fences, counters and admission sketch.
/// Aligned to 128 bytes so one shard's lock word never shares a cache line with its neighbour's.
#[repr(align(128))]
pub(crate) struct Shard<K, V> {
    table: ShardLock<Table<K, V>>,
    /// A hit records its time only if the entry's recorded one is at least this old (>= 1 ms).
    recency_ms: u64,
    /// Plain writes (insert, remove) so far; a fill's fence is its value when the fill started.
    /// Bumped under the write lock (with the key's hash recorded in the table's write log),
    /// read without a lock by `fence`.
    writes: AtomicU64,
    /// Writes that passed their fence (plain or a fill's), so may have stored a value: bumped
    /// under the write lock (with the key's hash recorded in the table's `stored` log, which
    /// lets `retain` leave a key stored since its copy), read by a read-through miss under the
    /// read lock and again by its leader ([`stored_since`](Self::stored_since)). Beside
    /// `writes`: a write dirties one line for both.
    stores: AtomicU64,
    /// Lookups of [`peek_fresh`](Self::peek_fresh) (tests: a read-through leader re-reads
    /// the store only after a write that may have stored).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) peeks: crate::sync::plain::AtomicU64,
    /// Rare events; the frequent ones go to `tally`.
    pub(crate) counters: CachePadded<ShardCounters>,
    /// The cache's per-thread counters (shared with the other shards and `Cache::stats`).
    pub(crate) tally: Tally,
    /// The cache's free capacity: a write that grows the shard takes from it, a removal gives
    /// back.
    budget: Budget,
    /// The cache's eviction listener, if any (`shard/notify.rs`).
    listener: Option<Arc<Listener<K, V>>>,
    /// The adaptive policy's per-thread hit buffers (`adaptive.rs`); `None` for the others.
    hit_buffers: Option<HitBuffers>,
    /// Which copy of the hit paths lookups take: [`PLAIN`], [`SKETCHED`] (the table has a
    /// TinyLFU sketch) or [`ADAPTIVE`] (`hit_buffers` is set).
    hook: u8,
}

/// The hit paths' copies, one per policy kind (a const parameter, so each copy carries only
/// its policy's code): the default policy's, which records nothing beyond the stamp.
const PLAIN: u8 = 0;
/// TinyLFU's: every lookup is recorded in the table's sketch.
const SKETCHED: u8 = 1;
/// The adaptive policy's: a hit updates its entry's flags and count and this thread's hit
/// buffer.
const ADAPTIVE: u8 = 2;

impl<K: Eq + Hash, V: Clone> Shard<K, V> {
    /// A shard expected to hold about `share` of the cache's capacity (it sizes the admission
    /// sketch; the shard itself may hold up to the whole capacity).
    pub(crate) fn new(
        share: u64,
        pool_size: usize,
        seed: u64,
        admission: Admission,
        recency_ms: u64,
        shared: FromCache,
    ) -> Self {
        let FromCache {
            budget,
            capacity,
            columns,
            hasher,
            tally,
            minis,
        } = shared;
        let sketched = crate::admission::sketch_entries(share, columns.weighted);
        let mut table = Table::new(capacity, share, pool_size, seed, columns, hasher);
        let adaptive = admission == Admission::Adaptive;
        if adaptive {
            let minis = minis.unwrap_or_else(|| Arc::new(MiniSims::new(capacity, seed)));
            table.adaptive = Some(Box::new(State::new(share, sketched, pool_size, minis)));
        }
        if admission == Admission::TinyLfu {
            table.sketch = Some(Box::new(FrequencySketch::new(sketched)));
        }
        let hit_buffers = adaptive.then(|| HitBuffers::new(tally.len()));
        Self {
            table: ShardLock::new(table, tally.clone()),
            recency_ms: recency_ms.max(1),
            writes: AtomicU64::new(0),
            stores: AtomicU64::new(0),
            #[cfg(all(test, not(herd_loom)))]
            peeks: crate::sync::plain::AtomicU64::new(0),
            counters: CachePadded::default(),
            tally,
            budget,
            hook: match admission {
                Admission::Always => PLAIN,
                Admission::TinyLfu => SKETCHED,
                Admission::Adaptive => ADAPTIVE,
            },
            hit_buffers,
            listener: None,
        }
    }

    /// Records a hit on `s` in its recency stamp (and, with the adaptive policy, its flags and
    /// this thread's hit buffer). True if the hit filled this thread's hit buffer: the caller
    /// then calls [`drain_full`](Self::drain_full) once it has left the read lock.
    #[inline(always)]
    #[must_use]
    fn touch<const HOOK: u8>(
        &self,
        policy: Option<&State>,
        s: &Slot<K, V>,
        me: Option<&Stripe>,
        hash: u64,
        now: u64,
    ) -> bool {
        if HOOK == ADAPTIVE
            && let (Some(buffers), Some(st)) = (&self.hit_buffers, policy)
        {
            return self.touch_adaptive(buffers, st, s, me, hash, now);
        }
        s.touch(now, self.recency_ms);
        false
    }

    /// Records a lookup in the TinyLFU sketch (the [`SKETCHED`] copy of a hit path; nothing
    /// in the others).
    #[inline(always)]
    fn record_lookup<const HOOK: u8>(t: &Table<K, V>, me: Option<&Stripe>, hash: u64) {
        if HOOK == SKETCHED {
            Self::record_access(t, me, hash);
        }
    }

    /// Drains this thread's full hit buffer into the policy if the shard's write lock is free
    /// at once (as Caffeine drains its read buffer with a `tryLock`): a run of hits longer than
    /// the buffer between this thread's inserts is then recorded, not dropped (a loop's hits
    /// come in runs of a capacity). Once per [`HIT_BUFFER`](crate::adaptive::HIT_BUFFER)
    /// sampled hits of a thread; if the lock is busy the buffer stays full and drops hashes
    /// until the thread's next insert drains it.
    #[cold]
    #[inline(never)]
    fn drain_full(&self, me: Option<&Stripe>, now: u64) {
        let Some(b) = self
            .hit_buffers
            .as_ref()
            .zip(me)
            .and_then(|(b, me)| b.get(me.index))
        else {
            return;
        };
        if let Some(mut t) = self.table.try_write()
            && let Some(st) = t.adaptive.as_deref_mut()
        {
            st.drain(b, now);
        }
    }

    /// The adaptive policy's hit: the entry's own stamp word (its resident count), and this
    /// thread's hit buffer for the shard (a thread without a stripe of its own buffers
    /// nothing: the overflow stripe's buffer would be shared).
    #[inline]
    fn touch_adaptive(
        &self,
        buffers: &HitBuffers,
        st: &State,
        s: &Slot<K, V>,
        me: Option<&Stripe>,
        hash: u64,
        now: u64,
    ) -> bool {
        let raised = s.touch_flagged(now, self.recency_ms, &st.sketch);
        me.and_then(|m| buffers.get(m.index))
            .is_some_and(|b| b.push(raised, st.minis.sampled(hash).then_some(hash)))
    }

    /// Records a lookup in the TinyLFU sketch, if the table has one, under the read lock
    /// (relaxed atomics: `admission.rs`), so that `set_capacity` can re-shape the sketch under
    /// the write lock.
    #[inline]
    fn record_access(t: &Table<K, V>, me: Option<&Stripe>, hash: u64) {
        if let Some(s) = &t.sketch {
            Self::record_in(s, me, hash);
        }
    }

    /// Records a lookup in the admission sketch, with this thread's stripe (`admission.rs`).
    /// Not inlined: it keeps the sketch's code out of the hit paths' bodies (when this looked
    /// the stripe up itself, inlining it cost the default's sketchless get 143 instructions
    /// instead of 138: callgrind, `hitprobe ttl-lru 10000`).
    #[inline(never)]
    fn record_in(sketch: &FrequencySketch, me: Option<&Stripe>, hash: u64) {
        sketch.record(hash, me);
    }

    /// The hit path of `get`: a fresh value or `None`.
    #[inline]
    pub(crate) fn get<Q>(&self, hash: u64, q: &Q, now: u64) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        match self.hook {
            PLAIN => self.get_in::<PLAIN, Q>(hash, q, now),
            SKETCHED => self.get_in::<SKETCHED, Q>(hash, q, now),
            _ => self.get_in::<ADAPTIVE, Q>(hash, q, now),
        }
    }

    /// [`get`](Self::get), monomorphised per policy kind (`HOOK`: [`PLAIN`],
    /// [`SKETCHED`] or [`ADAPTIVE`]), so each policy's hit path carries none of the others'
    /// code (one dispatch on the kind in all).
    #[inline(always)]
    fn get_in<const HOOK: u8, Q>(&self, hash: u64, q: &Q, now: u64) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        let me = t.me();
        Self::record_lookup::<HOOK>(&t, me, hash);
        if let Some(i) = t.find_value(hash, q) {
            let s = t.slot(i);
            // The default's and TinyLFU's hit checks and touches in one (`Slot::hit`); the
            // adaptive policy touches through its own path (its flags share the stamp word).
            let fresh = if HOOK == ADAPTIVE {
                s.fresh(now, t.hit_gate_ms(), || t.idle_of(i))
            } else {
                s.hit(now, t.hit_gate_ms(), || t.idle_of(i), self.recency_ms)
            };
            if fresh {
                let full =
                    HOOK == ADAPTIVE && self.touch::<HOOK>(t.adaptive.as_deref(), s, me, hash, now);
                self.tally.record_as(me, Event::Fresh);
                let value = s.value.clone();
                drop(t);
                if full {
                    self.drain_full(me, now);
                }
                return Some(value);
            }
        }
        drop(t);
        self.tally.record_as(me, Event::Miss);
        None
    }

    /// A fresh or stale value with its expiry (does not claim a refresh).
    pub(crate) fn lookup<Q>(&self, hash: u64, q: &Q, now: u64, swr_ms: u64) -> Option<Snapshot<V>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        match self.hook {
            PLAIN => self.lookup_in::<PLAIN, Q>(hash, q, now, swr_ms),
            SKETCHED => self.lookup_in::<SKETCHED, Q>(hash, q, now, swr_ms),
            _ => self.lookup_in::<ADAPTIVE, Q>(hash, q, now, swr_ms),
        }
    }

    /// [`lookup`](Self::lookup), monomorphised per policy kind (`HOOK`: [`PLAIN`],
    /// [`SKETCHED`] or [`ADAPTIVE`]), so each policy's hit path carries none of the others'
    /// code (one dispatch on the kind in all).
    #[inline(always)]
    fn lookup_in<const HOOK: u8, Q>(
        &self,
        hash: u64,
        q: &Q,
        now: u64,
        swr_ms: u64,
    ) -> Option<Snapshot<V>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        let me = t.me();
        Self::record_lookup::<HOOK>(&t, me, hash);
        if let Some(i) = t.find_value(hash, q) {
            let s = t.slot(i);
            let idle_ms = t.idle_of(i);
            if now < s.usable_until(swr_ms) && s.idle_ok(now, idle_ms) {
                let expires_at = s.deadline(idle_ms);
                let full = self.touch::<HOOK>(t.adaptive.as_deref(), s, me, hash, now);
                let stale = now >= s.expires_at;
                if stale {
                    self.tally.record_as(me, Event::Stale);
                } else {
                    self.tally.record_as(me, Event::Fresh);
                }
                let value = s.value.clone();
                drop(t);
                if full {
                    self.drain_full(me, now);
                }
                return Some(Snapshot {
                    value,
                    expires_at,
                    stale,
                });
            }
        }
        drop(t);
        self.tally.record_as(me, Event::Miss);
        None
    }

    /// A fresh value, without counting or touching (the leader's re-check before it fills).
    pub(crate) fn peek_fresh<Q>(&self, hash: u64, q: &Q, now: u64) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        #[cfg(all(test, not(herd_loom)))]
        self.peeks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = self.table.read();
        let i = t.find_value(hash, q)?;
        let s = t.slot(i);
        (now < s.expires_at && s.idle_ok(now, t.idle_of(i))).then(|| s.value.clone())
    }

    /// Whether a fresh value is stored (no recency update, no counters).
    pub(crate) fn contains<Q>(&self, hash: u64, q: &Q, now: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        t.find_value(hash, q)
            .is_some_and(|i| now < t.slot(i).expires_at && t.slot(i).idle_ok(now, t.idle_of(i)))
    }

    /// The read-through lookup: fresh, stale (claiming the refresh if it is open), cached error, or miss.
    pub(crate) fn probe<Q>(&self, hash: u64, q: &Q, now: u64, swr_ms: u64) -> Probe<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        match self.hook {
            PLAIN => self.probe_in::<PLAIN, Q>(hash, q, now, swr_ms),
            SKETCHED => self.probe_in::<SKETCHED, Q>(hash, q, now, swr_ms),
            _ => self.probe_in::<ADAPTIVE, Q>(hash, q, now, swr_ms),
        }
    }

    /// [`probe`](Self::probe), monomorphised per policy kind (`HOOK`: [`PLAIN`],
    /// [`SKETCHED`] or [`ADAPTIVE`]), so each policy's hit path carries none of the others'
    /// code (one dispatch on the kind in all).
    #[inline(always)]
    fn probe_in<const HOOK: u8, Q>(&self, hash: u64, q: &Q, now: u64, swr_ms: u64) -> Probe<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        let me = t.me();
        Self::record_lookup::<HOOK>(&t, me, hash);
        match t.find(hash, q) {
            Some(At::Value(i)) => {
                let s = t.slot(i);
                // An entry idle past its time-to-idle is gone, not stale.
                let idle_ok = s.idle_ok(now, t.idle_of(i));
                if now < s.expires_at && idle_ok {
                    let full = self.touch::<HOOK>(t.adaptive.as_deref(), s, me, hash, now);
                    self.tally.record_as(me, Event::Fresh);
                    let value = s.value.clone();
                    drop(t);
                    if full {
                        self.drain_full(me, now);
                    }
                    return Probe::Fresh(value);
                }
                if now < s.usable_until(swr_ms) && idle_ok {
                    let full = self.touch::<HOOK>(t.adaptive.as_deref(), s, me, hash, now);
                    self.tally.record_as(me, Event::Stale);
                    let probe = Probe::Stale {
                        value: s.value.clone(),
                        refresh: t.gate(i).is_some_and(|g| claim_gate(g, now)),
                        until: s.usable_until(swr_ms),
                    };
                    drop(t);
                    if full {
                        self.drain_full(me, now);
                    }
                    return probe;
                }
            }
            Some(At::Error(i)) => {
                let e = t.error(i);
                if now < e.expires_at {
                    self.tally.record_as(me, Event::NegativeHit);
                    return Probe::Negative(ErasedError::clone(&e.error));
                }
            }
            None => {}
        }
        // Under the read lock: no write is half done, so the count matches what was read.
        let stores = Stores(self.stores.load(Ordering::Relaxed));
        drop(t);
        self.tally.record_as(me, Event::Miss);
        Probe::Miss(stores)
    }

    /// Whether a write that may have stored a value came to the shard since a lookup saw
    /// `seen`. False means no value was stored since, so a key that had no fresh value then
    /// has none now: a leader that joined after such a lookup may skip re-reading the store.
    /// (Exact for writes ordered before the caller: a fill that stored and then ended its
    /// flight bumped the count before the caller joined, which the group's lock orders.)
    #[inline]
    pub(crate) fn stored_since(&self, seen: Stores) -> bool {
        self.stores.load(Ordering::Acquire) != seen.0
    }

    /// Claims the refresh of a stale entry: true for exactly one caller until the entry is replaced
    /// or the refresh is released.
    pub(crate) fn claim_refresh<Q>(&self, hash: u64, q: &Q, now: u64, swr_ms: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        t.find_value(hash, q).is_some_and(|i| {
            let s = t.slot(i);
            now >= s.expires_at
                && now < s.usable_until(swr_ms)
                && s.idle_ok(now, t.idle_of(i))
                && t.gate(i).is_some_and(|g| claim_gate(g, now))
        })
    }

    /// Releases a claimed refresh that could not run: the next stale read may claim it at `retry_at`.
    pub(crate) fn release_refresh<Q>(&self, hash: u64, q: &Q, retry_at: u64)
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        if let Some(gate) = t.find_value(hash, q).and_then(|i| t.gate(i)) {
            let _ = gate.compare_exchange(GATE_BUSY, retry_at, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// [`release_refresh`](Self::release_refresh) for a fill that started at `fence` and store
    /// count `stores`: nothing if the key was written or stored since (the entry there now,
    /// and any claim on its refresh, belong to that write, not to this fill).
    pub(crate) fn release_refresh_of_fill<Q>(
        &self,
        hash: u64,
        q: &Q,
        retry_at: u64,
        fence: u64,
        stores: u64,
    ) where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        if t.writes
            .fences(fence, self.writes.load(Ordering::Acquire), hash)
            || self.stored_key_since(&t, stores, hash)
        {
            return;
        }
        if let Some(gate) = t.find_value(hash, q).and_then(|i| t.gate(i)) {
            let _ = gate.compare_exchange(GATE_BUSY, retry_at, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// The fence for a fill of a key of this shard: read it before the fill starts. (The same
    /// for every key: the publish checks which keys were written since, `fence.rs`.)
    #[inline]
    pub(crate) fn fence(&self, _hash: u64) -> u64 {
        self.writes.load(Ordering::Acquire)
    }

    /// The shard's store count (plain writes and fills that passed their fences), for a claim
    /// or a fill to tell later whether its key's entry was replaced since
    /// ([`stored_key_since`](Self::stored_key_since)).
    #[inline]
    pub(crate) fn stores(&self) -> u64 {
        self.stores.load(Ordering::Acquire)
    }

    /// Whether a write of `hash`'s key passed its fence (plain, or fenced: a fill, an
    /// `insert_fenced`) since the store count was `since`: the entry there now, if any, is
    /// not the one seen then. False when the log no longer covers `since` (unknown: the
    /// callers then act as before this check). The plain-write fence alone missed fenced
    /// writes, whose entries carry their own refresh gates.
    fn stored_key_since(&self, t: &Table<K, V>, since: u64, hash: u64) -> bool {
        t.stored
            .wrote(since, self.stores.load(Ordering::Acquire), hash)
    }

    /// Records a plain write of `hash`'s key (under the write lock): fills of that key that
    /// started earlier will not publish. Plain stores: only the lock holder writes these.
    fn bump_fence(&self, t: &mut WriteGuard<'_, Table<K, V>>, hash: u64) {
        let seq = self.writes.load(Ordering::Relaxed);
        t.writes.record(seq, hash);
        self.writes.store(seq + 1, Ordering::Release);
    }

    fn fence_holds(&self, t: &mut WriteGuard<'_, Table<K, V>>, hash: u64, mode: WriteMode) -> bool {
        match mode {
            WriteMode::Plain => {
                self.bump_fence(t, hash);
                true
            }
            WriteMode::Fenced(f) => {
                let now = self.writes.load(Ordering::Relaxed);
                !t.writes.fences(f, now, hash)
            }
        }
    }

    /// Writes a value (or cached error, which weighs 1) for `key`. The weight it adds comes from
    /// the cache's free budget as far as that goes, the rest from victims evicted in this shard,
    /// so the cache's capacity holds when the lock is released; if this shard has nothing left
    /// to evict, nothing is written and the caller makes room elsewhere ([`Write::NoRoom`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write(
        &self,
        hash: u64,
        key: K,
        stored: Stored<V>,
        expires_at: u64,
        idle_ms: Option<u64>,
        weight: u64,
        now: u64,
        cfg: &ShardConfig,
        mode: WriteMode,
    ) -> Result<Write<K, V>, InsertError> {
        let (weight, usable_until) = match stored {
            // An idle time of zero: idle at birth, so never served (not even stale).
            Stored::Value(_) if idle_ms == Some(0) => (weight.max(1), now),
            Stored::Value(_) => (weight.max(1), expires_at.saturating_add(cfg.swr_ms)),
            Stored::Error(_) => (1, expires_at),
        };
        let mut t = self.table.write();
        if !self.fence_holds(&mut t, hash, mode) {
            drop(t);
            return Ok(Write::Done(WriteOutcome::Fenced));
        }
        // Counted whether or not it stores (too heavy, expired, declined): a read-through
        // leader then re-reads the store once more than it needed to, never once less.
        let stores = self.stores.load(Ordering::Relaxed);
        t.stored.record(stores, hash);
        self.stores.store(stores + 1, Ordering::Release);
        // The budget holds at most `MAX_BUDGET` (a capacity above it is that much): a heavier
        // entry could never get its room, and its write would retry evicting forever.
        let limit = t.capacity.min(MAX_BUDGET);
        if weight > limit {
            let old = self.remove_key_locked(&mut t, hash, &key);
            drop(t);
            self.report(old, RemovalCause::Replaced, now);
            self.counters.rejections.incr();
            return Err(InsertError::TooHeavy { weight, limit });
        }
        if now >= usable_until {
            let old = self.remove_key_locked(&mut t, hash, &key);
            drop(t);
            self.report(old, RemovalCause::Replaced, now);
            return Ok(Write::Done(WriteOutcome::Expired));
        }
        let (old, stored) = match (t.find(hash, &key), stored) {
            (Some(At::Value(i)), Stored::Value(value)) => {
                let old_weight = t.weight_of(At::Value(i));
                let need = weight.saturating_sub(old_weight);
                let mut credit = self.budget.take(need);
                let mut keep = Some(At::Value(i));
                let mut evicted = Evicted::new();
                while credit < need {
                    let before = t.weight;
                    let Some(victim) = t.evict_one(now, cfg, &mut keep) else {
                        break;
                    };
                    credit += before - t.weight;
                    self.count_removal(&victim, now);
                    evicted.push(victim);
                }
                if credit < need {
                    self.budget.give(credit);
                    drop(t);
                    self.report_evicted(evicted, now);
                    return Ok(Write::NoRoom {
                        key,
                        stored: Stored::Value(value),
                        short: need - credit,
                    });
                }
                self.budget.give(credit + old_weight - weight);
                let Some(At::Value(i)) = keep else {
                    unreachable!("the replaced value is kept, and it is a value");
                };
                let old = t.update_value(i, Slot::new(key, value, expires_at, now), weight);
                t.set_idle(i, idle_ms);
                drop(t);
                self.report_evicted(evicted, now);
                self.report(Some(Removed::Value(old)), RemovalCause::Replaced, now);
                self.tally.record(Event::Insert);
                return Ok(Write::Done(WriteOutcome::Stored));
            }
            (Some(At::Error(i)), Stored::Error(error)) => {
                let old = t.replace_error(i, ErrorSlot::new(key, error, hash, expires_at, now));
                drop(t);
                drop(old);
                self.tally.record(Event::Insert);
                return Ok(Write::Done(WriteOutcome::Stored));
            }
            // A value replacing a cached error or the other way round: the old entry leaves
            // its array once room is made (so a write that finds no room keeps it), and the
            // new one is inserted like a new key, but never declined: a newer write of a key
            // the cache holds (a fill's value over its cached error) must not leave the old
            // answer served.
            (existing, stored) => (existing, stored),
        };
        // Room for the new entry, counting the old one (if any) as already gone. A full cache
        // has nothing free: `take` is then a load, and the victims pay.
        let old_weight = old.map_or(0, |at| t.weight_of(at));
        let old_len = usize::from(old.is_some());
        let need = weight.saturating_sub(old_weight);
        let mut credit = self.budget.take(need);
        let mut keep = old;
        let mut evicted = Evicted::new();
        // Adaptive policy: the miss drains this thread's hits into the sketch and moves the
        // window's target on a ghost; the newcomer enters the window while it is below target.
        let mut window = false;
        let mut count = 0;
        if t.adaptive.is_some() && credit < need {
            // An eviction is coming: its reads are asked for before the miss's own work,
            // which then overlaps them.
            t.prefetch_adaptive(cfg.samples);
        }
        if let Some(st) = t.adaptive.as_deref_mut() {
            let buffer = self
                .hit_buffers
                .as_ref()
                .zip(self.tally.mine())
                .and_then(|(b, me)| b.get(me.index));
            count = st.on_miss(hash, buffer, now);
            window = (st.window_len as f64) < st.target;
        }
        while credit < need || t.len() - old_len >= MAX_ENTRIES {
            let picked = if t.adaptive.is_some() {
                // Only a new key duels (`count`): a kind change takes main's victim.
                let newcomer = (evicted.is_empty() && old.is_none()).then_some(count);
                match t.adaptive_pick(now, cfg, keep, newcomer) {
                    Some(Pick::Evict { at, window: w }) => {
                        window = w;
                        Some(at)
                    }
                    Some(Pick::Decline) => {
                        self.budget.give(credit);
                        drop(t);
                        drop((key, stored));
                        self.counters.rejections.incr();
                        return Ok(Write::Done(WriteOutcome::Declined));
                    }
                    None => None,
                }
            } else {
                t.choose_victim(now, cfg, keep)
            };
            let Some(v) = picked else {
                if credit < need {
                    self.budget.give(credit);
                    drop(t);
                    self.report_evicted(evicted, now);
                    return Ok(Write::NoRoom {
                        key,
                        stored,
                        short: need - credit,
                    });
                }
                break;
            };
            if evicted.is_empty()
                && old.is_none()
                && let Some(sketch) = t.sketch.as_deref()
                && now < t.expires_at(v)
                && !t.idle_expired(v, now)
                && !sketch.admit(hash, t.hash_of(v))
            {
                self.budget.give(credit);
                drop(t);
                drop((key, stored));
                self.counters.rejections.incr();
                return Ok(Write::Done(WriteOutcome::Declined));
            }
            let victim_weight = t.weight_of(v);
            // The last victim a new key's value needs: the value takes the victim's place.
            if let (None, At::Value(i), Stored::Value(_)) = (keep, v, &stored)
                && credit + victim_weight >= need
                && t.len() - 1 < MAX_ENTRIES
                && let Stored::Value(value) = stored
            {
                let slot = Slot::new(key, value, expires_at, now);
                let victim = Removed::Value(t.replace_victim(i, slot, hash, weight));
                t.set_idle(i, idle_ms);
                t.place(i, window, count);
                self.budget.give(credit + victim_weight - weight);
                // The shard's next insert at capacity reads these lines first: ask for them
                // now, while they can arrive before it (`Table::prefetch_eviction`).
                if t.adaptive.is_none() {
                    t.prefetch_eviction(cfg.samples);
                }
                drop(t);
                self.count_removal(&victim, now);
                self.report_evicted(evicted, now);
                self.report(Some(victim), RemovalCause::Size, now);
                self.tally.record(Event::Insert);
                return Ok(Write::Done(WriteOutcome::Stored));
            }
            let victim = t.remove_keeping(v, &mut keep);
            credit += victim_weight;
            self.count_removal(&victim, now);
            evicted.push(victim);
        }
        self.budget.give(credit + old_weight - weight);
        let old = keep.map(|at| t.remove_at(at));
        match stored {
            Stored::Value(value) => {
                t.push_value(Slot::new(key, value, expires_at, now), hash, weight);
                let last = t.len_values() - 1;
                t.set_idle(last, idle_ms);
                t.place(last, window, count);
            }
            Stored::Error(error) => t.push_error(ErrorSlot::new(key, error, hash, expires_at, now)),
        }
        drop(t);
        self.report_evicted(evicted, now);
        self.report(old, RemovalCause::Replaced, now);
        self.tally.record(Event::Insert);
        Ok(Write::Done(WriteOutcome::Stored))
    }

    /// Removes `q`'s entry under the held lock and gives its weight back to the budget.
    fn remove_key_locked<Q>(
        &self,
        t: &mut WriteGuard<'_, Table<K, V>>,
        hash: u64,
        q: &Q,
    ) -> Option<Removed<K, V>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let before = t.weight;
        let removed = t.remove_key(hash, q);
        self.budget.give(before - t.weight);
        removed
    }

    /// Records a failed fill for `key`: a value still inside its stale window is kept (stale-if-error)
    /// and, if it is the one the fill started from (no store of the key since the store count
    /// `started_at_store`), its refresh reopens at `retry_at`; otherwise the error is cached
    /// until `expires_at` (`None`: negative caching off, nothing stored).
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
        started_at_store: u64,
    ) -> Result<Write<K, V>, InsertError> {
        {
            let t = self.table.read();
            // A write of the key (or a clear) since this fill started: the value found now is
            // not the one the fill was refreshing, and the error touches nothing. (Checked
            // first: it used to reopen that newer value's refresh gate at `retry_at`, taking
            // the claim of a refresh that had begun, and delaying the next one by the negative
            // ttl.) The write count moves only under the write lock.
            if let WriteMode::Fenced(f) = mode
                && t.writes
                    .fences(f, self.writes.load(Ordering::Acquire), hash)
            {
                return Ok(Write::Done(WriteOutcome::Fenced));
            }
            // A value still usable (fresh or stale, not idle past its time-to-idle) stays:
            // stale-if-error. One gone idle is gone, and the error replaces it.
            if let Some(i) = t.find_value(hash, &key)
                && now < t.slot(i).usable_until(cfg.swr_ms)
                && t.slot(i).idle_ok(now, t.idle_of(i))
            {
                // Stored since this fill started (an `insert_fenced`, another fill): that entry's
                // gate, and any refresh claimed on it, are not this fill's to move.
                if let Some(gate) = t.gate(i)
                    && !self.stored_key_since(&t, started_at_store, hash)
                {
                    gate.store(retry_at, Ordering::Release);
                }
                return Ok(Write::Done(WriteOutcome::Stored));
            }
        }
        match expires_at {
            Some(at) => self.write(hash, key, Stored::Error(error), at, None, 1, now, cfg, mode),
            None => Ok(Write::Done(WriteOutcome::Expired)),
        }
    }

    fn count_removal(&self, victim: &Removed<K, V>, now: u64) {
        if now >= victim.expires_at() {
            self.tally.record(Event::Expiration);
        } else {
            self.tally.record(Event::Eviction);
        }
    }

    /// Removes `q`'s entry and fences fills of its key that started earlier (used by the unit
    /// tests, which the loom build leaves out).
    #[cfg_attr(any(not(test), herd_loom), allow(dead_code))]
    pub(crate) fn remove<Q>(&self, hash: u64, q: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.remove_as(hash, q, RemovalCause::Removed, 0)
    }

    /// [`remove`](Self::remove), telling the eviction listener `cause` (with a copy of the
    /// value, which is also returned).
    pub(crate) fn remove_as<Q>(&self, hash: u64, q: &Q, cause: RemovalCause, now: u64) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.write();
        self.remove_with(t, hash, q, cause, now)
    }

    /// The rest of a removal, under the write lock `t` (released before the listener runs):
    /// fences the key's earlier fills, removes its entry and reports it.
    fn remove_with<Q>(
        &self,
        mut t: WriteGuard<'_, Table<K, V>>,
        hash: u64,
        q: &Q,
        cause: RemovalCause,
        now: u64,
    ) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.bump_fence(&mut t, hash);
        let removed = self.remove_key_locked(&mut t, hash, q);
        drop(t);
        let value = match &removed {
            Some(Removed::Value(slot)) if self.listener.is_some() => Some(slot.value.clone()),
            _ => return removed?.into_value(),
        };
        self.report(removed, cause, now);
        value
    }

    /// [`remove_as`](Self::remove_as) (cause `Removed`), unless the key was written since
    /// `fence` as far as the write log knows (an overflowed log or a clear since: removed).
    pub(crate) fn remove_unless_written_since<Q>(
        &self,
        hash: u64,
        q: &Q,
        fence: u64,
        now: u64,
    ) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.write();
        let seq = self.writes.load(Ordering::Relaxed);
        if t.writes.wrote(fence, seq, hash) {
            return None;
        }
        self.remove_with(t, hash, q, RemovalCause::Removed, now)
    }

    /// Removes everything and fences every fill that started earlier. Returns the number removed.
    pub(crate) fn clear(&self) -> usize {
        let mut t = self.table.write();
        // Past the log's reach: every earlier fence is fenced.
        let seq = self.writes.load(Ordering::Relaxed);
        self.writes
            .store(seq + t.writes.len() + 1, Ordering::Release);
        let weight = t.weight;
        let (slots, errors) = t.take_all();
        self.budget.give(weight);
        drop(t);
        let n = slots.len() + errors.len();
        self.report_all(slots, RemovalCause::Cleared, 0);
        n
    }

    /// Removes every entry past its TTL and stale window. O(entries in this shard).
    pub(crate) fn purge_expired(&self, now: u64, swr_ms: u64) -> usize {
        let mut t = self.table.write();
        let before = t.weight;
        let removed = t.remove_dead(now, swr_ms);
        self.budget.give(before - t.weight);
        drop(t);
        let idle = self.purge_idle(now);
        let n = removed.len() + idle.len();
        self.tally.add(Event::Expiration, n as u64);
        let values = removed.into_iter().filter_map(|r| match r {
            Removed::Value(slot) => Some(slot),
            Removed::Error(_) => None,
        });
        self.report_all(values.chain(idle), RemovalCause::Expired, now);
        n
    }

    /// Sets the cache's capacity (`capacity`, the most one entry may weigh) and this shard's
    /// expected share of it (`share`: it sizes the adaptive policy's state and the TinyLFU
    /// sketch; a sketch re-shaped to another size starts empty, as after a build).
    pub(crate) fn set_limit(&self, capacity: u64, share: u64) {
        let mut t = self.table.write();
        t.capacity = capacity;
        let sketched = crate::admission::sketch_entries(share, t.weighted());
        if let Some(st) = t.adaptive.as_deref_mut() {
            st.resize(share, sketched);
        }
        if let Some(sketch) = t.sketch.as_deref_mut() {
            let resized = FrequencySketch::new(sketched);
            if resized.words() != sketch.words() {
                *sketch = resized;
            }
        }
    }

    /// Gives back the room of entries a shrink removed (`Table::compact`), keeping room for
    /// `share`.
    pub(crate) fn compact(&self, share: u64) {
        self.table
            .write()
            .compact(usize::try_from(share).unwrap_or(usize::MAX));
    }

    /// Words of this shard's frequency sketch, TinyLFU's or the adaptive policy's (tests).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn sketch_words_for_test(&self) -> usize {
        let t = self.table.read();
        let adaptive = t.adaptive.as_ref().map(|st| st.sketch.words());
        t.sketch
            .as_ref()
            .map(|sk| sk.words())
            .or(adaptive)
            .unwrap_or(0)
    }

    /// The room of this shard's slot array, and its entries (tests).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn slots_for_test(&self) -> (usize, usize) {
        let t = self.table.read();
        (t.slot_capacity(), t.len())
    }

    /// The sizes of this shard's eviction pools: main's and, with the adaptive policy, the
    /// window's (tests).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn pool_sizes_for_test(&self) -> (usize, Option<usize>) {
        let t = self.table.read();
        (
            t.pool_capacity_for_test(),
            t.adaptive
                .as_ref()
                .map(|st| st.window_pool.capacity_for_test()),
        )
    }

    /// The adaptive policy's miniature simulations (shared by every shard of the cache).
    pub(crate) fn simulations(&self) -> Option<Arc<MiniSims>> {
        self.table
            .read()
            .adaptive
            .as_ref()
            .map(|st| st.minis.clone())
    }

    /// Evicts entries worth up to `weight` units (entries without a weigher) by the eviction
    /// policy, stopping early once the budget is out of debt (a shrink in progress); gives
    /// their weight back. Returns how many it evicted. (It counted entries against a share of
    /// weight: with a weigher a shrink emptied the first shards whole, their recent entries
    /// with the rest, and kept the last ones' oldest.)
    pub(crate) fn evict_for_budget(&self, weight: u64, now: u64, cfg: &ShardConfig) -> usize {
        let mut t = self.table.write();
        let mut evicted = Evicted::new();
        let mut freed = 0;
        while freed < weight {
            let before = t.weight;
            let Some(victim) = t.evict_one(now, cfg, &mut None) else {
                break;
            };
            freed += before - t.weight;
            self.budget.give(before - t.weight);
            self.count_removal(&victim, now);
            evicted.push(victim);
            if self.budget.free() >= 0 {
                break;
            }
        }
        drop(t);
        let n = evicted.len();
        self.report_evicted(evicted, now);
        n
    }

    /// Evicts entries worth at least `short` units of weight (fewer if the shard runs out),
    /// giving them to the budget for a write in another shard. Returns the weight freed.
    pub(crate) fn evict_weight(&self, short: u64, now: u64, cfg: &ShardConfig) -> u64 {
        let mut t = self.table.write();
        let mut evicted = Evicted::new();
        let mut freed = 0;
        while freed < short {
            let before = t.weight;
            let Some(victim) = t.evict_one(now, cfg, &mut None) else {
                break;
            };
            freed += before - t.weight;
            self.count_removal(&victim, now);
            evicted.push(victim);
        }
        self.budget.give(freed);
        drop(t);
        self.report_evicted(evicted, now);
        freed
    }

    /// Evicts `ceil(len * fraction)` entries chosen by the eviction policy.
    pub(crate) fn shrink(&self, fraction: f64, now: u64, cfg: &ShardConfig) -> usize {
        let mut t = self.table.write();
        let target = ((t.len() as f64) * fraction).ceil() as usize;
        let mut evicted = Evicted::new();
        let before = t.weight;
        while evicted.len() < target {
            let Some(victim) = t.evict_one(now, cfg, &mut None) else {
                break;
            };
            self.count_removal(&victim, now);
            evicted.push(victim);
        }
        self.budget.give(before - t.weight);
        drop(t);
        let n = evicted.len();
        self.report_evicted(evicted, now);
        n
    }

    pub(crate) fn len(&self) -> usize {
        self.table.read().len()
    }

    pub(crate) fn weight(&self) -> u64 {
        self.table.read().weight
    }

    /// Entry count and weight read together.
    pub(crate) fn size(&self) -> (usize, u64) {
        let t = self.table.read();
        (t.len(), t.weight)
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

    /// Writes `k -> k`.
    fn write_value(
        s: &Shard<u64, u64>,
        k: u64,
        expires_at: u64,
        weight: u64,
        now: u64,
        c: &ShardConfig,
        mode: WriteMode,
    ) -> WriteOutcome {
        done(s.write(
            h(k),
            k,
            Stored::Value(k),
            expires_at,
            None,
            weight,
            now,
            c,
            mode,
        ))
    }

    /// A single shard owns its whole budget, so it never needs room made elsewhere.
    fn done(w: Result<Write<u64, u64>, InsertError>) -> WriteOutcome {
        match w.unwrap() {
            Write::Done(out) => out,
            Write::NoRoom { .. } => panic!("a lone shard always has room to make"),
        }
    }

    fn put(s: &Shard<u64, u64>, k: u64, now: u64) -> WriteOutcome {
        write_value(s, k, NEVER, 1, now, &cfg(), WriteMode::Plain)
    }

    /// The hasher the test shards are built with: `h(k)` must be what the table itself computes
    /// for `k` (it re-hashes keys for removals and swaps).
    fn hasher() -> ahash::RandomState {
        ahash::RandomState::with_seeds(1, 2, 3, 4)
    }

    fn from_cache(capacity: u64, columns: Columns) -> FromCache {
        FromCache {
            budget: Budget::new(capacity),
            capacity,
            columns,
            hasher: hasher(),
            tally: Tally::new(),
            minis: None,
        }
    }

    fn h(k: u64) -> u64 {
        hasher().hash_one(k)
    }

    /// A sampled-LRU shard of capacity `capacity` with every column, a pool of `pool` and
    /// eviction seed `seed` (a recency resolution of 1 ms).
    fn plain_shard(capacity: u64, pool: usize, seed: u64) -> Shard<u64, u64> {
        Shard::new(
            capacity,
            pool,
            seed,
            Admission::Always,
            1,
            from_cache(capacity, Columns::ALL),
        )
    }

    #[test]
    fn a_u64_slot_keeps_only_what_a_hit_reads() {
        assert_eq!(std::mem::size_of::<Slot<u64, u64>>(), 32);
    }

    #[test]
    fn slot_array_never_grows_past_the_capacity() {
        let s = plain_shard(1000, 16, 1);
        for k in 0..5000 {
            put(&s, k, 0);
        }
        assert_eq!(s.len(), 1000);
        assert_eq!(s.table.read().slot_capacity(), 1000);
    }

    #[test]
    fn swap_remove_keeps_index_consistent() {
        let s = plain_shard(100, 16, 1);
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

    /// A shard of capacity 10 holding keys 0..10 (key `k` at place `k`), all stored at t=0;
    /// key `dead` expires at t=5, the others never. The config samples 10: a window that covers
    /// every entry, whatever its random start.
    fn full_with_one_dead_entry(dead: u64) -> (Shard<u64, u64>, ShardConfig) {
        let s = plain_shard(10, 16, 3);
        let c = ShardConfig {
            samples: 10,
            ..cfg()
        };
        for k in 0..10 {
            let exp = if k == dead { 5 } else { NEVER };
            write_value(&s, k, exp, 1, 0, &c, WriteMode::Plain);
        }
        (s, c)
    }

    #[test]
    fn at_capacity_a_new_value_takes_the_victims_place() {
        let (s, c) = full_with_one_dead_entry(2);
        assert_eq!(s.table.read().find(h(2), &2), Some(At::Value(2)));
        // Key 2 (place 2) is the only dead entry, so it is the victim; the new key moves into
        // its place rather than the last entry being swapped there and the new one pushed.
        write_value(&s, 99, NEVER, 1, 10, &c, WriteMode::Plain);
        let t = s.table.read();
        assert_eq!(t.find(h(99), &99), Some(At::Value(2)));
        assert_eq!(t.find(h(9), &9), Some(At::Value(9)));
        assert_eq!(t.find(h(2), &2), None);
        drop(t);
        for k in (0..10).filter(|&k| k != 2).chain([99]) {
            assert_eq!(s.get(h(k), &k, 10), Some(k), "key {k}");
        }
        assert_eq!(s.len(), 10);
    }

    #[test]
    fn a_table_without_weights_or_gates_counts_entries_and_never_claims_a_refresh() {
        let bare = Columns {
            weighted: false,
            gated: false,
        };
        let s: Shard<u64, u64> = Shard::new(50, 16, 5, Admission::Always, 1, from_cache(50, bare));
        for k in 0..120 {
            put(&s, k, k);
        }
        for k in (0..120).step_by(7) {
            s.remove(h(k), &k);
        }
        put(&s, 500, 200);
        put(&s, 500, 201); // replaces in place
        assert_eq!(s.size(), (s.len(), s.len() as u64));
        assert!(s.len() <= 50);
        let t = s.table.read();
        assert!((0..t.len()).all(|i| t.gate(i).is_none()));
        drop(t);
        assert!(!s.claim_refresh(h(500), &500, 10_000, 0));
        for k in (0..120).chain([500]) {
            let stored = s.table.read().find(h(k), &k);
            if let Some(At::Value(i)) = stored {
                assert_eq!(s.table.read().slot(i).value, k);
            }
        }
    }

    #[test]
    fn pooled_places_past_the_end_or_refilled_are_handled() {
        // Fill the pool, shrink the arrays under it with removes (pooled places now past the end
        // or holding moved entries), then keep evicting: every key that is still there must be
        // found, and the capacity must hold.
        let s = plain_shard(200, 16, 5);
        for k in 0..400 {
            put(&s, k, k);
        }
        let live: Vec<u64> = (0..400).filter(|k| s.contains(h(*k), k, 0)).collect();
        for k in live.iter().take(150) {
            assert!(s.remove(h(*k), k).is_some());
        }
        for k in 1000..1400 {
            put(&s, k, 500 + k);
        }
        assert_eq!(s.len(), 200);
        let t = s.table.read();
        let found = (0..400)
            .chain(1000..1400)
            .filter(|k| t.find(h(*k), k).is_some())
            .count();
        assert_eq!(found, 200);
    }

    #[test]
    fn eviction_prefers_the_least_recently_used_with_a_pool() {
        evicts_older_entries_more(16);
    }

    #[test]
    fn eviction_prefers_the_least_recently_used_without_a_pool() {
        evicts_older_entries_more(0);
    }

    fn evicts_older_entries_more(pool: usize) {
        // 100 entries touched at times 1..=100; then insert 50 more. With sampling (and the pool)
        // the survivors should be skewed to recent ones.
        let s: Shard<u64, u64> = Shard::new(
            100,
            pool,
            7,
            Admission::Always,
            1,
            from_cache(100, Columns::ALL),
        );
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

    /// Capacity 2 holds keys 1 (stored at t=0) and 2 (t=5); key 1 is read at t=50; key 3
    /// then evicts one of them. Returns whether key 1 survived.
    fn read_then_evict(recency_ms: u64) -> bool {
        let s: Shard<u64, u64> = Shard::new(
            2,
            0,
            3,
            Admission::Always,
            recency_ms,
            from_cache(2, Columns::ALL),
        );
        let c = ShardConfig {
            samples: 16,
            swr_ms: 0,
        };
        for (k, t) in [(1, 0), (2, 5)] {
            write_value(&s, k, NEVER, 1, t, &c, WriteMode::Plain);
        }
        assert_eq!(s.get(h(1), &1, 50), Some(1));
        write_value(&s, 3, NEVER, 1, 60, &c, WriteMode::Plain);
        s.contains(h(1), &1, 60)
    }

    #[test]
    fn a_read_is_recorded_once_the_stamp_is_a_resolution_old() {
        assert!(read_then_evict(1), "read 50 ms after its store: recorded");
        assert!(read_then_evict(50), "exactly one resolution old: recorded");
        assert!(
            !read_then_evict(100),
            "within the resolution: not recorded, so key 1 is still the oldest"
        );
    }

    fn put_error(s: &Shard<u64, u64>, k: u64, expires_at: u64) -> WriteOutcome {
        let error: ErasedError = Arc::new(format!("error {k}"));
        done(s.write(
            h(k),
            k,
            Stored::Error(error),
            expires_at,
            None,
            1,
            0,
            &cfg(),
            WriteMode::Plain,
        ))
    }

    fn probe_kind(s: &Shard<u64, u64>, k: u64, now: u64) -> &'static str {
        match s.probe(h(k), &k, now, 0) {
            Probe::Fresh(v) => {
                assert_eq!(v, k);
                "value"
            }
            Probe::Negative(e) => {
                assert_eq!(e.downcast_ref::<String>(), Some(&format!("error {k}")));
                "error"
            }
            Probe::Stale { .. } => "stale",
            Probe::Miss(_) => "miss",
        }
    }

    #[test]
    fn values_and_cached_errors_replace_each_other_and_survive_swaps() {
        let s = plain_shard(100, 16, 5);
        for k in 0..40 {
            if k % 2 == 0 {
                put(&s, k, 0);
            } else {
                put_error(&s, k, NEVER);
            }
        }
        // Swap kinds for every third key, remove every fifth: both arrays swap-remove.
        for k in (0..40).step_by(3) {
            if k % 2 == 0 {
                put_error(&s, k, NEVER);
            } else {
                put(&s, k, 0);
            }
        }
        for k in (0..40).step_by(5) {
            s.remove(h(k), &k);
        }
        for k in 0..40 {
            let value = (k % 2 == 0) != (k % 3 == 0);
            let expect = if k % 5 == 0 {
                "miss"
            } else if value {
                "value"
            } else {
                "error"
            };
            assert_eq!(probe_kind(&s, k, 1), expect, "key {k}");
            // `get` serves values only.
            assert_eq!(s.get(h(k), &k, 1).is_some(), expect == "value");
        }
        assert_eq!(s.len(), 32);
        assert_eq!(s.weight(), 32);
    }

    #[test]
    fn cached_errors_count_toward_capacity_and_are_evicted() {
        let s = plain_shard(10, 16, 9);
        for k in 0..10 {
            put_error(&s, k, NEVER);
        }
        for k in 10..30 {
            put(&s, k, 1);
            assert!(s.len() <= 10);
        }
        assert_eq!(s.len(), 10);
        let errors_left = (0..10).filter(|&k| probe_kind(&s, k, 2) == "error").count();
        assert!(errors_left < 10, "sampling reaches the error array too");
        // A dead cached error is evicted before any value.
        let s = plain_shard(3, 16, 9);
        put(&s, 1, 0);
        put(&s, 2, 0);
        put_error(&s, 3, 5);
        put(&s, 4, 10);
        assert_eq!(probe_kind(&s, 3, 10), "miss");
        assert_eq!(s.tally.get(Event::Expiration), 1);
        assert_eq!(
            (probe_kind(&s, 1, 10), probe_kind(&s, 2, 10)),
            ("value", "value")
        );
    }

    #[test]
    fn a_kind_change_is_never_declined() {
        for admission in [Admission::TinyLfu, Admission::Adaptive] {
            // Full shard: a cached error for key 1, hot values for keys 2 and 3.
            let s: Shard<u64, u64> =
                Shard::new(3, 16, 9, admission, 1, from_cache(3, Columns::ALL));
            put_error(&s, 1, NEVER);
            put(&s, 2, 0);
            put(&s, 3, 0);
            for t in 0..10 {
                for k in [2, 3] {
                    assert_eq!(s.get(h(k), &k, 1 + 200 * t), Some(k));
                }
            }
            // A value for key 1 weighing 2 needs a victim, and either hot key is more frequent
            // than key 1. It used to be declined, and key 1's cached error kept being served
            // over the value written after it.
            let out = write_value(&s, 1, NEVER, 2, 2_000, &cfg(), WriteMode::Plain);
            assert_eq!(out, WriteOutcome::Stored, "{admission:?}");
            assert_eq!(probe_kind(&s, 1, 2_000), "value", "{admission:?}");
            assert_eq!((s.len(), s.weight()), (2, 3), "{admission:?}");
        }
    }

    /// Issue 3: sampling is O(k), independent of the number of entries. Each insert at capacity
    /// reads about `samples` entries plus a pooled candidate or two, at a thousand entries and at
    /// a hundred thousand alike (lruttl's eviction walked the map: a thousand times as many).
    #[test]
    fn eviction_reads_the_same_few_entries_at_any_size() {
        let c = ShardConfig {
            samples: 10,
            swr_ms: 0,
        };
        let columns = Columns {
            weighted: false,
            gated: false,
        };
        let mut per_insert = Vec::new();
        for capacity in [1_000u64, 100_000] {
            let s: Shard<u64, u64> = Shard::new(
                capacity,
                16,
                7,
                Admission::Always,
                1,
                from_cache(capacity, columns),
            );
            // Distinct access times, so the ranks differ and the pool does real work.
            for k in 0..capacity {
                write_value(&s, k, NEVER, 1, k, &c, WriteMode::Plain);
            }
            let reads = || {
                let t = s.table.read();
                t.eviction_reads.load(std::sync::atomic::Ordering::Relaxed)
            };
            let before = reads();
            const INSERTS: u64 = 2_000;
            for k in capacity..capacity + INSERTS {
                write_value(&s, k, NEVER, 1, capacity + k, &c, WriteMode::Plain);
            }
            assert_eq!(s.len() as u64, capacity);
            assert_eq!(s.tally.get(Event::Eviction), INSERTS);
            per_insert.push((reads() - before) as f64 / INSERTS as f64);
        }
        for &reads in &per_insert {
            assert!(
                (10.0..=14.0).contains(&reads),
                "entries read per insert at capacity: {per_insert:?}"
            );
        }
        assert!(
            (per_insert[0] - per_insert[1]).abs() <= 2.0,
            "reads per insert differ with size: {per_insert:?}"
        );
    }

    /// An insert at capacity prefetches the next eviction's window (`Table::prefetch_eviction`):
    /// the window it names must be the one that eviction samples, or the prefetch only wastes
    /// bandwidth. With one sample and no pool, the victim is the window's only entry.
    #[test]
    fn the_prefetched_window_is_the_next_evictions() {
        let one = ShardConfig {
            samples: 1,
            swr_ms: 0,
        };
        let s = plain_shard(64, 0, 11);
        for k in 0..64 {
            write_value(&s, k, NEVER, 1, k, &one, WriteMode::Plain);
        }
        for k in 64..1_000 {
            let start = s.table.read().next_sample_start();
            let victim = {
                let t = s.table.read();
                *t.slot(start).key()
            };
            write_value(&s, k, NEVER, 1, k, &one, WriteMode::Plain);
            assert!(s.get(h(victim), &victim, k).is_none(), "insert {k}");
            assert_eq!(s.len(), 64);
        }
        // Every insert at capacity prefetched (and every eviction's first draw matched the
        // window named: `Table::check_prefetched`, in every test).
        assert_eq!(prefetches(&s), 1_000 - 64);
        // The adaptive policy prefetches too, as each insert at capacity starts.
        let a = adaptive_shard(64);
        for k in 0..1_000 {
            write_value(&a, k, NEVER, 1, k, &cfg(), WriteMode::Plain);
        }
        assert_eq!(prefetches(&a), 1_000 - 64);
    }

    fn prefetches(s: &Shard<u64, u64>) -> u64 {
        s.table.read().prefetched[2].load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The adaptive policy stays O(k) too: it reads each sample twice (flags, then rank: the
    /// same lines), the 12 oldest pooled main candidates it picks the least frequent of (and
    /// re-ranks the 11 it puts back), a few window candidates: 44 entries per insert, at any
    /// size.
    #[test]
    fn adaptive_eviction_reads_the_same_few_entries_at_any_size() {
        let c = ShardConfig {
            samples: 10,
            swr_ms: 0,
        };
        let columns = Columns {
            weighted: false,
            gated: false,
        };
        let mut per_insert = Vec::new();
        for capacity in [1_000u64, 100_000] {
            let s: Shard<u64, u64> = Shard::new(
                capacity,
                16,
                7,
                Admission::Adaptive,
                1,
                from_cache(capacity, columns),
            );
            for k in 0..capacity {
                write_value(&s, k, NEVER, 1, k, &c, WriteMode::Plain);
            }
            // Hits on every other key: protected main entries and a busy sketch.
            for k in (0..capacity).step_by(2) {
                s.get(h(k), &k, capacity + k);
            }
            let reads = || {
                let t = s.table.read();
                t.eviction_reads.load(std::sync::atomic::Ordering::Relaxed)
            };
            let before = reads();
            const INSERTS: u64 = 2_000;
            for k in capacity..capacity + INSERTS {
                write_value(&s, k, NEVER, 1, 2 * capacity + k, &c, WriteMode::Plain);
            }
            assert_eq!(s.len() as u64, capacity);
            per_insert.push((reads() - before) as f64 / INSERTS as f64);
        }
        for &reads in &per_insert {
            assert!(
                (10.0..=50.0).contains(&reads),
                "entries read per insert at capacity: {per_insert:?}"
            );
        }
        assert!(
            (per_insert[0] - per_insert[1]).abs() <= 3.0,
            "reads per insert differ with size: {per_insert:?}"
        );
    }

    /// Runs `keys` as get-then-insert-on-miss at one request per millisecond with a 200 ms
    /// resolution (the lab's model); returns the hits.
    fn simulate(s: &Shard<u64, u64>, keys: impl Iterator<Item = u64>) -> u64 {
        simulate_from(s, keys, 1)
    }

    /// [`simulate`] with the clock starting at `start` milliseconds.
    fn simulate_from(s: &Shard<u64, u64>, keys: impl Iterator<Item = u64>, start: u64) -> u64 {
        let c = ShardConfig {
            samples: 10,
            swr_ms: 0,
        };
        let mut hits = 0;
        for (now, k) in keys.enumerate() {
            let now = now as u64 + start;
            if s.get(h(k), &k, now).is_some() {
                hits += 1;
            } else {
                write_value(s, k, NEVER, 1, now, &c, WriteMode::Plain);
            }
        }
        hits
    }

    fn adaptive_shard(capacity: u64) -> Shard<u64, u64> {
        let bare = Columns {
            weighted: false,
            gated: false,
        };
        Shard::new(
            capacity,
            16,
            1,
            Admission::Adaptive,
            200,
            from_cache(capacity, bare),
        )
    }

    fn window_target(s: &Shard<u64, u64>) -> f64 {
        s.table.read().adaptive.as_ref().map_or(0.0, |st| st.target)
    }

    /// The lab's `recommended_window_grows_on_recency_and_stays_shut_on_a_loop`, on the store
    /// (the window now moved by the miniature simulations).
    #[test]
    fn adaptive_window_grows_on_recency_and_stays_shut_on_a_loop() {
        let sliding: Vec<u64> = (0..200_000u64).map(|i| i / 4 + (i % 4) * 7).collect();
        let s = adaptive_shard(500);
        let windowed = simulate(&s, sliding.iter().copied());
        assert!(window_target(&s) > 0.0, "the window opened");
        let bare = Columns {
            weighted: false,
            gated: false,
        };
        let tiny: Shard<u64, u64> =
            Shard::new(500, 16, 1, Admission::TinyLfu, 200, from_cache(500, bare));
        let filter_only = simulate(&tiny, sliding.iter().copied());
        assert!(windowed > filter_only, "{windowed} vs {filter_only}");
        // A loop 10% longer than the cache: the miniature simulations keep the window shut.
        let s = adaptive_shard(1000);
        let looped = simulate(&s, (0..300_000u64).map(|i| i % 1100));
        assert!(looped > 240_000, "{looped} of 300000");
        assert!(
            window_target(&s) < 100.0,
            "window target {}",
            window_target(&s)
        );
    }

    /// The miniature simulations rest once their pick settles and the shard's own requests
    /// end the rest: on a steady workload sampling stops, then resumes, then stops again.
    #[test]
    fn the_shards_requests_end_the_simulations_rest() {
        let s = adaptive_shard(1000);
        let resting = || {
            s.table
                .read()
                .adaptive
                .as_ref()
                .is_some_and(|st| st.minis.resting())
        };
        // A loop 10% longer than the cache, in rounds of 10,000 requests.
        let mut changes = Vec::new();
        let mut now = 1;
        for _ in 0..100 {
            simulate_from(&s, (now..now + 10_000).map(|i| i % 1_100), now);
            now += 10_000;
            let r = resting();
            if changes.last() != Some(&r) {
                changes.push(r);
            }
        }
        assert!(
            changes.starts_with(&[false, true, false, true]),
            "resting over time: {changes:?}"
        );
    }

    /// A window the miniature simulations opened (recency paid) shrinks to a lower share when
    /// they lower it (a loop, where only the filter keeps anything): its oldest entries are
    /// demoted into main, since a duel alone keeps the window's length.
    #[test]
    fn adaptive_window_shrinks_when_its_share_falls() {
        let s = adaptive_shard(500);
        let window_len = |s: &Shard<u64, u64>| {
            s.table
                .read()
                .adaptive
                .as_ref()
                .map_or(0, |st| st.window_len)
        };
        let sliding = (0..200_000u64).map(|i| i / 4 + (i % 4) * 7);
        simulate_from(&s, sliding, 1);
        let opened = window_len(&s);
        assert!(opened >= 100, "window opened to {opened} of 500");
        let looped = (0..400_000u64).map(|i| 1_000_000 + i % 550);
        simulate_from(&s, looped, 200_001);
        let shut = window_len(&s);
        assert!(
            shut <= 25,
            "window {shut} of 500 after the loop (was {opened})"
        );
    }

    /// Eviction settings that sample every entry of a 100-entry shard (its oldest is
    /// certainly among the candidates).
    fn sampling_all() -> ShardConfig {
        ShardConfig {
            samples: 100,
            swr_ms: 0,
        }
    }

    /// Key `k`'s resident count in adaptive shard `s`, as of its sketch's halvings now.
    fn resident_count_of(s: &Shard<u64, u64>, k: u64) -> u8 {
        let t = s.table.read();
        let ages = t.adaptive.as_ref().map_or(0, |st| st.sketch.ages());
        t.slot(t.find_value(h(k), &k).expect("stored"))
            .resident_count(ages)
    }

    /// An adaptive shard of capacity 100 holding keys 0..100, key `k` written at `k` ms (key 0
    /// is the oldest).
    fn full_adaptive_shard() -> Shard<u64, u64> {
        let s = adaptive_shard(100);
        for k in 0..100 {
            write_value(&s, k, NEVER, 1, k, &cfg(), WriteMode::Plain);
        }
        s
    }

    /// Main's victim is the least frequent of the oldest pooled candidates, not the oldest:
    /// an old key counted as frequent outlives newer rare ones. (Picking the oldest, the
    /// frequent key would be the victim every newcomer duels, and loses to, for good.)
    #[test]
    fn adaptive_victim_is_the_least_frequent_of_the_oldest() {
        let s = full_adaptive_shard();
        let c = cfg();
        let record = |k: u64, times: usize| {
            let mut t = s.table.write();
            let st = t.adaptive.as_deref_mut().expect("adaptive");
            for _ in 0..times {
                st.sketch.record(h(k), None);
            }
        };
        // Key 0, the oldest entry, is frequent (its resident count, as 16 hits leave it, with
        // no hit's stamp or protection); each newcomer has been asked for twice.
        {
            let t = s.table.write();
            let i = t.find_value(h(0), &0).expect("key 0");
            let ages = t.adaptive.as_ref().map_or(0, |st| st.sketch.ages());
            t.slot(i).set_count(crate::adaptive::MAX_FREQUENCY, ages);
        }
        let mut stored = 0;
        for k in 1000..1020 {
            record(k, 2);
            if write_value(&s, k, NEVER, 1, 200 + k, &c, WriteMode::Plain) == WriteOutcome::Stored {
                stored += 1;
            }
        }
        assert!(s.contains(h(0), &0, 2000), "the frequent old key stays");
        assert!(stored >= 15, "{stored} of 20 newcomers stored");
    }

    /// A new entry's resident count starts at what the sketch remembers of its key (its
    /// misses, and counts folded back by earlier evictions), and an evicted entry folds its
    /// count back into the sketch: a key that returns is judged by its hits while resident.
    #[test]
    fn adaptive_resident_count_starts_at_the_sketch_and_folds_back_on_eviction() {
        let s = full_adaptive_shard();
        let all = sampling_all();
        let sketch_of = |k: u64| {
            let t = s.table.read();
            t.adaptive.as_ref().map(|st| st.sketch.frequency(h(k)))
        };
        let count_of = |k: u64| resident_count_of(&s, k);
        // A newcomer asked for three times before: its count is the sketch's estimate.
        {
            let mut t = s.table.write();
            let st = t.adaptive.as_deref_mut().expect("adaptive");
            for _ in 0..3 {
                st.sketch.record(h(500), None);
            }
        }
        let out = write_value(&s, 500, NEVER, 1, 150, &all, WriteMode::Plain);
        assert_eq!(out, WriteOutcome::Stored);
        assert_eq!(Some(count_of(500)), sketch_of(500));
        assert!(count_of(500) >= 3);
        // Key 7 counts 9 hits, every other key 16: main's least frequent, it is evicted, and
        // the sketch, which held only its miss, now remembers the 9.
        {
            let t = s.table.write();
            let now = t.adaptive.as_ref().map_or(0, |st| st.sketch.ages());
            for k in (0..100).chain([500]) {
                let Some(i) = t.find_value(h(k), &k) else {
                    continue;
                };
                t.slot(i).set_count(if k == 7 { 9 } else { 16 }, now);
            }
        }
        assert!(sketch_of(7) < Some(9));
        assert_eq!(s.evict_for_budget(1, 200, &all), 1);
        assert!(!s.contains(h(7), &7, 200), "the least frequent left");
        assert_eq!(sketch_of(7), Some(9));
    }

    /// The loom models of the adaptive hit buffer (`tests/loom.rs`, `full_adaptive_cache`) use
    /// keys 5, 6 and 12 because the simulations sample them in that cache (one key in 4 at its
    /// capacity, by hash under seed 7): only a sampled hit is buffered, so with keys they did
    /// not sample the models' 8th hit would fill nothing and drain nothing.
    #[test]
    fn the_loom_models_hit_keys_the_simulations_sample() {
        let c: crate::Cache<u64, u64> = crate::Cache::builder(2)
            .shards(1)
            .seed(7)
            .samples(2)
            .admission(Admission::Adaptive)
            .build();
        let sims = c.inner.shards[0].simulations().expect("adaptive");
        assert!([5, 6, 12].iter().all(|k| sims.sampled(c.hash(k))));
        assert!(!sims.sampled(c.hash(&1)), "one key in 4, not every key");
    }

    /// `set_capacity` re-shapes each shard's TinyLFU sketch for its share of the new capacity
    /// (before, the sketch kept its build-time size: a cache grown 100-fold estimated its keys'
    /// frequencies in a sketch made for a hundredth of them), and the filter still admits.
    #[test]
    fn set_capacity_resizes_the_tinylfu_sketch() {
        let c: crate::Cache<u64, u64> = crate::Cache::builder(1_000)
            .shards(4)
            .admission(Admission::TinyLfu)
            .seed(7)
            .build();
        let words = |c: &crate::Cache<u64, u64>| -> Vec<usize> {
            c.inner
                .shards
                .iter()
                .map(|s| s.table.read().sketch.as_ref().expect("tinylfu").words())
                .collect()
        };
        let before = words(&c);
        let hour = std::time::Duration::from_secs(3600);
        c.set_capacity(1_000);
        assert_eq!(words(&c), before, "the same size keeps the sketch");
        c.set_capacity(100_000);
        for (grown, old) in words(&c).iter().zip(&before) {
            assert!(*grown >= 50 * old, "{grown} counter words, was {old}");
        }
        for k in 0..100_000 {
            c.insert(k, k, hour).expect("no error");
        }
        assert_eq!(c.len(), 100_000, "a grown cache fills to its new capacity");
        c.set_capacity(100);
        for (shrunk, old) in words(&c).iter().zip(&before) {
            assert!(shrunk < old, "{shrunk} counter words, was {old}");
        }
        // The filter works in the new sketch: a key asked for often is admitted over the
        // victims of a full cache, a key never asked for before may be refused.
        for _ in 0..10 {
            c.get(&7_777_777);
        }
        assert_eq!(c.insert(7_777_777, 1, hour), Ok(true));
        assert_eq!(c.get(&7_777_777), Some(1));
    }

    /// Resizes racing lookups that record into the TinyLFU sketch and inserts that consult it:
    /// the sketch is replaced only under the write lock, so every lookup records into the sketch
    /// it read under its read lock (no lost shard, no panic, no deadlock), and the cache ends at
    /// its last capacity with a sketch shaped for it.
    #[test]
    fn tinylfu_resizes_race_lookups_and_inserts() {
        let c: crate::Cache<u64, u64> = crate::Cache::builder(2_000)
            .shards(4)
            .admission(Admission::TinyLfu)
            .seed(11)
            .build();
        let hour = std::time::Duration::from_secs(3600);
        std::thread::scope(|scope| {
            for t in 0..2u64 {
                let c = &c;
                scope.spawn(move || {
                    let mut k = t;
                    for _ in 0..100_000 {
                        k = k
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        let key = (k >> 33) % 5_000;
                        if c.get(&key).is_none() {
                            let _ = c.insert(key, key, hour);
                        }
                    }
                });
            }
            for round in 0..200 {
                c.set_capacity(if round % 2 == 0 { 100 } else { 20_000 });
                std::thread::yield_now();
            }
        });
        c.set_capacity(500);
        assert!(c.len() <= 500, "{} entries", c.len());
        let expected = crate::admission::FrequencySketch::new(125).words();
        for s in c.inner.shards.iter() {
            let t = s.table.read();
            assert_eq!(t.sketch.as_ref().expect("tinylfu").words(), expected);
        }
    }

    /// A read-through fill in flight (its leader awaiting the origin, in `coalesce`) across a
    /// resize that re-shapes the TinyLFU sketch: the caller still gets its value; the publish
    /// consults the new, empty sketch, where the key (recorded in the old one) does not beat a
    /// victim, so it is declined and counted, not stored over a resident entry; the key's next
    /// read-through, recorded in the new sketch, is admitted.
    #[test]
    fn a_fill_in_flight_across_a_tinylfu_resize_is_answered_and_declined_once() {
        let c: crate::Cache<u64, u64> = crate::Cache::builder(1_000)
            .shards(1)
            .admission(Admission::TinyLfu)
            .seed(3)
            .build();
        let hour = std::time::Duration::from_secs(3600);
        for k in 0..100 {
            c.insert(k, k, hour).expect("no error");
        }
        let (tx, rx) = futures::channel::oneshot::channel::<u64>();
        let fill = c.get_or_try_insert(
            5_000,
            move |_| hour,
            move || async move { Ok::<u64, ()>(rx.await.expect("sent")) },
        );
        let mut fill = Box::pin(fill);
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(
            fill.as_mut().poll(&mut cx).is_pending(),
            "leading, awaiting the origin"
        );
        c.set_capacity(100);
        tx.send(7).expect("the fill waits");
        let got = futures::executor::block_on(fill).expect("filled");
        assert_eq!((got.value, got.source), (7, crate::Source::Filled));
        assert_eq!(c.get(&5_000), None, "declined by the new sketch");
        assert_eq!(c.stats().rejections, 1);
        assert_eq!(c.len(), 100, "nothing resident was lost to it");
        let again = futures::executor::block_on(c.get_or_try_insert(
            5_000,
            move |_| hour,
            || async { Ok::<u64, ()>(8) },
        ))
        .expect("filled");
        assert_eq!(again.value, 8);
        assert_eq!(
            c.get(&5_000),
            Some(8),
            "admitted once the new sketch has seen it"
        );
    }

    /// `Cache::set_capacity` re-sizes the adaptive policy: each shard's state to its share of
    /// the new capacity (sketch, window target; resident counts keep their ages) and the
    /// cache's simulations to the new capacity (size and sampling rate). Before, a cache grown
    /// 100-fold kept simulating its build-time size and sketching a hundredth of its keys.
    #[test]
    fn set_capacity_resizes_the_adaptive_policy_and_its_simulations() {
        let c: crate::Cache<u64, u64> = crate::Cache::builder(1_000)
            .shards(4)
            .admission(Admission::Adaptive)
            .seed(7)
            .build();
        let sims = c.inner.shards[0].simulations().expect("adaptive");
        let shape = |c: &crate::Cache<u64, u64>| -> Vec<(u64, usize, u64)> {
            c.inner
                .shards
                .iter()
                .map(|s| {
                    let t = s.table.read();
                    let st = t.adaptive.as_ref().expect("adaptive");
                    (st.capacity, st.sketch.words(), st.sketch.ages())
                })
                .collect()
        };
        assert_eq!(
            sims.shape(),
            (250, 4),
            "a quarter of a small cache, one key in 4"
        );
        let before = shape(&c);
        assert!(before.iter().all(|&(cap, _, _)| cap == 250), "{before:?}");
        let hour = std::time::Duration::from_secs(3600);
        for k in 0..1_000 {
            c.insert(k, k, hour).expect("no error");
        }
        c.set_capacity(100_000);
        assert_eq!(sims.shape(), (1_000, 100), "1,000 entries, one key in 100");
        let grown = shape(&c);
        for ((cap, words, ages), (_, old_words, old_ages)) in grown.iter().zip(&before) {
            assert_eq!(*cap, 25_000);
            assert!(
                *words >= 50 * old_words,
                "{words} counter words, was {old_words}"
            );
            assert_eq!(ages, old_ages, "halvings counted on");
        }
        for k in 0..100_000 {
            assert_eq!(c.insert(k, k, hour), Ok(true), "key {k}");
        }
        assert_eq!(c.len(), 100_000, "a grown cache holds its new capacity");
        c.set_capacity(100);
        assert_eq!(sims.shape(), (25, 4));
        assert!(shape(&c).iter().all(|&(cap, _, _)| cap == 25));
        assert!(c.len() <= 100);
        for k in 200_000..201_000 {
            c.insert(k, k, hour).expect("no error");
        }
        assert!(c.len() <= 100);
    }

    /// A victim that wins its duel stays pooled, the one the next newcomer must beat (as
    /// moka's LRU head stays put): a loop's newcomers keep losing to it instead of each
    /// evicting a key the loop needs sooner.
    #[test]
    fn adaptive_victim_that_wins_stays_the_one_to_beat() {
        let s = full_adaptive_shard();
        // Every count is 1 (each key's one miss): the newcomer (1) does not beat the oldest
        // entry (1) and is declined. (Sampling every entry, so the oldest is certainly the
        // victim.)
        let all = sampling_all();
        let out = write_value(&s, 5000, NEVER, 1, 300, &all, WriteMode::Plain);
        assert_eq!(out, WriteOutcome::Declined);
        let t = s.table.read();
        let oldest = t.find_value(h(0), &0).map(At::Value);
        assert!(oldest.is_some());
        assert_eq!(t.best_pooled(), oldest, "the winner is pooled first");
    }

    /// Main's pick compares the counts its candidates had when pooled and checks only the one
    /// it picks: a candidate hit since then (a newer stamp, protection, a higher count) is
    /// pooled again at its new rank, not made the victim by its old count, and the pick
    /// moves on to a candidate that is as old and as rare as recorded.
    #[test]
    fn adaptive_victim_hit_since_pooled_is_not_picked_by_its_old_count() {
        let s = full_adaptive_shard();
        let all = sampling_all();
        // Key 0 (the oldest, count 1) is pooled first: the declined newcomer dueled it.
        let out = write_value(&s, 5000, NEVER, 1, 300, &all, WriteMode::Plain);
        assert_eq!(out, WriteOutcome::Declined);
        assert_eq!(
            s.table.read().best_pooled(),
            s.table.read().find_value(h(0), &0).map(At::Value)
        );
        // Then it is hit, a resolution apart each time: its count rises to 5 while its
        // pooled candidate still says 1.
        for now in [400, 700, 1000, 1300] {
            assert_eq!(s.get(h(0), &0, now), Some(0));
        }
        assert_eq!(resident_count_of(&s, 0), 5);
        // A newcomer asked for twice before (count 3) beats every untouched key (count 1) but
        // not key 0: it is stored over one of those, and key 0 stays.
        {
            let mut t = s.table.write();
            let st = t.adaptive.as_deref_mut().expect("adaptive");
            for _ in 0..2 {
                st.sketch.record(h(6000), None);
            }
        }
        let out = write_value(&s, 6000, NEVER, 1, 1400, &all, WriteMode::Plain);
        assert_eq!(out, WriteOutcome::Stored);
        assert!(s.contains(h(0), &0, 1400), "the key hit since pooled stays");
        assert!(s.contains(h(6000), &6000, 1400));
    }

    /// Candidates hit since they were pooled do not linger in main's pool: each pick checks
    /// one more candidate besides the one it picks, so a frequent candidate (never the one
    /// picked) that was hit is re-pooled at its new rank within a pool's length of picks.
    /// Found by review: checking only the picked one left such candidates in the pool for
    /// good, at their old ranks, crowding out the real candidates.
    #[test]
    fn candidates_hit_since_pooled_leave_the_pool() {
        let s = full_adaptive_shard();
        {
            let t = s.table.write();
            let ages = t.adaptive.as_ref().map_or(0, |st| st.sketch.ages());
            for k in 0..100 {
                let i = t.find_value(h(k), &k).expect("stored");
                let count = if k < 4 {
                    crate::adaptive::MAX_FREQUENCY
                } else {
                    1
                };
                t.slot(i).set_count(count, ages);
            }
        }
        // Pool every entry's place (the oldest first), then hit the four frequent old keys.
        let all = sampling_all();
        let out = write_value(&s, 5000, NEVER, 1, 300, &all, WriteMode::Plain);
        assert_eq!(out, WriteOutcome::Declined);
        for k in 0..4 {
            assert_eq!(s.get(h(k), &k, 400), Some(k));
        }
        assert!(s.table.read().stale_pooled(400) >= 4);
        // Newcomers asked for twice before win their duels against the rare keys.
        let one = ShardConfig {
            samples: 1,
            swr_ms: 0,
        };
        for k in 6000..6020 {
            {
                let mut t = s.table.write();
                let st = t.adaptive.as_deref_mut().expect("adaptive");
                st.sketch.record(h(k), None);
                st.sketch.record(h(k), None);
            }
            write_value(&s, k, NEVER, 1, 500, &one, WriteMode::Plain);
        }
        assert_eq!(s.table.read().stale_pooled(500), 0);
    }

    /// A pooled victim that expired since it was pooled leaves without a duel, whatever its
    /// count: a dead entry can never be served again, so it must not make a live newcomer
    /// (or the window's candidate) lose. (Found by review: a frequent short-lived entry,
    /// pooled while alive, turned newcomers away after it expired.)
    #[test]
    fn adaptive_expired_pooled_victim_leaves_without_a_duel() {
        let s = adaptive_shard(100);
        // Key 0, the oldest, expires at 500 ms; the others never.
        for k in 0..100 {
            let expires = if k == 0 { 500 } else { NEVER };
            write_value(&s, k, expires, 1, k, &cfg(), WriteMode::Plain);
        }
        // Key 0 is the least frequent entry (count 2 against 16), but more frequent than a
        // newcomer (1).
        {
            let t = s.table.write();
            let ages = t.adaptive.as_ref().map_or(0, |st| st.sketch.ages());
            for k in 0..100 {
                let i = t.find_value(h(k), &k).expect("stored");
                let count = if k == 0 {
                    2
                } else {
                    crate::adaptive::MAX_FREQUENCY
                };
                t.slot(i).set_count(count, ages);
            }
        }
        // Pooled while alive: the declined newcomer dueled it (and lost to its count).
        let all = sampling_all();
        let out = write_value(&s, 5000, NEVER, 1, 300, &all, WriteMode::Plain);
        assert_eq!(out, WriteOutcome::Declined);
        let held = |k: u64| s.table.read().find_value(h(k), &k).is_some();
        assert!(held(0));
        // After its expiry, a newcomer (one sample: almost surely not key 0's place) is
        // stored over it.
        let one = ShardConfig {
            samples: 1,
            swr_ms: 0,
        };
        let out = write_value(&s, 6000, NEVER, 1, 1000, &one, WriteMode::Plain);
        assert_eq!(out, WriteOutcome::Stored);
        assert!(!held(0), "the expired entry left");
        assert!(held(6000));
    }

    #[test]
    fn adaptive_window_length_matches_the_flags() {
        let s = adaptive_shard(300);
        let keys = (0..60_000u64).map(|i| (i * 7919) % 2000 / (1 + i % 3));
        simulate(&s, keys);
        for k in 0..50 {
            s.remove(h(k), &k);
        }
        let t = s.table.read();
        let flagged = (0..t.len_values())
            .filter(|&i| t.slot(i).flags_for_test() & crate::adaptive::WINDOW != 0)
            .count() as u64;
        assert_eq!(t.adaptive.as_ref().map(|st| st.window_len), Some(flagged));
        assert!(t.len() <= 300);
    }

    /// Issue 17: an adaptive hit writes only its thread's own memory (its stripe: lock mark,
    /// counters; its hit buffer for the shard) and its entry's own stamp word: that only when
    /// its stamp is a resolution old (a new stamp and a raised resident count) or a main entry
    /// is first protected. The one exception is the hit that
    /// fills the buffer (one in `HIT_BUFFER` of the hits the simulations sample): it drains the
    /// buffer under the shard's write lock, if that is free at once.
    #[test]
    fn an_adaptive_hit_writes_only_its_threads_stripe_and_hit_buffer() {
        use crate::adaptive::HIT_BUFFER;
        let s = adaptive_shard(1000);
        let c = cfg();
        // Keys the simulations sample: each hit on one is buffered.
        let sampled = |k: &u64| {
            let t = s.table.read();
            t.adaptive
                .as_ref()
                .is_some_and(|st| st.minis.sampled(h(*k)))
        };
        let keys: Vec<u64> = (0..10_000).filter(sampled).take(HIT_BUFFER).collect();
        let unsampled = (0..10_000)
            .find(|k| !sampled(k))
            .expect("a key not sampled");
        for &k in keys.iter().chain([&unsampled]) {
            write_value(&s, k, NEVER, 1, 0, &c, WriteMode::Plain);
        }
        let me = s.tally.mine().expect("a test thread has a stripe");
        let stripe = std::ptr::from_ref(me) as usize;
        let stripe = stripe..stripe + std::mem::size_of::<CachePadded<Stripe>>();
        let buffer = s.hit_buffers.as_ref().map(|b| b.range(me.index)).unwrap();
        let shared = |writes: &[usize]| -> Vec<usize> {
            writes
                .iter()
                .copied()
                .filter(|a| !stripe.contains(a) && !buffer.contains(a))
                .collect()
        };
        let word_of = |k: u64| {
            let t = s.table.read();
            t.slot(t.find_value(h(k), &k).expect("stored"))
                .stamp_word_addr()
        };
        let count_of = |k: u64| resident_count_of(&s, k);
        // A main entry's first hit protects it, in its own word and nothing else shared (a
        // hit the simulations do not sample buffers nothing); within the resolution a hit
        // writes nothing shared; a resolution later it stamps the entry and raises its count.
        let before = count_of(unsampled);
        let (_, writes) = crate::atomic::writes_during(|| s.get(h(unsampled), &unsampled, 0));
        assert_eq!(shared(&writes), vec![word_of(unsampled)]);
        let (_, writes) = crate::atomic::writes_during(|| s.get(h(unsampled), &unsampled, 199));
        assert_eq!(shared(&writes), Vec::<usize>::new());
        assert_eq!(count_of(unsampled), before);
        let (_, writes) = crate::atomic::writes_during(|| s.get(h(unsampled), &unsampled, 200));
        assert_eq!(shared(&writes), vec![word_of(unsampled)]);
        assert_eq!(count_of(unsampled), before + 1);
        // Protect every key, then let an insert drain this thread's buffer.
        for &k in &keys {
            assert_eq!(s.get(h(k), &k, 0), Some(k));
        }
        write_value(&s, 1_000_000, NEVER, 1, 0, &c, WriteMode::Plain);
        let requests = || s.table.read().adaptive.as_ref().map(|st| st.requests);
        let before = requests();
        // Hits on protected entries within the resolution (get, lookup, probe), up to one
        // short of a full buffer: nothing shared is written.
        let ((), writes) = crate::atomic::writes_during(|| {
            for (n, &k) in keys[..HIT_BUFFER - 1].iter().enumerate() {
                match n % 3 {
                    0 => assert_eq!(s.get(h(k), &k, 0), Some(k)),
                    1 => assert!(s.lookup(h(k), &k, 0, 0).is_some()),
                    _ => assert!(matches!(s.probe(h(k), &k, 0, 0), Probe::Fresh(_))),
                }
            }
        });
        assert!(
            writes.len() >= (HIT_BUFFER - 1) * 3,
            "{} writes",
            writes.len()
        );
        assert_eq!(shared(&writes), Vec::<usize>::new());
        assert_eq!(requests(), before, "nothing drained yet");
        // The hit that fills the buffer drains it into the policy under the write lock.
        let k = keys[HIT_BUFFER - 1];
        let ((), writes) = crate::atomic::writes_during(|| assert_eq!(s.get(h(k), &k, 0), Some(k)));
        assert!(!shared(&writes).is_empty(), "the drain writes the shard");
        assert_eq!(
            requests(),
            before.map(|r| r + HIT_BUFFER as u64),
            "the full buffer was drained"
        );
    }

    /// Hits count toward the request clock (the idle decay's) even when none is sampled (the
    /// simulations rest, or the key is not one they replay): the hit that makes a thread's
    /// count reach `DRAIN_HITS` drains it. Found by review: while the simulations rested no
    /// buffer filled, and a thread that only read never added its hits.
    #[test]
    fn unsampled_hits_reach_the_request_clock() {
        use crate::adaptive::DRAIN_HITS;
        let s = adaptive_shard(1000);
        let key = (0..10_000u64)
            .find(|k| {
                let t = s.table.read();
                t.adaptive
                    .as_ref()
                    .is_some_and(|st| !st.minis.sampled(h(*k)))
            })
            .expect("a key not sampled");
        write_value(&s, key, NEVER, 1, 0, &cfg(), WriteMode::Plain);
        let requests = || s.table.read().adaptive.as_ref().map_or(0, |st| st.requests);
        let before = requests();
        for _ in 0..DRAIN_HITS - 1 {
            assert_eq!(s.get(h(key), &key, 0), Some(key));
        }
        assert_eq!(requests(), before, "not drained yet");
        assert_eq!(s.get(h(key), &key, 0), Some(key));
        assert_eq!(requests(), before + DRAIN_HITS);
    }

    #[test]
    fn dead_samples_are_evicted_first() {
        let (s, c) = full_with_one_dead_entry(4);
        // At t=10 key 4 is dead; every other entry was touched at 0 so all rank alike.
        write_value(&s, 99, NEVER, 1, 10, &c, WriteMode::Plain);
        assert!(!s.contains(h(4), &4, 10));
        assert_eq!(s.tally.get(Event::Expiration), 1);
        assert_eq!(s.tally.get(Event::Eviction), 0);
    }

    #[test]
    fn fenced_write_is_dropped_after_a_remove() {
        let s = plain_shard(10, 16, 3);
        let f = s.fence(h(1));
        assert_eq!(s.remove(h(1), &1), None);
        let out = write_value(&s, 1, NEVER, 1, 0, &cfg(), WriteMode::Fenced(f));
        assert_eq!(out, WriteOutcome::Fenced);
        assert!(!s.contains(h(1), &1, 0));
        let f = s.fence(h(1));
        let out = write_value(&s, 1, NEVER, 1, 0, &cfg(), WriteMode::Fenced(f));
        assert_eq!(out, WriteOutcome::Stored);
    }

    #[test]
    fn a_removal_past_a_fence_spares_a_write_made_since() {
        let s = plain_shard(10, 16, 3);
        write_value(&s, 1, NEVER, 1, 0, &cfg(), WriteMode::Plain);
        let f = s.fence(h(1));
        assert_eq!(
            s.remove_unless_written_since(h(1), &1, f, 0),
            Some(1),
            "older"
        );
        let f = s.fence(h(1));
        write_value(&s, 1, NEVER, 1, 0, &cfg(), WriteMode::Plain);
        assert_eq!(s.remove_unless_written_since(h(1), &1, f, 0), None);
        assert!(s.contains(h(1), &1, 0), "written since the fence: kept");
        // More writes of other keys than the log remembers: removed, conservatively.
        let f = s.fence(h(1));
        for k in 0..2_000u64 {
            s.remove(h(100 + k), &(100 + k));
        }
        assert_eq!(s.remove_unless_written_since(h(1), &1, f, 0), Some(1));
        assert!(!s.contains(h(1), &1, 0));
    }

    #[test]
    fn refresh_gate_is_claimed_once() {
        let c = ShardConfig {
            samples: 5,
            swr_ms: 100,
        };
        let s = plain_shard(10, 16, 3);
        write_value(&s, 1, 10, 1, 0, &c, WriteMode::Plain);
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
