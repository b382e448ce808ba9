//! Candidate default eviction policies for ttl-lru (issue 17), modelled in simulation before any
//! of them goes into the store.
//!
//! Every candidate here keeps eviction *sampled*, as `ttl-lru`'s table does: entries live in a
//! dense array, an eviction reads `samples` adjacent entries from one random start (wrapping) and
//! merges them into a Redis-style pool of the best victims seen so far, a pooled place is
//! re-ranked before it is evicted, and a new key takes its victim's place. Recency is a stamp per
//! entry, updated by a hit only when it is at least `resolution` requests old (the store's
//! 200 ms recency resolution at the harness's 1 ms per request). Nothing keeps a global order.
//!
//! On top of that model the candidates add at most:
//! - a frequency sketch shaped like the store's TinyLFU one (4-row count-min of 4-bit counters,
//!   conservative update, optional doorkeeper, halving after `period x capacity` records);
//! - one bit per entry (window or main);
//! - a direct-mapped ghost table of recently evicted or refused key fingerprints (one `u32`
//!   per cache entry), consulted only on a miss;
//! - one adaptive number per shard (the window's target share, or an admission bias).
//!
//! Everything else a [`Config`] can switch on reads only what is already there: a duelling
//! victim's idle time is its stamp's age (`idle`, `stale`, `tie_idle`), a sticky victim is a
//! pool entry put back (`keep_winner`, `keep_margin`), the window's dead band, momentum, veto
//! and phase resets are a few numbers per shard (`dead_band`, `accel`, `veto`, `fast_mult`,
//! `reset_drop`, `reset_main_drop`).
//!
//! [`Mode`] lists the candidates; `policylab` runs them next to the peers. [`Config::recommended`]
//! is what the store runs as `Admission::Adaptive`; [`Config::next`] is the best candidate found
//! since (docs/benchmarks.md, issue 17), not in the store.

use std::collections::HashMap;

use ahash::RandomState;

use crate::policy::Policy;
use crate::rng::Rng;

/// The store's default sample count.
pub const SAMPLES: usize = 10;
/// The store's default pool size.
pub const POOL: usize = 16;
/// The store's recency resolution, in requests (200 ms at one request per millisecond).
pub const RESOLUTION: u64 = 200;

const ROWS: usize = 4;
const MAX_COUNT: u8 = 15;
const PER_WORD: usize = 16;
/// Counters per 64-byte block (eight words): a key's four counters share one block.
const BLOCK_COUNTERS: usize = 8 * PER_WORD;
const HALVE_MASK: u64 = 0x7777_7777_7777_7777;
/// Seeds the finaliser that places a key's counters.
const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// MurmurHash3's 64-bit finaliser.
#[inline]
pub fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    k ^= k >> 33;
    k = k.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    k ^= k >> 33;
    k
}

/// A count-min sketch of 4-bit counters packed sixteen to a word, as ttl-lru's `admission.rs`
/// keeps it (single-threaded here: the races of the store only lower estimates).
#[derive(Debug, Clone)]
pub struct Sketch {
    counters: Vec<u64>,
    door: Vec<u64>,
    mask: usize,
    door_mask: usize,
    records: u64,
    sample_size: u64,
    doorkeeper: bool,
    /// Count toward aging only records that raised a counter (as moka and Caffeine do).
    pub count_added_only: bool,
    /// Conservative update (raise only the minimal counters); off raises all four, as moka
    /// and Caffeine do.
    pub conservative: bool,
    /// Halvings so far (`Config::resident`: a resident count is halved as many times as the
    /// sketch was since it was last written).
    pub ages: u32,
}

impl Sketch {
    /// Sized like the store's: four counters per row per entry of capacity; halves every
    /// `period x capacity` records (the store uses 32).
    pub fn new(capacity: usize, period: u64, doorkeeper: bool) -> Self {
        Self::with_width(capacity, period, doorkeeper, 4)
    }

    /// As [`new`](Self::new) with `per_entry` counters per row per entry of capacity.
    pub fn with_width(capacity: usize, period: u64, doorkeeper: bool, per_entry: usize) -> Self {
        let width = (capacity.saturating_mul(per_entry))
            .clamp(64, 1 << 26)
            .next_power_of_two();
        let door_bits = width * 8;
        Self {
            counters: vec![0; (ROWS * width).div_ceil(PER_WORD)],
            door: vec![0; door_bits / 64],
            mask: (ROWS * width / BLOCK_COUNTERS).max(1) - 1,
            door_mask: door_bits - 1,
            records: 0,
            sample_size: period * capacity.max(16) as u64,
            doorkeeper,
            count_added_only: false,
            conservative: true,
            ages: 0,
        }
    }

    /// The key's four counters, one per row, all in one 64-byte block of eight words (as
    /// Caffeine lays its sketch out): one finaliser picks the block with its low bits and, with
    /// 8 bits of its high half per row, a word of the row's pair (row r uses words 2r and
    /// 2r + 1, so the four never share a word) and a counter in it. A lookup or a record then
    /// touches one cache line instead of four, and hashes once instead of four times.
    #[inline]
    fn slots(&self, hash: u64) -> [usize; ROWS] {
        let h = fmix64(hash.wrapping_add(SEED));
        let block = (h as usize & self.mask) * BLOCK_COUNTERS;
        std::array::from_fn(|r| {
            let bits = (h >> (32 + 8 * r)) as usize & 0xFF;
            block + (2 * r + (bits & 1)) * PER_WORD + (bits >> 1 & 15)
        })
    }

    #[inline]
    fn count(&self, slot: usize) -> u8 {
        ((self.counters[slot / PER_WORD] >> ((slot % PER_WORD) * 4)) & 0xF) as u8
    }

    #[inline]
    fn door_bit(&self, hash: u64) -> (usize, u64) {
        let bit = (fmix64(hash ^ 0x5851_F42D_4C95_7F2D) >> 7) as usize & self.door_mask;
        (bit / 64, 1u64 << (bit % 64))
    }

    /// Records one request for `hash`.
    pub fn record(&mut self, hash: u64) {
        let seen = if self.doorkeeper {
            let (w, bit) = self.door_bit(hash);
            let seen = self.door[w] & bit != 0;
            self.door[w] |= bit;
            seen
        } else {
            true
        };
        let mut added = !seen;
        if seen {
            let slots: [usize; ROWS] = self.slots(hash);
            let min = slots.iter().map(|&s| self.count(s)).min().unwrap_or(0);
            if min < MAX_COUNT || !self.conservative {
                for &s in &slots {
                    let c = self.count(s);
                    if c < MAX_COUNT && (c == min || !self.conservative) {
                        added = true;
                        self.counters[s / PER_WORD] += 1 << ((s % PER_WORD) * 4);
                    }
                }
            }
        }
        if self.count_added_only && !added {
            return;
        }
        self.records += 1;
        if self.records == self.sample_size {
            self.halve();
        }
    }

    /// Counts one request toward aging without recording it (`Config::resident`: a hit that
    /// raised its entry's own count).
    pub fn tick(&mut self) {
        self.records += 1;
        if self.records == self.sample_size {
            self.halve();
        }
    }

    /// Raises `hash`'s estimate to at least `f` (`Config::resident`: an evicted entry leaves
    /// its count to the sketch, which then remembers it as if its hits had been recorded).
    pub fn fold(&mut self, hash: u64, f: u8) {
        if f == 0 || self.frequency(hash) >= f {
            return;
        }
        let mut target = f.min(MAX_COUNT + 1);
        if self.doorkeeper {
            let (w, bit) = self.door_bit(hash);
            self.door[w] |= bit;
            target -= 1;
        }
        let target = target.min(MAX_COUNT);
        for s in self.slots(hash) {
            let c = self.count(s);
            if c < target {
                let shift = (s % PER_WORD) * 4;
                self.counters[s / PER_WORD] += u64::from(target - c) << shift;
            }
        }
    }

    /// Ages no more often than every `records` records (a floor under `period x capacity`).
    pub fn with_min_period(mut self, records: u64) -> Self {
        self.sample_size = self.sample_size.max(records);
        self
    }

    /// Ages every counter by half and clears the doorkeeper (what a full aging period does).
    pub fn halve(&mut self) {
        for w in &mut self.counters {
            *w = (*w >> 1) & HALVE_MASK;
        }
        self.door.iter_mut().for_each(|w| *w = 0);
        self.records = 0;
        self.ages += 1;
    }

    /// Estimated recent request count (0..=16).
    pub fn frequency(&self, hash: u64) -> u8 {
        let min = self
            .slots(hash)
            .iter()
            .map(|&s| self.count(s))
            .min()
            .unwrap_or(0);
        if !self.doorkeeper {
            return min;
        }
        let (w, bit) = self.door_bit(hash);
        min + u8::from(self.door[w] & bit != 0)
    }
}

/// The store's candidate pool: best victim last, worst first, places and ranks only.
#[derive(Debug, Clone)]
struct Pool {
    entries: Vec<(u64, u32)>,
    capacity: usize,
}

impl Pool {
    fn new(capacity: usize) -> Self {
        Self {
            entries: Vec::with_capacity(capacity),
            capacity,
        }
    }

    fn bar(&self) -> u64 {
        if self.entries.len() < self.capacity {
            u64::MAX
        } else {
            self.entries.first().map_or(0, |w| w.0)
        }
    }

    fn offer(&mut self, rank: u64, idx: u32) {
        if rank >= self.bar() {
            return;
        }
        if let Some(pos) = self.entries.iter().position(|e| e.1 == idx) {
            self.entries.remove(pos);
        }
        let at = self.entries.partition_point(|e| e.0 > rank);
        if self.entries.len() < self.capacity {
            self.entries.insert(at, (rank, idx));
        } else {
            self.entries[..at].rotate_left(1);
            self.entries[at - 1] = (rank, idx);
        }
    }

    fn pop_best(&mut self) -> Option<(u64, u32)> {
        self.entries.pop()
    }

    fn best_rank(&self) -> Option<u64> {
        self.entries.last().map(|e| e.0)
    }
}

/// Which kind of eviction put a fingerprint in the ghost table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GhostKind {
    /// Refused or evicted by the frequency filter (a newcomer, or a window entry that lost its
    /// duel): its return says the filter is too strict.
    Filtered,
    /// Evicted from the main space by recency: its return says the main space is too small.
    Main,
}

/// Recently evicted key fingerprints, direct-mapped (a newer one overwrites an older one in
/// its slot): one `u32` per slot, the low bit the kind.
#[derive(Debug, Clone)]
pub struct Ghosts {
    table: Vec<u32>,
    mask: usize,
}

impl Ghosts {
    /// About `slots` fingerprints (rounded up to a power of two).
    pub fn new(slots: usize) -> Self {
        let n = slots.max(16).next_power_of_two();
        Self {
            table: vec![0; n],
            mask: n - 1,
        }
    }

    fn fingerprint(hash: u64) -> u32 {
        // Never 0, so an empty slot matches nothing.
        ((hash >> 32) as u32 | 2) & !1
    }

    /// Remembers `hash` as evicted for `kind`.
    pub fn insert(&mut self, hash: u64, kind: GhostKind) {
        let fp = Self::fingerprint(hash) | u32::from(kind == GhostKind::Main);
        self.table[hash as usize & self.mask] = fp;
    }

    /// Whether `hash` was recently evicted, and how; forgets it.
    pub fn take(&mut self, hash: u64) -> Option<GhostKind> {
        let slot = &mut self.table[hash as usize & self.mask];
        if *slot & !1 == Self::fingerprint(hash) {
            let kind = if *slot & 1 == 1 {
                GhostKind::Main
            } else {
                GhostKind::Filtered
            };
            *slot = 0;
            Some(kind)
        } else {
            None
        }
    }
}

/// Ghosts stamped with their region's eviction count, for [`Adapt::Marginal`]: one
/// direct-mapped table of `(fingerprint, eviction number)` per region, so the frequent
/// evictions of one region cannot overwrite the other's ghosts.
#[derive(Debug, Clone)]
pub struct SeqGhosts {
    tables: [Vec<(u32, u64)>; 2],
    mask: usize,
    evictions: [u64; 2],
}

impl SeqGhosts {
    /// About `slots` ghosts per region.
    pub fn new(slots: usize) -> Self {
        let n = slots.max(64).next_power_of_two();
        Self {
            tables: [vec![(0, 0); n], vec![(0, 0); n]],
            mask: n - 1,
            evictions: [0; 2],
        }
    }

    /// Records an eviction of `hash` from `kind`'s region.
    pub fn insert(&mut self, hash: u64, kind: GhostKind) {
        let k = usize::from(kind == GhostKind::Main);
        self.evictions[k] += 1;
        self.tables[k][hash as usize & self.mask] = ((hash >> 32) as u32 | 1, self.evictions[k]);
    }

    /// If `hash` left a region within the last `reach` evictions of that region: which one.
    pub fn take(&mut self, hash: u64, reach: u64) -> Option<GhostKind> {
        let fp = (hash >> 32) as u32 | 1;
        for k in 0..2 {
            let slot = &mut self.tables[k][hash as usize & self.mask];
            if slot.0 == fp {
                let (_, at) = std::mem::take(slot);
                if self.evictions[k] - at < reach {
                    return Some(if k == 1 {
                        GhostKind::Main
                    } else {
                        GhostKind::Filtered
                    });
                }
            }
        }
        None
    }
}

/// How an adaptive parameter moves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Adapt {
    /// It stays where it starts.
    Fixed,
    /// ARC-style: each ghost hit moves it by `step` (in the parameter's unit; for a window, a
    /// share of the capacity) toward what would have kept the returning key.
    Ghost {
        /// Move per ghost hit.
        step: f64,
    },
    /// Caffeine's simple hill climber: every `period x capacity` requests, compare the hit ratio
    /// with the previous period's, keep going or turn back; the step starts at `step` and decays
    /// by 2% a period, restarting when the hit ratio moves by more than 5 points.
    Climb {
        /// Sample period in multiples of the capacity.
        period: f64,
        /// Initial step, in the parameter's unit.
        step: f64,
    },
    /// Caffeine's density signal (for a window only): every `period x capacity` requests, compare
    /// hits per window entry with hits per main entry, `e = ln(window density / main density)`,
    /// and move the share by `sign(e) * min(0.30, 0.03 * |e|)`.
    Density {
        /// Sample period in multiples of the capacity.
        period: f64,
    },
    /// Marginal ghosts (ARC's idea, measured per region): a ghost hit counts only if the key
    /// left its region within the last `reach x capacity` evictions *of that region*, i.e. if a
    /// region that much larger would still have held it. A counted return of a filtered key
    /// moves the window share up by `step` entries, of a main victim down by `step` entries.
    /// Both regions are judged on the same extra room, so the cheap hits of a small window do
    /// not bias it (the density signal's flaw).
    Marginal {
        /// How far back a ghost counts, as a share of the capacity.
        reach: f64,
        /// Entries moved per counted ghost hit.
        step: f64,
        /// Entries the share shrinks by per eviction from the window (or refusal): with no
        /// main ghosts to say so (a window grown to the whole cache evicts nothing from main),
        /// only this brings a window that no longer earns its hits back down.
        drift: f64,
    },
}

/// What a candidate does on an eviction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Sampled LRU: the store's default (no sketch).
    Lru,
    /// The store's opt-in TinyLFU: the newcomer is stored only if its estimate beats the sampled
    /// LRU victim's.
    TinyLfu,
    /// TinyLFU with an admission bias `b`: the newcomer is stored if `freq(new) + b >
    /// freq(victim)`; `b` starts at `init` and adapts in `0..=16` (b = 16 is sampled LRU).
    Biased {
        /// Starting bias.
        init: f64,
        /// How it moves (ghost hits on refused newcomers raise it, on evicted victims lower it).
        adapt: Adapt,
    },
    /// Sampled W-TinyLFU: a newcomer always enters, as a *window* entry (one bit). While the
    /// window holds more than its target share, each eviction is a duel between the oldest
    /// sampled window entry and the oldest sampled main entry, decided by the sketch: the loser
    /// is evicted and a winning window entry joins the main space. With no window entry in the
    /// sample, the newcomer itself duels (TinyLFU). Below the target, the main victim is evicted.
    Window {
        /// Starting target share of the capacity (0..=1).
        init: f64,
        /// How the share moves.
        adapt: Adapt,
        /// Lower bound of the share.
        min: f64,
        /// Upper bound of the share.
        max: f64,
    },
}

/// The most copies `Config::mini_grid` lists.
pub const MINI_GRID_MAX: usize = 8;

/// Everything a candidate is built from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// Adjacent entries read per eviction.
    pub samples: usize,
    /// Candidate pool size per segment.
    pub pool: usize,
    /// Minimum age (requests) before a hit rewrites an entry's stamp.
    pub resolution: u64,
    /// Sketch aging period, in multiples of the capacity.
    pub sketch_period: u64,
    /// Sketch doorkeeper on.
    pub doorkeeper: bool,
    /// Record one hit in this many in the sketch (misses always); 1 records every hit.
    pub hit_record: u64,
    /// Resident counts: a hit raises its entry's own 4-bit count (as quick_cache's and
    /// S3-FIFO's entries count their hits) instead of recording in the sketch, which then
    /// sees only misses; a new entry's count starts at the sketch's estimate, an evicted one
    /// folds its count back into the sketch, and a count halves with every sketch aging. A
    /// resident entry's frequency is its own count. What a get would cost: a write to its own
    /// entry (none once the count saturates), no sketch line.
    pub resident: bool,
    /// With `resident`: only a hit that rewrites the entry's stamp (one at least `resolution`
    /// requests after the last) raises its count, so a hit writes its entry at most once per
    /// resolution, as the default policy's hit does.
    pub resident_gated: bool,
    /// A main entry is protected only by a hit a resolution after its stamp (so a hit writes
    /// its entry at most once per resolution, protection included).
    pub protect_gated: bool,
    /// Hits go to a buffer of this many hashes instead of the sketch, drained into the sketch
    /// at the next miss (the insert path, which holds the shard's write lock anyway); hits that
    /// find it full are dropped, as Caffeine's read buffer drops them. 0 records at once. This is
    /// the store's way to keep the sketch's writes off the hit path (a per-thread buffer).
    pub hit_buffer: usize,
    /// With `hit_buffer`: a miss after a drain that dropped hits is recorded in the sketch
    /// only with the probability a hit had of being kept (kept / hits since the last drain).
    pub thin_misses: bool,
    /// Estimate the protected share from the eviction samples (a moving average of the
    /// protected fraction of sampled main entries) instead of an exact count, as a store that
    /// counts nothing on a hit must.
    pub slru_sampled_share: bool,
    /// Ghost table slots per entry of capacity.
    pub ghost_ratio: f64,
    /// Main victim: the least frequent (by the sketch) of this many of the oldest pooled main
    /// candidates, ties to the oldest; 1 is plain sampled LRU.
    pub lfu_pick: usize,
    /// Sketch aging counts only records that raised a counter.
    pub count_added_only: bool,
    /// The sketch's conservative update (see [`Sketch::conservative`]).
    pub conservative: bool,
    /// Sketch counters per row per entry of capacity (the store's: 4).
    pub sketch_width: usize,
    /// A floor under the sketch's aging period, in records (0: none). Four-bit counters rank
    /// a low-skew tail only with enough records between halvings, which `period x capacity`
    /// does not give a small cache when the period is short.
    pub sketch_min_records: u64,
    /// Density guard for a window: every `guard x capacity` requests, if the window earned fewer
    /// hits per entry than the main space, shrink it by Caffeine's density step (never grow it);
    /// 0 is off. It sees what ghosts cannot: a window holding a loop earns nothing and has no
    /// main evictions to argue against it.
    pub guard: f64,
    /// The guard fires only when `ln(window density / main density)` is below this (0: whenever
    /// the window earns less per entry; -2: only when it earns under 1/e^2 as much).
    pub guard_below: f64,
    /// The guard also grows the window (by the same step) when `ln(window density / main
    /// density)` exceeds this; 0 is off. After a hot set moves, main's entries stop earning
    /// while the window's newcomers earn: recency is what pays.
    pub guard_above: f64,
    /// Sampled SLRU in the main space: a main entry hit since it joined is protected (ranks
    /// after every unprotected one); while protected entries exceed 80% of the main space, each
    /// eviction demotes the oldest protected entry of its sample.
    pub slru: bool,
    /// Scale the marginal-ghost step with the capacity: `step x max(1, capacity / 1000)`
    /// entries per counted ghost hit (so a large cache moves its window as fast, in share, as a
    /// 1,000-entry one).
    pub scale_step: bool,
    /// The protected share of the main space above which SLRU demotes (Caffeine: 0.8).
    pub slru_share: f64,
    /// A victim that wins its duel goes back to the pool (else it leaves the pool, as in the
    /// store, and the next eviction duels another candidate).
    pub keep_winner: bool,
    /// As `keep_winner`, for duels against a newcomer only (no window entry in the pool).
    pub keep_newcomer_winner: bool,
    /// Never refuse a newcomer: the window holds at least one entry (the newest newcomer);
    /// where the window's pool has no candidate to duel main's victim, the newest window entry
    /// duels it instead, and the newcomer takes the loser's place in the window, as a store
    /// whose inserts always store would. Off: the newcomer duels the victim itself and may be
    /// refused. (Session 13: every cell within 0.5 here, worst -0.37 on three seeds, but the
    /// store at 8 shards lost the 1% loop, -0.70: a window entry per shard is 0.8% of a
    /// 1,000-entry cache, and a loop just larger than the cache wants every newcomer refused.)
    pub no_decline: bool,
    /// A victim that wins its duel by at most this much (in sketch counts) stays pooled
    /// (duels it keeps winning on a tie are the loop's: the same victim should keep refusing);
    /// -1 is off.
    pub keep_margin: i8,
    /// Phase-change reset: every `capacity` requests, if the hit ratio of the period fell by
    /// more than this (a share: 0.2 is 20 points) below the previous period's, the sketch is
    /// halved `reset_halvings` times at once (the old hot keys' counts would otherwise refuse
    /// the new hot set for up to a whole aging period); 0 is off. Caffeine's hill climber
    /// restarts on the same signal.
    pub reset_drop: f64,
    /// Phase-change reset on main's hits instead: a period whose hits on main entries fall
    /// below this share of the previous period's (which had at least 5% of its requests hit
    /// main) is a phase change; 0 is off.
    pub reset_main_drop: f64,
    /// On a detected phase change, entries not hit since a capacity of requests before it
    /// count 0 in a duel from then on (until hit), instead of (or beside) aging the sketch.
    pub epoch: bool,
    /// A detected drop resets only if, this many periods later, the hit ratio is still below
    /// the pre-drop level by half the threshold (0: at once).
    pub confirm: u32,
    /// A detected drop resets only if at least this share of the period's misses were of keys
    /// not in the ghost table (a new hot set), rather than keys evicted or refused lately (a
    /// phase coming back). 0 is off.
    pub novel: f64,
    /// Halvings per detected phase change (4 clears a 4-bit counter).
    pub reset_halvings: u32,
    /// On a detected phase change the window's share is raised to at least this (recency
    /// wins right after the hot set moved; the guard and the ghosts bring it back down).
    pub reset_window: f64,
    /// Idle decay: in a duel, a main victim's frequency is halved for every `idle x capacity`
    /// requests since its stamp was last rewritten (0 is off). A hot set that moved on leaves
    /// entries whose counts say "hot" until the sketch ages (64 x capacity records); their
    /// idle time says otherwise at once, without touching the shared sketch.
    pub idle: f64,
    /// Staleness cap: in a duel, a main victim's count is capped at `stale x (records per
    /// aging period) / (requests since its stamp)`, the most its idle time supports (0 is
    /// off). A hot key that stopped coming is idle far beyond its count's expected gap; a
    /// cold key that comes rarely is not.
    pub stale: f64,
    /// A duel tied on counts goes to the newcomer when the victim has been idle longer than
    /// this many capacities of requests (0: ties always go to the victim).
    pub tie_idle: f64,
    /// Momentum for marginal ghosts: each counted ghost hit in the same direction as the
    /// previous one multiplies the step by this (up to `accel_cap x capacity` entries); one in
    /// the other direction resets it to 1. 0 or 1 is off.
    pub accel: f64,
    /// The most a momentum step moves, as a share of the capacity.
    pub accel_cap: f64,
    /// Density veto: ghosts may not grow a window that earned fewer hits per entry than main
    /// in the guard's last period, and momentum builds only while it earned more.
    pub veto: bool,
    /// One-sided growth: while under `fast_below` of the last ~64 counted ghost hits were
    /// main victims', a window ghost moves the share `fast_mult` times as far (0 or 1: off).
    pub fast_mult: f64,
    /// See `fast_mult`.
    pub fast_below: f64,
    /// Dead band: the window holds `share - dead_band` of the capacity (never below 0), so
    /// ghost evidence must first add up to this share before any newcomer is let in by
    /// recency alone; 0 is off.
    pub dead_band: f64,
    /// Miniature simulations (Waldspurger et al., ATC 2017; Caffeine's `MiniSimClimber`):
    /// this many copies of the policy with fixed window shares spread over `0..=mini_max`
    /// (`mini_max x (i / (n - 1))^2`), each `mini_size` entries and fed the keys whose hash falls in one of
    /// `capacity / mini_size` buckets; every `mini_period x capacity` requests the window takes
    /// the share of the copy that missed least (misses smoothed by `mini_decay` per period).
    /// 0 is off.
    pub minis: usize,
    /// See `minis`.
    pub mini_size: usize,
    /// See `minis`.
    pub mini_period: f64,
    /// See `minis`.
    pub mini_max: f64,
    /// See `minis`: when not 0, the copies are run twice, once with `lfu_pick` and once with
    /// this pick, and the main space takes the winning copy's pick as well as its share.
    pub mini_alt_pick: usize,
    /// See `minis`: the sampling modulus is at least this (1: a cache under `mini_size`
    /// entries simulates at full size; 16: every copy is at most a sixteenth of the cache).
    pub mini_rate_min: u64,
    /// See `minis`: each period's score is `decay x last score + misses` (0: this period only).
    pub mini_decay: f64,
    /// See `minis`: the copies' adjacent samples and pool size per region (0: the cache's own),
    /// to measure whether a cheaper eviction in the copies still picks the shares the cache's
    /// own eviction would.
    pub mini_samples: usize,
    /// See `mini_samples`.
    pub mini_pool: usize,
    /// See `minis` (lab only): bit K set skips the K-th copy in the order `with_minis` builds
    /// them, pick-major then share (with the default 3 shares and `malt=1`: 0: 0% pick
    /// `lfu_pick`, 1: 25% `lfu_pick`, 2: 100%, 3: 0% `mini_alt_pick`, 4: 25% `mini_alt_pick`);
    /// the other copies keep their seeds. 0 skips none.
    pub mini_skip: u64,
    /// See `minis` (lab only): when `mini_grid_len > 0`, the copies are exactly these
    /// (window share, victim pick) pairs, the first `mini_grid_len` of them, in place of the
    /// `minis` x `mini_alt_pick` grid (copy K seeded as the grid's K-th copy would be; a
    /// pick of 0 means `lfu_pick`).
    pub mini_grid: [(f64, usize); MINI_GRID_MAX],
    /// See `mini_grid`.
    pub mini_grid_len: usize,
    /// The policy.
    pub mode: Mode,
}

impl Config {
    /// The store's sampling (10 adjacent + pool 16, 200-request resolution) and sketch
    /// (doorkeeper, aging at 32 x capacity), with `mode`.
    pub fn store(mode: Mode) -> Self {
        Self {
            samples: SAMPLES,
            pool: POOL,
            resolution: RESOLUTION,
            sketch_period: 32,
            doorkeeper: true,
            hit_record: 1,
            resident: false,
            resident_gated: false,
            protect_gated: false,
            hit_buffer: 0,
            thin_misses: false,
            slru_sampled_share: false,
            ghost_ratio: 1.0,
            lfu_pick: 1,
            count_added_only: false,
            conservative: true,
            sketch_width: 4,
            sketch_min_records: 0,
            keep_winner: true,
            keep_newcomer_winner: false,
            no_decline: false,
            keep_margin: -1,
            slru: false,
            slru_share: 0.8,
            scale_step: false,
            guard: 0.0,
            guard_below: 0.0,
            guard_above: 0.0,
            reset_drop: 0.0,
            reset_halvings: 4,
            reset_main_drop: 0.0,
            epoch: false,
            confirm: 0,
            novel: 0.0,
            dead_band: 0.0,
            minis: 0,
            mini_size: 100,
            mini_period: 1.0,
            mini_max: 1.0,
            mini_decay: 0.0,
            mini_rate_min: 1,
            mini_alt_pick: 0,
            mini_samples: 0,
            mini_pool: 0,
            mini_skip: 0,
            mini_grid: [(0.0, 0); MINI_GRID_MAX],
            mini_grid_len: 0,
            accel: 0.0,
            fast_mult: 0.0,
            fast_below: 0.05,
            accel_cap: 0.01,
            veto: false,
            reset_window: 0.0,
            idle: 0.0,
            stale: 0.0,
            tie_idle: 0.0,
            mode,
        }
    }
}

impl Config {
    /// The candidate this lab recommends as ttl-lru's default (issue 17): the store's sampling
    /// (10 adjacent + pool 16) and sketch (doorkeeper; aging at 64 x capacity instead of 32), a
    /// window whose share starts at 0 and moves by one entry per marginal ghost hit (reach 5% of
    /// the capacity in each region's own evictions), a shrink-only density guard checked every
    /// `capacity` requests, a duel-winning victim that leaves the pool as in the store, and a
    /// sampled SLRU main space (protected after a main hit, 80% protected at most).
    pub fn recommended() -> Self {
        Self {
            sketch_period: 64,
            keep_winner: false,
            slru: true,
            guard: 1.0,
            ..Self::store(Mode::Window {
                init: 0.0,
                adapt: Adapt::Marginal {
                    reach: 0.05,
                    step: 1.0,
                    drift: 0.0,
                },
                min: 0.0,
                max: 1.0,
            })
        }
    }
}

impl Config {
    /// The best candidate this lab found after `recommended()` (issue 17; not in the store):
    /// `recommended()` with a sticky main victim (`keep_winner`: a victim that wins its duel
    /// stays pooled, as moka's LRU head stays put) picked as the least frequent of the 4 oldest
    /// main candidates (`lfu_pick`), a sketch aged every 24 x capacity raising records
    /// (`count_added_only`), a window that holds its ghost-driven share less 8% of the capacity
    /// (`dead_band`), and a duelling victim's count halved per 8 x capacity requests of
    /// idleness (`idle`). `policylab --cand next`.
    pub fn next() -> Self {
        Self {
            keep_winner: true,
            lfu_pick: 4,
            count_added_only: true,
            sketch_period: 24,
            dead_band: 0.08,
            idle: 8.0,
            ..Self::recommended()
        }
    }
}

impl Config {
    /// The first candidate found that meets every cell (issue 17; not in the store yet):
    /// `next()` picking the least frequent of the 12 oldest main candidates from a sketch twice
    /// as wide, with its window share chosen by miniature simulations instead of ghosts, the
    /// density guard and the dead band: 3 copies of this policy at fixed shares
    /// `(i / 2)^2` (0, 25 and 100%; 6 at `(i / 5)^2` until session 10) of 1,000 entries (a
    /// quarter of a cache under 4,000; `mini=3/500/...` held every cell here too, but cost the
    /// store 0.2 point on shift 10%), each fed the keys of
    /// one hash bucket in `max(4, capacity / 1000)`; every 8 x capacity requests the window
    /// takes the share of the copy with the fewest misses (each period's misses plus half the
    /// last score). Each copy picks main's victim as the least frequent of the 12 oldest
    /// (sessions 10 to 12 also ran the 0 and 25% shares picking the oldest, `malt=1`, for P6;
    /// session 13 dropped them: `--wins` showed they won periods without moving any cell, and
    /// the store's worst cell held at one and eight shards). (First found
    /// with 11 copies at full size for small caches and one pick: `mini=11/1000/8/1/0.5,
    /// mrate=1,malt=0`.) The copies evict more cheaply than the cache (4 samples and a pool
    /// of 4 per region, `msamp=4,mpool=4`; session 10: with `resident=2` every cell still
    /// holds, worst shift 1% -0.40, where the cache's own 10 and 16 gave -0.48). The cache
    /// itself samples 6 per eviction into pools of 8 (`k=6,pool=8`; session 11: worst shift
    /// 1% -0.32 and average 58.20, where 10 and 16 gave -0.41 and 58.14).
    /// `policylab --cand minisim`.
    pub fn minisim() -> Self {
        Self {
            lfu_pick: 12,
            sketch_width: 8,
            guard: 0.0,
            dead_band: 0.0,
            samples: 6,
            pool: 8,
            minis: 3,
            mini_size: 1000,
            mini_period: 8.0,
            mini_max: 1.0,
            mini_decay: 0.5,
            mini_rate_min: 4,
            mini_alt_pick: 0,
            mini_samples: 4,
            mini_pool: 4,
            mode: Mode::Window {
                init: 0.0,
                adapt: Adapt::Fixed,
                min: 0.0,
                max: 1.0,
            },
            ..Self::next()
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u64,
    hash: u64,
    stamp: u64,
    window: bool,
    /// Hit while in the main space (sampled SLRU; only with `Config::slru`).
    protected: bool,
    /// Own count and the sketch's halvings when it was written (`Config::resident`).
    freq: u8,
    fage: u32,
}

impl Entry {
    /// Eviction rank: recency, with protected main entries after every probation one.
    fn rank(&self) -> u64 {
        self.stamp + (u64::from(self.protected) << 40)
    }
}

const MAIN: usize = 0;
const WINDOW: usize = 1;

/// Climber state (Caffeine's simple hill climber).
#[derive(Debug, Clone)]
struct Climber {
    period: u64,
    initial_step: f64,
    step: f64,
    hits: u64,
    requests: u64,
    previous: Option<f64>,
}

impl Climber {
    fn new(period: u64, step: f64) -> Self {
        Self {
            period: period.max(100),
            initial_step: step,
            step,
            hits: 0,
            requests: 0,
            previous: None,
        }
    }

    /// Counts a request; at the end of a period returns the move to make.
    fn record(&mut self, hit: bool) -> Option<f64> {
        self.requests += 1;
        self.hits += u64::from(hit);
        if self.requests < self.period {
            return None;
        }
        let rate = self.hits as f64 / self.requests as f64;
        self.hits = 0;
        self.requests = 0;
        let step = match self.previous {
            None => self.step,
            Some(prev) => {
                let mut s = self.step;
                if rate < prev {
                    s = -s;
                }
                if (rate - prev).abs() >= 0.05 {
                    s = s.signum() * self.initial_step;
                } else {
                    s *= 0.98;
                }
                s
            }
        };
        self.step = step;
        self.previous = Some(rate);
        Some(step)
    }
}

/// A sampled store model running one [`Mode`].
#[derive(Debug, Clone)]
pub struct Adaptive {
    cfg: Config,
    capacity: usize,
    slots: Vec<Entry>,
    index: HashMap<u64, u32, RandomState>,
    pools: [Pool; 2],
    rng: Rng,
    clock: u64,
    sketch: Sketch,
    ghosts: Ghosts,
    seq_ghosts: SeqGhosts,
    window_len: usize,
    /// The slot of the last newcomer stored as a window entry (`Config::no_decline`).
    newest_window: Option<usize>,
    /// The adaptive parameter: window share (Window) or bias (Biased).
    param: f64,
    climber: Option<Climber>,
    hasher: RandomState,
    hits_seen: u64,
    /// Density climber: requests, window hits and main hits this period.
    density: (u64, u64, u64),
    /// Counted marginal ghost hits so far: (filtered, main).
    pub ghost_hits: (u64, u64),
    protected_len: usize,
    /// Buffered hit hashes (see `Config::hit_buffer`).
    pending: Vec<u64>,
    /// Hits since the last drain, kept or dropped.
    pending_hits: u64,
    /// Moving average of the protected fraction of sampled main entries.
    protected_share: f64,
    /// Phase detector: (requests, hits) this period, and the previous period's hit ratio.
    phase: (u64, u64, Option<f64>),
    /// Phase changes detected so far.
    pub resets: u64,
    /// The largest the adaptive parameter has been.
    pub max_param: f64,
    /// Momentum of the marginal-ghost step (`Config::accel`) and the direction of its run.
    momentum: f64,
    run_up: Option<bool>,
    /// The density guard's last `ln(window density / main density)` (0 when unmeasured).
    last_density: f64,
    /// Moving average (1/64) of the main share of counted ghost hits.
    main_ghost_share: f64,
    /// Entries whose stamp is older than this count 0 in a duel (`Config::epoch`).
    epoch: u64,
    /// An armed confirmation check: periods left, hit ratio before the drop.
    pending_reset: Option<(u32, f64)>,
    /// Misses in this reset period, and those of keys the sketch counted 0 (`Config::novel`).
    period_misses: (u64, u64),
    /// Hits on main entries so far, at the last phase period's end, and in the period before.
    main_hits_seen: u64,
    main_hits_mark: u64,
    main_hits_prev: u64,
    /// Miniature simulations (`Config::minis`): each copy and its smoothed score, the
    /// sampling modulus, the requests this period, and the copies' misses this period.
    minis: Vec<Adaptive>,
    mini_scores: Vec<f64>,
    mini_misses: Vec<u64>,
    mini_rate: u64,
    mini_requests: u64,
    /// Periods each copy of `minis` has won so far (lab instrumentation).
    pub mini_wins: Vec<u64>,
}

impl Adaptive {
    /// A model of `capacity` entries.
    pub fn new(capacity: usize, cfg: Config, seed: u64) -> Self {
        let param = match cfg.mode {
            Mode::Biased { init, .. } => init,
            Mode::Window { init, .. } => init,
            _ => 0.0,
        };
        let climber = match cfg.mode {
            Mode::Biased {
                adapt: Adapt::Climb { period, step },
                ..
            }
            | Mode::Window {
                adapt: Adapt::Climb { period, step },
                ..
            } => Some(Climber::new((period * capacity as f64) as u64, step)),
            _ => None,
        };
        Self {
            cfg,
            capacity,
            slots: Vec::with_capacity(capacity),
            index: HashMap::with_capacity_and_hasher(capacity, RandomState::with_seeds(9, 8, 7, 6)),
            // Without a pool, each eviction picks the best of its own samples (a pool of the
            // sample's size, emptied before each eviction).
            pools: [
                Pool::new(if cfg.pool == 0 { cfg.samples } else { cfg.pool }),
                Pool::new(if cfg.pool == 0 { cfg.samples } else { cfg.pool }),
            ],
            rng: Rng::new(seed),
            clock: 0,
            sketch: Sketch {
                count_added_only: cfg.count_added_only,
                conservative: cfg.conservative,
                ..Sketch::with_width(
                    capacity,
                    cfg.sketch_period,
                    cfg.doorkeeper,
                    cfg.sketch_width,
                )
            }
            .with_min_period(cfg.sketch_min_records),
            ghosts: Ghosts::new((capacity as f64 * cfg.ghost_ratio) as usize),
            seq_ghosts: SeqGhosts::new(match cfg.mode {
                Mode::Window {
                    adapt: Adapt::Marginal { reach, .. },
                    ..
                } => (2.0 * reach * capacity as f64) as usize,
                _ => 0,
            }),
            window_len: 0,
            newest_window: None,
            param,
            climber,
            hasher: RandomState::with_seeds(1, 1, 2, 3),
            hits_seen: 0,
            density: (0, 0, 0),
            ghost_hits: (0, 0),
            protected_len: 0,
            pending: Vec::new(),
            pending_hits: 0,
            protected_share: 0.0,
            phase: (0, 0, None),
            resets: 0,
            max_param: 0.0,
            momentum: 1.0,
            run_up: None,
            last_density: 0.0,
            main_ghost_share: 0.5,
            epoch: 0,
            pending_reset: None,
            period_misses: (0, 0),
            main_hits_seen: 0,
            main_hits_mark: 0,
            main_hits_prev: 0,
            minis: Vec::new(),
            mini_scores: Vec::new(),
            mini_misses: Vec::new(),
            mini_rate: 1,
            mini_requests: 0,
            mini_wins: Vec::new(),
        }
        .with_minis(seed)
    }

    /// Builds the miniature simulations of `Config::minis` (or `Config::mini_grid`).
    fn with_minis(mut self, seed: u64) -> Self {
        let n = self.cfg.minis;
        let grid = self.cfg.mini_grid_len.min(MINI_GRID_MAX);
        if (n == 0 && grid == 0) || self.capacity == 0 {
            return self;
        }
        self.mini_rate = ((self.capacity / self.cfg.mini_size.max(1)) as u64)
            .max(self.cfg.mini_rate_min)
            .max(1);
        let size = (self.capacity as u64 / self.mini_rate).max(1) as usize;
        // (share, pick, seed index) of every copy, in build order.
        let mut copies: Vec<(f64, usize, usize)> = Vec::new();
        if grid > 0 {
            for (k, &(share, pick)) in self.cfg.mini_grid[..grid].iter().enumerate() {
                let pick = if pick == 0 { self.cfg.lfu_pick } else { pick };
                copies.push((share, pick, k));
            }
        } else {
            let picks = if self.cfg.mini_alt_pick > 0 {
                vec![self.cfg.lfu_pick, self.cfg.mini_alt_pick]
            } else {
                vec![self.cfg.lfu_pick]
            };
            for (j, &pick) in picks.iter().enumerate() {
                for i in 0..n {
                    let share = if n == 1 {
                        self.cfg.mini_max
                    } else {
                        // Quadratic spacing: fine steps near a shut window, where most traces sit.
                        self.cfg.mini_max * (i as f64 / (n - 1) as f64).powi(2)
                    };
                    if j > 0 && share >= 1.0 {
                        // A window over the whole copy leaves main empty: no pick is ever made
                        // there, so the second pick's copy would repeat the first's (the store's
                        // `minisim.rs` runs it once too).
                        continue;
                    }
                    copies.push((share, pick, j * n + i));
                }
            }
        }
        for (k, &(share, pick, s)) in copies.iter().enumerate() {
            if k < 64 && self.cfg.mini_skip & (1 << k) != 0 {
                continue;
            }
            let mut cfg = self.cfg;
            cfg.minis = 0;
            cfg.mini_grid_len = 0;
            cfg.dead_band = 0.0;
            cfg.lfu_pick = pick;
            if self.cfg.mini_samples > 0 {
                cfg.samples = self.cfg.mini_samples;
            }
            if self.cfg.mini_pool > 0 {
                cfg.pool = self.cfg.mini_pool;
            }
            cfg.mode = Mode::Window {
                init: share,
                adapt: Adapt::Fixed,
                min: share,
                max: share,
            };
            self.minis
                .push(Adaptive::new(size, cfg, seed ^ ((s as u64 + 1) * 0x9E37)));
        }
        self.mini_scores = vec![0.0; self.minis.len()];
        self.mini_misses = vec![0; self.minis.len()];
        self.mini_wins = vec![0; self.minis.len()];
        self
    }

    /// The copies of `Config::minis` that run, in order: (window share, victim pick).
    pub fn mini_copies(&self) -> Vec<(f64, usize)> {
        self.minis
            .iter()
            .map(|m| (m.param, m.cfg.lfu_pick))
            .collect()
    }

    /// Feeds the miniature simulations and, at a period's end, moves the window to the share
    /// of the copy that missed least.
    fn run_minis(&mut self, key: u64) {
        if fmix64(key ^ 0xA5A5_5A5A).is_multiple_of(self.mini_rate) {
            for (m, misses) in self.minis.iter_mut().zip(&mut self.mini_misses) {
                if !m.access(key) {
                    *misses += 1;
                }
            }
        }
        self.mini_requests += 1;
        if (self.mini_requests as f64) < self.cfg.mini_period * self.capacity as f64 {
            return;
        }
        self.mini_requests = 0;
        let decay = self.cfg.mini_decay;
        let mut best = 0;
        for i in 0..self.minis.len() {
            self.mini_scores[i] = decay * self.mini_scores[i] + self.mini_misses[i] as f64;
            self.mini_misses[i] = 0;
            if self.mini_scores[i] < self.mini_scores[best] {
                best = i;
            }
        }
        self.mini_wins[best] += 1;
        let share = self.minis[best].param;
        let by = share - self.param;
        self.nudge(by);
        // With two victim picks simulated, the main space takes the winner's too.
        self.cfg.lfu_pick = self.minis[best].cfg.lfu_pick;
    }

    /// The adaptive parameter now (window share or bias).
    pub fn param(&self) -> f64 {
        self.param
    }

    fn uses_sketch(&self) -> bool {
        !matches!(self.cfg.mode, Mode::Lru)
    }

    fn bounds(&self) -> (f64, f64) {
        match self.cfg.mode {
            Mode::Window { min, max, .. } => (min, max),
            _ => (0.0, 16.0),
        }
    }

    fn nudge(&mut self, by: f64) {
        let (lo, hi) = self.bounds();
        self.param = (self.param + by).clamp(lo, hi);
        self.max_param = self.max_param.max(self.param);
    }

    /// Reads the sample window into the per-segment pools.
    fn sample(&mut self) {
        if self.cfg.pool == 0 {
            self.pools.iter_mut().for_each(|p| p.entries.clear());
        }
        let len = self.slots.len();
        let mut at = self.rng.below(len as u64) as usize;
        let over = if self.cfg.slru_sampled_share {
            let (mut main, mut protected) = (0u32, 0u32);
            let mut i = at;
            for _ in 0..self.cfg.samples.min(len) {
                let e = &self.slots[i];
                main += u32::from(!e.window);
                protected += u32::from(e.protected);
                i = if i + 1 == len { 0 } else { i + 1 };
            }
            if main > 0 {
                let f = f64::from(protected) / f64::from(main);
                self.protected_share += (f - self.protected_share) / 64.0;
            }
            self.protected_share > self.cfg.slru_share
        } else {
            self.protected_len as f64 > (len - self.window_len) as f64 * self.cfg.slru_share
        };
        if self.cfg.slru && over {
            let mut oldest: Option<usize> = None;
            let mut i = at;
            for _ in 0..self.cfg.samples.min(len) {
                let e = &self.slots[i];
                if e.protected && oldest.is_none_or(|o| e.stamp < self.slots[o].stamp) {
                    oldest = Some(i);
                }
                i = if i + 1 == len { 0 } else { i + 1 };
            }
            if let Some(o) = oldest {
                self.slots[o].protected = false;
                self.protected_len -= 1;
            }
        }
        for _ in 0..self.cfg.samples.min(len) {
            let e = &self.slots[at];
            let seg = if e.window { WINDOW } else { MAIN };
            self.pools[seg].offer(e.rank(), at as u32);
            at += 1;
            if at == len {
                at = 0;
            }
        }
    }

    /// The best pooled victim of `seg` that still ranks as recorded (as the store settles).
    fn settle(&mut self, seg: usize) -> Option<usize> {
        while let Some((rank, idx)) = self.pools[seg].pop_best() {
            let e = &self.slots[idx as usize];
            if (e.window as usize) != seg {
                // Moved segment since pooled (promoted, or refilled by a newcomer).
                let other = if e.window { WINDOW } else { MAIN };
                self.pools[other].offer(e.rank(), idx);
                continue;
            }
            let r = e.rank();
            if r <= rank || self.pools[seg].best_rank().is_none_or(|b| r <= b) {
                return Some(idx as usize);
            }
            self.pools[seg].offer(r, idx);
        }
        None
    }

    /// The main victim: of the `lfu_pick` best settled main candidates, the least frequent
    /// (the oldest among equals); the others go back to the pool.
    fn main_victim(&mut self) -> Option<usize> {
        let first = self.settle(MAIN)?;
        if self.cfg.lfu_pick <= 1 || !self.uses_sketch() {
            return Some(first);
        }
        let mut best = (self.count_of(first), first);
        let mut others = Vec::new();
        for _ in 1..self.cfg.lfu_pick {
            let Some(c) = self.settle(MAIN) else { break };
            let f = self.count_of(c);
            if f < best.0 {
                others.push(best.1);
                best = (f, c);
            } else {
                others.push(c);
            }
        }
        for o in others {
            self.put_back(o);
        }
        Some(best.1)
    }

    /// A main victim's frequency in a duel: the sketch's estimate, halved for every
    /// `idle x capacity` requests since its last recorded hit (`Config::idle`).
    fn victim_frequency(&self, v: usize) -> u8 {
        if self.slots[v].stamp < self.epoch {
            // Not hit since the last detected phase change (`Config::epoch`).
            return 0;
        }
        let mut f = self.count_of(v);
        let idle = (self.clock - self.slots[v].stamp).max(1) as f64;
        if self.cfg.stale > 0.0 {
            // An entry idle far longer than its count's expected gap (records per aging period
            // / count) no longer comes at that rate: its count is capped at what its idle
            // time supports.
            let supported = self.cfg.stale * self.sketch.sample_size as f64 / idle;
            f = f.min(supported.min(255.0) as u8);
        }
        if self.cfg.idle <= 0.0 {
            return f;
        }
        let unit = (self.cfg.idle * self.capacity as f64).max(1.0);
        let halvings = (idle / unit) as u32;
        f.checked_shr(halvings).unwrap_or(0)
    }

    /// Whether a tie goes to the newcomer: the victim has been idle longer than
    /// `tie_idle x capacity` requests (`Config::tie_idle`).
    fn stale_tie(&self, v: usize) -> bool {
        self.cfg.tie_idle > 0.0
            && (self.clock - self.slots[v].stamp) as f64 > self.cfg.tie_idle * self.capacity as f64
    }

    fn put_back(&mut self, idx: usize) {
        let e = self.slots[idx];
        let seg = if e.window { WINDOW } else { MAIN };
        self.pools[seg].offer(e.rank(), idx as u32);
    }

    /// Entry `i`'s frequency: its own count halved per sketch aging since it was written
    /// (`Config::resident`), or the sketch's estimate of its key.
    fn count_of(&self, i: usize) -> u8 {
        let e = &self.slots[i];
        if self.cfg.resident {
            e.freq.checked_shr(self.sketch.ages - e.fage).unwrap_or(0)
        } else {
            self.sketch.frequency(e.hash)
        }
    }

    /// A new entry's count: what the sketch remembers of its key (`Config::resident`).
    fn seed_count(&self, hash: u64) -> u8 {
        if self.cfg.resident {
            self.sketch.frequency(hash)
        } else {
            0
        }
    }

    fn replace(&mut self, idx: usize, key: u64, hash: u64, window: bool, kind: GhostKind) {
        if self.cfg.resident {
            let f = self.count_of(idx);
            self.sketch.fold(self.slots[idx].hash, f);
        }
        let old = self.slots[idx];
        if old.protected {
            self.protected_len -= 1;
        }
        self.index.remove(&old.key);
        self.ghost(old.hash, kind);
        if old.window {
            self.window_len -= 1;
        }
        if window {
            self.window_len += 1;
            self.newest_window = Some(idx);
        }
        self.slots[idx] = Entry {
            key,
            hash,
            stamp: self.clock,
            window,
            protected: false,
            freq: self.seed_count(hash),
            fage: self.sketch.ages,
        };
        self.index.insert(key, idx as u32);
    }

    fn push(&mut self, key: u64, hash: u64, window: bool) {
        self.index.insert(key, self.slots.len() as u32);
        self.slots.push(Entry {
            key,
            hash,
            stamp: self.clock,
            window,
            protected: false,
            freq: self.seed_count(hash),
            fage: self.sketch.ages,
        });
        if window {
            self.newest_window = Some(self.slots.len() - 1);
            self.window_len += 1;
        }
    }

    /// Any victim when the pools came up empty.
    fn fallback(&mut self) -> usize {
        self.rng.below(self.slots.len() as u64) as usize
    }

    fn evict_for(&mut self, key: u64, hash: u64) {
        self.sample();
        match self.cfg.mode {
            Mode::Lru => {
                let v = self.main_victim().unwrap_or_else(|| self.fallback());
                self.replace(v, key, hash, false, GhostKind::Main);
            }
            Mode::TinyLfu => {
                let v = self.main_victim().unwrap_or_else(|| self.fallback());
                if self.sketch.frequency(hash) > self.sketch.frequency(self.slots[v].hash) {
                    self.replace(v, key, hash, false, GhostKind::Main);
                } else {
                    self.ghost(hash, GhostKind::Filtered);
                }
            }
            Mode::Biased { .. } => {
                let v = self.main_victim().unwrap_or_else(|| self.fallback());
                let fresh = f64::from(self.sketch.frequency(hash));
                let old = f64::from(self.sketch.frequency(self.slots[v].hash));
                if fresh + self.param > old {
                    self.replace(v, key, hash, false, GhostKind::Main);
                } else {
                    self.ghost(hash, GhostKind::Filtered);
                    self.put_back(v);
                }
            }
            Mode::Window { .. } => {
                let share = (self.param - self.cfg.dead_band).max(0.0);
                let mut target = (share * self.capacity as f64).round() as usize;
                if self.cfg.no_decline {
                    // A window of at least the newest newcomer: it is not demoted into main
                    // for free, it duels main's victim like any window entry.
                    target = target.max(1);
                }
                if self.cfg.minis > 0 {
                    // A share that fell (the miniature simulations moved it) is reached by
                    // demoting the window's oldest entries into the main space, as Caffeine
                    // moves window entries to probation when its window shrinks: without it
                    // the duel below keeps the window's length.
                    let mut moved = 0;
                    while self.window_len > target && moved < 4 {
                        let Some(c) = self.settle(WINDOW) else { break };
                        self.slots[c].window = false;
                        self.window_len -= 1;
                        self.put_back(c);
                        moved += 1;
                    }
                }
                if self.window_len >= target {
                    let c = self.settle(WINDOW);
                    let v = self.main_victim();
                    match (c, v) {
                        (Some(c), Some(v)) => self.duel(c, v, key, hash),
                        (None, Some(v))
                            if self.cfg.no_decline
                                && self.newest_window.is_some_and(|i| self.slots[i].window) =>
                        {
                            let c = self.newest_window.expect("checked");
                            self.duel(c, v, key, hash);
                        }
                        (None, Some(v)) if self.cfg.no_decline => {
                            // No window entry yet: the newcomer starts the window.
                            self.replace(v, key, hash, true, GhostKind::Main);
                        }
                        (None, Some(v)) => {
                            let fresh = self.sketch.frequency(hash);
                            let fv = self.victim_frequency(v);
                            if fresh > fv || (fresh == fv && self.stale_tie(v)) {
                                // Proven already: it joins the main space, so the window
                                // stays at its target.
                                self.replace(v, key, hash, false, GhostKind::Main);
                            } else {
                                if self.cfg.keep_winner
                                    || self.cfg.keep_newcomer_winner
                                    || i16::from(fv) - i16::from(fresh)
                                        <= i16::from(self.cfg.keep_margin)
                                {
                                    self.put_back(v);
                                }
                                self.ghost(hash, GhostKind::Filtered);
                            }
                        }
                        (Some(c), None) => self.replace(c, key, hash, true, GhostKind::Filtered),
                        (None, None) => {
                            let v = self.fallback();
                            self.replace(v, key, hash, true, GhostKind::Main);
                        }
                    }
                } else {
                    let v = match self.main_victim() {
                        Some(v) => v,
                        None => self.settle(WINDOW).unwrap_or_else(|| self.fallback()),
                    };
                    self.replace(v, key, hash, true, GhostKind::Main);
                }
            }
        }
    }

    /// Window entry `c` duels main's victim `v`; the loser leaves and the newcomer (`key`)
    /// takes its place in the window.
    fn duel(&mut self, c: usize, v: usize, key: u64, hash: u64) {
        let fc = self.count_of(c);
        let fv = self.victim_frequency(v);
        if fc > fv || (fc == fv && self.stale_tie(v)) {
            self.slots[c].window = false;
            self.window_len -= 1;
            self.put_back(c);
            self.replace(v, key, hash, true, GhostKind::Main);
        } else {
            if self.cfg.keep_winner
                || i16::from(fv) - i16::from(fc) <= i16::from(self.cfg.keep_margin)
            {
                self.put_back(v);
            }
            self.replace(c, key, hash, true, GhostKind::Filtered);
        }
    }

    fn ghost(&mut self, hash: u64, kind: GhostKind) {
        self.ghosts.insert(hash, kind);
        self.seq_ghosts.insert(hash, kind);
        if let (
            GhostKind::Filtered,
            Mode::Window {
                adapt: Adapt::Marginal { drift, .. },
                ..
            },
        ) = (kind, self.cfg.mode)
            && drift > 0.0
        {
            self.nudge(-drift / self.capacity as f64);
        }
    }

    fn adapt_on_ghost(&mut self, kind: GhostKind) {
        let step = match self.cfg.mode {
            Mode::Biased {
                adapt: Adapt::Ghost { step },
                ..
            }
            | Mode::Window {
                adapt: Adapt::Ghost { step },
                ..
            } => step,
            _ => return,
        };
        match kind {
            GhostKind::Filtered => self.nudge(step),
            GhostKind::Main => self.nudge(-step),
        }
    }
}

impl Policy for Adaptive {
    fn access(&mut self, key: u64) -> bool {
        self.clock += 1;
        let hash = self.hasher.hash_one(key);
        let hit = if let Some(&idx) = self.index.get(&key) {
            let e = &mut self.slots[idx as usize];
            if e.window {
                self.density.1 += 1;
            } else {
                self.density.2 += 1;
                self.main_hits_seen += 1;
            }
            let restamped = self.clock - e.stamp >= self.cfg.resolution;
            if self.cfg.slru && !e.window && !e.protected && (restamped || !self.cfg.protect_gated)
            {
                e.protected = true;
                self.protected_len += 1;
            }
            if restamped {
                e.stamp = self.clock;
            }
            if self.cfg.resident && self.uses_sketch() && (restamped || !self.cfg.resident_gated) {
                let ages = self.sketch.ages;
                let e = &mut self.slots[idx as usize];
                let now = e.freq.checked_shr(ages - e.fage).unwrap_or(0);
                let raised = now < MAX_COUNT + 1;
                e.freq = (now + 1).min(MAX_COUNT + 1);
                e.fage = ages;
                if raised || !self.sketch.count_added_only {
                    self.sketch.tick();
                }
            } else if self.cfg.resident {
                // Gated: a hit within the resolution writes nothing, its count included.
            } else if self.uses_sketch() && self.cfg.hit_buffer > 0 {
                self.pending_hits += 1;
                if self.pending.len() < self.cfg.hit_buffer {
                    self.pending.push(hash);
                }
            } else if self.uses_sketch() {
                self.hits_seen += 1;
                if self.hits_seen.is_multiple_of(self.cfg.hit_record) {
                    self.sketch.record(hash);
                }
            }
            true
        } else {
            if self.uses_sketch() {
                let (kept, hits) = (self.pending.len() as u64, self.pending_hits);
                self.pending_hits = 0;
                for h in std::mem::take(&mut self.pending) {
                    self.sketch.record(h);
                }
                // Thinning: when the buffer dropped hits, the miss is recorded with the
                // probability a hit had of being kept, so the sketch sees hits and misses
                // at the same rate (dropping only hits makes every miss look hotter than
                // the entries that are hit in long runs).
                let record = !self.cfg.thin_misses || hits <= kept || self.rng.below(hits) < kept;
                if record {
                    self.sketch.record(hash);
                }
            }
            if self.capacity > 0 {
                let ghost = self.ghosts.take(hash);
                if self.cfg.novel > 0.0 {
                    self.period_misses.0 += 1;
                    self.period_misses.1 += u64::from(ghost.is_none());
                }
                if let Some(kind) = ghost {
                    self.adapt_on_ghost(kind);
                }
                if let Mode::Window {
                    adapt: Adapt::Marginal { reach, step, .. },
                    ..
                } = self.cfg.mode
                {
                    let reach = (reach * self.capacity as f64).max(1.0) as u64;
                    if let Some(kind) = self.seq_ghosts.take(hash, reach) {
                        if kind == GhostKind::Filtered {
                            self.ghost_hits.0 += 1;
                        } else {
                            self.ghost_hits.1 += 1;
                        }
                        let scale = if self.cfg.scale_step {
                            (self.capacity as f64 / 1000.0).max(1.0)
                        } else {
                            1.0
                        };
                        let up = kind == GhostKind::Filtered;
                        // Veto: while the window earned fewer hits per entry than main in
                        // the last guard period, ghosts may not grow it.
                        let vetoed = up && self.cfg.veto && self.last_density < 0.0;
                        if vetoed {
                            self.momentum = 1.0;
                            self.run_up = None;
                        } else if self.cfg.accel > 1.0
                            && (!self.cfg.veto || self.last_density > 0.0)
                        {
                            // Momentum: a run of ghost hits that all ask the same way moves
                            // faster and faster; one the other way starts over.
                            if self.run_up == Some(up) {
                                let cap = (self.cfg.accel_cap * self.capacity as f64).max(1.0);
                                self.momentum = (self.momentum * self.cfg.accel).min(cap);
                            } else {
                                self.momentum = 1.0;
                                self.run_up = Some(up);
                            }
                        }
                        let mut fast = 1.0;
                        if self.cfg.fast_mult > 1.0 {
                            // One-sided evidence: while main's victims almost never come back,
                            // the window grows `fast_mult` times as fast.
                            let x = if up { 0.0 } else { 1.0 };
                            self.main_ghost_share += (x - self.main_ghost_share) / 64.0;
                            if up && self.main_ghost_share < self.cfg.fast_below {
                                fast = self.cfg.fast_mult;
                            }
                        }
                        let by = step * scale * self.momentum * fast / self.capacity as f64;
                        if !vetoed {
                            self.nudge(if up { by } else { -by });
                        }
                    }
                }
                if self.slots.len() < self.capacity {
                    // While filling, the window takes its share and the rest goes to main
                    // (as Caffeine moves window overflow to probation before the cache is full).
                    let window = matches!(self.cfg.mode, Mode::Window { .. })
                        && (self.window_len as f64)
                            < (self.param - self.cfg.dead_band).max(0.0) * self.capacity as f64;
                    self.push(key, hash, window);
                } else {
                    self.evict_for(key, hash);
                }
            }
            false
        };
        let density = match self.cfg.mode {
            Mode::Window {
                adapt: Adapt::Density { period },
                ..
            } => Some((period, false)),
            Mode::Window { .. } if self.cfg.guard > 0.0 => Some((self.cfg.guard, true)),
            _ => None,
        };
        if let Some((period, shrink_only)) = density {
            self.density.0 += 1;
            if self.density.0 as f64 >= period * self.capacity as f64 {
                let (_, wh, mh) = self.density;
                let wlen = self.window_len.max(1) as f64;
                let mlen = (self.slots.len() - self.window_len).max(1) as f64;
                let e = ((wh as f64 + 0.5) / wlen / ((mh as f64 + 0.5) / mlen)).ln();
                // Too small a window to measure (under 0.5% of the capacity) says nothing.
                self.last_density = if (self.window_len as f64) < 0.005 * self.capacity as f64 {
                    0.0
                } else {
                    e
                };
                let grow = self.cfg.guard_above > 0.0 && e > self.cfg.guard_above;
                if !shrink_only || e < self.cfg.guard_below.min(0.0) || grow {
                    self.nudge(e.signum() * (0.03 * e.abs()).min(0.30));
                }
                self.density = (0, 0, 0);
            }
        }
        if (self.cfg.reset_drop > 0.0 || self.cfg.reset_main_drop > 0.0) && self.uses_sketch() {
            self.phase.0 += 1;
            self.phase.1 += u64::from(hit);
            if self.phase.0 >= self.capacity.max(1) as u64 {
                let rate = self.phase.1 as f64 / self.phase.0 as f64;
                let main_now = self.main_hits_seen - self.main_hits_mark;
                self.main_hits_mark = self.main_hits_seen;
                let main_prev = std::mem::replace(&mut self.main_hits_prev, main_now);
                let collapsed = self.cfg.reset_main_drop > 0.0
                    && main_prev as f64 >= 0.05 * self.phase.0 as f64
                    && (main_now as f64) < self.cfg.reset_main_drop * main_prev as f64;
                let dropped = self.cfg.reset_drop > 0.0
                    && self
                        .phase
                        .2
                        .is_some_and(|prev| prev - rate > self.cfg.reset_drop);
                let mut fire = collapsed || dropped;
                if self.cfg.novel > 0.0 {
                    let (misses, novel) = std::mem::take(&mut self.period_misses);
                    fire &= novel as f64 >= self.cfg.novel * misses.max(1) as f64;
                }
                if self.cfg.confirm > 0 {
                    // Confirmation: a drop arms a check `confirm` periods later, which fires
                    // only if the hit ratio is still below the pre-drop level by half the
                    // threshold (a phase that comes back has recovered by then).
                    if let Some((left, before)) = self.pending_reset {
                        if left <= 1 {
                            fire = rate < before - self.cfg.reset_drop / 2.0;
                            self.pending_reset = None;
                        } else {
                            self.pending_reset = Some((left - 1, before));
                            fire = false;
                        }
                    } else if fire {
                        let before = self.phase.2.unwrap_or(rate);
                        self.pending_reset = Some((self.cfg.confirm, before));
                        fire = false;
                    }
                }
                if fire {
                    for _ in 0..self.cfg.reset_halvings {
                        self.sketch.halve();
                    }
                    if self.cfg.epoch {
                        self.epoch = self.clock.saturating_sub(self.capacity as u64);
                    }
                    if self.cfg.reset_window > self.param {
                        let by = self.cfg.reset_window - self.param;
                        self.nudge(by);
                    }
                    self.resets += 1;
                }
                self.phase = (0, 0, Some(rate));
            }
        }
        if let Some(c) = &mut self.climber
            && let Some(step) = c.record(hit)
        {
            self.nudge(step);
        }
        if !self.minis.is_empty() {
            self.run_minis(key);
        }
        hit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{ExactLru, simulate};

    fn keys() -> Vec<u64> {
        let mut rng = Rng::new(3);
        (0..50_000).map(|_| rng.below(400) * rng.below(3)).collect()
    }

    #[test]
    fn sampled_lru_model_tracks_exact_lru() {
        let exact = simulate(&mut ExactLru::new(100), keys()).percent();
        let model = simulate(&mut Adaptive::new(100, Config::store(Mode::Lru), 1), keys());
        assert!(
            (exact - model.percent()).abs() < 1.0,
            "{exact} {}",
            model.percent()
        );
    }

    #[test]
    fn never_holds_more_than_capacity_and_window_stays_counted() {
        let mode = Mode::Window {
            init: 0.2,
            adapt: Adapt::Ghost { step: 0.01 },
            min: 0.0,
            max: 1.0,
        };
        let mut p = Adaptive::new(64, Config::store(mode), 5);
        simulate(&mut p, keys());
        assert_eq!(p.slots.len(), 64);
        assert_eq!(p.index.len(), 64);
        assert_eq!(p.window_len, p.slots.iter().filter(|e| e.window).count());
        assert!((0.0..=1.0).contains(&p.param()));
    }

    #[test]
    fn recommended_window_grows_on_recency_and_stays_shut_on_a_loop() {
        // Recency: a sliding working set (each key requested a few times within a short span,
        // then never again) rewards a window; the filter alone refuses every newcomer.
        let sliding: Vec<u64> = (0..200_000u64).map(|i| i / 4 + (i % 4) * 7).collect();
        let mut p = Adaptive::new(500, Config::recommended(), 1);
        simulate(&mut p, sliding.iter().copied());
        assert!(
            p.ghost_hits.0 > 0,
            "filtered keys came back: {:?}",
            p.ghost_hits
        );
        let windowed = simulate(
            &mut Adaptive::new(500, Config::recommended(), 1),
            sliding.iter().copied(),
        );
        let filter_only = simulate(
            &mut Adaptive::new(500, Config::store(Mode::TinyLfu), 1),
            sliding.iter().copied(),
        );
        assert!(
            windowed.hits > filter_only.hits,
            "{windowed:?} {filter_only:?}"
        );
        // A loop 10% longer than the cache: the guard keeps the window from taking it over
        // (exact LRU hits nothing here; the filter keeps most of the loop).
        let mut p = Adaptive::new(1000, Config::recommended(), 42);
        let looped = simulate(&mut p, (0..300_000u64).map(|i| i % 1100));
        assert!(looped.percent() > 80.0, "{}", looped.percent());
        assert!(p.param() < 0.1, "window share {}", p.param());
    }

    #[test]
    fn idle_decay_lets_a_moved_hot_set_in_sooner() {
        // A zipf hot set that moves to new keys every 40 x the capacity: the old hot keys keep
        // their sketch counts for 64 x capacity records, so without the decay the new hot set
        // is refused for most of each phase.
        let zipf = crate::zipf::Zipf::new(10_000, 1.0).expect("zipf");
        let keys = crate::workload::shifting_zipf(&zipf, 400_000, 20_000, 5);
        let plain = simulate(
            &mut Adaptive::new(500, Config::recommended(), 1),
            keys.iter().copied(),
        );
        let decayed = simulate(
            &mut Adaptive::new(
                500,
                Config {
                    idle: 8.0,
                    ..Config::recommended()
                },
                1,
            ),
            keys.iter().copied(),
        );
        assert!(
            decayed.percent() > plain.percent() + 1.0,
            "{} {}",
            decayed.percent(),
            plain.percent()
        );
    }

    #[test]
    fn next_keeps_refusing_a_loops_newcomers_where_recommended_lets_them_churn() {
        // A loop 10% longer than the cache: a static set of 1,000 of the 1,100 keys hits
        // 1000/1100 = 90.9%. `next` keeps refusing the loop's newcomers; `recommended` lets
        // some in after sketch halvings, each evicting a key needed sooner.
        let keys = || crate::workload::looping(1100, 2_000_000);
        let next = simulate(&mut Adaptive::new(1000, Config::next(), 42), keys()).percent();
        let churned =
            simulate(&mut Adaptive::new(1000, Config::recommended(), 42), keys()).percent();
        assert!(next > 90.5, "{next}");
        assert!(next > churned + 0.5, "{next} {churned}");
    }

    #[test]
    fn minis_open_the_window_while_the_hot_set_keeps_moving() {
        // A zipf hot set that moves every 8 x the capacity (recency pays: exact LRU is the
        // best policy here); mini caches of 100 entries (every 5th hash bucket).
        let cfg = Config {
            mini_size: 100,
            ..Config::minisim()
        };
        let zipf = crate::zipf::Zipf::new(5_000, 1.0).expect("zipf");
        let keys = crate::workload::shifting_zipf(&zipf, 300_000, 4_000, 3);
        let mut p = Adaptive::new(500, cfg, 1);
        let adaptive = simulate(&mut p, keys.iter().copied()).percent();
        let shut = simulate(
            &mut Adaptive::new(500, Config { minis: 0, ..cfg }, 1),
            keys.iter().copied(),
        )
        .percent();
        assert!(p.param() >= 0.5, "window share {}", p.param());
        assert!(adaptive > shut + 2.0, "{adaptive} {shut}");
    }

    #[test]
    fn minis_shrink_a_full_window_on_a_loop() {
        // A loop 10% longer than the cache, starting with the window at the whole cache (where
        // it hits nothing): the minis must move the share down and the window must shrink to it
        // (demoting its oldest entries; the duel alone keeps a window's length).
        let cfg = Config {
            mini_size: 100,
            mode: Mode::Window {
                init: 1.0,
                adapt: Adapt::Fixed,
                min: 0.0,
                max: 1.0,
            },
            ..Config::minisim()
        };
        let mut p = Adaptive::new(1000, cfg, 42);
        let looped = simulate(&mut p, (0..400_000u64).map(|i| i % 1100)).percent();
        assert!(p.param() < 0.1, "window share {}", p.param());
        assert!(p.window_len < 100, "window length {}", p.window_len);
        assert!(looped > 80.0, "{looped}");
    }

    #[test]
    fn the_dead_band_keeps_a_small_ghost_driven_share_from_opening_the_window() {
        let mut p = Adaptive::new(1000, Config::next(), 1);
        p.param = 0.05;
        let keys: Vec<u64> = (0..20_000u64).collect();
        simulate(&mut p, keys.iter().copied());
        assert_eq!(p.window_len, 0, "a 5% share is inside the 8% dead band");
        let mut q = Adaptive::new(1000, Config::recommended(), 1);
        q.param = 0.05;
        simulate(&mut q, keys.iter().copied());
        assert!(q.window_len > 0);
    }

    #[test]
    fn pool_zero_takes_the_best_of_the_own_samples() {
        let cfg = Config {
            pool: 0,
            ..Config::store(Mode::Lru)
        };
        let exact = simulate(&mut ExactLru::new(100), keys()).percent();
        let model = simulate(&mut Adaptive::new(100, cfg, 1), keys()).percent();
        assert!((exact - model).abs() < 2.0, "{exact} {model}");
    }

    #[test]
    fn seq_ghosts_count_only_within_reach_of_their_region() {
        let mut g = SeqGhosts::new(64);
        g.insert(1 << 40 | 1, GhostKind::Main);
        for k in 0..10u64 {
            g.insert((k + 100) << 33 | (k + 2), GhostKind::Filtered);
        }
        // Ten filtered evictions do not age the main ghost: it is one main eviction old.
        assert_eq!(g.take(1 << 40 | 1, 2), Some(GhostKind::Main));
        g.insert(5 << 40 | 3, GhostKind::Filtered);
        for k in 0..4u64 {
            g.insert((k + 200) << 33 | (k + 9), GhostKind::Filtered);
        }
        assert_eq!(
            g.take(5 << 40 | 3, 4),
            None,
            "four newer filtered evictions"
        );
    }

    #[test]
    fn ghosts_remember_kind_once() {
        let mut g = Ghosts::new(16);
        g.insert(0xABCD_0000_0000_0003, GhostKind::Main);
        assert_eq!(g.take(0xABCD_0000_0000_0003), Some(GhostKind::Main));
        assert_eq!(g.take(0xABCD_0000_0000_0003), None);
        g.insert(7, GhostKind::Filtered);
        assert_eq!(g.take(7), Some(GhostKind::Filtered));
    }

    #[test]
    fn sketch_counts_and_ages() {
        let mut s = Sketch::new(16, 32, true);
        for _ in 0..5 {
            s.record(42);
        }
        assert_eq!(s.frequency(42), 5);
        for k in 0..600u64 {
            s.record(fmix64(k + 1000));
        }
        assert!(s.frequency(42) < 5);
    }
}
