//! [`TierStats`]: a count for every decision the second-level tier makes. Written only on L1
//! misses, invalidations and backplane messages, never on an L1 hit.

use crate::sync::Ordering::Relaxed;
use crate::sync::plain::AtomicU64;

use coalesce::LeaseStats;

/// Counts of what a [`TieredCache`](crate::TieredCache) decided, since it was built (each read
/// relaxed; not one atomic cut). L1 hits are in the wrapped cache's own [`Stats`](crate::Stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TierStats {
    /// L1 misses whose leader found the value in L2 (including the lease re-check's finds).
    pub l2_hits: u64,
    /// L2 reads that found a cached fill error (negative entry) of the caller's error type.
    pub l2_negative_hits: u64,
    /// L2 reads that found nothing (or an expired value, or another error type's entry).
    pub l2_misses: u64,
    /// L2 calls that failed (the tier went on without L2: fail open).
    pub l2_errors: u64,
    /// L2 calls that ran past the tier's `l2_timeout` (the tier went on without L2).
    pub l2_timeouts: u64,
    /// L1 misses whose wait for L2's answer ran past the soft timeout: filled without L2.
    pub l2_soft_timeouts: u64,
    /// Values (and negative entries) written to L2 by a fenced write that landed.
    pub l2_writes: u64,
    /// Fenced L2 writes refused because the key was invalidated since the fill began, or (a
    /// cached error) because another process stored a value at the same version; the outcome
    /// then goes to neither L2 nor this process's L1 (its callers still get it).
    pub fenced_writes: u64,
    /// Fills not written to L2 because the key's version could not be read (L2 down) or the
    /// ttl was under L2's 1 ms resolution.
    pub skipped_writes: u64,
    /// Keys or values that failed to encode or decode (a decode failure reads as a miss).
    pub codec_errors: u64,
    /// Origin fills run by this process.
    pub fills: u64,
    /// Values found by the fleet lease's re-check: another process filled while this one waited.
    pub fleet_fills_found: u64,
    /// Stale-while-revalidate refreshes that stood down because another process held the key's
    /// fleet lease (they waited for its value, the stale copy served meanwhile, inside its
    /// window).
    pub stand_downs: u64,
    /// Fill announcements from the backplane that woke a leader of this process waiting for
    /// another process's fill (it re-checked L2 before its next poll).
    pub fill_wakes: u64,
    /// `invalidate` calls.
    pub invalidations: u64,
    /// `invalidate` calls whose L2 part failed or timed out (L1 was invalidated anyway).
    pub invalidation_failures: u64,
    /// Invalidations that reached fewer acknowledgements than backplane receivers.
    pub unacked_invalidations: u64,
    /// Backplane messages that dropped an L1 copy here.
    pub backplane_received: u64,
    /// Whole-L1 invalidations by the backplane (after a (re)subscription, or a key that did
    /// not decode).
    pub backplane_resyncs: u64,
    /// The fleet lease's own counters, when a lease is configured.
    pub lease: Option<LeaseStats>,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) l2_hits: AtomicU64,
    pub(crate) l2_negative_hits: AtomicU64,
    pub(crate) l2_misses: AtomicU64,
    pub(crate) l2_errors: AtomicU64,
    pub(crate) l2_timeouts: AtomicU64,
    pub(crate) l2_soft_timeouts: AtomicU64,
    pub(crate) l2_writes: AtomicU64,
    pub(crate) fenced_writes: AtomicU64,
    pub(crate) skipped_writes: AtomicU64,
    pub(crate) codec_errors: AtomicU64,
    pub(crate) fills: AtomicU64,
    pub(crate) fleet_fills_found: AtomicU64,
    pub(crate) stand_downs: AtomicU64,
    pub(crate) fill_wakes: AtomicU64,
    pub(crate) invalidations: AtomicU64,
    pub(crate) invalidation_failures: AtomicU64,
    pub(crate) unacked_invalidations: AtomicU64,
    pub(crate) backplane_received: AtomicU64,
    pub(crate) backplane_resyncs: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

impl Counters {
    pub(crate) fn snapshot(&self, lease: Option<LeaseStats>) -> TierStats {
        TierStats {
            l2_hits: self.l2_hits.load(Relaxed),
            l2_negative_hits: self.l2_negative_hits.load(Relaxed),
            l2_misses: self.l2_misses.load(Relaxed),
            l2_errors: self.l2_errors.load(Relaxed),
            l2_timeouts: self.l2_timeouts.load(Relaxed),
            l2_soft_timeouts: self.l2_soft_timeouts.load(Relaxed),
            l2_writes: self.l2_writes.load(Relaxed),
            fenced_writes: self.fenced_writes.load(Relaxed),
            skipped_writes: self.skipped_writes.load(Relaxed),
            codec_errors: self.codec_errors.load(Relaxed),
            fills: self.fills.load(Relaxed),
            fleet_fills_found: self.fleet_fills_found.load(Relaxed),
            stand_downs: self.stand_downs.load(Relaxed),
            fill_wakes: self.fill_wakes.load(Relaxed),
            invalidations: self.invalidations.load(Relaxed),
            invalidation_failures: self.invalidation_failures.load(Relaxed),
            unacked_invalidations: self.unacked_invalidations.load(Relaxed),
            backplane_received: self.backplane_received.load(Relaxed),
            backplane_resyncs: self.backplane_resyncs.load(Relaxed),
            lease,
        }
    }
}
