//! One flight: the state shared by the leader of a key and the followers waiting on it.
//!
//! A flight is created by the first caller for a key and lives in its shard's map while it is
//! open. Every transition that ends a flight (finish, or a lead nobody can take) happens while
//! the shard lock is held and removes the flight from the map in the same critical section, so
//! **a flight found in the map is always open**. Lock order: shard map, then flight.

use std::sync::Arc as StdArc;
use std::task::Waker;

use tokio::time::Instant;

use crate::sync::Mutex;
use crate::waiters::Waiters;

/// The shared state of one fill for one key.
#[derive(Debug)]
pub(crate) struct Flight<K, V, E> {
    pub(crate) key: K,
    /// The key's hash under the group's hasher: how the flight is found in its shard's table.
    pub(crate) hash: u64,
    pub(crate) shard: usize,
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
    /// with no follower registered and the flight gone from the map, none can arrive.
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

impl<K, V, E> Flight<K, V, E> {
    pub(crate) fn new(key: K, hash: u64, shard: usize, lead: Lead) -> Self {
        Self {
            key,
            hash,
            shard,
            state: Mutex::new(FlightState {
                phase: Phase::Open(lead),
                waiters: Waiters::default(),
            }),
        }
    }
}

impl<V, E> FlightState<V, E> {
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
