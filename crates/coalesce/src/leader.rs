//! [`Leader`]: the guard that owns a key's right to fill, and hands it on if dropped.
//!
//! It holds its group, its own copy of the key and the lead's identity ([`LeadId`]); what
//! finishing or dropping it does lives in `lead.rs`, shared with `run`'s borrowed guard.

use std::fmt;
use std::hash::Hash;

use crate::FlightError;
use crate::group::Group;
use crate::lead::LeadId;
#[cfg(feature = "tokio")]
use crate::wait::Wait;

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
    key: K,
    lead: LeadId,
    finished: bool,
}

impl<K: Hash + Eq, V, E> fmt::Debug for Leader<K, V, E>
where
    K: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("key", &self.key)
            .field("generation", &self.lead.token)
            .finish()
    }
}

impl<K: Hash + Eq, V, E> Leader<K, V, E> {
    pub(crate) fn new(group: Group<K, V, E>, key: K, lead: LeadId) -> Self {
        Self {
            group,
            key,
            lead,
            finished: false,
        }
    }

    /// The key this leader fills.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// This lead's generation: unique within the group, and strictly greater than the
    /// generation of every earlier lead of the same key. A store can use it to fence writes.
    pub fn generation(&self) -> u64 {
        self.lead.token
    }

    /// Whether this is still the flight's current leader: false once a newer leader took over
    /// (after `takeover_after`), in which case [`finish`](Leader::finish) publishes nothing.
    pub fn is_current(&self) -> bool {
        self.group.inner.lead_is_current(&self.lead)
    }
}

impl<K: Hash + Eq, V: Clone, E> Leader<K, V, E> {
    /// Publishes `result` to every follower and ends the flight. Returns this caller's own
    /// outcome (an error as [`FlightError::Failed`], shared with the followers).
    ///
    /// Under [`ErrorPolicy::HandOff`](crate::ErrorPolicy::HandOff) an error is not shared: the
    /// next follower able to lead is handed the flight and retries (followers that cannot lead
    /// still get the error if nobody can). A stale leader (superseded after `takeover_after`)
    /// publishes nothing; it still gets its own result back.
    pub fn finish(mut self, result: Result<V, E>) -> Result<V, FlightError<E>> {
        let outcome = self.group.inner.finish_lead(&self.lead, result);
        // The flight is settled; only now may `Drop` stand down (had `finish_lead` panicked,
        // `Drop` would have handed the flight on).
        self.finished = true;
        outcome
    }

    /// Registers the leader's own caller as a follower that cannot lead, before the fill moves
    /// to another task: the caller then waits for the result like any follower, borrowing
    /// `group` (this leader's own group: the leader itself moves to the task). `None` if this
    /// lead was superseded meanwhile (the flight may even have ended already).
    #[cfg(feature = "tokio")]
    pub(crate) fn subscribe<'g>(&self, group: &'g Group<K, V, E>) -> Option<Wait<'g, K, V, E>>
    where
        K: Clone,
    {
        debug_assert!(crate::sync::Arc::ptr_eq(&group.inner, &self.group.inner));
        // Cloned before any lock (user code); this follower never leads, so never uses it.
        let key = self.key.clone();
        let (flight, slot) = self.group.inner.subscribe_lead(&self.lead)?;
        Some(Wait::new(group, flight, slot, key))
    }
}

impl<K: Hash + Eq, V, E> Drop for Leader<K, V, E> {
    fn drop(&mut self) {
        if !self.finished {
            self.group.inner.abandon_lead(&self.lead);
        }
    }
}
