//! What finishing or dropping a lead does, for the borrowed guard [`LeadGuard`] (inside the
//! public [`Leader`](crate::Leader), and [`Group::run`](crate::Group::run)'s own guard) and
//! for the public [`OwnedLeader`](crate::OwnedLeader).
//!
//! A lead is named by a [`LeadId`] (where its entry is, which entry, which lead of it), not by
//! a reference count: a lone lead, the uncontended case, is finished with one shard lock, one
//! lookup and one removal, with no flight lock, no allocation and no `Arc` traffic. Only when
//! the entry has been upgraded to a shared flight (somebody waits) does the flight protocol run.
//!
//! Every path checks the lead's token first: a lead replaced by a takeover (or whose entry
//! is gone) changes nothing and publishes nothing.
//!
//! Two code shapes here are deliberate, found with `perf` on the uncontended benchmark. A
//! locked instruction (lock or unlock) drains the store buffer; values stored *after* the
//! last one and then reloaded by the caller with wider or offset loads stall on store
//! forwarding (~10 ns each). So `finish_lead` returns while its guard is still held (the
//! answer is written before the unlock), and a guard finishes by reference, in place: `run`'s
//! is not moved out of the `run` future, nor a [`Leader`](crate::Leader)'s out of the leader.

use std::hash::Hash;
use std::sync::Arc as StdArc;

use crate::ErrorPolicy;
use crate::FlightError;
use crate::flight::{Flight, Phase, Wake};
use crate::group::{Group, Inner};
use crate::shard::ShardMap;
use crate::stats::Event;
use crate::sync::{Arc, MutexGuard};
use crate::trace;

/// Which lead of which entry: the identity every lead transition goes by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeadId {
    pub(crate) shard: usize,
    pub(crate) hash: u64,
    /// The entry's identity (see `shard::Entry::id`).
    pub(crate) id: u64,
    /// This lead's token: the generation reported by [`Leader`](crate::Leader).
    pub(crate) token: u64,
}

impl LeadId {
    /// The lead handed to a follower of `flight` under `token`.
    pub(crate) fn of_flight<V, E>(flight: &Flight<V, E>, token: u64) -> Self {
        Self {
            shard: flight.shard,
            hash: flight.hash,
            id: flight.id,
            token,
        }
    }
}

/// What `finish` hands back to its own caller.
enum Own<V, E> {
    Kept(Result<V, StdArc<E>>),
    Shared(StdArc<V>),
}

impl<V: Clone, E> Own<V, E> {
    fn into_result(self) -> Result<V, FlightError<E>> {
        match self {
            Own::Kept(result) => result.map_err(FlightError::Failed),
            Own::Shared(value) => Ok(StdArc::unwrap_or_clone(value)),
        }
    }
}

impl<K: Hash + Eq, V: Clone, E> Inner<K, V, E> {
    /// Publishes `result` for `lead` and ends its flight, as
    /// [`Leader::finish`](crate::Leader::finish) documents. Returns the caller's own outcome.
    /// For `run`'s guard and [`OwnedLeader`](crate::OwnedLeader); a [`Leader`](crate::Leader)
    /// uses [`finish_lead_parts`](Inner::finish_lead_parts).
    #[inline(never)]
    pub(crate) fn finish_lead(
        &self,
        lead: &LeadId,
        result: Result<V, E>,
    ) -> Result<V, FlightError<E>> {
        self.finish_in_place(lead, result)
    }

    /// [`finish_lead`](Inner::finish_lead) with the lead's identity in registers, for a
    /// [`Leader`](crate::Leader): the `Leader`'s address is then never taken, so the compiler
    /// reads its fields where the `join` future's output left them instead of first copying
    /// the whole `Leader` into a place of its own (store-forwarding hops on the way to the
    /// lock; measured: join+finish ~70 -> ~64 ns). Not for `run`'s guard, which lives in the
    /// `run` future and was just written there with 16-byte stores: loading its fields one by
    /// one before the call stalled on store forwarding (measured: `run` ~62 -> ~66-69 ns).
    #[inline(never)]
    pub(crate) fn finish_lead_parts(
        &self,
        shard: usize,
        hash: u64,
        id: u64,
        token: u64,
        result: Result<V, E>,
    ) -> Result<V, FlightError<E>> {
        let lead = LeadId {
            shard,
            hash,
            id,
            token,
        };
        self.finish_in_place(&lead, result)
    }

    /// The body of [`finish_lead`](Inner::finish_lead) and
    /// [`finish_lead_parts`](Inner::finish_lead_parts).
    #[inline(always)]
    fn finish_in_place(&self, lead: &LeadId, result: Result<V, E>) -> Result<V, FlightError<E>> {
        // Declared before the guard, so it is dropped after the unlock: the entry owns the
        // key, and a key's drop is user code.
        let _removed;
        // Likewise: a failure counted under the lock is recorded as a metric after it.
        #[cfg(feature = "metrics")]
        let mut _failed = crate::meter::FailedOnDrop(None);
        let mut map = self.shards[lead.shard].map.lock();
        if let Some(entry) = map.find_mut(lead.hash, lead.id)
            && entry.get().flight.is_none()
        {
            // Lone: nobody waits, so there is nothing to publish. (A lone entry's lead is the
            // one that created it; any other lead of it is stale and changes nothing.)
            if lead.token == lead.id {
                _removed = entry.remove().0;
                if result.is_err() {
                    map.counts.record(Event::Failed);
                    #[cfg(feature = "metrics")]
                    {
                        _failed.0 = Some(&self.metrics);
                    }
                }
            }
            // Returned with the lock still held on purpose: the answer is written before the
            // unlock, whose locked instruction drains it from the store buffer; written after,
            // the caller's reload of it stalls on store forwarding (measured: ~10 ns).
            return result.map_err(|error| FlightError::Failed(StdArc::new(error)));
        }
        self.finish_shared(map, lead, result)
    }

    /// [`finish_lead`](Inner::finish_lead) for a lead whose entry is shared, or gone.
    #[inline(never)]
    fn finish_shared(
        &self,
        map: MutexGuard<'_, ShardMap<K, V, E>>,
        lead: &LeadId,
        result: Result<V, E>,
    ) -> Result<V, FlightError<E>> {
        let result = result.map_err(StdArc::new);
        let flight = match map.find(lead.hash, lead.id) {
            Some(flight) => Arc::clone(flight),
            None => {
                // Taken over, and the newer lead has already ended the entry.
                drop(map);
                return Own::Kept(result).into_result();
            }
        };
        let policy = self.config.on_error;
        // No user code runs under the locks: a value to share is moved into an `Arc`, and
        // every clone of it (ours included) happens after they are released.
        let own = self.transition(map, &flight, |locked| {
            if locked.state.open_token() != Some(lead.token) {
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
                    locked.record(Event::Failed);
                    let shared = Phase::Done(Err(StdArc::clone(&error)));
                    let wake = match policy {
                        ErrorPolicy::Share => locked.end(shared),
                        ErrorPolicy::HandOff => locked.pass_lead(shared),
                    };
                    (Own::Kept(Err(error)), wake)
                }
            }
        });
        own.into_result()
    }
}

impl<K: Hash + Eq, V, E> Inner<K, V, E> {
    /// `lead` was dropped unfinished: a lone entry is released, a shared flight is handed to
    /// its oldest follower able to lead (or ends as abandoned). Counted as abandoned.
    pub(crate) fn abandon_lead(&self, lead: &LeadId) {
        self.end_lead_unfinished(lead, Some(Event::Abandoned));
    }

    /// [`abandon_lead`](Inner::abandon_lead) for a dropped [`LeadGuard`], with its event.
    /// Out of line and cold, so a guard's `Drop` stays a flag test (abandons are rare).
    #[cold]
    #[inline(never)]
    pub(crate) fn abandon_guarded_lead(&self, lead: &LeadId) {
        self.abandon_lead(lead);
        // The guard has no key: the lead's event (same generation) has it.
        trace::abandoned::<K>(None, None, lead.token);
    }

    /// `lead` steps aside on purpose, with nothing to publish (a refresh that found the fill
    /// lease held by another process): the same hand-off as [`abandon_lead`], but not counted
    /// as abandoned, a counter operators read as "callers that went away".
    ///
    /// [`abandon_lead`]: Inner::abandon_lead
    #[cfg(feature = "tokio")]
    pub(crate) fn stand_down_lead(&self, lead: &LeadId) {
        self.end_lead_unfinished(lead, None);
    }

    fn end_lead_unfinished(&self, lead: &LeadId, count: Option<Event>) {
        // Counted unconditionally below, so recorded as a metric here, before the lock.
        #[cfg(feature = "metrics")]
        if let Some(event) = count {
            self.metrics.record(event);
        }
        let mut map = self.shards[lead.shard].map.lock();
        if let Some(event) = count {
            map.counts.record(event);
        }
        let Some(entry) = map.find_mut(lead.hash, lead.id) else {
            return;
        };
        let flight = match &entry.get().flight {
            Some(flight) => Arc::clone(flight),
            None if lead.token != lead.id => return,
            None => {
                let (removed, _) = entry.remove();
                drop(map);
                drop(removed);
                return;
            }
        };
        self.transition(map, &flight, |locked| {
            if locked.state.open_token() != Some(lead.token) {
                // Taken over: the flight belongs to a newer leader now.
                return ((), Wake::Nobody);
            }
            ((), locked.pass_lead(Phase::Abandoned))
        });
    }

    /// Whether `lead` is still its entry's current lead.
    pub(crate) fn lead_is_current(&self, lead: &LeadId) -> bool {
        let mut map = self.shards[lead.shard].map.lock();
        let Some(entry) = map.find_mut(lead.hash, lead.id) else {
            return false;
        };
        let entry = entry.get();
        match &entry.flight {
            None => lead.token == lead.id,
            Some(flight) => flight.state.lock().open_token() == Some(lead.token),
        }
    }

    /// Queues a follower that cannot lead on `lead`'s flight (upgrading a lone entry). `None`
    /// if `lead` is no longer current.
    #[cfg(feature = "tokio")]
    pub(crate) fn subscribe_lead(&self, lead: &LeadId) -> Option<(Arc<Flight<V, E>>, usize)> {
        let mut map = self.shards[lead.shard].map.lock();
        let mut entry = map.find_mut(lead.hash, lead.id)?;
        let entry = entry.get_mut();
        match &entry.flight {
            None if lead.token != lead.id => None,
            None => Some(entry.share(lead.shard, false)),
            Some(flight) => {
                let mut state = flight.state.lock();
                if state.open_token() != Some(lead.token) {
                    return None;
                }
                let slot = state.waiters.push(false, None);
                drop(state);
                Some((Arc::clone(flight), slot))
            }
        }
    }
}

/// A lead that borrows its group: the guard of [`Group::run`](crate::Group::run)'s own lead,
/// and the heart of the public [`Leader`](crate::Leader) (which adds the key). Borrowing
/// instead of holding a clone of the group's `Arc` saves two atomic read-modify-writes per
/// lead, a third of the uncontended path's glue.
/// `repr(C)` keeps `state` last (see `Leader`'s layout note).
#[repr(C)]
pub(crate) struct LeadGuard<'a, K: Hash + Eq, V, E> {
    group: &'a Group<K, V, E>,
    lead: LeadId,
    /// When the lead was taken, for the fill-duration histogram.
    #[cfg(feature = "metrics")]
    started: std::time::Instant,
    state: Armed,
}

/// Whether a guard's `Drop` still has to hand its lead on. A whole word rather than a `bool`:
/// a `bool` left 7 padding bytes in every [`Leader`](crate::Leader), which moves of a
/// `Joined` copied with overlapping 4-byte moves and reloaded across them (a store-forwarding
/// stall seen with `perf`; this and `Leader`'s layout together took ~4 ns off join+finish).
/// The unused values are the niche that `Joined` (and the `Poll` around it) keep their tags in.
/// `Traced` is armed too, for a lead taken while a `tracing` subscriber listened: its finish
/// is traced without a second look at the subscriber (one check per traced-or-not fill).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
enum Armed {
    Yes = 1,
    Traced = 2,
    No = 0,
}

impl<'a, K: Hash + Eq, V, E> LeadGuard<'a, K, V, E> {
    pub(crate) fn new(group: &'a Group<K, V, E>, lead: LeadId) -> Self {
        Self {
            group,
            lead,
            #[cfg(feature = "metrics")]
            started: std::time::Instant::now(),
            state: Armed::Yes,
        }
    }

    /// When the lead was taken.
    #[cfg(feature = "metrics")]
    pub(crate) fn started(&self) -> std::time::Instant {
        self.started
    }

    /// Marks this lead's end as traced (see [`Armed::Traced`]).
    pub(crate) fn trace(&mut self) {
        if self.state == Armed::Yes {
            self.state = Armed::Traced;
        }
    }

    /// Whether this lead's end is traced.
    #[inline(always)]
    pub(crate) fn is_traced(&self) -> bool {
        self.state == Armed::Traced
    }

    pub(crate) fn group(&self) -> &'a Group<K, V, E> {
        self.group
    }

    pub(crate) fn lead(&self) -> &LeadId {
        &self.lead
    }

    /// As [`Leader::is_current`](crate::Leader::is_current).
    pub(crate) fn is_current(&self) -> bool {
        self.group.inner.lead_is_current(&self.lead)
    }

    /// Ends the lead without a result and without counting it as abandoned (see
    /// [`Inner::stand_down_lead`]); the guard is spent.
    #[cfg(feature = "tokio")]
    pub(crate) fn stand_down(mut self) {
        if self.state != Armed::No {
            self.state = Armed::No;
            self.group.inner.stand_down_lead(&{ self.lead });
        }
    }

    /// Gives up the lead's identity to a new owner: this guard's `Drop` then does nothing.
    pub(crate) fn into_lead(mut self) -> LeadId {
        self.state = Armed::No;
        self.lead
    }
}

impl<K: Hash + Eq, V: Clone, E> LeadGuard<'_, K, V, E> {
    /// As [`Leader::finish`](crate::Leader::finish); the guard is spent afterwards (its `Drop`
    /// does nothing). By reference, not by value: moving the guard out of the `run` future
    /// reloaded it with loads straddling the stores that wrote it (a store-forwarding stall).
    pub(crate) fn finish(&mut self, result: Result<V, E>) -> Result<V, FlightError<E>> {
        let outcome = self.group.inner.finish_lead(&self.lead, result);
        // Settled; only now may `Drop` stand down (had `finish_lead` panicked, `Drop` would
        // have handed the lead on).
        self.state = Armed::No;
        #[cfg(feature = "metrics")]
        (self.group.inner.metrics).record_fill(self.started, outcome.is_ok());
        outcome
    }

    /// [`finish`](LeadGuard::finish) for the guard inside a [`Leader`](crate::Leader): passes
    /// the lead's identity in registers (see [`Inner::finish_lead_parts`]).
    pub(crate) fn finish_in_leader(&mut self, result: Result<V, E>) -> Result<V, FlightError<E>> {
        let LeadId {
            shard,
            hash,
            id,
            token,
        } = self.lead;
        let outcome = self
            .group
            .inner
            .finish_lead_parts(shard, hash, id, token, result);
        self.state = Armed::No;
        #[cfg(feature = "metrics")]
        (self.group.inner.metrics).record_fill(self.started, outcome.is_ok());
        outcome
    }
}

impl<K: Hash + Eq, V, E> Drop for LeadGuard<'_, K, V, E> {
    fn drop(&mut self) {
        if self.state != Armed::No {
            // A copy, so that the guard's own address is never taken, on this path either (see
            // `finish_lead_parts`; measured: ~2 ns of join+finish).
            self.group.inner.abandon_guarded_lead(&{ self.lead });
        }
    }
}
