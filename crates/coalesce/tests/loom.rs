//! Loom models of the flight state machine: every interleaving of leaders finishing or being
//! dropped, followers joining, waiting, being promoted and being cancelled.
//!
//! Run with `cargo xtask loom coalesce`. Each model keeps to three threads or fewer so that a
//! preemption bound of 2 explores it fully in seconds. The std `Arc`/`Mutex` here only carry a
//! spawned fill's join handle back to the model, never anything the models check.
#![cfg(herd_loom)]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc as StdArc, Mutex as StdMutex};
use std::task::{Context, Waker};
use std::time::Duration;

use coalesce::{ErrorPolicy, FlightError, Group, Joined, Leader, ManualClock, OwnedLeader, Spawn};
use loom::future::block_on;
use loom::thread;

type G = Group<u8, u32, ()>;
type Fut = Pin<Box<dyn Future<Output = Owned> + Send>>;

/// What a follower moved to another thread resolves to: [`Joined`], with a lead made owned
/// (the thread outlives the borrow of the group).
enum Owned {
    Leader(OwnedLeader<u8, u32, ()>),
    Done(Result<u32, FlightError<()>>),
}

impl From<Joined<'_, u8, u32, ()>> for Owned {
    fn from(joined: Joined<'_, u8, u32, ()>) -> Self {
        match joined {
            Joined::Leader(leader) => Owned::Leader(leader.into_owned()),
            Joined::Done(result) => Owned::Done(result),
        }
    }
}

fn group() -> G {
    Group::builder().shards(1).build()
}

/// A follower already queued on the flight for `key` (polled once so it is registered), ready
/// to be moved to another thread.
fn queued_follower(group: &G, key: u8) -> Fut {
    let g = group.clone();
    let mut fut: Fut = Box::pin(async move { Owned::from(g.join(key).await) });
    assert!(
        fut.as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    );
    fut
}

/// Leads `key` (borrowing `group`; `into_owned` to move the lead to another thread).
fn lead(group: &G, key: u8) -> Leader<'_, u8, u32, ()> {
    match block_on(group.join(key)) {
        Joined::Leader(leader) => leader,
        Joined::Done(_) => panic!("expected to lead"),
    }
}

/// Resolves a follower: finishing with `value` if it was handed the lead. Returns
/// (value seen, whether it led).
fn settle(joined: Joined<'_, u8, u32, ()>, value: u32) -> (u32, bool) {
    match joined {
        Joined::Leader(leader) => (leader.finish(Ok(value)).unwrap(), true),
        Joined::Done(result) => (result.unwrap(), false),
    }
}

/// [`settle`] for a follower that resolved on another thread (its lead, if any, is owned).
fn settle_owned(owned: Owned, value: u32) -> (u32, bool) {
    match owned {
        Owned::Leader(leader) => (leader.finish(Ok(value)).unwrap(), true),
        Owned::Done(result) => (result.unwrap(), false),
    }
}

#[test]
fn leader_finish_wakes_all_followers() {
    loom::model(|| {
        let group = group();
        let leader = lead(&group, 1);
        let followers: Vec<_> = (0..2).map(|_| queued_follower(&group, 1)).collect();
        let handles: Vec<_> = followers
            .into_iter()
            .map(|f| thread::spawn(move || block_on(f)))
            .collect();
        leader.finish(Ok(7)).unwrap();
        for h in handles {
            assert_eq!(settle_owned(h.join().unwrap(), 0), (7, false));
        }
        assert_eq!(group.in_flight(), 0);
    });
}

#[test]
fn leader_cancelled_with_two_followers_promotes_exactly_one() {
    loom::model(|| {
        let group = group();
        let leader = lead(&group, 1).into_owned();
        let a = queued_follower(&group, 1);
        let b = queued_follower(&group, 1);
        let dropper = thread::spawn(move || drop(leader));
        let ta = thread::spawn(move || settle_owned(block_on(a), 1));
        let (vb, led_b) = settle_owned(block_on(b), 2);
        let (va, led_a) = ta.join().unwrap();
        dropper.join().unwrap();
        assert!(led_a ^ led_b, "exactly one follower leads");
        assert_eq!(va, vb, "the other receives the new leader's value");
        assert_eq!(group.in_flight(), 0);
    });
}

#[test]
fn promoted_follower_cancelled_before_poll_passes_the_lead_on() {
    loom::model(|| {
        let group = group();
        let leader = lead(&group, 1).into_owned();
        let first = queued_follower(&group, 1);
        let second = queued_follower(&group, 1);
        let dropper = thread::spawn(move || drop(leader));
        // `first` may be handed the lead at any point; it is dropped without being polled again.
        let canceller = thread::spawn(move || drop(first));
        let (value, led) = settle_owned(block_on(second), 3);
        dropper.join().unwrap();
        canceller.join().unwrap();
        assert_eq!(
            (value, led),
            (3, true),
            "the lead reached the remaining follower"
        );
        assert_eq!(group.in_flight(), 0);
    });
}

#[test]
fn join_racing_finish_never_hangs() {
    loom::model(|| {
        let group = group();
        let leader = lead(&group, 1);
        let g = group.clone();
        let joiner = thread::spawn(move || settle(block_on(g.join(1)), 2));
        leader.finish(Ok(1)).unwrap();
        let (value, led) = joiner.join().unwrap();
        // Either it joined in time and got 1, or it came after the end and led its own fill.
        assert!((value, led) == (1, false) || (value, led) == (2, true));
        assert_eq!(group.in_flight(), 0);
    });
}

#[test]
fn follower_cancel_racing_finish() {
    loom::model(|| {
        let group = group();
        let leader = lead(&group, 1);
        let leaving = queued_follower(&group, 1);
        let staying = queued_follower(&group, 1);
        let canceller = thread::spawn(move || drop(leaving));
        let waiter = thread::spawn(move || settle_owned(block_on(staying), 0));
        leader.finish(Ok(5)).unwrap();
        canceller.join().unwrap();
        assert_eq!(waiter.join().unwrap(), (5, false));
        assert_eq!(group.in_flight(), 0);
    });
}

#[test]
fn stale_guard_cannot_remove_a_newer_flight() {
    loom::model(|| {
        let group = group();
        let old = lead(&group, 1).into_owned();
        assert!(group.forget(&1));
        let new = lead(&group, 1);
        let on_new = queued_follower(&group, 1);
        let stale = thread::spawn(move || drop(old));
        let waiter = thread::spawn(move || settle_owned(block_on(on_new), 0));
        new.finish(Ok(2)).unwrap();
        stale.join().unwrap();
        assert_eq!(waiter.join().unwrap(), (2, false));
        assert_eq!(group.in_flight(), 0);
    });
}

#[test]
fn map_is_empty_after_all_flights_end() {
    loom::model(|| {
        let group = group();
        let spawn_run = |value: u32| {
            let g = group.clone();
            thread::spawn(move || block_on(g.run(1, || async move { Ok(value) })).unwrap())
        };
        let a = spawn_run(1);
        let b = spawn_run(2);
        // A third caller leads and is cancelled, racing the two others.
        if let Joined::Leader(leader) = block_on(group.join(1)) {
            drop(leader);
        }
        let (va, vb) = (a.join().unwrap(), b.join().unwrap());
        assert!([1, 2].contains(&va) && [1, 2].contains(&vb));
        assert_eq!(group.in_flight(), 0);
    });
}

/// The first follower upgrades a lone entry to a shared flight while the leader finishes:
/// the follower either joined in time (gets the value) or arrived after the end (leads).
#[test]
fn lone_to_shared_upgrade_racing_finish() {
    loom::model(|| {
        let group = group();
        let leader = lead(&group, 1);
        let g = group.clone();
        let first = thread::spawn(move || settle(block_on(g.join(1)), 2));
        let g = group.clone();
        let second = thread::spawn(move || settle(block_on(g.join(1)), 3));
        leader.finish(Ok(1)).unwrap();
        let (a, b) = (first.join().unwrap(), second.join().unwrap());
        // A follower got the first leader's value, or that of the other caller if it led a
        // fresh flight after the first one ended.
        for ((value, led), other) in [(a, b), (b, a)] {
            if !led {
                assert!(
                    value == 1 || (other.1 && value == other.0),
                    "follower saw {value}"
                );
            }
        }
        assert_eq!(group.in_flight(), 0);
    });
}

/// The first follower upgrades a lone entry while the leader is dropped: the follower is
/// either promoted (the upgrade came first) or leads a fresh entry; never hangs.
#[test]
fn lone_to_shared_upgrade_racing_leader_drop() {
    loom::model(|| {
        let group = group();
        let leader = lead(&group, 1);
        let g = group.clone();
        let joiner = thread::spawn(move || settle(block_on(g.join(1)), 2));
        drop(leader);
        assert_eq!(joiner.join().unwrap(), (2, true));
        assert_eq!(group.in_flight(), 0);
        assert_eq!(group.stats().abandoned, 1);
    });
}

/// `forget` detaches a shared flight (followers waiting): its leader still publishes to them,
/// racing a newer caller that leads a fresh flight for the same key.
#[test]
fn forgotten_shared_flight_still_publishes_to_its_followers() {
    loom::model(|| {
        let group = group();
        let old = lead(&group, 1);
        let on_old = queued_follower(&group, 1);
        assert!(group.forget(&1));
        assert_eq!(group.in_flight(), 0, "a forgotten flight is not in flight");
        let waiter = thread::spawn(move || settle_owned(block_on(on_old), 0));
        let g = group.clone();
        let newer = thread::spawn(move || block_on(g.run(1, || async { Ok(9) })).unwrap());
        old.finish(Ok(5)).unwrap();
        assert_eq!(waiter.join().unwrap(), (5, false));
        assert_eq!(
            newer.join().unwrap(),
            9,
            "a caller after forget leads afresh"
        );
        assert_eq!(group.in_flight(), 0);
    });
}

/// The leader of a forgotten shared flight is dropped: its follower, found in the side table,
/// is promoted and finishes, racing a newer caller's fresh flight.
#[test]
fn forgotten_shared_flight_hands_its_lead_on() {
    loom::model(|| {
        let group = group();
        let old = lead(&group, 1);
        let on_old = queued_follower(&group, 1);
        assert!(group.forget(&1));
        let waiter = thread::spawn(move || settle_owned(block_on(on_old), 4));
        let g = group.clone();
        let newer = thread::spawn(move || block_on(g.run(1, || async { Ok(9) })).unwrap());
        drop(old);
        assert_eq!(waiter.join().unwrap(), (4, true));
        assert_eq!(newer.join().unwrap(), 9);
        assert_eq!(group.in_flight(), 0);
        assert_eq!(group.stats().handed_off, 1);
    });
}

// The models below cover what the ones above do not: takeover, `ErrorPolicy::HandOff`, the
// wait timeout, detached fills' subscribers and a refresh's stand-down. Where the real code
// waits on tokio (a timer, a spawned task, the clock), the model drives the crate's own
// transition through a loom-visible seam (`src/loom_seams.rs`). Each checks the invariants:
// one leader at a time (exactly one caller leads each flight), every waiter woken (loom
// reports a thread parked for ever as a deadlock), removal only by identity (a stale lead
// never ends a newer flight: its followers get the newer leader's value), and counters that
// agree with what the callers saw.

/// What one caller ended with; a caller handed the lead finishes with the value it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Led(u32),
    Got(u32),
    WaitTimedOut,
    Abandoned,
    Failed,
}

fn of_result(result: Result<u32, FlightError<()>>) -> Outcome {
    match result {
        Ok(value) => Outcome::Got(value),
        Err(FlightError::WaitTimedOut) => Outcome::WaitTimedOut,
        Err(FlightError::Abandoned) => Outcome::Abandoned,
        Err(FlightError::Failed(_)) => Outcome::Failed,
        Err(other) => panic!("unexpected {other:?}"),
    }
}

fn outcome(joined: Joined<'_, u8, u32, ()>, value: u32) -> Outcome {
    match joined {
        Joined::Leader(leader) => {
            assert!(leader.is_current(), "a caller handed the lead holds it");
            assert_eq!(leader.finish(Ok(value)), Ok(value));
            Outcome::Led(value)
        }
        Joined::Done(result) => of_result(result),
    }
}

fn outcome_owned(owned: Owned, value: u32) -> Outcome {
    match owned {
        Owned::Leader(leader) => {
            assert!(leader.is_current(), "a caller handed the lead holds it");
            assert_eq!(leader.finish(Ok(value)), Ok(value));
            Outcome::Led(value)
        }
        Owned::Done(result) => of_result(result),
    }
}

/// A "give up" raised by another thread: what a `wait_timeout`'s timer does, which loom
/// cannot see. Waits on it register a waker like any future, and raising it wakes them.
#[derive(Clone, Default)]
struct GiveUp(loom::sync::Arc<loom::sync::Mutex<(bool, Option<Waker>)>>);

impl GiveUp {
    fn raise(&self) {
        let waker = {
            let mut state = self.0.lock().unwrap();
            state.0 = true;
            state.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    async fn raised(self) {
        std::future::poll_fn(|cx| {
            let mut state = self.0.lock().unwrap();
            if state.0 {
                return std::task::Poll::Ready(());
            }
            state.1 = Some(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await
    }
}

/// A follower (queued before this returns) that gives up when `give_up` is raised, through
/// the group's own wait-timeout path.
fn impatient_follower(group: &G, key: u8, give_up: &GiveUp) -> Fut {
    let g = group.clone();
    let give_up = give_up.clone();
    let mut fut: Fut =
        Box::pin(async move { Owned::from(g.loom_join_or_give_up(key, give_up.raised()).await) });
    assert!(
        fut.as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    );
    fut
}

/// The wait timeout races a hand-off: the leader is dropped while its oldest follower's wait
/// runs out. The lead reaches a follower that stays, whichever comes first; a follower handed
/// the lead as it gave up passes it on.
#[test]
fn wait_timeout_racing_a_hand_off() {
    loom::model(|| {
        let group = group();
        let leader = lead(&group, 1);
        let give_up = GiveUp::default();
        let impatient = impatient_follower(&group, 1, &give_up);
        let patient = queued_follower(&group, 1);
        let impatient = thread::spawn(move || outcome_owned(block_on(impatient), 1));
        let timer = thread::spawn(move || give_up.raise());
        drop(leader);
        let patient = outcome_owned(block_on(patient), 2);
        let impatient = impatient.join().unwrap();
        timer.join().unwrap();
        let stats = group.stats();
        match impatient {
            Outcome::Led(1) => {
                assert_eq!(patient, Outcome::Got(1));
                assert_eq!(stats.handed_off, 1);
            }
            Outcome::WaitTimedOut => {
                assert_eq!(
                    patient,
                    Outcome::Led(2),
                    "the lead reached the follower that stayed"
                );
                // 2 when the impatient follower was handed the lead as it gave up.
                assert!([1, 2].contains(&stats.handed_off), "{stats:?}");
            }
            other => panic!("the impatient follower ended with {other:?}"),
        }
        let timed_out = u64::from(impatient == Outcome::WaitTimedOut);
        assert_eq!(
            (
                stats.led,
                stats.joined,
                stats.abandoned,
                stats.wait_timeouts
            ),
            (1, 2, 1, timed_out)
        );
        assert_eq!(group.in_flight(), 0);
    });
}

/// The wait timeout races the leader's finish: the follower gets the value or gives up, the
/// leader's finish is unaffected, and the timeout is counted exactly when it was returned.
#[test]
fn wait_timeout_racing_finish() {
    loom::model(|| {
        let group = group();
        let leader = lead(&group, 1);
        let give_up = GiveUp::default();
        let impatient = impatient_follower(&group, 1, &give_up);
        let impatient = thread::spawn(move || outcome_owned(block_on(impatient), 1));
        let timer = thread::spawn(move || give_up.raise());
        assert_eq!(leader.finish(Ok(7)), Ok(7));
        let impatient = impatient.join().unwrap();
        timer.join().unwrap();
        assert!(
            [Outcome::Got(7), Outcome::WaitTimedOut].contains(&impatient),
            "{impatient:?}"
        );
        let stats = group.stats();
        assert_eq!(
            stats.wait_timeouts,
            u64::from(impatient == Outcome::WaitTimedOut)
        );
        assert_eq!((stats.handed_off, stats.abandoned), (0, 0));
        assert_eq!(group.in_flight(), 0);
    });
}

/// A group whose leads may be taken over once `clock` says they are 10 s old.
fn takeover_group(clock: &ManualClock) -> G {
    Group::builder()
        .shards(1)
        .takeover_after(Duration::from_secs(10))
        .loom_clock(clock.clone())
        .build()
}

/// A leader grown too old is taken over by a newer caller while it finishes: its late finish
/// publishes nothing and ends nothing (the entry is the newer lead's now); the follower that
/// queued under it gets the newer leader's value. If the old leader finished first, the newer
/// caller simply leads a fresh flight.
#[test]
fn takeover_of_a_too_old_leader_ignores_its_late_finish() {
    loom::model(|| {
        let clock = ManualClock::default();
        let group = takeover_group(&clock);
        let old = lead(&group, 1).into_owned();
        let follower = queued_follower(&group, 1);
        clock.advance(Duration::from_secs(10));
        let late = thread::spawn(move || old.finish(Ok(1)));
        let follower = thread::spawn(move || outcome_owned(block_on(follower), 3));
        let newer = outcome(block_on(group.join(1)), 2);
        assert_eq!(
            late.join().unwrap(),
            Ok(1),
            "a stale leader gets its own result"
        );
        let follower = follower.join().unwrap();
        let stats = group.stats();
        assert_eq!(
            newer,
            Outcome::Led(2),
            "the newer caller leads, by takeover or afresh"
        );
        if stats.taken_over == 1 {
            assert_eq!(
                follower,
                Outcome::Got(2),
                "the stale finish published nothing"
            );
            assert_eq!(stats.led, 1);
        } else {
            assert_eq!(follower, Outcome::Got(1));
            assert_eq!(stats.led, 2);
        }
        assert_eq!((stats.handed_off, stats.abandoned), (0, 0));
        assert_eq!(group.in_flight(), 0);
    });
}

/// A leader grown too old is dropped while a newer caller takes it over: a lead taken over
/// hands nothing on. Whichever came first, one caller leads the flight at a time.
#[test]
fn takeover_racing_the_old_leaders_drop() {
    loom::model(|| {
        let clock = ManualClock::default();
        let group = takeover_group(&clock);
        let old = lead(&group, 1).into_owned();
        let follower = queued_follower(&group, 1);
        clock.advance(Duration::from_secs(10));
        let dropper = thread::spawn(move || drop(old));
        let follower = thread::spawn(move || outcome_owned(block_on(follower), 3));
        let newer = outcome(block_on(group.join(1)), 2);
        dropper.join().unwrap();
        let follower = follower.join().unwrap();
        let stats = group.stats();
        if stats.taken_over == 1 {
            assert_eq!((newer, follower), (Outcome::Led(2), Outcome::Got(2)));
            assert_eq!(stats.handed_off, 0, "a stale drop hands nothing on");
        } else {
            // The drop came first: the follower was handed a fresh (young) lead; the newer
            // caller joined it, or led afresh once it had ended.
            assert_eq!(follower, Outcome::Led(3));
            assert!(
                [Outcome::Got(3), Outcome::Led(2)].contains(&newer),
                "{newer:?}"
            );
            assert_eq!(stats.handed_off, 1);
        }
        assert_eq!(stats.abandoned, 1);
        assert_eq!(group.in_flight(), 0);
    });
}

fn hand_off_group() -> G {
    Group::builder()
        .shards(1)
        .on_error(ErrorPolicy::HandOff)
        .build()
}

/// Under `ErrorPolicy::HandOff` a failed leader keeps its error and exactly one follower is
/// handed the flight; the other gets that follower's value.
#[test]
fn hand_off_policy_retries_with_exactly_one_follower() {
    loom::model(|| {
        let group = hand_off_group();
        let leader = lead(&group, 1).into_owned();
        let a = queued_follower(&group, 1);
        let b = queued_follower(&group, 1);
        let failing = thread::spawn(move || leader.finish(Err(())));
        let a = thread::spawn(move || outcome_owned(block_on(a), 1));
        let b = outcome_owned(block_on(b), 2);
        let a = a.join().unwrap();
        assert_eq!(of_result(failing.join().unwrap()), Outcome::Failed);
        assert!(
            (a, b) == (Outcome::Led(1), Outcome::Got(1))
                || (a, b) == (Outcome::Got(2), Outcome::Led(2)),
            "{a:?} {b:?}"
        );
        let stats = group.stats();
        assert_eq!((stats.failed, stats.handed_off, stats.abandoned), (1, 1, 0));
        assert_eq!(group.in_flight(), 0);
    });
}

/// Under `ErrorPolicy::HandOff` the follower next in line leaves as the leader fails: the
/// retry reaches the follower that stays.
#[test]
fn hand_off_policy_skips_a_follower_that_leaves() {
    loom::model(|| {
        let group = hand_off_group();
        let leader = lead(&group, 1).into_owned();
        let leaving = queued_follower(&group, 1);
        let staying = queued_follower(&group, 1);
        let failing = thread::spawn(move || leader.finish(Err(())));
        let canceller = thread::spawn(move || drop(leaving));
        let staying = outcome_owned(block_on(staying), 2);
        assert_eq!(staying, Outcome::Led(2));
        assert_eq!(of_result(failing.join().unwrap()), Outcome::Failed);
        canceller.join().unwrap();
        let stats = group.stats();
        // 2 when the leaving follower was handed the flight and passed it on.
        assert!([1, 2].contains(&stats.handed_off), "{stats:?}");
        assert_eq!((stats.failed, stats.abandoned), (1, 0));
        assert_eq!(group.in_flight(), 0);
    });
}

/// Runs a detached fill on a loom thread, or drops it unpolled (a runtime shutting down).
struct OnLoomThread {
    dies: bool,
    task: StdArc<StdMutex<Option<thread::JoinHandle<()>>>>,
}

impl Spawn for OnLoomThread {
    fn spawn<T: Future<Output = ()> + Send + 'static>(self, task: T) {
        let dies = self.dies;
        let handle = thread::spawn(move || {
            if dies {
                drop(task);
            } else {
                block_on(task);
            }
        });
        *self.task.lock().unwrap() = Some(handle);
    }
}

type DetachedFut = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// A caller of `run_detached` that led (nobody else has entered the key yet), whose fill
/// (`result`, on a loom thread, or dying there) is spawned and who is subscribed to it; returns
/// its future and the fill's thread.
fn detached_caller(
    group: &G,
    result: Result<u32, ()>,
    dies: bool,
) -> (DetachedFut, thread::JoinHandle<()>) {
    let task = StdArc::new(StdMutex::new(None));
    let spawner = OnLoomThread {
        dies,
        task: StdArc::clone(&task),
    };
    let g = group.clone();
    let mut fut: DetachedFut = Box::pin(async move {
        of_result(
            g.loom_run_detached_on(1, move || async move { result }, spawner)
                .await,
        )
    });
    // The first poll leads, subscribes and spawns the fill, then waits for it (unless the
    // fill's thread already ran to its end: loom may switch to it at the spawn).
    if let std::task::Poll::Ready(early) =
        fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    {
        fut = Box::pin(async move { early });
    }
    let task = task.lock().unwrap().take().expect("the fill was spawned");
    (fut, task)
}

/// A detached fill publishes to the caller that started it (a follower that cannot lead),
/// racing a newer caller that joins the flight or leads afresh after it.
#[test]
fn detached_fill_publishes_to_its_subscriber() {
    loom::model(|| {
        let group = group();
        let (caller, task) = detached_caller(&group, Ok(7), false);
        let caller = thread::spawn(move || block_on(caller));
        let newer = outcome(block_on(group.join(1)), 5);
        assert_eq!(caller.join().unwrap(), Outcome::Got(7));
        task.join().unwrap();
        assert!(
            [Outcome::Got(7), Outcome::Led(5)].contains(&newer),
            "{newer:?}"
        );
        let stats = group.stats();
        assert_eq!((stats.handed_off, stats.abandoned), (0, 0));
        assert_eq!(group.in_flight(), 0);
    });
}

/// A detached fill dies before publishing: its lead skips the subscriber (whose fill is spent)
/// and goes to a follower able to lead; with none, the subscriber gets `Abandoned` and the
/// key is free for the next caller.
#[test]
fn detached_fill_that_dies_passes_its_lead_past_its_subscriber() {
    loom::model(|| {
        let group = group();
        let (caller, task) = detached_caller(&group, Ok(7), true);
        let caller = thread::spawn(move || block_on(caller));
        let newer = outcome(block_on(group.join(1)), 5);
        let caller = caller.join().unwrap();
        task.join().unwrap();
        assert_eq!(newer, Outcome::Led(5), "nobody else can fill");
        let stats = group.stats();
        match caller {
            Outcome::Got(5) => assert_eq!((stats.handed_off, stats.led), (1, 1)),
            Outcome::Abandoned => assert_eq!((stats.handed_off, stats.led), (0, 2)),
            other => panic!("the subscriber ended with {other:?}"),
        }
        assert_eq!(stats.abandoned, 1);
        assert_eq!(group.in_flight(), 0);
    });
}

/// Under `ErrorPolicy::HandOff` a detached fill fails: a follower able to lead retries; with
/// none, the subscriber (which cannot lead) gets the error rather than waiting for ever.
#[test]
fn detached_fill_failing_under_hand_off_reaches_its_subscriber() {
    loom::model(|| {
        let group = hand_off_group();
        let (caller, task) = detached_caller(&group, Err(()), false);
        let caller = thread::spawn(move || block_on(caller));
        let newer = outcome(block_on(group.join(1)), 5);
        let caller = caller.join().unwrap();
        task.join().unwrap();
        // A follower able to lead is always handed the retry, so the newer caller leads:
        // the retry (the subscriber gets its value) or, after the flight ended, afresh.
        assert_eq!(newer, Outcome::Led(5));
        let stats = group.stats();
        match caller {
            Outcome::Got(5) => assert_eq!((stats.handed_off, stats.led), (1, 1)),
            Outcome::Failed => assert_eq!((stats.handed_off, stats.led), (0, 2)),
            other => panic!("the subscriber ended with {other:?}"),
        }
        assert_eq!((stats.failed, stats.abandoned), (1, 0));
        assert_eq!(group.in_flight(), 0);
    });
}

/// A distributed refresh that finds the fill lease held elsewhere stands down: its lead goes
/// to the oldest local follower (as a drop would hand it) but is not counted as abandoned.
#[test]
fn refresh_stand_down_hands_the_lead_on_without_counting_an_abandon() {
    loom::model(|| {
        let group = group();
        let refresh = lead(&group, 1);
        let queued = queued_follower(&group, 1);
        let queued = thread::spawn(move || outcome_owned(block_on(queued), 1));
        let g = group.clone();
        let newer = thread::spawn(move || outcome(block_on(g.join(1)), 2));
        refresh.loom_stand_down();
        assert_eq!(
            queued.join().unwrap(),
            Outcome::Led(1),
            "the oldest follower leads"
        );
        let newer = newer.join().unwrap();
        assert!(
            [Outcome::Got(1), Outcome::Led(2)].contains(&newer),
            "{newer:?}"
        );
        let stats = group.stats();
        assert_eq!((stats.abandoned, stats.handed_off), (0, 1));
        assert_eq!(stats.led, 1 + u64::from(newer == Outcome::Led(2)));
        assert_eq!(group.in_flight(), 0);
    });
}
