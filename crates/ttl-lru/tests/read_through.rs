//! Read-through semantics (issue 3, "Semantics that must hold"), on tokio's paused clock: one fill
//! per key, fills outside capacity, the aborted-fill regression, negative caching,
//! stale-while-revalidate with one refresh and stale-if-error, generation-fenced invalidation,
//! clear waking everyone, wait and fill timeouts, detached fills.

// The crate's `clippy.toml` keeps std's atomics out of the crate's own modules (its hit-path
// tests log writes through its wrappers); a test counting fill runs is not one of them.
#![allow(clippy::disallowed_types)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{advance, sleep};
use ttl_lru::{Cache, FetchError, Fetched, Source, TokioClock};

const SEC: Duration = Duration::from_secs(1);

#[derive(Debug, PartialEq)]
struct Boom(u32);

fn forever(_: &u64) -> Duration {
    Duration::MAX
}

fn secs(n: u64) -> impl Fn(&u64) -> Duration + Copy + Send + 'static {
    move |_: &u64| Duration::from_secs(n)
}

/// A fill that counts its runs and returns `value` after `delay` (tokio time).
fn counted(
    runs: &Arc<AtomicUsize>,
    value: u64,
    delay: Duration,
) -> impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = Result<u64, Boom>> + Send>> + use<> {
    let runs = Arc::clone(runs);
    move || {
        Box::pin(async move {
            runs.fetch_add(1, Ordering::SeqCst);
            sleep(delay).await;
            Ok(value)
        })
    }
}

/// A fill that waits for `gate` before returning `value`.
fn gated(
    gate: &Arc<Notify>,
    value: u64,
) -> impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = Result<u64, Boom>> + Send>> + use<> {
    let gate = Arc::clone(gate);
    move || {
        Box::pin(async move {
            gate.notified().await;
            Ok(value)
        })
    }
}

fn cache(capacity: u64) -> Cache<u64, u64> {
    Cache::builder(capacity).clock(TokioClock::new()).build()
}

#[tokio::test(start_paused = true)]
async fn concurrent_misses_run_one_fill() {
    let c = cache(100);
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (c, f) = (c.clone(), counted(&runs, 7, SEC));
        tasks.push(tokio::spawn(async move {
            c.get_or_try_insert(1, forever, f).await
        }));
    }
    let mut filled = 0;
    for t in tasks {
        let got = t.await.unwrap().unwrap();
        assert_eq!(got.value, 7);
        match got.source {
            Source::Filled => filled += 1,
            Source::Joined => {}
            other => panic!("unexpected source {other:?}"),
        }
    }
    assert_eq!(filled, 1);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let hit = c
        .get_or_try_insert(1, forever, counted(&runs, 8, SEC))
        .await
        .unwrap();
    assert_eq!((hit.value, hit.source), (7, Source::Hit));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let s = c.stats();
    assert_eq!((s.fills, s.waits), (1, 9));
    assert_eq!(c.fills_in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn fills_in_flight_take_no_capacity() {
    let c = cache(1);
    let gate = Arc::new(Notify::new());
    let mut tasks = Vec::new();
    for k in 0..5 {
        let (c, f) = (c.clone(), gated(&gate, k));
        tasks.push(tokio::spawn(async move {
            c.get_or_try_insert(k, forever, f).await
        }));
    }
    tokio::task::yield_now().await;
    assert_eq!(c.fills_in_flight(), 5);
    assert_eq!(c.len(), 0, "pending fills are not entries");
    c.insert(100, 100, Duration::MAX).unwrap();
    assert_eq!(
        c.get(&100),
        Some(100),
        "the store still has its whole capacity"
    );
    gate.notify_waiters();
    for (k, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap().unwrap().value, k as u64);
    }
    assert!(c.len() <= 1);
    assert_eq!(c.fills_in_flight(), 0);
}

/// The pingora `RTCache` bug: the filling task is aborted mid-fill; the next call must fill, not
/// hang or bypass the cache forever.
#[tokio::test(start_paused = true)]
async fn aborted_fill_leaves_nothing_stuck() {
    let c = cache(10);
    let never = || std::future::pending::<Result<u64, Boom>>();
    let c2 = c.clone();
    let stuck = tokio::spawn(async move { c2.get_or_try_insert(1, forever, never).await });
    tokio::task::yield_now().await;
    assert_eq!(c.fills_in_flight(), 1);
    // A follower is waiting when the leader dies: it must take over.
    let c3 = c.clone();
    let runs = Arc::new(AtomicUsize::new(0));
    let f = counted(&runs, 5, SEC);
    let follower = tokio::spawn(async move { c3.get_or_try_insert(1, forever, f).await });
    tokio::task::yield_now().await;
    stuck.abort();
    assert!(stuck.await.unwrap_err().is_cancelled());
    let got = follower.await.unwrap().unwrap();
    assert_eq!((got.value, got.source), (5, Source::Filled));
    assert_eq!(c.get(&1), Some(5));
    // And with nobody waiting, the next caller simply fills.
    let c4 = c.clone();
    let stuck = tokio::spawn(async move { c4.get_or_try_insert(2, forever, never).await });
    tokio::task::yield_now().await;
    stuck.abort();
    let _ = stuck.await;
    assert_eq!(c.fills_in_flight(), 0);
    let got = c
        .get_or_try_insert(2, forever, counted(&runs, 6, SEC))
        .await
        .unwrap();
    assert_eq!((got.value, got.source), (6, Source::Filled));
}

/// A caller that missed, then followed a fill whose leader was dropped, inherits the lead; if
/// a value was stored meanwhile (here a plain insert, while it waited), it takes that value
/// instead of fetching it again. The same re-check covers a fill that stored and ended between
/// a caller's lookup and its join, which no single-threaded schedule can stage.
#[tokio::test(start_paused = true)]
async fn a_handed_lead_takes_a_value_stored_while_it_waited() {
    for bulk in [false, true] {
        let c = cache(10);
        let never = || std::future::pending::<Result<u64, Boom>>();
        let c2 = c.clone();
        let stuck = tokio::spawn(async move { c2.get_or_try_insert(1, forever, never).await });
        tokio::task::yield_now().await;
        let runs = Arc::new(AtomicUsize::new(0));
        let c3 = c.clone();
        let follower = if bulk {
            let runs = Arc::clone(&runs);
            tokio::spawn(async move {
                let mut got = c3
                    .get_or_try_insert_many([1], forever, move |keys: Vec<u64>| {
                        runs.fetch_add(1, Ordering::SeqCst);
                        async move { Ok::<_, Boom>(keys.into_iter().map(|k| (k, 7))) }
                    })
                    .await;
                got.remove(&1).expect("an answer for key 1")
            })
        } else {
            let f = counted(&runs, 7, SEC);
            tokio::spawn(async move { c3.get_or_try_insert(1, forever, f).await })
        };
        tokio::task::yield_now().await;
        assert_eq!(c.insert(1, 5, Duration::MAX), Ok(true));
        stuck.abort();
        assert!(stuck.await.unwrap_err().is_cancelled());
        let got = follower.await.unwrap().unwrap();
        assert_eq!(
            (got.value, got.source, runs.load(Ordering::SeqCst)),
            (5, Source::Hit, 0),
            "bulk: {bulk}"
        );
        assert_eq!(c.get(&1), Some(5));
    }
}

#[tokio::test(start_paused = true)]
async fn errors_are_cached_for_negative_ttl() {
    let c: Cache<u64, u64> = Cache::builder(10)
        .clock(TokioClock::new())
        .negative_ttl(Duration::from_secs(5))
        .build();
    let runs = Arc::new(AtomicUsize::new(0));
    let failing = |runs: &Arc<AtomicUsize>| {
        let runs = Arc::clone(runs);
        move || async move {
            let n = runs.fetch_add(1, Ordering::SeqCst) as u32;
            Err::<u64, _>(Boom(n))
        }
    };
    let e = c
        .get_or_try_insert(1, forever, failing(&runs))
        .await
        .unwrap_err();
    assert_eq!(**e.fill_error().unwrap(), Boom(0));
    advance(Duration::from_secs(4)).await;
    let e = c
        .get_or_try_insert(1, forever, failing(&runs))
        .await
        .unwrap_err();
    assert_eq!(
        **e.fill_error().unwrap(),
        Boom(0),
        "served from the negative cache"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(c.get(&1), None, "plain get does not return errors");
    advance(SEC).await;
    let e = c
        .get_or_try_insert(1, forever, failing(&runs))
        .await
        .unwrap_err();
    assert_eq!(**e.fill_error().unwrap(), Boom(1));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let s = c.stats();
    assert_eq!((s.fill_errors, s.negative_hits), (2, 1));
    // A different error type at the same key is not served that cached error: it fills.
    let got = c
        .get_or_try_insert(1, forever, || async { Ok::<u64, std::io::Error>(3) })
        .await
        .unwrap();
    assert_eq!(got.value, 3);
}

/// In a full cache the default policy admits a new key's cached error as it admits a value:
/// by the key's misses against what it would displace. A broken key asked for once is not
/// worth a frequent entry (a scan of bad keys must not flush the cache); one asked for
/// again and again is cached after a few misses, and then shields the origin.
#[tokio::test(start_paused = true)]
async fn a_full_cache_caches_an_error_once_its_key_is_asked_for_often() {
    let c: Cache<u64, u64> = Cache::builder(100)
        .shards(1)
        .seed(5)
        .clock(TokioClock::new())
        .negative_ttl(Duration::from_secs(60))
        .build();
    for k in 0..100 {
        assert_eq!(c.insert(k, k, Duration::MAX), Ok(true));
        for _ in 0..3 {
            c.get(&k);
        }
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let mut calls = 0;
    while calls < 32 {
        calls += 1;
        let r = Arc::clone(&runs);
        let e = c
            .get_or_try_insert(5000, forever, move || async move {
                r.fetch_add(1, Ordering::SeqCst);
                Err::<u64, _>(Boom(0))
            })
            .await;
        assert!(e.is_err());
        if runs.load(Ordering::SeqCst) < calls {
            break;
        }
    }
    let runs = runs.load(Ordering::SeqCst);
    assert!(runs >= 2, "the first error was declined: {runs} fills");
    assert!(runs < calls, "the error was cached after {runs} fills");
    assert!(c.stats().rejections >= 1);
    assert_eq!(c.len(), 100);
}

#[tokio::test(start_paused = true)]
async fn negative_ttl_zero_does_not_cache_errors() {
    let c = cache(10);
    let runs = Arc::new(AtomicUsize::new(0));
    for i in 1..=3 {
        let r = Arc::clone(&runs);
        let e = c
            .get_or_try_insert(1, forever, move || async move {
                r.fetch_add(1, Ordering::SeqCst);
                Err::<u64, _>(Boom(0))
            })
            .await;
        assert!(matches!(e, Err(FetchError::Failed(_))));
        assert_eq!(runs.load(Ordering::SeqCst), i);
    }
}

#[tokio::test(start_paused = true)]
async fn concurrent_callers_share_one_failure() {
    let c = cache(10);
    let gate = Arc::new(Notify::new());
    let g = Arc::clone(&gate);
    let c1 = c.clone();
    let leader = tokio::spawn(async move {
        c1.get_or_try_insert(1, forever, move || async move {
            g.notified().await;
            Err::<u64, _>(Boom(9))
        })
        .await
    });
    tokio::task::yield_now().await;
    let c2 = c.clone();
    let follower = tokio::spawn(async move {
        c2.get_or_try_insert(1, forever, || async { Ok::<u64, Boom>(1) })
            .await
    });
    tokio::task::yield_now().await;
    gate.notify_waiters();
    let a = leader.await.unwrap().unwrap_err();
    let b = follower.await.unwrap().unwrap_err();
    assert!(Arc::ptr_eq(
        a.fill_error().unwrap(),
        b.fill_error().unwrap()
    ));
}

/// A cache with a 10 s stale window whose key 1 was filled (value 1, ttl 1 s, counted in the
/// returned runs) 2 s ago: stale now.
async fn stale_entry() -> (Cache<u64, u64>, Arc<AtomicUsize>) {
    let c: Cache<u64, u64> = Cache::builder(10)
        .clock(TokioClock::new())
        .stale_while_revalidate(Duration::from_secs(10))
        .build();
    let runs = Arc::new(AtomicUsize::new(0));
    c.get_or_try_insert(1, secs(1), counted(&runs, 1, Duration::ZERO))
        .await
        .unwrap();
    advance(Duration::from_secs(2)).await;
    (c, runs)
}

#[tokio::test(start_paused = true)]
async fn stale_while_revalidate_serves_stale_and_refreshes_once() {
    let (c, runs) = stale_entry().await;
    // Many callers at once: all get the stale value immediately; one refresh runs (taking 1 s).
    for _ in 0..5 {
        let got = c
            .get_or_try_insert(1, secs(1), counted(&runs, 2, SEC))
            .await
            .unwrap();
        assert_eq!((got.value, got.source), (1, Source::Stale));
    }
    tokio::task::yield_now().await; // let the spawned refresh start
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "exactly one background refresh"
    );
    assert_eq!(c.stats().refreshes, 1);
    sleep(Duration::from_millis(1500)).await;
    let got = c
        .get_or_try_insert(1, secs(1), counted(&runs, 3, SEC))
        .await
        .unwrap();
    assert_eq!((got.value, got.source), (2, Source::Hit));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// A refresh's claim is released only on the entry it was made on: an abandoned refresh of an
/// older entry does not reopen the claim a refresh of a newer entry (written since) holds.
/// Found by review: the release went by key, so when the old refresh was dropped at its
/// window's end, `try_claim_refresh` said yes while the new refresh still ran (a manual
/// revalidation then filled a second time).
#[tokio::test(start_paused = true)]
async fn an_old_refresh_does_not_release_a_newer_entrys_claim() {
    old_refresh_and_newer_claim(Write::Plain).await;
}

/// The same when the newer entry was written by `insert_fenced` (no plain write recorded).
#[tokio::test(start_paused = true)]
async fn an_old_refresh_does_not_release_a_fenced_writes_claim() {
    old_refresh_and_newer_claim(Write::Fenced).await;
}

async fn old_refresh_and_newer_claim(write: Write) {
    let (c, _runs) = stale_entry().await;
    let never = || std::future::pending::<Result<u64, Boom>>();
    // E1 (filled at 0 s, stale since 1 s): its refresh hangs until E1's window ends (11 s).
    let got = c.get_or_try_insert(1, secs(60), never).await.unwrap();
    assert_eq!(got.source, Source::Stale);
    tokio::task::yield_now().await;
    // E2 written at 2 s, stale from 3 s: its refresh is claimed too and follows the first's
    // flight (it hangs as well, with the same origin).
    match write {
        Write::Plain => assert!(c.insert(1, 20, SEC).unwrap()),
        Write::Fenced => assert_eq!(c.insert_fenced(c.fence(&1), 1, 20, SEC), Ok(true)),
    }
    advance(Duration::from_millis(1_500)).await;
    let got = c.get_or_try_insert(1, secs(60), never).await.unwrap();
    assert_eq!((got.value, got.source), (20, Source::Stale));
    tokio::task::yield_now().await;
    assert!(!c.try_claim_refresh(&1), "E2's refresh holds its claim");
    // E1's window ends: its refresh is abandoned. E2's refresh still runs.
    advance(Duration::from_secs(8)).await;
    tokio::task::yield_now().await;
    assert!(
        !c.try_claim_refresh(&1),
        "the abandoned refresh of E1 released E2's claim"
    );
}

/// A refresh whose origin never answers holds the key's flight only until the entry's stale
/// window ends: then it is abandoned (its lead would pass to a caller waiting on it; no caller
/// can be, since until then they are served stale), and callers of the key lead fills of
/// their own. Before, the refresh task kept the flight for good, and every caller after the
/// window joined it and waited forever.
#[tokio::test(start_paused = true)]
async fn a_refresh_that_never_answers_is_abandoned_when_its_window_ends() {
    for waiter_first in [false, true] {
        let (c, runs) = stale_entry().await;
        let never = || std::future::pending::<Result<u64, Boom>>();
        let got = c.get_or_try_insert(1, secs(60), never).await.unwrap();
        assert_eq!((got.value, got.source), (1, Source::Stale));
        tokio::task::yield_now().await; // the refresh starts, and hangs
        assert_eq!(c.stats().refreshes, 1);
        // The window ends 11 s after the fill; a caller may already be waiting on the refresh.
        let waiter = waiter_first.then(|| {
            let (c, f) = (c.clone(), counted(&runs, 2, SEC));
            tokio::spawn(async move {
                sleep(Duration::from_millis(8_990)).await; // at 10.99 s: still stale
                let stale = c.get_or_try_insert(1, secs(60), f).await.unwrap();
                assert_eq!(stale.source, Source::Stale);
                sleep(Duration::from_millis(20)).await; // at 11.01 s: a miss, which leads
                let f = counted(&Arc::new(AtomicUsize::new(0)), 3, SEC);
                c.get_or_try_insert(1, secs(60), f).await
            })
        });
        let later = tokio::time::timeout(Duration::from_secs(60), async {
            sleep(Duration::from_secs(20)).await;
            c.get_or_try_insert(1, secs(60), counted(&runs, 4, SEC))
                .await
        })
        .await
        .expect("a caller after the window waited on the hung refresh");
        let later = later.unwrap();
        match waiter {
            Some(w) => {
                let got = w.await.unwrap().unwrap();
                assert_eq!((got.value, got.source), (3, Source::Filled));
                assert_eq!((later.value, later.source), (3, Source::Hit));
            }
            None => assert_eq!((later.value, later.source), (4, Source::Filled)),
        }
        assert_eq!(
            c.stats().fill_timeouts,
            1,
            "the abandoned refresh is counted"
        );
        assert_eq!(c.fills_in_flight(), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn failed_refresh_keeps_the_stale_value_until_the_window_ends() {
    let c: Cache<u64, u64> = Cache::builder(10)
        .clock(TokioClock::new())
        .stale_while_revalidate(Duration::from_secs(10))
        .negative_ttl(Duration::from_secs(3))
        .build();
    let runs = Arc::new(AtomicUsize::new(0));
    c.get_or_try_insert(1, secs(1), counted(&runs, 1, Duration::ZERO))
        .await
        .unwrap();
    advance(Duration::from_secs(2)).await;
    let failing = |runs: &Arc<AtomicUsize>| {
        let runs = Arc::clone(runs);
        move || async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Err::<u64, _>(Boom(1))
        }
    };
    let got = c
        .get_or_try_insert(1, secs(1), failing(&runs))
        .await
        .unwrap();
    assert_eq!(got.source, Source::Stale);
    tokio::task::yield_now().await; // the refresh runs and fails
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // Stale-if-error: still the stale value, and no new refresh within negative_ttl.
    let got = c
        .get_or_try_insert(1, secs(1), failing(&runs))
        .await
        .unwrap();
    assert_eq!((got.value, got.source), (1, Source::Stale));
    tokio::task::yield_now().await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // After the back-off one retry is allowed.
    advance(Duration::from_secs(3)).await;
    let got = c
        .get_or_try_insert(1, secs(1), failing(&runs))
        .await
        .unwrap();
    assert_eq!(got.source, Source::Stale);
    tokio::task::yield_now().await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    // Past the window callers wait for a fresh fill.
    advance(Duration::from_secs(10)).await;
    let got = c
        .get_or_try_insert(1, secs(1), counted(&runs, 4, SEC))
        .await
        .unwrap();
    assert_eq!((got.value, got.source), (4, Source::Filled));
}

/// Runs a gated fill for key 1 with one extra waiter, applies `invalidate` mid-fill, then checks
/// the waiters still got the value while the store did not keep it.
async fn check_fenced(invalidate: impl FnOnce(&Cache<u64, u64>)) {
    let c = cache(10);
    let gate = Arc::new(Notify::new());
    let (c1, f1) = (c.clone(), gated(&gate, 1));
    let leader = tokio::spawn(async move { c1.get_or_try_insert(1, forever, f1).await });
    tokio::task::yield_now().await;
    let (c2, f2) = (c.clone(), gated(&gate, 2));
    let waiter = tokio::spawn(async move { c2.get_or_try_insert(1, forever, f2).await });
    tokio::task::yield_now().await;
    invalidate(&c);
    gate.notify_waiters();
    assert_eq!(leader.await.unwrap().unwrap().value, 1);
    assert_eq!(waiter.await.unwrap().unwrap().value, 1);
    assert_eq!(
        c.get(&1),
        None,
        "a fill older than the invalidation must not be stored"
    );
    assert_eq!(c.stats().fenced, 1);
    assert_eq!(c.fills_in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn remove_fences_an_older_fill() {
    check_fenced(|c| {
        c.remove(&1);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn invalidate_all_fences_an_older_fill() {
    check_fenced(|c| {
        c.invalidate_all();
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn clear_fences_an_older_fill() {
    check_fenced(|c| {
        c.clear();
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_direct_insert_wins_over_an_older_fill() {
    let c = cache(10);
    let gate = Arc::new(Notify::new());
    let (c1, f1) = (c.clone(), gated(&gate, 1));
    let leader = tokio::spawn(async move { c1.get_or_try_insert(1, forever, f1).await });
    tokio::task::yield_now().await;
    c.insert(1, 42, Duration::MAX).unwrap();
    gate.notify_waiters();
    assert_eq!(leader.await.unwrap().unwrap().value, 1);
    assert_eq!(c.get(&1), Some(42));
}

/// `clear` detaches fills: their waiters are all answered, later callers start a fresh fill instead
/// of joining the removed one, and the old fill does not land in the store.
#[tokio::test(start_paused = true)]
async fn clear_wakes_every_waiter_and_later_callers_start_fresh() {
    let c = cache(10);
    let old_gate = Arc::new(Notify::new());
    let (c1, f1) = (c.clone(), gated(&old_gate, 1));
    let leader = tokio::spawn(async move { c1.get_or_try_insert(1, forever, f1).await });
    tokio::task::yield_now().await;
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let (cw, fw) = (c.clone(), gated(&old_gate, 99));
        waiters.push(tokio::spawn(async move {
            cw.get_or_try_insert(1, forever, fw).await
        }));
    }
    tokio::task::yield_now().await;
    assert_eq!(c.clear(), 0);
    assert_eq!(
        c.fills_in_flight(),
        0,
        "no new caller can join the removed fill"
    );
    let fresh = c
        .get_or_try_insert(1, forever, || async { Ok::<u64, Boom>(2) })
        .await
        .unwrap();
    assert_eq!((fresh.value, fresh.source), (2, Source::Filled));
    old_gate.notify_waiters();
    assert_eq!(leader.await.unwrap().unwrap().value, 1);
    for w in waiters {
        assert_eq!(w.await.unwrap().unwrap().value, 1);
    }
    assert_eq!(c.get(&1), Some(2), "the new fill's value stays");
}

#[tokio::test(start_paused = true)]
async fn waiters_time_out_but_the_fill_goes_on() {
    let c: Cache<u64, u64> = Cache::builder(10)
        .clock(TokioClock::new())
        .wait_timeout(SEC)
        .build();
    let runs = Arc::new(AtomicUsize::new(0));
    let (c1, f1) = (c.clone(), counted(&runs, 1, Duration::from_secs(5)));
    let leader = tokio::spawn(async move { c1.get_or_try_insert(1, forever, f1).await });
    tokio::task::yield_now().await;
    let e = c
        .get_or_try_insert(1, forever, counted(&runs, 2, SEC))
        .await
        .unwrap_err();
    assert!(matches!(e, FetchError::WaitTimedOut));
    assert_eq!(c.stats().wait_timeouts, 1);
    assert_eq!(leader.await.unwrap().unwrap().value, 1);
    assert_eq!(c.get(&1), Some(1));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn detached_fill_survives_its_caller() {
    let c = cache(10);
    let runs = Arc::new(AtomicUsize::new(0));
    let (c1, f1) = (c.clone(), counted(&runs, 1, SEC));
    let caller = tokio::spawn(async move {
        c1.get_or_try_insert_detached(1, forever, f1, Duration::from_secs(10))
            .await
    });
    tokio::task::yield_now().await;
    caller.abort();
    let _ = caller.await;
    sleep(Duration::from_secs(2)).await;
    assert_eq!(c.get(&1), Some(1), "the detached fill finished and stored");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(c.fills_in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn detached_fill_times_out_for_everyone_and_is_not_cached() {
    let c = cache(10);
    let runs = Arc::new(AtomicUsize::new(0));
    let (c1, f1) = (c.clone(), counted(&runs, 1, Duration::from_secs(60)));
    let leader =
        tokio::spawn(async move { c1.get_or_try_insert_detached(1, forever, f1, SEC).await });
    tokio::task::yield_now().await;
    let (c2, f2) = (c.clone(), counted(&runs, 2, SEC));
    let waiter = tokio::spawn(async move { c2.get_or_try_insert(1, forever, f2).await });
    let a = leader.await.unwrap().unwrap_err();
    let b = waiter.await.unwrap().unwrap_err();
    assert!(matches!(a, FetchError::FillTimedOut));
    assert!(matches!(b, FetchError::FillTimedOut));
    assert_eq!(c.stats().fill_timeouts, 1);
    let got = c
        .get_or_try_insert_detached(1, forever, counted(&runs, 3, Duration::ZERO), SEC)
        .await
        .unwrap();
    assert_eq!((got.value, got.source), (3, Source::Filled));
}

#[tokio::test(start_paused = true)]
async fn capacity_zero_and_ttl_zero_still_coalesce_and_return_values() {
    let c = cache(0);
    let runs = Arc::new(AtomicUsize::new(0));
    let (c1, f1) = (c.clone(), counted(&runs, 1, SEC));
    let a = tokio::spawn(async move { c1.get_or_try_insert(1, forever, f1).await });
    tokio::task::yield_now().await;
    let b = c
        .get_or_try_insert(1, forever, counted(&runs, 2, SEC))
        .await
        .unwrap();
    assert_eq!(a.await.unwrap().unwrap().value, 1);
    assert_eq!((b.value, b.source), (1, Source::Joined));
    assert!(c.is_empty());
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let c = cache(10);
    let got = c
        .get_or_try_insert(1, |_| Duration::ZERO, counted(&runs, 5, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(got.value, 5);
    assert!(c.is_empty(), "TTL 0: returned, not stored");
}

#[tokio::test(start_paused = true)]
async fn ttl_from_the_value_applies() {
    let c = cache(10);
    c.get_or_try_insert(
        1,
        |v: &u64| Duration::from_secs(*v),
        || async { Ok::<u64, Boom>(3) },
    )
    .await
    .unwrap();
    advance(Duration::from_millis(2999)).await;
    assert_eq!(c.get(&1), Some(3));
    advance(Duration::from_millis(1)).await;
    assert_eq!(c.get(&1), None);
}

#[tokio::test(start_paused = true)]
async fn invalidate_detaches_the_fill_so_later_callers_start_fresh() {
    let c = cache(10);
    let gate = Arc::new(Notify::new());
    let (c1, f1) = (c.clone(), gated(&gate, 1));
    let old = tokio::spawn(async move { c1.get_or_try_insert(1, forever, f1).await });
    tokio::task::yield_now().await;
    assert_eq!(c.invalidate(&1), None);
    let fresh = c
        .get_or_try_insert(1, forever, || async { Ok::<u64, Boom>(2) })
        .await
        .unwrap();
    assert_eq!((fresh.value, fresh.source), (2, Source::Filled));
    gate.notify_waiters();
    assert_eq!(old.await.unwrap().unwrap().value, 1);
    assert_eq!(
        c.get(&1),
        Some(2),
        "the detached old fill did not overwrite the fresh one"
    );
}

/// Issue 17: a stale entry's refresh claimed while another fill of the key is open must not
/// stay claimed when that fill stores nothing. Here the open fill started before a plain insert
/// of its key, so the insert fences it; the inserted value then goes stale, a reader claims its
/// refresh and finds the fenced fill still open. Before the fix the claim was simply disarmed,
/// and every later reader got the stale value with no refresh until the window ended.
#[tokio::test(start_paused = true)]
async fn a_refresh_claimed_during_a_fill_that_stores_nothing_still_happens() {
    let c: Cache<u64, u64> = Cache::builder(10)
        .clock(TokioClock::new())
        .stale_while_revalidate(Duration::from_secs(30))
        .build();
    let gate = Arc::new(Notify::new());
    let (c1, f1) = (c.clone(), gated(&gate, 1));
    let open = tokio::spawn(async move { c1.get_or_try_insert(1, forever, f1).await });
    let (runs, got) = insert_then_claim_the_refresh(&c, Write::Plain).await;
    assert_eq!((got.value, got.source), (10, Source::Stale));
    // The open fill ends; the fence drops its value.
    gate.notify_waiters();
    assert_eq!(open.await.unwrap().unwrap().value, 1);
    assert_eq!(c.stats().fenced, 1);
    // A later reader still gets the stale value, and now a refresh runs.
    later_stale_reads_refresh_once(&c, &runs).await;
    assert_eq!(c.stats().refreshes, 1);
}

/// How the entry whose refresh a test claims was written.
#[derive(Clone, Copy, PartialEq)]
enum Write {
    /// `insert`, which fences fills of the key already running.
    Plain,
    /// `insert_fenced` (a manual revalidation, or `get_with`'s own write), which fences none.
    Fenced,
}

/// With a fill of key 1 open (just spawned): an insert of 10 for 1 s (a plain one fences the
/// open fill), 2 s pass, and a stale read claims the entry's refresh (a fill of 2, counted in
/// the returned `runs`), which waits on the open fill. Returns the counter and what the read
/// got.
async fn insert_then_claim_the_refresh(
    c: &Cache<u64, u64>,
    write: Write,
) -> (Arc<AtomicUsize>, Fetched<u64>) {
    tokio::task::yield_now().await;
    match write {
        Write::Plain => assert!(c.insert(1, 10, SEC).unwrap()), // fences the open fill
        Write::Fenced => assert_eq!(c.insert_fenced(c.fence(&1), 1, 10, SEC), Ok(true)),
    }
    advance(Duration::from_secs(2)).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let got = c
        .get_or_try_insert(1, secs(1), counted(&runs, 2, Duration::ZERO))
        .await
        .unwrap();
    (runs, got)
}

/// After the open fill of key 1 ended: three more stale reads, of which exactly one starts a
/// refresh (counted in `runs`), which stores 2.
async fn later_stale_reads_refresh_once(c: &Cache<u64, u64>, runs: &Arc<AtomicUsize>) {
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    for _ in 0..3 {
        let got = c
            .get_or_try_insert(1, secs(1), counted(runs, 2, Duration::ZERO))
            .await
            .unwrap();
        assert!(matches!(got.source, Source::Stale | Source::Hit));
        tokio::task::yield_now().await;
    }
    sleep(Duration::from_millis(10)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "exactly one refresh ran");
    assert_eq!(c.get(&1), Some(2), "the refresh stored its value");
}

/// The same, when the open fill fails, or times out, with negative caching on: its end concerns
/// the value it was refreshing, not the one the insert stored since. Before, the error's
/// stale-if-error step (or the timeout's release of a claim) found the newer value and reopened
/// its refresh gate at the negative ttl: it took the claim of the refresh that had begun and
/// kept every later reader on the stale value with no refresh (here for the whole window).
#[tokio::test(start_paused = true)]
async fn a_refresh_claimed_during_a_fill_that_fails_still_happens() {
    refresh_claimed_during_an_open_fill_that_ends(false, Write::Plain).await;
}

#[tokio::test(start_paused = true)]
async fn a_refresh_claimed_during_a_fill_that_times_out_still_happens() {
    refresh_claimed_during_an_open_fill_that_ends(true, Write::Plain).await;
}

/// The same when the entry was written by `insert_fenced`, which records no plain write: the
/// open fill is not fenced, and its end must still leave the newer entry's claim alone. Found
/// by review: the checks went by the plain-write log only, so the failing fill reopened the
/// claimed gate at the negative ttl (no refresh for the rest of the window), and the timed-out
/// fill's release did the same.
#[tokio::test(start_paused = true)]
async fn a_refresh_claimed_on_a_fenced_write_during_a_fill_that_fails_still_happens() {
    refresh_claimed_during_an_open_fill_that_ends(false, Write::Fenced).await;
}

#[tokio::test(start_paused = true)]
async fn a_refresh_claimed_on_a_fenced_write_during_a_fill_that_times_out_still_happens() {
    refresh_claimed_during_an_open_fill_that_ends(true, Write::Fenced).await;
}

/// See the tests above: the open fill fails, or (`times_out`) is a detached fill that runs
/// past its 5 s `fill_timeout`.
async fn refresh_claimed_during_an_open_fill_that_ends(times_out: bool, write: Write) {
    let c: Cache<u64, u64> = Cache::builder(10)
        .clock(TokioClock::new())
        .stale_while_revalidate(Duration::from_secs(30))
        .negative_ttl(Duration::from_secs(60))
        .build();
    let gate = Arc::new(Notify::new());
    let (c1, waiting) = (c.clone(), Arc::clone(&gate));
    let failing = move || async move {
        waiting.notified().await;
        Err::<u64, _>(Boom(1))
    };
    let open = tokio::spawn(async move {
        match times_out {
            true => {
                let never = std::future::pending::<Result<u64, Boom>>;
                c1.get_or_try_insert_detached(1, forever, never, Duration::from_secs(5))
                    .await
            }
            false => c1.get_or_try_insert(1, forever, failing).await,
        }
    });
    let (runs, got) = insert_then_claim_the_refresh(&c, write).await;
    assert_eq!((got.value, got.source), (10, Source::Stale));
    match times_out {
        true => advance(Duration::from_secs(4)).await,
        false => gate.notify_waiters(),
    }
    assert!(open.await.unwrap().is_err());
    later_stale_reads_refresh_once(&c, &runs).await;
}

/// The same, when the open fill is abandoned (its caller dropped, nobody waiting): the claimed
/// refresh takes the fill over instead of leaving the stale entry unrefreshed.
#[tokio::test(start_paused = true)]
async fn a_refresh_claimed_during_an_abandoned_fill_still_happens() {
    let c: Cache<u64, u64> = Cache::builder(10)
        .clock(TokioClock::new())
        .stale_while_revalidate(Duration::from_secs(30))
        .build();
    let never = || std::future::pending::<Result<u64, Boom>>();
    let c1 = c.clone();
    let open = tokio::spawn(async move { c1.get_or_try_insert(1, forever, never).await });
    let (runs, got) = insert_then_claim_the_refresh(&c, Write::Plain).await;
    assert_eq!(got.source, Source::Stale);
    open.abort();
    let _ = open.await;
    for _ in 0..3 {
        let got = c
            .get_or_try_insert(1, secs(1), counted(&runs, 3, Duration::ZERO))
            .await
            .unwrap();
        assert!(matches!(got.source, Source::Stale | Source::Hit));
        tokio::task::yield_now().await;
    }
    sleep(Duration::from_millis(10)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "exactly one refresh ran");
    assert_eq!(c.stats().refreshes, 1);
    assert!(c.get(&1).is_some(), "the refresh stored its value");
}

/// A key whose `Clone` panics while its flag is set (user code that fails at a bad moment).
#[derive(Debug)]
struct TouchyKey(u64, Arc<std::sync::atomic::AtomicBool>);

impl Clone for TouchyKey {
    fn clone(&self) -> Self {
        assert!(!self.1.load(Ordering::SeqCst), "TouchyKey::clone panics");
        TouchyKey(self.0, Arc::clone(&self.1))
    }
}

impl PartialEq for TouchyKey {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for TouchyKey {}

impl std::hash::Hash for TouchyKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// A `K::clone` that panics just after a stale read claimed the entry's refresh leaves the
/// claim open: the next stale read refreshes. Before, the claim was taken before the guard
/// that releases it existed, and stayed taken for the rest of the stale window.
#[tokio::test(start_paused = true)]
async fn a_key_clone_that_panics_after_a_refresh_claim_leaves_it_open() {
    use futures::FutureExt;
    let c: Cache<TouchyKey, u64> = Cache::builder(10)
        .clock(TokioClock::new())
        .stale_while_revalidate(Duration::from_secs(10))
        .build();
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let key = || TouchyKey(1, Arc::clone(&flag));
    let runs = Arc::new(AtomicUsize::new(0));
    c.get_or_try_insert(key(), secs(1), counted(&runs, 1, Duration::ZERO))
        .await
        .unwrap();
    advance(Duration::from_secs(2)).await;
    let panicking = key();
    flag.store(true, Ordering::SeqCst);
    let read = c.get_or_try_insert(panicking, secs(1), counted(&runs, 2, Duration::ZERO));
    let outcome = std::panic::AssertUnwindSafe(read).catch_unwind().await;
    assert!(outcome.is_err(), "the clone panicked");
    flag.store(false, Ordering::SeqCst);
    let got = c
        .get_or_try_insert(key(), secs(1), counted(&runs, 3, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!((got.value, got.source), (1, Source::Stale));
    sleep(Duration::from_millis(10)).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the next stale read refreshed"
    );
    assert_eq!(c.get(&key()), Some(3));
}
