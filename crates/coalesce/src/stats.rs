//! Per-call outcome counters.
//!
//! Counters live per shard (each on its own cache line) and are only written on the miss path
//! (leading, joining, hand-offs), so two keys in different shards never write the same line.
//! They are plain std atomics even under loom: they are reports, not synchronisation.

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
    /// Leaders dropped before `finish` (cancelled, panicked, or their task was aborted).
    pub abandoned: u64,
    /// Followers that gave up after `wait_timeout`.
    pub timed_out: u64,
    /// Fills that finished with an error.
    pub failed: u64,
}

#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct ShardStats {
    led: AtomicU64,
    joined: AtomicU64,
    took_over: AtomicU64,
    superseded: AtomicU64,
    abandoned: AtomicU64,
    timed_out: AtomicU64,
    failed: AtomicU64,
}

/// Names one counter, so call sites read as what happened.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    Led,
    Joined,
    TookOver,
    Superseded,
    Abandoned,
    TimedOut,
    Failed,
}

impl ShardStats {
    pub(crate) fn record(&self, event: Event) {
        let counter = match event {
            Event::Led => &self.led,
            Event::Joined => &self.joined,
            Event::TookOver => &self.took_over,
            Event::Superseded => &self.superseded,
            Event::Abandoned => &self.abandoned,
            Event::TimedOut => &self.timed_out,
            Event::Failed => &self.failed,
        };
        counter.fetch_add(1, Relaxed);
    }

    pub(crate) fn add_to(&self, total: &mut Stats) {
        total.led += self.led.load(Relaxed);
        total.joined += self.joined.load(Relaxed);
        total.took_over += self.took_over.load(Relaxed);
        total.superseded += self.superseded.load(Relaxed);
        total.abandoned += self.abandoned.load(Relaxed);
        total.timed_out += self.timed_out.load(Relaxed);
        total.failed += self.failed.load(Relaxed);
    }
}
