//! Bulk read-through (`get_or_try_insert_many`): one batch for the misses, per-key coalescing
//! with single-key and other bulk callers (no deadlock when bulk calls overlap), per-key results
//! and errors, fences, hand-off, and a cancellation sweep.

// The crate's `clippy.toml` keeps std's atomics out of the crate's own modules (its hit-path
// tests log writes through its wrappers); this test's counters are not one of them.
#![allow(clippy::disallowed_types)]

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use ttl_lru::{Cache, FetchError, ManualClock, Source};

#[derive(Debug, PartialEq)]
struct Boom;

fn forever(_: &u64) -> Duration {
    Duration::MAX
}

fn cache() -> Cache<u64, u64> {
    Cache::builder(100).clock(ManualClock::new()).build()
}

/// A batch that answers `k * 10` for every key and logs the keys it was asked for.
type Batch = std::future::Ready<Result<Vec<(u64, u64)>, Boom>>;

fn tens(log: &Arc<Mutex<Vec<Vec<u64>>>>) -> impl FnMut(Vec<u64>) -> Batch + use<> {
    let log = Arc::clone(log);
    move |mut keys: Vec<u64>| {
        keys.sort_unstable();
        log.lock().unwrap().push(keys.clone());
        std::future::ready(Ok(keys.into_iter().map(|k| (k, k * 10)).collect()))
    }
}

fn value(r: &Result<ttl_lru::Fetched<u64>, FetchError<Boom>>) -> (u64, Source) {
    let f = r.as_ref().expect("a value");
    (f.value, f.source)
}

#[tokio::test]
async fn hits_answer_at_once_and_misses_go_to_one_batch() {
    let c = cache();
    c.insert(1, 100, Duration::MAX).unwrap();
    let log = Arc::default();
    let got = c
        .get_or_try_insert_many([1, 2, 3, 3], forever, tens(&log))
        .await;
    assert_eq!(got.len(), 3, "each distinct key once");
    assert_eq!(value(&got[&1]), (100, Source::Hit));
    assert_eq!(value(&got[&2]), (20, Source::Filled));
    assert_eq!(value(&got[&3]), (30, Source::Filled));
    assert_eq!(
        *log.lock().unwrap(),
        vec![vec![2, 3]],
        "one batch, misses only"
    );
    assert_eq!((c.get(&2), c.get(&3)), (Some(20), Some(30)), "stored");
    // All hits now: the batch is not called at all.
    let again = c
        .get_or_try_insert_many([1, 2, 3], forever, tens(&log))
        .await;
    assert!(again.values().all(|r| value(r).1 == Source::Hit));
    assert_eq!(log.lock().unwrap().len(), 1, "no batch with no misses");
}

#[tokio::test]
async fn a_key_the_batch_did_not_return_gets_a_typed_error_and_is_not_cached() {
    let c = cache();
    let got = c
        .get_or_try_insert_many([1, 2], forever, |_keys| async {
            Ok::<_, Boom>(vec![(1, 10), (99, 990)])
        })
        .await;
    assert_eq!(value(&got[&1]), (10, Source::Filled));
    assert!(matches!(got[&2], Err(FetchError::MissingFromBatch)));
    assert_eq!(c.get(&99), None, "keys not asked for are ignored");
    let next = c
        .get_or_try_insert(2, forever, || async { Ok::<u64, Boom>(2) })
        .await
        .unwrap();
    assert_eq!(
        next.source,
        Source::Filled,
        "the missing key was not cached"
    );
    assert_eq!(c.fills_in_flight(), 0);
}

#[tokio::test]
async fn the_batch_error_is_shared_by_all_its_keys() {
    let c: Cache<u64, u64> = Cache::builder(100)
        .clock(ManualClock::new())
        .negative_ttl(Duration::from_secs(5))
        .build();
    let got = c
        .get_or_try_insert_many([1, 2, 3], forever, |_keys| async {
            Err::<Vec<(u64, u64)>, _>(Boom)
        })
        .await;
    let errors: Vec<_> = got
        .values()
        .map(|r| match r {
            Err(FetchError::Failed(e)) => Arc::clone(e),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(errors.len(), 3);
    assert!(errors.iter().all(|e| Arc::ptr_eq(e, &errors[0])), "one Arc");
    // Cached per key for negative_ttl, like a single fill's error.
    let cached = c
        .get_or_try_insert(2, forever, || async { Ok::<u64, Boom>(2) })
        .await;
    assert!(matches!(cached, Err(FetchError::Failed(e)) if Arc::ptr_eq(&e, &errors[0])));
}

#[tokio::test]
async fn a_key_another_caller_fills_is_joined_not_asked_for_again() {
    let c = cache();
    let (release, released) = oneshot::channel::<()>();
    let single = c.get_or_try_insert(2, forever, || async move {
        released.await.unwrap();
        Ok::<u64, Boom>(222)
    });
    let log = Arc::default();
    let bulk = c.get_or_try_insert_many([1, 2, 3], forever, tens(&log));
    let (s, b) = tokio::join!(single, async {
        tokio::task::yield_now().await;
        let bulk = bulk;
        tokio::pin!(bulk);
        {
            // The batch for 1 and 3 runs while key 2's flight is still open.
            let first = futures::poll!(bulk.as_mut());
            assert!(first.is_pending());
            assert_eq!(c.get(&1), Some(10), "led keys filled before waiting");
            release.send(()).unwrap();
            bulk.await
        }
    });
    assert_eq!(s.unwrap().value, 222);
    assert_eq!(*log.lock().unwrap(), vec![vec![1, 3]]);
    assert_eq!(value(&b[&2]), (222, Source::Joined));
    assert_eq!(value(&b[&1]), (10, Source::Filled));
}

/// Two bulk calls with overlapping keys, each batch waiting until the other batch has started:
/// if either waited for a key the other leads before running its own batch, neither batch would
/// start. On the paused clock a hang turns into the timeout's error.
#[tokio::test(start_paused = true)]
async fn overlapping_bulk_calls_do_not_deadlock() {
    let c = cache();
    let a_started = Arc::new(Notify::new());
    let b_started = Arc::new(Notify::new());
    let batch = |me: Arc<Notify>, other: Arc<Notify>| {
        move |keys: Vec<u64>| {
            let (me, other) = (Arc::clone(&me), Arc::clone(&other));
            async move {
                me.notify_one();
                other.notified().await;
                Ok::<_, Boom>(keys.into_iter().map(|k| (k, k)).collect::<Vec<_>>())
            }
        }
    };
    let a = c.get_or_try_insert_many(
        [1, 2],
        forever,
        batch(Arc::clone(&a_started), Arc::clone(&b_started)),
    );
    let b = c.get_or_try_insert_many(
        [2, 3],
        forever,
        batch(Arc::clone(&b_started), Arc::clone(&a_started)),
    );
    let (a, b) = tokio::time::timeout(Duration::from_secs(60), async { tokio::join!(a, b) })
        .await
        .expect("overlapping bulk calls deadlocked");
    assert_eq!(value(&a[&2]), (2, Source::Filled), "a leads 2");
    assert_eq!(value(&b[&2]), (2, Source::Joined), "b joins 2");
    assert_eq!(value(&b[&3]), (3, Source::Filled));
}

#[tokio::test]
async fn a_lead_handed_over_is_filled_by_a_second_batch() {
    let c = cache();
    let single = c.get_or_try_insert(2, forever, std::future::pending::<Result<u64, Boom>>);
    let log = Arc::default();
    let mut bulk = Box::pin(c.get_or_try_insert_many([1, 2], forever, tens(&log)));
    {
        let mut single = Box::pin(single);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(single.as_mut().poll(&mut cx).is_pending(), "leads 2");
        assert!(bulk.as_mut().poll(&mut cx).is_pending(), "follows 2");
    } // the single-key leader goes away: its lead passes to the bulk call
    let got = bulk.await;
    assert_eq!(*log.lock().unwrap(), vec![vec![1], vec![2]]);
    assert_eq!(value(&got[&2]), (20, Source::Filled));
    assert_eq!(c.fills_in_flight(), 0);
}

#[tokio::test]
async fn an_invalidation_during_the_batch_fences_that_key_only() {
    let c = cache();
    let c2 = c.clone();
    let got = c
        .get_or_try_insert_many([1, 2], forever, move |keys| {
            c2.invalidate(&1);
            std::future::ready(Ok::<_, Boom>(
                keys.into_iter().map(|k| (k, k)).collect::<Vec<_>>(),
            ))
        })
        .await;
    assert_eq!(value(&got[&1]), (1, Source::Filled), "still returned");
    assert_eq!(c.get(&1), None, "fenced out of the store");
    assert_eq!(c.get(&2), Some(2));
}

/// Returns `Pending` `n` times (waking itself), then `Ready`.
struct YieldN(usize);

impl Future for YieldN {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            return Poll::Ready(());
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Dropped after every number of polls, with one key followed (its leader finishes after two
/// yields) and two led (the batch yields three times): nothing may be left in flight, nothing
/// half-done stored, and the next call works.
#[tokio::test]
async fn dropped_at_every_await() {
    let mut completed = false;
    for n in 0..30 {
        let c = cache();
        let calls = Arc::new(AtomicUsize::new(0));
        let mut single = Box::pin(c.get_or_try_insert(3, forever, || async {
            YieldN(2).await;
            Ok::<u64, Boom>(33)
        }));
        let calls2 = Arc::clone(&calls);
        let mut bulk = Box::pin(c.get_or_try_insert_many([1, 2, 3], forever, move |keys| {
            calls2.fetch_add(1, Ordering::Relaxed);
            async move {
                YieldN(3).await;
                Ok::<_, Boom>(keys.into_iter().map(|k| (k, k)).collect::<Vec<_>>())
            }
        }));
        let mut cx = Context::from_waker(Waker::noop());
        let mut single_out = None;
        let mut poll_single = |cx: &mut Context<'_>| {
            if single_out.is_none()
                && let Poll::Ready(o) = single.as_mut().poll(cx)
            {
                single_out = Some(o);
            }
        };
        poll_single(&mut cx);
        let mut out = None;
        for _ in 0..n {
            if let Poll::Ready(o) = bulk.as_mut().poll(&mut cx) {
                out = Some(o);
                break;
            }
            poll_single(&mut cx);
        }
        drop(bulk);
        let single = match single_out {
            Some(o) => o,
            None => single.await,
        };
        assert_eq!(single.unwrap().value, 33);
        match out {
            Some(got) => {
                let got: HashMap<_, _> = got.iter().map(|(k, r)| (*k, value(r))).collect();
                assert_eq!(got[&1], (1, Source::Filled));
                assert_eq!(got[&3], (33, Source::Joined));
                completed = true;
                break;
            }
            None => {
                assert_eq!(
                    c.fills_in_flight(),
                    0,
                    "dropped after {n} polls left a fill"
                );
                // A batch's keys are published together, in the poll its future ends in.
                assert_eq!(
                    c.get(&1).is_some(),
                    c.get(&2).is_some(),
                    "half-done after {n}"
                );
                if calls.load(Ordering::Relaxed) == 0 {
                    assert_eq!(c.get(&1), None, "no batch, nothing stored ({n} polls)");
                }
                let next = c
                    .get_or_try_insert_many([1, 2], forever, |keys| async move {
                        Ok::<_, Boom>(keys.into_iter().map(|k| (k, k + 1)).collect::<Vec<_>>())
                    })
                    .await;
                assert!(next.values().all(|r| r.is_ok()), "after {n} polls");
            }
        }
    }
    assert!(completed);
}
