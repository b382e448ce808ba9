//! `ttl-lru`: a bounded TTL cache with O(k) sampled eviction and cancel-safe, coalesced read-through.
//!
//! The core types:
//! - [`Cache`]: the sharded store (cheap `Clone`, `Send + Sync`). Plain API: [`Cache::insert`],
//!   [`Cache::get`], [`Cache::lookup`], [`Cache::remove`], capacity control, [`Cache::clear`]; and
//!   read-through: [`Cache::get_or_try_insert`], [`Cache::get_or_try_insert_detached`], and the
//!   infallible [`Cache::get_with`] / [`Cache::get_with_ttl`] for fills that cannot fail, and the
//!   bulk [`Cache::get_or_try_insert_many`] (one batch call for many misses); iteration and
//!   predicate removal: [`Cache::iter`], [`Cache::retain`], [`Cache::invalidate_if`].
//! - [`CacheBuilder`]: capacity, TTLs, time-to-idle (per cache, and per entry with
//!   [`Cache::insert_with_idle`] or `time_to_idle_by`), stale-while-revalidate, weigher,
//!   sampling, clock, an eviction listener ([`RemovalCause`]), key labels for `tracing` events.
//! - [`Fetched`] / [`FetchError`]: a read-through value with its [`Source`] (hit, filled, joined,
//!   stale), or why there is none.
//!
//! ```
//! use std::time::Duration;
//! use ttl_lru::{Cache, Source};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let cache: Cache<String, u32> = Cache::builder(10_000)
//!     .negative_ttl(Duration::from_secs(5))
//!     .build();
//!
//! cache.insert("a".to_string(), 1, Duration::from_secs(60)).unwrap();
//! assert_eq!(cache.get("a"), Some(1));
//!
//! // A miss runs the fill once, however many callers ask at the same time.
//! let ttl = |_: &u32| Duration::from_secs(60);
//! let first = cache
//!     .get_or_try_insert("b".to_string(), ttl, || async { Ok::<_, std::io::Error>(2) })
//!     .await
//!     .unwrap();
//! assert_eq!((first.value, first.source), (2, Source::Filled));
//! let again = cache
//!     .get_or_try_insert("b".to_string(), ttl, || async { Ok::<_, std::io::Error>(99) })
//!     .await
//!     .unwrap();
//! assert_eq!((again.value, again.source), (2, Source::Hit));
//! # }
//! ```
//!
//! # Design
//! - **Store.** Each shard keeps its values in a dense `Vec` of small slots (only what a hit
//!   reads: 32 bytes for `u64 -> u64`), a weight and a refresh gate in parallel columns only
//!   where the cache has a weigher or a stale window, no stored key hash (recomputed from the key
//!   when the index needs it, as `std`'s `HashMap` does: 42.5 bytes per `u64 -> u64` entry at 1M)
//!   and cached errors in an array of their own, plus a `hashbrown::HashTable` from key hash to
//!   place; deletion swap-removes, so the arrays have no holes. Eviction samples a window of `k`
//!   adjacent entries from a random start (as Redis's `dictGetSomeKeys` walks adjacent buckets:
//!   a few cache lines instead of `k` misses), keeps a Redis-style pool of the best candidates
//!   across evictions, takes an already-expired sample at once, and puts a new key's value in its
//!   victim's place. O(k) at any size; nothing on the insert path walks the map.
//! - **Policy.** The default, [`Admission::Adaptive`], is a sampled W-TinyLFU: a window admits
//!   by recency, a frequency duel guards the main space, and three miniature simulations over a
//!   hash sample of the keys choose the window's share (recency for a hot set that moves,
//!   frequency for a loop, a scan or a stable core). It stays within 0.5 hit-ratio point of
//!   the best of exact LRU, quick_cache and moka on every trace measured (docs/benchmarks.md).
//!   At capacity it may decline a new key less frequent than what it would evict (`insert`
//!   returns `Ok(false)`), as moka and Caffeine do; [`Admission::Always`] is plain sampled
//!   LRU, which never declines.
//! - **Capacity** is one budget for the whole cache, not a share per shard: a cache of capacity
//!   N holds N entries (or N units of weight, one entry up to all of it) however its keys hash,
//!   at build time and after any [`Cache::set_capacity`], and the bound holds after every
//!   insert (and, while a `set_capacity` shrinks the cache, from when it returns). A write that grows the cache takes from the shared budget (one compare-and-swap)
//!   and a removal gives back; in a full cache an insert evicts in its own shard and writes no
//!   shared word (if that shard holds nothing, it evicts from the next ones).
//! - **Hits** take the shard's read lock (one atomic swap on a cache line of this thread's own,
//!   not a read-modify-write of a lock word every reader shares), store a relaxed recency stamp
//!   (only when the recorded one is older than [`CacheBuilder::recency_resolution`], so
//!   read-mostly hits keep their cache lines clean), count themselves in this thread's own counter
//!   stripe (no locked instruction) and clone the value; no shared writes, no allocation. Writes
//!   pay for it: each reads every reader mark of the cache (two per core). A unit test checks
//!   it: in test builds every atomic of the crate logs its writes, and a hit may write only its
//!   own thread's line (and a stale recency stamp). With [`Admission::TinyLfu`] a hit also
//!   records the key in the shard's sketch, which does write shared words; exactly which is
//!   listed in [`Admission::TinyLfu`]'s docs (since issue 17 no longer a `fetch_add` on every
//!   hit, one per 64 of a thread's hits). With [`Admission::Adaptive`] a hit writes its entry's
//!   stamp word (its flags once, its count with a new stamp) and its thread's own hit buffer
//!   for the shard; one in 8 of the hits the policy's simulations sample (one key in 4 or
//!   more) fills that buffer and drains it under the shard's write lock, if free.
//! - **Time** comes from a [`Clock`]. The default [`CoarseClock`] is a process-wide atomic
//!   millisecond tick refreshed by one background thread, so a hit reads time with one relaxed
//!   load instead of `Instant::now()`. Tests inject [`ManualClock`] or [`TokioClock`].
//! - **Fills** live in a [`coalesce::Group`], never in the store: they take no capacity, and a
//!   cancelled leader hands its flight to exactly one waiter. A fill stores its result only if its
//!   key was not removed, inserted, invalidated or cleared since it started: a per-key fence,
//!   so writes of other keys never cost a fill its publish (they did, until issue 17, when
//!   their keys hashed to the same of 16 stripes per shard). Each shard remembers the keys of
//!   its last 64 to 1,024 writes (its capacity share); a fill that outlived that many writes to
//!   its shard is fenced conservatively. A stale entry's refresh claimed while another fill of
//!   the key is open follows that fill and, if it stores nothing, releases the claim (or runs
//!   the refresh, if that fill's lead is handed to it): the stale window is never spent without
//!   a refresh.
//! - **Named caches** register in [`registry`] (weakly) for listing, resizing, purging, shrinking;
//!   an opt-in [`pressure`] watcher scales them all down under memory pressure, with hysteresis.
//!
//! - **Observability.** Read-through fills and refreshes emit `tracing` events (target
//!   `ttl_lru`; a lead looks at the subscriber once, hits never do); with the `metrics` feature
//!   `Cache::record_metrics` copies [`Stats`] into `ttl_lru_*` counters and each fill's
//!   duration goes to a histogram.
//!
//! Edge cases: capacity 0 stores nothing (inserts fail with [`InsertError::TooHeavy`], read-through
//! still coalesces and returns values); a TTL of 0 stores nothing unless a stale window is set.

mod adaptive;
mod admission;
mod atomic;
mod budget;
mod builder;
mod bulk;
mod cache;
mod clock;
mod error;
mod fence;
mod get_with;
mod iter;
mod listener;
#[cfg(feature = "metrics")]
mod metrics;
mod minisim;
mod observe;
mod pool;
mod prefetch;
pub mod pressure;
mod read_through;
pub mod registry;
mod rng;
pub mod second_level;
mod shard;
mod shard_lock;
mod stats;
mod sync;
mod table;
mod tally;

pub use admission::Admission;
pub use builder::{
    ADAPTIVE_POOL_SIZE, ADAPTIVE_SAMPLES, CacheBuilder, DEFAULT_POOL_SIZE,
    DEFAULT_RECENCY_RESOLUTION, DEFAULT_SAMPLES, MAX_POOL_SIZE, MAX_SAMPLES,
};
pub use bulk::ManyFetched;
pub use cache::{Cache, Entry, Fence, Freshness};
pub use clock::{Clock, CoarseClock, ManualClock, TokioClock};
pub use error::{FetchError, InsertError, RegistryError};
pub use iter::Iter;
pub use listener::RemovalCause;
pub use read_through::{Fetched, Source};
pub use second_level::{
    Codec, CodecError, L2Error, SecondLevel, TierFetched, TierSource, TierStats, TieredCache,
};
pub use stats::Stats;

/// The user guide's read-through recipe (`docs/guide/read-through.md`), compiled and run as a doc
/// test so that it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/read-through.md")]
pub struct ReadThroughRecipe;
