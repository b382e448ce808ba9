//! Counters: the frequent ones per thread (`tally.rs`), the rare ones per shard and cache-padded,
//! summed into a
//! [`Stats`] snapshot on demand. The read-through path's rare events (errors, timeouts,
//! refreshes, fences) count per cache; its fills and waits per thread.

use crate::sync::Ordering;
use crate::sync::plain::AtomicU64;

use crate::tally::{Event, Tally};

/// Aligns its content to its own 128-byte block so two hot counters never share a cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A relaxed event counter.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    #[inline]
    pub(crate) fn incr(&self) {
        self.add(1);
    }
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A shard's counters of rare events (the frequent ones are per thread, in `tally.rs`).
#[derive(Debug, Default)]
pub(crate) struct ShardCounters {
    pub(crate) rejections: Counter,
}

/// Rare events of the read-through path (errors, timeouts, refreshes, fences); the frequent
/// ones, fills and waits, count in the per-thread tally (`tally.rs`).
#[derive(Debug, Default)]
pub(crate) struct FillCounters {
    pub(crate) fill_errors: Counter,
    pub(crate) fill_timeouts: Counter,
    pub(crate) wait_timeouts: Counter,
    pub(crate) refreshes: Counter,
    pub(crate) fenced: Counter,
}

/// A point-in-time snapshot of a cache's counters (each read relaxed; not one atomic cut).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Lookups of every kind (`get`, `lookup`, read-through): `hits + misses + stale_hits + negative_hits`.
    pub lookups: u64,
    /// Lookups that found a fresh value.
    pub hits: u64,
    /// Lookups that found nothing usable.
    pub misses: u64,
    /// Lookups served a value past its TTL but inside the stale-while-revalidate window.
    pub stale_hits: u64,
    /// Read-through lookups answered by a cached error (negative caching).
    pub negative_hits: u64,
    /// Entries written into the store (plain inserts, fills, cached errors).
    pub inserts: u64,
    /// Live entries evicted to make room (capacity, `set_capacity`, `shrink`).
    pub evictions: u64,
    /// Entries removed because they were past their TTL (and stale window).
    pub expirations: u64,
    /// Writes not stored: too heavy for the capacity, or declined by the admission filter.
    pub rejections: u64,
    /// Fills run by read-through calls (miss fills and background refreshes).
    pub fills: u64,
    /// Fills that returned an error.
    pub fill_errors: u64,
    /// Detached fills that ran past their `fill_timeout`, and background refreshes (with no
    /// timeout of their own) still running when their entry's stale window ended, which are
    /// then abandoned (a waiting caller takes the key's lead).
    pub fill_timeouts: u64,
    /// Read-through calls that waited for another caller's fill.
    pub waits: u64,
    /// Waits that gave up after `wait_timeout`.
    pub wait_timeouts: u64,
    /// Background stale-while-revalidate refreshes started.
    pub refreshes: u64,
    /// Fill results not stored because a `remove`/`insert`/`clear` of the key happened meanwhile.
    pub fenced: u64,
    /// Entries currently stored.
    pub size: u64,
    /// Current total weight (equals `size` without a weigher).
    pub weight: u64,
    /// Configured capacity (entries, or weight with a weigher).
    pub capacity: u64,
    /// Calls of the eviction listener that panicked (each caught; the other events of its
    /// batch were still delivered).
    pub listener_panics: u64,
}

impl Stats {
    pub(crate) fn add_shard(&mut self, c: &ShardCounters) {
        self.rejections += c.rejections.get();
    }

    pub(crate) fn add_tally(&mut self, t: &Tally) {
        self.hits += t.get(Event::Fresh);
        self.stale_hits += t.get(Event::Stale);
        self.misses += t.get(Event::Miss);
        self.inserts += t.get(Event::Insert);
        self.evictions += t.get(Event::Eviction);
        self.expirations += t.get(Event::Expiration);
        self.negative_hits += t.get(Event::NegativeHit);
        self.fills += t.get(Event::Fill);
        self.waits += t.get(Event::Wait);
    }

    pub(crate) fn add_fills(&mut self, c: &FillCounters) {
        self.fill_errors += c.fill_errors.get();
        self.fill_timeouts += c.fill_timeouts.get();
        self.wait_timeouts += c.wait_timeouts.get();
        self.refreshes += c.refreshes.get();
        self.fenced += c.fenced.get();
    }

    /// Fraction of lookups that were hits (fresh or stale), or 0 with no lookups.
    pub fn hit_ratio(&self) -> f64 {
        if self.lookups == 0 {
            0.0
        } else {
            (self.hits + self.stale_hits) as f64 / self.lookups as f64
        }
    }
}
