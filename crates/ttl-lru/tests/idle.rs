//! Time-to-idle, the cache's (`CacheBuilder::time_to_idle`) and an entry's own
//! (`Cache::insert_with_idle`, `CacheBuilder::time_to_idle_by`): a value expires at
//! `min(written + ttl, last access + idle)`, is never served stale once idle, is purged and
//! reported as expired, and is left out of iteration; an entry's own idle time follows it
//! through every move of the table and ends with it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ttl_lru::{Admission, Cache, ManualClock, RemovalCause, Source};

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

/// A fill that fails over a value gone idle caches its error like any miss's: the idle value
/// is gone, not a stale one to keep (its fill used to be re-run by every caller until the
/// value's TTL ended, negative caching silently off).
#[tokio::test]
async fn a_failed_fill_over_an_idle_value_caches_its_error() {
    let clock = ManualClock::new();
    let c: Cache<u64, u64> = Cache::builder(100)
        .clock(clock.clone())
        .time_to_idle(100 * MS)
        .negative_ttl(Duration::from_secs(60))
        .build();
    c.insert(1, 1, Duration::from_secs(3600)).unwrap();
    clock.advance(200 * MS);
    let runs = Arc::new(Mutex::new(0));
    for _ in 0..3 {
        let runs = Arc::clone(&runs);
        let fill = move || async move {
            *runs.lock().unwrap() += 1;
            Err::<u64, &str>("down")
        };
        let failed = c.get_or_try_insert(1, |_| Duration::MAX, fill).await;
        assert!(failed.is_err());
    }
    assert_eq!(*runs.lock().unwrap(), 1);
    assert_eq!(c.get(&1), None);
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

/// A full cache whose entries went idle admits newcomers under every policy: an idle entry
/// is gone, so it leaves without a duel. (TinyLFU and the adaptive policy weighed an idle
/// victim's past hits against the newcomer, and a formerly hot key that went idle kept
/// refusing every new key while the cache held nothing it could serve.)
#[test]
fn a_full_cache_of_idle_entries_admits_newcomers_under_every_policy() {
    for admission in [
        ttl_lru::Admission::Always,
        ttl_lru::Admission::TinyLfu,
        ttl_lru::Admission::Adaptive,
    ] {
        let clock = ManualClock::new();
        let c: Cache<u64, u64> = Cache::builder(4)
            .shards(1)
            .clock(clock.clone())
            .recency_resolution(Duration::ZERO)
            .time_to_idle(100 * MS)
            .admission(admission)
            .build();
        for k in 0..4 {
            c.insert(k, k, Duration::MAX).unwrap();
        }
        for _ in 0..20 {
            for k in 0..4 {
                clock.advance(MS);
                assert_eq!(c.get(&k), Some(k));
            }
        }
        clock.advance(200 * MS);
        for k in 10..14 {
            assert_eq!(
                c.insert(k, k, Duration::MAX),
                Ok(true),
                "{admission:?}: key {k}"
            );
            assert_eq!(c.get(&k), Some(k), "{admission:?}: key {k}");
        }
    }
}

// Per-entry time-to-idle (`Cache::insert_with_idle`, `CacheBuilder::time_to_idle_by`).

fn plain_cache(clock: &ManualClock, capacity: u64) -> Cache<u64, u64> {
    Cache::builder(capacity)
        .shards(1)
        .seed(7)
        .clock(clock.clone())
        .recency_resolution(Duration::ZERO)
        .build()
}

#[test]
fn an_entry_with_its_own_idle_time_idles_out_alone() {
    let clock = ManualClock::new();
    let c = plain_cache(&clock, 100);
    c.insert(1, 1, Duration::MAX).unwrap();
    c.insert_with_idle(2, 2, Duration::MAX, 100 * MS).unwrap();
    for _ in 0..5 {
        clock.advance(80 * MS);
        assert_eq!(c.get(&2), Some(2), "read within its idle time");
    }
    clock.advance(100 * MS);
    assert_eq!(c.get(&2), None, "100 ms without a read");
    assert!(c.lookup(&2).is_none());
    assert_eq!(
        c.get(&1),
        Some(1),
        "an entry without an idle time never idles"
    );
}

#[test]
fn an_entrys_idle_time_replaces_the_caches_both_ways() {
    let clock = ManualClock::new();
    let c = idle_cache(&clock); // the cache's: 100 ms
    c.insert_with_idle(1, 1, Duration::MAX, 30 * MS).unwrap();
    c.insert_with_idle(2, 2, Duration::MAX, 300 * MS).unwrap();
    c.insert_with_idle(3, 3, Duration::MAX, Duration::MAX)
        .unwrap();
    c.insert(4, 4, Duration::MAX).unwrap();
    assert_eq!(c.lookup(&1).unwrap().expires_in(), Some(30 * MS));
    assert_eq!(c.lookup(&2).unwrap().expires_in(), Some(300 * MS));
    assert_eq!(c.lookup(&3).unwrap().expires_in(), None);
    clock.advance(30 * MS);
    assert_eq!(c.get(&1), None, "shorter than the cache's");
    clock.advance(170 * MS);
    assert_eq!(c.get(&4), None, "the cache's 100 ms");
    assert_eq!(
        c.get(&2),
        Some(2),
        "longer than the cache's: 200 ms idle is within 300"
    );
    clock.advance(Duration::from_secs(1000));
    assert_eq!(c.get(&3), Some(3), "Duration::MAX: never idle");
}

#[test]
fn a_new_write_of_the_key_brings_its_own_settings() {
    let clock = ManualClock::new();
    let c = plain_cache(&clock, 100);
    c.insert_with_idle(1, 1, Duration::MAX, 50 * MS).unwrap();
    c.insert(1, 2, Duration::MAX).unwrap();
    clock.advance(Duration::from_secs(10));
    assert_eq!(c.get(&1), Some(2), "the plain rewrite has no idle time");
    c.insert_with_idle(1, 3, Duration::MAX, 50 * MS).unwrap();
    clock.advance(50 * MS);
    assert_eq!(c.get(&1), None);
}

/// The column follows its values through swap-removes (a removal moves the last value into
/// the hole) and through eviction at capacity (a new key takes its victim's place): a
/// misaligned column would give one key another's idle time.
#[test]
fn idle_times_follow_their_keys_through_removals_and_evictions() {
    let clock = ManualClock::new();
    let c = plain_cache(&clock, 64);
    let short = |k: u64| k.is_multiple_of(3);
    for k in 0..64 {
        if short(k) {
            c.insert_with_idle(k, k, Duration::MAX, 50 * MS).unwrap();
        } else {
            c.insert(k, k, Duration::MAX).unwrap();
        }
    }
    // Remove in an order that moves values around (each removal moves the last one).
    for k in [0, 5, 17, 31, 2, 40, 63, 11] {
        c.remove(&k);
    }
    // Fill the 8 freed places, then push 32 new keys through at capacity: each takes an
    // evicted value's place. New keys alternate between no idle time and a long one.
    for k in 100..140 {
        if k % 2 == 0 {
            c.insert(k, k, Duration::MAX).unwrap();
        } else {
            c.insert_with_idle(k, k, Duration::MAX, Duration::from_secs(3600))
                .unwrap();
        }
    }
    assert_eq!(c.len(), 64);
    clock.advance(50 * MS);
    let live: Vec<(u64, u64)> = c.iter().collect();
    assert!(!live.is_empty());
    for (k, _) in &live {
        assert!(
            k >= &100 || !short(*k),
            "key {k} outlived its 50 ms idle time"
        );
    }
    for k in 100..140 {
        if c.contains_key(&k) {
            assert_eq!(
                c.get(&k),
                Some(k),
                "new key {k} inherited a victim's idle time"
            );
        }
    }
    // Both kinds of new key are among the survivors (which ones survive is up to sampling).
    let survived = |odd: u64| (100..140).any(|k: u64| k % 2 == odd && c.contains_key(&k));
    assert!(survived(0) && survived(1));
}

#[test]
fn per_entry_idle_values_are_purged_and_reported_as_expired() {
    for admission in [Admission::Always, Admission::Adaptive] {
        idle_values_purged_and_reported(admission);
    }
}

fn idle_values_purged_and_reported(admission: Admission) {
    let clock = ManualClock::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    let c: Cache<u64, u64> = Cache::builder(16)
        .shards(1)
        .seed(3)
        .admission(admission)
        .clock(clock.clone())
        .recency_resolution(Duration::ZERO)
        .eviction_listener(move |k, _, cause| sink.lock().unwrap().push((k, cause)))
        .build();
    for k in 0..4 {
        c.insert_with_idle(k, k, Duration::MAX, 100 * MS).unwrap();
    }
    for k in 4..8 {
        c.insert_with_idle(k, k, Duration::MAX, Duration::from_secs(10))
            .unwrap();
    }
    clock.advance(100 * MS);
    assert_eq!(c.purge_expired(), 4);
    let mut gone = log.lock().unwrap().clone();
    gone.sort_unstable_by_key(|e| e.0);
    let want: Vec<_> = (0..4).map(|k| (k, RemovalCause::Expired)).collect();
    assert_eq!(gone, want);
    // Idle values evicted at capacity are reported as expired too, and go first.
    log.lock().unwrap().clear();
    for k in 8..12 {
        c.insert(k, k, Duration::MAX).unwrap();
    }
    for k in 20..24 {
        c.insert_with_idle(k, k, Duration::MAX, 100 * MS).unwrap();
    }
    clock.advance(200 * MS);
    for k in 4..12 {
        c.get(&k);
    }
    // 12 stored of 16: the first 4 new keys fit, the next 4 each evict one (the adaptive
    // policy may decline one of them instead).
    let stored = (30..38)
        .filter(|&k| c.insert(k, k, Duration::MAX).unwrap())
        .count();
    assert!(stored == 8 || (admission == Admission::Adaptive && stored >= 6));
    // Idle values rank as dead, so the sampled victims are mostly (here: with this seed,
    // all but at most one) the idle ones; each victim is reported by what it was.
    let gone = log.lock().unwrap().clone();
    assert_eq!(gone.len(), stored - 4, "{admission:?}");
    for &(k, cause) in &gone {
        let want = if (20..24).contains(&k) {
            RemovalCause::Expired
        } else {
            RemovalCause::Size
        };
        assert_eq!(cause, want, "victim {k}");
    }
    let idle_victims = gone.iter().filter(|(k, _)| (20..24).contains(k)).count();
    assert!(idle_victims + 1 >= gone.len(), "{admission:?}: {gone:?}");
}

#[tokio::test]
async fn time_to_idle_by_sets_read_through_and_insert_entries() {
    let clock = ManualClock::new();
    let c: Cache<u64, u64> = Cache::builder(100)
        .clock(clock.clone())
        .recency_resolution(Duration::ZERO)
        .time_to_idle(Duration::from_secs(1))
        // Odd values idle out after 50 ms; even ones keep the cache's second.
        .time_to_idle_by(|_, v| (v % 2 == 1).then_some(50 * MS))
        .build();
    let filled = c
        .get_or_try_insert(1, |_| Duration::MAX, || async { Ok::<u64, ()>(11) })
        .await
        .unwrap();
    assert_eq!(filled.value, 11);
    c.insert(2, 12, Duration::MAX).unwrap();
    c.insert_with_idle(3, 13, Duration::MAX, Duration::from_secs(5))
        .unwrap();
    clock.advance(50 * MS);
    assert_eq!(
        c.get(&1),
        None,
        "read-through value 11: 50 ms by time_to_idle_by"
    );
    assert_eq!(c.get(&2), Some(12), "even: the cache's second");
    clock.advance(Duration::from_secs(2));
    assert_eq!(c.get(&2), None);
    assert_eq!(
        c.get(&3),
        Some(13),
        "an explicit idle time wins over time_to_idle_by"
    );
}

/// The hit path's shortcut (a stamp younger than the gate needs no idle check) must not skip
/// an entry whose own idle time is below the recency resolution.
#[test]
fn an_idle_time_below_the_recency_resolution_still_holds() {
    let clock = ManualClock::new();
    let c: Cache<u64, u64> = Cache::builder(100)
        .shards(1)
        .clock(clock.clone())
        .recency_resolution(Duration::from_millis(200))
        .build();
    c.insert_with_idle(1, 1, Duration::MAX, 20 * MS).unwrap();
    c.insert(2, 2, Duration::MAX).unwrap();
    clock.advance(20 * MS);
    assert_eq!(c.get(&1), None, "20 ms idle, inside one 200 ms resolution");
    assert_eq!(c.get(&2), Some(2));
}

/// An idle time of zero is idle at birth: nothing is stored (as with a TTL of zero), the old
/// entry goes, and the shard's hit gate is not dragged down to zero by it.
#[test]
fn a_zero_idle_time_stores_nothing() {
    let clock = ManualClock::new();
    let c = plain_cache(&clock, 100);
    c.insert(1, 1, Duration::MAX).unwrap();
    assert_eq!(
        c.insert_with_idle(1, 2, Duration::MAX, Duration::ZERO),
        Ok(false)
    );
    assert_eq!(c.get(&1), None, "the old entry is removed too");
    assert_eq!(c.len(), 0);
    let by: Cache<u64, u64> = Cache::builder(100)
        .clock(clock.clone())
        .stale_while_revalidate(Duration::from_secs(10))
        .time_to_idle_by(|_, _| Some(Duration::ZERO))
        .build();
    assert_eq!(by.insert(1, 1, Duration::MAX), Ok(false));
    assert!(by.lookup(&1).is_none(), "not even stale");
}
