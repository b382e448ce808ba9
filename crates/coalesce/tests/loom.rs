//! Loom models of the flight state machine: every interleaving of leaders finishing or being
//! dropped, followers joining, waiting, being promoted and being cancelled.
//!
//! Run with `cargo xtask loom coalesce`. Each model keeps to three threads or fewer so that a
//! preemption bound of 2 explores it fully in seconds.
#![cfg(herd_loom)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};

use coalesce::{FlightError, Group, Joined, Leader, OwnedLeader};
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
