//! Cancellation sweeps: callers dropped after every possible number of polls.
//!
//! A fill here takes `STEPS` polls to complete. For every N, the leader is polled N times and
//! then dropped (with followers waiting); the sweep is repeated with a second cancellation of
//! whoever was handed the lead. After each run every remaining follower must complete with a
//! value, the fill must have run at most (cancellations + 1) times, and no flight may remain.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::task::{Context, Poll, Waker};

use coalesce::Group;

const STEPS: usize = 4;
const FOLLOWERS: usize = 3;

type BoxFut = Pin<Box<dyn Future<Output = Result<u64, coalesce::FlightError<()>>>>>;

/// Completes after being polled `steps` times, waking itself in between.
struct Steps(usize);

impl Future for Steps {
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

fn caller(group: &Group<u8, u64, ()>, calls: &Arc<AtomicUsize>, value: u64) -> BoxFut {
    let (group, calls) = (group.clone(), calls.clone());
    Box::pin(async move {
        group
            .run(1, || async move {
                calls.fetch_add(1, SeqCst);
                Steps(STEPS).await;
                Ok(value)
            })
            .await
    })
}

fn poll(fut: &mut BoxFut) -> Poll<Result<u64, coalesce::FlightError<()>>> {
    fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

/// Polls until ready (every future here wakes itself or is woken by a finish).
fn drive(mut fut: BoxFut) -> Result<u64, coalesce::FlightError<()>> {
    for _ in 0..10_000 {
        if let Poll::Ready(out) = poll(&mut fut) {
            return out;
        }
    }
    panic!("future never completed: a caller is stuck");
}

/// Polls `fut` up to `n` times; returns whether it completed (then it was not cancelled).
fn poll_n(fut: &mut BoxFut, n: usize) -> bool {
    (0..n).any(|_| poll(fut).is_ready())
}

#[test]
fn leader_dropped_after_every_number_of_polls() {
    for n in 0..=STEPS + 1 {
        let group = Group::<u8, u64, ()>::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let mut leader = caller(&group, &calls, 100);
        let leader_done = poll_n(&mut leader, n.min(1));
        assert!(!leader_done);
        let mut followers: Vec<_> = (0..FOLLOWERS)
            .map(|i| caller(&group, &calls, i as u64))
            .collect();
        for f in &mut followers {
            assert!(poll(f).is_pending(), "followers queue behind the leader");
        }
        let completed = poll_n(&mut leader, n.saturating_sub(1));
        drop(leader);
        let cancellations = usize::from(!completed);
        let results: Vec<_> = followers.into_iter().map(drive).collect();
        let first = results[0].clone().expect("every follower gets a value");
        assert!(
            results.iter().all(|r| r.as_ref() == Ok(&first)),
            "one value for all: {results:?}"
        );
        assert!(
            calls.load(SeqCst) <= cancellations + 1,
            "n={n}: fill ran {} times",
            calls.load(SeqCst)
        );
        assert_eq!(group.in_flight(), 0, "n={n}");
    }
}

#[test]
fn leader_then_promoted_follower_dropped_after_every_number_of_polls() {
    for n1 in 0..=STEPS + 1 {
        for n2 in 0..=STEPS + 1 {
            let group = Group::<u8, u64, ()>::new();
            let calls = Arc::new(AtomicUsize::new(0));
            let mut leader = caller(&group, &calls, 100);
            assert!(poll(&mut leader).is_pending());
            let mut next = caller(&group, &calls, 200);
            assert!(poll(&mut next).is_pending());
            let rest: Vec<_> = (0..FOLLOWERS)
                .map(|i| {
                    let mut f = caller(&group, &calls, i as u64);
                    assert!(poll(&mut f).is_pending());
                    f
                })
                .collect();
            let mut cancellations = 0;
            if !poll_n(&mut leader, n1) {
                cancellations += 1;
            }
            drop(leader);
            // `next` is the oldest follower: handed the lead (if the leader did not finish),
            // it is cancelled after n2 polls, possibly before ever taking the lead.
            if !poll_n(&mut next, n2) {
                cancellations += 1;
            }
            drop(next);
            let results: Vec<_> = rest.into_iter().map(drive).collect();
            assert!(
                results.iter().all(|r| r.is_ok()),
                "n1={n1} n2={n2}: {results:?}"
            );
            assert!(calls.load(SeqCst) <= cancellations + 1, "n1={n1} n2={n2}");
            assert_eq!(group.in_flight(), 0, "n1={n1} n2={n2}");
        }
    }
}

#[test]
fn followers_dropped_after_every_number_of_polls_leave_the_flight_intact() {
    for n in 0..=3 {
        let group = Group::<u8, u64, ()>::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let mut leader = caller(&group, &calls, 100);
        assert!(poll(&mut leader).is_pending());
        let mut leaving = caller(&group, &calls, 1);
        let staying = {
            let mut f = caller(&group, &calls, 2);
            assert!(poll(&mut f).is_pending());
            f
        };
        poll_n(&mut leaving, n);
        drop(leaving);
        assert_eq!(drive(leader), Ok(100));
        assert_eq!(drive(staying), Ok(100));
        assert_eq!(calls.load(SeqCst), 1);
        assert_eq!(group.in_flight(), 0);
    }
}
