//! The guards that own a key's right to fill and hand it on if dropped: [`Leader`], which
//! borrows its group (what [`Group::join`] returns), and [`OwnedLeader`], which holds a clone
//! of it (for a lead that must be `'static`: moved into a spawned task or a long-lived struct).
//!
//! Both hold their own copy of the key and the lead's identity ([`LeadId`]); what finishing
//! or dropping a lead does lives in `lead.rs`, shared with `run`'s borrowed guard, which is
//! the very guard inside a [`Leader`].

use std::fmt;
use std::hash::Hash;

use crate::FlightError;
use crate::group::Group;
use crate::lead::{LeadGuard, LeadId};
use crate::trace;
#[cfg(feature = "tokio")]
use crate::wait::Wait;

/// Proof that this caller leads the flight for a key: it must produce the value and call
/// [`finish`](Leader::finish).
///
/// The leader can do its own work with the value (insert it into a store, say) before
/// finishing, so followers never wake to a store that has not been written yet.
///
/// It borrows its [`Group`] (no reference count is touched to lead). A lead that must outlive
/// the borrow (moved into `tokio::spawn`, kept in a `'static` struct) is turned into an
/// [`OwnedLeader`] with [`into_owned`](Leader::into_owned).
///
/// Dropping a `Leader` without finishing (cancellation, a panic, an aborted task) hands the
/// flight to exactly one waiting follower, oldest first, which becomes the new leader. With
/// nobody waiting, the key is released.
#[must_use = "dropping a Leader without `finish` hands the fill to the next follower"]
// `repr(C)`, key first: the guard's last word (its `Armed` flag) is the niche that `Joined`
// and the `Poll` around it keep their tags in, so it is the value's last word and a move of
// it copies the payload from offset 0 in the same 16-byte pieces that wrote it (with the
// tag first, the copies straddled the stores and stalled; measured: ~77 ns per join+finish
// with this layout, ~86 ns with the default one).
#[repr(C)]
pub struct Leader<'g, K: Hash + Eq, V, E> {
    key: K,
    guard: LeadGuard<'g, K, V, E>,
}

impl<K: Hash + Eq + fmt::Debug, V, E> fmt::Debug for Leader<'_, K, V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("key", &self.key)
            .field("generation", &self.guard.lead().token)
            .finish()
    }
}

impl<'g, K: Hash + Eq, V, E> Leader<'g, K, V, E> {
    pub(crate) fn new(group: &'g Group<K, V, E>, key: K, lead: LeadId) -> Self {
        Self {
            guard: LeadGuard::new(group, lead),
            key,
        }
    }

    /// The key this leader fills.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// This lead's generation: unique within the group, and strictly greater than the
    /// generation of every earlier lead of the same key. A store can use it to fence writes.
    pub fn generation(&self) -> u64 {
        self.guard.lead().token
    }

    /// Whether this is still the flight's current leader: false once a newer leader took over
    /// (after `takeover_after`), in which case [`finish`](Leader::finish) publishes nothing.
    pub fn is_current(&self) -> bool {
        self.guard.is_current()
    }

    /// Steps aside with nothing to publish: the flight is handed to a waiting follower able
    /// to lead, as when this leader is dropped, but the group does not count it as abandoned.
    /// (For `DistributedGroup::refresh` standing down.)
    #[cfg(feature = "tokio")]
    pub(crate) fn stand_down(self) {
        let generation = self.generation();
        let label = self.guard.group().inner.key_label;
        trace::stood_down(label, Some(&self.key), generation);
        self.guard.stand_down();
    }

    /// Marks this lead's end as traced (a subscriber listened when it was taken).
    pub(crate) fn trace_end(&mut self) {
        self.guard.trace();
    }

    /// Emits the event of this lead's start (a takeover if it replaced an older lead), and
    /// marks its end as traced.
    #[cold]
    #[inline(never)]
    pub(crate) fn trace_lead(&mut self) {
        self.guard.trace();
        let lead = self.guard.lead();
        let label = self.guard.group().inner.key_label;
        // A lead made on entry has the token its entry was created with, unless it took over.
        trace::led(label, Some(&self.key), lead.token, lead.token != lead.id);
    }

    /// The same lead, holding a clone of the group instead of borrowing it (one reference
    /// count increment), so that it can move into a spawned task or a `'static` struct. The
    /// lead itself moves: nothing is finished or handed on, and the [`OwnedLeader`] has this
    /// leader's duties (finish it, or its `Drop` hands the flight on).
    pub fn into_owned(self) -> OwnedLeader<K, V, E> {
        let Leader { guard, key } = self;
        let group = guard.group().clone();
        #[cfg(feature = "metrics")]
        let started = guard.started();
        // The lead now belongs to the `OwnedLeader`: the borrowed guard stands down.
        let lead = guard.into_lead();
        OwnedLeader::new(
            group,
            key,
            lead,
            #[cfg(feature = "metrics")]
            started,
        )
    }
}

impl<K: Hash + Eq, V: Clone, E> Leader<'_, K, V, E> {
    /// Publishes `result` to every follower and ends the flight. Returns this caller's own
    /// outcome (an error as [`FlightError::Failed`], shared with the followers).
    ///
    /// Under [`ErrorPolicy::HandOff`](crate::ErrorPolicy::HandOff) an error is not shared: the
    /// next follower able to lead is handed the flight and retries (followers that cannot lead
    /// still get the error if nobody can). A stale leader (taken over after `takeover_after`)
    /// publishes nothing; it still gets its own result back.
    #[inline(always)]
    pub fn finish(self, result: Result<V, E>) -> Result<V, FlightError<E>> {
        // Decided when the lead was taken (one look at the subscriber per fill), and checked
        // first, so that the untraced path is exactly `finish_quietly`'s.
        if self.guard.is_traced() {
            return self.finish_traced(result);
        }
        self.finish_quietly(result)
    }

    /// [`finish`](Leader::finish) without its event, for a caller that emits its own.
    #[inline(always)]
    pub(crate) fn finish_quietly(mut self, result: Result<V, E>) -> Result<V, FlightError<E>> {
        // In place, never moved out of `self` (that copied it across the pieces that wrote
        // it: a store-forwarding stall, as in `lead.rs`), and the lead's identity goes to the
        // lock in registers. The key (user code) is dropped with `self`, after every lock is
        // released.
        self.guard.finish_in_leader(result)
    }

    /// [`finish`](Leader::finish) with a subscriber listening: finishes, then emits the event.
    #[cold]
    #[inline(never)]
    fn finish_traced(mut self, result: Result<V, E>) -> Result<V, FlightError<E>> {
        let outcome = self.guard.finish_in_leader(result);
        let label = self.guard.group().inner.key_label;
        trace::finished(label, Some(&self.key), self.generation(), &outcome, None);
        outcome
    }
}

/// A [`Leader`] that owns a clone of its [`Group`] rather than borrowing it, so it is
/// `'static` whenever `K`, `V` and `E` are: made by [`Leader::into_owned`], for a fill that
/// moves into a spawned task or is kept in a long-lived struct.
///
/// Same duties as a [`Leader`]: call [`finish`](OwnedLeader::finish); dropping it unfinished
/// (cancellation, a panic, an aborted task) hands the flight to exactly one waiting follower,
/// oldest first, or releases the key if nobody waits.
#[must_use = "dropping an OwnedLeader without `finish` hands the fill to the next follower"]
pub struct OwnedLeader<K: Hash + Eq, V, E> {
    group: Group<K, V, E>,
    key: K,
    lead: LeadId,
    finished: bool,
    /// When the lead was taken, for the fill-duration histogram.
    #[cfg(feature = "metrics")]
    started: std::time::Instant,
}

impl<K: Hash + Eq + fmt::Debug, V, E> fmt::Debug for OwnedLeader<K, V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedLeader")
            .field("key", &self.key)
            .field("generation", &self.lead.token)
            .finish()
    }
}

impl<K: Hash + Eq, V, E> OwnedLeader<K, V, E> {
    fn new(
        group: Group<K, V, E>,
        key: K,
        lead: LeadId,
        #[cfg(feature = "metrics")] started: std::time::Instant,
    ) -> Self {
        Self {
            group,
            key,
            lead,
            finished: false,
            #[cfg(feature = "metrics")]
            started,
        }
    }

    /// The key this leader fills.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// As [`Leader::generation`].
    pub fn generation(&self) -> u64 {
        self.lead.token
    }

    /// As [`Leader::is_current`].
    pub fn is_current(&self) -> bool {
        self.group.inner.lead_is_current(&self.lead)
    }
}

impl<K: Hash + Eq, V: Clone, E> OwnedLeader<K, V, E> {
    /// As [`Leader::finish`]: publishes `result` to every follower and ends the flight.
    /// Returns this caller's own outcome.
    pub fn finish(mut self, result: Result<V, E>) -> Result<V, FlightError<E>> {
        let outcome = self.group.inner.finish_lead(&self.lead, result);
        // The flight is settled; only now may `Drop` stand down (had `finish_lead` panicked,
        // `Drop` would have handed the flight on).
        self.finished = true;
        #[cfg(feature = "metrics")]
        (self.group.inner.metrics).record_fill(self.started, outcome.is_ok());
        let label = self.group.inner.key_label;
        trace::finished(label, Some(&self.key), self.lead.token, &outcome, None);
        outcome
    }

    /// Registers the leader's own caller as a follower that cannot lead, before the fill moves
    /// to another task: the caller then waits for the result like any follower, borrowing
    /// `group` (this leader's own group: the leader itself moves to the task). `None` if this
    /// lead was taken over meanwhile (the flight may even have ended already).
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

impl<K: Hash + Eq, V, E> Drop for OwnedLeader<K, V, E> {
    fn drop(&mut self) {
        if !self.finished {
            self.group.inner.abandon_lead(&self.lead);
            let label = self.group.inner.key_label;
            trace::abandoned(label, Some(&self.key), self.lead.token);
        }
    }
}
