//! Metrics through the `metrics` facade (feature `metrics`), named and labelled as `coalesce`'s
//! are: a counter for every [`Stats`] counter and a histogram of fill duration, for whatever
//! exporter the application installs. [`Cache::stats`] snapshots stay as they are.
//!
//! | metric | kind | what |
//! |---|---|---|
//! | `ttl_lru_<field>_total` | counter | each counter of [`Stats`] (`hits`, `misses`, `stale_hits`, `negative_hits`, `inserts`, `evictions`, `expirations`, `rejections`, `fills`, `fill_errors`, `fill_timeouts`, `waits`, `wait_timeouts`, `refreshes`, `fenced`, `listener_panics`) |
//! | `ttl_lru_entries`, `ttl_lru_weight`, `ttl_lru_capacity` | gauge | [`Stats::size`], [`Stats::weight`], [`Stats::capacity`] |
//! | `ttl_lru_fill_duration_seconds` | histogram, label `outcome` = `stored` / `not_stored` / `failed` | from taking a fill's lead to publishing it |
//!
//! Each carries the label `cache` when the cache has a [name](crate::CacheBuilder::name).
//!
//! The counters are not bumped on the hit path (which stays as it is: one count in the thread's
//! own stripe): [`Cache::record_metrics`] copies a [`Stats`] snapshot into them (`absolute`);
//! call it before each scrape (or from a periodic task). The fill
//! histogram is recorded as each fill ends (two clock reads per fill with the feature on). The
//! handles are registered when the cache is built, with the recorder installed then.
//!
//! [`Stats`]: crate::Stats
//! [`Stats::size`]: crate::Stats::size
//! [`Stats::weight`]: crate::Stats::weight
//! [`Stats::capacity`]: crate::Stats::capacity
//! [`Cache::stats`]: crate::Cache::stats
//! [`Cache::record_metrics`]: crate::Cache::record_metrics

use std::hash::Hash;

use metrics::{Counter, Gauge, Histogram, Label, counter, gauge, histogram};

use crate::cache::Cache;
use crate::observe::Started;
use crate::stats::Stats;

/// Reads one counter of a [`Stats`] snapshot.
type Field = fn(&Stats) -> u64;

/// The handles one cache records into.
pub(crate) struct Metrics {
    counters: Vec<(Field, Counter)>,
    entries: Gauge,
    weight: Gauge,
    capacity: Gauge,
    fill_stored: Histogram,
    fill_not_stored: Histogram,
    fill_failed: Histogram,
}

/// Each `Stats` counter and its metric name.
const COUNTERS: [(&str, Field); 16] = [
    ("ttl_lru_hits_total", |s| s.hits),
    ("ttl_lru_misses_total", |s| s.misses),
    ("ttl_lru_stale_hits_total", |s| s.stale_hits),
    ("ttl_lru_negative_hits_total", |s| s.negative_hits),
    ("ttl_lru_inserts_total", |s| s.inserts),
    ("ttl_lru_evictions_total", |s| s.evictions),
    ("ttl_lru_expirations_total", |s| s.expirations),
    ("ttl_lru_rejections_total", |s| s.rejections),
    ("ttl_lru_fills_total", |s| s.fills),
    ("ttl_lru_fill_errors_total", |s| s.fill_errors),
    ("ttl_lru_fill_timeouts_total", |s| s.fill_timeouts),
    ("ttl_lru_waits_total", |s| s.waits),
    ("ttl_lru_wait_timeouts_total", |s| s.wait_timeouts),
    ("ttl_lru_refreshes_total", |s| s.refreshes),
    ("ttl_lru_fenced_total", |s| s.fenced),
    ("ttl_lru_listener_panics_total", |s| s.listener_panics),
];

impl Metrics {
    /// Registers the cache's handles with the recorder installed now.
    pub(crate) fn register(name: Option<&str>) -> Self {
        let labels: Vec<Label> = name
            .map(|name| Label::new("cache", name.to_owned()))
            .into_iter()
            .collect();
        let fill = |outcome: &'static str| {
            let mut all = labels.clone();
            all.push(Label::new("outcome", outcome));
            histogram!("ttl_lru_fill_duration_seconds", all)
        };
        Self {
            counters: COUNTERS
                .iter()
                .map(|&(metric, field)| (field, counter!(metric, labels.clone())))
                .collect(),
            entries: gauge!("ttl_lru_entries", labels.clone()),
            weight: gauge!("ttl_lru_weight", labels.clone()),
            capacity: gauge!("ttl_lru_capacity", labels.clone()),
            fill_stored: fill("stored"),
            fill_not_stored: fill("not_stored"),
            fill_failed: fill("failed"),
        }
    }

    /// A fill ended with `outcome` (see the module table).
    pub(crate) fn record_fill(&self, started: &Started, outcome: &str) {
        let Some(at) = started.at else { return };
        let seconds = at.elapsed().as_secs_f64();
        match outcome {
            "stored" => self.fill_stored.record(seconds),
            "failed" => self.fill_failed.record(seconds),
            _ => self.fill_not_stored.record(seconds),
        }
    }

    fn record_stats(&self, s: &Stats) {
        for (field, c) in &self.counters {
            c.absolute(field(s));
        }
        self.entries.set(s.size as f64);
        self.weight.set(s.weight as f64);
        self.capacity.set(s.capacity as f64);
    }
}

impl<K, V> Cache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Copies a [`stats`](Self::stats) snapshot into the cache's `metrics` counters and gauges
    /// (feature `metrics`; see the table in the crate's `metrics` module docs). Walks the shards
    /// and the per-thread counters like `stats`: call it per scrape or per maintenance tick, not
    /// per request.
    pub fn record_metrics(&self) {
        self.inner.metrics.record_stats(&self.stats());
    }
}
