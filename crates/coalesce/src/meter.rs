//! Metrics through the `metrics` facade (feature `metrics`): a counter for every [`Stats`]
//! field and histograms of fill duration and follower wait, for whatever exporter the
//! application installs (Prometheus, StatsD, ...). [`Group::stats`] snapshots stay as they are.
//!
//! | metric | kind | what |
//! |---|---|---|
//! | `coalesce_led_total` | counter | [`Stats::led`] |
//! | `coalesce_joined_total` | counter | [`Stats::joined`] |
//! | `coalesce_handed_off_total` | counter | [`Stats::handed_off`] |
//! | `coalesce_taken_over_total` | counter | [`Stats::taken_over`] |
//! | `coalesce_abandoned_total` | counter | [`Stats::abandoned`] |
//! | `coalesce_wait_timeouts_total` | counter | [`Stats::wait_timeouts`] |
//! | `coalesce_failed_total` | counter | [`Stats::failed`] |
//! | `coalesce_fill_duration_seconds` | histogram, label `outcome` = `ok` / `failed` | from taking the lead to finishing it |
//! | `coalesce_follower_wait_seconds` | histogram | a follower's wait, until it got a result, was handed the lead, gave up or was dropped |
//!
//! Each carries the label `group` when the group was named with
//! [`GroupBuilder::metrics_name`](crate::GroupBuilder::metrics_name).
//!
//! The handles are registered when the group is built, with the recorder installed then:
//! install the recorder first (a group built before records into the no-op recorder, as
//! `metrics` handles do). A recorder is user code, so nothing is recorded under a group lock:
//! events counted under a shard lock are carried out of the critical section and recorded
//! after it, and the counters then agree with [`Group::stats`].
//!
//! Cost with the feature on: each lead and each follower's wait reads the clock twice, and each
//! event is a call into the recorder (an atomic add in the Prometheus exporter's counters).
//! Without the feature none of this is compiled.
//!
//! [`Stats`]: crate::Stats
//! [`Stats::led`]: crate::Stats::led
//! [`Stats::joined`]: crate::Stats::joined
//! [`Stats::handed_off`]: crate::Stats::handed_off
//! [`Stats::taken_over`]: crate::Stats::taken_over
//! [`Stats::abandoned`]: crate::Stats::abandoned
//! [`Stats::wait_timeouts`]: crate::Stats::wait_timeouts
//! [`Stats::failed`]: crate::Stats::failed
//! [`Group::stats`]: crate::Group::stats

use std::time::Instant;

use metrics::{Counter, Histogram, Label, counter, histogram};

use crate::stats::Event;

/// The handles one group records into.
pub(crate) struct Metrics {
    led: Counter,
    joined: Counter,
    handed_off: Counter,
    taken_over: Counter,
    abandoned: Counter,
    timed_out: Counter,
    failed: Counter,
    fill_ok: Histogram,
    fill_failed: Histogram,
    wait: Histogram,
}

impl Metrics {
    /// Registers the group's handles with the recorder installed now.
    pub(crate) fn register(name: Option<&str>) -> Self {
        let labels: Vec<Label> = name
            .map(|name| Label::new("group", name.to_owned()))
            .into_iter()
            .collect();
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut all = labels.clone();
            all.extend(extra.iter().map(|&(k, v)| Label::new(k, v)));
            all
        };
        Self {
            led: counter!("coalesce_led_total", with(&[])),
            joined: counter!("coalesce_joined_total", with(&[])),
            handed_off: counter!("coalesce_handed_off_total", with(&[])),
            taken_over: counter!("coalesce_taken_over_total", with(&[])),
            abandoned: counter!("coalesce_abandoned_total", with(&[])),
            timed_out: counter!("coalesce_wait_timeouts_total", with(&[])),
            failed: counter!("coalesce_failed_total", with(&[])),
            fill_ok: histogram!("coalesce_fill_duration_seconds", with(&[("outcome", "ok")])),
            fill_failed: histogram!(
                "coalesce_fill_duration_seconds",
                with(&[("outcome", "failed")])
            ),
            wait: histogram!("coalesce_follower_wait_seconds", with(&[])),
        }
    }

    pub(crate) fn record(&self, event: Event) {
        self.counter(event).increment(1);
    }

    /// Records what a critical section counted, now that its locks are released.
    pub(crate) fn record_pending(&self, pending: &Pending) {
        for (event, &n) in Event::ALL.iter().zip(&pending.0) {
            if n > 0 {
                self.counter(*event).increment(u64::from(n));
            }
        }
    }

    pub(crate) fn record_timeout(&self) {
        self.timed_out.increment(1);
    }

    /// A lead taken at `started` was finished, successfully or not.
    pub(crate) fn record_fill(&self, started: Instant, ok: bool) {
        let seconds = started.elapsed().as_secs_f64();
        match ok {
            true => self.fill_ok.record(seconds),
            false => self.fill_failed.record(seconds),
        }
    }

    /// A follower that started waiting at `started` stopped waiting.
    pub(crate) fn record_wait(&self, started: Instant) {
        self.wait.record(started.elapsed().as_secs_f64());
    }

    fn counter(&self, event: Event) -> &Counter {
        match event {
            Event::Led => &self.led,
            Event::Joined => &self.joined,
            Event::HandedOff => &self.handed_off,
            Event::TakenOver => &self.taken_over,
            Event::Abandoned => &self.abandoned,
            Event::Failed => &self.failed,
        }
    }
}

/// Events counted inside a critical section, to record after it (at most a handful each).
#[derive(Debug, Default)]
pub(crate) struct Pending([u8; Event::ALL.len()]);

impl Pending {
    pub(crate) fn add(&mut self, event: Event) {
        let slot = &mut self.0[event as usize];
        *slot = slot.saturating_add(1);
    }
}

/// Records a `Failed` event when dropped, if armed: declared before a lock guard, it runs
/// after the guard is released.
pub(crate) struct FailedOnDrop<'a>(pub(crate) Option<&'a Metrics>);

impl Drop for FailedOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(metrics) = self.0 {
            metrics.record(Event::Failed);
        }
    }
}
