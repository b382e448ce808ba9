//! [`Group`]: the sharded table of keys being filled, entering a key, and the transitions of a
//! shared flight that need its shard lock.

use std::fmt;
use std::future::{Future, poll_fn};
use std::hash::Hash;
use std::pin::{Pin, pin};
use std::task::Poll;

use hashbrown::hash_table::Entry as TableEntry;
use tokio::time::Instant;

use crate::builder::{Config, GroupBuilder};
use crate::flight::{Flight, FlightState, Lead, Phase, Wake};
use crate::join::Join;
use crate::lead::{LeadGuard, LeadId};
use crate::leader::Leader;
use crate::shard::{self, Entry, Shard, ShardMap};
use crate::stats::{self, Counts, Event, Stats};
use crate::sync::{Arc, MutexGuard};
use crate::trace::{self, KeyLabel};
use crate::wait::Wait;
use crate::{FlightError, Joined};

/// Per-key single-flight: concurrent callers for one key share one fill.
///
/// The first caller for a key becomes its *leader* and runs the fill; callers arriving while it
/// runs become *followers* and receive a clone of its result. If the leader's future is dropped
/// (timeout, `select!`, task abort, panic) before it finishes, exactly one waiting follower is
/// handed the lead (oldest first) and runs its own fill, so no caller ever waits on a fill that no
/// live future owns.
///
/// `Group` is a cheap handle (an `Arc` inside): clone it into every task that needs it.
pub struct Group<K, V, E = std::convert::Infallible> {
    pub(crate) inner: Arc<Inner<K, V, E>>,
}

pub(crate) struct Inner<K, V, E> {
    pub(crate) shards: Box<[Shard<K, V, E>]>,
    /// One hash per call picks the shard and locates the key in the shard's table; flights
    /// keep it, so ending one never hashes (or even compares) a key.
    hasher: ahash::RandomState,
    pub(crate) config: Config,
    /// How keys are labelled in `tracing` events (see `trace.rs`).
    pub(crate) key_label: KeyLabel<K>,
    #[cfg(feature = "metrics")]
    pub(crate) metrics: crate::meter::Metrics,
}

/// What a caller became on entering a key.
pub(crate) enum Entered<'g, L, K: Hash + Eq, V, E> {
    /// It leads (made from its `LeadId`); the key now lives in the shard's table.
    Lead(L),
    /// It follows; the key went into the wait (a follower may yet be handed the lead).
    Follow(Wait<'g, K, V, E>),
}

impl<K, V, E> Clone for Group<K, V, E> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K, V, E> fmt::Debug for Group<K, V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("shards", &self.inner.shards.len())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl<K, V, E> Default for Group<K, V, E> {
    fn default() -> Self {
        Self::with_config(Config::default(), None)
    }
}

impl<K, V, E> Group<K, V, E> {
    /// A group with default settings: no wait timeout, no takeover, errors shared.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a [`GroupBuilder`].
    pub fn builder() -> GroupBuilder<K, V, E> {
        GroupBuilder::default()
    }

    pub(crate) fn with_config(config: Config, key_label: KeyLabel<K>) -> Self {
        let shards = (0..config.shards).map(|_| Shard::new()).collect();
        Self {
            inner: Arc::new(Inner {
                shards,
                hasher: ahash::RandomState::new(),
                #[cfg(feature = "metrics")]
                metrics: crate::meter::Metrics::register(config.metrics_name.as_deref()),
                config,
                key_label,
            }),
        }
    }

    /// Number of keys with a fill in progress. Locks each shard in turn, so the sum is not an
    /// atomic snapshot while calls are running.
    pub fn in_flight(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| s.map.lock().entries.len())
            .sum()
    }

    /// A snapshot of the outcome counters, summed over the shards.
    pub fn stats(&self) -> Stats {
        let mut total = Stats::default();
        for shard in self.inner.shards.iter() {
            shard.map.lock().counts.add_to(&shard.timed_out, &mut total);
        }
        total
    }

    /// Detaches every flight: later callers start fresh fills, while the followers already
    /// waiting still receive their flight's result. Returns how many flights were detached.
    ///
    /// This is what a cache's `clear()` uses so that a fill started before the clear cannot be
    /// joined by callers that arrive after it.
    pub fn forget_all(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| s.map.lock().forget_all())
            .sum()
    }
}

impl<K, V, E> Group<K, V, E>
where
    K: Hash + Eq + Clone,
    V: Clone,
{
    /// Runs `fill` for `key` unless a fill for it is already in progress, in which case this
    /// call waits for that fill and returns a clone of its result.
    ///
    /// The leader's own error comes back as [`FlightError::Failed`] too, so every caller sees
    /// the same type.
    ///
    /// # Cancellation
    /// - Dropped while waiting as a follower: this caller's place in the queue is removed; if it
    ///   had just been handed the lead, the lead passes to the next follower. The flight goes on.
    /// - Dropped while its `fill` runs (this caller leads): the lead passes to the oldest waiting
    ///   follower, which runs its own fill; with nobody waiting, the key is released and the next
    ///   caller starts afresh. Nothing is left behind that could make a later call hang.
    ///
    /// `fill` is only called if this caller leads, and at most once.
    ///
    /// With a `tracing` subscriber listening to target `coalesce` at `DEBUG`, a lead's events
    /// carry the key (if the group labels keys) and its `fill finished` event the fill's
    /// `elapsed` time; otherwise nothing is cloned, traced or timed.
    pub async fn run<F, Fut>(&self, key: K, fill: F) -> Result<V, FlightError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        if trace::enabled() {
            // Boxed, so the traced path's state (the key's copy, the clock) is not carried by
            // every `run` future.
            return Box::pin(self.run_traced(key, fill)).await;
        }
        match self.enter(key, |lead| lead) {
            Entered::Lead(lead) => {
                // Borrows the group rather than cloning its `Arc`: this future borrows it anyway.
                let mut guard = LeadGuard::new(self, lead);
                let result = fill().await;
                guard.finish(result)
            }
            Entered::Follow(wait) => match self.wait_with_timeout(wait).await {
                Joined::Leader(leader) => {
                    let result = fill().await;
                    leader.finish(result)
                }
                Joined::Done(result) => result,
            },
        }
    }

    /// [`run`](Group::run) with a subscriber listening: the same steps, with the lead traced
    /// and the fill timed. Dropped at an await, it does what `run` does there.
    async fn run_traced<F, Fut>(&self, key: K, fill: F) -> Result<V, FlightError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let traced = trace::Traced::new(&key);
        match self.enter(key, |lead| lead) {
            Entered::Lead(lead) => {
                let mut guard = LeadGuard::new(self, lead);
                traced.led(&guard);
                let result = fill().await;
                let outcome = guard.finish(result);
                traced.finished(&guard, &outcome);
                outcome
            }
            // A follower's events (join, hand-off, finish) come from `Join`, `Wait` and
            // `Leader` as for any follower.
            Entered::Follow(wait) => {
                trace::joined(self.inner.key_label, wait.key());
                match self.wait_with_timeout(wait).await {
                    Joined::Leader(leader) => {
                        let result = fill().await;
                        leader.finish(result)
                    }
                    Joined::Done(result) => result,
                }
            }
        }
    }

    /// Becomes the leader of `key` (at once, without waiting) or waits for the flight in
    /// progress and returns its outcome.
    ///
    /// A follower can also come back as [`Joined::Leader`]: that happens when the flight's
    /// leader was dropped, or failed under [`ErrorPolicy::HandOff`](crate::ErrorPolicy), and
    /// this follower was next in line.
    ///
    /// # Cancellation
    /// Nothing happens until the first poll (the key is entered then), so a future dropped
    /// before it has changed nothing. Dropped while waiting: this caller leaves the queue; a
    /// lead handed to it but not yet taken passes to the next follower. The returned
    /// [`Leader`] is a guard: dropping it without [`Leader::finish`] hands the flight on in
    /// the same way.
    pub fn join(&self, key: K) -> impl Future<Output = Joined<'_, K, V, E>> {
        Join::new(self, key, Self::wait_with_timeout)
    }

    /// [`enter`](Group::enter) for [`join`](Group::join): a lead comes back as the finished
    /// `Joined::Leader`.
    #[inline]
    pub(crate) fn enter_join(&self, key: K) -> Entered<'_, Joined<'_, K, V, E>, K, V, E> {
        // The table keeps the key it is given; the `Leader` needs its own (cloned here, before
        // any lock: `K::clone` is user code). The `Leader` borrows `self`: no `Arc` traffic.
        let mut kept = Some(key.clone());
        // The answer is built under the shard lock, so its stores precede the unlock (see
        // `lead.rs` on store forwarding). Nothing in it is user code, and the closure only
        // borrows `kept`: unused (this caller follows), the key is dropped here, unlocked.
        let lead = |lead| {
            let key = kept.take().expect("a lead is made once");
            Joined::Leader(Leader::new(self, key, lead))
        };
        self.enter(key, lead)
    }

    /// [`enter_join`](Group::enter_join) with a subscriber listening: a lead is traced.
    #[cold]
    #[inline(never)]
    pub(crate) fn enter_join_traced(&self, key: K) -> Entered<'_, Joined<'_, K, V, E>, K, V, E> {
        let mut entered = self.enter_join(key);
        if let Entered::Lead(Joined::Leader(leader)) = &mut entered {
            leader.trace_lead();
        }
        entered
    }

    /// Detaches the flight in progress for `key`, if any: later callers start a fresh fill,
    /// while the followers already waiting still receive this flight's result. Returns whether
    /// a flight was detached.
    pub fn forget(&self, key: &K) -> bool {
        let hash = self.inner.hasher.hash_one(key);
        let mut map = self.inner.shard(hash).map.lock();
        map.forget(hash, |e| e.key == *key)
    }

    /// A follower's wait, given up after the group's `wait_timeout` (if any).
    pub(crate) async fn wait_with_timeout<'g>(
        &'g self,
        wait: Wait<'g, K, V, E>,
    ) -> Joined<'g, K, V, E> {
        match self.inner.config.wait_timeout {
            None => wait.await,
            Some(limit) => self.wait_or_give_up(wait, tokio::time::sleep(limit)).await,
        }
    }

    /// Waits until `wait` resolves or `give_up` does, whichever comes first (`wait` is polled
    /// first, so a lead or a result ready at the deadline is taken). Giving up drops the wait,
    /// which is the whole state transition of a timeout: the follower leaves the queue, and a
    /// lead handed to it but not yet taken passes to the next follower (see `Wait`'s `Drop`).
    ///
    /// `give_up` is tokio's timer in [`wait_with_timeout`](Group::wait_with_timeout); the loom
    /// models, which cannot see tokio's timers, pass a signal raised by a racing thread.
    pub(crate) async fn wait_or_give_up<'g>(
        &'g self,
        mut wait: Wait<'g, K, V, E>,
        give_up: impl Future<Output = ()>,
    ) -> Joined<'g, K, V, E> {
        let mut give_up = pin!(give_up);
        let outcome = poll_fn(|cx| match Pin::new(&mut wait).poll(cx) {
            Poll::Ready(joined) => Poll::Ready(Some(joined)),
            Poll::Pending => give_up.as_mut().poll(cx).map(|()| None),
        })
        .await;
        if let Some(joined) = outcome {
            return joined;
        }
        trace::wait_timed_out(self.inner.key_label, wait.key());
        let shard = wait.shard();
        drop(wait);
        stats::record_timeout(&self.inner.shards[shard].timed_out);
        #[cfg(feature = "metrics")]
        self.inner.metrics.record_timeout();
        Joined::Done(Err(FlightError::WaitTimedOut))
    }

    /// Leads `key` if nobody does (or the current leader is older than `takeover_after`),
    /// otherwise queues as a follower. Never waits.
    #[cfg_attr(not(feature = "metrics"), inline(always))]
    pub(crate) fn enter<L>(
        &self,
        key: K,
        lead: impl FnOnce(LeadId) -> L,
    ) -> Entered<'_, L, K, V, E> {
        #[cfg(not(feature = "metrics"))]
        return self.enter_locked(key, lead);
        #[cfg(feature = "metrics")]
        {
            // What the shard counted, recorded once its lock is released: a lead made on
            // entry keeps its entry's token unless it took over; no lead made is a join.
            let mut event = Event::Joined;
            let entered = self.enter_locked(key, |id| {
                event = match id.token == id.id {
                    true => Event::Led,
                    false => Event::TakenOver,
                };
                lead(id)
            });
            self.inner.metrics.record(event);
            entered
        }
    }

    /// [`enter`](Group::enter) under the shard lock.
    fn enter_locked<L>(&self, key: K, lead: impl FnOnce(LeadId) -> L) -> Entered<'_, L, K, V, E> {
        let inner = &*self.inner;
        let hash = inner.hasher.hash_one(&key);
        let index = inner.shard_index(hash);
        let mut map = inner.shards[index].map.lock();
        let map = &mut *map;
        match map.entries.entry(hash, |e| e.key == key, |e| e.hash) {
            TableEntry::Vacant(vacant) => {
                // The uncontended case: the lead lives inline in the table, nothing allocated.
                let token = shard::take_token(&mut map.next_token, index, inner.shards.len());
                // A lead that may be taken over needs its start time: kept in a flight.
                let flight = inner.config.takeover_after.map(|_| {
                    let lead = Lead {
                        token,
                        since: inner.stamp(),
                        promoted: None,
                    };
                    Arc::new(Flight::new(hash, index, token, FlightState::open(lead)))
                });
                vacant.insert(Entry {
                    hash,
                    key,
                    id: token,
                    flight,
                });
                map.counts.record(Event::Led);
                Entered::Lead(lead(LeadId {
                    shard: index,
                    hash,
                    id: token,
                    token,
                }))
            }
            TableEntry::Occupied(mut occupied) => self.enter_occupied(
                occupied.get_mut(),
                &mut map.next_token,
                &mut map.counts,
                index,
                key,
                lead,
            ),
        }
    }

    /// [`enter`](Group::enter) for a key somebody leads already: take it over if the lead is
    /// too old, else queue as a follower (upgrading a lone entry to a shared flight). Out of
    /// line so that the uncontended path stays small.
    #[cold]
    #[inline(never)]
    fn enter_occupied<L>(
        &self,
        entry: &mut Entry<K, V, E>,
        next_token: &mut u64,
        counts: &mut Counts,
        index: usize,
        key: K,
        lead: impl FnOnce(LeadId) -> L,
    ) -> Entered<'_, L, K, V, E> {
        let inner = &*self.inner;
        let lead_id = |token| {
            lead(LeadId {
                shard: index,
                hash: entry.hash,
                id: entry.id,
                token,
            })
        };
        let Some(flight) = &entry.flight else {
            // Lone (so no takeover is configured): become its first follower.
            let (flight, slot) = entry.share(index, true);
            counts.record(Event::Joined);
            return Entered::Follow(Wait::new(self, flight, slot, key));
        };
        let mut state = flight.state.lock();
        let Phase::Open(lead) = &mut state.phase else {
            unreachable!("a flight in the table is open");
        };
        if inner.takeover_due(lead.since) {
            let token = shard::take_token(next_token, index, inner.shards.len());
            *lead = Lead {
                token,
                since: inner.stamp(),
                promoted: None,
            };
            drop(state);
            counts.record(Event::TakenOver);
            return Entered::Lead(lead_id(token));
        }
        let slot = state.waiters.push(true, None);
        drop(state);
        let flight = Arc::clone(flight);
        counts.record(Event::Joined);
        Entered::Follow(Wait::new(self, flight, slot, key))
    }
}

impl<K, V, E> Inner<K, V, E> {
    fn stamp(&self) -> Option<Instant> {
        self.config.takeover_after.map(|_| self.now())
    }

    fn takeover_due(&self, since: Option<Instant>) -> bool {
        match (self.config.takeover_after, since) {
            (Some(age), Some(since)) => self.now().saturating_duration_since(since) >= age,
            _ => false,
        }
    }

    /// The clock of lead ages: tokio's (so tests can pause it).
    #[cfg(not(herd_loom))]
    fn now(&self) -> Instant {
        Instant::now()
    }

    /// The clock of lead ages in the loom build: advanced by the model (see `loom_seams.rs`).
    #[cfg(herd_loom)]
    fn now(&self) -> Instant {
        self.config.clock.now()
    }
}

impl<K: Hash + Eq, V, E> Inner<K, V, E> {
    /// Shard counts are powers of two. Bits 32 and up pick the shard: the table indexes buckets
    /// with the low bits and tags them with the top 7, so neither is skewed by this choice.
    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.shards.len() - 1)
    }

    fn shard(&self, hash: u64) -> &Shard<K, V, E> {
        &self.shards[self.shard_index(hash)]
    }

    /// Runs `transition` on `flight` with its shard and its state locked (in that order),
    /// then wakes whoever the transition returned, after both locks are released.
    pub(crate) fn with_locked<R>(
        &self,
        flight: &Flight<V, E>,
        transition: impl FnOnce(&mut Locked<'_, K, V, E>) -> (R, Wake),
    ) -> R {
        let map = self.shards[flight.shard].map.lock();
        self.transition(map, flight, transition)
    }

    /// [`with_locked`](Inner::with_locked) for a caller already holding `flight`'s shard lock.
    pub(crate) fn transition<R>(
        &self,
        mut map: MutexGuard<'_, ShardMap<K, V, E>>,
        flight: &Flight<V, E>,
        transition: impl FnOnce(&mut Locked<'_, K, V, E>) -> (R, Wake),
    ) -> R {
        let mut state = flight.state.lock();
        let mut locked = Locked {
            inner: self,
            map: &mut map,
            flight,
            state: &mut state,
            removed: None,
            #[cfg(feature = "metrics")]
            pending: Default::default(),
        };
        let (result, wake) = transition(&mut locked);
        let removed = locked.removed.take();
        #[cfg(feature = "metrics")]
        let pending = std::mem::take(&mut locked.pending);
        drop(state);
        drop(map);
        #[cfg(feature = "metrics")]
        self.metrics.record_pending(&pending);
        // The removed entry owns the key: its drop is user code, run after the locks.
        drop(removed);
        wake.wake();
        result
    }
}

/// A flight with its shard and state locked: the only place shared flights end.
pub(crate) struct Locked<'a, K, V, E> {
    inner: &'a Inner<K, V, E>,
    map: &'a mut ShardMap<K, V, E>,
    flight: &'a Flight<V, E>,
    pub(crate) state: &'a mut FlightState<V, E>,
    /// The flight's entry once `end` took it out of the shard, to drop after the locks.
    removed: Option<Entry<K, V, E>>,
    /// Events counted here, recorded as metrics after the locks are released.
    #[cfg(feature = "metrics")]
    pending: crate::meter::Pending,
}

impl<K: Hash + Eq, V, E> Locked<'_, K, V, E> {
    /// Counts `event` in the flight's shard (whose lock is held).
    pub(crate) fn record(&mut self, event: Event) {
        self.map.counts.record(event);
        #[cfg(feature = "metrics")]
        self.pending.add(event);
    }

    /// Ends the flight with `phase`: removes its entry from the shard if it is still there (by
    /// identity, so a newer entry for the same key is never touched) and returns the
    /// followers' wakers.
    pub(crate) fn end(&mut self, phase: Phase<V, E>) -> Wake {
        if let Some(entry) = self.map.find_mut(self.flight.hash, self.flight.id) {
            self.removed = Some(entry.remove().0);
        }
        self.state.end(phase)
    }

    /// Hands the lead to the oldest follower able to take it; if there is none, ends the flight
    /// with `otherwise`.
    pub(crate) fn pass_lead(&mut self, otherwise: Phase<V, E>) -> Wake {
        let token = shard::take_token(
            &mut self.map.next_token,
            self.flight.shard,
            self.inner.shards.len(),
        );
        match self.state.promote_next(token, self.inner.stamp()) {
            Some(wake) => {
                self.record(Event::HandedOff);
                wake
            }
            None => self.end(otherwise),
        }
    }
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use std::pin::pin;

    use futures::FutureExt;

    use super::*;

    fn forgotten(group: &Group<u32, u32>) -> usize {
        let shards = group.inner.shards.iter();
        shards.map(|s| s.map.lock().forgotten_len()).sum()
    }

    #[test]
    fn forgotten_entries_leave_the_side_table_when_their_flights_end() {
        let group: Group<u32, u32> = Group::builder().shards(1).build();
        // Lone: its leader's finish removes it.
        let Some(Joined::Leader(lone)) = group.join(1).now_or_never() else {
            panic!("leads")
        };
        assert!(group.forget(&1));
        assert_eq!((group.in_flight(), forgotten(&group)), (0, 1));
        assert!(
            lone.is_current(),
            "a forgotten lead is still its flight's lead"
        );
        assert_eq!(lone.finish(Ok(1)), Ok(1));
        assert_eq!(forgotten(&group), 0);
        // Shared: the leader is dropped, the promoted follower finds it there and ends it.
        let Some(Joined::Leader(leader)) = group.join(2).now_or_never() else {
            panic!("leads")
        };
        let mut follower = pin!(group.join(2));
        assert!(follower.as_mut().now_or_never().is_none());
        assert_eq!(group.forget_all(), 1);
        drop(leader);
        let Some(Joined::Leader(promoted)) = follower.as_mut().now_or_never() else {
            panic!("the follower is handed the lead")
        };
        assert_eq!(forgotten(&group), 1);
        assert_eq!(promoted.finish(Ok(3)), Ok(3));
        assert_eq!((group.in_flight(), forgotten(&group)), (0, 0));
    }
}
