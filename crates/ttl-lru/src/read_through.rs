//! Read-through: `get_or_try_insert` and `get_or_try_insert_detached`, coalesced through a
//! `coalesce::Group` so concurrent misses of one key run one fill.
//!
//! Fills live in the group, never in the store: they take no capacity and cannot be evicted
//! half-done, and a cancelled leader hands its flight to one waiting caller (the group's guard).
//! Before a fill starts, the caller reads the key's invalidation fence; the result is stored only if
//! no `remove`/`insert`/`clear` of the key happened since, while its waiters get it regardless.
//! Errors of any type `E` travel through the group type-erased (`Arc<dyn Any>`) and are downcast
//! back per call.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use coalesce::{FlightError, Joined, Leader, OwnedLeader};
use futures::FutureExt;

use crate::cache::Cache;
use crate::clock::duration_to_ms;
use crate::error::FetchError;
use crate::observe::Started;
use crate::shard::{ErasedError, Probe, Stores, WriteMode};
use crate::tally::Event;

/// How a read-through call obtained its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A fresh value was in the store.
    Hit,
    /// This call ran the fill (or its detached task did).
    Filled,
    /// Another caller's fill produced it.
    Joined,
    /// A value past its TTL, inside the stale-while-revalidate window (a refresh is running).
    Stale,
}

/// A read-through result: the value and how it was obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched<V> {
    /// The value.
    pub value: V,
    /// Where it came from.
    pub source: Source,
}

impl<V> Fetched<V> {
    /// The value, by move.
    pub fn into_value(self) -> V {
        self.value
    }
}

/// The erased error a detached fill publishes when it runs past its `fill_timeout`.
struct FillTimeout;

pub(crate) type GroupLeader<'g, K, V> = Leader<'g, K, V, ErasedError>;

/// A fill's lead, borrowing the group (a fill in the caller) or owning a clone of it (a fill on
/// a spawned task): what storing and publishing a result needs from either.
pub(crate) trait FillLeader<K, V> {
    fn key(&self) -> &K;
    fn finish(self, result: Result<V, ErasedError>) -> Result<V, FlightError<ErasedError>>;
}

impl<K: Hash + Eq, V: Clone> FillLeader<K, V> for GroupLeader<'_, K, V> {
    fn key(&self) -> &K {
        Leader::key(self)
    }

    fn finish(self, result: Result<V, ErasedError>) -> Result<V, FlightError<ErasedError>> {
        Leader::finish(self, result)
    }
}

impl<K: Hash + Eq, V: Clone> FillLeader<K, V> for OwnedLeader<K, V, ErasedError> {
    fn key(&self) -> &K {
        OwnedLeader::key(self)
    }

    fn finish(self, result: Result<V, ErasedError>) -> Result<V, FlightError<ErasedError>> {
        OwnedLeader::finish(self, result)
    }
}

/// A caller that leads a fill, with what it needs to run it.
struct Lead<'g, K: Hash + Eq, V, T, F> {
    leader: GroupLeader<'g, K, V>,
    hash: u64,
    fence: Started,
    ttl_fn: T,
    make_fut: F,
}

/// What the store said before any coalescing.
pub(crate) enum Front<V, E> {
    Answer(Result<Fetched<V>, FetchError<E>>),
    /// Stale value returned; this caller claimed the refresh. Then when the stale window ends.
    StaleRefresh(V, u64),
    /// No answer in the store: coalesce. `None` if the leader must re-read the store whatever
    /// (a cached error of another type was there), else the shard's store count the lookup
    /// saw.
    Miss(Option<Stores>),
}

impl<K, V> Cache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Returns the cached value, or runs `fill` once for all concurrent callers of `key` and caches
    /// its value for `ttl_fn(&value)` (or its error for `negative_ttl`). In a full cache the
    /// default policy may decline a new key's value or cached error (less frequent than what
    /// it would evict; counted in `Stats::rejections`): every caller still gets it, and the
    /// key's next miss fills again, counting toward its admission (a key that keeps failing
    /// has its error cached after a few misses; a scan of bad keys does not flush the cache).
    ///
    /// The fill runs in this caller's task; `fill` is called only if this caller leads. A stale
    /// value inside the stale-while-revalidate window is returned at once as [`Source::Stale`] while
    /// one refresh runs on a spawned tokio task (which is why the fill future must be
    /// `Send + 'static`; without a tokio runtime no refresh starts and the stale value is served
    /// until its window ends). The caller that claims a refresh calls `fill` at once; if another
    /// fill of the key is already open then, the refresh task follows that fill: it refreshes if
    /// that fill's lead is handed to it (its caller went away), and otherwise, once that fill
    /// ends, releases the claim, so a fill that stored nothing (fenced by a write of the key, or
    /// too heavy) leaves the next stale read free to refresh. A refresh still running when the
    /// entry's stale window ends is abandoned (counted in [`Stats::fill_timeouts`](crate::Stats::fill_timeouts)): past the
    /// window the key is a plain miss, whose callers lead fills of their own instead of waiting
    /// on a task nobody can cancel.
    ///
    /// # Cancellation
    /// - Dropped while waiting for another caller's fill: it just leaves the queue; the fill goes on.
    /// - Dropped while its own `fill` runs: the fill is dropped and the lead passes to the oldest
    ///   waiting caller, which runs its own fill; with nobody waiting the key is released. Nothing
    ///   was written to the store before that await, so nothing is left behind.
    ///
    /// # Errors
    /// [`FetchError::Failed`] (this fill's error, the joined fill's, or a cached one),
    /// [`FetchError::WaitTimedOut`] (waited past `wait_timeout`), [`FetchError::Abandoned`],
    /// [`FetchError::ErrorTypeMismatch`]. A value too heavy to store, or declined by the policy,
    /// is still returned.
    pub async fn get_or_try_insert<E, T, F, Fut>(
        &self,
        key: K,
        ttl_fn: T,
        fill: F,
    ) -> Result<Fetched<V>, FetchError<E>>
    where
        E: Send + Sync + 'static,
        T: FnOnce(&V) -> Duration + Send + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        let Lead {
            leader,
            hash,
            fence,
            ttl_fn,
            make_fut: fill,
        } = match self.lead_or_answer(key, ttl_fn, fill, None).await {
            Ok(lead) => lead,
            Err(answer) => return answer,
        };
        // Await 2: if dropped here, `leader` drops and hands the flight on.
        let result = fill().await;
        self.publish(leader, hash, fence, ttl_fn, result)
            .map(|value| Fetched {
                value,
                source: Source::Filled,
            })
    }

    /// Like [`get_or_try_insert`](Self::get_or_try_insert), but the fill runs on a spawned tokio
    /// task that outlives this caller and is cancelled after `fill_timeout` (callers then get
    /// [`FetchError::FillTimedOut`]; timeouts are not cached). `make_fut` is called (in this task)
    /// only if this caller leads. Without a tokio runtime the fill runs inline, without a timeout.
    ///
    /// # Cancellation
    /// - Dropped while waiting for another caller's fill: it leaves the queue; the fill goes on.
    /// - Dropped while waiting for its own detached fill: the task keeps running, stores the value
    ///   and answers every other waiter; only this caller's copy of the result is lost. (Without
    ///   a tokio runtime there is no task: the fill runs in this future and is dropped with it,
    ///   its lead passing to the oldest waiting caller, as for `get_or_try_insert`.)
    ///
    /// # Errors
    /// As [`get_or_try_insert`](Self::get_or_try_insert), plus [`FetchError::FillTimedOut`];
    /// [`FetchError::Abandoned`] if the fill task panicked.
    pub async fn get_or_try_insert_detached<E, T, F, Fut>(
        &self,
        key: K,
        ttl_fn: T,
        make_fut: F,
        fill_timeout: Duration,
    ) -> Result<Fetched<V>, FetchError<E>>
    where
        E: Send + Sync + 'static,
        T: FnOnce(&V) -> Duration + Send + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        let refresh_timeout = Some(fill_timeout);
        let Lead {
            leader,
            hash,
            fence,
            ttl_fn,
            make_fut,
        } = match self
            .lead_or_answer(key, ttl_fn, make_fut, refresh_timeout)
            .await
        {
            Ok(lead) => lead,
            Err(answer) => return answer,
        };
        let fut = make_fut();
        let result = match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let cache = self.clone();
                // The lead moves to the task, so it must own its group.
                let leader = leader.into_owned();
                let task = rt.spawn(async move {
                    cache
                        .run_fill(leader, hash, fence, ttl_fn, fut, Some(fill_timeout))
                        .await
                });
                // Await 2: dropping the JoinHandle detaches; the task finishes the flight.
                match task.await {
                    Ok(r) => r,
                    Err(_) => Err(FetchError::Abandoned),
                }
            }
            // No runtime to detach onto (or to time with): the fill runs inline, as in
            // `get_or_try_insert`; dropped here, `leader` hands the flight on.
            Err(_) => {
                self.clone()
                    .run_fill(leader, hash, fence, ttl_fn, fut, None)
                    .await
            }
        };
        result.map(|value| Fetched {
            value,
            source: Source::Filled,
        })
    }

    /// The front half both read-through calls share: a fresh hit, a cached error or a stale
    /// value (claiming its refresh, which takes `ttl_fn` and `make_fut`) answers at once;
    /// otherwise the caller joins the key's flight and either gets the flight's outcome or leads
    /// (after re-checking the store), and gets `ttl_fn` and `make_fut` back to fill with.
    ///
    /// Cancel safety: its one await is the join; dropped there, the caller leaves the queue
    /// (a lead handed to it passes on). Nothing is written before it.
    async fn lead_or_answer<E, T, F, Fut>(
        &self,
        key: K,
        ttl_fn: T,
        make_fut: F,
        refresh_timeout: Option<Duration>,
    ) -> Result<Lead<'_, K, V, T, F>, Result<Fetched<V>, FetchError<E>>>
    where
        E: Send + Sync + 'static,
        T: FnOnce(&V) -> Duration + Send + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        let hash = self.hash(&key);
        let seen = match self.front::<E>(hash, &key) {
            Front::Answer(a) => return Err(a),
            Front::StaleRefresh(value, until) => {
                self.start_refresh(key, hash, ttl_fn, make_fut, refresh_timeout, until);
                return Err(Ok(Fetched {
                    value,
                    source: Source::Stale,
                }));
            }
            Front::Miss(seen) => seen,
        };
        let fence = self.shard(hash).fence(hash);
        let stores = self.shard(hash).stores();
        // Await 1: cancel-safe (a dropped follower leaves the queue).
        let leader = match self.inner.group.join(key).await {
            Joined::Done(r) => return Err(self.followed(r)),
            Joined::Leader(leader) => leader,
        };
        let leader = match self.recheck(leader, hash, seen) {
            Ok(hit) => return Err(hit),
            Err(leader) => leader,
        };
        self.inner.tally.record(Event::Fill);
        let fence = Started::lead(fence, stores);
        if fence.at.is_some() {
            self.trace_lead(leader.key());
        }
        Ok(Lead {
            leader,
            hash,
            fence,
            ttl_fn,
            make_fut,
        })
    }

    /// Store lookup before coalescing: a fresh hit, a cached error of type `E`, a stale value
    /// (claiming its refresh), or a miss.
    pub(crate) fn front<E: Send + Sync + 'static>(&self, hash: u64, key: &K) -> Front<V, E> {
        let now = self.now();
        match self
            .shard(hash)
            .probe(hash, key, now, self.inner.cfg.swr_ms)
        {
            Probe::Fresh(value) => Front::Answer(Ok(Fetched {
                value,
                source: Source::Hit,
            })),
            Probe::Stale {
                value,
                refresh: true,
                until,
            } => Front::StaleRefresh(value, until),
            Probe::Stale {
                value,
                refresh: false,
                ..
            } => Front::Answer(Ok(Fetched {
                value,
                source: Source::Stale,
            })),
            Probe::Negative(e) => match e.downcast::<E>() {
                Ok(e) => Front::Answer(Err(FetchError::Failed(e))),
                // Cached by a caller with another error type: treat as a miss.
                Err(_) => Front::Miss(None),
            },
            Probe::Miss(seen) => Front::Miss(Some(seen)),
        }
    }

    /// A new leader re-checks the store: a flight may have stored and ended between our lookup and
    /// our join (or a plain insert stored while we followed a lead that was then handed to
    /// us). Then the lead is finished with that value (nobody refills it); otherwise the lead
    /// comes back. `seen`: the shard's store count when our lookup missed, if it was a plain
    /// miss; unless a write came to the shard since, there is nothing new to read (one load
    /// instead of a lookup under the read lock: ~130 instructions of an uncontended fill).
    #[inline]
    pub(crate) fn recheck<'g, E: Send + Sync + 'static>(
        &self,
        leader: GroupLeader<'g, K, V>,
        hash: u64,
        seen: Option<Stores>,
    ) -> Result<Result<Fetched<V>, FetchError<E>>, GroupLeader<'g, K, V>> {
        let shard = self.shard(hash);
        if seen.is_some_and(|seen| !shard.stored_since(seen)) {
            return Err(leader);
        }
        match shard.peek_fresh(hash, leader.key(), self.now()) {
            Some(value) => Ok(leader
                .finish(Ok(value))
                .map(|value| Fetched {
                    value,
                    source: Source::Hit,
                })
                .map_err(|e| self.flight_error(e))),
            None => Err(leader),
        }
    }

    pub(crate) fn followed<E: Send + Sync + 'static>(
        &self,
        r: Result<V, FlightError<ErasedError>>,
    ) -> Result<Fetched<V>, FetchError<E>> {
        self.inner.tally.record(Event::Wait);
        if crate::observe::enabled() {
            tracing::debug!(
                target: "ttl_lru",
                cache = self.inner.name.as_deref(),
                outcome = if r.is_ok() { "value" } else { "error" },
                "joined a fill"
            );
        }
        match r {
            Ok(value) => Ok(Fetched {
                value,
                source: Source::Joined,
            }),
            Err(e) => Err(self.flight_error(e)),
        }
    }

    pub(crate) fn flight_error<E: Send + Sync + 'static>(
        &self,
        e: FlightError<ErasedError>,
    ) -> FetchError<E> {
        match e {
            FlightError::Failed(shared) => erased_to_fetch_error(ErasedError::clone(&shared)),
            FlightError::WaitTimedOut => {
                self.inner.fills.wait_timeouts.incr();
                FetchError::WaitTimedOut
            }
            _ => FetchError::Abandoned,
        }
    }

    /// Awaits the fill (with an optional timeout), then publishes. Runs in the caller or a task.
    async fn run_fill<E, T, Fut, L>(
        self,
        leader: L,
        hash: u64,
        fence: Started,
        ttl_fn: T,
        fut: Fut,
        timeout: Option<Duration>,
    ) -> Result<V, FetchError<E>>
    where
        E: Send + Sync + 'static,
        T: FnOnce(&V) -> Duration,
        Fut: Future<Output = Result<V, E>>,
        L: FillLeader<K, V>,
    {
        let result = match timeout {
            None => fut.await,
            Some(t) => match tokio::time::timeout(t, fut).await {
                Ok(r) => r,
                Err(_elapsed) => {
                    self.inner.fills.fill_timeouts.incr();
                    tracing::warn!(
                        target: "ttl_lru",
                        cache = self.inner.name.as_deref(),
                        key = crate::observe::key(self.inner.key_label, leader.key()),
                        elapsed_ms = fence.elapsed_ms(),
                        "fill timed out"
                    );
                    let retry_at = self.now().saturating_add(self.inner.negative_ttl_ms);
                    self.shard(hash).release_refresh_of_fill(
                        hash,
                        leader.key(),
                        retry_at,
                        fence.fence,
                        fence.stores,
                    );
                    let timed_out: ErasedError = Arc::new(FillTimeout);
                    let _ = leader.finish(Err(timed_out));
                    return Err(FetchError::FillTimedOut);
                }
            },
        };
        self.publish(leader, hash, fence, ttl_fn, result)
    }

    /// Stores a fill's outcome (fenced), then finishes the flight so waiters wake to a written
    /// store. Synchronous: no await between storing and publishing.
    pub(crate) fn publish<E, T, L>(
        &self,
        leader: L,
        hash: u64,
        started: Started,
        ttl_fn: T,
        result: Result<V, E>,
    ) -> Result<V, FetchError<E>>
    where
        E: Send + Sync + 'static,
        T: FnOnce(&V) -> Duration,
        L: FillLeader<K, V>,
    {
        let now = self.now();
        let fence = started.fence;
        match result {
            Ok(value) => {
                let expires_at = now.saturating_add(duration_to_ms(ttl_fn(&value)));
                // Too heavy to store: still returned to every caller (the rejection is counted).
                let stored = self.write_value(
                    leader.key().clone(),
                    value.clone(),
                    expires_at,
                    None,
                    now,
                    WriteMode::Fenced(fence),
                );
                if started.at.is_some() {
                    let outcome = match stored {
                        Ok(true) => "stored",
                        _ => "not_stored",
                    };
                    self.trace_finished(leader.key(), outcome, &started);
                }
                leader.finish(Ok(value)).map_err(|e| self.flight_error(e))
            }
            Err(error) => {
                self.inner.fills.fill_errors.incr();
                let erased: ErasedError = Arc::new(error);
                let neg = self.inner.negative_ttl_ms;
                let cached_until = (neg > 0).then(|| now.saturating_add(neg));
                let first = self.shard(hash).write_error(
                    hash,
                    leader.key().clone(),
                    Arc::clone(&erased),
                    cached_until,
                    now.saturating_add(neg),
                    now,
                    &self.inner.cfg,
                    WriteMode::Fenced(fence),
                    started.stores,
                );
                let until = cached_until.unwrap_or(now);
                let _ =
                    self.settle_write(hash, first, until, None, 1, now, WriteMode::Fenced(fence));
                if started.at.is_some() {
                    self.trace_finished(leader.key(), "failed", &started);
                }
                let _ = leader.finish(Err(Arc::clone(&erased)));
                Err(erased_to_fetch_error(erased))
            }
        }
    }

    /// Starts the one background refresh of a stale entry whose refresh this caller claimed.
    ///
    /// A refresh without a `timeout` of its own is abandoned if it is still running (or still
    /// following another fill of the key) when the entry's stale window ends (`until`): its
    /// lead passes to the oldest caller waiting on the key, which fills with its own future, or
    /// is released. A refresh is a task nobody awaits: without that bound, one whose origin
    /// never answered held the key's flight for good, and once the window ended every caller
    /// of the key joined it and waited forever (a miss's own leader is a caller, whose
    /// timeouts end it; this task had none).
    fn start_refresh<E, T, F, Fut>(
        &self,
        key: K,
        hash: u64,
        ttl_fn: T,
        fill: F,
        timeout: Option<Duration>,
        until: u64,
    ) where
        E: Send + Sync + 'static,
        T: FnOnce(&V) -> Duration + Send + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        // Reopens the refresh gate if the refresh never gets to publish (no runtime, the task is
        // dropped or panics). After a publish the entry was replaced or its gate already reset,
        // so the release is then a no-op. Made before any user code runs (`K::clone` below): a
        // panic there used to leave the gate claimed for the rest of the stale window.
        let gate = RefreshGate {
            fence: self.shard(hash).fence(hash),
            stores: self.shard(hash).stores(),
            cache: self.clone(),
            key,
            hash,
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let fence = self.shard(hash).fence(hash);
        let stores = self.shard(hash).stores();
        match self.inner.group.join(gate.key.clone()).now_or_never() {
            Some(Joined::Leader(leader)) => {
                let fence = Started::lead(fence, stores);
                if fence.at.is_some() {
                    self.trace_refresh(leader.key(), false);
                }
                self.inner.fills.refreshes.incr();
                self.inner.tally.record(Event::Fill);
                let fut = fill();
                let cache = self.clone();
                // The lead moves to the task, so it must own its group.
                let leader = leader.into_owned();
                rt.spawn(async move {
                    let _gate = gate;
                    let run = cache
                        .clone()
                        .run_fill::<E, T, Fut, _>(leader, hash, fence, ttl_fn, fut, timeout);
                    cache.within_window(until, timeout, run).await;
                });
            }
            // Another fill of this key is open. Its publish usually replaces the entry (or, if
            // it failed, reopens the gate at the retry time), but it may store nothing: fenced
            // by a write of the key, too heavy, or abandoned by its caller. So the claim is not
            // dropped: a task follows that fill, keeping the gate claimed meanwhile. If the
            // fill's lead is handed to it, it refreshes; when the fill ends, the gate is
            // released (a no-op if the entry was replaced or its gate reset), so the next stale
            // read can claim the refresh again. (Issue 17: the claim used to be disarmed here,
            // and a fenced fill left the entry unrefreshed for its whole stale window.)
            None => {
                let fut = fill();
                let cache = self.clone();
                let bound = cache.clone();
                rt.spawn(bound.within_window(until, timeout, async move {
                    let gate = gate;
                    // Cancel-safe: dropped while following, it leaves the queue and `gate`
                    // reopens the claim.
                    let leader = match cache.inner.group.join(gate.key.clone()).await {
                        Joined::Leader(leader) => leader,
                        Joined::Done(_) => return,
                    };
                    // Led a new flight after the open one stored its value: nothing to refresh.
                    let stored = cache
                        .shard(hash)
                        .peek_fresh(hash, leader.key(), cache.now());
                    if let Some(value) = stored {
                        let _ = leader.finish(Ok(value));
                        return;
                    }
                    let fence = Started::lead(fence, stores);
                    if fence.at.is_some() {
                        cache.trace_refresh(leader.key(), true);
                    }
                    cache.inner.fills.refreshes.incr();
                    cache.inner.tally.record(Event::Fill);
                    let _ = cache
                        .clone()
                        .run_fill::<E, T, Fut, _>(leader, hash, fence, ttl_fn, fut, timeout)
                        .await;
                }));
            }
            // A flight ended just now: reopen the gate (dropping `gate`).
            Some(Joined::Done(_)) => {}
        }
    }

    /// Runs a refresh task's work `run`; without a `timeout` of its own, only until the stale
    /// window ends at `until` (coarse-clock ms): then `run` is dropped, which hands its lead to
    /// the oldest waiting caller (or releases the key) and reopens the refresh gate. Counted as
    /// a fill timeout.
    async fn within_window(self, until: u64, timeout: Option<Duration>, run: impl Future) {
        if timeout.is_some() {
            run.await;
            return;
        }
        let left = Duration::from_millis(until.saturating_sub(self.now()));
        if tokio::time::timeout(left, run).await.is_err() {
            self.inner.fills.fill_timeouts.incr();
            tracing::warn!(
                target: "ttl_lru",
                cache = self.inner.name.as_deref(),
                "a refresh was still running when its entry's stale window ended: abandoned"
            );
        }
    }
}

/// Releases a claimed refresh gate on drop, unless the key was written since the claim: the
/// entry there now (and any claim on its refresh) belongs to that write. (Released by key, an
/// abandoned refresh of an older entry reopened the claim a newer entry's refresh held. The
/// fence is read just after the claim: a write in between is taken as before it, a window of
/// microseconds, as `bulk.rs`'s release.)
struct RefreshGate<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    cache: Cache<K, V>,
    key: K,
    hash: u64,
    fence: u64,
    /// The shard's store count just after the claim: a store of the key since (a fenced write
    /// too, which the plain-write `fence` does not see) replaced the claimed entry.
    stores: u64,
}

impl<K, V> Drop for RefreshGate<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn drop(&mut self) {
        let now = self.cache.now();
        self.cache.shard(self.hash).release_refresh_of_fill(
            self.hash,
            &self.key,
            now,
            self.fence,
            self.stores,
        );
    }
}

fn erased_to_fetch_error<E: Send + Sync + 'static>(erased: ErasedError) -> FetchError<E> {
    if (*erased).is::<FillTimeout>() {
        return FetchError::FillTimedOut;
    }
    if (*erased).is::<crate::bulk::MissingFromBatch>() {
        return FetchError::MissingFromBatch;
    }
    match erased.downcast::<E>() {
        Ok(e) => FetchError::Failed(e),
        Err(_) => FetchError::ErrorTypeMismatch,
    }
}

/// The events of `observe.rs`, out of line: only fills that are traced or timed reach them.
impl<K, V> Cache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    #[cold]
    #[inline(never)]
    pub(crate) fn trace_lead(&self, key: &K) {
        tracing::debug!(
            target: "ttl_lru",
            cache = self.inner.name.as_deref(),
            key = crate::observe::key(self.inner.key_label, key),
            "leads the fill"
        );
    }

    #[cold]
    #[inline(never)]
    fn trace_refresh(&self, key: &K, follows: bool) {
        tracing::debug!(
            target: "ttl_lru",
            cache = self.inner.name.as_deref(),
            key = crate::observe::key(self.inner.key_label, key),
            follows,
            "refresh started"
        );
    }

    /// The `fill finished` event, and the fill-duration histogram with the `metrics` feature.
    #[cold]
    #[inline(never)]
    pub(crate) fn trace_finished(&self, key: &K, outcome: &'static str, started: &Started) {
        #[cfg(feature = "metrics")]
        self.inner.metrics.record_fill(started, outcome);
        tracing::debug!(
            target: "ttl_lru",
            cache = self.inner.name.as_deref(),
            key = crate::observe::key(self.inner.key_label, key),
            outcome,
            elapsed_ms = started.elapsed_ms(),
            "fill finished"
        );
    }
}
