//! The `metrics` feature: `publish_metrics` mirrors every `stats()` counter (aborts by cause,
//! in-flight fills) with the `cache` label, and fills land in the duration histogram. A small
//! in-test recorder stands in for an exporter.
#![cfg(feature = "metrics")]

mod common;

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::drain;
use futures::StreamExt;
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use stream_cache::{MemStorage, ObjectMeta, StreamCacheBuilder, Upstream};

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

#[derive(Clone, Default)]
struct Rec {
    counters: Arc<Mutex<BTreeMap<String, Arc<AtomicU64>>>>,
    histograms: Arc<Mutex<BTreeMap<String, Arc<Samples>>>>,
}

fn name(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Recorder for Rec {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap();
        Counter::from_arc(Arc::clone(counters.entry(name(key)).or_default()))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.histograms.lock().unwrap();
        Histogram::from_arc(Arc::clone(histograms.entry(name(key)).or_default()))
    }
}

impl Rec {
    fn counter(&self, name: &str) -> u64 {
        self.counters.lock().unwrap()[name].load(Ordering::Relaxed)
    }
    fn samples(&self, name: &str) -> usize {
        self.histograms.lock().unwrap()[name]
            .0
            .lock()
            .unwrap()
            .len()
    }
}

#[tokio::test]
async fn publish_mirrors_stats_with_the_cache_label() {
    let rec = Rec::default();
    let cache = metrics::with_local_recorder(&rec, || {
        StreamCacheBuilder::new()
            .metrics_name("edge")
            .build(MemStorage::new(1 << 20))
    });
    let ok = || async {
        Ok::<_, io::Error>(Upstream::new(
            ObjectMeta::new("m"),
            futures::stream::iter([Ok(Bytes::from_static(b"hello"))]).boxed(),
        ))
    };
    let mut first = cache.get_or_fill("a", ok).await.unwrap();
    assert_eq!(drain(&mut *first.body).await.0, b"hello");
    let mut second = cache.get_or_fill("a", ok).await.unwrap();
    assert_eq!(drain(&mut *second.body).await.0, b"hello");
    let dies = || async {
        Ok::<_, io::Error>(Upstream::new(
            ObjectMeta::new("m"),
            futures::stream::iter([Ok(Bytes::from_static(b"x")), Err(io::Error::other("reset"))])
                .boxed(),
        ))
    };
    let mut third = cache.get_or_fill("b", dies).await.unwrap();
    assert!(drain(&mut *third.body).await.1.is_err());
    drop((first, second, third));

    // Nothing is pushed per hit: counters move only when published.
    assert_eq!(rec.counter("stream_cache_hits_total{cache=edge}"), 0);
    cache.publish_metrics();
    let stats = cache.stats();
    assert_eq!(
        rec.counter("stream_cache_hits_total{cache=edge}"),
        stats.hits
    );
    assert_eq!(rec.counter("stream_cache_hits_total{cache=edge}"), 1);
    assert_eq!(rec.counter("stream_cache_misses_total{cache=edge}"), 2);
    assert_eq!(
        rec.counter("stream_cache_fills_completed_total{cache=edge}"),
        1
    );
    assert_eq!(
        rec.counter("stream_cache_fill_aborts_total{cache=edge,cause=upstream}"),
        1
    );
    assert_eq!(
        rec.counter("stream_cache_bytes_served_total{cache=edge}"),
        stats.bytes_served
    );
    assert_eq!(
        rec.samples("stream_cache_fill_duration_seconds{cache=edge,outcome=completed}"),
        1
    );
    assert_eq!(
        rec.samples("stream_cache_fill_duration_seconds{cache=edge,outcome=aborted}"),
        1
    );
}
