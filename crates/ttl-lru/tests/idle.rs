//! Time-to-idle (`CacheBuilder::time_to_idle`): a value expires at
//! `min(written + ttl, last access + idle)`, is never served stale once idle, is purged and
//! reported as expired, and is left out of iteration.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ttl_lru::{Cache, ManualClock, RemovalCause, Source};

const MS: Duration = Duration::from_millis(1);

fn idle_cache(clock: &ManualClock) -> Cache<u64, u64> {
    Cache::builder(100)
        .clock(clock.clone())
        .recency_resolution(Duration::ZERO)
        .time_to_idle(100 * MS)
        .build()
}

#[test]
fn an_entry_lives_while_read_and_expires_when_idle() {
    let clock = ManualClock::new();
    let c = idle_cache(&clock);
    c.insert(1, 1, Duration::MAX).unwrap();
    for _ in 0..10 {
        clock.advance(80 * MS);
        assert_eq!(c.get(&1), Some(1), "read within the idle time: still fresh");
    }
    clock.advance(99 * MS);
    assert!(c.contains_key(&1));
    clock.advance(MS);
    assert_eq!(c.get(&1), None, "100 ms without a read");
    assert!(!c.contains_key(&1));
}

#[test]
fn the_earlier_of_ttl_and_idle_wins() {
    let clock = ManualClock::new();
    let c = idle_cache(&clock);
    c.insert(1, 1, 150 * MS).unwrap();
    clock.advance(60 * MS);
    assert_eq!(c.get(&1), Some(1));
    clock.advance(60 * MS);
    assert_eq!(c.get(&1), Some(1));
    let left = c.lookup(&1).unwrap().expires_in().unwrap();
    assert_eq!(left, 30 * MS, "the TTL ends first now");
    clock.advance(30 * MS);
    assert_eq!(
        c.get(&1),
        None,
        "the TTL ended although it was read 30 ms ago"
    );
    // A write resets the idle clock, as a read does.
    c.insert(2, 2, Duration::MAX).unwrap();
    clock.advance(90 * MS);
    c.insert(2, 3, Duration::MAX).unwrap();
    clock.advance(90 * MS);
    assert_eq!(c.get(&2), Some(3));
}

#[tokio::test]
async fn an_idle_entry_is_not_served_stale() {
    let clock = ManualClock::new();
    let c: Cache<u64, u64> = Cache::builder(100)
        .clock(clock.clone())
        .recency_resolution(Duration::ZERO)
        .time_to_idle(100 * MS)
        .stale_while_revalidate(Duration::from_secs(10))
        .build();
    c.insert(1, 1, 50 * MS).unwrap();
    clock.advance(60 * MS);
    assert!(
        c.lookup(&1).unwrap().is_stale(),
        "past its TTL, read recently: stale"
    );
    clock.advance(100 * MS);
    assert!(c.lookup(&1).is_none(), "idle: gone, not stale");
    let got = c
        .get_or_try_insert(1, |_| Duration::MAX, || async { Ok::<u64, ()>(2) })
        .await
        .unwrap();
    assert_eq!((got.value, got.source), (2, Source::Filled));
}

#[test]
fn idle_entries_are_purged_reported_and_not_iterated() {
    let clock = ManualClock::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    let c: Cache<u64, u64> = Cache::builder(100)
        .clock(clock.clone())
        .recency_resolution(Duration::ZERO)
        .time_to_idle(100 * MS)
        .eviction_listener(move |k, _, cause| sink.lock().unwrap().push((k, cause)))
        .build();
    for k in 0..10 {
        c.insert(k, k, Duration::MAX).unwrap();
    }
    clock.advance(60 * MS);
    for k in 0..5 {
        c.get(&k);
    }
    clock.advance(60 * MS);
    let mut live: Vec<u64> = c.iter().map(|(k, _)| k).collect();
    live.sort_unstable();
    assert_eq!(live, vec![0, 1, 2, 3, 4]);
    assert_eq!(c.purge_expired(), 5);
    assert_eq!(c.len(), 5);
    let mut gone = log.lock().unwrap().clone();
    gone.sort_unstable_by_key(|e| e.0);
    let want: Vec<_> = (5..10).map(|k| (k, RemovalCause::Expired)).collect();
    assert_eq!(gone, want);
}

#[test]
fn without_time_to_idle_nothing_idles() {
    let clock = ManualClock::new();
    let c: Cache<u64, u64> = Cache::builder(10).clock(clock.clone()).build();
    c.insert(1, 1, Duration::MAX).unwrap();
    clock.advance(Duration::from_secs(1_000_000));
    assert_eq!(c.get(&1), Some(1));
}

/// The adaptive policy keeps its region flags in the same word as the recency stamp that
/// time-to-idle reads: idle checks must see the stamp, not the flags (a flagged stamp read raw
/// is far in the future, so the entry would never go idle).
#[test]
fn time_to_idle_holds_under_every_admission_policy() {
    for admission in [
        ttl_lru::Admission::Always,
        ttl_lru::Admission::TinyLfu,
        ttl_lru::Admission::Adaptive,
    ] {
        let clock = ManualClock::new();
        let c: Cache<u64, u64> = Cache::builder(100)
            .clock(clock.clone())
            .recency_resolution(Duration::ZERO)
            .time_to_idle(100 * MS)
            .admission(admission)
            .build();
        c.insert(1, 1, Duration::MAX).unwrap();
        for _ in 0..5 {
            clock.advance(80 * MS);
            assert_eq!(
                c.get(&1),
                Some(1),
                "{admission:?}: read within the idle time"
            );
        }
        clock.advance(100 * MS);
        assert_eq!(c.get(&1), None, "{admission:?}: 100 ms without a read");
        assert!(c.lookup(&1).is_none(), "{admission:?}");
    }
}
