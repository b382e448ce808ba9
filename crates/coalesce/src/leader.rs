//! [`Leader`]: the guard that owns a flight's right to fill, and hands it on if dropped.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc as StdArc;

use crate::flight::{Flight, Phase, Wake};
use crate::group::Group;
use crate::stats::Event;
use crate::sync::Arc;
#[cfg(feature = "tokio")]
use crate::wait::Wait;
use crate::{ErrorPolicy, FlightError};

/// Proof that this caller leads the flight for a key: it must produce the value and call
/// [`finish`](Leader::finish).
///
/// The leader can do its own work with the value (insert it into a store, say) before
/// finishing, so followers never wake to a store that has not been written yet.
///
/// Dropping a `Leader` without finishing (cancellation, a panic, an aborted task) hands the
/// flight to exactly one waiting follower, oldest first, which becomes the new leader. With
/// nobody waiting, the key is released.
#[must_use = "dropping a Leader without `finish` hands the fill to the next follower"]
pub struct Leader<K: Hash + Eq, V, E> {
    group: Group<K, V, E>,
    flight: Arc<Flight<K, V, E>>,
    token: u64,
    finished: bool,
}

impl<K: Hash + Eq, V, E> fmt::Debug for Leader<K, V, E>
where
    K: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("key", &self.flight.key)
            .field("generation", &self.token)
            .finish()
    }
}

impl<K: Hash + Eq, V, E> Leader<K, V, E> {
    pub(crate) fn new(group: Group<K, V, E>, flight: Arc<Flight<K, V, E>>, token: u64) -> Self {
        Self {
            group,
            flight,
            token,
            finished: false,
        }
    }

    /// The key this leader fills.
    pub fn key(&self) -> &K {
        &self.flight.key
    }

    /// This lead's generation: unique within the group, and strictly greater than the
    /// generation of every earlier lead of the same key. A store can use it to fence writes.
    pub fn generation(&self) -> u64 {
        self.token
    }

    /// Whether this is still the flight's current leader: false once a newer leader took over
    /// (after `takeover_after`), in which case [`finish`](Leader::finish) publishes nothing.
    pub fn is_current(&self) -> bool {
        self.flight.state.lock().open_token() == Some(self.token)
    }
}

impl<K: Hash + Eq, V: Clone, E> Leader<K, V, E> {
    /// Publishes `result` to every follower and ends the flight. Returns this caller's own
    /// outcome (an error as [`FlightError::Failed`], shared with the followers).
    ///
    /// Under [`ErrorPolicy::HandOff`] an error is not shared: the next follower able to lead is
    /// handed the flight and retries (followers that cannot lead still get the error if nobody
    /// can). A stale leader (superseded after `takeover_after`) publishes nothing; it still gets
    /// its own result back.
    pub fn finish(mut self, result: Result<V, E>) -> Result<V, FlightError<E>> {
        let policy = self.group.inner.config.on_error;
        let token = self.token;
        let result = result.map_err(StdArc::new);
        // No user code runs under the locks: a value to share is moved into an `Arc`, and
        // every clone of it (ours included) happens after they are released.
        let own = self.group.inner.with_locked(&self.flight, |locked| {
            if locked.state.open_token() != Some(token) {
                return (Own::Kept(result), Wake::Nobody);
            }
            match result {
                Ok(value) if locked.state.waiters.len() == 0 => {
                    (Own::Kept(Ok(value)), locked.end(Phase::Closed))
                }
                Ok(value) => {
                    let shared = StdArc::new(value);
                    let wake = locked.end(Phase::Done(Ok(StdArc::clone(&shared))));
                    (Own::Shared(shared), wake)
                }
                Err(error) => {
                    locked.stats().record(Event::Failed);
                    let shared = Phase::Done(Err(StdArc::clone(&error)));
                    let wake = match policy {
                        ErrorPolicy::Share => locked.end(shared),
                        ErrorPolicy::HandOff => locked.pass_lead(shared),
                    };
                    (Own::Kept(Err(error)), wake)
                }
            }
        });
        // The flight is settled; only now may `Drop` stand down (had anything above panicked,
        // `Drop` would have handed the flight on).
        self.finished = true;
        match own {
            Own::Kept(result) => result.map_err(FlightError::Failed),
            Own::Shared(value) => Ok(StdArc::unwrap_or_clone(value)),
        }
    }

    /// Registers the leader's own caller as a follower that cannot lead, before the fill moves
    /// to another task: the caller then waits for the result like any follower. `None` if this
    /// lead was superseded meanwhile (the flight may even have ended already).
    #[cfg(feature = "tokio")]
    pub(crate) fn subscribe(&self) -> Option<Wait<K, V, E>> {
        let mut state = self.flight.state.lock();
        if state.open_token() != Some(self.token) {
            return None;
        }
        let slot = state.waiters.push(false, None);
        drop(state);
        Some(Wait::new(
            self.group.clone(),
            Arc::clone(&self.flight),
            slot,
        ))
    }
}

/// What `finish` hands back to its own caller.
enum Own<V, E> {
    Kept(Result<V, StdArc<E>>),
    Shared(StdArc<V>),
}

impl<K: Hash + Eq, V, E> Drop for Leader<K, V, E> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let token = self.token;
        self.group.inner.with_locked(&self.flight, |locked| {
            locked.stats().record(Event::Abandoned);
            if locked.state.open_token() != Some(token) {
                // Superseded: the flight belongs to a newer leader now.
                return ((), Wake::Nobody);
            }
            ((), locked.pass_lead(Phase::Abandoned))
        });
    }
}
