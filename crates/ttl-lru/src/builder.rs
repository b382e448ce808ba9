//! `Cache::builder(capacity)`: every knob of a cache, documented with its default.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crate::admission::Admission;
use crate::budget::Budget;
use crate::cache::{Cache, IdleBy, Inner, Weigher};
use crate::clock::{Clock, ClockSource, CoarseClock, duration_to_ms};
use crate::listener::{Listener, RemovalCause};
use crate::minisim::MiniSims;
use crate::shard::{FromCache, Shard, ShardConfig};
use crate::stats::CachePadded;
use crate::table::Columns;
use crate::tally::Tally;

/// Samples per eviction of sampled LRU ([`Admission::Always`]; the name is from when that was
/// the default policy), measured with `benches --bin hitratio`
/// (docs/benchmarks.md) against exact LRU on the ARC traces and zipf 0.8/1.0/1.2, with the
/// candidate pool on and 8 shards: k=10 stays within 0.3 hit-ratio points of exact LRU on every
/// trace and size (worst P2 +0.26, OLTP at 15K -0.12); k=8 missed by 0.0005 on P2 (+0.3005,
/// sampling above LRU), k=5 missed by more. The `k` samples are adjacent entries from a random
/// start, so they cost a few cache lines, not `k` misses; 10 is the smallest k that holds the
/// goal everywhere. (Adjacent samples are less independent than random ones: without the pool,
/// k=10 lands up to 0.25 points further from LRU than independent draws would; with it, no
/// figure moved by more than 0.02.)
pub const DEFAULT_SAMPLES: usize = 10;

/// The most entries [`CacheBuilder::samples`] takes per eviction: more is taken as this many
/// (an eviction is O(samples) under its shard's write lock; `usize::MAX` overflowed).
pub const MAX_SAMPLES: usize = 1024;

/// The largest candidate pool [`CacheBuilder::eviction_pool_size`] takes: more is taken as
/// this (a larger one failed to allocate at `build`).
pub const MAX_POOL_SIZE: usize = 1024;
/// Size of sampled LRU's per-shard eviction candidate pool (Redis's `EVPOOL_SIZE`;
/// [`Admission::Always`]).
pub const DEFAULT_POOL_SIZE: usize = 16;
/// Samples per eviction of the default policy, [`Admission::Adaptive`]: its pools rank by recency and its duels
/// by frequency, and it meets every cell of the hit-ratio tables with fewer samples and a
/// smaller pool (which refreshes its candidates more often) at a fifth less work per insert
/// (docs/benchmarks.md, "Session 11").
pub const ADAPTIVE_SAMPLES: usize = 6;
/// Candidate pool size of the default policy, [`Admission::Adaptive`] (per region: main and
/// window each).
pub const ADAPTIVE_POOL_SIZE: usize = 8;
/// Default [`recency_resolution`](CacheBuilder::recency_resolution): a hit records its time
/// only if the entry's recorded access is at least this old. Redis keeps a 1 s LRU clock and
/// memcached bumps an item at most once a minute for the same reason: a read that writes
/// dirties its cache line. 200 ms keeps the sampled policy within 0.3 hit-ratio points of exact
/// LRU on every trace (docs/benchmarks.md; the harness advances its clock 1 ms per request, so
/// this is 200 requests), while an entry read every few milliseconds is written about once in
/// fifty reads instead of every time. (It was 50 ms until session 5: at 100K entries one hit in
/// ten or so still rewrote its stamp in the get-hit benchmark, and those dirty lines were the
/// measured difference to quick_cache.)
pub const DEFAULT_RECENCY_RESOLUTION: Duration = Duration::from_millis(200);
/// Shards are halved until each holds at least this much capacity (small caches stay accurate).
const MIN_SHARD_CAPACITY: u64 = 64;

/// Configures and builds a [`Cache`]. Created by [`Cache::builder`].
#[must_use = "a builder does nothing until .build()"]
pub struct CacheBuilder<K, V> {
    capacity: u64,
    name: Option<String>,
    /// `None`: the admission policy's default ([`DEFAULT_SAMPLES`] or [`ADAPTIVE_SAMPLES`]).
    samples: Option<usize>,
    recency: Duration,
    /// `None`: the admission policy's default ([`DEFAULT_POOL_SIZE`] or
    /// [`ADAPTIVE_POOL_SIZE`]).
    pool_size: Option<usize>,
    shards: Option<usize>,
    default_ttl: Duration,
    negative_ttl: Duration,
    stale_while_revalidate: Duration,
    wait_timeout: Option<Duration>,
    weigher: Option<Weigher<K, V>>,
    clock: Option<Arc<dyn Clock>>,
    seed: Option<u64>,
    admission: Admission,
    listener: Option<Arc<Listener<K, V>>>,
    time_to_idle: Option<Duration>,
    idle_by: Option<IdleBy<K, V>>,
    key_label: crate::observe::KeyLabel<K>,
}

impl<K, V> std::fmt::Debug for CacheBuilder<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheBuilder")
            .field("capacity", &self.capacity)
            .field("name", &self.name)
            .field("samples", &self.samples)
            .field("recency_resolution", &self.recency)
            .field("pool_size", &self.pool_size)
            .field("shards", &self.shards)
            .field("default_ttl", &self.default_ttl)
            .field("negative_ttl", &self.negative_ttl)
            .field("stale_while_revalidate", &self.stale_while_revalidate)
            .field("wait_timeout", &self.wait_timeout)
            .field("weigher", &self.weigher.is_some())
            .field("seed", &self.seed)
            .field("admission", &self.admission)
            .field("eviction_listener", &self.listener.is_some())
            .field("time_to_idle", &self.time_to_idle)
            .field("time_to_idle_by", &self.idle_by.is_some())
            .finish_non_exhaustive()
    }
}

impl<K, V> CacheBuilder<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    pub(crate) fn new(capacity: u64) -> Self {
        Self {
            capacity,
            name: None,
            samples: None,
            recency: DEFAULT_RECENCY_RESOLUTION,
            pool_size: None,
            shards: None,
            default_ttl: Duration::MAX,
            negative_ttl: Duration::ZERO,
            stale_while_revalidate: Duration::ZERO,
            wait_timeout: None,
            weigher: None,
            clock: None,
            seed: None,
            admission: Admission::Adaptive,
            listener: None,
            time_to_idle: None,
            idle_by: None,
            key_label: None,
        }
    }

    /// Labels read-through `tracing` events with the key (its `Debug` form, formatted only
    /// when a subscriber records the event). Off by default: keys may be sensitive or large.
    pub fn trace_keys(mut self) -> Self
    where
        K: std::fmt::Debug,
    {
        self.key_label = Some(crate::observe::debug_label::<K>);
        self
    }

    /// Time-to-idle: a value not read or written for `idle` is gone (not even stale), next to
    /// its time-to-live: it is fresh until `min(written + ttl, last access + idle)`.
    ///
    /// The last access is the recency stamp hits already record for eviction, so a hit pays
    /// no write and no clock read for it; that stamp is refreshed at most once per
    /// [`recency_resolution`](Self::recency_resolution) (default 200 ms), so an entry read
    /// steadily may expire up to one resolution before `idle` has passed since its last read:
    /// set the resolution well below `idle` (`Duration::ZERO` records every millisecond). Idle
    /// entries are removed by [`Cache::purge_expired`] or by eviction, which takes an idle
    /// entry it samples before any live one (the eviction listener reports them as
    /// [`RemovalCause::Expired`]).
    /// `Duration::ZERO` makes every entry idle at once: nothing is served. An entry may have
    /// its own, shorter or longer: [`Cache::insert_with_idle`], [`time_to_idle_by`](Self::time_to_idle_by).
    ///
    /// [`Cache::purge_expired`]: crate::Cache::purge_expired
    /// [`Cache::insert_with_idle`]: crate::Cache::insert_with_idle
    pub fn time_to_idle(mut self, idle: Duration) -> Self {
        self.time_to_idle = Some(idle);
        self
    }

    /// Time-to-idle per entry: `idle_by(&key, &value)` is called (outside any lock) for every
    /// value written without an idle time of its own, by [`Cache::insert`], [`Cache::put`],
    /// read-through fills, bulk fills and the second-level tier alike; `Some(idle)` gives the
    /// entry that idle time (as [`Cache::insert_with_idle`] does), `None` leaves it the cache's
    /// [`time_to_idle`](Self::time_to_idle) (or none). E.g. a session cache whose anonymous
    /// sessions idle out after 5 minutes and signed-in ones after an hour. Costs as
    /// [`Cache::insert_with_idle`] describes.
    ///
    /// [`Cache::insert`]: crate::Cache::insert
    /// [`Cache::put`]: crate::Cache::put
    /// [`Cache::insert_with_idle`]: crate::Cache::insert_with_idle
    pub fn time_to_idle_by(
        mut self,
        idle_by: impl Fn(&K, &V) -> Option<Duration> + Send + Sync + 'static,
    ) -> Self {
        self.idle_by = Some(Arc::new(idle_by));
        self
    }

    /// Calls `listener(key, value, cause)` for every value that leaves the cache: expired,
    /// evicted for size, replaced, removed, invalidated or cleared ([`RemovalCause`]). Called on
    /// the removing thread after the shard's lock is released, before the removing call
    /// returns; a listener that panics is counted in [`Stats::listener_panics`] and the other
    /// events of the batch are still delivered. Cached fill errors are not reported. Without
    /// a listener nothing of this costs more than a branch on the removal paths.
    ///
    /// [`Stats::listener_panics`]: crate::Stats::listener_panics
    pub fn eviction_listener(
        mut self,
        listener: impl Fn(K, V, RemovalCause) + Send + Sync + 'static,
    ) -> Self {
        self.listener = Some(Listener::new(listener));
        self
    }

    /// Registers the cache under `name` in the [registry](crate::registry) (held weakly), so it
    /// can be listed, resized, purged and shrunk by name. Unnamed caches are not registered.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Entries sampled per eviction (at least 1, at most [`MAX_SAMPLES`]; a shard with fewer
    /// entries samples them all): a window of adjacent entries from a random start. Default:
    /// the policy's own, [`ADAPTIVE_SAMPLES`] for the default [`Admission::Adaptive`],
    /// [`DEFAULT_SAMPLES`] for the others.
    pub fn samples(mut self, k: usize) -> Self {
        self.samples = Some(k.clamp(1, MAX_SAMPLES));
        self
    }

    /// How finely recency is recorded for eviction: a hit stores its time only if the entry's
    /// recorded access is at least this old (rounded up to whole milliseconds, at least 1 ms).
    /// Entries read within one resolution of each other rank alike for eviction. Default
    /// [`DEFAULT_RECENCY_RESOLUTION`]; `Duration::ZERO` records every millisecond.
    pub fn recency_resolution(mut self, resolution: Duration) -> Self {
        self.recency = resolution;
        self
    }

    /// Keep a Redis-style pool of the best eviction candidates across evictions (default on:
    /// [`ADAPTIVE_POOL_SIZE`] entries per region of a shard with the default
    /// [`Admission::Adaptive`], [`DEFAULT_POOL_SIZE`] per shard with the others). Off: each
    /// eviction picks the best of its samples.
    pub fn eviction_pool(mut self, enabled: bool) -> Self {
        self.pool_size = if enabled { None } else { Some(0) };
        self
    }

    /// Candidate pool size per shard (at most [`MAX_POOL_SIZE`]); 0 disables the pool.
    pub fn eviction_pool_size(mut self, size: usize) -> Self {
        self.pool_size = Some(size.min(MAX_POOL_SIZE));
        self
    }

    /// Number of shards (each with its own lock and eviction state). Default: 4 x available
    /// parallelism rounded to a power of two, halved until there are at least 64 units of
    /// capacity per shard. Capacity is not split: the shards draw from one budget, so the cache
    /// holds its whole capacity whatever the shard count, and with a weigher one entry may weigh
    /// up to the whole capacity.
    ///
    /// An explicit count is clamped the same way: to at most `capacity / 64` shards (and at
    /// most 65,536), since each shard evicts by sampling its own entries and a shard of a few
    /// entries samples poorly.
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n.max(1));
        self
    }

    /// TTL used by [`Cache::put`]. Default: never expire (`Duration::MAX`).
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// How long a read-through fill's error is cached and returned to later callers without
    /// running the fill again. Default 0: errors are not cached. Also the back-off before a
    /// failed stale-while-revalidate refresh is retried. In a full cache the default policy
    /// admits a new key's error as it admits a value, by the key's misses: a key asked for
    /// once may not be cached, one that keeps failing is, after a few misses.
    pub fn negative_ttl(mut self, ttl: Duration) -> Self {
        self.negative_ttl = ttl;
        self
    }

    /// For this long after an entry's TTL, read-through callers get the stale value at once while
    /// one background refresh runs; a failed refresh keeps the stale value (stale-if-error). A
    /// refresh with no timeout of its own is abandoned if still running when the window ends,
    /// which takes tokio's timer: refreshes run in a runtime with the time driver enabled
    /// (`enable_time`, `enable_all`, `#[tokio::main]`); in one without it, tokio panics in the
    /// refresh's task (it offers no way to check first).
    /// `lookup` also returns such entries, marked stale; `get` does not. Default 0.
    pub fn stale_while_revalidate(mut self, window: Duration) -> Self {
        self.stale_while_revalidate = window;
        self
    }

    /// How long a read-through caller waits for another caller's fill before giving up with
    /// [`FetchError::WaitTimedOut`](crate::FetchError::WaitTimedOut) (the fill goes on). Default: as long
    /// as the fill takes. Uses tokio's timer.
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = Some(timeout);
        self
    }

    /// Capacity then counts the sum of `weigher(key, value)` (a weight of 0 counts as 1) instead
    /// of entries. Cached errors weigh 1.
    pub fn weigher(mut self, weigher: impl Fn(&K, &V) -> u64 + Send + Sync + 'static) -> Self {
        self.weigher = Some(Arc::new(weigher));
        self
    }

    /// Uses `clock` for TTLs and recency instead of the default [`CoarseClock`]: e.g.
    /// [`ManualClock`](crate::ManualClock) or [`TokioClock`](crate::TokioClock) in tests.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Makes hashing, shard choice and eviction sampling deterministic (for reproducible
    /// hit-ratio simulations). Default: random per cache.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The eviction and admission policy (see [`Admission`]). Default [`Admission::Adaptive`];
    /// [`Admission::Always`] for sampled LRU, which never declines an insert.
    pub fn admission(mut self, admission: Admission) -> Self {
        self.admission = admission;
        self
    }

    /// Builds the cache (and registers it if it has a name).
    pub fn build(self) -> Cache<K, V> {
        let adaptive = self.admission == Admission::Adaptive;
        let samples = self.samples.unwrap_or(if adaptive {
            ADAPTIVE_SAMPLES
        } else {
            DEFAULT_SAMPLES
        });
        let pool_size = self.pool_size.unwrap_or(if adaptive {
            ADAPTIVE_POOL_SIZE
        } else {
            DEFAULT_POOL_SIZE
        });
        let hasher = match self.seed {
            Some(s) => ahash::RandomState::with_seeds(
                s,
                s ^ 0x243F_6A88_85A3_08D3,
                s ^ 0x1319_8A2E_0370_7344,
                s ^ 0xA409_3822_299F_31D0,
            ),
            None => ahash::RandomState::new(),
        };
        let shard_count = match self.shards {
            Some(n) => n.min(max_useful_shards(self.capacity)),
            None => default_shards(self.capacity),
        };
        let caps = split_capacity(self.capacity, shard_count);
        let recency_ms = duration_to_ms(self.recency);
        let tally = Tally::new();
        let budget = Budget::new(self.capacity);
        let columns = Columns {
            weighted: self.weigher.is_some(),
            gated: duration_to_ms(self.stale_while_revalidate) > 0,
        };
        // One set of miniature simulations for the cache, shared by its shards (`minisim.rs`).
        let minis = (self.admission == Admission::Adaptive).then(|| {
            Arc::new(MiniSims::new(
                self.capacity,
                self.seed.unwrap_or(0x51A1_5EED),
            ))
        });
        let shards: Box<[Shard<K, V>]> = caps
            .iter()
            .enumerate()
            .map(|(i, &cap)| {
                let seed = match self.seed {
                    Some(s) => s.wrapping_add(i as u64),
                    None => hasher.hash_one(i as u64 ^ 0x5EED),
                };
                Shard::new(
                    cap,
                    pool_size,
                    seed,
                    self.admission,
                    recency_ms,
                    FromCache {
                        budget: budget.clone(),
                        capacity: self.capacity,
                        columns,
                        hasher: hasher.clone(),
                        tally: tally.clone(),
                        minis: minis.clone(),
                    },
                )
                .with_listener(self.listener.clone())
                .with_idle(self.time_to_idle.map_or(u64::MAX, duration_to_ms))
            })
            .collect();
        let clock = match self.clock {
            Some(c) => ClockSource::Custom(c),
            None => ClockSource::Coarse(CoarseClock::new()),
        };
        let mut group = coalesce::Group::builder();
        if let Some(t) = self.wait_timeout {
            group = group.wait_timeout(t);
        }
        #[cfg(feature = "metrics")]
        let name_for_metrics = self.name.clone();
        let inner = Arc::new(Inner {
            name: self.name,
            shards,
            hasher,
            clock,
            cfg: ShardConfig {
                samples,
                swr_ms: duration_to_ms(self.stale_while_revalidate),
            },
            capacity: parking_lot::Mutex::new(self.capacity),
            budget,
            default_ttl_ms: duration_to_ms(self.default_ttl),
            negative_ttl_ms: duration_to_ms(self.negative_ttl),
            weigher: self.weigher,
            idle_by: self.idle_by,
            fills: CachePadded::default(),
            tally,
            group: group.build(),
            listener: self.listener,
            key_label: self.key_label,
            #[cfg(feature = "metrics")]
            metrics: crate::metrics::Metrics::register(name_for_metrics.as_deref()),
        });
        if inner.name.is_some() {
            crate::registry::register(&inner);
        }
        Cache::from_inner(inner)
    }
}

/// The most shards that still leave each at least `MIN_SHARD_CAPACITY` units (at least 1).
fn max_useful_shards(capacity: u64) -> usize {
    let most = (capacity / MIN_SHARD_CAPACITY).clamp(1, 1 << 16);
    most as usize
}

fn default_shards(capacity: u64) -> usize {
    let par = std::thread::available_parallelism().map_or(4, |n| n.get());
    let mut shards = (par * 4).next_power_of_two();
    while shards > 1 && capacity / (shards as u64) < MIN_SHARD_CAPACITY {
        shards /= 2;
    }
    shards
}

/// Splits `capacity` over `n` shards; the parts sum to exactly `capacity`.
pub(crate) fn split_capacity(capacity: u64, n: usize) -> Vec<u64> {
    let n64 = n as u64;
    let (base, rem) = (capacity / n64, capacity % n64);
    (0..n64).map(|i| base + u64::from(i < rem)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_split_sums_exactly() {
        for (cap, n) in [(0, 4), (1, 4), (10, 3), (1_000_003, 16)] {
            let parts = split_capacity(cap, n);
            assert_eq!(parts.len(), n);
            assert_eq!(parts.iter().sum::<u64>(), cap);
            let (min, max) = (parts.iter().min().unwrap(), parts.iter().max().unwrap());
            assert!(max - min <= 1);
        }
    }

    #[test]
    #[cfg(not(herd_loom))]
    fn each_policy_samples_and_pools_by_its_own_defaults_unless_told() {
        let settings = |b: CacheBuilder<u32, u32>| {
            let cache = b.build();
            let shard = &cache.inner.shards[0];
            (cache.inner.cfg.samples, shard.pool_sizes_for_test())
        };
        assert_eq!(
            settings(crate::Cache::builder(1000).admission(Admission::Always)),
            (DEFAULT_SAMPLES, (DEFAULT_POOL_SIZE, None))
        );
        let adaptive = || crate::Cache::builder(1000).admission(Admission::Adaptive);
        assert_eq!(
            settings(adaptive()),
            (
                ADAPTIVE_SAMPLES,
                (ADAPTIVE_POOL_SIZE, Some(ADAPTIVE_POOL_SIZE))
            )
        );
        assert_eq!(
            settings(crate::Cache::builder(1000)),
            settings(adaptive()),
            "the default policy is the adaptive one"
        );
        assert_eq!(
            settings(adaptive().samples(3).eviction_pool_size(5)),
            (3, (5, Some(5))),
            "explicit settings win"
        );
        assert_eq!(
            settings(adaptive().eviction_pool(false).eviction_pool(true)),
            (
                ADAPTIVE_SAMPLES,
                (ADAPTIVE_POOL_SIZE, Some(ADAPTIVE_POOL_SIZE))
            ),
            "a pool switched back on has the policy's size"
        );
    }

    #[test]
    fn explicit_shard_counts_are_clamped_to_useful_sizes() {
        let cache: crate::Cache<u32, u32> = crate::Cache::builder(10).shards(64).build();
        for k in 0..10 {
            cache.insert(k, k, std::time::Duration::MAX).unwrap();
        }
        assert_eq!(
            cache.len(),
            10,
            "a 10-entry cache holds 10 entries whatever the shard count"
        );
        let huge: crate::Cache<u32, u32> =
            crate::Cache::builder(1 << 20).shards(usize::MAX).build();
        huge.insert(1, 1, std::time::Duration::MAX).unwrap();
        assert_eq!(huge.get(&1), Some(1));
    }

    #[test]
    fn small_caches_get_few_shards() {
        assert_eq!(default_shards(0), 1);
        assert_eq!(default_shards(100), 1);
        assert!(default_shards(1 << 20) >= 4);
    }
}
