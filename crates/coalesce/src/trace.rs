//! `tracing` events for a flight, so an operator can see who led a key, who joined, who was
//! handed the lead or took it over, who went away, whose wait ran out, and how each fill ended.
//!
//! Every event has target `coalesce` and is emitted after every lock is released (a
//! subscriber is user code). Level `DEBUG`, except a takeover (`WARN`: a fill ran longer than
//! `takeover_after`, which usually means a stuck backend). Fields: `generation` (the lead's,
//! unique in the group: pairs a lead with its end), `key` (only in groups built with
//! [`GroupBuilder::trace_keys`](crate::GroupBuilder::trace_keys) or `trace_keys_with`; formatted
//! only when a subscriber records the event), `outcome`, and, where this crate runs the fill in
//! the caller's own future ([`Group::run`](crate::Group::run)), `elapsed` (the fill's duration,
//! from entering the key to finishing it). A lead taken through
//! [`Group::join`](crate::Group::join) is finished by the caller's code, so its `fill finished`
//! event has no `elapsed`: pair it with its `leads the fill` event by `generation` (or time the
//! fill with the `metrics` feature's histogram).
//!
//! Whether a fill is traced is decided once, when its lead is taken (a lead's end is traced if a
//! subscriber listened then), so the uncontended lead + finish looks at the subscriber once.
//! With no subscriber that look is one relaxed load and a branch (tracing's global level filter
//! is off): the key is never cloned or formatted and no clock is read. Measured with
//! `examples/fillprobe.rs` under callgrind: `run` +8 instructions per fill (303 -> 311), `join`
//! + `finish` +12 (316 -> 328); in user time, within 1.3% of the code without tracing.

use std::fmt;
use std::time::{Duration, Instant};

use tracing::field::{DisplayValue, display};

use std::hash::Hash;

use crate::lead::LeadGuard;

/// How a group's keys are labelled in events: `None` for no `key` field.
pub(crate) type KeyLabel<K> = Option<fn(&K, &mut fmt::Formatter<'_>) -> fmt::Result>;

/// A key formatted by its group's label function, only when a subscriber records it.
pub(crate) struct Labelled<'a, K> {
    key: &'a K,
    label: fn(&K, &mut fmt::Formatter<'_>) -> fmt::Result,
}

impl<K> fmt::Display for Labelled<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.label)(self.key, f)
    }
}

/// The `key` field of an event: empty unless the group labels its keys.
pub(crate) fn key<K>(label: KeyLabel<K>, key: Option<&K>) -> Option<DisplayValue<Labelled<'_, K>>> {
    Some(display(Labelled {
        key: key?,
        label: label?,
    }))
}

/// Whether anyone listens to this crate's `DEBUG` events: decides whether [`Group::run`]
/// keeps a copy of the key for its events and times its fill.
///
/// [`Group::run`]: crate::Group::run
#[inline]
pub(crate) fn enabled() -> bool {
    tracing::enabled!(target: "coalesce", tracing::Level::DEBUG)
}

/// What [`Group::run`](crate::Group::run) keeps for its events when a subscriber listens.
pub(crate) struct Traced<K> {
    key: K,
    started: Instant,
}

impl<K: Clone> Traced<K> {
    #[cold]
    #[inline(never)]
    pub(crate) fn new(key: &K) -> Self {
        Self {
            key: key.clone(),
            started: Instant::now(),
        }
    }
}

impl<K> Traced<K> {
    #[cold]
    #[inline(never)]
    pub(crate) fn led<V, E>(&self, guard: &LeadGuard<'_, K, V, E>)
    where
        K: Hash + Eq,
    {
        let (label, lead) = (guard.group().inner.key_label, guard.lead());
        led(label, Some(&self.key), lead.token, lead.token != lead.id);
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn finished<V, E>(
        &self,
        guard: &LeadGuard<'_, K, V, E>,
        result: &Result<V, crate::FlightError<E>>,
    ) where
        K: Hash + Eq,
    {
        let (label, lead) = (guard.group().inner.key_label, guard.lead());
        let elapsed = Some(self.started.elapsed());
        finished(label, Some(&self.key), lead.token, result, elapsed);
    }
}

/// What became of a fill, as the `outcome` field.
pub(crate) fn outcome<V, E>(result: &Result<V, crate::FlightError<E>>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(crate::FlightError::Failed(_)) => "failed",
        Err(crate::FlightError::WaitTimedOut) => "wait timed out",
        Err(crate::FlightError::Abandoned) => "abandoned",
    }
}

pub(crate) fn led<K>(label: KeyLabel<K>, k: Option<&K>, generation: u64, took_over: bool) {
    if took_over {
        tracing::warn!(
            target: "coalesce",
            generation,
            key = key(label, k),
            "took over a fill older than takeover_after; the old leader's result will be ignored"
        );
    } else {
        tracing::debug!(target: "coalesce", generation, key = key(label, k), "leads the fill");
    }
}

pub(crate) fn joined<K>(label: KeyLabel<K>, k: Option<&K>) {
    tracing::debug!(target: "coalesce", key = key(label, k), "joined a fill in progress");
}

pub(crate) fn handed<K>(label: KeyLabel<K>, k: Option<&K>, generation: u64) {
    tracing::debug!(
        target: "coalesce",
        generation,
        key = key(label, k),
        "was handed the lead of a fill"
    );
}

pub(crate) fn finished<K, V, E>(
    label: KeyLabel<K>,
    k: Option<&K>,
    generation: u64,
    result: &Result<V, crate::FlightError<E>>,
    elapsed: Option<Duration>,
) {
    tracing::debug!(
        target: "coalesce",
        generation,
        key = key(label, k),
        outcome = outcome(result),
        elapsed = elapsed.map(tracing::field::debug),
        "fill finished"
    );
}

pub(crate) fn abandoned<K>(label: KeyLabel<K>, k: Option<&K>, generation: u64) {
    tracing::debug!(
        target: "coalesce",
        generation,
        key = key(label, k),
        "leader dropped before finishing"
    );
}

pub(crate) fn stood_down<K>(label: KeyLabel<K>, k: Option<&K>, generation: u64) {
    tracing::debug!(
        target: "coalesce",
        generation,
        key = key(label, k),
        "leader stood down (a refresh: another process holds the fill lease)"
    );
}

pub(crate) fn wait_timed_out<K>(label: KeyLabel<K>, k: Option<&K>) {
    tracing::debug!(
        target: "coalesce",
        key = key(label, k),
        "wait for another caller's fill timed out"
    );
}
