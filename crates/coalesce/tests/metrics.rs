//! The `metrics` feature: every `Stats` counter is mirrored by a `metrics` counter, and fills
//! and follower waits land in their histograms. A small in-test recorder stands in for an
//! exporter (the crate depends on the `metrics` facade only).
#![cfg(feature = "metrics")]

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coalesce::{ErrorPolicy, FlightError, Group, Joined, Stats};
use futures::FutureExt;
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// Counters and histograms by `name{label=value,...}`.
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
    fn stats(&self, group: &str) -> Stats {
        let c = |n: &str| self.counter(&format!("coalesce_{n}_total{{group={group}}}"));
        let mut stats = Stats::default();
        stats.led = c("led");
        stats.joined = c("joined");
        stats.handed_off = c("handed_off");
        stats.taken_over = c("taken_over");
        stats.abandoned = c("abandoned");
        stats.wait_timeouts = c("wait_timeouts");
        stats.failed = c("failed");
        stats
    }
}

type G = Group<u32, u32, &'static str>;

fn leads<'g>(
    joined: Option<Joined<'g, u32, u32, &'static str>>,
) -> coalesce::Leader<'g, u32, u32, &'static str> {
    match joined {
        Some(Joined::Leader(leader)) => leader,
        _ => panic!("expected to lead"),
    }
}

#[tokio::test(start_paused = true)]
async fn every_stat_is_a_counter_and_fills_and_waits_are_timed() {
    let rec = Rec::default();
    let group: G = metrics::with_local_recorder(&rec, || {
        Group::builder()
            .metrics_name("users")
            .wait_timeout(Duration::from_secs(1))
            .takeover_after(Duration::from_secs(10))
            .on_error(ErrorPolicy::HandOff)
            .build()
    });

    // Led, joined, abandoned, handed off (shared flight), then finished.
    let first = leads(group.join(1).now_or_never());
    let mut follower = pin!(group.join(1));
    assert!(follower.as_mut().now_or_never().is_none());
    drop(first);
    let promoted = leads(follower.as_mut().now_or_never());
    assert_eq!(promoted.finish(Ok(1)), Ok(1));
    // A failure with a follower (handed off under HandOff), which then succeeds.
    let failing = leads(group.join(2).now_or_never());
    let mut retry = pin!(group.join(2));
    assert!(retry.as_mut().now_or_never().is_none());
    assert!(matches!(
        failing.finish(Err("down")),
        Err(FlightError::Failed(_))
    ));
    let retrying = leads(retry.as_mut().now_or_never());
    assert_eq!(retrying.finish(Ok(2)), Ok(2));
    // A wait timeout, then a takeover of the leader that outlived it.
    let stuck = leads(group.join(3).now_or_never());
    assert_eq!(
        group.run(3, || async { Ok(0) }).await,
        Err(FlightError::WaitTimedOut)
    );
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(group.run(3, || async { Ok(3) }).await, Ok(3));
    assert_eq!(
        stuck.finish(Ok(9)),
        Ok(9),
        "a stale leader keeps its own result"
    );
    // A lone failure (nobody waiting).
    let lone = leads(group.join(4).now_or_never());
    assert!(lone.finish(Err("down")).is_err());

    let stats = group.stats();
    assert_eq!(rec.stats("users"), stats);
    assert_eq!(
        (stats.led, stats.joined, stats.handed_off, stats.taken_over),
        (4, 3, 2, 1)
    );
    assert_eq!(
        (stats.abandoned, stats.wait_timeouts, stats.failed),
        (1, 1, 2)
    );
    // Finished leads: 1 and 2 (ok), 2's failure, 3's takeover and its stale leader, 4.
    let ok = rec.samples("coalesce_fill_duration_seconds{group=users,outcome=ok}");
    let failed = rec.samples("coalesce_fill_duration_seconds{group=users,outcome=failed}");
    assert_eq!((ok, failed), (4, 2));
    // Follower waits: on 1 and 2 (handed the lead), and the one that timed out.
    assert_eq!(
        rec.samples("coalesce_follower_wait_seconds{group=users}"),
        3
    );
}

#[test]
fn a_group_built_before_the_recorder_records_nothing() {
    let group: G = Group::new();
    let rec = Rec::default();
    metrics::with_local_recorder(&rec, || {
        let leader = leads(group.join(1).now_or_never());
        assert_eq!(leader.finish(Ok(1)), Ok(1));
    });
    assert_eq!(group.stats().led, 1);
    assert!(rec.0.counters.lock().unwrap().is_empty());
}

#[test]
fn a_lone_failure_is_counted_once_its_lock_is_released() {
    let rec = Rec::default();
    let group: G =
        metrics::with_local_recorder(&rec, || Group::builder().metrics_name("lone").build());
    // Nobody waits: the entry stays lone, finished under one shard lock.
    let leader = leads(group.join(1).now_or_never());
    assert!(leader.finish(Err("down")).is_err());
    assert_eq!(rec.stats("lone"), group.stats());
    assert_eq!((group.stats().led, group.stats().failed), (1, 1));
    let failed = rec.samples("coalesce_fill_duration_seconds{group=lone,outcome=failed}");
    assert_eq!(failed, 1);
}
