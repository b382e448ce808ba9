//! The storage of one shard: dense entry arrays, an index from key to entry, and sampled
//! eviction. Everything here runs under the shard's lock (`shard.rs` takes it); nothing here
//! locks or waits.
//!
//! Layout. Values live in `slots`, which hold only what a hit reads (key, value, expiry, recency);
//! its weight and refresh gate are in parallel cold columns, kept only in a cache that has a
//! weigher or a stale window (`Columns`). Its key hash is not stored at all: the index gets it
//! from the key and the cache's hasher when it needs it (removal, swaps, growth).
//! Cached fill errors (negative caching) live in their own array, `errors`, so a value slot
//! carries no value-or-error tag: a `u64 -> u64` slot is 32 bytes, two to a cache line and none
//! straddling two. A hit reads one slot at a random place, so at 100K+ entries the slot array's
//! size decides whether that read is served from the last-level cache (measured in
//! docs/benchmarks.md: 64-byte slots ~117 ns per get at 100K entries, 40-byte ones ~82).
//!
//! `index` (a `hashbrown::HashTable<u32>` keyed by the key hash) maps a key to its place, an
//! [`At`]: the top bit says which array. Deleting swap-removes, so neither array has holes and a
//! random number below `slots.len() + errors.len()` names a uniformly random entry; eviction
//! samples a window of `k` adjacent entries from one such number, O(k) at any size. The swap
//! moves one entry, whose index entry is found by hash and place (one probe, no key comparison);
//! a new key's value evicting at capacity takes its victim's place and moves nothing.

mod idle;
mod view;

use std::borrow::Borrow;
use std::hash::Hash;

use hashbrown::HashTable;

use crate::adaptive::{
    FLAGS, MAX_FREQUENCY, META, PROTECTED, STAMP, State, WINDOW, resident_count, with_count,
};
use crate::admission::FrequencySketch;
use crate::fence::WriteLog;
use crate::minisim::LFU_PICK;
use crate::pool::{Candidate, EvictionPool};
use crate::prefetch::prefetch;
use crate::rng::XorShift64;
use crate::shard::{ErasedError, ShardConfig};
use crate::sync::{AtomicU64, Ordering};

/// Live entries rank above every stale entry (ranks of stale entries are their expiry time).
const LIVE_RANK_BASE: u64 = 1 << 62;
/// The index's marker for a place in `errors` rather than `slots`.
const ERROR_BIT: u32 = 1 << 31;
/// Entries one shard can hold (places must fit the index's 31 bits). A shard this full evicts
/// before it inserts, as if it were at capacity.
pub(crate) const MAX_ENTRIES: usize = ERROR_BIT as usize - 1;

/// A cached value: everything a hit reads, and nothing else.
pub(crate) struct Slot<K, V> {
    key: K,
    pub(crate) value: V,
    /// Fresh while `now < expires_at`.
    pub(crate) expires_at: u64,
    /// Coarse-clock millisecond of the last access (relaxed: a recency hint, never a decision).
    /// In the slot, not the cold record: a hit that had to read a second line to update it was
    /// measured slower (101 against 82 ns at 100K entries).
    last_access: AtomicU64,
}

impl<K, V> Slot<K, V> {
    pub(crate) fn new(key: K, value: V, expires_at: u64, now: u64) -> Self {
        Self {
            key,
            value,
            expires_at,
            last_access: AtomicU64::new(now),
        }
    }

    /// The end of the window in which the value may still be served (stale past `expires_at`).
    #[inline]
    pub(crate) fn usable_until(&self, swr_ms: u64) -> u64 {
        self.expires_at.saturating_add(swr_ms)
    }

    /// Records an access at `now`, unless the recorded one is less than `every_ms` (at least 1)
    /// old: a hit then writes nothing, so the slot's cache line stays clean. (Measured at 100K
    /// entries, writing on every hit cost ~10 ns per get: the dirtied lines double the memory
    /// traffic of a read-mostly workload.)
    #[inline]
    pub(crate) fn touch(&self, now: u64, every_ms: u64) {
        if now.saturating_sub(self.last_access.load(Ordering::Relaxed)) >= every_ms {
            self.last_access.store(now, Ordering::Relaxed);
        }
    }

    /// [`touch`](Self::touch) for the adaptive policy, whose flags and resident count share
    /// the stamp's word (`sketch`: the policy's, whose halvings age the count; read only when
    /// the word is rewritten): keeps the flags, protects
    /// a main entry on its first hit, and with a new stamp (at most once per resolution, as
    /// the default's hit) raises the entry's count. Returns whether the hit raised it.
    ///
    /// A count raised on every hit was measured first: the lab found the two level (worst
    /// cell -0.52 every hit, -0.48 gated), but writing the entry on every hit of a cold key
    /// cost 40 ns per get at 1M entries (`hitprobe`, uniform gets: each hit dirtied a line).
    #[inline]
    pub(crate) fn touch_flagged(&self, now: u64, every_ms: u64, sketch: &FrequencySketch) -> bool {
        let w = self.last_access.load(Ordering::Relaxed);
        let due = now.saturating_sub(w & STAMP) >= every_ms;
        // One branch for the common hit (a window entry or a protected main one, stamped
        // within the resolution): nothing to change, no store. Its two tests are combined
        // without short-circuiting: whether an entry is in the window is a coin toss per
        // entry, and a branch on it would be mispredicted half the time.
        if due | (w & FLAGS == 0) {
            return self.restamp(w, due, now, sketch);
        }
        false
    }

    /// The rest of [`touch_flagged`](Self::touch_flagged): protection for a main entry's
    /// first hit; a new stamp and a raised count if the old stamp is a resolution old
    /// (`due`).
    ///
    /// Without a branch on the word's contents: at 1M entries the word is a cache miss, and a
    /// mispredicted branch that waits on it throws away the next lookups the processor had
    /// started meanwhile (measured: `hitprobe` get at 1M entries, see docs/benchmarks.md).
    #[inline(never)]
    fn restamp(&self, w: u64, due: bool, now: u64, sketch: &FrequencySketch) -> bool {
        let ages = sketch.ages();
        let count = resident_count(w, ages);
        let raised = due & (count < MAX_FREQUENCY);
        let stamped = if due { now | (w & META) } else { w };
        // A main entry's hit protects it (a window entry's multiplies the flag by 0).
        let protect = PROTECTED * u64::from(w & WINDOW == 0);
        let new = with_count(stamped, count + u8::from(raised), ages) | protect;
        // Under the read lock: a racing hit may store its own word over this one (one of the
        // two protections survives, the other hit's flag is lost: only a missed promotion; one
        // raise is lost: a count a little low). Flags change otherwise only under the write
        // lock.
        self.last_access.store(new, Ordering::Relaxed);
        raised
    }

    /// The resident count in the stamp word (adaptive policy), as of `ages` halvings.
    #[inline]
    pub(crate) fn resident_count(&self, ages: u64) -> u8 {
        resident_count(self.last_access.load(Ordering::Relaxed), ages)
    }

    /// Sets the resident count (under the write lock: a new entry's, from the sketch).
    #[inline]
    pub(crate) fn set_count(&self, count: u8, ages: u64) {
        let w = self.last_access.load(Ordering::Relaxed);
        self.last_access
            .store(with_count(w, count, ages), Ordering::Relaxed);
    }

    /// The policy's bits of the stamp word (flags and resident count), which a new value of
    /// the same key takes over.
    #[inline]
    fn meta(&self) -> u64 {
        self.last_access.load(Ordering::Relaxed) & META
    }

    /// The stamp word's flags (adaptive policy).
    #[inline]
    fn flags(&self) -> u64 {
        self.last_access.load(Ordering::Relaxed) & FLAGS
    }

    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn flags_for_test(&self) -> u64 {
        self.flags()
    }

    /// The address of the stamp word (tests: which memory a hit wrote).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn stamp_word_addr(&self) -> usize {
        std::ptr::from_ref(&self.last_access) as usize
    }

    /// Sets (`on`) or clears `flag` (under the write lock).
    #[inline]
    fn set_flag(&self, flag: u64, on: bool) {
        let w = self.last_access.load(Ordering::Relaxed);
        let new = if on { w | flag } else { w & !flag };
        self.last_access.store(new, Ordering::Relaxed);
    }
}

/// Which per-value cold columns a table keeps. A column a cache cannot use is not kept at all: at 1M `u64 -> u64` entries, weights and refresh gates that every cache
/// carried cost 16 of 66.5 bytes per entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Columns {
    /// Values have weights of their own (the cache has a weigher); otherwise each weighs 1.
    pub(crate) weighted: bool,
    /// Values have refresh gates (the cache has a stale-while-revalidate window); without a
    /// window nothing is ever served stale, so there is no refresh to gate.
    pub(crate) gated: bool,
}

impl Columns {
    /// Every column (shard-level tests use weights and gates freely).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) const ALL: Columns = Columns {
        weighted: true,
        gated: true,
    };
}

/// A cached fill error. Weighs 1; served (as a negative hit) only until `expires_at`, with no
/// stale window.
pub(crate) struct ErrorSlot<K> {
    key: K,
    pub(crate) error: ErasedError,
    pub(crate) expires_at: u64,
    hash: u64,
    /// When it was stored: its recency for eviction (negative hits do not refresh it).
    stored_at: u64,
}

impl<K> ErrorSlot<K> {
    pub(crate) fn new(key: K, error: ErasedError, hash: u64, expires_at: u64, now: u64) -> Self {
        Self {
            key,
            error,
            expires_at,
            hash,
            stored_at: now,
        }
    }
}

/// Where an entry lives: which array, which place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum At {
    Value(usize),
    Error(usize),
}

impl At {
    #[inline]
    fn encode(self) -> u32 {
        // Places stay below `MAX_ENTRIES` (checked where entries are pushed), so they fit.
        match self {
            At::Value(i) => i as u32,
            At::Error(i) => i as u32 | ERROR_BIT,
        }
    }

    #[inline]
    fn decode(j: u32) -> Self {
        if j & ERROR_BIT == 0 {
            At::Value(j as usize)
        } else {
            At::Error((j & !ERROR_BIT) as usize)
        }
    }
}

/// An entry taken out of the table. Holds user data (key, value): the caller drops it after
/// releasing the lock.
pub(crate) enum Removed<K, V> {
    Value(Slot<K, V>),
    Error(ErrorSlot<K>),
}

impl<K, V> Removed<K, V> {
    pub(crate) fn expires_at(&self) -> u64 {
        match self {
            Removed::Value(s) => s.expires_at,
            Removed::Error(e) => e.expires_at,
        }
    }

    pub(crate) fn into_value(self) -> Option<V> {
        match self {
            Removed::Value(s) => Some(s.value),
            Removed::Error(_) => None,
        }
    }
}

/// The adaptive policy's decision for one eviction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Evict `at`; the newcomer (if any) enters the window (`window`) or main.
    Evict { at: At, window: bool },
    /// Refuse the newcomer (it lost its duel with main's victim).
    Decline,
}

/// The lock-protected part of a shard.
pub(crate) struct Table<K, V> {
    slots: Vec<Slot<K, V>>,
    /// The weight of `slots[i]` (a cold column: never read by a fresh hit; pushed and
    /// swap-removed together with the slot, like `gates`). Empty unless `columns.weighted`.
    ///
    /// A value's key hash is not stored: it is recomputed from the key with `hasher` where the
    /// index needs it (removal, swaps, the index's own growth), as `std`'s `HashMap` does.
    /// Storing it cost 8 bytes per entry and, at 1M entries, a cache miss per eviction; hashing
    /// the key in the slot that ranking already read costs a few instructions for small keys.
    /// (So the key's `Hash`, like its `Eq`, runs under the shard's lock.)
    weights: Vec<u64>,
    /// Empty unless `columns.gated`. A stale-while-revalidate refresh may start when
    /// `now >= gate`; `GATE_BUSY` (in `shard.rs`) while one runs; a failed refresh sets it to the
    /// retry time.
    gates: Vec<AtomicU64>,
    columns: Columns,
    /// Time-to-idle: the cache's, and a column for values with their own (`table/idle.rs`).
    idles: idle::Idles,
    /// The cache's hasher (the same keys as `Cache`'s): `hash_one(key)` is the hash every
    /// method here is given for that key.
    hasher: ahash::RandomState,
    errors: Vec<ErrorSlot<K>>,
    index: HashTable<u32>,
    pub(crate) weight: u64,
    pub(crate) capacity: u64,
    pool: EvictionPool,
    /// The key hashes of the shard's last plain writes, for per-key fences (`fence.rs`).
    pub(crate) writes: WriteLog,
    /// The key hashes of the shard's last stores of any kind (plain writes and fills), by the
    /// shard's store count: `retain` leaves a key stored since its copy (`shard/snapshot.rs`).
    pub(crate) stored: WriteLog,
    rng: XorShift64,
    /// The adaptive policy's state (`adaptive.rs`); `None` for the other policies.
    pub(crate) adaptive: Option<Box<State>>,
    /// The TinyLFU policy's admission sketch; `None` for the other policies. Lookups record
    /// into it under the read lock (relaxed atomics); `set_capacity` re-shapes it under the
    /// write lock.
    pub(crate) sketch: Option<Box<FrequencySketch>>,
    /// Entries read by eviction (tests: it reads `samples` plus a few pooled ones per victim,
    /// whatever the table's size; a walk anywhere on that path would show here).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) eviction_reads: crate::sync::plain::AtomicU64,
    /// The window start the last prefetch named and the table's length then, until the
    /// eviction draws (tests: at the same length the draw must match, or the prefetch fetched
    /// the wrong lines; a removal in between makes the hint stale, which only wastes it).
    /// `u64::MAX`: none pending. Then how many windows were prefetched.
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) prefetched: [crate::sync::plain::AtomicU64; 3],
}

/// Eviction rank from an entry's expiry and recency word (see [`Table::rank`]): a protected
/// entry (adaptive policy) ranks after every unprotected live one.
#[inline]
fn rank_of(expires_at: u64, last_access: u64, now: u64) -> u64 {
    if now >= expires_at {
        expires_at.min(LIVE_RANK_BASE - 1)
    } else {
        let protected = if last_access & PROTECTED != 0 {
            PROTECTED_RANK
        } else {
            0
        };
        LIVE_RANK_BASE.saturating_add(protected + (last_access & STAMP).min(PROTECTED_RANK - 1))
    }
}

/// Added to a protected entry's live rank (stamps are milliseconds, far below it).
const PROTECTED_RANK: u64 = 1 << 60;

/// The hash of the entry an index word names (for the index's own rehashing).
#[inline]
fn hash_at<K: Hash, V>(
    hasher: &ahash::RandomState,
    slots: &[Slot<K, V>],
    errors: &[ErrorSlot<K>],
    j: u32,
) -> u64 {
    match At::decode(j) {
        At::Value(i) => hasher.hash_one(&slots[i].key),
        At::Error(i) => errors[i].hash,
    }
}

impl<K: Eq + Hash, V> Table<K, V> {
    pub(crate) fn new(
        capacity: u64,
        share: u64,
        pool_size: usize,
        seed: u64,
        columns: Columns,
        hasher: ahash::RandomState,
    ) -> Self {
        Self {
            slots: Vec::new(),
            hasher,
            weights: Vec::new(),
            gates: Vec::new(),
            columns,
            idles: idle::Idles::new(),
            errors: Vec::new(),
            index: HashTable::new(),
            weight: 0,
            capacity,
            pool: EvictionPool::new(pool_size),
            writes: WriteLog::new(share),
            stored: WriteLog::new(share),
            rng: XorShift64::new(seed),
            adaptive: None,
            sketch: None,
            #[cfg(all(test, not(herd_loom)))]
            eviction_reads: crate::sync::plain::AtomicU64::new(0),
            #[cfg(all(test, not(herd_loom)))]
            prefetched: [
                crate::sync::plain::AtomicU64::new(u64::MAX),
                crate::sync::plain::AtomicU64::new(0),
                crate::sync::plain::AtomicU64::new(0),
            ],
        }
    }

    /// Whether entries carry weights (a weigher is set): shares are then in weight units.
    pub(crate) fn weighted(&self) -> bool {
        self.columns.weighted
    }

    /// How many candidates main's pool keeps (tests).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn pool_capacity_for_test(&self) -> usize {
        self.pool.capacity_for_test()
    }

    /// Entries held, values and cached errors.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.slots.len() + self.errors.len()
    }

    /// Values held (cached errors not counted).
    #[inline]
    pub(crate) fn len_values(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    pub(crate) fn slot(&self, i: usize) -> &Slot<K, V> {
        &self.slots[i]
    }

    /// The refresh gate of the value at `i`; `None` in a table without a stale window.
    #[inline]
    pub(crate) fn gate(&self, i: usize) -> Option<&AtomicU64> {
        self.gates.get(i)
    }

    #[inline]
    pub(crate) fn error(&self, i: usize) -> &ErrorSlot<K> {
        &self.errors[i]
    }

    /// Where `q`'s entry is, value or cached error.
    #[inline]
    pub(crate) fn find<Q>(&self, hash: u64, q: &Q) -> Option<At>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let (slots, errors) = (&self.slots, &self.errors);
        self.index
            .find(hash, |&j| match At::decode(j) {
                At::Value(i) => slots[i].key.borrow() == q,
                At::Error(i) => errors[i].key.borrow() == q,
            })
            .map(|&j| At::decode(j))
    }

    /// The place of `q`'s value, if it has one (a cached error is not a value). The hit path:
    /// one index probe and one slot read.
    #[inline]
    pub(crate) fn find_value<Q>(&self, hash: u64, q: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let slots = &self.slots;
        self.index
            .find(hash, |&j| {
                j & ERROR_BIT == 0 && slots[j as usize].key.borrow() == q
            })
            .map(|&j| j as usize)
    }

    /// The full hash of the entry at `at`.
    #[inline]
    pub(crate) fn hash_of(&self, at: At) -> u64 {
        hash_at(&self.hasher, &self.slots, &self.errors, at.encode())
    }

    pub(crate) fn expires_at(&self, at: At) -> u64 {
        match at {
            At::Value(i) => self.slots[i].expires_at,
            At::Error(i) => self.errors[i].expires_at,
        }
    }

    /// Past its TTL and its stale window (errors have none): may be dropped at once.
    #[inline]
    fn is_dead(&self, at: At, now: u64, swr_ms: u64) -> bool {
        self.note_eviction_read();
        match at {
            At::Value(i) => now >= self.slots[i].usable_until(swr_ms),
            At::Error(i) => now >= self.errors[i].expires_at,
        }
    }

    /// A value idle past its time-to-idle: never served again, so (like a dead entry) it
    /// leaves without an admission duel, whatever its past hits. Only reads the slot in a
    /// table that has idle times.
    #[inline]
    pub(crate) fn idle_expired(&self, at: At, now: u64) -> bool {
        match at {
            At::Value(i) if self.idles_anything() => !self.slots[i].idle_ok(now, self.idle_of(i)),
            _ => false,
        }
    }

    /// Eviction rank, smaller is a better victim: stale entries by expiry, then live ones by
    /// recency.
    #[inline]
    fn rank(&self, at: At, now: u64) -> u64 {
        self.note_eviction_read();
        let (expires_at, last_access) = match at {
            At::Value(i) => {
                let s = &self.slots[i];
                (
                    self.ranked_expiry(s, i),
                    s.last_access.load(Ordering::Relaxed),
                )
            }
            At::Error(i) => (self.errors[i].expires_at, self.errors[i].stored_at),
        };
        rank_of(expires_at, last_access, now)
    }

    /// Adds a value for a key that has no entry. The caller has made room.
    pub(crate) fn push_value(&mut self, slot: Slot<K, V>, hash: u64, weight: u64) {
        debug_assert!(self.len() < MAX_ENTRIES, "the caller evicts at MAX_ENTRIES");
        if self.slots.len() == self.slots.capacity() {
            // Grow by doubling, but never past the shard's capacity (every entry weighs at least
            // 1), so a full cache does not carry up to 2x unused slot memory.
            let len = self.slots.len();
            let room = usize::try_from(self.capacity)
                .unwrap_or(usize::MAX)
                .saturating_sub(len);
            self.slots.reserve_exact(len.max(4).min(room).max(1));
            let cap = self.slots.capacity();
            if self.columns.weighted {
                self.weights.reserve_exact(cap - self.weights.len());
            }
            if self.columns.gated {
                self.gates.reserve_exact(cap - self.gates.len());
            }
        }
        let at = At::Value(self.slots.len()).encode();
        self.slots.push(slot);
        self.push_cold_columns(weight);
        self.push_idle();
        let (hasher, slots, errors) = (&self.hasher, &self.slots, &self.errors);
        self.index
            .insert_unique(hash, at, |&j| hash_at(hasher, slots, errors, j));
    }

    /// Adds a cached error for a key that has no entry. The caller has made room.
    pub(crate) fn push_error(&mut self, error: ErrorSlot<K>) {
        debug_assert!(self.len() < MAX_ENTRIES, "the caller evicts at MAX_ENTRIES");
        let at = At::Error(self.errors.len()).encode();
        let hash = error.hash;
        self.weight += 1;
        self.errors.push(error);
        let (hasher, slots, errors) = (&self.hasher, &self.slots, &self.errors);
        self.index
            .insert_unique(hash, at, |&j| hash_at(hasher, slots, errors, j));
    }

    /// Replaces the value at `i` (same key), resetting its refresh gate. Returns the old slot.
    /// Its idle time stays until the writer sets the new value's (`Table::set_idle`, which
    /// every value write in `shard.rs` calls).
    pub(crate) fn replace_value(&mut self, i: usize, slot: Slot<K, V>, weight: u64) -> Slot<K, V> {
        self.weight -= self.weight_of(At::Value(i));
        if self.columns.weighted {
            self.weights[i] = weight;
        }
        self.weight += self.checked_weight(weight);
        if let Some(gate) = self.gates.get_mut(i) {
            *gate = AtomicU64::new(0);
        }
        if let Some(st) = &mut self.adaptive {
            let old = self.slots[i].flags();
            st.window_len -= u64::from(old & WINDOW != 0);
            st.window_len += u64::from(slot.flags() & WINDOW != 0);
        }
        std::mem::replace(&mut self.slots[i], slot)
    }

    /// Replaces the value at `i` by a new value of the same key, which keeps the old one's
    /// region, protection and resident count (adaptive policy).
    pub(crate) fn update_value(&mut self, i: usize, slot: Slot<K, V>, weight: u64) -> Slot<K, V> {
        if self.adaptive.is_some() {
            slot.set_flag(self.slots[i].meta(), true);
        }
        // The old value's idle deadline joins its expiry, as every other exit folds it: one
        // gone idle is reported `Expired`, not `Replaced` (found by review).
        self.fold_idle_deadline(i);
        self.replace_value(i, slot, weight)
    }

    /// Puts the new value at `i` in the window (`window`) or main with resident count
    /// `count` (adaptive policy; nothing otherwise).
    pub(crate) fn place(&mut self, i: usize, window: bool, count: u8) {
        if let Some(st) = &mut self.adaptive {
            let s = &self.slots[i];
            let was = s.flags() & WINDOW != 0;
            s.set_flag(WINDOW, window);
            s.set_count(count, st.sketch.ages());
            st.window_len = st.window_len + u64::from(window) - u64::from(was);
        }
    }

    /// Pushes the weight and gate columns of a new last value (where the table keeps them) and
    /// adds its weight.
    fn push_cold_columns(&mut self, weight: u64) {
        if self.columns.weighted {
            self.weights.push(weight);
        }
        if self.columns.gated {
            self.gates.push(AtomicU64::new(0));
        }
        self.weight += self.checked_weight(weight);
    }

    /// `weight` as the table counts it: an unweighted table's values weigh 1 whatever the
    /// caller passed (it passes 1: `Cache` has no weigher to ask).
    #[inline]
    fn checked_weight(&self, weight: u64) -> u64 {
        debug_assert!(
            self.columns.weighted || weight == 1,
            "weight {weight} in an unweighted table"
        );
        if self.columns.weighted { weight } else { 1 }
    }

    /// Swap-removes the cold columns of the value at `i` (its slot is removed by the caller) and
    /// subtracts its weight.
    fn swap_remove_cold_columns(&mut self, i: usize) {
        self.weight -= self.weight_of(At::Value(i));
        self.swap_remove_idle(i);
        if self.columns.weighted {
            self.weights.swap_remove(i);
        }
        if self.columns.gated {
            self.gates.swap_remove(i);
        }
    }

    /// Puts the value of a new key in the place of the value at `i`, which is being evicted for
    /// it. Nothing moves, so no other index entry needs repointing: at capacity this saves the
    /// two index probes (each a cache miss at 1M entries) that a swap-remove plus a push cost.
    /// Returns the victim.
    pub(crate) fn replace_victim(
        &mut self,
        i: usize,
        slot: Slot<K, V>,
        hash: u64,
        weight: u64,
    ) -> Slot<K, V> {
        let word = At::Value(i).encode();
        let old_hash = self.hasher.hash_one(&self.slots[i].key);
        match self.index.find_entry(old_hash, |&j| j == word) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => debug_assert!(false, "victim {i} missing from the index"),
        }
        self.fold_idle_deadline(i);
        let victim = self.replace_value(i, slot, weight);
        let (hasher, slots, errors) = (&self.hasher, &self.slots, &self.errors);
        self.index
            .insert_unique(hash, word, |&j| hash_at(hasher, slots, errors, j));
        victim
    }

    /// Replaces the cached error at `i` (same key). Returns the old one.
    pub(crate) fn replace_error(&mut self, i: usize, error: ErrorSlot<K>) -> ErrorSlot<K> {
        std::mem::replace(&mut self.errors[i], error)
    }

    /// Points the index entry of the entry that was at `from` to `to` (after a swap-remove).
    fn repoint(&mut self, hash: u64, from: At, to: At) {
        let (from, to) = (from.encode(), to.encode());
        match self.index.find_mut(hash, |&j| j == from) {
            Some(j) => *j = to,
            None => debug_assert!(false, "moved entry missing from the index"),
        }
    }

    /// Swap-removes the entry at `at`, fixing the index of the entry moved into its place.
    pub(crate) fn remove_at(&mut self, at: At) -> Removed<K, V> {
        let hash = self.hash_of(at);
        let word = at.encode();
        match self.index.find_entry(hash, |&j| j == word) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => debug_assert!(false, "{at:?} missing from the index"),
        }
        match at {
            At::Value(i) => {
                let last = self.slots.len() - 1;
                if i != last {
                    let moved = self.hasher.hash_one(&self.slots[last].key);
                    self.repoint(moved, At::Value(last), at);
                }
                self.swap_remove_cold_columns(i);
                if let Some(st) = &mut self.adaptive {
                    st.window_len -= u64::from(self.slots[i].flags() & WINDOW != 0);
                }
                Removed::Value(self.slots.swap_remove(i))
            }
            At::Error(i) => {
                let last = self.errors.len() - 1;
                if i != last {
                    let moved = self.errors[last].hash;
                    self.repoint(moved, At::Error(last), at);
                }
                self.weight -= 1;
                Removed::Error(self.errors.swap_remove(i))
            }
        }
    }

    pub(crate) fn remove_key<Q>(&mut self, hash: u64, q: &Q) -> Option<Removed<K, V>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.find(hash, q).map(|at| self.remove_at(at))
    }

    /// The entry a uniformly random draw below `len()` names.
    #[inline]
    fn at_draw(&self, r: usize) -> At {
        match r.checked_sub(self.slots.len()) {
            None => At::Value(r),
            Some(e) => At::Error(e),
        }
    }

    /// Whether `at` names an entry (a pooled place may be past the end after removals).
    fn holds(&self, at: At) -> bool {
        match at {
            At::Value(i) => i < self.slots.len(),
            At::Error(i) => i < self.errors.len(),
        }
    }

    /// Prefetches what the next [`choose_victim`](Self::choose_victim) will read first: its
    /// window of `samples` adjacent entries (drawn now as it will draw it) and the pool's best
    /// candidate, which it re-validates. Called as an insert at capacity ends, so that the
    /// shard's next one finds those lines cached instead of waiting for each in turn after its
    /// own index probe (docs/benchmarks.md, "Session 13": an insert at capacity into 1M
    /// entries 11-25% faster). A few lines per shard: if other work evicts them before the
    /// shard's next insert, the prefetch cost some bandwidth and about 45 instructions.
    ///
    /// Not for the adaptive policy, which prefetches as its insert starts instead
    /// ([`prefetch_adaptive`](Self::prefetch_adaptive)).
    pub(crate) fn prefetch_eviction(&self, samples: usize) {
        self.prefetch_window(samples);
        if let Some(c) = self.pool.best()
            && let At::Value(i) = At::decode(c.idx)
        {
            prefetch(self.slots.as_ptr().wrapping_add(i));
        }
    }

    /// The adaptive policy's prefetch, as an insert at capacity takes the shard's lock: the
    /// window `adaptive_pick` will sample and every pooled main candidate (its victim pick
    /// reads the oldest, all 8 of a default pool). Issued before the miss's own work (the
    /// sketch, the simulations), which then overlaps their misses (docs/benchmarks.md,
    /// "Session 13": an adaptive insert at capacity into 1M entries ~11% faster; issued as
    /// the previous insert ended instead, the same lines measured slower).
    pub(crate) fn prefetch_adaptive(&self, samples: usize) {
        self.prefetch_window(samples);
        let base = self.slots.as_ptr();
        for c in self.pool.candidates() {
            if c.idx & ERROR_BIT == 0 {
                prefetch(base.wrapping_add(c.idx as usize));
            }
        }
    }

    /// Prefetches the next eviction's window of `samples` adjacent entries, a line at a time.
    fn prefetch_window(&self, samples: usize) {
        if self.len() == 0 {
            return;
        }
        // Addresses by `wrapping_add`, without bounds checks: a prefetch never reads, so a
        // place past the end (a window that runs into the error array, a pooled place emptied
        // since) is only a wasted hint.
        let base = self.slots.as_ptr();
        let start = self.next_sample_start();
        #[cfg(all(test, not(herd_loom)))]
        {
            let [named, len, count] = &self.prefetched;
            named.store(start as u64, std::sync::atomic::Ordering::Relaxed);
            len.store(self.len() as u64, std::sync::atomic::Ordering::Relaxed);
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let end = start + samples.clamp(1, self.len());
        // One prefetch per line, and the window's last. (One per pair of lines, leaving the
        // neighbour to the processor's pair fetch, measured slower at 1M entries: 711 against
        // 670 ns per insert at capacity.)
        let stride = (64 / std::mem::size_of::<Slot<K, V>>()).max(1);
        let mut i = start;
        while i < end {
            prefetch(base.wrapping_add(i));
            i += stride;
        }
        prefetch(base.wrapping_add(end - 1));
    }

    /// Tests: the eviction's first draw `start` is the window the last prefetch named, if one
    /// is pending (nothing otherwise).
    #[inline(always)]
    fn check_prefetched(&self, start: usize) {
        #[cfg(all(test, not(herd_loom)))]
        {
            let [named, len, _] = &self.prefetched;
            let named = named.swap(u64::MAX, std::sync::atomic::Ordering::Relaxed);
            let then = len.load(std::sync::atomic::Ordering::Relaxed);
            assert!(
                named == u64::MAX || then != self.len() as u64 || named == start as u64,
                "prefetched window {named}, drawn {start} (length {then})"
            );
        }
        #[cfg(not(all(test, not(herd_loom))))]
        let _ = start;
    }

    /// Where the next eviction's window of samples starts (its first draw, not yet drawn).
    #[inline]
    pub(crate) fn next_sample_start(&self) -> usize {
        self.rng.peek_below(self.len())
    }

    /// Picks an eviction victim other than `exclude`: an already-dead sample at once, otherwise the
    /// best of `samples` random entries merged with the candidate pool. O(samples + pool), never a
    /// walk.
    pub(crate) fn choose_victim(
        &mut self,
        now: u64,
        cfg: &ShardConfig,
        exclude: Option<At>,
    ) -> Option<At> {
        let len = self.len();
        if len == 0 || (len == 1 && exclude.is_some()) {
            return None;
        }
        let mut best: Option<(u64, At)> = None;
        // One random start and the entries after it (wrapping), as Redis's `dictGetSomeKeys` walks
        // consecutive buckets: the samples share a few adjacent cache lines instead of each
        // costing a miss of its own (at 1M entries the per-sample misses were half the cost of an
        // insert at capacity).
        let mut draw = self.rng.below(len);
        self.check_prefetched(draw);
        // Never more than the table holds: the window walk below wraps, and more samples than
        // entries only re-reads them (found by review: `samples(usize::MAX)` overflowed
        // `draw + samples`, a panic, or walked for ever under the shard's write lock).
        let samples = cfg.samples.clamp(1, len);
        if exclude.is_none() && draw + samples <= self.slots.len() {
            // The common case, a window inside the value array with nothing to skip: one pass
            // over a slice, with no per-sample array choice or bounds check (at 10K entries
            // this loop was a third of an insert's instructions).
            let (slots, pool) = (&self.slots[draw..draw + samples], &mut self.pool);
            let pooled = pool.is_enabled();
            let mut bar = pool.bar();
            for (offset, s) in slots.iter().enumerate() {
                #[cfg(all(test, not(herd_loom)))]
                self.eviction_reads
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let at = At::Value(draw + offset);
                if now >= s.usable_until(cfg.swr_ms) {
                    return Some(at);
                }
                let rank = rank_of(s.expires_at, s.last_access.load(Ordering::Relaxed), now);
                if pooled {
                    if rank < bar {
                        pool.admit(Candidate {
                            freq: 0,
                            rank,
                            idx: at.encode(),
                        });
                        bar = pool.bar();
                    }
                } else if best.is_none_or(|(r, _)| rank < r) {
                    best = Some((rank, at));
                }
            }
            return self.settle_victim(best, now, exclude);
        }
        for _ in 0..samples {
            let at = self.at_draw(draw);
            draw += 1;
            if draw == len {
                draw = 0;
            }
            if Some(at) == exclude {
                continue;
            }
            if self.is_dead(at, now, cfg.swr_ms) {
                return Some(at);
            }
            let rank = self.rank(at, now);
            if self.pool.is_enabled() {
                self.pool.offer(Candidate {
                    rank,
                    idx: at.encode(),
                    freq: 0,
                });
            } else if best.is_none_or(|(r, _)| rank < r) {
                best = Some((rank, at));
            }
        }
        self.settle_victim(best, now, exclude)
    }

    /// After the samples: the pool's best candidate that still ranks as recorded (with the pool),
    /// or the best sample `best` (without), or, if every sample was `exclude`, any other entry.
    fn settle_victim(
        &mut self,
        best: Option<(u64, At)>,
        now: u64,
        exclude: Option<At>,
    ) -> Option<At> {
        if self.pool.is_enabled() {
            while let Some(c) = self.pool.pop_best() {
                // The place may hold another entry by now (see `pool.rs`): whatever is there is
                // evicted if it ranks as low as recorded or beats every other candidate.
                let at = At::decode(c.idx);
                if !self.holds(at) || Some(at) == exclude {
                    continue;
                }
                let rank = self.rank(at, now);
                if rank <= c.rank || self.pool.best_rank().is_none_or(|b| rank <= b) {
                    return Some(at);
                }
                // Touched (or refilled) since it was pooled: re-rank it and look again.
                self.pool.offer(Candidate {
                    rank,
                    idx: c.idx,
                    freq: 0,
                });
            }
        } else if let Some((_, at)) = best {
            return Some(at);
        }
        // Every sample hit `exclude` (tiny shards): take any other entry.
        (0..self.len())
            .map(|r| self.at_draw(r))
            .find(|&at| Some(at) != exclude)
    }

    /// Evicts one victim other than `keep`, keeping `keep` pointed at its entry if the
    /// swap-remove moved it.
    pub(crate) fn evict_one(
        &mut self,
        now: u64,
        cfg: &ShardConfig,
        keep: &mut Option<At>,
    ) -> Option<Removed<K, V>> {
        let victim = if self.adaptive.is_some() {
            match self.adaptive_pick(now, cfg, *keep, None)? {
                Pick::Evict { at, .. } => at,
                Pick::Decline => return None,
            }
        } else {
            self.choose_victim(now, cfg, *keep)?
        };
        Some(self.remove_keeping(victim, keep))
    }

    /// [`remove_at`](Self::remove_at), keeping `keep` pointed at its entry if the swap-remove
    /// moved it.
    pub(crate) fn remove_keeping(&mut self, victim: At, keep: &mut Option<At>) -> Removed<K, V> {
        let removed = self.remove_at(victim);
        // The array's last entry moved into the victim's place; after the removal the array's
        // length is that last place.
        *keep = match (victim, *keep) {
            (At::Value(i), Some(At::Value(k))) if k == self.slots.len() => Some(At::Value(i)),
            (At::Error(i), Some(At::Error(k))) if k == self.errors.len() => Some(At::Error(i)),
            (_, keep) => keep,
        };
        removed
    }

    /// The adaptive policy's eviction (`adaptive.rs`; the table must have its state): samples
    /// `cfg.samples` adjacent entries into the window's and main's pools (demoting the oldest
    /// protected sample while protected entries hold too much of main), then picks per the
    /// window's target. `newcomer` is the count of the new key being made room for (what
    /// [`State::on_miss`] returned for it), if it may still be refused. Records the ghost of
    /// whatever leaves. O(samples + pools).
    pub(crate) fn adaptive_pick(
        &mut self,
        now: u64,
        cfg: &ShardConfig,
        exclude: Option<At>,
        newcomer: Option<u8>,
    ) -> Option<Pick> {
        let len = self.len();
        if len == 0 || (len == 1 && exclude.is_some()) {
            return None;
        }
        let mut st = self.adaptive.take()?;
        let pick = self.adaptive_pick_with(&mut st, now, cfg, exclude, newcomer);
        self.adaptive = Some(st);
        pick
    }

    fn adaptive_pick_with(
        &mut self,
        st: &mut State,
        now: u64,
        cfg: &ShardConfig,
        exclude: Option<At>,
        newcomer: Option<u8>,
    ) -> Option<Pick> {
        let len = self.len();
        let start = self.rng.below(len);
        self.check_prefetched(start);
        let samples = cfg.samples.max(1).min(len);
        let mut draw = start;
        let (mut main, mut protected) = (0u32, 0u32);
        let mut oldest_protected: Option<(u64, usize)> = None;
        for _ in 0..samples {
            let at = self.at_draw(draw);
            draw = if draw + 1 == len { 0 } else { draw + 1 };
            if Some(at) == exclude {
                continue;
            }
            if self.is_dead(at, now, cfg.swr_ms) || self.idle_expired(at, now) {
                // Expired: it leaves with no ghost, and the newcomer fills in as while filling.
                return Some(Pick::Evict {
                    at,
                    window: (st.window_len as f64) < st.target,
                });
            }
            if let At::Value(i) = at {
                let w = self.slots[i].last_access.load(Ordering::Relaxed);
                if w & WINDOW == 0 {
                    main += 1;
                    if w & PROTECTED != 0 {
                        protected += 1;
                        if oldest_protected.is_none_or(|(o, _)| w & STAMP < o) {
                            oldest_protected = Some((w & STAMP, i));
                        }
                    }
                }
            } else {
                main += 1;
            }
        }
        if st.note_sample(main, protected)
            && let Some((_, i)) = oldest_protected
        {
            self.slots[i].set_flag(PROTECTED, false);
        }
        let mut draw = start;
        for _ in 0..samples {
            let at = self.at_draw(draw);
            draw = if draw + 1 == len { 0 } else { draw + 1 };
            if Some(at) == exclude {
                continue;
            }
            let rank = self.rank(at, now);
            self.offer_in_its_region(st, at, rank);
        }
        // A target below the window's length (the miniature simulations lowered the share)
        // is reached by demoting the window's oldest entries into main, up to 4 per eviction:
        // the duel below keeps the window's length, so without this a falling share would
        // never be reached.
        let target = st.target_len();
        let mut demoted = 0;
        while st.window_len > target && demoted < 4 {
            let Some(c) = self.settle_region(st, true, now, exclude) else {
                break;
            };
            self.promote(st, c, now);
            demoted += 1;
        }
        let pick = if st.window_len >= target {
            let c = self.settle_region(st, true, now, exclude);
            let v = self.main_victim(st, now, exclude);
            match (c, v) {
                // Main's victim expired or went idle since it was pooled (it can never be
                // served again): it leaves without a duel, whatever its count, and the
                // window's candidate, taken from its pool for the duel, goes back to it.
                (c, Some(v)) if self.is_dead(v, now, cfg.swr_ms) || self.idle_expired(v, now) => {
                    if let Some(c) = c {
                        let rank = self.rank(c, now);
                        st.window_pool.offer(Candidate {
                            rank,
                            idx: c.encode(),
                            freq: 0,
                        });
                    }
                    Pick::Evict {
                        at: v,
                        window: (st.window_len as f64) < st.target,
                    }
                }
                (Some(c), Some(v)) => {
                    if self.count_at(st, c) > self.victim_frequency(st, v) {
                        // The window's candidate joins main; main's victim leaves.
                        self.promote(st, c, now);
                        Pick::Evict {
                            at: v,
                            window: true,
                        }
                    } else {
                        // The victim won: it stays pooled, the one the next duel must beat
                        // (as moka's LRU head stays put), so a loop's newcomers keep losing.
                        self.repool(st, v, now);
                        Pick::Evict {
                            at: c,
                            window: true,
                        }
                    }
                }
                (None, Some(v)) => match newcomer {
                    // No window entry to duel: the newcomer duels main's victim itself.
                    Some(f) if f <= self.victim_frequency(st, v) => {
                        self.repool(st, v, now);
                        Pick::Decline
                    }
                    _ => Pick::Evict {
                        at: v,
                        window: false,
                    },
                },
                (Some(c), None) => Pick::Evict {
                    at: c,
                    window: true,
                },
                (None, None) => Pick::Evict {
                    at: self.any_but(exclude)?,
                    window: true,
                },
            }
        } else {
            let v = match self.main_victim(st, now, exclude) {
                Some(v) => v,
                None => match self.settle_region(st, true, now, exclude) {
                    Some(v) => v,
                    None => self.any_but(exclude)?,
                },
            };
            Pick::Evict {
                at: v,
                window: true,
            }
        };
        if let Pick::Evict { at, .. } = pick {
            self.fold(st, at);
        }
        Some(pick)
    }

    /// Whether `at` is a window entry (cached errors are always main).
    #[inline]
    fn in_window(&self, at: At) -> bool {
        matches!(at, At::Value(i) if self.slots[i].flags() & WINDOW != 0)
    }

    /// Main's victim: of the oldest pooled main candidates (as many as the miniature
    /// simulations chose, [`LFU_PICK`] at most), the least frequent
    /// (the oldest among equals). Recency alone would evict a key of the frequent core that
    /// merely was not hit lately.
    ///
    /// The counts compared are the ones recorded when each candidate was pooled, and only the
    /// chosen one is checked against its entry: one that no longer ranks as recorded (hit,
    /// moved, gone) is settled, as [`settle_region`](Self::settle_region) would, and the pick
    /// starts over. A hit only raises a count, so a candidate hit since it was pooled is
    /// never chosen in the place of a less frequent one; checking every candidate on every
    /// pick instead cost about 400 of an insert's 3,500 instructions (callgrind, 8,000
    /// entries). But a frequent candidate that is never the one picked would stay pooled at
    /// its old rank for good once hit, crowding out real candidates: each pick also checks
    /// one more, in turn ([`check_one_pooled`](Self::check_one_pooled)), so such a candidate
    /// leaves within a pool's length of picks.
    fn main_victim(&mut self, st: &mut State, now: u64, exclude: Option<At>) -> Option<At> {
        self.check_one_pooled(st, now, exclude);
        loop {
            let len = self.pool.len();
            let mut best: Option<(u8, usize)> = None;
            // From the oldest: a later candidate must be strictly less frequent to win.
            for pos in (len.saturating_sub(st.minis.pick().min(LFU_PICK))..len).rev() {
                let f = self.pool.at(pos).freq;
                if best.is_none_or(|(bf, _)| f < bf) {
                    best = Some((f, pos));
                }
            }
            let (_, pos) = best?;
            let c = self.pool.remove(pos);
            let at = At::decode(c.idx);
            if !self.holds(at) || Some(at) == exclude {
                continue;
            }
            let rank = self.rank(at, now);
            if !self.in_window(at) && rank <= c.rank {
                return Some(at);
            }
            // Hit since pooled (its count may have moved too), or its place now holds a
            // window entry.
            self.offer_in_its_region(st, at, rank);
        }
    }

    /// Pools `at` at `rank` in the pool of the region it is in now (window or main).
    fn offer_in_its_region(&mut self, st: &mut State, at: At, rank: u64) {
        if self.in_window(at) {
            st.window_pool.offer(Candidate {
                rank,
                idx: at.encode(),
                freq: 0,
            });
        } else {
            self.offer_main(st, at, rank);
        }
    }

    /// Checks main's pooled candidate at the next place in turn: one that no longer ranks as
    /// recorded (hit, moved, gone) is settled as [`main_victim`](Self::main_victim) settles
    /// the one it picks.
    fn check_one_pooled(&mut self, st: &mut State, now: u64, exclude: Option<At>) {
        let len = self.pool.len();
        if len == 0 {
            return;
        }
        st.pool_check = (st.pool_check + 1) % len;
        let pos = st.pool_check;
        let c = self.pool.at(pos);
        let at = At::decode(c.idx);
        let held = self.holds(at) && Some(at) != exclude;
        if held && !self.in_window(at) && self.rank(at, now) <= c.rank {
            return;
        }
        self.pool.remove(pos);
        if held {
            let rank = self.rank(at, now);
            self.offer_in_its_region(st, at, rank);
        }
    }

    /// A main victim's count in a duel, with the idle decay (`State::victim_frequency`).
    fn victim_frequency(&self, st: &State, at: At) -> u8 {
        let stamp = match at {
            At::Value(i) => self.slots[i].last_access.load(Ordering::Relaxed) & STAMP,
            At::Error(i) => self.errors[i].stored_at,
        };
        st.victim_frequency(self.count_at(st, at), stamp)
    }

    /// The policy's count of `at`: a value's resident count, the sketch's estimate of a cached
    /// error's key (errors keep no count of their own).
    #[inline]
    fn count_at(&self, st: &State, at: At) -> u8 {
        match at {
            At::Value(i) => self.slots[i].resident_count(st.sketch.ages()),
            At::Error(_) => st.sketch.frequency(self.hash_of(at)),
        }
    }

    /// Folds the resident count of `at`, which the policy evicts, back into the sketch: the
    /// key is remembered as if its hits had been recorded.
    fn fold(&self, st: &State, at: At) {
        if let At::Value(i) = at {
            let count = self.slots[i].resident_count(st.sketch.ages());
            if count > 0 {
                st.sketch.fold_exclusive(self.hash_of(at), count);
            }
        }
    }

    /// Offers main entry `at` to main's pool at `rank`, with its count if the pool takes it
    /// (the count is read only then: most samples are turned away by the bar).
    #[inline]
    fn offer_main(&mut self, st: &State, at: At, rank: u64) {
        if rank < self.pool.bar() {
            let freq = self.count_at(st, at);
            self.pool.admit(Candidate {
                rank,
                idx: at.encode(),
                freq,
            });
        }
    }

    /// Puts `at` back in main's pool at its current rank.
    fn repool(&mut self, st: &State, at: At, now: u64) {
        let rank = self.rank(at, now);
        self.offer_main(st, at, rank);
    }

    /// Moves the window entry at `at` to main, pooling it there.
    fn promote(&mut self, st: &mut State, at: At, now: u64) {
        if let At::Value(i) = at {
            self.slots[i].set_flag(WINDOW, false);
            st.window_len -= 1;
            let rank = self.rank(at, now);
            self.offer_main(st, at, rank);
        }
    }

    /// The best pooled candidate of the window (`window`) or main that still ranks as recorded;
    /// a pooled place now holding an entry of the other region moves to that region's pool.
    fn settle_region(
        &mut self,
        st: &mut State,
        window: bool,
        now: u64,
        exclude: Option<At>,
    ) -> Option<At> {
        loop {
            let pool = if window {
                &mut st.window_pool
            } else {
                &mut self.pool
            };
            let c = pool.pop_best()?;
            let at = At::decode(c.idx);
            if !self.holds(at) || Some(at) == exclude {
                continue;
            }
            let rank = self.rank(at, now);
            if self.in_window(at) != window {
                if window {
                    self.offer_main(st, at, rank);
                } else {
                    st.window_pool.offer(Candidate {
                        rank,
                        idx: c.idx,
                        freq: 0,
                    });
                }
                continue;
            }
            let fresh = Candidate {
                rank,
                idx: c.idx,
                freq: c.freq,
            };
            let pool = if window {
                &mut st.window_pool
            } else {
                &mut self.pool
            };
            if rank <= c.rank || pool.best_rank().is_none_or(|b| rank <= b) {
                return Some(at);
            }
            if window {
                pool.offer(fresh);
            } else {
                // Hit since pooled: its count may have moved too.
                self.offer_main(st, at, rank);
            }
        }
    }

    /// Any entry but `exclude` (when both pools came up empty: tiny shards).
    fn any_but(&mut self, exclude: Option<At>) -> Option<At> {
        let len = self.len();
        let start = self.rng.below(len);
        (0..len)
            .map(|r| self.at_draw((start + r) % len))
            .find(|&at| Some(at) != exclude)
    }

    /// Counts one entry read by eviction (test builds only; nothing otherwise).
    #[inline(always)]
    fn note_eviction_read(&self) {
        #[cfg(all(test, not(herd_loom)))]
        self.eviction_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The weight of the entry at `at` (a cached error weighs 1).
    pub(crate) fn weight_of(&self, at: At) -> u64 {
        match at {
            At::Value(i) if self.columns.weighted => self.weights[i],
            At::Value(_) => 1,
            At::Error(_) => 1,
        }
    }

    /// Removes every entry past its TTL and stale window. O(entries).
    pub(crate) fn remove_dead(&mut self, now: u64, swr_ms: u64) -> Vec<Removed<K, V>> {
        let mut removed = Vec::new();
        // From the end: a swap-remove only moves an entry that was already checked.
        for i in (0..self.errors.len()).rev() {
            if self.is_dead(At::Error(i), now, swr_ms) {
                removed.push(self.remove_at(At::Error(i)));
            }
        }
        for i in (0..self.slots.len()).rev() {
            if self.is_dead(At::Value(i), now, swr_ms) {
                removed.push(self.remove_at(At::Value(i)));
            }
        }
        removed
    }

    /// Gives back the memory of entries a shrink removed: arrays and index whose room is more
    /// than twice what the shard holds and is expected to hold (`share`, without a weigher)
    /// are shrunk to that
    /// (the index rehashes what it keeps). Without it a cache shrunk from 1M entries to 1,000
    /// kept the arrays of 1M, so a memory-pressure watcher that shrank it saw no memory come
    /// back. O(entries), under the shard's lock: for `set_capacity`, not for a hot path.
    pub(crate) fn compact(&mut self, share: usize) {
        // `share` counts units of capacity: entries, or weight with a weigher, where it says
        // nothing about how many entries the shard will hold (it is only kept room for).
        let keep = if self.columns.weighted {
            self.len()
        } else {
            self.len().max(share)
        };
        fn shrink<T>(v: &mut Vec<T>, keep: usize) {
            if v.capacity() > 2 * keep.max(4) {
                v.shrink_to(keep);
            }
        }
        shrink(&mut self.slots, keep);
        shrink(&mut self.errors, keep);
        shrink(&mut self.weights, keep);
        shrink(&mut self.gates, keep);
        self.idles.compact(keep);
        if self.index.capacity() > 2 * keep.max(4) {
            let (hasher, slots, errors) = (&self.hasher, &self.slots, &self.errors);
            self.index
                .shrink_to(keep, |&j| hash_at(hasher, slots, errors, j));
        }
    }

    /// Empties the table. Returns the entries, to be dropped after the lock is released.
    pub(crate) fn take_all(&mut self) -> (Vec<Slot<K, V>>, Vec<ErrorSlot<K>>) {
        self.index.clear();
        self.weights = Vec::new();
        self.gates = Vec::new();
        self.clear_idles();
        self.weight = 0;
        self.pool.clear();
        if let Some(st) = &mut self.adaptive {
            st.window_len = 0;
            st.window_pool.clear();
        }
        (
            std::mem::take(&mut self.slots),
            std::mem::take(&mut self.errors),
        )
    }

    /// The place of main's best pooled candidate (tests).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn best_pooled(&self) -> Option<At> {
        let len = self.pool.len();
        (len > 0).then(|| At::decode(self.pool.at(len - 1).idx))
    }

    /// Main's pooled candidates that no longer rank as recorded: their entry was hit since
    /// (tests).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn stale_pooled(&self, now: u64) -> usize {
        (0..self.pool.len())
            .map(|pos| self.pool.at(pos))
            .filter(|c| {
                let at = At::decode(c.idx);
                self.holds(at) && !self.in_window(at) && self.rank(at, now) > c.rank
            })
            .count()
    }

    /// Capacity of the slot array (tests: it never outgrows the shard's capacity).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn slot_capacity(&self) -> usize {
        self.slots.capacity()
    }
}
