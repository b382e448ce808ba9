//! The opt-in frequency-aware admission filter (TinyLFU): a 4-row count-min sketch of 4-bit
//! counters plus a "doorkeeper" bit set, per shard.
//!
//! Every lookup records its key's hash. When an insert of a new key needs to evict, the new key is
//! admitted only if it has been requested more often (recently) than the chosen victim, so a burst
//! of one-hit wonders cannot flush a hot working set. Counts decay by halving after
//! `32 x capacity` records: a long window lets keys near the hot set's edge (requested less than
//! once per `10 x capacity` requests) build distinguishable counts before the 4-bit counters
//! saturate. Measured (one shard, 8 samples + pool, hit-ratio points over exact LRU): zipf 1.0
//! over 1M keys, 3M requests: +8.1 at 10K entries, +2.5 at 100K (an ideal top-K cache gains about
//! +9.3 and +3.6 there); ARC P traces at 32K: +7.8 (P12) to +22.2 (P6). It loses where new keys
//! must displace old ones quickly: OLTP -5.7 at 5K and -8.0 at 15K entries (+2.3 at 1K).
//!
//! Recording a lookup writes shared memory (unlike the default policy's hit), precisely:
//! - the doorkeeper word holding the key's bit, with a `fetch_or`, only if the bit is clear
//!   (the key's first lookup since the last aging);
//! - each of the four counter words in which the key's counter holds its minimum, with a plain
//!   relaxed store, only while that minimum is below 15 (a hot key saturates and stops writing);
//! - the shard's record count, with one `fetch_add` per 64 lookups a thread records (each
//!   thread counts its lookups in its own counter stripe and adds them 64 at a time; issue 17:
//!   it was a `fetch_add` on every lookup); a thread without a stripe adds each lookup;
//! - every `32 x capacity` records, the whole sketch, halved by the lookup whose batch crosses
//!   that count.
//!
//! Lost updates under races only lower an estimate, which is harmless.
//!
//! The 4-bit counters are packed sixteen to a `u64` word, as Caffeine packs them: half the
//! memory of a byte per counter, and aging halves a word's sixteen counters with one shift and
//! mask (an increment stores its whole word: see `record` for what a race can lose). Aging runs inline, on the request that crosses the sample size, under no lock but with
//! that request waiting for it; at a shard capacity of 125K (a 1M cache of 8 shards) it went
//! from 2M byte stores to 131K word stores (docs/benchmarks.md measures the spike).

use crate::sync::Ordering;
use crate::sync::plain::AtomicU64;
use crate::tally::Stripe;

const ROWS: usize = 4;
const MAX_COUNT: u8 = 15;
/// The highest estimate: a saturated counter plus the doorkeeper's bit.
pub(crate) const MAX_FREQUENCY: u8 = MAX_COUNT + 1;
/// Lookups a thread counts in its own stripe before adding them to a shard's record count.
const RECORD_BATCH: u64 = 64;
/// 4-bit counters per `u64` word.
const PER_WORD: usize = 16;
/// Counters per 64-byte block (eight words): a key's four counters share one block.
const BLOCK_COUNTERS: usize = BLOCK_WORDS * PER_WORD;
/// Words per block.
const BLOCK_WORDS: usize = 8;
/// Every counter of a word halved: shift right one bit, drop the bit each counter got from the
/// counter above it.
const HALVE_MASK: u64 = 0x7777_7777_7777_7777;
/// Seeds the finaliser that places a key's counters.
const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// Which admission policy a cache uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Admission {
    /// Admit every new entry (plain sampled LRU): never declines an insert, and a get or an
    /// insert costs fewer instructions than the default's, but it tracks exact LRU: the default
    /// beats it by up to 26 hit-ratio points on the P traces (P6) and keeps 90% of a loop a
    /// little larger than the cache, of which it keeps 6 to 19% (docs/benchmarks.md). The default until issue 17; for tables that must keep the newest
    /// key, whatever its frequency.
    Always,
    /// TinyLFU: admit a new entry over its victim only if it was requested more often.
    ///
    /// Every lookup is recorded in its shard's frequency sketch, so a hit writes shared memory:
    /// the key's doorkeeper bit (a `fetch_or`, only on its first lookup since the sketch last
    /// aged), its counters that hold its minimum count (plain stores, only while that count is
    /// below 15: a hot key's hits stop writing them), and the shard's record count (one
    /// `fetch_add` per 64 lookups of a thread); every `32 x capacity` records one lookup halves
    /// the whole sketch.
    TinyLfu,
    /// Sampled W-TinyLFU with an adaptive window (`adaptive.rs`, issue 17): every new key
    /// enters a window; at capacity the oldest sampled window entry duels main's victim (the
    /// least frequent of main's pooled candidates, 12 at most, its count halved
    /// for each `8 x capacity` requests it has been idle) on their counts (each entry counts
    /// its own hits, starting from what the sketch of misses remembers of its key), and the
    /// loser leaves; a victim that wins stays the one to beat. The window's share is chosen by 3
    /// miniature simulations of this policy (window shares of 0, 25 and 100% of the capacity)
    /// over a hash sample of the keys (`minisim.rs`): recency where it pays (a hot set that keeps moving), frequency where it does not (a
    /// loop, a scan, a stable core). Main is a sampled SLRU (an entry hit in main is
    /// protected). Within 0.5 point of the best of exact LRU, quick_cache and moka in every
    /// cell of the hit-ratio tables, at one shard and at eight (docs/benchmarks.md); it
    /// samples 6 entries per eviction into pools of 8 unless told otherwise
    /// ([`ADAPTIVE_SAMPLES`](crate::ADAPTIVE_SAMPLES)). **The default** (since issue 17): the
    /// one setting that is never far behind on any workload measured. Its price, against
    /// [`Always`](Self::Always): a get costs about 1.4 times the instructions and an insert at
    /// capacity about 2.2 times, and it may decline an insert of a new key at capacity
    /// (`Ok(false)`, counted in `Stats::rejections`), as moka and Caffeine do, where sampled
    /// LRU never does.
    ///
    /// A hit writes the entry's own recency word (its stamp, at most once per resolution; its
    /// protected flag once; its resident count while that is below 16, which a hot entry's
    /// soon is) and its thread's hit buffer for the shard (a count, and the key's hash if the
    /// simulations sample it), which the thread's next insert into that shard drains under
    /// the lock; the hit that fills the buffer (one in 8 sampled hits of a thread's) drains
    /// it itself if the shard's write lock is free at once. The sketch records misses; a hit
    /// counts in its entry.
    #[default]
    Adaptive,
}

/// MurmurHash3's 64-bit finaliser: every input bit affects every output bit.
#[inline]
pub(crate) fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    k ^= k >> 33;
    k = k.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    k ^= k >> 33;
    k
}

/// The largest share of capacity the frequency policies size themselves for. A sketch is
/// capped far below it anyway (2^26 counters per row), and their products of the share (a
/// sample period, an idle unit) overflowed for capacities near `u64::MAX`: a capacity that
/// no memory can hold is as good as this one.
pub(crate) const MAX_POLICY_CAPACITY: u64 = 1 << 40;

/// `capacity` as the frequency policies size themselves: 1 to [`MAX_POLICY_CAPACITY`].
pub(crate) fn policy_capacity(capacity: u64) -> u64 {
    capacity.clamp(1, MAX_POLICY_CAPACITY)
}

/// The most entries a weighted shard's frequency sketch is sized for. A weighted share is in
/// weight units (bytes, say), which say nothing of how many entries it holds: sized by it, a
/// 256 MiB cache of byte-weighed values got the largest sketch, 192 MiB, per shard (3 GiB over
/// 16 shards) before holding anything. 2^16 entries a shard is about 0.75 MiB (TinyLFU) or
/// 1.25 MiB (adaptive); a shard holding many more entries shares counters more often.
pub(crate) const WEIGHTED_SKETCH_ENTRIES: u64 = 1 << 16;

/// How many entries a shard's sketch is sized for, for a share of `share` units.
pub(crate) fn sketch_entries(share: u64, weighted: bool) -> u64 {
    match weighted {
        true => share.min(WEIGHTED_SKETCH_ENTRIES),
        false => share,
    }
}

/// Per-shard frequency sketch.
#[derive(Debug)]
pub(crate) struct FrequencySketch {
    /// `ROWS x width` counters in blocks of eight words (`mask + 1` blocks), sixteen 4-bit
    /// counters per word; a key's counters all lie in one block (`slots`).
    counters: Vec<AtomicU64>,
    doorkeeper: Vec<AtomicU64>,
    mask: usize,
    door_mask: usize,
    records: AtomicU64,
    /// Halvings so far: the adaptive policy's resident counts halve as many times as the
    /// sketch did since they were written (`adaptive.rs`).
    ages: AtomicU64,
    sample_size: u64,
    /// Only records that raised a counter (or set a doorkeeper bit) count toward aging, as
    /// Caffeine and moka count them: a hot set's saturated hits do not age the sketch.
    added_only: bool,
}

impl FrequencySketch {
    /// A sketch sized for about `capacity` distinct hot keys.
    pub(crate) fn new(capacity: u64) -> Self {
        Self::with_period(capacity, 32)
    }

    /// A sketch for about `capacity` keys that halves every `period x capacity` records.
    pub(crate) fn with_period(capacity: u64, period: u64) -> Self {
        // Four counters per row per entry of capacity: with fewer, a cold key too often collides
        // with hot ones in every row and is admitted over a hot victim.
        Self::shaped(capacity, period, 4, false)
    }

    /// A sketch for about `capacity` keys with `per_entry` counters per row per entry of
    /// capacity, halving every `period x capacity` records (only those that raised a counter if
    /// `added_only`).
    pub(crate) fn shaped(capacity: u64, period: u64, per_entry: u64, added_only: bool) -> Self {
        let capacity = policy_capacity(capacity);
        let width = usize::try_from(capacity.saturating_mul(per_entry).clamp(64, 1 << 26))
            .unwrap_or(1 << 26)
            .next_power_of_two();
        // 32 doorkeeper bits per entry of capacity, whatever the counters' width (TinyLFU's 4
        // counters per row had that; the adaptive policy's 8 doubled it to 64 bits, 4 more
        // bytes per entry that moved no hit-ratio cell by more than 0.1 but OLTP at 15K, 8
        // shards: 65.54 -> 64.91, still ahead of quick_cache's 64.83; docs/benchmarks.md,
        // session 16).
        let door_bits = usize::try_from(capacity.saturating_mul(32).clamp(512, 1 << 29))
            .unwrap_or(1 << 29)
            .next_power_of_two();
        Self {
            counters: (0..(ROWS * width).div_ceil(PER_WORD))
                .map(|_| AtomicU64::new(0))
                .collect(),
            doorkeeper: (0..door_bits / 64).map(|_| AtomicU64::new(0)).collect(),
            mask: (ROWS * width / BLOCK_COUNTERS).max(1) - 1,
            door_mask: door_bits - 1,
            records: AtomicU64::new(0),
            ages: AtomicU64::new(0),
            sample_size: period.saturating_mul(capacity.max(16)),
            added_only,
        }
    }

    /// The key's four counters, one per row, all in one 64-byte block of eight words (as
    /// Caffeine lays its sketch out): one finaliser picks the block with its low bits and, with
    /// 8 bits of its high half per row, a word of the row's pair (row r uses words 2r and
    /// 2r + 1, so the four never share a word) and a counter in it. A lookup or a record then
    /// touches one cache line instead of four, and hashes once instead of four times. Returns
    /// the block and, per row, the word in it and the counter's bit offset in that word (one
    /// bounds check per key, not one per counter).
    #[inline]
    fn cells(&self, hash: u64) -> (&[AtomicU64; BLOCK_WORDS], [(usize, u32); ROWS]) {
        let h = fmix64(hash.wrapping_add(SEED));
        let base = (h as usize & self.mask) * BLOCK_WORDS;
        let block: &[AtomicU64; BLOCK_WORDS] = self.counters[base..base + BLOCK_WORDS]
            .try_into()
            .expect("a block is eight words");
        let cells = std::array::from_fn(|r| {
            let bits = (h >> (32 + 8 * r)) as u32 & 0xFF;
            (2 * r + (bits & 1) as usize, (bits >> 1 & 15) * 4)
        });
        (block, cells)
    }

    /// The key's four counters as indexes into the whole sketch (tests).
    #[cfg(test)]
    fn slots(&self, hash: u64) -> [usize; ROWS] {
        let (block, cells) = self.cells(hash);
        let base = (block.as_ptr() as usize - self.counters.as_ptr() as usize)
            / std::mem::size_of::<AtomicU64>();
        cells.map(|(word, shift)| (base + word) * PER_WORD + shift as usize / 4)
    }

    /// The word holding counter `slot`, and the counter's bit offset in it (tests).
    #[cfg(test)]
    fn word(&self, slot: usize) -> (&AtomicU64, u32) {
        (
            &self.counters[slot / PER_WORD],
            (slot % PER_WORD) as u32 * 4,
        )
    }

    #[cfg(test)]
    fn count(&self, slot: usize) -> u8 {
        let (word, shift) = self.word(slot);
        ((word.load(Ordering::Relaxed) >> shift) & 0xF) as u8
    }

    #[inline]
    fn door_bit(&self, hash: u64) -> (usize, u64) {
        let bit = (fmix64(hash ^ 0x5851_F42D_4C95_7F2D) >> 7) as usize & self.door_mask;
        (bit / 64, 1u64 << (bit % 64))
    }

    /// Records one request for `hash`; `me` is the recording thread's counter stripe, if it has
    /// one (its lookups are then added to the shared record count in batches).
    pub(crate) fn record(&self, hash: u64, me: Option<&Stripe>) {
        if !self.raise::<false>(hash) {
            return;
        }
        match me {
            Some(stripe) => {
                if stripe.count_sketch_record() % RECORD_BATCH == 0 {
                    self.add_records(RECORD_BATCH);
                }
            }
            None => self.add_records(1),
        }
    }

    /// [`record`](Self::record) for a caller that alone writes this sketch (the adaptive policy
    /// records under its shard's write lock, a simulation under its mutex): no locked
    /// instruction (the doorkeeper bit is set with a plain store) and the record is not counted
    /// here; returns whether it counts toward aging, for one
    /// [`add_exclusive`](Self::add_exclusive) per batch.
    pub(crate) fn record_exclusive(&self, hash: u64) -> bool {
        self.raise::<true>(hash)
    }

    /// Counts `n` records of a caller that alone writes this sketch (a load and a store); the
    /// count that crosses the sample size ages the sketch.
    pub(crate) fn add_exclusive(&self, n: u64) {
        let before = self.records.load(Ordering::Relaxed);
        self.records.store(before + n, Ordering::Relaxed);
        if before < self.sample_size && before + n >= self.sample_size {
            self.age();
        }
    }

    /// Sets the key's doorkeeper bit or raises its minimal counters; true if the record
    /// counts toward aging (always, unless `added_only` and nothing changed).
    #[inline]
    fn raise<const EXCLUSIVE: bool>(&self, hash: u64) -> bool {
        let (word, bit) = self.door_bit(hash);
        // Load first: on a hot key the bit is already set and the read-modify-write (which
        // takes the cache line exclusive) is skipped.
        let door = &self.doorkeeper[word];
        let old = door.load(Ordering::Relaxed);
        let seen = old & bit != 0
            || if EXCLUSIVE {
                door.store(old | bit, Ordering::Relaxed);
                false
            } else {
                door.fetch_or(bit, Ordering::Relaxed) & bit != 0
            };
        if !seen {
            return true;
        }
        // Conservative update: raise only the counters that hold the minimum.
        let (block, cells) = self.cells(hash);
        let words: [u64; ROWS] = std::array::from_fn(|r| block[cells[r].0].load(Ordering::Relaxed));
        let counts: [u8; ROWS] = std::array::from_fn(|r| ((words[r] >> cells[r].1) & 0xF) as u8);
        let min = counts[0].min(counts[1]).min(counts[2]).min(counts[3]);
        if min >= MAX_COUNT {
            return !self.added_only;
        }
        for r in 0..ROWS {
            // Raise the counter if it holds the minimum: a store of the word loaded above (the
            // rows use different words), no read-modify-write (a locked instruction on every
            // recorded get would cost more than the filter saves). A racing store to the same
            // word can lose this increment or one of its neighbours', which only lowers
            // estimates; the new word is computed from one snapshot, so a counter at 15 is
            // never raised and nothing carries into a neighbour.
            if counts[r] == min {
                block[cells[r].0].store(words[r] + (1 << cells[r].1), Ordering::Relaxed);
            }
        }
        true
    }

    /// Adds `n` records to the count; the addition that crosses the sample size ages the sketch.
    fn add_records(&self, n: u64) {
        let before = self.records.fetch_add(n, Ordering::Relaxed);
        if before < self.sample_size && before + n >= self.sample_size {
            self.age();
        }
    }

    /// Counter words: how large the sketch was shaped (a re-shape to the same size is
    /// skipped, so a resize keeps what the sketch has seen).
    pub(crate) fn words(&self) -> usize {
        self.counters.len()
    }

    /// Records counted toward the next aging (tests).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn records_for_test(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// This sketch, counting its halvings on from `other`'s (a re-sized sketch replacing
    /// `other`: the resident counts stamped with `other`'s halvings keep their ages).
    pub(crate) fn continuing(self, other: &Self) -> Self {
        self.ages.store(other.ages(), Ordering::Relaxed);
        self
    }

    /// How many times the sketch has halved.
    #[inline]
    pub(crate) fn ages(&self) -> u64 {
        self.ages.load(Ordering::Relaxed)
    }

    /// Raises `hash`'s estimate to at least `f` (at most [`MAX_FREQUENCY`]), for a caller that
    /// alone writes this sketch: the adaptive policy folds an evicted entry's resident count
    /// back, so that the key is remembered as if its hits had been recorded (not counted
    /// toward aging: the hits were, as they raised the count).
    pub(crate) fn fold_exclusive(&self, hash: u64, f: u8) {
        if f == 0 || self.frequency(hash) >= f {
            return;
        }
        let (word, bit) = self.door_bit(hash);
        let door = &self.doorkeeper[word];
        door.store(door.load(Ordering::Relaxed) | bit, Ordering::Relaxed);
        let target = (f - 1).min(MAX_COUNT);
        let (block, cells) = self.cells(hash);
        for (w, shift) in cells {
            let old = block[w].load(Ordering::Relaxed);
            let c = ((old >> shift) & 0xF) as u8;
            if c < target {
                block[w].store(old + (u64::from(target - c) << shift), Ordering::Relaxed);
            }
        }
    }

    /// Halves every counter and clears the doorkeeper (the thread that crossed the sample size).
    fn age(&self) {
        self.ages.store(self.ages() + 1, Ordering::Relaxed);
        for word in &self.counters {
            word.store(
                (word.load(Ordering::Relaxed) >> 1) & HALVE_MASK,
                Ordering::Relaxed,
            );
        }
        for w in &self.doorkeeper {
            w.store(0, Ordering::Relaxed);
        }
        self.records.store(0, Ordering::Relaxed);
    }

    /// Estimated recent request count for `hash`.
    pub(crate) fn frequency(&self, hash: u64) -> u8 {
        let (block, cells) = self.cells(hash);
        let count =
            |r: usize| ((block[cells[r].0].load(Ordering::Relaxed) >> cells[r].1) & 0xF) as u8;
        let min = count(0).min(count(1)).min(count(2)).min(count(3));
        let (word, bit) = self.door_bit(hash);
        min + u8::from(self.doorkeeper[word].load(Ordering::Relaxed) & bit != 0)
    }

    /// Whether a new key should displace `victim`.
    pub(crate) fn admit(&self, candidate: u64, victim: u64) -> bool {
        self.frequency(candidate) > self.frequency(victim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_grow_with_requests_and_saturate() {
        let s = FrequencySketch::new(1024);
        assert_eq!(s.frequency(42), 0);
        s.record(42, None);
        assert_eq!(s.frequency(42), 1, "doorkeeper only");
        for _ in 0..40 {
            s.record(42, None);
        }
        assert_eq!(s.frequency(42), MAX_COUNT + 1);
        assert!(s.admit(42, 7));
        assert!(!s.admit(7, 42));
    }

    #[test]
    fn packed_counters_stay_apart() {
        // Sixteen counters share a word: raising one to the maximum must not carry into the
        // next, and halving must halve each on its own.
        let s = FrequencySketch::new(16);
        let (word, _) = s.word(0);
        for slot in 0..PER_WORD {
            for _ in 0..slot {
                let (w, shift) = s.word(slot);
                let _ = w.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| {
                    (((x >> shift) & 0xF) < u64::from(MAX_COUNT)).then(|| x + (1 << shift))
                });
            }
        }
        let counts: Vec<u8> = (0..PER_WORD).map(|slot| s.count(slot)).collect();
        let expect: Vec<u8> = (0..PER_WORD as u8).map(|n| n.min(MAX_COUNT)).collect();
        assert_eq!(counts, expect);
        s.age();
        let halved: Vec<u8> = (0..PER_WORD).map(|slot| s.count(slot)).collect();
        assert_eq!(halved, expect.iter().map(|n| n / 2).collect::<Vec<_>>());
        assert_eq!(word.load(Ordering::Relaxed) & !HALVE_MASK, 0);
    }

    #[test]
    fn a_saturated_counter_does_not_carry() {
        let s = FrequencySketch::new(1024);
        for _ in 0..100 {
            s.record(42, None);
        }
        assert_eq!(s.frequency(42), MAX_COUNT + 1);
        // Every other counter in the words that key 42 saturated is still zero.
        let slots = s.slots(42);
        for &slot in &slots {
            let first = slot / PER_WORD * PER_WORD;
            for other in (first..first + PER_WORD).filter(|o| !slots.contains(o)) {
                assert_eq!(s.count(other), 0, "counter {other} next to {slot}");
            }
        }
    }

    #[test]
    fn a_keys_counters_share_one_block_and_never_a_word() {
        let s = FrequencySketch::shaped(10_000, 24, 8, true);
        for k in 0..10_000u64 {
            let h = fmix64(k);
            let slots = s.slots(h);
            let blocks: Vec<usize> = slots.iter().map(|x| x / BLOCK_COUNTERS).collect();
            assert!(blocks.iter().all(|&b| b == blocks[0]), "{slots:?}");
            for (r, slot) in slots.iter().enumerate() {
                // Row r uses words 2r and 2r + 1 of the block.
                assert_eq!(slot % BLOCK_COUNTERS / PER_WORD / 2, r, "{slots:?}");
            }
            for _ in 0..(k % 5) {
                let counted = s.record_exclusive(h);
                assert!(counted || s.frequency(h) > MAX_COUNT);
            }
            let min = slots.iter().map(|&x| s.count(x)).min().unwrap_or(0);
            let (word, bit) = s.door_bit(h);
            let door = u8::from(s.doorkeeper[word].load(Ordering::Relaxed) & bit != 0);
            assert!(door == 1 || k % 5 == 0, "key {k}: recorded, door bit clear");
            assert_eq!(s.frequency(h), min + door, "key {k}");
        }
    }

    #[test]
    fn aging_halves_counts() {
        let s = FrequencySketch::new(16);
        for _ in 0..9 {
            s.record(1, None);
        }
        let before = s.frequency(1);
        // Fill up to the sample size with other keys to trigger aging.
        let mut k = 1000u64;
        while s.records.load(Ordering::Relaxed) != 0 {
            s.record(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), None);
            k += 1;
        }
        assert!(s.frequency(1) < before);
    }
}
