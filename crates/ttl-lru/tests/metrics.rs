//! The `metrics` feature: every `Stats` counter copied into a `ttl_lru_*_total` counter by
//! `record_metrics`, labelled with the cache's name, and each fill's duration in the
//! `ttl_lru_fill_duration_seconds` histogram by outcome. A small in-test recorder stands in for
//! an exporter (the crate depends on the `metrics` facade only).

// The crate's `clippy.toml` keeps std's atomics out of the crate's own modules (its hit-path
// tests log writes through its wrappers); this test's counters are not one of them.
#![allow(clippy::disallowed_types)]
#![cfg(feature = "metrics")]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use ttl_lru::{Cache, ManualClock};

#[derive(Default)]
struct Captured {
    counters: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<BTreeMap<String, Arc<Samples>>>,
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

fn name(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

#[derive(Clone, Default)]
struct Rec(Arc<Captured>);

impl Recorder for Rec {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.0.counters.lock().unwrap();
        Counter::from_arc(Arc::clone(counters.entry(name(key)).or_default()))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.0.histograms.lock().unwrap();
        Histogram::from_arc(Arc::clone(histograms.entry(name(key)).or_default()))
    }
}

impl Rec {
    fn counter(&self, name: &str) -> u64 {
        let counters = self.0.counters.lock().unwrap();
        counters.get(name).map_or(0, |c| c.load(Ordering::Relaxed))
    }
    fn samples(&self, name: &str) -> usize {
        let histograms = self.0.histograms.lock().unwrap();
        histograms
            .get(name)
            .map_or(0, |h| h.0.lock().unwrap().len())
    }
}

#[tokio::test]
async fn stats_become_counters_and_fills_are_timed() {
    let rec = Rec::default();
    let c: Cache<u32, u32> = metrics::with_local_recorder(&rec, || {
        Cache::builder(10)
            .name("metered")
            .clock(ManualClock::new())
            .build()
    });
    let ttl = |_: &u32| Duration::MAX;
    c.get_or_try_insert(1, ttl, || async { Ok::<u32, ()>(1) })
        .await
        .unwrap();
    c.get_or_try_insert(2, ttl, || async { Err::<u32, ()>(()) })
        .await
        .unwrap_err();
    assert_eq!(c.get(&1), Some(1));
    assert_eq!(c.get(&3), None);
    assert_eq!(
        rec.counter("ttl_lru_hits_total{cache=metered}"),
        0,
        "not yet copied"
    );
    c.record_metrics();
    let stats = c.stats();
    let counter = |n: &str| rec.counter(&format!("ttl_lru_{n}_total{{cache=metered}}"));
    assert_eq!(counter("hits"), stats.hits);
    assert_eq!(counter("hits"), 1);
    assert_eq!(counter("misses"), stats.misses);
    assert_eq!(counter("fills"), 2);
    assert_eq!(counter("fill_errors"), 1);
    assert_eq!(counter("inserts"), stats.inserts);
    let fill = |o: &str| {
        rec.samples(&format!(
            "ttl_lru_fill_duration_seconds{{cache=metered,outcome={o}}}"
        ))
    };
    assert_eq!(
        (fill("stored"), fill("failed"), fill("not_stored")),
        (1, 1, 0)
    );
}
