//! Per-call outcome counters.
//!
//! Counters live in their shard. Every event recorded while the shard lock is held anyway
//! (leading, joining, hand-offs, takeovers, abandons, failures) is a plain `u64` inside the
//! locked shard ([`Counts`]), so recording it costs no atomic instruction at all. The one event
//! recorded without that lock, a follower's wait timing out, is a relaxed atomic beside it.
//! They are reports, not synchronisation.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A snapshot of a group's counters, summed over its shards. Each counter only grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Calls that found no flight for their key and became its leader.
    pub led: u64,
    /// Calls that found a flight in progress and waited on it as a follower.
    pub joined: u64,
    /// Hand-offs: a waiting follower was given the lead because the leader was dropped
    /// (cancelled or panicked) or, under [`ErrorPolicy::HandOff`](crate::ErrorPolicy), failed.
    pub took_over: u64,
    /// Leaders replaced because they ran longer than `takeover_after`.
    pub superseded: u64,
    /// Leaders dropped before `finish` (cancelled, panicked, or their task was aborted). A
    /// distributed refresh that stands down because another process holds the fill lease is
    /// not one: it is counted in `LeaseStats::stood_down`.
    pub abandoned: u64,
    /// Followers that gave up after `wait_timeout`.
    pub timed_out: u64,
    /// Fills that finished with an error.
    pub failed: u64,
}

/// The counters a shard updates under its own lock.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    led: u64,
    joined: u64,
    took_over: u64,
    superseded: u64,
    abandoned: u64,
    failed: u64,
}

/// Names one counter kept under the shard lock, so call sites read as what happened.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    Led,
    Joined,
    TookOver,
    Superseded,
    Abandoned,
    Failed,
}

impl Counts {
    pub(crate) fn record(&mut self, event: Event) {
        let counter = match event {
            Event::Led => &mut self.led,
            Event::Joined => &mut self.joined,
            Event::TookOver => &mut self.took_over,
            Event::Superseded => &mut self.superseded,
            Event::Abandoned => &mut self.abandoned,
            Event::Failed => &mut self.failed,
        };
        *counter += 1;
    }

    /// Adds these counts, and the shard's lock-free `timed_out`, to `total`.
    pub(crate) fn add_to(&self, timed_out: &AtomicU64, total: &mut Stats) {
        total.led += self.led;
        total.joined += self.joined;
        total.took_over += self.took_over;
        total.superseded += self.superseded;
        total.abandoned += self.abandoned;
        total.timed_out += timed_out.load(Relaxed);
        total.failed += self.failed;
    }
}

/// Records a timed-out wait: the only event counted outside the shard lock.
pub(crate) fn record_timeout(timed_out: &AtomicU64) {
    timed_out.fetch_add(1, Relaxed);
}
