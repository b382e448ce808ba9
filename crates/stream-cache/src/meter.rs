//! Metrics through the `metrics` facade (feature `metrics`): every [`StreamCacheStats`] counter,
//! the in-flight fills and the backend's bytes, plus a histogram of fill duration, for whatever
//! exporter the application installs. [`StreamCache::stats`] snapshots stay as they are.
//!
//! | metric | kind | what |
//! |---|---|---|
//! | `stream_cache_hits_total` | counter | [`StreamCacheStats::hits`] |
//! | `stream_cache_partial_hits_total` | counter | [`StreamCacheStats::partial_hits`] |
//! | `stream_cache_misses_total` | counter | [`StreamCacheStats::misses`] |
//! | `stream_cache_fills_started_total` | counter | [`StreamCacheStats::fills_started`] |
//! | `stream_cache_fills_completed_total` | counter | [`StreamCacheStats::fills_completed`] |
//! | `stream_cache_fills_failed_total` | counter | [`StreamCacheStats::fills_failed`] |
//! | `stream_cache_fill_aborts_total` | counter, label `cause` | [`StreamCacheStats::aborts`], one series per [`AbortKind`] |
//! | `stream_cache_bytes_served_total` | counter | [`StreamCacheStats::bytes_served`] |
//! | `stream_cache_purges_total` | counter | [`StreamCacheStats::purges`] |
//! | `stream_cache_fills_in_flight` | gauge | [`StreamCacheStats::fills_in_flight`] |
//! | `stream_cache_storage_used_bytes`, `stream_cache_storage_capacity_bytes` | gauge | [`StreamCacheStats::storage`], when the backend reports it |
//! | `stream_cache_fill_duration_seconds` | histogram, label `outcome` = `completed` / `aborted` / `failed` / `cancelled` | from `fill()` being called to the fill's end |
//!
//! Each carries the label `cache` when the cache was named with
//! [`StreamCacheBuilder::metrics_name`](crate::StreamCacheBuilder::metrics_name).
//!
//! Why the counters are published, not incremented per event: hits and bytes served are counted
//! on the hit path in per-thread stripes precisely so a hit writes no shared cache line; calling
//! a recorder per hit would undo that (an exporter's counter is one shared atomic). So
//! [`StreamCache::publish_metrics`] sums the stripes (as `stats()` does) and sets each counter
//! with `absolute`; call it from the scrape handler or a timer. The fill-duration histogram is
//! recorded as each fill ends (a fill is not the hit path). With the feature on and no recorder
//! installed the handles are no-ops, and the hit path is the same code either way.
//!
//! [`StreamCacheStats`]: crate::StreamCacheStats
//! [`StreamCacheStats::hits`]: crate::StreamCacheStats::hits
//! [`StreamCacheStats::partial_hits`]: crate::StreamCacheStats::partial_hits
//! [`StreamCacheStats::misses`]: crate::StreamCacheStats::misses
//! [`StreamCacheStats::fills_started`]: crate::StreamCacheStats::fills_started
//! [`StreamCacheStats::fills_completed`]: crate::StreamCacheStats::fills_completed
//! [`StreamCacheStats::fills_failed`]: crate::StreamCacheStats::fills_failed
//! [`StreamCacheStats::aborts`]: crate::StreamCacheStats::aborts
//! [`StreamCacheStats::bytes_served`]: crate::StreamCacheStats::bytes_served
//! [`StreamCacheStats::purges`]: crate::StreamCacheStats::purges
//! [`StreamCacheStats::fills_in_flight`]: crate::StreamCacheStats::fills_in_flight
//! [`StreamCacheStats::storage`]: crate::StreamCacheStats::storage
//! [`StreamCache::stats`]: crate::StreamCache::stats
//! [`StreamCache::publish_metrics`]: crate::StreamCache::publish_metrics
//! [`AbortKind`]: crate::AbortKind

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label, counter, gauge, histogram};

use crate::observe::FillOutcome;
use crate::state::AbortKind;
use crate::stats::{KINDS, StreamCacheStats};

/// The handles one cache records into.
pub(crate) struct Metrics {
    hits: Counter,
    partial_hits: Counter,
    misses: Counter,
    fills_started: Counter,
    fills_completed: Counter,
    fills_failed: Counter,
    aborts: [Counter; KINDS.len()],
    bytes_served: Counter,
    purges: Counter,
    in_flight: Gauge,
    used: Gauge,
    capacity: Gauge,
    /// By outcome: completed, aborted, failed, cancelled.
    fill_duration: [Histogram; 4],
}

/// `WriterDropped` -> `writer_dropped`.
fn cause_label(kind: AbortKind) -> String {
    let name = format!("{kind:?}");
    let mut label = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            label.push('_');
        }
        label.push(c.to_ascii_lowercase());
    }
    label
}

impl Metrics {
    /// Registers the cache's handles with the recorder installed now.
    pub(crate) fn register(name: Option<&str>) -> Self {
        let labels: Vec<Label> = name
            .map(|name| Label::new("cache", name.to_owned()))
            .into_iter()
            .collect();
        let with = |extra: Option<(&'static str, String)>| {
            let mut all = labels.clone();
            all.extend(extra.map(|(k, v)| Label::new(k, v)));
            all
        };
        let outcome = |o: &'static str| with(Some(("outcome", o.to_owned())));
        Metrics {
            hits: counter!("stream_cache_hits_total", with(None)),
            partial_hits: counter!("stream_cache_partial_hits_total", with(None)),
            misses: counter!("stream_cache_misses_total", with(None)),
            fills_started: counter!("stream_cache_fills_started_total", with(None)),
            fills_completed: counter!("stream_cache_fills_completed_total", with(None)),
            fills_failed: counter!("stream_cache_fills_failed_total", with(None)),
            aborts: KINDS.map(|kind| {
                counter!(
                    "stream_cache_fill_aborts_total",
                    with(Some(("cause", cause_label(kind))))
                )
            }),
            bytes_served: counter!("stream_cache_bytes_served_total", with(None)),
            purges: counter!("stream_cache_purges_total", with(None)),
            in_flight: gauge!("stream_cache_fills_in_flight", with(None)),
            used: gauge!("stream_cache_storage_used_bytes", with(None)),
            capacity: gauge!("stream_cache_storage_capacity_bytes", with(None)),
            fill_duration: ["completed", "aborted", "failed", "cancelled"]
                .map(|o| histogram!("stream_cache_fill_duration_seconds", outcome(o))),
        }
    }

    /// Sets every counter and gauge from a snapshot.
    pub(crate) fn publish(&self, stats: &StreamCacheStats) {
        self.hits.absolute(stats.hits);
        self.partial_hits.absolute(stats.partial_hits);
        self.misses.absolute(stats.misses);
        self.fills_started.absolute(stats.fills_started);
        self.fills_completed.absolute(stats.fills_completed);
        self.fills_failed.absolute(stats.fills_failed);
        for (counter, (_, n)) in self.aborts.iter().zip(stats.aborts.iter()) {
            counter.absolute(n);
        }
        self.bytes_served.absolute(stats.bytes_served);
        self.purges.absolute(stats.purges);
        self.in_flight.set(stats.fills_in_flight as f64);
        if let Some(usage) = stats.storage {
            self.used.set(usage.used_bytes as f64);
            if let Some(capacity) = usage.capacity_bytes {
                self.capacity.set(capacity as f64);
            }
        }
    }

    /// A fill ended after `elapsed`.
    pub(crate) fn record_fill(&self, outcome: FillOutcome, elapsed: Duration) {
        let index = match outcome {
            FillOutcome::Completed { .. } => 0,
            FillOutcome::Aborted { .. } => 1,
            FillOutcome::Failed => 2,
            FillOutcome::Cancelled => 3,
        };
        self.fill_duration[index].record(elapsed.as_secs_f64());
    }
}
