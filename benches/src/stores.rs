//! The concurrent stores compared in the throughput benches, behind one small trait so each
//! workload is written once. Every peer is used the way its docs recommend for `u64 -> u64`;
//! [`LruTtlLike`] re-creates KumoMTA `lruttl`'s algorithm (it lives inside the KumoMTA workspace) and
//! [`ShardedFloor`] is the floor: a sharded `RwLock<HashMap>` with FIFO eviction, the least work a
//! bounded concurrent map can do.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ahash::RandomState;
use parking_lot::{Mutex, RwLock};

use crate::rng::Rng;

/// A bounded concurrent `u64 -> u64` store under measurement.
pub trait Store: Send + Sync {
    /// Short display name for tables and criterion ids.
    fn name(&self) -> &'static str;
    /// A lookup that clones the value out.
    fn get(&self, key: u64) -> Option<u64>;
    /// Insert or replace, evicting if the store is full.
    fn insert(&self, key: u64, value: u64);

    /// Looks up every key; returns the number of hits. Async stores override this to run the
    /// whole batch inside one `block_on`, so the executor is not charged per operation.
    fn get_all(&self, keys: &[u64]) -> u64 {
        keys.iter().filter(|&&k| self.get(k).is_some()).count() as u64
    }
    /// Inserts every key with itself as the value.
    fn insert_all(&self, keys: &[u64]) {
        for &k in keys {
            self.insert(k, k);
        }
    }
    /// Writes of new keys the store's admission policy turned away so far (ttl-lru's
    /// `Stats::rejections`; 0 for a store that admits every write): a timed insert or fill
    /// that was declined did less work than one that evicted and stored (`hitprobe` prints
    /// it beside the time).
    fn declined(&self) -> u64 {
        0
    }
    /// Looks up every key through the store's read-through path (each a miss that runs a
    /// trivial fill and stores its value), inside one current-thread runtime; `false` if the
    /// store has no such path (`hitprobe`'s `fill` mode).
    fn read_through_all(&self, _keys: &[u64]) -> bool {
        false
    }
    /// Runs a mixed stream: `(key, true)` is an insert, `(key, false)` a get. Returns hits.
    fn mixed(&self, ops: &[(u64, bool)]) -> u64 {
        let mut hits = 0;
        for &(k, write) in ops {
            if write {
                self.insert(k, k);
            } else if self.get(k).is_some() {
                hits += 1;
            }
        }
        hits
    }
    /// Lets stores with deferred maintenance catch up (moka's pending tasks); a no-op elsewhere.
    fn settle(&self) {}
}

/// herd's `ttl_lru::Cache` with its defaults (coarse clock, the adaptive policy, default shard
/// count; [`new`](Self::new)) or another policy, and a one-hour TTL on every insert.
pub struct TtlLruStore(ttl_lru::Cache<u64, u64>, &'static str);

impl TtlLruStore {
    /// A cache bounded to `capacity` entries, with every default (`hitprobe ttl-lru`). The
    /// default policy samples keys by hash, so the seed is fixed, as
    /// [`with_admission`](Self::with_admission)'s: with a random one its instruction counts
    /// move from run to run.
    pub fn new(capacity: usize) -> Self {
        Self(
            ttl_lru::Cache::builder(capacity as u64)
                .seed(0x5EED)
                .build(),
            "ttl-lru",
        )
    }

    /// Sampled LRU (`Admission::Always`) with `samples` per eviction and a candidate pool of
    /// `pool` (0: none), for measuring what the eviction settings cost (`hitprobe
    /// ttl-lru-lru:SAMPLES:POOL`).
    pub fn with_eviction(capacity: usize, samples: usize, pool: usize) -> Self {
        Self(
            ttl_lru::Cache::builder(capacity as u64)
                .admission(ttl_lru::Admission::Always)
                .samples(samples)
                .eviction_pool_size(pool)
                .build(),
            "ttl-lru-lru",
        )
    }
    /// The defaults with the admission policy `admission` (`hitprobe ttl-lru-lru`, `hitprobe
    /// ttl-lru-tinylfu`, `hitprobe ttl-lru-adaptive`: the default's policy, named), named after
    /// it.
    pub fn with_admission(capacity: usize, admission: ttl_lru::Admission) -> Self {
        Self::with_admission_builder(ttl_lru::Cache::builder(capacity as u64), admission)
    }

    /// [`with_admission`](Self::with_admission) with `samples` per eviction and a candidate
    /// pool of `pool` (`hitprobe ttl-lru-adaptive:SAMPLES:POOL`).
    pub fn with_admission_eviction(
        capacity: usize,
        admission: ttl_lru::Admission,
        samples: usize,
        pool: usize,
    ) -> Self {
        let builder = ttl_lru::Cache::builder(capacity as u64)
            .samples(samples)
            .eviction_pool_size(pool);
        Self::with_admission_builder(builder, admission)
    }

    fn with_admission_builder(
        builder: ttl_lru::CacheBuilder<u64, u64>,
        admission: ttl_lru::Admission,
    ) -> Self {
        let name = match admission {
            ttl_lru::Admission::TinyLfu => "ttl-lru-tinylfu",
            ttl_lru::Admission::Adaptive => "ttl-lru-adaptive",
            _ => "ttl-lru-lru",
        };
        Self(
            builder
                .admission(admission)
                // A fixed hash seed: the adaptive policy's simulations sample keys by hash, so
                // with a random seed its instruction counts move from run to run.
                .seed(0x5EED)
                .build(),
            name,
        )
    }
}

impl Store for TtlLruStore {
    fn name(&self) -> &'static str {
        self.1
    }
    fn read_through_all(&self, keys: &[u64]) -> bool {
        current_thread().block_on(async {
            for &key in keys {
                let fetched = self
                    .0
                    .get_or_try_insert(
                        key,
                        |_| Duration::from_secs(3600),
                        || async move { Ok::<_, std::convert::Infallible>(key) },
                    )
                    .await;
                std::hint::black_box(fetched.ok());
            }
        });
        true
    }
    fn get(&self, key: u64) -> Option<u64> {
        self.0.get(&key)
    }
    fn insert(&self, key: u64, value: u64) {
        // No weigher and a capacity above 0, so no error; the default policy may decline a
        // new key at capacity (`Ok(false)`, counted by `declined`).
        let _ = self.0.insert(key, value, Duration::from_secs(3600));
    }
    fn declined(&self) -> u64 {
        self.0.stats().rejections
    }
}

/// moka's `sync::Cache` (TinyLFU admission, lock-free reads, batched maintenance).
pub struct MokaSync(moka::sync::Cache<u64, u64, RandomState>);

impl MokaSync {
    /// A cache bounded to `capacity` entries.
    pub fn new(capacity: u64) -> Self {
        Self(
            moka::sync::Cache::builder()
                .max_capacity(capacity)
                .build_with_hasher(RandomState::new()),
        )
    }
}

impl Store for MokaSync {
    fn name(&self) -> &'static str {
        "moka::sync"
    }
    fn get(&self, key: u64) -> Option<u64> {
        self.0.get(&key)
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.insert(key, value);
    }
    fn settle(&self) {
        self.0.run_pending_tasks();
    }
}

/// moka's `future::Cache`; batches run inside one `futures::executor::block_on`.
pub struct MokaFuture(moka::future::Cache<u64, u64, RandomState>);

impl MokaFuture {
    /// A cache bounded to `capacity` entries.
    pub fn new(capacity: u64) -> Self {
        Self(
            moka::future::Cache::builder()
                .max_capacity(capacity)
                .build_with_hasher(RandomState::new()),
        )
    }
}

impl Store for MokaFuture {
    fn name(&self) -> &'static str {
        "moka::future"
    }
    fn get(&self, key: u64) -> Option<u64> {
        futures::executor::block_on(self.0.get(&key))
    }
    fn insert(&self, key: u64, value: u64) {
        futures::executor::block_on(self.0.insert(key, value));
    }
    fn get_all(&self, keys: &[u64]) -> u64 {
        futures::executor::block_on(async {
            let mut hits = 0;
            for k in keys {
                if self.0.get(k).await.is_some() {
                    hits += 1;
                }
            }
            hits
        })
    }
    fn insert_all(&self, keys: &[u64]) {
        futures::executor::block_on(async {
            for &k in keys {
                self.0.insert(k, k).await;
            }
        });
    }
    fn mixed(&self, ops: &[(u64, bool)]) -> u64 {
        futures::executor::block_on(async {
            let mut hits = 0;
            for &(k, write) in ops {
                if write {
                    self.0.insert(k, k).await;
                } else if self.0.get(&k).await.is_some() {
                    hits += 1;
                }
            }
            hits
        })
    }
    fn settle(&self) {
        futures::executor::block_on(self.0.run_pending_tasks());
    }
}

/// quick_cache's `sync::Cache` (sharded `RwLock`s, CLOCK-Pro-like policy, no TTL).
pub struct QuickCache(quick_cache::sync::Cache<u64, u64>);

impl QuickCache {
    /// A cache bounded to `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self(quick_cache::sync::Cache::new(capacity))
    }
}

impl Store for QuickCache {
    fn name(&self) -> &'static str {
        "quick_cache"
    }
    fn read_through_all(&self, keys: &[u64]) -> bool {
        current_thread().block_on(async {
            for &key in keys {
                match self.0.get_value_or_guard_async(&key).await {
                    Ok(v) => {
                        std::hint::black_box(v);
                    }
                    Err(guard) => {
                        let _ = std::hint::black_box(guard.insert(key));
                    }
                }
            }
        });
        true
    }
    fn get(&self, key: u64) -> Option<u64> {
        self.0.get(&key)
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.insert(key, value);
    }
}

/// pingora-memory-cache's `MemoryCache` (TinyUFO: S3-FIFO + TinyLFU over hashed keys), with a
/// one-hour TTL on every insert like ttl-lru.
pub struct PingoraMemory(pingora_memory_cache::MemoryCache<u64, u64>);

impl PingoraMemory {
    /// A cache bounded to `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self(pingora_memory_cache::MemoryCache::new(capacity))
    }
}

impl Store for PingoraMemory {
    fn name(&self) -> &'static str {
        "pingora-memory-cache"
    }
    fn get(&self, key: u64) -> Option<u64> {
        self.0.get(&key).0
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.put(&key, value, Some(Duration::from_secs(3600)));
    }
}

/// mini-moka's `sync::Cache` (moka's predecessor design on a DashMap).
pub struct MiniMoka(mini_moka::sync::Cache<u64, u64>);

impl MiniMoka {
    /// A cache bounded to `capacity` entries.
    pub fn new(capacity: u64) -> Self {
        Self(mini_moka::sync::Cache::new(capacity))
    }
}

impl Store for MiniMoka {
    fn name(&self) -> &'static str {
        "mini-moka"
    }
    fn get(&self, key: u64) -> Option<u64> {
        self.0.get(&key)
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.insert(key, value);
    }
    fn settle(&self) {
        use mini_moka::sync::ConcurrentCacheExt;
        self.0.sync();
    }
}

/// The `lru` crate's exact LRU behind one `parking_lot::Mutex` (every get reorders the list).
pub struct LruMutex(Mutex<lru::LruCache<u64, u64, RandomState>>);

impl LruMutex {
    /// A cache bounded to `capacity` (>= 1) entries.
    pub fn new(capacity: usize) -> Self {
        let cap = std::num::NonZeroUsize::new(capacity.max(1)).expect("max(1) is non-zero");
        Self(Mutex::new(lru::LruCache::with_hasher(
            cap,
            RandomState::new(),
        )))
    }
}

impl Store for LruMutex {
    fn name(&self) -> &'static str {
        "lru+Mutex"
    }
    fn get(&self, key: u64) -> Option<u64> {
        self.0.lock().get(&key).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.lock().put(key, value);
    }
}

/// One entry of [`LruTtlLike`], shaped like lruttl's `Item`.
struct TtlItem {
    value: u64,
    expiration: Instant,
    last_tick: AtomicUsize,
}

/// KumoMTA `lruttl`'s algorithm, re-created for measurement: a `DashMap` of items with a TTL and a
/// last-use tick from one global counter; a hit takes the shard's *write* lock (`get_mut`), reads
/// the clock, bumps the global tick and global lookup/hit counters; an insert past capacity evicts
/// by picking 10 random positions and walking the map's iterator to them (O(n) per eviction),
/// dropping expired samples first, then the oldest half of the samples by tick.
pub struct LruTtlLike {
    map: dashmap::DashMap<u64, TtlItem, RandomState>,
    capacity: usize,
    samples: usize,
    tick: AtomicUsize,
    lookups: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    inserts: AtomicU64,
    evictions: AtomicU64,
    size_gauge: AtomicI64,
    ttl: Duration,
}

thread_local! {
    static SAMPLER: std::cell::RefCell<Rng> = std::cell::RefCell::new(Rng::new(0x1A_77_1C));
}

impl LruTtlLike {
    /// A cache bounded to `capacity` entries, with lruttl's default of 10 samples.
    pub fn new(capacity: usize) -> Self {
        Self {
            map: dashmap::DashMap::with_hasher(RandomState::new()),
            capacity,
            samples: 10,
            tick: AtomicUsize::new(0),
            lookups: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            inserts: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            size_gauge: AtomicI64::new(0),
            ttl: Duration::from_secs(3600),
        }
    }

    fn next_tick(&self) -> usize {
        self.tick.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn maybe_evict(&self) {
        let size = self.map.len();
        if size > self.capacity {
            self.evict_some(size - self.capacity);
        }
    }

    fn evict_some(&self, target: usize) {
        let now = Instant::now();
        let size = self.map.len();
        let wanted = self.samples.min(size);
        // Distinct random positions (Floyd's algorithm), visited in order along one iterator.
        let mut positions: Vec<usize> = Vec::with_capacity(wanted);
        SAMPLER.with(|rng| {
            let mut rng = rng.borrow_mut();
            for j in size - wanted..size {
                let t = rng.below(j as u64 + 1) as usize;
                positions.push(if positions.contains(&t) { j } else { t });
            }
        });
        positions.sort_unstable();
        let mut expired = Vec::new();
        let mut samples = Vec::with_capacity(wanted);
        let mut iter = self.map.iter();
        let mut at = 0;
        for pos in positions {
            for _ in at..pos {
                if iter.next().is_none() {
                    break;
                }
            }
            let Some(entry) = iter.next() else { break };
            at = pos + 1;
            if now >= entry.expiration {
                expired.push(*entry.key());
            } else {
                samples.push((*entry.key(), entry.last_tick.load(Ordering::Relaxed)));
            }
        }
        drop(iter);
        let mut removed = 0;
        for key in expired {
            if self
                .map
                .remove_if(&key, |_, e| now >= e.expiration)
                .is_some()
            {
                removed += 1;
            }
        }
        let target = target.min(samples.len() / 2).max(1);
        if removed >= target {
            return;
        }
        samples.sort_unstable_by_key(|&(_, tick)| tick);
        for (key, tick) in samples {
            if self
                .map
                .remove_if(&key, |_, e| e.last_tick.load(Ordering::Relaxed) == tick)
                .is_some()
            {
                removed += 1;
                self.evictions.fetch_add(1, Ordering::Relaxed);
                self.size_gauge
                    .store(self.map.len() as i64, Ordering::Relaxed);
                if removed >= target {
                    return;
                }
            }
        }
    }
}

impl Store for LruTtlLike {
    fn name(&self) -> &'static str {
        "lruttl-like"
    }
    fn get(&self, key: u64) -> Option<u64> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let Some(entry) = self.map.get_mut(&key) else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let now = Instant::now();
        if now >= entry.expiration {
            drop(entry);
            self.map.remove_if(&key, |_, e| now >= e.expiration);
            self.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        entry.last_tick.store(self.next_tick(), Ordering::Relaxed);
        Some(entry.value)
    }
    fn insert(&self, key: u64, value: u64) {
        let item = TtlItem {
            value,
            expiration: Instant::now() + self.ttl,
            last_tick: AtomicUsize::new(self.next_tick()),
        };
        self.map.insert(key, item);
        self.inserts.fetch_add(1, Ordering::Relaxed);
        self.size_gauge
            .store(self.map.len() as i64, Ordering::Relaxed);
        self.maybe_evict();
    }
}

/// The floor: `shards` × `RwLock<HashMap>` (ahash) with a per-shard FIFO queue for eviction. A
/// hit is one read lock and one probe; an insert at capacity pops one key off the queue.
pub struct ShardedFloor {
    hasher: RandomState,
    shards: Box<[RwLock<FloorShard>]>,
    per_shard: usize,
}

struct FloorShard {
    map: HashMap<u64, u64, RandomState>,
    order: VecDeque<u64>,
}

impl ShardedFloor {
    /// `shards` (a power of two) shards sharing `capacity` entries evenly.
    pub fn new(capacity: usize, shards: usize) -> Self {
        let shards = shards.next_power_of_two();
        let per_shard = capacity.div_ceil(shards).max(1);
        Self {
            hasher: RandomState::new(),
            shards: (0..shards)
                .map(|_| {
                    RwLock::new(FloorShard {
                        map: HashMap::with_hasher(RandomState::new()),
                        order: VecDeque::new(),
                    })
                })
                .collect(),
            per_shard,
        }
    }

    fn shard(&self, key: u64) -> &RwLock<FloorShard> {
        let h = self.hasher.hash_one(key);
        &self.shards[(h >> 32) as usize & (self.shards.len() - 1)]
    }
}

impl Store for ShardedFloor {
    fn name(&self) -> &'static str {
        "floor: sharded RwLock<HashMap>"
    }
    fn get(&self, key: u64) -> Option<u64> {
        self.shard(key).read().map.get(&key).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        let mut shard = self.shard(key).write();
        if shard.map.insert(key, value).is_none() {
            shard.order.push_back(key);
            if shard.map.len() > self.per_shard
                && let Some(old) = shard.order.pop_front()
            {
                shard.map.remove(&old);
            }
        }
    }
}

/// Every store of [`all_stores`] and ttl-lru with sampled LRU (`Admission::Always`, the default
/// until issue 17), for the criterion groups: what the default's policy costs is measured beside
/// the peers it is held to.
pub fn bench_stores(capacity: usize) -> Vec<Box<dyn Store>> {
    let mut stores = all_stores(capacity);
    stores.insert(
        1,
        Box::new(TtlLruStore::with_admission(
            capacity,
            ttl_lru::Admission::Always,
        )),
    );
    stores
}

/// Every store in the comparison, each bounded to `capacity` entries, in table order.
pub fn all_stores(capacity: usize) -> Vec<Box<dyn Store>> {
    vec![
        Box::new(TtlLruStore::new(capacity)),
        Box::new(ShardedFloor::new(capacity, 64)),
        Box::new(QuickCache::new(capacity)),
        Box::new(MokaSync::new(capacity as u64)),
        Box::new(MokaFuture::new(capacity as u64)),
        Box::new(MiniMoka::new(capacity as u64)),
        Box::new(PingoraMemory::new(capacity)),
        Box::new(LruMutex::new(capacity)),
        Box::new(LruTtlLike::new(capacity)),
    ]
}

/// A current-thread runtime for a batch of async calls (no I/O or timers: the read-through
/// paths measured here need neither).
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(capacity: usize) -> Vec<Box<dyn Store>> {
        all_stores(capacity)
    }

    #[test]
    fn every_store_returns_what_was_inserted() {
        for store in all(1_000) {
            store.insert_all(&[1, 2, 3]);
            store.settle();
            assert_eq!(store.get(2), Some(2), "{}", store.name());
            assert_eq!(store.get(99), None, "{}", store.name());
            assert_eq!(store.get_all(&[1, 2, 3, 4]), 3, "{}", store.name());
            assert_eq!(
                store.mixed(&[(7, true), (7, false), (8, false)]),
                1,
                "{}",
                store.name()
            );
        }
    }

    #[test]
    fn every_store_stays_bounded() {
        for store in all(200) {
            let keys: Vec<u64> = (0..5_000).collect();
            store.insert_all(&keys);
            store.settle();
            let kept = store.get_all(&keys);
            // FIFO floor shards round capacity up; moka-family may keep a few extra briefly.
            assert!(
                kept <= 260,
                "{} kept {kept} of 5000 at capacity 200",
                store.name()
            );
            assert!(kept > 0, "{} kept nothing", store.name());
        }
    }
}
