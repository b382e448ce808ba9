//! The eviction listener: every cause, delivery outside the shard lock, and panics caught,
//! counted, and not losing the batch's other events.

// The crate's `clippy.toml` keeps std's atomics out of the crate's own modules (its hit-path
// tests log writes through its wrappers); a test value's panic switch is not one of them.
#![allow(clippy::disallowed_types)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ttl_lru::{Admission, Cache, CacheBuilder, ManualClock, RemovalCause};

type Log = Arc<Mutex<Vec<(u64, u64, RemovalCause)>>>;

fn logged(builder: CacheBuilder<u64, u64>) -> (Cache<u64, u64>, Log) {
    let log: Log = Arc::default();
    let sink = Arc::clone(&log);
    let c = builder
        .eviction_listener(move |k, v, cause| sink.lock().unwrap().push((k, v, cause)))
        .build();
    (c, log)
}

fn take(log: &Log) -> Vec<(u64, u64, RemovalCause)> {
    let mut events = std::mem::take(&mut *log.lock().unwrap());
    events.sort_unstable_by_key(|e| (e.0, e.1));
    events
}

/// A value the admission policy declines (`Ok(false)`) was never stored: the listener is not
/// told of it (the caller was), and what it would have evicted stays.
#[test]
fn a_declined_insert_is_not_reported() {
    let (c, log) = logged(Cache::builder(100).shards(1).seed(5));
    for k in 0..100 {
        assert_eq!(c.insert(k, k, Duration::MAX), Ok(true));
        // Each resident key is read a few times: more frequent than any newcomer.
        for _ in 0..3 {
            c.get(&k);
        }
    }
    let mut declined = Vec::new();
    let mut evicted = 0;
    for k in 1_000..1_200 {
        match c.insert(k, k, Duration::MAX) {
            Ok(true) => evicted += 1,
            Ok(false) => declined.push(k),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(!declined.is_empty(), "the default policy declined nothing");
    let events = take(&log);
    assert_eq!(events.len(), evicted, "one eviction per newcomer stored");
    assert!(
        events.iter().all(|e| !declined.contains(&e.0)),
        "{events:?}"
    );
    assert_eq!(c.stats().rejections, declined.len() as u64);
    assert_eq!(c.len(), 100);
}

#[test]
fn each_cause_is_reported_with_key_and_value() {
    use RemovalCause::*;
    let clock = ManualClock::new();
    // Sampled LRU, whose victims this test names (the default adaptive policy: below).
    let (c, log) = logged(
        Cache::builder(3)
            .shards(1)
            .clock(clock.clone())
            .admission(Admission::Always),
    );
    c.insert(1, 10, Duration::MAX).unwrap();
    c.insert(1, 11, Duration::MAX).unwrap();
    assert_eq!(take(&log), vec![(1, 10, Replaced)]);
    assert_eq!(c.remove(&1), Some(11));
    assert_eq!(take(&log), vec![(1, 11, Removed)]);
    c.insert(2, 20, Duration::MAX).unwrap();
    c.invalidate(&2);
    assert_eq!(take(&log), vec![(2, 20, Invalidated)]);
    c.insert(3, 30, Duration::MAX).unwrap();
    assert_eq!(c.invalidate_if(|k, _| *k == 3), 1);
    assert_eq!(take(&log), vec![(3, 30, Invalidated)]);
    // Capacity 3: the fourth key evicts one (the least recently used).
    for k in 4..=6 {
        c.insert(k, k * 10, Duration::MAX).unwrap();
        clock.advance(Duration::from_millis(5));
    }
    c.insert(7, 70, Duration::MAX).unwrap();
    assert_eq!(take(&log), vec![(4, 40, Size)]);
    // An expired victim is reported as expired.
    c.insert(8, 80, Duration::from_millis(1)).unwrap();
    assert_eq!(take(&log).len(), 1, "8 evicted a live entry");
    clock.advance(Duration::from_millis(2));
    c.insert(9, 90, Duration::MAX).unwrap();
    assert_eq!(take(&log), vec![(8, 80, Expired)]);
    c.insert(10, 100, Duration::from_millis(1)).unwrap();
    take(&log);
    clock.advance(Duration::from_millis(2));
    assert_eq!(c.purge_expired(), 1);
    assert_eq!(take(&log), vec![(10, 100, Expired)]);
    // So is an expired value its key's write replaces (it was reported as replaced).
    c.insert(9, 91, Duration::from_millis(1)).unwrap();
    assert_eq!(take(&log), vec![(9, 90, Replaced)]);
    clock.advance(Duration::from_millis(2));
    c.insert(9, 92, Duration::MAX).unwrap();
    assert_eq!(take(&log), vec![(9, 91, Expired)]);
    let left = c.len();
    assert_eq!(c.clear(), left);
    let cleared = take(&log);
    assert_eq!(cleared.len(), left);
    assert!(cleared.iter().all(|e| e.2 == Cleared));
    c.insert(11, 110, Duration::MAX).unwrap();
    c.set_capacity(0);
    assert_eq!(take(&log), vec![(11, 110, Size)]);
}

#[test]
fn a_write_that_stores_nothing_reports_the_value_it_removed() {
    let (c, log) = logged(Cache::builder(10).weigher(|_, v: &u64| *v).shards(1));
    c.insert(1, 5, Duration::MAX).unwrap();
    assert!(c.insert(1, 50, Duration::MAX).is_err(), "too heavy");
    assert_eq!(take(&log), vec![(1, 5, RemovalCause::Replaced)]);
}

#[test]
fn the_listener_runs_without_a_shard_lock() {
    let cell: Arc<Mutex<Option<Cache<u64, u64>>>> = Arc::default();
    let inner = Arc::clone(&cell);
    let c: Cache<u64, u64> = Cache::builder(10)
        .shards(1)
        .eviction_listener(move |k, v, _| {
            // Reads and writes the same shard: deadlocks if its lock were held.
            let c = inner.lock().unwrap().clone().unwrap();
            let _ = c.get(&k);
            if k < 100 {
                c.insert(k + 100, v, Duration::MAX).unwrap();
            }
        })
        .build();
    *cell.lock().unwrap() = Some(c.clone());
    c.insert(1, 1, Duration::MAX).unwrap();
    c.insert(1, 2, Duration::MAX).unwrap(); // replaced: the listener writes 101
    assert_eq!(c.remove(&1), Some(2)); // removed: it writes 101 again
    assert_eq!(c.get(&101), Some(2), "the listener's own writes landed");
    *cell.lock().unwrap() = None;
}

/// A listener may call into the cache during `set_capacity`'s evictions too: read its stats
/// and capacity, or resize it. `set_capacity` held the capacity lock (which `stats` and
/// `capacity` take) while it reported its evictions, so such a listener deadlocked.
#[test]
fn a_listener_may_call_into_the_cache_during_set_capacity() {
    let cell: Arc<Mutex<Option<Cache<u64, u64>>>> = Arc::default();
    let inner = Arc::clone(&cell);
    let c: Cache<u64, u64> = Cache::builder(10)
        .shards(1)
        .eviction_listener(move |_, _, _| {
            let c = inner.lock().unwrap().clone().unwrap();
            let _ = c.stats();
            if c.capacity() == 5 {
                c.set_capacity(4);
            }
        })
        .build();
    *cell.lock().unwrap() = Some(c.clone());
    for k in 0..10 {
        c.insert(k, k, Duration::MAX).unwrap();
    }
    let (done, finished) = std::sync::mpsc::channel();
    let resizer = c.clone();
    std::thread::spawn(move || {
        resizer.set_capacity(5);
        let _ = done.send(());
    });
    finished
        .recv_timeout(Duration::from_secs(30))
        .expect("set_capacity deadlocked on its own listener");
    assert_eq!(c.capacity(), 4);
    assert_eq!(c.len(), 4);
    *cell.lock().unwrap() = None;
}

#[test]
fn a_panicking_listener_is_counted_and_loses_no_other_event() {
    let log: Log = Arc::default();
    let sink = Arc::clone(&log);
    let c: Cache<u64, u64> = Cache::builder(100)
        .shards(1)
        .eviction_listener(move |k, v, cause| {
            sink.lock().unwrap().push((k, v, cause));
            assert!(k % 2 == 1, "listener panics on even keys");
        })
        .build();
    for k in 0..10 {
        c.insert(k, k, Duration::MAX).unwrap();
    }
    assert_eq!(c.clear(), 10, "clear completes");
    assert_eq!(take(&log).len(), 10, "every event of the batch delivered");
    assert_eq!(c.stats().listener_panics, 5);
    c.insert(1, 1, Duration::MAX).unwrap();
    assert_eq!(c.get(&1), Some(1), "the cache still works");
}

#[test]
fn without_a_listener_removal_returns_the_value() {
    let c: Cache<u64, u64> = Cache::new(10);
    c.insert(1, 1, Duration::MAX).unwrap();
    assert_eq!(c.remove(&1), Some(1));
    assert_eq!(c.stats().listener_panics, 0);
}

/// A value whose `Clone` panics while its flag is set.
#[derive(Debug)]
struct TouchyValue(u64, Arc<std::sync::atomic::AtomicBool>);

impl Clone for TouchyValue {
    fn clone(&self) -> Self {
        assert!(
            !self.1.load(std::sync::atomic::Ordering::SeqCst),
            "TouchyValue::clone panics"
        );
        TouchyValue(self.0, Arc::clone(&self.1))
    }
}

/// `invalidate` with a listener clones the removed value for it (user code): a panic there
/// still detaches the key's in-flight fill, so the next caller fills afresh. Before, the panic
/// skipped the detach and later callers joined the flight from before the invalidation.
#[tokio::test(start_paused = true)]
async fn an_invalidate_whose_value_clone_panics_still_detaches_the_fill() {
    use std::future::Future;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Waker};
    let flag = Arc::new(AtomicBool::new(false));
    let c: Cache<u64, TouchyValue> = Cache::builder(100).eviction_listener(|_, _, _| {}).build();
    c.insert(5, TouchyValue(1, Arc::clone(&flag)), Duration::MAX)
        .unwrap();
    // A fill of key 5 in flight (it never ends), as from a read after the entry expired.
    c.remove(&5);
    let mut stuck = Box::pin(c.get_or_try_insert(
        5,
        |_| Duration::MAX,
        std::future::pending::<Result<TouchyValue, ()>>,
    ));
    assert!(
        stuck
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    );
    c.insert(5, TouchyValue(2, Arc::clone(&flag)), Duration::MAX)
        .unwrap();
    flag.store(true, Ordering::SeqCst);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.invalidate(&5)));
    assert!(panicked.is_err(), "the listener's clone panicked");
    flag.store(false, Ordering::SeqCst);
    let fresh = Arc::clone(&flag);
    let next = tokio::time::timeout(
        Duration::from_secs(20),
        c.get_or_try_insert(
            5,
            |_| Duration::MAX,
            || async move { Ok::<_, ()>(TouchyValue(3, fresh)) },
        ),
    )
    .await
    .expect("joined the flight from before the invalidation")
    .unwrap();
    assert_eq!(next.value.0, 3);
    drop(stuck);
}

/// A value gone idle (past its time-to-idle) that its key's write replaces is reported as
/// `Expired`, as a value past its TTL is. Found by review: the replace did not fold the idle
/// deadline into the expiry, as every other removal does, and reported it `Replaced`.
#[test]
fn an_idle_value_its_keys_write_replaces_is_reported_expired() {
    let clock = ManualClock::new();
    let (c, log) = logged(
        Cache::builder(10)
            .shards(1)
            .clock(clock.clone())
            .time_to_idle(Duration::from_millis(100))
            .recency_resolution(Duration::ZERO),
    );
    c.insert(1, 10, Duration::MAX).unwrap();
    clock.advance(Duration::from_millis(150));
    assert_eq!(c.get(&1), None, "idle");
    c.insert(1, 11, Duration::MAX).unwrap();
    assert_eq!(take(&log), vec![(1, 10, RemovalCause::Expired)]);
    // A live value its key's write replaces is still `Replaced`.
    c.insert(1, 12, Duration::MAX).unwrap();
    assert_eq!(take(&log), vec![(1, 11, RemovalCause::Replaced)]);
}
