//! Miniature simulations that choose the adaptive policy's window share (issue 17).
//!
//! The adaptive policy (`adaptive.rs`) is a sampled W-TinyLFU: a window admits by recency, a
//! sketch guards the main space. How large the window should be depends on the workload: a
//! shut window wins traces with a stable frequent core (P6), a window over the whole cache wins
//! a hot set that keeps moving (exact LRU's best case). No signal read off the cache itself
//! tells the two apart (docs/benchmarks.md lists the detectors tried), so the cache *measures*
//! them instead, as Waldspurger et al. propose ("Cache Modeling and Optimization using
//! Miniature Simulations", ATC 2017; Caffeine's simulator has it as `MiniSimClimber`):
//! three small copies of the policy ([`GRID`]), with fixed window shares of 0, 25 and 100%
//! (session 9 ran 6 shares, at 0, 4, 16, 36, 64 and 100%; the lab and the store meet every
//! cell with 3), replay the requests of one hash bucket in `max(4, capacity / 1000)` at
//! `capacity / that` entries (1,000 for a cache of 4,000 entries or more, a quarter of a
//! smaller one; session 11 tried 500, which halves the copies' work on a small cache: the lab
//! held every cell, the store lost 0.2 point on shift 10%, to -0.48 at one shard). Every 8
//! copy capacities of those sampled requests, the window takes the share of the copy with the
//! fewest misses (each period's plus half the last score: picks with no memory flip between
//! shares and lose). Each copy's main victim is the least frequent of the 12 oldest
//! candidates; sessions 10 to 12 also ran the 0 and 25% shares with the oldest candidate as
//! the victim (and the cache took the winner's pick), for P6 split into shards, but since the
//! newcomer duels and the resident counts (session 10) dropping those copies moved no cell
//! below its old worst at one shard or eight (session 13: 40% less work per sampled request;
//! docs/benchmarks.md). The pick is still published with the share, so a grid may list
//! another.
//!
//! Modelled first in `benches/src/adaptive.rs` (`Config::minisim()`); [`Mini`] is that model
//! with the options it uses, the store's eviction (`table.rs`) but cheaper: 4 adjacent samples
//! plus a pool of 4 per region (the store's: 6 and 8, so a copy's "least frequent of the 12
//! oldest" reads the 4 it has pooled, as the store's reads its 8), a sampled SLRU main space, a sticky victim, idle decay,
//! the adaptive policy's sketch and its resident counts (each copy has its own sketch of its
//! own misses, as the lab's copies do).
//!
//! One [`MiniSims`] per cache, shared by its shards: a shard feeds it the sampled hashes of
//! the requests it records (the misses it inserts and the hits its threads drain), under the
//! shard's write lock, with a `try_lock` (a sample that finds another shard feeding is dropped:
//! the estimate needs a sample of requests, not all of them). The share is published in an
//! atomic word that every shard reads when it evicts (the pick in another). Memory: at most
//! 3 x 1,000 simulated entries of 24 bytes, one index for all copies (a key's place in each:
//! a sampled request is looked up once, not 3 times; at most 3,000 keys) and 3 sketches of
//! 20 KB. Work: 3 simulated accesses per sampled request, so 0.75 per request of a cache
//! under 4,000 entries, 3 per 1,000 requests of a 1M-entry cache, while the copies replay.
//!
//! They rest once their pick has settled (the same copy won [`STABLE_PERIODS`] periods in a
//! row): sampling stops (the bound every hit compares against is 0) for one period of
//! requests, then twice as long after each rest whose next period picks the same copy, up to
//! [`REST_PERIODS`]; a change of pick starts over. Each shard counts the rest on its own
//! request clock (its misses and drained hits, `adaptive.rs`), and the first to reach the end
//! wakes the copies; they then replay a capacity of requests unscored (what they held before
//! the rest is old) before their misses count again. Settled, they replay one period in 9.

use std::collections::HashMap;

use crate::admission::{FrequencySketch, MAX_FREQUENCY};
use crate::pool::{Candidate, EvictionPool};
use crate::rng::XorShift64;
use crate::sync::Ordering;
use crate::sync::plain::AtomicU64;

/// The copies, as (window share, main's victim pick), in the order their seeds are drawn.
/// Window shares 0, 25 and 100%, each with the least frequent of the 12 oldest main
/// candidates as main's victim (the 100% copy has no main space, so no pick runs there).
/// Until session 13 the 0 and 25% shares also ran with the oldest candidate as the victim
/// (five copies); the lab found those two copies won periods (on P3, P6, P12 and the 1% loop)
/// without lifting any cell by more than 0.12 point, and without them the store's worst cell
/// stayed -0.35 at one shard and -0.34 at eight (docs/benchmarks.md, "Session 13").
const GRID: [(f64, usize); 3] = [(0.0, LFU_PICK), (0.25, LFU_PICK), (1.0, LFU_PICK)];
/// How many copies run.
const COPIES: usize = GRID.len();
/// Entries per copy (fewer if the cache is smaller).
const MINI_SIZE: u64 = 1000;
/// The sampling modulus is at least this: a copy holds at most a quarter of the cache, so
/// the copies replay at most 5 / 4 accesses per request of a small cache.
const MIN_RATE: u64 = 4;
/// A pick every this many copy capacities of sampled requests.
const PERIOD: u64 = 8;
/// Each period's score: its misses plus this share of the last score.
const DECAY: f64 = 0.5;
/// The copies rest once this many periods in a row picked the same copy: nothing is sampled
/// (a hit's [`sampled`](MiniSims::sampled) is one compare against 0, and no hit buffer
/// fills) for a rest of requests, then they replay again; the first rest after a change of
/// pick lasts one period, each next one twice the last, up to [`REST_PERIODS`]. Most of the
/// adaptive policy's cost on a small cache is the copies' (`hitprobe` get at 10,000 entries:
/// 23-35 ns with them replaying, 18 without); once settled they replay one period in 9. A
/// fixed rest of 3 periods after 2 agreeing picks lost up to 1.1 points on OLTP at 5,000 to
/// 15,000 blocks and 0.56 on shift 10% (a trace a few periods long whose share drifts); the
/// doubling rest keeps every cell within 0.1 point of replaying all the time but shift 1%
/// at one shard (-0.44 against -0.31 from the best peer; docs/benchmarks.md, "Session 17").
const STABLE_PERIODS: u32 = 3;
/// The longest rest, in periods of requests (a period: `PERIOD` capacities of requests; each
/// shard counts its own, `PERIOD x` its share per period of rest).
pub(crate) const REST_PERIODS: u64 = 8;
/// Adjacent samples and pool size per region of a copy: fewer than the store's (10 and 16
/// when this was measured; 6 and 8 since session 11), as
/// cheaper copies still rank the shares as the store's eviction would (lab, `msamp=4,mpool=4`:
/// every cell still within 0.5, worst shift 1% -0.40 against -0.48 with the store's own) and
/// a copy's miss, most of an insert into a small cache, costs about half as much.
const SAMPLES: usize = 4;
const POOL: usize = 4;
/// A hit rewrites a copy's stamp at most once per this many of its requests (the lab's model
/// of the store's recency resolution).
const RESOLUTION: u64 = 200;
/// The most candidates a pick reads.
pub(crate) const LFU_PICK: usize = 12;
/// A duelling victim's count halves per this many capacities of requests it has been idle.
pub(crate) const IDLE: u64 = 8;
/// Protected share of the main space above which sampling demotes (Caffeine's 80%).
const PROTECTED_SHARE: f64 = 0.8;
/// Sketch aging period (x capacity, counting records that raised a counter) and width
/// (counters per row per entry): the policy's (`adaptive.rs`).
pub(crate) const SKETCH_PERIOD: u64 = 24;
pub(crate) const SKETCH_WIDTH: u64 = 8;
/// Salt and odd multiplier of the sampling hash: a key is sampled when the top bits of
/// `(hash ^ SALT) * SAMPLE_MIX` are small. The store's hash is already uniform (ahash), so one
/// multiply is enough to make the sampled keys unrelated to the bits that pick the shard and
/// the index bucket (the top bits of a product depend on every bit of the hash); the
/// 64-bit finalizer used before cost 9 more instructions on every hit (callgrind).
const SALT: u64 = 0xA5A5_5A5A_C3C3_3C3C;
const SAMPLE_MIX: u64 = 0xD6E8_FEB8_6659_FD93;

/// The copies and the share they chose, shared by a cache's shards.
#[derive(Debug)]
pub(crate) struct MiniSims {
    /// A request is sampled when `fmix(hash) < below` (one in `max(4, capacity / 1000)`; a
    /// compare, not a division: every hit asks). Atomic only for [`resize`](Self::resize).
    below: AtomicU64,
    /// The chosen window share, as `f64` bits.
    share: AtomicU64,
    /// The chosen victim pick (the winning copy's, from [`GRID`]).
    pick: AtomicU64,
    /// Seeds the copies' sampling (kept for a resize).
    seed: u64,
    /// Counts the copies' rests: odd while they rest ([`STABLE_PERIODS`]).
    rest: AtomicU64,
    /// The current rest's length, in periods.
    rest_periods: AtomicU64,
    sims: parking_lot::Mutex<Sims>,
}

/// The copies' state, under the [`MiniSims`] lock.
#[derive(Debug)]
struct Sims {
    minis: [Mini; COPIES],
    /// Where each copy holds a key: one index for all of them (a sampled hit looks its key up
    /// once, not once per copy; [`ABSENT`] where a copy does not hold it).
    index: Index,
    /// Each copy's sketch: as the policy's, it records the copy's misses (its hits raise
    /// resident counts), so the copies' sketches differ.
    sketches: [FrequencySketch; COPIES],
    /// Sampled requests replayed so far: the copies' common clock.
    clock: u64,
    scores: [f64; COPIES],
    misses: [u64; COPIES],
    seen: u64,
    period: u64,
    /// The sampling bound while the copies replay (`MiniSims::below` is 0 while they rest).
    active_below: u64,
    /// The copy the last pick chose, and how many picks in a row chose it.
    last_best: usize,
    stable: u32,
    /// Rests since the pick last changed: each rest is twice the last (1 period first), up
    /// to [`REST_PERIODS`].
    rests: u32,
    /// Sampled requests still to replay without scoring after a rest: the copies refill with
    /// the requests of now before their misses count again (what they held before the rest
    /// favours the copies that keep old entries).
    warmup: u64,
}

impl Sims {
    /// Fresh copies for a cache of `capacity` entries, and the sampling bound (`below`) they
    /// are sized for.
    fn sized(capacity: u64, seed: u64) -> (u64, Self) {
        let capacity = capacity.max(1);
        let rate = (capacity / MINI_SIZE).max(MIN_RATE);
        let size = (capacity / rate).max(1);
        let minis = std::array::from_fn(|c| {
            let (share, pick) = GRID[c];
            Mini::new(size as usize, share, pick, seed ^ ((c as u64 + 1) * 0x9E37))
        });
        let sims = Self {
            minis,
            index: Index::with_capacity_and_hasher(4 * size as usize, MixState),
            sketches: std::array::from_fn(|_| {
                FrequencySketch::shaped(size, SKETCH_PERIOD, SKETCH_WIDTH, true)
            }),
            clock: 0,
            scores: [0.0; COPIES],
            misses: [0; COPIES],
            seen: 0,
            period: PERIOD * size,
            active_below: u64::MAX / rate,
            last_best: 0,
            stable: 0,
            rests: 0,
            warmup: 0,
        };
        (u64::MAX / rate, sims)
    }
}

impl MiniSims {
    /// Copies for a cache of `capacity` entries.
    pub(crate) fn new(capacity: u64, seed: u64) -> Self {
        let (below, sims) = Sims::sized(capacity, seed);
        Self {
            below: AtomicU64::new(below),
            share: AtomicU64::new(0f64.to_bits()),
            pick: AtomicU64::new(GRID[0].1 as u64),
            seed,
            rest: AtomicU64::new(0),
            rest_periods: AtomicU64::new(1),
            sims: parking_lot::Mutex::new(sims),
        }
    }

    /// Re-sizes the copies for a cache now of `capacity` entries (`Cache::set_capacity`): they
    /// start over, empty, at the new size and sampling rate; the window share and victim pick
    /// chosen last stay until their first period ends. Takes the copies' lock (blocking: a
    /// resize runs outside every shard lock, and the shards only `try_lock` it, so nothing
    /// waits on a shard while holding it).
    pub(crate) fn resize(&self, capacity: u64) {
        let mut sims = self.sims.lock();
        let (below, fresh) = Sims::sized(capacity, self.seed);
        *sims = fresh;
        self.below.store(below, Ordering::Relaxed);
        // Fresh copies replay at once (a rest ends here).
        let rest = self.rest.load(Ordering::Relaxed);
        self.rest.store(rest + (rest & 1), Ordering::Relaxed);
    }

    /// Counts a shard's request toward the end of the copies' rest, if they rest: each shard
    /// measures the rest on its own request clock (`requests`, for a share of `capacity`
    /// entries), and the first to reach its end wakes the copies. `clock` is the shard's
    /// record of the rest it last saw.
    #[inline]
    pub(crate) fn count_rest(&self, clock: &mut RestClock, requests: u64, capacity: u64) {
        // Acquire: the rest's length was stored before the rest began (Release, `feed`).
        let rest = self.rest.load(Ordering::Acquire);
        if rest & 1 == 0 {
            return;
        }
        if clock.rest != rest {
            clock.rest = rest;
            clock.wake_at =
                requests + self.rest_periods.load(Ordering::Relaxed) * PERIOD * capacity.max(1);
        } else if requests >= clock.wake_at {
            self.wake(rest);
        }
    }

    /// Ends rest number `rest` (if no other shard has): sampling resumes, and the copies
    /// replay a copy's capacity of requests before their misses count again. A `try_lock`,
    /// as `feed`'s (the caller holds its shard's write lock, and shards never wait for the
    /// copies): if another shard is feeding, the next request past the end wakes them.
    #[cold]
    fn wake(&self, rest: u64) {
        let Some(mut sims) = self.sims.try_lock() else {
            return;
        };
        if self.rest.load(Ordering::Relaxed) == rest {
            sims.warmup = sims.minis[0].capacity as u64;
            self.below.store(sims.active_below, Ordering::Relaxed);
            self.rest.store(rest + 1, Ordering::Relaxed);
        }
    }

    /// Whether the copies rest (tests).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn resting(&self) -> bool {
        self.rest.load(Ordering::Relaxed) & 1 == 1
    }

    /// Whether requests for `hash` are replayed by the copies.
    #[inline]
    pub(crate) fn sampled(&self, hash: u64) -> bool {
        (hash ^ SALT).wrapping_mul(SAMPLE_MIX) < self.below.load(Ordering::Relaxed)
    }

    /// The window share the copies chose last (0 until their first pick).
    #[inline]
    pub(crate) fn share(&self) -> f64 {
        f64::from_bits(self.share.load(Ordering::Relaxed))
    }

    /// How many of the oldest main candidates the victim is the least frequent of, as the
    /// copies chose last (the first copy's until their first choice).
    #[inline]
    pub(crate) fn pick(&self) -> usize {
        self.pick.load(Ordering::Relaxed) as usize
    }

    /// Replays `hashes` (sampled requests, in order) in every copy, unless another shard is
    /// feeding them right now (then they are dropped). Ends a period when one is due.
    pub(crate) fn feed(&self, hashes: &[u64]) {
        if hashes.is_empty() {
            return;
        }
        // Samples buffered before a rest began arrive during it: dropped (scored, they could
        // end a period and start another rest over this one).
        if self.rest.load(Ordering::Relaxed) & 1 == 1 {
            return;
        }
        let Some(mut sims) = self.sims.try_lock() else {
            return;
        };
        let sims = &mut *sims;
        for &h in hashes {
            // Every copy sees every sampled request, so one clock serves them all.
            sims.clock += 1;
            let now = sims.clock;
            let held = sims.index.get(&h).copied().unwrap_or([ABSENT; COPIES]);
            let scored = sims.warmup == 0;
            sims.warmup = sims.warmup.saturating_sub(1);
            for (c, &at) in held.iter().enumerate() {
                let place = Place {
                    index: &mut sims.index,
                    copy: c,
                };
                if !sims.minis[c].access(h, at, now, &sims.sketches[c], place) && scored {
                    sims.misses[c] += 1;
                }
            }
            if !scored {
                continue;
            }
            sims.seen += 1;
            if sims.seen >= sims.period {
                sims.seen = 0;
                let mut best = 0;
                for i in 0..COPIES {
                    sims.scores[i] = DECAY * sims.scores[i] + sims.misses[i] as f64;
                    sims.misses[i] = 0;
                    if sims.scores[i] < sims.scores[best] {
                        best = i;
                    }
                }
                self.share
                    .store(sims.minis[best].share.to_bits(), Ordering::Relaxed);
                self.pick
                    .store(sims.minis[best].pick as u64, Ordering::Relaxed);
                sims.stable = if best == sims.last_best {
                    sims.stable + 1
                } else {
                    sims.rests = 0;
                    1
                };
                sims.last_best = best;
                if sims.stable >= STABLE_PERIODS {
                    // Settled: rest (the shards' request clocks end it, `count_rest`).
                    self.below.store(0, Ordering::Relaxed);
                    let periods = (1u64 << sims.rests.min(16)).min(REST_PERIODS);
                    sims.rests += 1;
                    self.rest_periods.store(periods, Ordering::Relaxed);
                    // Release: a shard that sees the rest sees its length (`count_rest`).
                    let rest = self.rest.load(Ordering::Relaxed);
                    self.rest.store(rest | 1, Ordering::Release);
                    return;
                }
            }
        }
    }

    /// Entries per copy, and one in how many keys the copies sample (tests).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn shape(&self) -> (usize, u64) {
        let size = self.sims.lock().minis[0].capacity;
        (size, u64::MAX / self.below.load(Ordering::Relaxed))
    }

    /// The copies' window shares, victim picks and smoothed scores (tests).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn scores(&self) -> Vec<(f64, usize, f64)> {
        let sims = self.sims.lock();
        sims.minis
            .iter()
            .zip(sims.scores)
            .map(|(m, s)| (m.share, m.pick, s))
            .collect()
    }
}

/// A shard's view of the copies' rest: which rest it last saw, and at which of its requests
/// that rest ends (`MiniSims::count_rest`).
#[derive(Debug, Default)]
pub(crate) struct RestClock {
    rest: u64,
    wake_at: u64,
}

/// Marks a copy that does not hold a key (copies hold at most [`MINI_SIZE`] entries).
const ABSENT: u16 = u16::MAX;

/// The copies' shared index: a key's place in each copy.
type Index = HashMap<u64, [u16; COPIES], MixState>;

/// The index's hasher: its keys are already hashes (the store's), so one multiply spreads
/// them (ahash would hash them again).
#[derive(Debug, Default, Clone, Copy)]
struct MixState;

impl std::hash::BuildHasher for MixState {
    type Hasher = MixHasher;
    fn build_hasher(&self) -> MixHasher {
        MixHasher(0)
    }
}

/// See [`MixState`].
#[derive(Debug)]
struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (x ^ x >> 32).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// One copy's view of the shared index.
struct Place<'a> {
    index: &'a mut Index,
    copy: usize,
}

impl Place<'_> {
    /// The copy now holds `hash` at `slot`.
    fn set(&mut self, hash: u64, slot: usize) {
        debug_assert!(slot < usize::from(ABSENT));
        self.index.entry(hash).or_insert([ABSENT; COPIES])[self.copy] = slot as u16;
    }

    /// The copy no longer holds `hash` (the key leaves the index when no copy holds it).
    fn clear(&mut self, hash: u64) {
        if let Some(held) = self.index.get_mut(&hash) {
            held[self.copy] = ABSENT;
            if held.iter().all(|&p| p == ABSENT) {
                self.index.remove(&hash);
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    hash: u64,
    stamp: u64,
    /// The resident count (`adaptive.rs`) and the sketch's halvings when it was written.
    freq: u8,
    fage: u32,
    window: bool,
    protected: bool,
}

impl Entry {
    /// Eviction rank: recency, protected main entries after every probation one.
    fn rank(&self) -> u64 {
        self.stamp + (u64::from(self.protected) << 40)
    }
}

const MAIN: usize = 0;
const WINDOW: usize = 1;

/// One copy: the policy at a fixed window share, keyed by hash, single-threaded.
#[derive(Debug)]
struct Mini {
    capacity: usize,
    share: f64,
    /// Main's victim: the least frequent of this many oldest candidates.
    pick: usize,
    slots: Vec<Entry>,
    pools: [EvictionPool; 2],
    rng: XorShift64,
    /// The copies' common clock (`Sims::clock`) as of this copy's last miss: what its eviction
    /// stamps and ages by.
    clock: u64,
    window_len: usize,
    protected_len: usize,
}

impl Mini {
    fn new(capacity: usize, share: f64, pick: usize, seed: u64) -> Self {
        Self {
            capacity,
            share,
            pick,
            slots: Vec::with_capacity(capacity),
            pools: [EvictionPool::new(POOL), EvictionPool::new(POOL)],
            rng: XorShift64::new(seed),
            clock: 0,
            window_len: 0,
            protected_len: 0,
        }
    }

    fn target(&self) -> usize {
        (self.share * self.capacity as f64).round() as usize
    }

    /// One request, the `now`th sampled one, for a key this copy holds at `held` ([`ABSENT`]
    /// if not), with the copy's sketch `sk`; true on a hit. As the policy: a hit protects a
    /// main entry and, a resolution after the last, stamps it and raises its resident count;
    /// a miss is recorded in the sketch.
    #[inline]
    fn access(
        &mut self,
        hash: u64,
        held: u16,
        now: u64,
        sk: &FrequencySketch,
        at: Place<'_>,
    ) -> bool {
        if held == ABSENT {
            // The copy's own clock is read only by a miss's eviction: brought up to date here
            // rather than by every hit (a sampled hit replays in every copy).
            self.clock = now;
            self.miss(hash, sk, at);
            return false;
        }
        let e = &mut self.slots[usize::from(held)];
        if !e.window && !e.protected {
            e.protected = true;
            self.protected_len += 1;
        }
        if now - e.stamp >= RESOLUTION {
            e.stamp = now;
            let ages = sk.ages() as u32;
            let count = e.freq.checked_shr(ages.wrapping_sub(e.fage)).unwrap_or(0);
            e.freq = (count + 1).min(MAX_FREQUENCY);
            e.fage = ages;
            if count < MAX_FREQUENCY {
                sk.add_exclusive(1);
            }
        }
        true
    }

    /// The rest of [`access`](Self::access): a miss, recorded in the sketch, then filled.
    #[inline(never)]
    fn miss(&mut self, hash: u64, sk: &FrequencySketch, mut at: Place<'_>) {
        let counted = sk.record_exclusive(hash);
        sk.add_exclusive(u64::from(counted));
        if self.slots.len() < self.capacity {
            let window = self.window_len < self.target();
            self.push(hash, window, sk, &mut at);
        } else {
            self.evict_for(hash, sk, &mut at);
        }
    }

    /// Entry `i`'s resident count, halved per aging of `sk` since it was written.
    fn count_of(&self, i: usize, sk: &FrequencySketch) -> u8 {
        let e = &self.slots[i];
        e.freq
            .checked_shr((sk.ages() as u32).wrapping_sub(e.fage))
            .unwrap_or(0)
    }

    /// A new entry for `hash`, its count seeded from the sketch.
    fn entry(&self, hash: u64, window: bool, sk: &FrequencySketch) -> Entry {
        Entry {
            hash,
            stamp: self.clock,
            freq: sk.frequency(hash),
            fage: sk.ages() as u32,
            window,
            protected: false,
        }
    }

    fn push(&mut self, hash: u64, window: bool, sk: &FrequencySketch, at: &mut Place<'_>) {
        at.set(hash, self.slots.len());
        let e = self.entry(hash, window, sk);
        self.slots.push(e);
        self.window_len += usize::from(window);
    }

    fn replace(
        &mut self,
        i: usize,
        hash: u64,
        window: bool,
        sk: &FrequencySketch,
        at: &mut Place<'_>,
    ) {
        // The evicted entry's count goes back to the sketch.
        sk.fold_exclusive(self.slots[i].hash, self.count_of(i, sk));
        let old = self.slots[i];
        self.protected_len -= usize::from(old.protected);
        self.window_len -= usize::from(old.window);
        at.clear(old.hash);
        self.window_len += usize::from(window);
        self.slots[i] = self.entry(hash, window, sk);
        at.set(hash, i);
    }

    /// Pools entry `i` in its region; a main candidate the pool takes carries its sketch count
    /// (as the store's `Table::offer_main`).
    fn offer(&mut self, i: usize, sk: &FrequencySketch) {
        let e = self.slots[i];
        let region = if e.window { WINDOW } else { MAIN };
        let rank = e.rank();
        if rank < self.pools[region].bar() {
            let freq = if e.window { 0 } else { self.count_of(i, sk) };
            self.pools[region].admit(Candidate {
                rank,
                idx: i as u32,
                freq,
            });
        }
    }

    /// Reads `SAMPLES` adjacent entries into the pools, demoting the oldest protected one while
    /// protected entries hold too much of main.
    fn sample(&mut self, sk: &FrequencySketch) {
        let len = self.slots.len();
        let start = self.rng.below(len);
        let n = SAMPLES.min(len);
        if self.protected_len as f64 > (len - self.window_len) as f64 * PROTECTED_SHARE {
            let mut oldest: Option<usize> = None;
            for r in 0..n {
                let i = (start + r) % len;
                let e = &self.slots[i];
                if e.protected && oldest.is_none_or(|o| e.stamp < self.slots[o].stamp) {
                    oldest = Some(i);
                }
            }
            if let Some(o) = oldest {
                self.slots[o].protected = false;
                self.protected_len -= 1;
            }
        }
        for r in 0..n {
            self.offer((start + r) % len, sk);
        }
    }

    /// The best pooled candidate of `region` that still ranks as recorded.
    fn settle(&mut self, region: usize, sk: &FrequencySketch) -> Option<usize> {
        while let Some(c) = self.pools[region].pop_best() {
            let i = c.idx as usize;
            let e = self.slots[i];
            if usize::from(e.window) != region {
                self.offer(i, sk);
                continue;
            }
            if e.rank() <= c.rank || self.pools[region].best_rank().is_none_or(|b| e.rank() <= b) {
                return Some(i);
            }
            self.offer(i, sk);
        }
        None
    }

    /// Of the `pick` oldest pooled main candidates, the least frequent, read in place as
    /// the store's `Table::main_victim` reads them.
    fn main_victim(&mut self, sk: &FrequencySketch) -> Option<usize> {
        'pick: loop {
            let pool = &self.pools[MAIN];
            let len = pool.len();
            if len == 0 {
                return None;
            }
            let mut best: Option<(u8, usize)> = None;
            for pos in (len.saturating_sub(self.pick)..len).rev() {
                let c = self.pools[MAIN].at(pos);
                let i = c.idx as usize;
                let e = self.slots[i];
                if e.window || e.rank() > c.rank {
                    self.pools[MAIN].remove(pos);
                    self.offer(i, sk);
                    continue 'pick;
                }
                let f = c.freq;
                if best.is_none_or(|(bf, _)| f < bf) {
                    best = Some((f, pos));
                }
            }
            return best.map(|(_, pos)| self.pools[MAIN].remove(pos).idx as usize);
        }
    }

    /// A main victim's count in a duel: halved per `IDLE x capacity` requests of idleness.
    fn victim_frequency(&self, v: usize, sk: &FrequencySketch) -> u8 {
        let f = self.count_of(v, sk);
        let idle = self.clock - self.slots[v].stamp;
        let halvings = idle / (IDLE * self.capacity as u64).max(1);
        f.checked_shr(halvings.min(8) as u32).unwrap_or(0)
    }

    fn evict_for(&mut self, hash: u64, sk: &FrequencySketch, at: &mut Place<'_>) {
        self.sample(sk);
        let target = self.target();
        // A share lower than the window's length is reached by demoting its oldest entries.
        let mut moved = 0;
        while self.window_len > target && moved < 4 {
            let Some(c) = self.settle(WINDOW, sk) else {
                break;
            };
            self.slots[c].window = false;
            self.window_len -= 1;
            self.offer(c, sk);
            moved += 1;
        }
        if self.window_len >= target {
            let c = self.settle(WINDOW, sk);
            let v = self.main_victim(sk);
            match (c, v) {
                (Some(c), Some(v)) => {
                    let fc = self.count_of(c, sk);
                    if fc > self.victim_frequency(v, sk) {
                        self.slots[c].window = false;
                        self.window_len -= 1;
                        self.offer(c, sk);
                        self.replace(v, hash, true, sk, at);
                    } else {
                        // The victim stays the one to beat.
                        self.offer(v, sk);
                        self.replace(c, hash, true, sk, at);
                    }
                }
                (None, Some(v)) => {
                    if sk.frequency(hash) > self.victim_frequency(v, sk) {
                        self.replace(v, hash, false, sk, at);
                    } else {
                        self.offer(v, sk);
                    }
                }
                (Some(c), None) => self.replace(c, hash, true, sk, at),
                (None, None) => {
                    let v = self.rng.below(self.slots.len());
                    self.replace(v, hash, true, sk, at);
                }
            }
        } else {
            let v = match self.main_victim(sk) {
                Some(v) => v,
                None => match self.settle(WINDOW, sk) {
                    Some(v) => v,
                    None => self.rng.below(self.slots.len()),
                },
            };
            self.replace(v, hash, true, sk, at);
        }
    }
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use super::*;
    use crate::admission::fmix64;

    fn zipf_like(i: u64, keys: u64) -> u64 {
        // A cheap skewed stream: key = keys^u for uniform u (log-uniform), scattered.
        let u = (fmix64(i) >> 11) as f64 / (1u64 << 53) as f64;
        fmix64((keys as f64).powf(u) as u64)
    }

    #[test]
    fn copies_sample_a_quarter_of_a_small_cache_and_a_thousand_entries_of_a_large_one() {
        let m = MiniSims::new(800, 1);
        let n = (0..100_000u64).filter(|&h| m.sampled(fmix64(h))).count();
        assert!(
            (23_000..27_000).contains(&n),
            "{n} of 100,000 sampled at rate 4"
        );
        let m = MiniSims::new(100_000, 1);
        let n = (0..100_000u64).filter(|&h| m.sampled(fmix64(h))).count();
        assert!(
            (800..1200).contains(&n),
            "{n} of 100,000 sampled at rate 100"
        );
    }

    #[test]
    fn sampled_keys_spread_evenly_over_the_shards() {
        // The sampling hash must not depend on the bits that pick a key's shard: each shard
        // feeds the copies its own sampled requests, so a shard with none would go unmeasured.
        let m = MiniSims::new(8_000, 1);
        let shards = 8;
        let mut per_shard = vec![0u32; shards];
        for h in (0..400_000u64).map(fmix64).filter(|&h| m.sampled(h)) {
            per_shard[crate::cache::shard_of(h, shards)] += 1;
        }
        // 400,000 / 8 rate / 8 shards = 6,250 each (sd ~75).
        for (shard, &n) in per_shard.iter().enumerate() {
            assert!(
                (5_900..6_600).contains(&n),
                "shard {shard} sampled {n} keys: {per_shard:?}"
            );
        }
    }

    #[test]
    fn a_moving_hot_set_opens_the_window_and_a_loop_keeps_it_shut() {
        // A skewed stream whose hot keys move every 2 x capacity requests: recency wins.
        let m = MiniSims::new(500, 1);
        let batch: Vec<u64> = (0..200_000u64)
            .map(|i| zipf_like(i, 5_000) ^ (i / 1_000))
            .collect();
        for chunk in batch.chunks(33) {
            m.feed(chunk);
        }
        assert!(m.share() >= 0.5, "share {} {:?}", m.share(), m.scores());
        // A loop 10% longer than the copies: only a shut window keeps part of it.
        let m = MiniSims::new(500, 1);
        let looped: Vec<u64> = (0..200_000u64).map(|i| fmix64(i % 550)).collect();
        for chunk in looped.chunks(33) {
            m.feed(chunk);
        }
        assert!(m.share() < 0.05, "share {} {:?}", m.share(), m.scores());
    }

    /// Once one copy wins [`STABLE_PERIODS`] picks in a row the copies rest: no key is
    /// sampled (a hit pays one compare and fills no buffer) until a shard has counted the
    /// rest's requests on its own clock. Each rest in a row is twice the last (one period of
    /// the shard's requests first), up to [`REST_PERIODS`]; after a rest the copies replay a
    /// capacity of requests unscored before their misses count again.
    #[test]
    fn settled_copies_rest_until_a_shard_has_counted_the_rest() {
        // 8,000 entries: copies of 1,000, one key in 8 sampled, a pick per 8,000 samples.
        let m = MiniSims::new(8_000, 1);
        let sampled_now = |m: &MiniSims| (0..10_000u64).filter(|&h| m.sampled(fmix64(h))).count();
        assert!(sampled_now(&m) > 1_000);
        // A loop a little longer than the copies: the shut window wins every period.
        let mut next = 0u64;
        let mut feed_until_rest = |m: &MiniSims| {
            let mut fed = 0;
            while !m.resting() {
                let chunk: Vec<u64> = (next..next + 8).map(|i| fmix64(i % 1_100)).collect();
                m.feed(&chunk);
                next += 8;
                fed += 8;
                assert!(fed <= 5 * PERIOD * 1_000, "no rest after {fed} samples");
            }
            fed
        };
        let fed = feed_until_rest(&m);
        assert_eq!(fed, STABLE_PERIODS as u64 * PERIOD * 1_000);
        assert_eq!(
            sampled_now(&m),
            0,
            "nothing is sampled while the copies rest"
        );
        // A shard holding a share of 1,000 entries: the first rest lasts one period of its
        // requests (8,000), counted from the request at which it first sees the rest.
        let mut clock = RestClock::default();
        m.count_rest(&mut clock, 100, 1_000);
        m.count_rest(&mut clock, 100 + PERIOD * 1_000 - 1, 1_000);
        assert!(m.resting());
        m.count_rest(&mut clock, 100 + PERIOD * 1_000, 1_000);
        assert!(!m.resting());
        assert!(sampled_now(&m) > 1_000, "sampling resumed");
        // The same copy wins the next period (after a capacity of unscored replays): a rest
        // twice as long.
        let fed = feed_until_rest(&m);
        assert_eq!(fed, 1_000 + PERIOD * 1_000);
        let start = 50_000;
        m.count_rest(&mut clock, start, 1_000);
        m.count_rest(&mut clock, start + 2 * PERIOD * 1_000 - 1, 1_000);
        assert!(m.resting());
        m.count_rest(&mut clock, start + 2 * PERIOD * 1_000, 1_000);
        assert!(!m.resting());
        // A resize starts fresh copies, which replay at once.
        feed_until_rest(&m);
        m.resize(16_000);
        assert!(!m.resting());
        assert!(sampled_now(&m) > 500);
    }

    #[test]
    fn every_copy_of_the_grid_runs_and_the_winner_is_published() {
        let m = MiniSims::new(2_000, 1);
        let stream: Vec<u64> = (0..100_000u64).map(|i| zipf_like(i, 20_000)).collect();
        for chunk in stream.chunks(33) {
            m.feed(chunk);
        }
        let scores = m.scores();
        let grid: Vec<(f64, usize)> = scores.iter().map(|c| (c.0, c.1)).collect();
        assert_eq!(grid, GRID, "{scores:?}");
        assert!(
            scores.iter().all(|c| c.2 > 0.0),
            "every copy missed: {scores:?}"
        );
        let best = scores
            .iter()
            .fold(None, |b: Option<&(f64, usize, f64)>, c| match b {
                Some(b) if b.2 <= c.2 => Some(b),
                _ => Some(c),
            })
            .expect("copies");
        assert_eq!((m.share(), m.pick()), (best.0, best.1), "{scores:?}");
    }

    /// Request `i` (from 0), of `h`, to `mini`, which is copy `copy` of the shared `index`.
    fn request(
        mini: &mut Mini,
        i: u64,
        h: u64,
        sk: &FrequencySketch,
        index: &mut Index,
        copy: usize,
    ) {
        let held = index.get(&h).map_or(ABSENT, |p| p[copy]);
        mini.access(h, held, i + 1, sk, Place { index, copy });
    }

    /// A copy of 100 entries at window share `share`, its sketch and an empty index.
    fn copy_of_100(share: f64) -> (Mini, FrequencySketch, Index) {
        let mini = Mini::new(100, share, LFU_PICK, 3);
        let sk = FrequencySketch::shaped(100, SKETCH_PERIOD, SKETCH_WIDTH, true);
        (mini, sk, Index::default())
    }

    /// A whole-window copy keeps no main space: its victims never come from main's pick, so
    /// a grid lists the share of 100% once.
    #[test]
    fn a_whole_window_copy_never_puts_an_entry_in_main() {
        let (mut mini, sk, mut index) = copy_of_100(1.0);
        for i in 0..20_000u64 {
            request(&mut mini, i, zipf_like(i, 2_000), &sk, &mut index, 0);
            assert!(mini.slots.iter().all(|e| e.window), "request {i}");
        }
        assert_eq!(mini.slots.len(), 100);
    }

    #[test]
    fn a_copy_never_holds_more_than_its_capacity() {
        let (mut mini, sk, mut index) = copy_of_100(0.25);
        for i in 0..50_000u64 {
            request(&mut mini, i, zipf_like(i, 2_000), &sk, &mut index, 1);
            assert!(mini.slots.len() <= 100);
            assert_eq!(index.len(), mini.slots.len());
            for (i, e) in mini.slots.iter().enumerate() {
                assert_eq!(index.get(&e.hash).map(|p| p[1]), Some(i as u16));
            }
            let window = mini.slots.iter().filter(|e| e.window).count();
            assert_eq!(window, mini.window_len);
            let protected = mini.slots.iter().filter(|e| e.protected).count();
            assert_eq!(protected, mini.protected_len);
        }
    }
}
