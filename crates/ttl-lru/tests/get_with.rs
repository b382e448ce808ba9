//! `get_with` / `get_with_ttl`, the infallible read-through: coalesces like `get_or_try_insert`,
//! and on every path where that returns no value without this caller's fill having run (a wait
//! timeout, a joined fill that failed with another call site's error type) it runs its own fill
//! and returns that value, stored fenced; dropped at every await it leaves nothing behind.

// The crate's `clippy.toml` keeps std's atomics out of the crate's own modules (its hit-path
// tests log writes through its wrappers); this test's counters are not one of them.
#![allow(clippy::disallowed_types)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::Notify;
use ttl_lru::{Cache, FetchError, ManualClock, TokioClock};

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn concurrent_callers_share_one_fill_and_the_value_is_cached() {
    let cache: Cache<u32, String> = Cache::builder(100).default_ttl(MINUTE).build();
    let fills = Arc::new(AtomicUsize::new(0));
    let calls = (0..10).map(|_| {
        let fills = fills.clone();
        cache.get_with(1, move || async move {
            fills.fetch_add(1, SeqCst);
            tokio::task::yield_now().await;
            "one".to_owned()
        })
    });
    let values = futures::future::join_all(calls).await;
    assert!(values.iter().all(|v| v == "one"));
    assert_eq!(fills.load(SeqCst), 1);
    assert_eq!(cache.get(&1).as_deref(), Some("one"));
    assert_eq!(cache.lookup(&1).unwrap().expires_in(), Some(MINUTE));
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_waits_past_wait_timeout_runs_its_own_fill() {
    let cache: Cache<u32, u32> = Cache::builder(100)
        .wait_timeout(Duration::from_secs(1))
        .clock(TokioClock::new())
        .build();
    let gate = Arc::new(Notify::new());
    let leader = {
        let (cache, gate) = (cache.clone(), gate.clone());
        tokio::spawn(async move {
            cache
                .get_with_ttl(1, MINUTE, move || async move {
                    gate.notified().await;
                    10
                })
                .await
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(cache.fills_in_flight(), 1);
    // The leader is stuck; this caller gives up waiting after 1 s and fills for itself.
    let own = cache.get_with_ttl(1, MINUTE, || async { 20 }).await;
    assert_eq!(own, 20);
    assert_eq!(cache.get(&1), Some(20), "the own fill's value is stored");
    gate.notify_one();
    assert_eq!(
        leader.await.unwrap(),
        10,
        "the leader still gets its own value"
    );
}

#[tokio::test]
async fn a_cached_error_of_another_call_site_is_a_miss_for_get_with() {
    let cache: Cache<u32, u32> = Cache::builder(100)
        .negative_ttl(MINUTE)
        .clock(ManualClock::new())
        .build();
    let failed = cache
        .get_or_try_insert(
            1,
            |_| MINUTE,
            || async { Err::<u32, _>(std::io::Error::other("backend down")) },
        )
        .await;
    assert!(matches!(failed, Err(FetchError::Failed(_))));
    // The error is cached for a minute, but get_with has no error to return: it fills.
    assert_eq!(cache.get_with_ttl(1, MINUTE, || async { 5 }).await, 5);
    assert_eq!(cache.get(&1), Some(5));
}

#[tokio::test]
async fn a_joined_fill_that_fails_with_another_error_type_makes_get_with_fill_itself() {
    let cache: Cache<u32, u32> = Cache::builder(100).clock(ManualClock::new()).build();
    let gate = Arc::new(Notify::new());
    let leader = {
        let (cache, gate) = (cache.clone(), gate.clone());
        tokio::spawn(async move {
            cache
                .get_or_try_insert(
                    1,
                    |_| MINUTE,
                    move || async move {
                        gate.notified().await;
                        Err::<u32, _>(std::io::Error::other("backend down"))
                    },
                )
                .await
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(cache.fills_in_flight(), 1);
    let follower = {
        let cache = cache.clone();
        tokio::spawn(async move { cache.get_with_ttl(1, MINUTE, || async { 9 }).await })
    };
    tokio::task::yield_now().await;
    gate.notify_one();
    assert!(matches!(leader.await.unwrap(), Err(FetchError::Failed(_))));
    assert_eq!(follower.await.unwrap(), 9, "the follower ran its own fill");
    assert_eq!(cache.get(&1), Some(9));
}

#[tokio::test(start_paused = true)]
async fn an_invalidation_during_the_own_fill_keeps_its_value_out_of_the_store() {
    let cache: Cache<u32, u32> = Cache::builder(100)
        .wait_timeout(Duration::from_secs(1))
        .clock(TokioClock::new())
        .build();
    let gate = Arc::new(Notify::new());
    let _stuck_leader = {
        let (cache, gate) = (cache.clone(), gate.clone());
        tokio::spawn(async move {
            cache
                .get_with_ttl(1, MINUTE, move || async move {
                    gate.notified().await;
                    10
                })
                .await
        })
    };
    tokio::task::yield_now().await;
    let invalidating = cache.clone();
    let value = cache
        .get_with_ttl(1, MINUTE, move || {
            // Runs in this caller, after its wait timed out and the fence was taken: the
            // invalidation wins over the value.
            invalidating.invalidate(&1);
            async { 6 }
        })
        .await;
    assert_eq!(value, 6, "the caller still gets its value");
    assert_eq!(
        cache.get(&1),
        None,
        "but it is not stored over the invalidation"
    );
}

/// Returns `Pending` `n` times (waking itself each time), then `Ready`.
struct YieldN(usize);

impl Future for YieldN {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            Poll::Ready(())
        } else {
            self.0 -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Polls `fut` up to `n` times and drops it; returns its output if it completed.
fn poll_n<F: Future>(fut: F, n: usize) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    (0..n).find_map(|_| match fut.as_mut().poll(&mut cx) {
        Poll::Ready(out) => Some(out),
        Poll::Pending => None,
    })
}

#[tokio::test]
async fn dropped_at_every_await_it_leaves_nothing_behind() {
    let mut completed_at = None;
    for n in 0..20 {
        let cache: Cache<u32, u32> = Cache::builder(10).clock(ManualClock::new()).build();
        let fut = cache.get_with_ttl(1, MINUTE, || async {
            YieldN(3).await;
            7
        });
        if let Some(v) = poll_n(fut, n) {
            assert_eq!(v, 7);
            assert_eq!(cache.get(&1), Some(7));
            completed_at = Some(n);
            break;
        }
        assert_eq!(
            cache.fills_in_flight(),
            0,
            "dropped after {n} polls left a fill"
        );
        assert_eq!(cache.get(&1), None, "nothing stored after {n} polls");
        assert_eq!(cache.get_with_ttl(1, MINUTE, || async { 8 }).await, 8);
    }
    assert_eq!(completed_at, Some(4), "3 yields + the final poll");
}
