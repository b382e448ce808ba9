//! The opt-in adaptive policy (`Admission::Adaptive`, issue 17): sampled W-TinyLFU whose
//! window size adapts from ghost hits, with a sampled SLRU main space. Modelled first in
//! `benches/src/adaptive.rs` (`Config::recommended()`); this file holds its per-shard state
//! and its per-thread hit buffers, `table.rs` its eviction decisions.
//!
//! Per entry: two flag bits in the top of the slot's recency stamp word ([`WINDOW`],
//! [`PROTECTED`]), so the policy adds no bytes per entry and a hit reads them with the stamp.
//! Per shard, under the shard's write lock ([`State`]): a window candidate pool beside the
//! table's main pool, the window's length and target (entries, starting at 0), two ghost tables
//! of `(fingerprint, eviction number)` (one per region, [`Ghosts`]), a frequency sketch that
//! halves every `64 x capacity` records, and the density guard's counts.
//!
//! A hit writes nothing shared: it flags its entry protected (a main entry's first hit: the
//! entry's own stamp word, once) and appends the key's hash to its thread's [`HitBuffer`] for
//! the shard (dropped when the 32 places are full); the thread drains its buffer into the
//! sketch at its next insert into the shard, under the write lock it takes anyway.
//!
//! Where the store departs from the lab's model (none moved a hit-ratio cell by more than
//! 0.15 point, `hitratio --only adaptive`, one shard against the model):
//! - a miss is recorded (sketch, ghosts, request count) by the insert of the new key, not by
//!   the lookup that missed: a miss nobody fills changes nothing, and a plain insert counts;
//! - hits are buffered per (thread, shard), so a drain records only hashes of its own shard;
//!   a thread without a tally stripe of its own buffers nothing (its hits still count as
//!   recency, and in the entry's flags);
//! - an expired sample is evicted at once, leaving no ghost, and the newcomer enters the window
//!   only while the window is below its target (as while filling);
//! - the window's target and the guard count entries of the shard's capacity share; weights are
//!   ignored by the policy (they still bound the shard through the budget);
//! - evictions without a newcomer (a capacity shrink, room for another shard's write) take
//!   main's best candidate below the target and duel as usual at it, never refusing.
//!
//! Cost: callgrind, `hitprobe <store> 8000 200000 get` less the same with 0 gets, per get:
//! 164 instructions for the default policy, 188 adaptive, 411 TinyLFU.
//!
//! Memory beyond the default's: per entry, the sketch (as TinyLFU's: 4 rows of 4-bit counters
//! and a doorkeeper over the next power of two of 4 x capacity) and the two ghost tables
//! (8 bytes per slot, the next power of two of 0.1 x capacity each: 1.6 to 3.2 bytes per
//! entry); per cache, a 384-byte hit buffer per (tally stripe, shard): (2P + 1) x 4P x 384
//! bytes with the default shard count on P cores (15 KB at 2 cores, 0.8 MB at 16, 12.7 MB at
//! 64: a large fixed cost for a small cache on a many-core machine, not yet sized down).

use crate::pool::EvictionPool;
use crate::stats::CachePadded;
use crate::sync::Ordering;
use crate::sync::plain::AtomicU64;

/// Stamp-word flag: the entry is in the window.
pub(crate) const WINDOW: u64 = 1 << 63;
/// Stamp-word flag: a main entry hit since it joined main (ranks after every unprotected one).
pub(crate) const PROTECTED: u64 = 1 << 62;
/// Both flags.
pub(crate) const FLAGS: u64 = WINDOW | PROTECTED;
/// The recency stamp (coarse-clock milliseconds) under the flags.
pub(crate) const STAMP: u64 = !FLAGS;

/// Hashes a thread buffers per shard before its next insert drains them.
pub(crate) const HIT_BUFFER: usize = 32;
/// Sketch aging period, in multiples of the shard's capacity (the lab's 64; TinyLFU uses 32).
pub(crate) const SKETCH_PERIOD: u64 = 64;
/// A ghost counts only if the key left its region within this share of the capacity in that
/// region's own evictions.
const REACH: f64 = 0.05;
/// Protected share of the main space above which sampling demotes (Caffeine's 80%).
const PROTECTED_SHARE: f64 = 0.8;

/// Which region an evicted key left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Region {
    Window = 0,
    Main = 1,
}

/// Recently evicted key fingerprints, one direct-mapped table per region, each slot stamped
/// with its region's eviction number, so a return counts only while a region that much larger
/// would still have held the key.
#[derive(Debug)]
pub(crate) struct Ghosts {
    tables: [Vec<(u32, u32)>; 2],
    mask: usize,
    evictions: [u32; 2],
}

impl Ghosts {
    /// About `slots` ghosts per region (a power of two, at least 64).
    pub(crate) fn new(slots: usize) -> Self {
        let n = slots.max(64).next_power_of_two();
        Self {
            tables: [vec![(0, 0); n], vec![(0, 0); n]],
            mask: n - 1,
            evictions: [0; 2],
        }
    }

    #[inline]
    fn fingerprint(hash: u64) -> u32 {
        // Never 0: an empty slot matches nothing.
        (hash >> 32) as u32 | 1
    }

    /// Records an eviction of `hash` from `region`.
    pub(crate) fn insert(&mut self, hash: u64, region: Region) {
        let k = region as usize;
        self.evictions[k] = self.evictions[k].wrapping_add(1);
        self.tables[k][hash as usize & self.mask] = (Self::fingerprint(hash), self.evictions[k]);
    }

    /// If `hash` left a region within that region's last `reach` evictions: which. Forgets
    /// every matching ghost, counted or not.
    pub(crate) fn take(&mut self, hash: u64, reach: u32) -> Option<Region> {
        let fp = Self::fingerprint(hash);
        for (k, region) in [(0, Region::Window), (1, Region::Main)] {
            let slot = &mut self.tables[k][hash as usize & self.mask];
            if slot.0 == fp {
                let (_, at) = std::mem::take(slot);
                if self.evictions[k].wrapping_sub(at) < reach {
                    return Some(region);
                }
            }
        }
        None
    }

    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn evictions(&self, region: Region) -> u32 {
        self.evictions[region as usize]
    }
}

/// One thread's buffered hits on one shard: written only by that thread (plain loads and
/// stores), drained by that thread under the shard's write lock.
#[derive(Debug)]
pub(crate) struct HitBuffer {
    len: AtomicU64,
    /// Hits on main (`[0]`) and window (`[1]`) entries since the last drain (counted even when
    /// the hash is dropped: the density guard sees every hit).
    hits: [AtomicU64; 2],
    hashes: [AtomicU64; HIT_BUFFER],
}

impl HitBuffer {
    fn new() -> Self {
        Self {
            len: AtomicU64::new(0),
            hits: [AtomicU64::new(0), AtomicU64::new(0)],
            hashes: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Buffers a hit on an entry of the window (`window`) or main.
    #[inline]
    pub(crate) fn push(&self, hash: u64, window: bool) {
        let count = &self.hits[usize::from(window)];
        count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        let len = self.len.load(Ordering::Relaxed) as usize;
        if len < HIT_BUFFER {
            self.hashes[len].store(hash, Ordering::Relaxed);
            self.len.store(len as u64 + 1, Ordering::Relaxed);
        }
    }

    /// Empties the buffer into `state` (its owner thread, under the shard's write lock).
    fn drain_into(&self, state: &mut State) {
        let len = self.len.load(Ordering::Relaxed) as usize;
        for h in &self.hashes[..len.min(HIT_BUFFER)] {
            state.sketch.record(h.load(Ordering::Relaxed), None);
        }
        let (m, w) = (
            self.hits[0].load(Ordering::Relaxed),
            self.hits[1].load(Ordering::Relaxed),
        );
        state.window_hits += w;
        state.main_hits += m;
        state.requests += w + m;
        if len > 0 {
            self.len.store(0, Ordering::Relaxed);
        }
        if w > 0 {
            self.hits[1].store(0, Ordering::Relaxed);
        }
        if m > 0 {
            self.hits[0].store(0, Ordering::Relaxed);
        }
    }
}

/// A shard's hit buffers, one per thread stripe of the cache's tally (the same index).
#[derive(Debug)]
pub(crate) struct HitBuffers(Box<[CachePadded<HitBuffer>]>);

impl HitBuffers {
    pub(crate) fn new(stripes: usize) -> Self {
        Self(
            (0..stripes)
                .map(|_| CachePadded(HitBuffer::new()))
                .collect(),
        )
    }

    /// The buffer of the thread whose stripe index is `index`.
    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&HitBuffer> {
        self.0.get(index).map(|b| &b.0)
    }

    /// The address range of buffer `index` (tests: which lines a hit wrote).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn range(&self, index: usize) -> std::ops::Range<usize> {
        let start = std::ptr::from_ref(&self.0[index]) as usize;
        start..start + std::mem::size_of::<CachePadded<HitBuffer>>()
    }
}

/// The policy's per-shard state, under the shard's write lock.
#[derive(Debug)]
pub(crate) struct State {
    /// The shard's expected share of the cache's capacity, in entries.
    pub(crate) capacity: u64,
    pub(crate) window_pool: EvictionPool,
    pub(crate) window_len: u64,
    /// The window's target length in entries (fractional: the guard moves it by shares).
    pub(crate) target: f64,
    pub(crate) ghosts: Ghosts,
    pub(crate) sketch: crate::admission::FrequencySketch,
    /// Moving average of the protected share of sampled main entries (nothing counts
    /// protected entries exactly: a hit that protects one would have to write a shared count).
    pub(crate) protected_share: f64,
    requests: u64,
    window_hits: u64,
    main_hits: u64,
}

impl State {
    pub(crate) fn new(capacity: u64, pool_size: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            window_pool: EvictionPool::new(pool_size),
            window_len: 0,
            target: 0.0,
            ghosts: Ghosts::new((2.0 * REACH * capacity as f64) as usize),
            sketch: crate::admission::FrequencySketch::with_period(capacity, SKETCH_PERIOD),
            protected_share: 0.0,
            requests: 0,
            window_hits: 0,
            main_hits: 0,
        }
    }

    /// A miss of `hash` that is about to insert it: drains the thread's buffered hits, records
    /// the miss, moves the target on a counted ghost, counts the request.
    pub(crate) fn on_miss(&mut self, hash: u64, buffer: Option<&HitBuffer>) {
        if let Some(b) = buffer {
            b.drain_into(self);
        }
        self.sketch.record(hash, None);
        let reach = ((REACH * self.capacity as f64) as u32).max(1);
        match self.ghosts.take(hash, reach) {
            Some(Region::Window) => self.move_target(1.0),
            Some(Region::Main) => self.move_target(-1.0),
            None => {}
        }
        self.requests += 1;
        self.guard();
    }

    fn move_target(&mut self, by: f64) {
        self.target = (self.target + by).clamp(0.0, self.capacity as f64);
    }

    /// Every `capacity` requests: if the window earned fewer hits per entry than main, shrink
    /// it by Caffeine's density step, `min(0.30, 0.03 x |ln ratio|)` of the capacity.
    fn guard(&mut self) {
        if self.requests < self.capacity {
            return;
        }
        let wlen = self.window_len.max(1) as f64;
        let mlen = self.capacity.saturating_sub(self.window_len).max(1) as f64;
        let e =
            ((self.window_hits as f64 + 0.5) / wlen / ((self.main_hits as f64 + 0.5) / mlen)).ln();
        if e < 0.0 {
            self.move_target(-(0.03 * e.abs()).min(0.30) * self.capacity as f64);
        }
        self.requests = 0;
        self.window_hits = 0;
        self.main_hits = 0;
    }

    /// The window's target in whole entries.
    #[inline]
    pub(crate) fn target_len(&self) -> u64 {
        self.target.round() as u64
    }

    /// Folds one eviction sample's protected share (`protected` of `main` sampled main
    /// entries) into the estimate; true if protected entries exceed their share of main.
    pub(crate) fn note_sample(&mut self, main: u32, protected: u32) -> bool {
        if main > 0 {
            let f = f64::from(protected) / f64::from(main);
            self.protected_share += (f - self.protected_share) / 64.0;
        }
        self.protected_share > PROTECTED_SHARE
    }
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use super::*;

    #[test]
    fn flags_and_stamp_share_one_word_without_overlap() {
        assert_eq!(WINDOW & PROTECTED, 0);
        assert_eq!(STAMP & FLAGS, 0);
        assert_eq!(STAMP | FLAGS, u64::MAX);
        // A coarse-clock stamp (milliseconds) stays clear of the flags for millennia.
        let stamp = 100 * 365 * 24 * 3600 * 1000u64;
        assert_eq!((stamp | WINDOW) & STAMP, stamp);
        assert_eq!((stamp | PROTECTED) & FLAGS, PROTECTED);
    }

    #[test]
    fn a_ghost_counts_only_within_reach_of_its_regions_evictions() {
        let mut g = Ghosts::new(64);
        g.insert(0xAAAA_0000_0000_0001, Region::Window);
        // Evictions from main do not age a window ghost.
        for i in 0..100u64 {
            g.insert((i << 32) | 2, Region::Main);
        }
        assert_eq!(g.take(0xAAAA_0000_0000_0001, 5), Some(Region::Window));
        assert_eq!(g.take(0xAAAA_0000_0000_0001, 5), None, "taken once");
        g.insert(0xBBBB_0000_0000_0003, Region::Main);
        for i in 0..5u64 {
            g.insert(((i + 200) << 32) | 4, Region::Main);
        }
        assert_eq!(
            g.take(0xBBBB_0000_0000_0003, 5),
            None,
            "5 evictions ago: out of reach"
        );
        g.insert(0xCCCC_0000_0000_0003, Region::Main);
        assert_eq!(g.take(0xCCCC_0000_0000_0003, 5), Some(Region::Main));
        assert_eq!(g.evictions(Region::Window), 1);
        assert_eq!(g.evictions(Region::Main), 107);
        assert_eq!(g.take(0xDDDD_0000_0000_0009, 1000), None, "never evicted");
    }

    #[test]
    fn ghost_hits_move_the_window_target_by_one_entry() {
        let mut s = State::new(1000, 16);
        s.ghosts.insert(7 << 32, Region::Window);
        s.on_miss(7 << 32, None);
        assert_eq!(s.target, 1.0);
        s.ghosts.insert(8 << 32, Region::Window);
        s.on_miss(8 << 32, None);
        assert_eq!(s.target, 2.0);
        s.ghosts.insert(9 << 32, Region::Main);
        s.on_miss(9 << 32, None);
        assert_eq!(s.target, 1.0);
        for k in 10..20u64 {
            s.ghosts.insert(k << 32, Region::Main);
            s.on_miss(k << 32, None);
        }
        assert_eq!(s.target, 0.0, "never below 0");
    }

    #[test]
    fn the_guard_shrinks_a_window_that_earns_less_per_entry() {
        let mut s = State::new(100, 16);
        s.target = 50.0;
        s.window_len = 50;
        let b = HitBuffer::new();
        // 100 requests: 99 main hits and none in the window, then a miss closes the period.
        for k in 0..99 {
            b.push(k, false);
        }
        s.on_miss(1000, Some(&b));
        // ln((0.5/50) / (99.5/50)) = -5.3: the step is min(0.30, 0.16) of the capacity.
        assert!(
            (s.target - (50.0 - 0.03 * 5.293 * 100.0)).abs() < 0.1,
            "{}",
            s.target
        );
        // A window that earns more per entry is left alone (the guard never grows it).
        let t = s.target;
        for k in 0..99 {
            b.push(k, true);
        }
        s.on_miss(1001, Some(&b));
        assert_eq!(s.target, t);
    }

    #[test]
    fn a_full_hit_buffer_drops_hashes_but_counts_hits() {
        let mut s = State::new(1_000_000, 16);
        let b = HitBuffer::new();
        for _ in 0..40 {
            b.push(42, false);
        }
        s.on_miss(7, Some(&b));
        assert_eq!(s.main_hits, 40);
        // 32 buffered records after the doorkeeper's first: saturated at 15 (+1 doorkeeper).
        assert_eq!(s.sketch.frequency(42), 16);
        assert_eq!(b.len.load(Ordering::Relaxed), 0, "drained");
        s.on_miss(8, Some(&b));
        assert_eq!(s.main_hits, 40, "nothing twice");
    }
}
