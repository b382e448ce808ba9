//! The eviction listener ([`CacheBuilder::eviction_listener`](crate::CacheBuilder::eviction_listener)):
//! user code told about every value that leaves the cache, with its [`RemovalCause`].
//!
//! Delivery: on the thread that removed the entries, after the shard's lock is released (the
//! removing code already collects what it removes under the lock and drops it after unlocking;
//! with a listener it hands each value to the listener there instead), in the order they were
//! removed, before the call that removed them returns. So a listener may call into the cache.
//! A listener that panics does not lose the other events: each call runs under
//! `catch_unwind`, a panic is counted ([`Stats::listener_panics`](crate::Stats::listener_panics))
//! and dropped, and the batch's remaining events are still delivered (with `panic = "abort"`
//! the process aborts, as any panic does). Without a listener the removal paths pay one branch
//! on a `None`; the hit path is unchanged.
//!
//! Only values are reported: cached fill errors (negative caching) leave silently, and so do
//! the entries still stored when the cache's last handle is dropped (as in Caffeine and moka). An entry
//! past its TTL is reported as [`RemovalCause::Expired`] when it is actually removed (taken as
//! an eviction victim, purged, or replaced), not at the moment its TTL ends.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::stats::{CachePadded, Counter};

/// Why a value left the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RemovalCause {
    /// Past its TTL (and stale window): removed by eviction, `purge_expired` or a write.
    Expired,
    /// Evicted to make room (capacity, `set_capacity`, `shrink`, memory pressure).
    Size,
    /// Overwritten by a write of its key (an insert, a fill, a cached error), or removed by a
    /// write of its key that stored nothing (too heavy, born expired).
    Replaced,
    /// Removed by [`Cache::remove`](crate::Cache::remove).
    Removed,
    /// Removed by [`Cache::invalidate`](crate::Cache::invalidate), `retain` or `invalidate_if`.
    Invalidated,
    /// Removed by [`Cache::clear`](crate::Cache::clear) / `invalidate_all`.
    Cleared,
}

/// The listener of a cache, shared by its shards.
pub(crate) struct Listener<K, V> {
    f: Box<dyn Fn(K, V, RemovalCause) + Send + Sync>,
    pub(crate) panics: CachePadded<Counter>,
}

impl<K, V> Listener<K, V> {
    pub(crate) fn new(f: impl Fn(K, V, RemovalCause) + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            f: Box::new(f),
            panics: CachePadded::default(),
        })
    }

    /// Calls the listener once; a panic is caught and counted.
    pub(crate) fn deliver(&self, key: K, value: V, cause: RemovalCause) {
        if catch_unwind(AssertUnwindSafe(|| (self.f)(key, value, cause))).is_err() {
            self.panics.incr();
        }
    }
}
