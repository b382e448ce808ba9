//! One shared flight: the state a key's leader shares with the followers waiting on it.
//!
//! A flight only exists once somebody waits: a lone leader lives inline in its shard's table
//! (see `shard.rs`) and costs no allocation. When the first follower arrives (or a detached
//! fill's caller subscribes), the entry is upgraded, under the shard lock, to a `Flight` that
//! starts from the entry's lead; from then on the flight's [`Phase`] is authoritative.
//!
//! Every transition that ends a flight (finish, or a lead nobody can take) happens while the
//! shard lock is held and removes the flight's entry from the shard in the same critical
//! section, so **a flight found in a shard is always open**. Lock order: shard, then flight.

use std::sync::Arc as StdArc;
use std::task::Waker;

use tokio::time::Instant;

use crate::sync::Mutex;
use crate::waiters::Waiters;

/// The shared state of one fill for one key.
#[derive(Debug)]
pub(crate) struct Flight<V, E> {
    /// The key's hash under the group's hasher: where the flight's entry is in its shard.
    pub(crate) hash: u64,
    pub(crate) shard: usize,
    /// The identity of the flight's entry (see `shard::Entry::id`): found by this, never by
    /// key, so a newer entry for the same key is never touched.
    pub(crate) id: u64,
    pub(crate) state: Mutex<FlightState<V, E>>,
}

#[derive(Debug)]
pub(crate) struct FlightState<V, E> {
    pub(crate) phase: Phase<V, E>,
    pub(crate) waiters: Waiters,
}

/// Where a flight is in its life. `Open` is the only non-terminal phase.
#[derive(Debug)]
pub(crate) enum Phase<V, E> {
    /// Some future owns the right to fill.
    Open(Lead),
    /// The leader published. Followers take a reference under the lock and clone the value
    /// after releasing it, so a slow or panicking `V::clone` never runs under a lock.
    Done(Result<StdArc<V>, StdArc<E>>),
    /// Ended with no result and nobody able to take the lead; followers get `Abandoned`.
    Abandoned,
    /// Ended while nobody was waiting, so the result was not kept. Never observed by a follower:
    /// with no follower registered and the flight gone from its shard, none can arrive.
    Closed,
}

/// Who holds the lead of an open flight.
#[derive(Debug)]
pub(crate) struct Lead {
    /// Identifies the current holder; a [`Leader`](crate::Leader) whose token differs is stale.
    pub(crate) token: u64,
    /// When this holder got the lead; kept only when `takeover_after` is configured.
    pub(crate) since: Option<Instant>,
    /// The lead was handed to the follower in this slot, which has not yet been polled to take it.
    pub(crate) promoted: Option<usize>,
}

/// Wakers to call once every lock is released (never wake while holding a lock: the woken task
/// may run on another thread at once and contend for it).
#[derive(Debug, Default)]
#[must_use = "wakers must be woken after the locks are released"]
pub(crate) enum Wake {
    #[default]
    Nobody,
    One(Waker),
    /// The whole queue, taken out under the lock (no allocation there) and woken after.
    All(Waiters),
}

impl Wake {
    pub(crate) fn wake(self) {
        match self {
            Wake::Nobody => {}
            Wake::One(waker) => waker.wake(),
            Wake::All(waiters) => waiters.wake_all(),
        }
    }
}

impl<V, E> Flight<V, E> {
    /// A flight whose state (lead and first waiters) was set up before anyone could see it.
    pub(crate) fn new(hash: u64, shard: usize, id: u64, state: FlightState<V, E>) -> Self {
        Self {
            hash,
            shard,
            id,
            state: Mutex::new(state),
        }
    }
}

impl<V, E> FlightState<V, E> {
    /// An open flight led by `lead`, with nobody waiting yet.
    pub(crate) fn open(lead: Lead) -> Self {
        Self {
            phase: Phase::Open(lead),
            waiters: Waiters::default(),
        }
    }

    /// The lead token if the flight is open.
    pub(crate) fn open_token(&self) -> Option<u64> {
        match &self.phase {
            Phase::Open(lead) => Some(lead.token),
            _ => None,
        }
    }

    /// Ends the flight with `phase` and returns every follower's waker.
    pub(crate) fn end(&mut self, phase: Phase<V, E>) -> Wake {
        debug_assert!(!matches!(phase, Phase::Open(_)));
        self.phase = phase;
        if self.waiters.len() == 0 {
            return Wake::Nobody;
        }
        Wake::All(std::mem::take(&mut self.waiters))
    }

    /// Hands the lead to the oldest follower able to take it, under a fresh `token`.
    /// Returns `None`, changing nothing, when no follower can lead.
    pub(crate) fn promote_next(&mut self, token: u64, since: Option<Instant>) -> Option<Wake> {
        let (slot, waker) = self.waiters.first_able_to_lead()?;
        self.phase = Phase::Open(Lead {
            token,
            since,
            promoted: Some(slot),
        });
        Some(waker.map_or(Wake::Nobody, Wake::One))
    }
}
