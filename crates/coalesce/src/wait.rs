//! [`Wait`]: a follower's place in a flight's queue, as a future.

use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc as StdArc;
use std::task::{Context, Poll};

use crate::flight::{Flight, Phase, Wake};
use crate::group::Group;
use crate::lead::LeadId;
use crate::leader::Leader;
use crate::sync::Arc;
use crate::trace;
use crate::{FlightError, Joined};

/// Resolves to the flight's outcome, or to a [`Leader`] if the lead is handed to this follower.
///
/// Dropping it before it resolves removes the follower from the queue; a lead handed to it but
/// not yet taken passes to the next follower (the hand-off is never lost).
pub(crate) struct Wait<'g, K: Hash + Eq, V, E> {
    /// Borrowed (the `join`/`run` future that awaits this borrows the group anyway), and so is
    /// the [`Leader`] this follower becomes if handed the lead: never cloned.
    group: &'g Group<K, V, E>,
    flight: Arc<Flight<V, E>>,
    slot: usize,
    /// The caller's key, for the [`Leader`] it becomes if handed the lead (taken then).
    key: Option<K>,
    /// Set once the slot is gone (resolved); `Drop` then has nothing to undo.
    resolved: bool,
    /// When the wait began, for the follower-wait histogram.
    #[cfg(feature = "metrics")]
    started: std::time::Instant,
}

// Nothing is ever pinned through a `Wait`: the key is only moved out by value.
impl<K: Hash + Eq, V, E> Unpin for Wait<'_, K, V, E> {}

impl<'g, K: Hash + Eq, V, E> Wait<'g, K, V, E> {
    pub(crate) fn new(
        group: &'g Group<K, V, E>,
        flight: Arc<Flight<V, E>>,
        slot: usize,
        key: K,
    ) -> Self {
        Self {
            group,
            flight,
            slot,
            key: Some(key),
            resolved: false,
            #[cfg(feature = "metrics")]
            started: std::time::Instant::now(),
        }
    }

    pub(crate) fn shard(&self) -> usize {
        self.flight.shard
    }

    /// The caller's key, until it is handed the lead.
    pub(crate) fn key(&self) -> Option<&K> {
        self.key.as_ref()
    }
}

impl<'g, K: Hash + Eq, V: Clone, E> Future for Wait<'g, K, V, E> {
    type Output = Joined<'g, K, V, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        assert!(!this.resolved, "Wait polled after completion");
        let mut guard = this.flight.state.lock();
        let state = &mut *guard;
        let seen = match &mut state.phase {
            Phase::Done(Ok(value)) => Seen::Value(StdArc::clone(value)),
            Phase::Done(Err(error)) => Seen::Failed(StdArc::clone(error)),
            // `Closed` is only set when nobody waits; read defensively as abandoned.
            Phase::Abandoned | Phase::Closed => Seen::Abandoned,
            Phase::Open(lead) if lead.promoted == Some(this.slot) => {
                lead.promoted = None;
                state.waiters.remove(this.slot);
                Seen::Lead(lead.token)
            }
            Phase::Open(_) => {
                state.waiters.register(this.slot, cx.waker());
                return Poll::Pending;
            }
        };
        drop(guard);
        this.resolved = true;
        #[cfg(feature = "metrics")]
        this.group.inner.metrics.record_wait(this.started);
        Poll::Ready(match seen {
            // Cloned outside the lock: followers do not queue behind each other's clones.
            Seen::Value(value) => Joined::Done(Ok(V::clone(&value))),
            Seen::Failed(error) => Joined::Done(Err(FlightError::Failed(error))),
            Seen::Abandoned => Joined::Done(Err(FlightError::Abandoned)),
            Seen::Lead(token) => {
                let mut leader = Leader::new(
                    this.group,
                    this.key.take().expect("a wait resolves once"),
                    LeadId::of_flight(&this.flight, token),
                );
                if trace::enabled() {
                    trace::handed(this.group.inner.key_label, Some(leader.key()), token);
                    leader.trace_end();
                }
                Joined::Leader(leader)
            }
        })
    }
}

/// What a follower found when polled, taken out from under the flight lock.
enum Seen<V, E> {
    Value(StdArc<V>),
    Failed(StdArc<E>),
    Abandoned,
    Lead(u64),
}

impl<K: Hash + Eq, V, E> Drop for Wait<'_, K, V, E> {
    fn drop(&mut self) {
        if self.resolved {
            return;
        }
        // Dropped unresolved (cancelled, or given up at its timeout): the wait ends here.
        #[cfg(feature = "metrics")]
        self.group.inner.metrics.record_wait(self.started);
        let slot = self.slot;
        {
            // Fast path, flight lock only: a plain follower leaving, or a flight that ended
            // (its queue was drained, so there is no slot left to remove).
            let mut state = self.flight.state.lock();
            match &state.phase {
                Phase::Open(lead) if lead.promoted == Some(slot) => {}
                Phase::Open(_) => return state.waiters.remove(slot),
                _ => return,
            }
        }
        // The lead was handed to us and we leave without taking it: pass it on. That may end
        // the flight, which needs the shard lock, taken first (lock order), then re-checked.
        self.group.inner.with_locked(&self.flight, |locked| {
            let wake = match &locked.state.phase {
                Phase::Open(lead) if lead.promoted == Some(slot) => {
                    locked.state.waiters.remove(slot);
                    locked.pass_lead(Phase::Abandoned)
                }
                Phase::Open(_) => {
                    locked.state.waiters.remove(slot);
                    Wake::Nobody
                }
                _ => Wake::Nobody,
            };
            ((), wake)
        });
    }
}
