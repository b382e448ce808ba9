//! The cache's capacity as one budget that every shard draws from, so that a cache of capacity
//! N holds N entries (or N units of weight) however its keys hash over its shards.
//!
//! Until issue 17 each shard had a fixed share (`capacity / shards`): uneven hashing evicted
//! before the cache was full (a 1,000-entry cache of 15 shards held 951 of its first 1,000 keys),
//! `set_capacity` below the shard count left shards with capacity 0 (their keys refused with
//! `TooHeavy`), and a weighed entry could weigh at most one share. Now the budget holds the
//! capacity not in use (`free`); the invariant, outside a write in progress, is
//! `free + sum of shard weights == capacity`.
//!
//! Cost: a write that grows the cache takes its weight from `free` (one compare-and-swap on a
//! line all shards share) and a removal gives it back (one add). A full cache has nothing free:
//! an insert of a new key there reads `free` (a load of a line that only removals write) and
//! evicts in its own shard, its victim's weight paying for the new entry, with no shared write.
//! A shrink (`set_capacity`) puts the budget in debt (`free < 0`) and evicts until it is paid.

use std::sync::Arc;

use crate::stats::CachePadded;
use crate::sync::{AtomicI64, Ordering};

/// Capacities above this are treated as this (far beyond any memory): `free` stays an `i64`.
pub(crate) const MAX_BUDGET: u64 = 1 << 62;

/// A cache's free capacity, shared by its shards (clones share it).
#[derive(Clone)]
pub(crate) struct Budget {
    free: Arc<CachePadded<AtomicI64>>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("free", &self.free())
            .finish()
    }
}

fn clamp(capacity: u64) -> i64 {
    capacity.min(MAX_BUDGET) as i64
}

impl Budget {
    /// An empty cache's budget: all of `capacity` is free.
    pub(crate) fn new(capacity: u64) -> Self {
        Self {
            free: Arc::new(CachePadded(AtomicI64::new(clamp(capacity)))),
        }
    }

    /// Takes up to `want` from the free capacity; returns how much it got (0 when the cache is
    /// full or in debt: then only a load, no write).
    #[inline]
    pub(crate) fn take(&self, want: u64) -> u64 {
        if want == 0 {
            return 0;
        }
        let mut free = self.free.0.load(Ordering::Relaxed);
        loop {
            if free <= 0 {
                return 0;
            }
            let got = (free as u64).min(want);
            match self.free.0.compare_exchange_weak(
                free,
                free - got as i64,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return got,
                Err(now) => free = now,
            }
        }
    }

    /// Gives `n` back (weight removed from a shard, or taken and not used).
    #[inline]
    pub(crate) fn give(&self, n: u64) {
        if n > 0 {
            self.free.0.fetch_add(clamp(n), Ordering::Relaxed);
        }
    }

    /// The capacity not in use; negative while a shrink is evicting down to a new capacity.
    pub(crate) fn free(&self) -> i64 {
        self.free.0.load(Ordering::Relaxed)
    }

    /// Moves the capacity from `old` to `new` (the caller serialises resizes).
    pub(crate) fn resize(&self, old: u64, new: u64) {
        self.free
            .0
            .fetch_add(clamp(new) - clamp(old), Ordering::Relaxed);
    }
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use super::*;

    #[test]
    fn takes_what_is_free_and_never_more() {
        let b = Budget::new(10);
        assert_eq!(b.take(4), 4);
        assert_eq!(b.take(10), 6);
        assert_eq!(b.take(1), 0);
        b.give(3);
        assert_eq!(b.free(), 3);
        b.resize(10, 2);
        assert_eq!(b.free(), -5);
        assert_eq!(b.take(1), 0, "in debt: nothing to take");
        b.give(5);
        assert_eq!(b.free(), 0);
        let huge = Budget::new(u64::MAX);
        assert_eq!(huge.take(u64::MAX), MAX_BUDGET);
    }
}
