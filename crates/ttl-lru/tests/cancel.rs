//! Cancellation sweeps: every read-through future is polled N times with a no-op waker and then
//! dropped, for every N until it completes. After each drop nothing may be left in flight, nothing
//! half-done may be in the store, and the next call must work.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::Notify;
use ttl_lru::{Cache, ManualClock, Source};

#[derive(Debug)]
struct Boom;

/// Returns `Pending` `n` times (waking itself each time), then `Ready`: a fill with `n` awaits.
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

fn forever(_: &u64) -> Duration {
    Duration::MAX
}

/// Polls `fut` up to `n` times; returns its output if it completed.
fn poll_n<F: Future>(fut: F, n: usize) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..n {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return Some(out);
        }
    }
    None
}

#[tokio::test]
async fn leader_dropped_at_every_await() {
    let mut completed_at = None;
    for n in 0..20 {
        let c: Cache<u64, u64> = Cache::builder(10).clock(ManualClock::new()).build();
        let fut = c.get_or_try_insert(1, forever, || async {
            YieldN(4).await;
            Ok::<u64, Boom>(7)
        });
        match poll_n(fut, n) {
            Some(out) => {
                let got = out.unwrap();
                assert_eq!((got.value, got.source), (7, Source::Filled));
                assert_eq!(c.get(&1), Some(7));
                completed_at = Some(n);
                break;
            }
            None => {
                assert_eq!(
                    c.fills_in_flight(),
                    0,
                    "dropped after {n} polls left a fill"
                );
                assert_eq!(c.get(&1), None, "nothing half-done stored after {n} polls");
                let next = c
                    .get_or_try_insert(1, forever, || async { Ok::<u64, Boom>(8) })
                    .await
                    .unwrap();
                assert_eq!((next.value, next.source), (8, Source::Filled));
            }
        }
    }
    assert_eq!(completed_at, Some(5), "4 yields + the final poll");
}

#[tokio::test]
async fn follower_dropped_at_every_await() {
    for n in 0..6 {
        let c: Cache<u64, u64> = Cache::builder(10).clock(ManualClock::new()).build();
        let gate = Arc::new(Notify::new());
        let g = Arc::clone(&gate);
        let c1 = c.clone();
        let leader = tokio::spawn(async move {
            c1.get_or_try_insert(1, forever, move || async move {
                g.notified().await;
                Ok::<u64, Boom>(1)
            })
            .await
        });
        tokio::task::yield_now().await;
        assert_eq!(c.fills_in_flight(), 1);
        let follower = c.get_or_try_insert(1, forever, || async { Ok::<u64, Boom>(2) });
        assert!(
            poll_n(follower, n).is_none(),
            "a follower cannot finish before the leader"
        );
        gate.notify_waiters();
        assert_eq!(leader.await.unwrap().unwrap().value, 1);
        assert_eq!(c.fills_in_flight(), 0);
        assert_eq!(c.get(&1), Some(1));
    }
}

#[tokio::test]
async fn detached_caller_dropped_at_every_await() {
    for n in 0..6 {
        let c: Cache<u64, u64> = Cache::builder(10).clock(ManualClock::new()).build();
        let fut = c.get_or_try_insert_detached(
            1,
            forever,
            || async {
                YieldN(3).await;
                Ok::<u64, Boom>(5)
            },
            Duration::from_secs(60),
        );
        let out = poll_n(fut, n);
        // Give a dropped caller's detached task time to finish on the runtime.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(c.fills_in_flight(), 0, "after {n} polls");
        if n == 0 {
            assert_eq!(c.get(&1), None, "never polled: nothing started");
        } else {
            assert_eq!(
                c.get(&1),
                Some(5),
                "the detached fill outlived its caller ({n} polls)"
            );
        }
        if let Some(out) = out {
            assert_eq!(out.unwrap().value, 5);
        }
    }
}
