//! The behaviour `coalesce` promises, one test per rule: sharing, hand-off, generations,
//! timeouts (on tokio's paused clock), error policies and detached fills.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use coalesce::{ErrorPolicy, FlightError, Group, Joined};
use tokio::sync::oneshot;

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Polls `fut` once with a waker that does nothing.
fn poll_once<T>(fut: &mut BoxFut<'_, T>) -> Poll<T> {
    fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

fn follower(group: &Group<u32, u64, String>, key: u32) -> BoxFut<'_, Joined<'_, u32, u64, String>> {
    Box::pin(group.join(key))
}

/// Yields to the runtime until `cond` holds; panics rather than hang if it never does.
async fn until(mut cond: impl FnMut() -> bool) {
    for _ in 0..100_000 {
        if cond() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("condition never became true");
}

fn done(joined: Joined<'_, u32, u64, String>) -> Result<u64, FlightError<String>> {
    match joined {
        Joined::Done(result) => result,
        Joined::Leader(_) => panic!("expected a finished flight, got the lead"),
    }
}

#[tokio::test]
async fn leader_finish_wakes_every_follower_and_the_fill_runs_once() {
    let group: Group<u32, u64, String> = Group::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let (release, gate) = oneshot::channel::<()>();
    let mut gate = Some(gate);
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let group = group.clone();
        let calls = calls.clone();
        let gate = gate.take();
        tasks.push(tokio::spawn(async move {
            group
                .run(1, || async move {
                    calls.fetch_add(1, SeqCst);
                    if let Some(gate) = gate {
                        gate.await.unwrap();
                    }
                    Ok(7)
                })
                .await
        }));
    }
    // Let every task reach the flight before the leader may finish.
    until(|| group.stats().led + group.stats().joined >= 50).await;
    release.send(()).unwrap();
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(7));
    }
    assert_eq!(calls.load(SeqCst), 1);
    assert_eq!(group.in_flight(), 0);
    let stats = group.stats();
    assert_eq!((stats.led, stats.joined), (1, 49));
}

#[tokio::test]
async fn dropped_leader_hands_off_to_exactly_one_follower_in_fifo_order() {
    let group: Group<u32, u64, String> = Group::new();
    let Joined::Leader(leader) = group.join(1).await else {
        panic!("first caller leads")
    };
    let mut first = follower(&group, 1);
    let mut second = follower(&group, 1);
    let mut third = follower(&group, 1);
    for f in [&mut first, &mut second, &mut third] {
        assert!(poll_once(f).is_pending());
    }
    drop(leader);
    // Exactly the oldest follower is promoted; the others keep waiting.
    let Poll::Ready(Joined::Leader(new_leader)) = poll_once(&mut first) else {
        panic!("the oldest follower takes the lead")
    };
    assert!(poll_once(&mut second).is_pending());
    assert!(poll_once(&mut third).is_pending());
    assert_eq!(new_leader.finish(Ok(5)), Ok(5));
    assert_eq!(done(second.await), Ok(5));
    assert_eq!(done(third.await), Ok(5));
    assert_eq!(group.in_flight(), 0);
    let stats = group.stats();
    assert_eq!((stats.abandoned, stats.handed_off), (1, 1));
}

#[tokio::test]
async fn a_panicking_leader_hands_off_and_poisons_nothing() {
    let group: Group<u32, u64, String> = Group::new();
    let (entered_tx, entered) = oneshot::channel();
    let (panic_tx, panic_now) = oneshot::channel::<()>();
    let g = group.clone();
    let leader = tokio::spawn(async move {
        g.run(1, || async move {
            entered_tx.send(()).unwrap();
            panic_now.await.unwrap();
            panic!("the backend client blew up");
        })
        .await
    });
    entered.await.unwrap();
    let g = group.clone();
    let follower = tokio::spawn(async move { g.run(1, || async { Ok(9) }).await });
    until(|| group.stats().joined >= 1).await;
    panic_tx.send(()).unwrap();
    assert!(leader.await.unwrap_err().is_panic());
    // The follower ran its own fill: the panic was not re-raised in it.
    assert_eq!(follower.await.unwrap(), Ok(9));
    // And the group still works for the key.
    assert_eq!(group.run(1, || async { Ok(10) }).await, Ok(10));
    assert_eq!(group.in_flight(), 0);
}

#[tokio::test]
async fn a_cancelled_follower_leaves_the_queue_and_the_others_are_unaffected() {
    let group: Group<u32, u64, String> = Group::new();
    let Joined::Leader(leader) = group.join(1).await else {
        panic!()
    };
    let mut leaving = follower(&group, 1);
    let mut staying = follower(&group, 1);
    assert!(poll_once(&mut leaving).is_pending());
    assert!(poll_once(&mut staying).is_pending());
    drop(leaving);
    drop(leader);
    // The hand-off goes to the follower still there, not to the departed one.
    let Poll::Ready(Joined::Leader(l)) = poll_once(&mut staying) else {
        panic!("staying leads")
    };
    let _ = l.finish(Ok(1));
    assert_eq!(group.in_flight(), 0);
}

#[tokio::test]
async fn a_follower_cancelled_after_being_handed_the_lead_passes_it_on() {
    let group: Group<u32, u64, String> = Group::new();
    let Joined::Leader(leader) = group.join(1).await else {
        panic!()
    };
    let mut promoted = follower(&group, 1);
    let mut next = follower(&group, 1);
    assert!(poll_once(&mut promoted).is_pending());
    assert!(poll_once(&mut next).is_pending());
    drop(leader); // hands the lead to `promoted` ...
    drop(promoted); // ... which is cancelled before it was polled to take it.
    let Poll::Ready(Joined::Leader(l)) = poll_once(&mut next) else {
        panic!("the lead was passed on")
    };
    assert_eq!(l.finish(Ok(3)), Ok(3));
    assert_eq!(group.stats().handed_off, 2);
    assert_eq!(group.in_flight(), 0);
}

#[tokio::test]
async fn the_last_follower_cancelled_with_the_lead_releases_the_key() {
    let group: Group<u32, u64, String> = Group::new();
    let Joined::Leader(leader) = group.join(1).await else {
        panic!()
    };
    let mut only = follower(&group, 1);
    assert!(poll_once(&mut only).is_pending());
    drop(leader);
    drop(only);
    assert_eq!(group.in_flight(), 0);
    assert!(matches!(group.join(1).await, Joined::Leader(_)));
}

#[tokio::test]
async fn a_stale_leader_never_touches_a_newer_flight_for_the_same_key() {
    let group: Group<u32, u64, String> = Group::new();
    let Joined::Leader(old) = group.join(1).await else {
        panic!()
    };
    assert!(group.forget(&1));
    let Joined::Leader(new) = group.join(1).await else {
        panic!("a forgotten key leads afresh")
    };
    assert!(new.generation() > old.generation());
    let mut waiting_on_new = follower(&group, 1);
    assert!(poll_once(&mut waiting_on_new).is_pending());
    // The old guard finishes (or drops): the newer flight must stay as it is.
    assert_eq!(old.finish(Ok(1)), Ok(1));
    assert_eq!(group.in_flight(), 1);
    assert!(poll_once(&mut waiting_on_new).is_pending());
    let _ = new.finish(Ok(2));
    assert_eq!(done(waiting_on_new.await), Ok(2));
    assert_eq!(group.in_flight(), 0);
}

#[tokio::test]
async fn a_forgotten_flight_still_delivers_to_its_own_followers() {
    let group: Group<u32, u64, String> = Group::new();
    let Joined::Leader(old) = group.join(1).await else {
        panic!()
    };
    let mut waiting_on_old = follower(&group, 1);
    assert!(poll_once(&mut waiting_on_old).is_pending());
    assert_eq!(group.forget_all(), 1);
    let Joined::Leader(new) = group.join(1).await else {
        panic!()
    };
    let _ = old.finish(Ok(1));
    assert_eq!(done(waiting_on_old.await), Ok(1));
    let _ = new.finish(Ok(2));
    assert_eq!(group.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn wait_timeout_ends_the_wait_but_not_the_flight() {
    let group: Group<u32, u64, String> = Group::builder()
        .wait_timeout(Duration::from_secs(1))
        .build();
    let Joined::Leader(leader) = group.join(1).await else {
        panic!()
    };
    let g = group.clone();
    let impatient = tokio::spawn(async move { g.run(1, || async { Ok(0) }).await });
    // The paused clock auto-advances once every task is idle.
    assert_eq!(impatient.await.unwrap(), Err(FlightError::WaitTimedOut));
    assert_eq!(group.stats().wait_timeouts, 1);
    assert_eq!(group.in_flight(), 1, "the flight goes on");
    let g = group.clone();
    let patient = tokio::spawn(async move { g.run(1, || async { Ok(0) }).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = leader.finish(Ok(4));
    assert_eq!(patient.await.unwrap(), Ok(4));
}

#[tokio::test(start_paused = true)]
async fn takeover_after_replaces_a_stuck_leader_and_its_late_finish_is_ignored() {
    let group: Group<u32, u64, String> = Group::builder()
        .takeover_after(Duration::from_secs(10))
        .build();
    let Joined::Leader(stuck) = group.join(1).await else {
        panic!()
    };
    let mut early = follower(&group, 1);
    assert!(poll_once(&mut early).is_pending());
    tokio::time::advance(Duration::from_secs(5)).await;
    tokio::time::advance(Duration::from_secs(6)).await;
    let Joined::Leader(fresh) = group.join(1).await else {
        panic!("an old lead is taken over")
    };
    assert!(fresh.generation() > stuck.generation());
    assert!(!stuck.is_current());
    assert_eq!(group.stats().taken_over, 1);
    // The stuck leader wakes up late: it gets its own value back but publishes nothing.
    assert_eq!(stuck.finish(Ok(1)), Ok(1));
    assert!(poll_once(&mut early).is_pending());
    let _ = fresh.finish(Ok(2));
    assert_eq!(
        done(early.await),
        Ok(2),
        "waiters get the new leader's result"
    );
    assert_eq!(group.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_young_leader_is_not_taken_over() {
    let group: Group<u32, u64, String> = Group::builder()
        .takeover_after(Duration::from_secs(10))
        .build();
    let Joined::Leader(leader) = group.join(1).await else {
        panic!()
    };
    tokio::time::advance(Duration::from_secs(9)).await;
    let mut f = follower(&group, 1);
    assert!(
        poll_once(&mut f).is_pending(),
        "a 9 s old leader keeps the lead"
    );
    let _ = leader.finish(Ok(1));
    assert_eq!(done(f.await), Ok(1));
}

#[tokio::test]
async fn errors_are_shared_with_the_followers_of_that_moment_then_the_key_is_free() {
    let group: Group<u32, u64, String> = Group::new();
    let Joined::Leader(leader) = group.join(1).await else {
        panic!()
    };
    let mut a = follower(&group, 1);
    let mut b = follower(&group, 1);
    assert!(poll_once(&mut a).is_pending());
    assert!(poll_once(&mut b).is_pending());
    let own = leader.finish(Err("backend down".to_string()));
    let (Err(FlightError::Failed(ea)), Err(FlightError::Failed(eb)), Err(FlightError::Failed(e0))) =
        (done(a.await), done(b.await), own)
    else {
        panic!("everyone sees the failure")
    };
    assert!(
        Arc::ptr_eq(&ea, &eb) && Arc::ptr_eq(&ea, &e0),
        "one shared error, not copies"
    );
    assert_eq!(*ea, "backend down");
    assert_eq!(group.stats().failed, 1);
    // The next caller starts a fresh fill.
    assert_eq!(group.run(1, || async { Ok(8) }).await, Ok(8));
}

#[tokio::test]
async fn hand_off_policy_lets_the_next_follower_retry_after_an_error() {
    let group: Group<u32, u64, String> = Group::builder().on_error(ErrorPolicy::HandOff).build();
    let Joined::Leader(leader) = group.join(1).await else {
        panic!()
    };
    let mut retrier = follower(&group, 1);
    let mut other = follower(&group, 1);
    assert!(poll_once(&mut retrier).is_pending());
    assert!(poll_once(&mut other).is_pending());
    let own = leader.finish(Err("transient".into()));
    assert!(
        matches!(own, Err(FlightError::Failed(_))),
        "the failed leader sees its own error"
    );
    let Poll::Ready(Joined::Leader(l)) = poll_once(&mut retrier) else {
        panic!("next follower retries")
    };
    assert!(
        poll_once(&mut other).is_pending(),
        "the others wait for the retry"
    );
    let _ = l.finish(Ok(6));
    assert_eq!(done(other.await), Ok(6));
}

#[tokio::test]
async fn the_aborted_leader_task_of_the_rtcache_bug_leaves_nothing_stuck() {
    // The shape of pingora's RTCache bug: the leader enters its fill, the task running it is
    // aborted, and the next call for the key must run its own fill and return a value.
    let group: Group<&'static str, u64, String> = Group::new();
    let (entered_tx, entered) = oneshot::channel();
    let g = group.clone();
    let task = tokio::spawn(async move {
        g.run("k", || async move {
            entered_tx.send(()).unwrap();
            std::future::pending::<Result<u64, String>>().await
        })
        .await
    });
    entered.await.unwrap();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let next = tokio::time::timeout(Duration::from_secs(5), group.run("k", || async { Ok(1) }));
    assert_eq!(next.await.expect("the next call must not hang"), Ok(1));
    assert_eq!(group.in_flight(), 0);
}

#[tokio::test]
async fn run_detached_survives_its_caller() {
    let group: Group<u32, u64, String> = Group::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let (release, gate) = oneshot::channel::<()>();
    let c = calls.clone();
    let mut caller: BoxFut<'_, _> = {
        let group = group.clone();
        Box::pin(async move {
            group
                .run_detached(1, move || async move {
                    c.fetch_add(1, SeqCst);
                    gate.await.unwrap();
                    Ok(11)
                })
                .await
        })
    };
    assert!(poll_once(&mut caller).is_pending());
    let g = group.clone();
    let follower = tokio::spawn(async move { g.run(1, || async { Ok(0) }).await });
    until(|| group.stats().joined >= 1).await;
    drop(caller); // the client went away
    release.send(()).unwrap();
    assert_eq!(
        follower.await.unwrap(),
        Ok(11),
        "the fill finished without its caller"
    );
    assert_eq!(calls.load(SeqCst), 1);
    assert_eq!(group.in_flight(), 0);
}

#[tokio::test]
async fn a_dead_detached_fill_is_taken_over_by_a_follower() {
    let group: Group<u32, u64, String> = Group::new();
    let (panic_tx, panic_now) = oneshot::channel::<()>();
    let g = group.clone();
    let initiator = tokio::spawn(async move {
        g.run_detached(1, || async move {
            panic_now.await.unwrap();
            panic!("fill task died")
        })
        .await
    });
    until(|| group.stats().led >= 1).await;
    let g = group.clone();
    let follower = tokio::spawn(async move { g.run(1, || async { Ok(21) }).await });
    until(|| group.stats().joined >= 1).await;
    panic_tx.send(()).unwrap();
    assert_eq!(follower.await.unwrap(), Ok(21));
    assert_eq!(
        initiator.await.unwrap(),
        Ok(21),
        "the initiator gets the follower's result"
    );
    assert_eq!(group.in_flight(), 0);
}

#[tokio::test]
async fn a_dead_detached_fill_with_nobody_to_take_over_reports_abandoned() {
    let group: Group<u32, u64, String> = Group::new();
    let result = group
        .run_detached(1, || async { panic!("fill task died") })
        .await;
    assert_eq!(result, Err(FlightError::Abandoned));
    assert_eq!(group.in_flight(), 0);
    assert_eq!(group.run(1, || async { Ok(1) }).await, Ok(1));
}

#[test]
fn group_and_leader_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Group<String, Vec<u8>, std::io::Error>>();
    send_sync::<coalesce::Leader<'static, String, Vec<u8>, std::io::Error>>();
    send_sync::<coalesce::OwnedLeader<String, Vec<u8>, std::io::Error>>();
}

/// A value whose `Clone` panics: user code that must never run under a group lock.
#[derive(Debug)]
struct PanicsOnClone;

impl Clone for PanicsOnClone {
    fn clone(&self) -> Self {
        panic!("user clone panicked")
    }
}

#[tokio::test]
async fn a_value_whose_clone_panics_strands_no_flight() {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let group: Group<u32, PanicsOnClone, ()> = Group::new();
    let Joined::Leader(leader) = group.join(1).await else {
        panic!()
    };
    let mut waiting: BoxFut<'_, Joined<'_, u32, PanicsOnClone, ()>> = Box::pin(group.join(1));
    assert!(
        waiting
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    );
    // The leader's own copy is a clone (the follower still holds the shared value): it panics,
    // but only after the flight was settled and every lock released.
    let finished = catch_unwind(AssertUnwindSafe(move || leader.finish(Ok(PanicsOnClone))));
    assert!(finished.is_err());
    assert_eq!(group.in_flight(), 0, "the flight ended despite the panic");
    // The follower's clone panics in its own poll, not under a lock shared with others.
    let polled = catch_unwind(AssertUnwindSafe(|| {
        waiting
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
    }));
    assert!(polled.is_err());
    assert!(
        matches!(group.join(1).await, Joined::Leader(_)),
        "the key is free for a new fill"
    );
}

#[test]
fn an_absurd_shard_count_is_clamped_not_a_panic() {
    let group: Group<u32, u64, ()> = Group::builder().shards(usize::MAX).build();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(rt.block_on(group.run(1, || async { Ok(1) })), Ok(1));
}

#[tokio::test]
async fn an_owned_leader_keeps_the_lead_and_finishes_from_a_spawned_task() {
    let group: Group<u32, u64, String> = Group::new();
    let Joined::Leader(leader) = group.join(1).await else {
        panic!("the first caller leads")
    };
    let generation = leader.generation();
    let owned = leader.into_owned();
    // The lead moved: nothing was handed on or released.
    assert_eq!((owned.key(), owned.generation()), (&1, generation));
    assert!(owned.is_current());
    assert_eq!(group.in_flight(), 1);
    let mut waiting = follower(&group, 1);
    assert!(poll_once(&mut waiting).is_pending());
    let task = tokio::spawn(async move { owned.finish(Ok(5)) });
    assert_eq!(task.await.unwrap(), Ok(5));
    assert_eq!(done(waiting.await), Ok(5));
    assert_eq!(group.in_flight(), 0);
}

#[tokio::test]
async fn a_dropped_owned_leader_hands_the_lead_to_a_follower() {
    let group: Group<u32, u64, String> = Group::new();
    let Joined::Leader(leader) = group.join(1).await else {
        panic!("the first caller leads")
    };
    let owned = leader.into_owned();
    let mut waiting = follower(&group, 1);
    assert!(poll_once(&mut waiting).is_pending());
    tokio::spawn(async move { drop(owned) }).await.unwrap();
    let Poll::Ready(Joined::Leader(next)) = poll_once(&mut waiting) else {
        panic!("the follower is handed the lead")
    };
    assert_eq!(next.finish(Ok(6)), Ok(6));
    assert_eq!(group.stats().abandoned, 1);
    assert_eq!(group.in_flight(), 0);
}
