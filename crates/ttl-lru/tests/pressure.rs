//! The memory-pressure watcher against a fake probe: registered caches shrink together above the
//! high watermark, hold between the watermarks (hysteresis), grow back below the low one to
//! exactly their nominal capacity, never go below the minimum scale, and a cache resized by hand
//! while scaled keeps the new size as its nominal one. Runs in its own test binary because the
//! registry is process-wide.

// The crate's `clippy.toml` keeps std's atomics out of the crate's own modules (its hit-path
// tests log writes through its wrappers); this test's counters are not one of them.
#![allow(clippy::disallowed_types)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use ttl_lru::Cache;
use ttl_lru::pressure::{
    MemorySample, PressureAction, PressureConfig, PressureWatcher, spawn_pressure_watcher,
};

/// A probe whose use the test sets; the limit is 1000 bytes.
#[derive(Clone, Default)]
struct FakeProbe(Arc<AtomicU64>);

impl FakeProbe {
    fn set(&self, used: u64) {
        self.0.store(used, SeqCst);
    }
    fn probe(&self) -> impl Fn() -> Option<MemorySample> + Send + Sync + 'static {
        let used = self.0.clone();
        move || {
            Some(MemorySample {
                used: used.load(SeqCst),
                limit: 1000,
            })
        }
    }
}

/// The registry is process-wide and a watcher scales every cache in it: the tests that run one
/// take turns.
static ONE_WATCHER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn filled(name: &str, capacity: u64) -> Cache<u64, u64> {
    let cache = Cache::builder(capacity).name(name).shards(1).build();
    for k in 0..capacity {
        cache.insert(k, k, Duration::from_secs(3600)).unwrap();
    }
    assert_eq!(cache.len() as u64, capacity);
    cache
}

#[test]
fn caches_shrink_together_hold_between_watermarks_and_grow_back() {
    let _turn = ONE_WATCHER_AT_A_TIME.blocking_lock();
    let fake = FakeProbe::default();
    let a = filled("pressure-a", 1000);
    let b = filled("pressure-b", 200);
    let unnamed = Cache::<u64, u64>::new(100); // not registered: never touched
    let config = PressureConfig::default(); // high 0.90, low 0.75, -10 % / +5 %, min 0.10
    let mut watcher = PressureWatcher::new(fake.probe(), config).unwrap();

    fake.set(800); // 0.80: between the watermarks
    assert_eq!(watcher.check(), PressureAction::Held { scale: 1.0 });
    assert_eq!((a.capacity(), b.capacity()), (1000, 200));

    fake.set(950); // above the high watermark: both shrink by the same fraction
    let action = watcher.check();
    let PressureAction::Shrunk { scale, evicted } = action else {
        panic!("{action:?}")
    };
    assert!((scale - 0.9).abs() < 1e-9);
    assert_eq!((a.capacity(), b.capacity()), (900, 180));
    assert_eq!(evicted, 100 + 20);
    assert_eq!((a.len(), b.len()), (900, 180));
    watcher.check();
    assert_eq!((a.capacity(), b.capacity()), (810, 162));

    fake.set(850); // back between the watermarks: no oscillation, the scale holds
    assert!(matches!(watcher.check(), PressureAction::Held { .. }));
    assert_eq!((a.capacity(), b.capacity()), (810, 162));

    // Sustained pressure never takes a cache below the minimum scale.
    fake.set(999);
    for _ in 0..100 {
        watcher.check();
    }
    assert!((watcher.scale() - 0.10).abs() < 1e-9, "{}", watcher.scale());
    assert_eq!((a.capacity(), b.capacity()), (100, 20));
    assert!(a.len() <= 100 && b.len() <= 20);

    // A cache resized by hand while scaled: that is its new nominal capacity.
    b.set_capacity(50);

    fake.set(100); // plenty of room: grow back step by step to exactly nominal
    let mut grew = 0;
    while watcher.scale() < 1.0 {
        assert!(matches!(watcher.check(), PressureAction::Grew { .. }));
        grew += 1;
    }
    assert_eq!(grew, 18, "0.10 -> 1.0 in steps of 0.05");
    assert_eq!((a.capacity(), b.capacity()), (1000, 50));
    assert_eq!(watcher.check(), PressureAction::Held { scale: 1.0 });
    assert_eq!(
        unnamed.capacity(),
        100,
        "unregistered caches are not managed"
    );
    drop((a, b));
}

#[tokio::test(start_paused = true)]
async fn the_spawned_watcher_checks_every_interval_and_stops_when_aborted() {
    let _turn = ONE_WATCHER_AT_A_TIME.lock().await;
    let fake = FakeProbe::default();
    let c = filled("pressure-spawned", 100);
    fake.set(990);
    let config = PressureConfig {
        interval: Duration::from_secs(1),
        ..PressureConfig::default()
    };
    let task = spawn_pressure_watcher(fake.probe(), config).unwrap();
    // The first tick fires at once; then one per second of (paused) time.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(c.capacity(), 73, "three checks: 100 -> 90 -> 81 -> 73");
    task.abort();
    let _ = task.await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(c.capacity(), 73, "an aborted watcher changes nothing more");
}

#[test]
fn outside_a_runtime_the_watcher_is_a_typed_error() {
    let result = spawn_pressure_watcher(|| None, PressureConfig::default());
    assert_eq!(result.unwrap_err(), ttl_lru::RegistryError::NoRuntime);
}
