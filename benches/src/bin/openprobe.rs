//! A measurement prototype, not product code: can a cache table that samples its eviction
//! candidates straight from an open-addressing hash table (as Redis samples its dict buckets)
//! insert at capacity about as fast as quick_cache? Issue 17's insert goal: ttl-lru's dense `Vec`
//! plus hashbrown index pays two extra random misses per eviction (the victim's index bucket and
//! the swap-removed last entry's), ~500 ns per insert at 1M entries against quick_cache's ~100.
//!
//! `OpenSampled` is `shards` `RwLock`ed linear-probing tables of 32-byte buckets (hash, key, value,
//! stamp) with no tombstones (backward-shift deletion). An insert at capacity scans forward from
//! a start to the first `k` occupied buckets and evicts the oldest stamp, optionally through a
//! Redis-style candidate pool. The start is a random bucket (`bucket`, as first specified: it
//! clusters the table, see [`Table::sample_start`]), a random entry (`entry`) or a random entry
//! drawn first at the new key's home bucket (`home`). A get stores the entry's stamp only if it
//! changed (a logical clock the driver advances every 1024 operations, like a coarse clock).
//!
//! `HbSampled` (start `hb`, `hb-bucket`, `hb-entry` or `hb-home`) is the same sampling over
//! `hashbrown::HashTable`s of the same 32-byte entries, inline: a get is one SIMD group probe.
//! An eviction walks `get_bucket` forward from the start (a random bucket for `hb`) to `k`
//! occupied buckets (at most `8k` buckets walked, then what was found), removes the oldest with
//! `get_bucket_entry(..).remove()` and inserts with `insert_unique`. Its `load` sets the bucket
//! count as for the old table, but hashbrown leaves a tombstone where an erase would break a
//! probe run and, once those use up its growth room, rehashes in place only if the table is at
//! most 7/16 full (`len + 1 <= 7/8 * buckets / 2`) and otherwise doubles: at `load` above 7/16
//! churn grows it once. The insert run prints how often each happened. Its `shards` is not
//! rounded to a power of two, so that a shard's capacity can be fitted just under 7/16 of a
//! power of two (1M entries: 70 shards of 14286 in 32768 buckets, load 0.436, where 64 shards
//! settle at 0.238).
//!
//! `cargo run --release -p benches --bin openprobe -- <entries> <ops> <get|insert|zipf|ratio>
//! [k=5] [pool=0] [load=7/8] [shards=64] [bucket|entry|home|hb|hb-bucket|hb-entry|hb-home]`
//! times `ops` gets or at-capacity inserts exactly as `hitprobe` does (same keys, same order)
//! and prints ns per op; `ratio` prints hit ratios (get, insert on a miss) over zipf(1.0) on 1M
//! keys, `ops` requests, an `entries` cache in one shard, per table and start, k 5/10 and pool
//! 0/16, beside exact LRU.
//! `cargo test -p benches --bin openprobe --release` runs the table's tests.
//!
//! The answer (session 11, docs/benchmarks.md "Where an insert's time goes"): at 1M entries
//! the inline hashbrown table with 5 samples and no pool inserts at capacity about as fast as
//! quick_cache once its shards are fitted to 7/16 load, and gets in 0.6x its time; at 10K an
//! insert stays 2.3x (the sampling walk: a branch per bucket through `get_bucket`), and 5
//! samples without a pool cost about a point of hit ratio against exact LRU.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use ahash::RandomState;
use benches::policy::{ExactLru, simulate};
use benches::zipf::{Zipf, scatter};
use hashbrown::HashTable;
use parking_lot::RwLock;

/// One slot. `hash == 0` marks it empty (real hashes have their top bit set). Aligned to 32 so
/// that no bucket straddles two cache lines (a large `Vec` is only 16-aligned by malloc).
#[derive(Default)]
#[repr(align(32))]
struct Bucket {
    hash: u64,
    key: u64,
    value: u64,
    /// Last access (the store's logical clock); written by gets under the read lock.
    stamp: AtomicU64,
}

/// A pooled eviction candidate: (stamp, bucket index, hash) as sampled.
type Candidate = (u64, usize, u64);

/// One shard's table, always behind its shard's lock.
struct Table {
    buckets: Vec<Bucket>,
    mask: usize,
    len: usize,
    cap: usize,
    cfg: Config,
    /// Sorted newest stamp first, so the oldest candidate pops off the end.
    pool: Vec<Candidate>,
    rng: u64,
}

/// A table's eviction settings.
#[derive(Clone, Copy)]
struct Config {
    /// Candidates per eviction (k).
    samples: usize,
    /// Candidate pool size (0: none).
    pool: usize,
    /// Highest load factor the bucket count is sized for.
    load: f64,
    /// Where the sample scan starts ([`Table::sample_start`]).
    start: Start,
}

fn cfg(samples: usize, pool: usize, load: f64, start: Start) -> Config {
    Config {
        samples,
        pool,
        load,
        start,
    }
}

/// Where an eviction's sample scan starts.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Start {
    /// A random bucket (the rule first specified).
    Bucket,
    /// A random entry: random buckets drawn until one is occupied.
    Entry,
    /// The same, the first draw being the new key's home bucket (already read by its probe).
    Home,
}

impl Table {
    fn new(cap: usize, cfg: Config, seed: u64) -> Self {
        let load = cfg.load;
        // The least power of two with cap <= load * buckets; cap < buckets keeps an empty bucket,
        // so every probe ends.
        let mut n = 2usize;
        while cap as f64 > load * n as f64 || cap >= n {
            n *= 2;
        }
        Self {
            buckets: (0..n).map(|_| Bucket::default()).collect(),
            mask: n - 1,
            len: 0,
            cap,
            cfg,
            pool: Vec::with_capacity(cfg.pool + 1),
            rng: seed | 1,
        }
    }

    fn find(&self, hash: u64, key: u64) -> Option<usize> {
        let mut i = hash as usize & self.mask;
        loop {
            let b = &self.buckets[i];
            if b.hash == 0 {
                return None;
            }
            if b.hash == hash && b.key == key {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    fn get(&self, hash: u64, key: u64, now: u64) -> Option<u64> {
        let b = &self.buckets[self.find(hash, key)?];
        // Store only on a change: a hot entry's line stays clean (shared) across readers.
        if b.stamp.load(Relaxed) != now {
            b.stamp.store(now, Relaxed);
        }
        Some(b.value)
    }

    fn insert(&mut self, hash: u64, key: u64, value: u64, now: u64) {
        let (mask, home) = (self.mask, hash as usize & self.mask);
        // At capacity, a random start is drawn before probing so that its read overlaps the
        // probe's instead of following it; a home start reads the probe's own first bucket.
        let full = self.len == self.cap;
        let early = (full && self.cfg.start != Start::Home).then(|| self.sample_start(home));
        let mut i = home;
        while self.buckets[i].hash != 0 {
            let b = &mut self.buckets[i];
            if b.hash == hash && b.key == key {
                b.value = value;
                *b.stamp.get_mut() = now;
                return;
            }
            i = (i + 1) & mask;
        }
        if full {
            let start = early.unwrap_or_else(|| self.sample_start(home));
            // The shift leaves one new empty bucket (where it stopped; `i` stays empty): if that
            // lies between home and `i` it is now the first empty one, and the key goes there.
            let hole = self.evict(start);
            if hole.wrapping_sub(home) & mask < i.wrapping_sub(home) & mask {
                i = hole;
            }
        }
        self.buckets[i] = Bucket {
            hash,
            key,
            value,
            stamp: AtomicU64::new(now),
        };
        self.len += 1;
    }

    fn next_rand(&mut self) -> u64 {
        xorshift(&mut self.rng)
    }

    /// Where the sample scan starts. `Bucket`: a random bucket, so the first sample is the first
    /// entry after it: an entry behind a long empty gap is sampled far more often than one
    /// inside a cluster, and evicting those packs the survivors into ever longer clusters (at 1M
    /// entries, k=5, no pool, 19 capacities of inserts take the mean displacement from 0.45 to
    /// 4.3 buckets and the longest cluster from 42 to 1045). `Entry`: the first occupied of
    /// i.i.d. uniform bucket draws (four at a time, reads overlapping), so each entry is equally
    /// likely to be the first sample and, each having one successor, the k-th: no clustering.
    /// `Home`: the same, the first draw being the new key's home bucket (uniform, independent
    /// of the table, already in cache), so no extra random read when that is occupied.
    fn sample_start(&mut self, home: usize) -> usize {
        let mask = self.mask;
        match self.cfg.start {
            Start::Bucket => {
                let start = self.next_rand() as usize & mask;
                std::hint::black_box(self.buckets[start].hash);
                return start;
            }
            Start::Home if self.buckets[home].hash != 0 => return home,
            Start::Entry | Start::Home => {}
        }
        loop {
            let picks = [(); 4].map(|()| self.next_rand() as usize & mask);
            if let Some(&p) = picks.iter().find(|&&p| self.buckets[p].hash != 0) {
                return p;
            }
        }
    }

    /// Evicts one entry (the table must not be empty): the oldest of the first `samples`
    /// occupied buckets from `i`, or the oldest still-valid pooled candidate.
    fn evict(&mut self, mut i: usize) -> usize {
        let (buckets, pool) = (&self.buckets, &mut self.pool);
        let mut best = (u64::MAX, i);
        let mut seen = 0;
        while seen < self.cfg.samples {
            let b = &buckets[i];
            // No branch on occupancy (a coin flip at these loads, so a mispredict per bucket):
            // an empty bucket's stamp reads as u64::MAX, newer than any.
            let occupied = b.hash != 0;
            let stamp = b.stamp.load(Relaxed) | u64::from(!occupied).wrapping_neg();
            seen += usize::from(occupied);
            let older = stamp < best.0;
            best = (
                if older { stamp } else { best.0 },
                if older { i } else { best.1 },
            );
            if self.cfg.pool > 0 && occupied {
                offer(pool, self.cfg.pool, (stamp, i, b.hash));
            }
            i = (i + 1) & self.mask;
        }
        let mut victim = best.1;
        // A pooled candidate is evictable only if its bucket still holds the same entry (same
        // hash) untouched since (same stamp): a shift may have moved it, a get refreshed it.
        while let Some((stamp, at, hash)) = pool.pop() {
            if buckets[at].hash == hash && buckets[at].stamp.load(Relaxed) == stamp {
                victim = at;
                break;
            }
        }
        self.remove_at(victim)
    }

    /// Backward-shift deletion: pulls each following entry of the cluster back into the hole
    /// unless that would move it before its home bucket, so no tombstones are left. Returns
    /// the bucket left empty.
    fn remove_at(&mut self, mut hole: usize) -> usize {
        let mask = self.mask;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let hash = self.buckets[j].hash;
            if hash == 0 {
                break;
            }
            // Movable when its home is not in (hole, j] (cyclically): its distance from home is
            // at least the distance from the hole.
            let home = hash as usize & mask;
            if j.wrapping_sub(home) & mask >= j.wrapping_sub(hole) & mask {
                self.buckets[hole] = std::mem::take(&mut self.buckets[j]);
                hole = j;
            }
        }
        self.buckets[hole].hash = 0;
        self.len -= 1;
        hole
    }
}

/// Adds a sampled candidate to the sorted pool, dropping the newest when full.
fn offer(pool: &mut Vec<Candidate>, size: usize, c: Candidate) {
    let full = pool.len() == size;
    if full && c.0 >= pool[0].0 || pool.contains(&c) {
        return;
    }
    // Placed by swaps: `Vec::insert`/`remove` call memmove, which made the pool cost 2-3x.
    if full {
        pool[0] = c;
        let mut j = 0;
        while j + 1 < size && pool[j + 1].0 > c.0 {
            pool.swap(j, j + 1);
            j += 1;
        }
    } else {
        pool.push(c);
        let mut j = pool.len() - 1;
        while j > 0 && pool[j - 1].0 < c.0 {
            pool.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// xorshift64, for both tables' sampling starts: a few instructions on the eviction path
/// (`benches::rng::Rng`'s xoshiro256++ is better and costs more), plenty for picking a bucket.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Keeps two shards' locks off one cache line.
#[repr(align(64))]
struct Shard(RwLock<Table>);

/// The prototype store: `shards` sampled open-addressing tables sharing one logical clock.
struct OpenSampled {
    hasher: RandomState,
    shards: Box<[Shard]>,
    clock: AtomicU64,
}

impl OpenSampled {
    fn new(capacity: usize, shards: usize, cfg: Config) -> Self {
        let shards = shards.next_power_of_two();
        let per_shard = capacity.div_ceil(shards).max(1);
        Self {
            hasher: RandomState::with_seeds(1, 2, 3, 4),
            shards: (0..shards as u64)
                .map(|s| Table::new(per_shard, cfg, scatter(s)))
                .map(|table| Shard(RwLock::new(table)))
                .collect(),
            clock: AtomicU64::new(0),
        }
    }

    /// The key's hash with the top bit set (never 0 = empty; the shard takes bits 32.., the
    /// bucket the low bits, so neither loses entropy to it).
    fn hash(&self, key: u64) -> u64 {
        self.hasher.hash_one(key) | 1 << 63
    }

    fn shard(&self, hash: u64) -> &RwLock<Table> {
        &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)].0
    }

    /// Advances the logical clock (the driver calls it every 1024 operations).
    fn tick(&self) {
        self.clock.fetch_add(1, Relaxed);
    }

    fn get(&self, key: u64) -> Option<u64> {
        let hash = self.hash(key);
        let now = self.clock.load(Relaxed);
        self.shard(hash).read().get(hash, key, now)
    }

    fn insert(&self, key: u64, value: u64) {
        let hash = self.hash(key);
        let now = self.clock.load(Relaxed);
        self.shard(hash).write().insert(hash, key, value, now);
    }
}

/// What the drivers need of a store.
trait Probe {
    fn tick(&self);
    fn get(&self, key: u64) -> Option<u64>;
    fn insert(&self, key: u64, value: u64);
}

impl Probe for OpenSampled {
    fn tick(&self) {
        self.tick();
    }
    fn get(&self, key: u64) -> Option<u64> {
        self.get(key)
    }
    fn insert(&self, key: u64, value: u64) {
        self.insert(key, value);
    }
}

/// One `HbTable` entry: the old table's bucket, inline in hashbrown's buckets. Aligned to 32
/// (so the allocation is): no entry straddles two cache lines.
#[repr(align(32))]
struct Entry {
    hash: u64,
    key: u64,
    value: u64,
    /// Last access; written by gets under the read lock.
    stamp: AtomicU64,
}

/// One shard of `HbSampled`: a hashbrown table plus the sampling state.
struct HbTable {
    table: HashTable<Entry>,
    cap: usize,
    cfg: Config,
    /// Sorted newest stamp first, as `Table::pool`.
    pool: Vec<Candidate>,
    rng: u64,
    /// In-place rehashes and doublings seen by inserts (the table's growth room ran out).
    rehashes: u64,
    grows: u64,
}

impl HbTable {
    fn new(cap: usize, cfg: Config, seed: u64) -> Self {
        // The bucket count as `Table::new` picks it, reserved as hashbrown's room for it.
        let mut n = 2usize;
        while cap as f64 > cfg.load * n as f64 || cap >= n {
            n *= 2;
        }
        let room = if n < 8 { n - 1 } else { n / 8 * 7 };
        Self {
            table: HashTable::with_capacity(room.max(cap)),
            cap,
            cfg,
            pool: Vec::with_capacity(cfg.pool + 1),
            rng: seed | 1,
            rehashes: 0,
            grows: 0,
        }
    }

    fn get(&self, hash: u64, key: u64, now: u64) -> Option<u64> {
        let e = self.table.find(hash, |e| e.key == key)?;
        if e.stamp.load(Relaxed) != now {
            e.stamp.store(now, Relaxed);
        }
        Some(e.value)
    }

    fn insert(&mut self, hash: u64, key: u64, value: u64, now: u64) {
        if let Some(e) = self.table.find_mut(hash, |e| e.key == key) {
            e.value = value;
            *e.stamp.get_mut() = now;
            return;
        }
        if self.table.len() >= self.cap {
            self.evict(hash);
        }
        // `capacity()` is len plus growth room: an insert takes at most one from the room, so
        // a jump means it rehashed (or grew, with the bucket count).
        let (buckets, room) = (self.table.num_buckets(), self.table.capacity());
        let entry = Entry {
            hash,
            key,
            value,
            stamp: AtomicU64::new(now),
        };
        self.table.insert_unique(hash, entry, |e| e.hash);
        if self.table.num_buckets() != buckets {
            self.grows += 1;
        } else if self.table.capacity() > room + 1 {
            self.rehashes += 1;
        }
    }

    fn next_rand(&mut self) -> u64 {
        xorshift(&mut self.rng)
    }

    /// As `Table::sample_start`, `home` being hashbrown's first probe position.
    fn sample_start(&mut self, hash: u64) -> usize {
        let mask = self.table.num_buckets() - 1;
        let home = hash as usize & mask;
        match self.cfg.start {
            Start::Bucket => return self.next_rand() as usize & mask,
            Start::Home if self.table.get_bucket(home).is_some() => return home,
            Start::Entry | Start::Home => {}
        }
        loop {
            let picks = [(); 4].map(|()| self.next_rand() as usize & mask);
            if let Some(&p) = picks.iter().find(|&&p| self.table.get_bucket(p).is_some()) {
                return p;
            }
        }
    }

    /// Evicts the oldest of the first `samples` occupied buckets from the start (walking at
    /// most `8 * samples` buckets, then on to the first occupied if none was found), or the
    /// oldest still-valid pooled candidate. The table must not be empty.
    fn evict(&mut self, hash: u64) {
        let mut i = self.sample_start(hash);
        let (samples, size) = (self.cfg.samples, self.cfg.pool);
        let mask = self.table.num_buckets() - 1;
        let (table, pool) = (&self.table, &mut self.pool);
        let mut best = (u64::MAX, usize::MAX);
        let mut seen = 0;
        // A branch on occupancy (a mispredict at about every other bucket): `get_bucket` has
        // one inside, and reading an empty bucket's entry anyway would take `unsafe`.
        for _ in 0..8 * samples {
            if let Some(e) = table.get_bucket(i) {
                let stamp = e.stamp.load(Relaxed);
                if stamp < best.0 {
                    best = (stamp, i);
                }
                if size > 0 {
                    offer(pool, size, (stamp, i, e.hash));
                }
                seen += 1;
                if seen == samples {
                    break;
                }
            }
            i = (i + 1) & mask;
        }
        // None in 8k buckets (a nearly empty table): the next occupied one.
        while best.1 == usize::MAX {
            best.1 = table.get_bucket(i).map_or(usize::MAX, |_| i);
            i = (i + 1) & mask;
        }
        let mut victim = best.1;
        // A pooled candidate still counts only if its bucket holds the same entry untouched
        // since (an in-place rehash moves entries; a get refreshes them).
        while let Some((stamp, at, hash)) = pool.pop() {
            let same = table.get_bucket(at);
            if same.is_some_and(|e| e.hash == hash && e.stamp.load(Relaxed) == stamp) {
                victim = at;
                break;
            }
        }
        if let Ok(victim) = self.table.get_bucket_entry(victim) {
            victim.remove();
        }
    }
}

/// Keeps two shards' locks off one cache line.
#[repr(align(64))]
struct HbShard(RwLock<HbTable>);

/// `OpenSampled` over hashbrown tables.
struct HbSampled {
    hasher: RandomState,
    shards: Box<[HbShard]>,
    clock: AtomicU64,
}

impl HbSampled {
    /// Any shard count (not rounded to a power of two; see [`Self::shard`]).
    fn new(capacity: usize, shards: usize, cfg: Config) -> Self {
        let per_shard = capacity.div_ceil(shards).max(1);
        Self {
            hasher: RandomState::with_seeds(1, 2, 3, 4),
            shards: (0..shards as u64)
                .map(|s| HbTable::new(per_shard, cfg, scatter(s)))
                .map(|table| HbShard(RwLock::new(table)))
                .collect(),
            clock: AtomicU64::new(0),
        }
    }

    /// The plain hash (hashbrown takes its tag from the top 7 bits, the shard bits 32..).
    fn hash(&self, key: u64) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Hash bits 32..57 (below the tag's 57..64) multiplied onto the shards, so that any count
    /// works and the per-shard capacity can be fitted under 7/16 of a power of two.
    fn shard(&self, hash: u64) -> &RwLock<HbTable> {
        let bits = (hash >> 32) & ((1 << 25) - 1);
        &self.shards[((bits * self.shards.len() as u64) >> 25) as usize].0
    }

    /// (in-place rehashes, doublings, buckets, tombstones) summed over the shards.
    fn churn(&self) -> [usize; 4] {
        let tables = self.shards.iter().map(|s| s.0.read());
        let each = tables.map(|t| {
            let n = t.table.num_buckets();
            // A tombstone holds a bucket but no growth room: room is 7/8 of the buckets less
            // the entries and tombstones, and `capacity()` is entries plus room.
            let full = if n < 8 { n - 1 } else { n / 8 * 7 };
            [
                t.rehashes as usize,
                t.grows as usize,
                n,
                full - t.table.capacity(),
            ]
        });
        each.fold([0; 4], |a, b| std::array::from_fn(|i| a[i] + b[i]))
    }
}

impl Probe for HbSampled {
    fn tick(&self) {
        self.clock.fetch_add(1, Relaxed);
    }

    fn get(&self, key: u64) -> Option<u64> {
        let hash = self.hash(key);
        let now = self.clock.load(Relaxed);
        self.shard(hash).read().get(hash, key, now)
    }

    fn insert(&self, key: u64, value: u64) {
        let hash = self.hash(key);
        let now = self.clock.load(Relaxed);
        self.shard(hash).write().insert(hash, key, value, now);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: usize| match args.get(i) {
        None => default,
        Some(a) => a
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| usage(&format!("not a count: {a}"))),
    };
    let (entries, ops, k, pool, shards) = (
        number(0, 100_000),
        number(1, 2_000_000),
        number(3, 5),
        number(4, 0),
        number(6, 64),
    );
    if entries == 0 || k == 0 || shards == 0 {
        usage("entries, k and shards must be at least 1");
    }
    let load = args.get(5).map_or(Some(0.875), |a| parse_load(a));
    let Some(load) = load.filter(|l| *l > 0.0 && *l < 1.0) else {
        usage("load must be a fraction in (0, 1), e.g. 7/8 or 0.75");
    };
    let spec = args.get(7).map_or("bucket", String::as_str);
    let (hb, start) = match spec.strip_prefix("hb").map(|s| s.trim_start_matches('-')) {
        Some(rest) => (true, rest),
        None => (false, spec),
    };
    let start = match start {
        "bucket" | "" => Start::Bucket,
        "entry" => Start::Entry,
        "home" => Start::Home,
        _ => usage(&format!("unknown start {spec:?}")),
    };
    let cfg = cfg(k, pool, load, start);
    let mode = args.get(2).map_or("get", String::as_str);
    if mode == "ratio" {
        return ratio(entries, ops);
    }
    if !matches!(mode, "get" | "insert" | "zipf") {
        usage(&format!("unknown mode {mode:?}"));
    }
    let table = if hb { "hb" } else { "open" };
    let head = format!(
        "openprobe {table} k={k} pool={pool} load={load} start={start:?} shards={shards} entries={entries}"
    );
    if hb {
        let store = HbSampled::new(entries, shards, cfg);
        let keys = fill(&store, entries);
        let before = store.churn();
        drive(&store, &head, &keys, ops, mode);
        let after = store.churn();
        if mode == "insert" {
            println!(
                "  hb churn: buckets {} -> {}, tombstones {} -> {}, in-place rehashes {} (fill {}), doublings {} (fill {})",
                before[2],
                after[2],
                before[3],
                after[3],
                after[0] - before[0],
                before[0],
                after[1] - before[1],
                before[1]
            );
        }
    } else {
        let store = OpenSampled::new(entries, shards, cfg);
        let keys = fill(&store, entries);
        drive(&store, &head, &keys, ops, mode);
    }
}

/// Inserts keys `0..entries` (scattered), returned in insertion order.
fn fill(store: &impl Probe, entries: usize) -> Vec<u64> {
    let keys: Vec<u64> = (0..entries as u64).map(scatter).collect();
    inserts(store, &keys);
    keys
}

/// Times `ops` gets of the filled `keys` or at-capacity inserts of new ones as `hitprobe` does.
fn drive(store: &impl Probe, head: &str, keys: &[u64], ops: usize, mode: &str) {
    let entries = keys.len();
    if mode == "insert" {
        let fresh: Vec<u64> = (entries as u64..(entries + ops) as u64)
            .map(scatter)
            .collect();
        let started = std::time::Instant::now();
        inserts(store, &fresh);
        let ns = started.elapsed().as_nanos() as f64 / ops.max(1) as f64;
        println!("{head} inserts={ops} ns/insert={ns:.1}");
        return;
    }
    // The same orders as hitprobe: uniform over the keys scattered, or zipf(1.0) ranks.
    let order: Vec<u64> = if mode == "zipf" {
        Zipf::new(entries as u64, 1.0)
            .expect("entries >= 1")
            .keys(ops, 0x5EED)
    } else {
        (0..ops as u64)
            .map(|i| keys[(scatter(i) % entries as u64) as usize])
            .collect()
    };
    let started = std::time::Instant::now();
    let mut hits = 0u64;
    for chunk in order.chunks(1024) {
        store.tick();
        hits += chunk
            .iter()
            .filter(|&&key| store.get(key).is_some())
            .count() as u64;
    }
    let ns = started.elapsed().as_nanos() as f64 / ops.max(1) as f64;
    println!("{head} gets={ops} hits={hits} ns/get={ns:.1}");
}

/// Inserts every key with itself as value, ticking the clock every 1024.
fn inserts(store: &impl Probe, keys: &[u64]) {
    for chunk in keys.chunks(1024) {
        store.tick();
        for &key in chunk {
            store.insert(key, key);
        }
    }
}

/// Hit ratios of get-then-insert-on-miss over zipf(1.0) on 1M keys, one shard of `capacity`.
fn ratio(capacity: usize, requests: usize) {
    let stream = Zipf::new(1_000_000, 1.0)
        .expect("keys")
        .keys(requests, 0x5EED);
    let lru = simulate(&mut ExactLru::new(capacity), stream.iter().copied());
    println!(
        "exact-lru capacity={capacity} requests={requests} hit%={:.2}",
        lru.percent()
    );
    // A clock advanced every request (exact order) and every 1024 (the timed runs' coarseness).
    let starts = [Start::Bucket, Start::Entry, Start::Home];
    for (tick, start) in [1, 1024].into_iter().flat_map(|t| starts.map(|s| (t, s))) {
        for (samples, pool) in [(5, 0), (10, 0), (5, 16), (10, 16)] {
            let c = cfg(samples, pool, 0.875, start);
            let open = hits(&OpenSampled::new(capacity, 1, c), &stream, tick);
            let hb = hits(&HbSampled::new(capacity, 1, c), &stream, tick);
            let [open, hb] = [open, hb].map(|h| 100.0 * h as f64 / requests.max(1) as f64);
            println!(
                "k={samples} pool={pool} start={start:?} tick={tick} openprobe hit%={open:.2} hb hit%={hb:.2}"
            );
        }
    }
}

/// Hits of get-then-insert-on-miss over `stream`, the clock ticked every `tick` requests.
fn hits(store: &impl Probe, stream: &[u64], tick: usize) -> u64 {
    let mut hits = 0u64;
    for (n, &key) in stream.iter().enumerate() {
        if n % tick == 0 {
            store.tick();
        }
        if store.get(key).is_some() {
            hits += 1;
        } else {
            store.insert(key, key);
        }
    }
    hits
}

fn parse_load(a: &str) -> Option<f64> {
    match a.split_once('/') {
        Some((n, d)) => Some(n.parse::<f64>().ok()? / d.parse::<f64>().ok()?),
        None => a.parse().ok(),
    }
}

fn usage(problem: &str) -> ! {
    eprintln!("openprobe: {problem}");
    eprintln!(
        "usage: openprobe <entries> <ops> <get|insert|zipf|ratio> [k=5] [pool=0] [load=7/8] [shards=64] [bucket|entry|home|hb|hb-bucket|hb-entry|hb-home]"
    );
    std::process::exit(2);
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    /// What the shared checks need of a store beyond [`Probe`].
    trait TestStore: Probe + Sized {
        fn build(capacity: usize, shards: usize, cfg: Config) -> Self;
        fn len(&self) -> usize;
        /// Every (key, value) the store holds.
        fn held(&self) -> Vec<(u64, u64)>;
        fn remove(&self, key: u64) -> bool;
    }

    impl TestStore for OpenSampled {
        fn build(capacity: usize, shards: usize, cfg: Config) -> Self {
            Self::new(capacity, shards, cfg)
        }
        fn len(&self) -> usize {
            self.shards.iter().map(|s| s.0.read().len).sum()
        }
        fn held(&self) -> Vec<(u64, u64)> {
            let tables = self.shards.iter().map(|s| s.0.read());
            let held = tables.map(|t| t.buckets.iter().map(|b| (b.hash, b.key, b.value)).collect());
            let held: Vec<Vec<_>> = held.collect();
            held.into_iter()
                .flatten()
                .filter(|b| b.0 != 0)
                .map(|b| (b.1, b.2))
                .collect()
        }
        fn remove(&self, key: u64) -> bool {
            let hash = self.hash(key);
            let mut table = self.shard(hash).write();
            let found = table.find(hash, key);
            found.map(|i| table.remove_at(i)).is_some()
        }
    }

    impl TestStore for HbSampled {
        fn build(capacity: usize, shards: usize, cfg: Config) -> Self {
            Self::new(capacity, shards, cfg)
        }
        fn len(&self) -> usize {
            self.shards.iter().map(|s| s.0.read().table.len()).sum()
        }
        fn held(&self) -> Vec<(u64, u64)> {
            let tables = self.shards.iter().map(|s| s.0.read());
            let held = tables.map(|t| t.table.iter().map(|e| (e.key, e.value)).collect());
            held.collect::<Vec<Vec<_>>>().concat()
        }
        fn remove(&self, key: u64) -> bool {
            let hash = self.hash(key);
            let mut shard = self.shard(hash).write();
            let found = shard.table.find_entry(hash, |e| e.key == key);
            found.map(|e| e.remove()).is_ok()
        }
    }

    fn check_get_after_insert<S: TestStore>(start: Start) {
        let store = S::build(100, 4, cfg(5, 0, 0.875, start));
        assert_eq!(store.get(7), None);
        store.insert(7, 70);
        store.insert(8, 80);
        assert_eq!(store.get(7), Some(70));
        store.insert(7, 71);
        assert_eq!(
            (store.get(7), store.get(8), store.len()),
            (Some(71), Some(80), 2)
        );
    }

    #[test]
    fn get_after_insert() {
        check_get_after_insert::<OpenSampled>(Start::Home);
    }

    #[test]
    fn hb_get_after_insert() {
        check_get_after_insert::<HbSampled>(Start::Bucket);
    }

    fn check_never_holds_more_than_capacity<S: TestStore>() {
        for (shards, pool, start) in [(1, 0, Start::Bucket), (4, 16, Start::Home)] {
            let store = S::build(1000, shards, cfg(5, pool, 0.875, start));
            for key in 0..20_000u64 {
                store.insert(scatter(key), key);
                assert!(store.len() <= 1000);
            }
            assert_eq!(store.len(), 1000);
        }
    }

    #[test]
    fn never_holds_more_than_capacity() {
        check_never_holds_more_than_capacity::<OpenSampled>();
    }

    #[test]
    fn hb_never_holds_more_than_capacity() {
        check_never_holds_more_than_capacity::<HbSampled>();
    }

    /// Random inserts (evicting at capacity), replacements and removals against a model: what
    /// the store holds must be findable with the model's latest value, each key once (in
    /// `OpenSampled`, backward-shift deletion keeps clusters whole). `get_each_insert` also
    /// checks every insert at once.
    fn check_every_held_key_stays_findable<S: TestStore>(
        configs: &[(usize, Config)],
        get_each_insert: bool,
    ) {
        for &(shards, cfg) in configs {
            let store = S::build(112, shards, cfg);
            let mut model = HashMap::new();
            let mut rng = benches::rng::Rng::new(42);
            for op in 0..100_000u64 {
                // Few distinct keys, so replacements and removals hit held keys often.
                let key = rng.next_u64() % 400;
                if rng.next_u64().is_multiple_of(4) {
                    store.remove(key);
                    model.remove(&key);
                    assert_eq!(store.get(key), None);
                } else {
                    store.insert(key, op);
                    model.insert(key, op);
                    if get_each_insert {
                        assert_eq!(store.get(key), Some(op));
                    }
                }
                if op % 64 == 0 {
                    store.tick();
                }
                if op % 997 == 0 {
                    let held = store.held();
                    for &(key, value) in &held {
                        assert_eq!(store.get(key), Some(value), "key {key} lost");
                        assert_eq!(model.get(&key), Some(&value));
                    }
                    assert_eq!(held.len(), store.len());
                    let distinct: HashSet<_> = held.iter().map(|h| h.0).collect();
                    assert_eq!(distinct.len(), held.len(), "a key held twice");
                    assert!(store.len() <= 112);
                }
            }
        }
    }

    #[test]
    fn every_held_key_stays_findable() {
        let configs = [
            (1, cfg(5, 0, 0.875, Start::Bucket)),
            (2, cfg(10, 16, 0.875, Start::Entry)),
            (1, cfg(3, 4, 0.75, Start::Home)),
            (2, cfg(5, 0, 0.875, Start::Home)),
        ];
        check_every_held_key_stays_findable::<OpenSampled>(&configs, false);
    }

    #[test]
    fn hb_every_held_key_stays_findable() {
        let configs = [
            (1, cfg(5, 0, 0.875, Start::Bucket)),
            (2, cfg(10, 16, 0.875, Start::Bucket)),
            (1, cfg(3, 4, 0.4375, Start::Entry)),
            (2, cfg(5, 0, 0.875, Start::Home)),
        ];
        check_every_held_key_stays_findable::<HbSampled>(&configs, true);
    }

    /// Fills one shard, touches the even keys, then inserts a quarter of the capacity anew: the
    /// evictions must mostly take the untouched odd keys. `configs` are (k, pool, start).
    fn check_eviction_prefers_old_entries<S: TestStore>(configs: &[(usize, usize, Start)]) {
        let name = std::any::type_name::<S>();
        for &(k, pool, start) in configs {
            let store = S::build(4000, 1, cfg(k, pool, 0.875, start));
            for key in 0..4000 {
                store.insert(key, key);
            }
            store.tick();
            // Touch the even keys, then insert a quarter of the capacity anew.
            for key in (0..4000).step_by(2) {
                store.get(key);
            }
            store.tick();
            for key in 10_000..11_000 {
                store.insert(key, key);
            }
            let evicted = |parity| {
                (0..4000)
                    .filter(|&k| k % 2 == parity && store.get(k).is_none())
                    .count()
            };
            // The rest of the 1000 evictions took new keys (all k samples new: rare).
            let (touched, untouched) = (evicted(0), evicted(1));
            assert!(touched + untouched <= 1000 && store.len() == 4000);
            assert!(
                untouched >= 800,
                "{name} k={k} pool={pool} start={start:?}: {untouched} untouched, {touched} touched"
            );
        }
    }

    #[test]
    fn eviction_prefers_old_entries() {
        check_eviction_prefers_old_entries::<OpenSampled>(&[
            (5, 0, Start::Bucket),
            (10, 16, Start::Bucket),
            (5, 0, Start::Entry),
            (5, 0, Start::Home),
        ]);
    }

    #[test]
    fn hb_eviction_prefers_old_entries() {
        check_eviction_prefers_old_entries::<HbSampled>(&[
            (5, 0, Start::Bucket),
            (10, 0, Start::Bucket),
            (10, 16, Start::Bucket),
            (5, 0, Start::Entry),
            (5, 0, Start::Home),
        ]);
    }

    /// Mean distance of the entries from their home buckets.
    fn displacement(store: &OpenSampled) -> f64 {
        let (mut sum, mut n) = (0, 0);
        for shard in &*store.shards {
            let t = shard.0.read();
            for (i, b) in t.buckets.iter().enumerate().filter(|(_, b)| b.hash != 0) {
                sum += i.wrapping_sub(b.hash as usize) & t.mask;
                n += 1;
            }
        }
        sum as f64 / n as f64
    }

    /// A random-bucket start packs the table into long clusters; an entry or home start does
    /// not (see `Table::sample_start`).
    #[test]
    fn only_the_bucket_start_clusters() {
        for start in [Start::Bucket, Start::Entry, Start::Home] {
            let store = OpenSampled::new(8000, 64, cfg(5, 0, 0.875, start));
            (0..8000).for_each(|key| store.insert(scatter(key), key));
            let filled = displacement(&store);
            for (n, key) in (8000..160_000).enumerate() {
                if n % 1024 == 0 {
                    store.tick();
                }
                store.insert(scatter(key), key);
            }
            let churned = displacement(&store);
            let ratio = churned / filled;
            let ok = if start == Start::Bucket {
                ratio > 2.0
            } else {
                ratio < 1.3
            };
            assert!(ok, "{start:?}: displacement {filled:.2} -> {churned:.2}");
        }
    }

    /// At most 7/16 full, churn rehashes in place and never grows the table.
    #[test]
    fn hb_at_seven_sixteenths_never_grows() {
        let store = HbSampled::new(7000, 1, cfg(5, 0, 0.4375, Start::Bucket));
        let n0 = store.churn()[2];
        (0..7000u64).for_each(|key| store.insert(scatter(key), key));
        for (n, key) in (7000..700_000u64).enumerate() {
            if n % 1024 == 0 {
                store.tick();
            }
            store.insert(scatter(key), key);
        }
        let [_, grows, buckets, _] = store.churn();
        assert_eq!((grows, buckets, store.len()), (0, n0, 7000));
    }
}
