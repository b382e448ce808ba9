//! The adaptive policy (`Admission::Adaptive`, the default since issue 17): a sampled W-TinyLFU whose
//! window share is chosen by miniature simulations (`minisim.rs`), with a sampled SLRU main
//! space. Modelled first in `benches/src/adaptive.rs` (`Config::minisim()`, the first candidate
//! that meets every cell of the hit-ratio tables); this file holds its per-shard state and its
//! per-thread hit buffers, `table.rs` its eviction decisions.
//!
//! Per entry, in the top 12 bits of the slot's recency stamp word, so the policy adds no bytes
//! per entry and a hit reads them with the stamp: two flags ([`WINDOW`], [`PROTECTED`]) and a
//! *resident count* ([`COUNT`], 0 to 16, with the sketch's halvings mod 32 when it was written,
//! [`AGE`]). A hit raises its entry's count instead of recording the key in the sketch (as
//! quick_cache's and S3-FIFO's entries count their hits): the sketch sees only misses; a new
//! entry's count starts at the sketch's estimate of its key, an evicted entry folds its count
//! back into the sketch (so a returning key is remembered as if its hits had been recorded),
//! and a count halves with every aging of the sketch. The lab measured the two designs level
//! (`policylab --cand minisim,resident=1`: worst cell -0.52 against -0.53, average 58.14
//! against 58.11); the store's get stops touching the sketch, a random cache line per hit
//! (callgrind, 8,000 entries: get 515 -> 378 instructions).
//! Per shard, under the shard's write lock ([`State`]): a window candidate pool beside the
//! table's main pool, the window's length and target (the simulations' share of the shard's
//! capacity), a frequency sketch (8 counters per row per entry of capacity, halved every
//! `24 x capacity` records that raised a counter, hits that raised a resident count included)
//! and a request clock with checkpoints that turn a recency stamp into the requests since it
//! (for the idle decay).
//!
//! An eviction at the target duels the oldest window candidate against main's victim: the
//! least frequent of the 12 oldest pooled main candidates (all 8 of main's pool with the
//! default [`ADAPTIVE_POOL_SIZE`](crate::ADAPTIVE_POOL_SIZE), as many as the simulations'
//! winning copy picks from), its count halved per `8 x capacity`
//! requests it has been idle (a hot set that moved on keeps high counts until the sketch ages;
//! its idle time tells at once). A victim that wins stays pooled, so the next duel is against
//! it again (a loop's newcomers keep losing, as moka's LRU head stays put). A window above its
//! target demotes its oldest entries into main, up to 4 per eviction.
//!
//! A hit writes its entry's own stamp word while its count rises (none once the count is 16,
//! at most 16 per aging) or to protect it (a main entry's first hit), and counts itself in its
//! thread's [`HitBuffer`] for the shard, where it also appends the key's hash if the miniature
//! simulations sample it (one key in `max(4, capacity / 1000)`, none while they rest:
//! `minisim.rs`). Nothing shared is written
//! but once per [`HIT_BUFFER`] sampled hits of a thread or [`DRAIN_HITS`] hits in all
//! (while the simulations rest, the hits still reach the request clock): the hit that fills the buffer drains
//! it under the shard's write lock if that is free at once (`ShardLock::try_write`), else the
//! buffer drops hashes until the thread's next insert into the shard drains it under the
//! write lock the insert takes anyway. Draining full buffers was worth 0.25 and 0.6 points on
//! a loop 10% longer than the cache (90.60 -> 90.85 at 1,000 entries, 89.84 -> 90.44 at
//! 10,000, 8 shards 88.61 -> 90.40), whose hits come in runs of a capacity between inserts
//! (measured when the buffers held every hit's hash for the sketch).
//!
//! Where the store departs from the lab's model (within 0.15 point per cell, `hitratio
//! --only adaptive`, one shard against the model's row):
//! - a miss is recorded (sketch, simulations, request count) by the insert of the new key, not
//!   by the lookup that missed: a miss nobody fills changes nothing, and a plain insert counts;
//! - hits are counted per (thread, shard) and added to the request clock and the sketch's
//!   aging count when the buffer drains; a thread without a tally stripe of its own buffers
//!   nothing (its hits still count as recency, in the entry's flags and its count);
//! - the simulations are fed under a `try_lock` (a shard that finds another feeding drops its
//!   samples) and see requests in the order the shards' drains deliver them;
//! - the idle decay counts a shard's requests from checkpoints (every `capacity / 8` requests,
//!   256 kept), not per request;
//! - an expired sample is evicted at once and the newcomer enters the window only while the
//!   window is below its target (as while filling);
//! - the window's target counts entries of the shard's capacity share; weights are ignored by
//!   the policy (they still bound the shard through the budget);
//! - evictions without a newcomer (a capacity shrink, room for another shard's write) take
//!   main's victim below the target and duel as usual at it, never refusing.
//!
//! Memory beyond sampled LRU's: per entry, nothing in the slot (the count shares the stamp
//! word, whose 52 low bits keep the stamp); the sketch (4 rows of 4-bit counters over the next
//! power of two of 8 x capacity, 16 to 32 bytes, plus a doorkeeper of 32 bits, 4 to 8 bytes
//! after rounding: 21.3 bytes per entry in all at 1M entries over 8 shards; with a
//! weigher, sized for at most 2^16 entries a shard, the share being in weight units); per
//! shard, 4 KB of checkpoints; per cache, the simulations (`minisim.rs`: 3 copies of at most
//! 1,000 simulated entries of 24 bytes, each with its own 20 KB sketch, and one index of the
//! keys they hold) and a 128-byte hit
//! buffer per (tally stripe, shard): (2P + 1) x 4P x 128 bytes with the default shard count on
//! P cores (5 KB at 2 cores, 0.3 MB at 16, 4.2 MB at 64; 384 bytes each while every hit's hash
//! was buffered for the sketch, 12.7 MB at 64 cores).

use std::collections::VecDeque;
use std::sync::Arc;

pub(crate) use crate::admission::MAX_FREQUENCY;
use crate::minisim::{IDLE, MiniSims, RestClock, SKETCH_PERIOD, SKETCH_WIDTH};
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
/// Where the entry's resident count (0 to [`MAX_FREQUENCY`]) sits in the stamp word.
const COUNT_SHIFT: u32 = 57;
/// Stamp-word bits of the resident count.
pub(crate) const COUNT: u64 = 0x1F << COUNT_SHIFT;
/// Where the sketch's halvings (mod 32) when the count was written sit in the stamp word.
const AGE_SHIFT: u32 = 52;
/// Stamp-word bits of the count's age.
pub(crate) const AGE: u64 = 0x1F << AGE_SHIFT;
/// Everything the policy keeps in the stamp word beside the stamp.
pub(crate) const META: u64 = FLAGS | COUNT | AGE;
/// The recency stamp (coarse-clock milliseconds: 52 bits last 142,000 years) under the
/// policy's bits.
pub(crate) const STAMP: u64 = !META;

/// The resident count kept in stamp word `w`, halved once per sketch aging since it was
/// written (`ages`: the sketch's halvings now). The age is kept mod 32: a count not written
/// for 32 agings (768 capacities of requests) reads as if written 32 agings later, which the
/// idle decay of a duel covers (it has halved such a victim's count to 0 long before).
#[inline]
pub(crate) fn resident_count(w: u64, ages: u64) -> u8 {
    let count = ((w & COUNT) >> COUNT_SHIFT) as u8;
    let since = ages.wrapping_sub(w >> AGE_SHIFT) & 0x1F;
    count.checked_shr(since as u32).unwrap_or(0)
}

/// Stamp word `w` with resident count `count`, written at `ages` halvings.
#[inline]
pub(crate) fn with_count(w: u64, count: u8, ages: u64) -> u64 {
    (w & !(COUNT | AGE)) | (u64::from(count) << COUNT_SHIFT) | ((ages & 0x1F) << AGE_SHIFT)
}

/// Sampled hashes a thread buffers per shard before a drain (the hit that fills the buffer,
/// or the thread's next insert into the shard): 8 keep a buffer in one 128-byte block, and
/// with one key in 4 or more sampled a drain (a `try_write` of the shard lock) comes at most
/// once per 32 hits of a thread, as when every hit's hash was buffered, 32 of them.
pub(crate) const HIT_BUFFER: usize = 8;
/// Hits a thread counts per shard before a drain, sampled or not (the hit that reaches it
/// drains, as one that fills the buffer): one `try_write` per 256 hits of a thread.
pub(crate) const DRAIN_HITS: u64 = 256;
/// Protected share of the main space above which sampling demotes (Caffeine's 80%).
const PROTECTED_SHARE: f64 = 0.8;
/// Request-clock checkpoints kept per shard for the idle decay: one every `capacity / 8`
/// requests, so 256 cover 32 capacities (a count of 15 has halved to 0 after 4 x 8).
const CHECKPOINTS: usize = 256;

/// One thread's buffered hits on one shard: written only by that thread (plain loads and
/// stores), drained by that thread under the shard's write lock. It holds the hashes the
/// miniature simulations sample (one hit in `max(4, capacity / 1000)`) and counts the rest.
#[derive(Debug)]
pub(crate) struct HitBuffer {
    len: AtomicU64,
    /// Hits since the last drain, sampled or not (the idle decay's request clock counts
    /// them).
    hits: AtomicU64,
    /// Hits that raised their entry's resident count since the last drain (they count toward
    /// the sketch's aging, as the records that raised a counter did).
    raised: AtomicU64,
    hashes: [AtomicU64; HIT_BUFFER],
}

impl HitBuffer {
    fn new() -> Self {
        Self {
            len: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            raised: AtomicU64::new(0),
            hashes: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Counts a hit that raised its entry's resident count (`raised`) or not, and buffers its
    /// hash if the simulations sample it (`sampled`); true if this hit filled the buffer (the
    /// caller then drains it, if it can take the write lock at once).
    #[inline]
    pub(crate) fn push(&self, raised: bool, sampled: Option<u64>) -> bool {
        let hits = self.hits.load(Ordering::Relaxed) + 1;
        self.hits.store(hits, Ordering::Relaxed);
        // Added, not branched on: whether a hit raised its count depends on the entry's word,
        // a cache miss at 1M entries (see `Slot::restamp`).
        self.raised.store(
            self.raised.load(Ordering::Relaxed) + u64::from(raised),
            Ordering::Relaxed,
        );
        let Some(hash) = sampled else {
            // Full of hits alone: while the simulations rest nothing is sampled, and a thread
            // that only reads would otherwise never add its hits to the request clock and the
            // sketch's aging (the idle decay and the aging would slow down for the rest).
            return hits == DRAIN_HITS;
        };
        let len = self.len.load(Ordering::Relaxed) as usize;
        if len < HIT_BUFFER {
            self.hashes[len].store(hash, Ordering::Relaxed);
            self.len.store(len as u64 + 1, Ordering::Relaxed);
            return len + 1 == HIT_BUFFER;
        }
        false
    }

    /// Empties the buffer into `state` (its owner thread, under the shard's write lock),
    /// appending its sampled hashes to `sampled`. The hits are not recorded in the sketch:
    /// they raised their entries' resident counts instead.
    fn drain_into(&self, state: &mut State, sampled: &mut Sampled) {
        let len = self.len.load(Ordering::Relaxed) as usize;
        for h in &self.hashes[..len.min(HIT_BUFFER)] {
            sampled.push(h.load(Ordering::Relaxed));
        }
        let raised = self.raised.load(Ordering::Relaxed);
        if raised > 0 {
            state.sketch.add_exclusive(raised);
            self.raised.store(0, Ordering::Relaxed);
        }
        let hits = self.hits.load(Ordering::Relaxed);
        state.requests += hits;
        if len > 0 {
            self.len.store(0, Ordering::Relaxed);
        }
        if hits > 0 {
            self.hits.store(0, Ordering::Relaxed);
        }
    }
}

/// The sampled hashes of one drain and its miss, fed to the miniature simulations at once.
pub(crate) struct Sampled {
    hashes: [u64; HIT_BUFFER + 1],
    len: usize,
}

impl Sampled {
    fn new() -> Self {
        Self {
            hashes: [0; HIT_BUFFER + 1],
            len: 0,
        }
    }

    fn push(&mut self, hash: u64) {
        if self.len < self.hashes.len() {
            self.hashes[self.len] = hash;
            self.len += 1;
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
    /// The window's target length in entries: the share the miniature simulations chose, of
    /// this shard's capacity.
    pub(crate) target: f64,
    pub(crate) sketch: crate::admission::FrequencySketch,
    /// The cache's miniature simulations (`minisim.rs`), shared by its shards.
    pub(crate) minis: Arc<MiniSims>,
    /// Moving average of the protected share of sampled main entries (nothing counts
    /// protected entries exactly: a hit that protects one would have to write a shared count).
    pub(crate) protected_share: f64,
    /// The place in main's pool that the next eviction checks besides the one it picks
    /// (`Table::main_victim`).
    pub(crate) pool_check: usize,
    /// Requests this shard has recorded (inserted misses, drained hits): the idle decay's
    /// clock.
    pub(crate) requests: u64,
    /// `(stamp milliseconds, requests)` every `capacity / 8` requests, oldest first: turns an
    /// entry's recency stamp into the requests since it.
    checkpoints: VecDeque<(u64, u64)>,
    /// How many of the oldest checkpoints are at least `IDLE x capacity` requests old: a
    /// victim stamped after the last of them has not been idle long enough to halve, so its
    /// duel needs no checkpoint search (kept by [`checkpoint`](Self::checkpoint), which
    /// follows every change of the request clock).
    idle_before: usize,
    /// The simulations' rest as this shard counts it.
    rest: RestClock,
}

impl State {
    /// A policy for a shard share of `capacity`, its sketch sized for `sketch_entries` keys
    /// (`admission::sketch_entries`).
    pub(crate) fn new(
        capacity: u64,
        sketch_entries: u64,
        pool_size: usize,
        minis: Arc<MiniSims>,
    ) -> Self {
        let capacity = crate::admission::policy_capacity(capacity);
        Self {
            capacity,
            window_pool: EvictionPool::new(pool_size),
            window_len: 0,
            target: 0.0,
            sketch: crate::admission::FrequencySketch::shaped(
                sketch_entries,
                SKETCH_PERIOD,
                SKETCH_WIDTH,
                true,
            ),
            minis,
            protected_share: 0.0,
            pool_check: 0,
            requests: 0,
            checkpoints: VecDeque::with_capacity(CHECKPOINTS),
            idle_before: 0,
            rest: RestClock::default(),
        }
    }

    /// A miss of `hash` that is about to insert it at `now` (milliseconds): drains the
    /// thread's buffered hits, records the miss, feeds the miniature simulations, counts the
    /// request and takes the simulations' current share as the window's target. Returns the
    /// new entry's resident count: what the sketch remembers of the key.
    pub(crate) fn on_miss(&mut self, hash: u64, buffer: Option<&HitBuffer>, now: u64) -> u8 {
        let mut sampled = Sampled::new();
        if let Some(b) = buffer {
            b.drain_into(self, &mut sampled);
        }
        let counted = self.sketch.record_exclusive(hash);
        self.sketch.add_exclusive(u64::from(counted));
        if self.minis.sampled(hash) {
            sampled.push(hash);
        }
        self.minis.feed(&sampled.hashes[..sampled.len]);
        self.requests += 1;
        self.minis
            .count_rest(&mut self.rest, self.requests, self.capacity);
        self.checkpoint(now);
        self.target = self.minis.share() * self.capacity as f64;
        self.sketch.frequency(hash)
    }

    /// Drains a full hit buffer outside an insert (a hit that filled it took the write lock).
    pub(crate) fn drain(&mut self, buffer: &HitBuffer, now: u64) {
        let mut sampled = Sampled::new();
        buffer.drain_into(self, &mut sampled);
        self.minis.feed(&sampled.hashes[..sampled.len]);
        self.checkpoint(now);
    }

    fn checkpoint(&mut self, now: u64) {
        let every = (self.capacity / 8).max(1);
        let due = self
            .checkpoints
            .back()
            .is_none_or(|&(_, r)| self.requests >= r + every);
        if due {
            if self.checkpoints.len() == CHECKPOINTS {
                self.checkpoints.pop_front();
                self.idle_before = self.idle_before.saturating_sub(1);
            }
            self.checkpoints.push_back((now, self.requests));
        }
        // The request clock only moves forward, so checkpoints only ever become idle ones.
        let unit = IDLE * self.capacity;
        while let Some(&(_, r)) = self.checkpoints.get(self.idle_before)
            && self.requests - r >= unit
        {
            self.idle_before += 1;
        }
    }

    /// Requests recorded since `stamp` (milliseconds), at most: counted from the first
    /// checkpoint at or after it (so an entry stamped after the last one is not idle yet), or
    /// from the oldest kept if it is older than every checkpoint.
    fn requests_since(&self, stamp: u64) -> u64 {
        let at = self.checkpoints.partition_point(|&(ms, _)| ms < stamp);
        self.checkpoints
            .get(at)
            .map_or(0, |&(_, r)| self.requests - r)
    }

    /// A main victim's count in a duel: its count `f` (resident, or the sketch's for a cached
    /// error), halved per `IDLE x capacity` requests since the victim's `stamp` (a hot set
    /// that moved on leaves entries whose counts say "hot" until the sketch ages; their idle
    /// time says otherwise).
    pub(crate) fn victim_frequency(&self, f: u8, stamp: u64) -> u8 {
        if f == 0 {
            // Nothing to halve, so no checkpoint search (most of a duel's cost: 133 of 167
            // instructions per duel, callgrind at 8,000 entries; -35 per insert there).
            return 0;
        }
        // Stamped after every checkpoint old enough to count a halving (the first checkpoint
        // at or after the stamp, which the search would find, is then younger than a unit):
        // not halved, and no search (most duels; -120 instructions per adaptive insert at
        // 8,000 entries).
        let idle_until = self
            .idle_before
            .checked_sub(1)
            .map(|i| self.checkpoints[i].0);
        if idle_until.is_none_or(|ms| stamp > ms) {
            return f;
        }
        let halvings = self.requests_since(stamp) / (IDLE * self.capacity);
        f.checked_shr(halvings.min(8) as u32).unwrap_or(0)
    }

    /// Re-sizes the policy for a shard share of `capacity` entries (`Cache::set_capacity`):
    /// the sketch is re-shaped and starts empty (counting halvings on, so resident counts keep
    /// their ages: the entries keep what they counted), the window's target follows the share,
    /// the idle decay's unit the capacity. The window's pool and length stay: a window above
    /// its new target is demoted by the next evictions, as when the share falls.
    pub(crate) fn resize(&mut self, capacity: u64, sketch_entries: u64) {
        let capacity = crate::admission::policy_capacity(capacity);
        if capacity == self.capacity {
            return;
        }
        let sketch = crate::admission::FrequencySketch::shaped(
            sketch_entries,
            SKETCH_PERIOD,
            SKETCH_WIDTH,
            true,
        );
        self.sketch = sketch.continuing(&self.sketch);
        self.capacity = capacity;
        // A new unit of idleness: count the idle checkpoints again.
        let unit = IDLE * capacity;
        let requests = self.requests;
        self.idle_before = self
            .checkpoints
            .partition_point(|&(_, r)| requests - r >= unit);
        self.target = self.minis.share() * capacity as f64;
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
        assert_eq!(
            [FLAGS & COUNT, FLAGS & AGE, COUNT & AGE, STAMP & META],
            [0; 4]
        );
        assert_eq!(STAMP | META, u64::MAX);
        assert!(u64::from(MAX_FREQUENCY) <= COUNT >> COUNT_SHIFT);
        // A coarse-clock stamp (milliseconds) stays clear of the flags for millennia.
        let stamp = 100 * 365 * 24 * 3600 * 1000u64;
        assert_eq!((stamp | WINDOW) & STAMP, stamp);
        assert_eq!((stamp | PROTECTED) & FLAGS, PROTECTED);
    }

    fn state(capacity: u64) -> State {
        State::new(capacity, capacity, 16, Arc::new(MiniSims::new(capacity, 1)))
    }

    #[test]
    fn idle_decay_halves_a_victims_count_per_eight_capacities_of_requests() {
        let mut s = state(100);
        assert_eq!(s.victim_frequency(16, 0), 16);
        // One request per millisecond: stamps and the request clock advance together.
        for ms in 1..=800u64 {
            s.on_miss(ms << 32, None, ms);
        }
        // Stamped at 1 ms: 799 requests since, under 8 capacities.
        assert_eq!(s.victim_frequency(16, 1), 16);
        assert_eq!(s.victim_frequency(16, 799), 16);
        for ms in 801..=1700u64 {
            s.on_miss(ms << 32, None, ms);
        }
        // 1,699 requests since 1 ms: over 16 capacities, halved twice.
        assert_eq!(s.victim_frequency(16, 1), 4);
        assert_eq!(s.victim_frequency(16, 1700), 16);
    }

    /// The duel's shortcut (no checkpoint search for a victim stamped after every idle
    /// checkpoint) answers as the search does, as the clock runs, checkpoints fall off the
    /// front and the capacity changes.
    #[test]
    fn the_idle_shortcut_agrees_with_the_checkpoint_search() {
        let searched = |s: &State, f: u8, stamp: u64| {
            let halvings = s.requests_since(stamp) / (IDLE * s.capacity);
            f.checked_shr(halvings.min(8) as u32).unwrap_or(0)
        };
        let mut s = state(40);
        let mut rng = crate::rng::XorShift64::new(9);
        let mut ms = 0u64;
        for step in 0..20_000u64 {
            // Several requests per millisecond, or a gap of a few.
            ms += rng.below(3) as u64;
            s.on_miss(step.wrapping_mul(0x9E37_79B9_7F4A_7C15), None, ms);
            if step % 2_500 == 1_000 {
                let share = 10 + rng.below(120) as u64;
                s.resize(share, share);
            }
            for _ in 0..4 {
                let stamp = rng.below(ms as usize + 2) as u64;
                let f = 1 + rng.below(15) as u8;
                assert_eq!(
                    s.victim_frequency(f, stamp),
                    searched(&s, f, stamp),
                    "step {step}, stamp {stamp}, now {ms}"
                );
            }
        }
        assert!(s.idle_before > 0 && s.checkpoints.len() == CHECKPOINTS);
    }

    #[test]
    fn a_full_hit_buffer_drops_hashes_but_counts_hits() {
        let mut s = state(1_000_000);
        let b = HitBuffer::new();
        for i in 0..40 {
            b.push(i < 10, Some(42));
        }
        // Hits the simulations do not sample are counted, not buffered.
        for _ in 0..60 {
            assert!(!b.push(false, None));
        }
        assert_eq!(b.len.load(Ordering::Relaxed), HIT_BUFFER as u64);
        let count = s.on_miss(7, Some(&b), 1);
        assert_eq!(s.requests, 101);
        // The hits raised resident counts, not the sketch: it holds only the miss (its
        // doorkeeper bit), and counts toward aging the 10 raising hits and the miss.
        assert_eq!(s.sketch.frequency(42), 0);
        assert_eq!((count, s.sketch.frequency(7)), (1, 1));
        assert_eq!(s.sketch.records_for_test(), 11);
        assert_eq!(b.len.load(Ordering::Relaxed), 0, "drained");
        s.on_miss(8, Some(&b), 2);
        assert_eq!(s.requests, 102, "nothing twice");
        assert_eq!(s.sketch.records_for_test(), 12);
    }

    #[test]
    fn a_resident_count_halves_with_each_aging_and_wraps_at_32() {
        let w = with_count(1234 | WINDOW, 16, 7);
        assert_eq!(w & STAMP, 1234);
        assert_eq!(w & FLAGS, WINDOW);
        assert_eq!(resident_count(w, 7), 16);
        assert_eq!(resident_count(w, 8), 8);
        assert_eq!(resident_count(w, 11), 1);
        assert_eq!(resident_count(w, 12), 0);
        assert_eq!(resident_count(w, 7 + 32), 16, "the age is kept mod 32");
        assert_eq!(resident_count(with_count(w, 3, 40), 40), 3);
    }
}
