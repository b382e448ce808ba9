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
    /// (cancelled or panicked), stood down (a distributed refresh), or failed under
    /// [`ErrorPolicy::HandOff`](crate::ErrorPolicy), or because the follower it had been handed
    /// to left without taking it.
    pub handed_off: u64,
    /// Leaders taken over: replaced by a newer caller because they had held the lead longer
    /// than `takeover_after`.
    pub taken_over: u64,
    /// Leaders dropped before `finish` (cancelled, panicked, or their task was aborted). A
    /// distributed refresh that stands down because another process holds the fill lease is
    /// not one: it is counted in `LeaseStats::stood_down`.
    pub abandoned: u64,
    /// Followers whose wait on another caller's fill ran out (`wait_timeout`): each got
    /// [`FlightError::WaitTimedOut`](crate::FlightError::WaitTimedOut).
    pub wait_timeouts: u64,
    /// Fills that finished with an error.
    pub failed: u64,
}

/// The counters a shard updates under its own lock.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    led: u64,
    joined: u64,
    handed_off: u64,
    taken_over: u64,
    abandoned: u64,
    failed: u64,
}

/// Names one counter kept under the shard lock, so call sites read as what happened.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    Led,
    Joined,
    HandedOff,
    TakenOver,
    Abandoned,
    Failed,
}

#[cfg(feature = "metrics")]
impl Event {
    /// Every event, in declaration order (so `event as usize` indexes this).
    pub(crate) const ALL: [Event; 6] = [
        Event::Led,
        Event::Joined,
        Event::HandedOff,
        Event::TakenOver,
        Event::Abandoned,
        Event::Failed,
    ];
}

impl Counts {
    pub(crate) fn record(&mut self, event: Event) {
        let counter = match event {
            Event::Led => &mut self.led,
            Event::Joined => &mut self.joined,
            Event::HandedOff => &mut self.handed_off,
            Event::TakenOver => &mut self.taken_over,
            Event::Abandoned => &mut self.abandoned,
            Event::Failed => &mut self.failed,
        };
        *counter += 1;
    }

    /// Adds these counts, and the shard's lock-free `timed_out`, to `total`.
    pub(crate) fn add_to(&self, timed_out: &AtomicU64, total: &mut Stats) {
        total.led += self.led;
        total.joined += self.joined;
        total.handed_off += self.handed_off;
        total.taken_over += self.taken_over;
        total.abandoned += self.abandoned;
        total.wait_timeouts += timed_out.load(Relaxed);
        total.failed += self.failed;
    }
}

/// Records a timed-out wait: the only event counted outside the shard lock.
pub(crate) fn record_timeout(timed_out: &AtomicU64) {
    timed_out.fetch_add(1, Relaxed);
}
