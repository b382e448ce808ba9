//! [`Join`]: the future [`Group::join`](crate::Group::join) returns, written by hand so that
//! its lead path can inline into the caller's own poll.
//!
//! As an `async fn`, `join` compiled to a coroutine that stayed out of line (it is polled from
//! more than one place), so the uncontended lead travelled through it: `enter` wrote the
//! `Joined` into the coroutine's state, which copied it to a temporary, then to its `Poll`
//! output, which the caller copied twice more before `finish` read it. Each hop reloads what
//! the previous one just stored (store-forwarding latency on the critical path to `finish`'s
//! lock). Here the first poll enters the key; a lead returns at once and inlines, and only a
//! follower goes out of line to build and poll the wait.

use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::Joined;
use crate::group::{Entered, Group};
use crate::trace;
use crate::wait::Wait;

pin_project! {
    /// Enters its key on the first poll; a follower then waits (with the group's timeout).
    #[project = JoinProj]
    pub(crate) enum Join<'g, K, V, E, F, W> {
        /// Not polled yet. `key` is taken by the first poll.
        Start {
            group: &'g Group<K, V, E>,
            key: Option<K>,
            // Makes the follower's wait: the group's `wait_with_timeout`, whose future type
            // cannot be named here.
            wait_for: F,
        },
        /// A follower waiting for the flight's outcome.
        Waiting {
            #[pin]
            wait: W,
        },
    }
}

impl<'g, K, V, E, F, W> Join<'g, K, V, E, F, W> {
    pub(crate) fn new(group: &'g Group<K, V, E>, key: K, wait_for: F) -> Self {
        Join::Start {
            group,
            key: Some(key),
            wait_for,
        }
    }
}

impl<'g, K, V, E, F, W> Future for Join<'g, K, V, E, F, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    F: FnOnce(&'g Group<K, V, E>, Wait<'g, K, V, E>) -> W + Copy,
    W: Future<Output = Joined<'g, K, V, E>>,
{
    type Output = Joined<'g, K, V, E>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let wait = match self.as_mut().project() {
            JoinProj::Start { group, key, .. } => {
                let key = key.take().expect("`join` future polled after completion");
                // Checked before anything is computed, so the untraced path is unchanged.
                let entered = match trace::enabled() {
                    false => group.enter_join(key),
                    true => group.enter_join_traced(key),
                };
                match entered {
                    Entered::Lead(joined) => return Poll::Ready(joined),
                    Entered::Follow(wait) => wait,
                }
            }
            JoinProj::Waiting { wait } => return wait.poll(cx),
        };
        self.start_waiting(wait, cx)
    }
}

impl<'g, K, V, E, F, W> Join<'g, K, V, E, F, W>
where
    K: Hash + Eq,
    F: FnOnce(&'g Group<K, V, E>, Wait<'g, K, V, E>) -> W + Copy,
    W: Future<Output = Joined<'g, K, V, E>>,
{
    /// The first poll of a follower: from now on the future is its wait. Out of line, so
    /// that the lead path stays small enough to inline.
    #[inline(never)]
    fn start_waiting(
        mut self: Pin<&mut Self>,
        wait: Wait<'g, K, V, E>,
        cx: &mut Context<'_>,
    ) -> Poll<Joined<'g, K, V, E>> {
        let JoinProj::Start {
            group, wait_for, ..
        } = self.as_mut().project()
        else {
            unreachable!("a follower starts waiting from the first poll");
        };
        trace::joined(group.inner.key_label, wait.key());
        let wait = (*wait_for)(*group, wait);
        self.set(Join::Waiting { wait });
        match self.project() {
            JoinProj::Waiting { wait } => wait.poll(cx),
            JoinProj::Start { .. } => unreachable!("just set"),
        }
    }
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use std::pin::pin;

    use futures::FutureExt;

    use crate::{Group, Joined};

    #[test]
    fn a_join_dropped_before_its_first_poll_enters_nothing() {
        let group: Group<u32, u32> = Group::new();
        drop(group.join(1));
        assert_eq!((group.in_flight(), group.stats().led), (0, 0));
        let Some(Joined::Leader(leader)) = group.join(1).now_or_never() else {
            panic!("nobody else leads the key")
        };
        assert_eq!(leader.finish(Ok(1)), Ok(1));
        assert_eq!(group.in_flight(), 0);
    }

    #[test]
    fn a_follower_polled_again_keeps_its_place_and_gets_the_value() {
        let group: Group<u32, u32> = Group::new();
        let Some(Joined::Leader(leader)) = group.join(1).now_or_never() else {
            panic!("a fresh key leads")
        };
        let mut follower = pin!(group.join(1));
        // The first poll enters as a follower, the second polls the same wait.
        assert!(follower.as_mut().now_or_never().is_none());
        assert!(follower.as_mut().now_or_never().is_none());
        assert_eq!(group.stats().joined, 1);
        assert_eq!(leader.finish(Ok(7)), Ok(7));
        let Some(Joined::Done(done)) = follower.as_mut().now_or_never() else {
            panic!("the follower gets the leader's value")
        };
        assert_eq!((done, group.in_flight()), (Ok(7), 0));
    }

    #[test]
    #[should_panic(expected = "polled after completion")]
    fn a_lead_polled_again_panics_instead_of_entering_twice() {
        let group: Group<u32, u32> = Group::new();
        let mut join = pin!(group.join(1));
        let Some(Joined::Leader(leader)) = join.as_mut().now_or_never() else {
            panic!("a fresh key leads")
        };
        assert_eq!(leader.finish(Ok(1)), Ok(1));
        let _ = join.as_mut().now_or_never();
    }
}
