//! `StreamCache`: the front users call. One caller per key fills (coalesced with `coalesce`);
//! every caller gets a reader, attached to the partial body as soon as the filler publishes
//! its meta.
//!
//! Why the flight ends at "meta published" rather than "body complete": followers then attach
//! to the body while it streams (time to first byte is the upstream's, not the whole body's), and
//! once the body streams the fill no longer belongs to any caller: it runs on a spawned task, so
//! the caller that started it can go away without failing everybody else's body. Before meta is
//! published the lead is a `coalesce::Leader` guard, so a cancelled filler hands the fill to
//! another waiting caller.
//!
//! What a caller and an operator can see: [`StreamCache::get_or_fill_with`] says how a body was
//! obtained ([`Obtained`]: hit, led, joined); every fill's end (completed, aborted by cause,
//! failed, cancelled) is reported once to the builder's `on_fill_end` hook, the
//! `fills_in_flight` gauge, `tracing` and the `metrics` feature (see `observe.rs`, `meter.rs`).
//! [`StreamCache::replace`] refills a key whose stored object must stay visible until the new
//! head arrives (stale-while-revalidate), coalesced with the key's other fills.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use coalesce::{FlightError, Group, Joined, Leader};
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{BodyError, FillError, StorageError};
use crate::fence::WriteFence;
use crate::observe::{FillEnd, FillOutcome, FillTracker, HookSlot};
use crate::state::{AbortReason, WriteState};
use crate::stats::{Counters, StreamCacheStats, Stripe};
use crate::traits::{
    BodyReader, BodySource, BodyWriter, ByteRange, CacheKey, Hit, ObjectMeta, Storage,
};

/// How many times a caller re-runs lookup/join when a published object vanished (purged or
/// replaced) before it could attach.
const MAX_ATTEMPTS: usize = 4;

/// What a fill produces: the object's meta, then its body as a stream of chunks.
pub struct Upstream<E> {
    /// Meta to store (a declared `expected_len` is checked when the body ends).
    pub meta: ObjectMeta,
    /// The body. An `Err` item aborts the write with `AbortReason::Upstream`.
    pub body: BoxStream<'static, Result<Bytes, E>>,
}

impl<E> Upstream<E> {
    /// Meta plus a body stream.
    pub fn new(meta: ObjectMeta, body: BoxStream<'static, Result<Bytes, E>>) -> Self {
        Upstream { meta, body }
    }
}

/// What the fill does when every reader of a streaming body has gone away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum NoReaderPolicy {
    /// Keep filling: the body is cached for later callers (the default). Under either policy
    /// a write that is no longer its key's current write (invalidated, replaced) stops at the
    /// next chunk once nobody reads it: no later caller could ever read it
    /// ([`BodyWriter::is_current`]).
    #[default]
    KeepFilling,
    /// Abort the write (`AbortReason::NoReaders`) at the next chunk after the last reader left.
    /// A caller woken with the published body counts as a reader until it has attached (or its
    /// `get_or_fill` future is dropped), so a body is never aborted under a caller that asked
    /// for it. Not for a [`StreamCache::replace`]'s fill, which keeps filling: its head has
    /// already replaced the stored object, and an abort would leave the key with neither.
    Abort,
}

/// Limits and policies of a [`StreamCache`].
#[derive(Debug, Clone, Default)]
pub struct StreamCacheBuilder {
    max_body_size: Option<u64>,
    fill_timeout: Option<Duration>,
    reader_wait_timeout: Option<Duration>,
    coalesce_wait_timeout: Option<Duration>,
    no_reader_policy: NoReaderPolicy,
    on_fill_end: Option<HookSlot>,
    #[cfg(feature = "metrics")]
    metrics_name: Option<String>,
}

impl StreamCacheBuilder {
    /// No limits, `NoReaderPolicy::KeepFilling`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bodies larger than this abort with `TooLarge` (a larger declared length is refused with
    /// `FillError::TooLarge` before anything is stored).
    pub fn max_body_size(mut self, bytes: u64) -> Self {
        self.max_body_size = Some(bytes);
        self
    }

    /// The whole fill (meta and body) must end within this time: before meta it fails with
    /// `FillError::FillTimedOut`; afterwards the write aborts with `AbortReason::FillTimedOut`.
    pub fn fill_timeout(mut self, timeout: Duration) -> Self {
        self.fill_timeout = Some(timeout);
        self
    }

    /// A reader that waits longer than this for the next bytes gets `BodyError::WaitTimedOut`
    /// (and may read again).
    pub fn reader_wait_timeout(mut self, timeout: Duration) -> Self {
        self.reader_wait_timeout = Some(timeout);
        self
    }

    /// A caller waiting for another caller's fill to publish meta gives up after this, with
    /// `FillError::WaitTimedOut`.
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.coalesce_wait_timeout = Some(timeout);
        self
    }

    /// What a streaming fill does when no reader is left.
    pub fn no_reader_policy(mut self, policy: NoReaderPolicy) -> Self {
        self.no_reader_policy = policy;
        self
    }

    /// Call `hook` once for every fill this cache runs, when it ends: completed, aborted (with
    /// its [`AbortKind`](crate::AbortKind), as a fill, not as each reader saw it), failed before
    /// its body, or cancelled before its body (the lead passed on). Called on the task that ended
    /// the fill (the pump's, or the leading caller's), holding no lock of this crate; keep it
    /// short. A panic in it propagates there: in the pump task after the write has ended (the
    /// body's readers are unaffected), in a caller's `get_or_fill` otherwise.
    pub fn on_fill_end(mut self, hook: impl Fn(&FillEnd<'_>) + Send + Sync + 'static) -> Self {
        self.on_fill_end = Some(HookSlot(Arc::new(hook)));
        self
    }

    /// The `cache` label of this cache's metrics (feature `metrics`, see
    /// [`StreamCache::publish_metrics`]). Handles are registered by [`build`](Self::build) with
    /// the recorder installed then: install the recorder first.
    #[cfg(feature = "metrics")]
    pub fn metrics_name(mut self, name: impl Into<String>) -> Self {
        self.metrics_name = Some(name.into());
        self
    }

    /// A cache over `storage`.
    pub fn build<S: Storage>(self, storage: S) -> StreamCache<S> {
        let mut group = Group::builder();
        if let Some(timeout) = self.coalesce_wait_timeout {
            group = group.wait_timeout(timeout);
        }
        StreamCache {
            storage: Arc::new(storage),
            group: group.build(),
            #[cfg(feature = "metrics")]
            metrics: Arc::new(crate::meter::Metrics::register(
                self.metrics_name.as_deref(),
            )),
            config: self,
            counters: Arc::default(),
        }
    }
}

/// How [`StreamCache::get_or_fill_with`] (or [`replace`](StreamCache::replace)) obtained the
/// body it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Obtained {
    /// Found in storage by this call's first lookup, complete or still being written (the
    /// reader's `state()` says which). Counted as a hit or partial hit.
    Hit,
    /// This caller ran `fill`: its body is streaming from this call's fill (which then belongs
    /// to a spawned task, see [`get_or_fill`](StreamCache::get_or_fill)).
    Led,
    /// Another caller's fill produced it: this caller waited for it and attached to its body,
    /// or found it stored once that fill had published (including between this call's lookup
    /// and its taking the lead).
    Joined,
}

/// What the leader publishes to the callers coalesced on it.
#[derive(Clone)]
struct Published {
    meta: ObjectMeta,
    /// Readers bound to the leader's write; `None` when the backend has no partial reads and the
    /// object was stored complete (followers look it up).
    source: Option<Arc<dyn BodySource>>,
    /// Held by every copy of this value (the flight's and each woken follower's) until the
    /// follower has opened its reader: a follower woken with the body but not yet attached
    /// counts as a reader for `NoReaderPolicy::Abort`.
    _claim: Claim,
}

/// Whether `obtain` serves `get_or_fill` (look up first) or `replace` (fill regardless).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    GetOrFill,
    Replace,
}

/// A counted claim on a published body (see `Published`). Cloning counts one more holder,
/// dropping one fewer.
struct Claim(Arc<AtomicUsize>);

impl Claim {
    fn new() -> Self {
        Claim(Arc::new(AtomicUsize::new(1)))
    }

    fn counter(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.0)
    }
}

impl Clone for Claim {
    fn clone(&self) -> Self {
        self.0.fetch_add(1, Ordering::SeqCst);
        Claim(Arc::clone(&self.0))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a leader published no object (shared with its followers).
#[derive(Debug)]
enum LeadFailure {
    Upstream(Arc<dyn std::error::Error + Send + Sync>),
    Storage(StorageError),
    FillTimedOut,
    TooLarge { limit: u64, declared: u64 },
    Aborted(AbortReason),
}

impl From<&LeadFailure> for FillError {
    fn from(failure: &LeadFailure) -> Self {
        match failure {
            LeadFailure::Upstream(error) => FillError::Upstream(Arc::clone(error)),
            LeadFailure::Storage(error) => FillError::Storage(error.clone()),
            LeadFailure::FillTimedOut => FillError::FillTimedOut,
            LeadFailure::TooLarge { limit, declared } => FillError::TooLarge {
                limit: *limit,
                declared: *declared,
            },
            LeadFailure::Aborted(reason) => FillError::Aborted(reason.clone()),
        }
    }
}

/// A read-through cache of streamed bodies over a [`Storage`].
pub struct StreamCache<S: Storage> {
    storage: Arc<S>,
    group: Group<CacheKey, Published, LeadFailure>,
    config: StreamCacheBuilder,
    counters: Arc<Counters>,
    #[cfg(feature = "metrics")]
    metrics: Arc<crate::meter::Metrics>,
}

impl<S: Storage> Clone for StreamCache<S> {
    fn clone(&self) -> Self {
        StreamCache {
            storage: Arc::clone(&self.storage),
            group: self.group.clone(),
            config: self.config.clone(),
            counters: Arc::clone(&self.counters),
            #[cfg(feature = "metrics")]
            metrics: Arc::clone(&self.metrics),
        }
    }
}

impl<S: Storage> std::fmt::Debug for StreamCache<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamCache")
            .field("config", &self.config)
            .field("fills_publishing", &self.group.in_flight())
            .finish()
    }
}

impl<S: Storage> StreamCache<S> {
    /// A cache over `storage` with no limits (see [`StreamCacheBuilder`] for limits).
    pub fn new(storage: S) -> Self {
        StreamCacheBuilder::new().build(storage)
    }

    /// The storage behind this cache.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// Fills that have not yet published meta.
    pub fn fills_publishing(&self) -> usize {
        self.group.in_flight()
    }

    /// The cache's counters (shared by its clones) and the backend's used/capacity bytes.
    pub fn stats(&self) -> StreamCacheStats {
        self.counters.snapshot(self.storage.usage())
    }

    /// Publish [`stats`](Self::stats) through the `metrics` facade (counters set with
    /// `absolute`, gauges set): see the crate's `metrics` feature table in `src/meter.rs`. Call it
    /// from the scrape handler or a timer; the hit path never calls the recorder.
    #[cfg(feature = "metrics")]
    pub fn publish_metrics(&self) {
        self.metrics.publish(&self.stats());
    }

    /// Find `key` without filling.
    ///
    /// Cancel safety: as the storage's `lookup` (both shipped backends: nothing changes).
    pub async fn lookup(&self, key: impl Into<CacheKey>) -> Result<Option<Hit>, StorageError> {
        match self.storage.lookup(&key.into()).await? {
            Some(hit) => Ok(Some(self.counted_hit(hit))),
            None => {
                self.counters.miss();
                Ok(None)
            }
        }
    }

    /// Count a storage hit (complete or partial) and wrap its reader.
    fn counted_hit(&self, hit: Hit) -> Hit {
        let stripe = self.counters.stripe();
        let partial = matches!(hit.body.state(), WriteState::Partial(_));
        self.counters.hit(stripe, partial);
        self.wrap(hit.meta, hit.body)
    }

    /// Remove `key` (an in-progress write is aborted with `Purged`), and detach a fill that has
    /// not yet published so later callers start afresh. Final: once this returns, no fill that
    /// started before it publishes a body under `key` (its write is fenced out and ends
    /// `Aborted(Purged)` for its readers), and a fill started after it is never replaced by an
    /// older one (see `Storage::fence`).
    ///
    /// Cancel safety: as the storage's `purge`.
    pub async fn purge(&self, key: impl Into<CacheKey>) -> Result<bool, StorageError> {
        let key = key.into();
        self.counters.purge();
        let removed = self.storage.purge(&key).await;
        // After the storage's purge, not before: a fill that started in between is fenced out
        // by it, and a caller that came after this returns must not join that fill (found by
        // review: it got a body born `Aborted(Purged)`).
        self.group.forget(&key);
        removed
    }

    /// Remove `key` from lookups without cutting off its readers (the storage's
    /// [`invalidate`](Storage::invalidate)), and detach a fill that has not yet published so
    /// later callers start afresh. As final as [`purge`](Self::purge) for later lookups and
    /// fills (no fill that started before it publishes under `key`; one whose write had not
    /// begun is fenced out as by a purge), but a body already being written goes on, complete,
    /// for the readers attached to it and for callers already waiting on its fill: they asked
    /// before the invalidation. Counted as a purge.
    ///
    /// Cancel safety: as the storage's `invalidate`.
    pub async fn invalidate(&self, key: impl Into<CacheKey>) -> Result<bool, StorageError> {
        let key = key.into();
        self.counters.purge();
        let removed = self.storage.invalidate(&key).await;
        // After, as `purge`'s.
        self.group.forget(&key);
        removed
    }

    /// Return a reader for `key`, running `fill` if nobody has the object and nobody is filling
    /// it. Concurrent callers for one key share one fill: they get readers attached to its body
    /// as soon as its meta is published, while it streams. Each reader ends with `Ok(None)` only
    /// if the body was completely and successfully written.
    ///
    /// Cancel safety, at each await:
    /// - the storage lookup: nothing changed;
    /// - waiting on another caller's fill: this caller leaves the queue; the fill goes on;
    /// - leading, while `fill` produces meta or the storage begins the write: the lead (a
    ///   `coalesce::Leader` guard) passes to the next waiting caller, which runs its own `fill`;
    ///   no object is left visible;
    /// - once the write has begun the body is pumped by a spawned task before this function's
    ///   next await, so dropping the caller does not stop the fill (see [`NoReaderPolicy`]). If
    ///   the backend lacks partial reads, the leader awaits that task: dropped there, the fill
    ///   still completes, and the lead passes on (the next caller finds the object or refills).
    pub async fn get_or_fill<F, Fut, E>(
        &self,
        key: impl Into<CacheKey>,
        fill: F,
    ) -> Result<Hit, FillError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Upstream<E>, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        self.obtain(key.into(), fill, Mode::GetOrFill)
            .await
            .map(|(hit, _)| hit)
    }

    /// [`get_or_fill`](Self::get_or_fill), also saying how the body was obtained: a hit, this
    /// caller's own fill, or another caller's. Cancel safety: as `get_or_fill`.
    pub async fn get_or_fill_with<F, Fut, E>(
        &self,
        key: impl Into<CacheKey>,
        fill: F,
    ) -> Result<(Hit, Obtained), FillError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Upstream<E>, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        self.obtain(key.into(), fill, Mode::GetOrFill).await
    }

    /// Fill `key` afresh although an object may be stored (a stale one, say), coalesced with
    /// every other fill of `key` through this cache: if one is already in flight this caller
    /// joins it instead of fetching again. The stored object stays visible to lookups (and its
    /// readers keep reading it) until the new fill's meta is published, which replaces it
    /// atomically; readers attached to the old body finish it. If `fill` fails, or the new
    /// write is refused, the old object stays (for serve-stale-on-error). Returns a reader of the
    /// new body (drop it to let the fill go on without you, under either [`NoReaderPolicy`]).
    ///
    /// Counted as a fill (`fills_started` ...), not as a hit or miss. Cancel safety: as
    /// `get_or_fill`'s waiting and leading awaits (a dropped leader passes the lead on before
    /// the write begins, leaving the old object in place).
    pub async fn replace<F, Fut, E>(
        &self,
        key: impl Into<CacheKey>,
        fill: F,
    ) -> Result<(Hit, Obtained), FillError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Upstream<E>, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        self.obtain(key.into(), fill, Mode::Replace).await
    }

    async fn obtain<F, Fut, E>(
        &self,
        key: CacheKey,
        fill: F,
        mode: Mode,
    ) -> Result<(Hit, Obtained), FillError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Upstream<E>, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let mut fill = Some(fill);
        for attempt in 0..MAX_ATTEMPTS {
            // A replace ignores what is stored until it has joined or led a fill.
            let look = mode == Mode::GetOrFill || attempt > 0;
            if look
                && let Some(hit) = self
                    .storage
                    .lookup(&key)
                    .await
                    .map_err(FillError::Storage)?
            {
                return Ok(if attempt == 0 {
                    (self.counted_hit(hit), Obtained::Hit)
                } else {
                    // This call was counted as a miss already; the object is a fill's we waited on.
                    (self.wrap(hit.meta, hit.body), Obtained::Joined)
                });
            }
            if attempt == 0 && mode == Mode::GetOrFill {
                self.counters.miss();
            }
            // A miss: joining, waiting and filling use tokio (spawn, clock). Checked here, not
            // on hits, so the hit path pays nothing for it.
            if tokio::runtime::Handle::try_current().is_err() {
                return Err(FillError::NoRuntime);
            }
            match self.group.join(key.clone()).await {
                Joined::Leader(leader) => {
                    // The fill starts here: a purge from now on fences this fill's write out,
                    // and a fill that starts later wins over this one (see `Storage::fence`).
                    let fence = self.storage.fence(&key);
                    // The object may have been published between our lookup and our lead (a
                    // replace leads regardless: what is stored is what it replaces).
                    let recheck = match mode {
                        Mode::GetOrFill => self.storage.lookup(&key).await,
                        Mode::Replace => Ok(None),
                    };
                    match recheck {
                        Ok(Some(hit)) => {
                            let published = Published {
                                meta: hit.meta.clone(),
                                source: None,
                                _claim: Claim::new(),
                            };
                            let _ = leader.finish(Ok(published));
                            return Ok((self.wrap(hit.meta, hit.body), Obtained::Joined));
                        }
                        Ok(None) => {}
                        Err(error) => {
                            let _ = leader.finish(Err(LeadFailure::Storage(error.clone())));
                            return Err(FillError::Storage(error));
                        }
                    }
                    let Some(fill) = fill.take() else {
                        // Unreachable in practice: a caller leads at most once, as it returns.
                        drop(leader);
                        return Err(FillError::Abandoned);
                    };
                    return self
                        .lead(leader, key, fence, fill, mode)
                        .await
                        .map(|hit| (hit, Obtained::Led));
                }
                // The reader is opened before `published` (and its claim) is dropped.
                Joined::Done(Ok(published)) => match &published.source {
                    Some(source) => {
                        let hit = self.wrap(published.meta.clone(), source.open());
                        return Ok((hit, Obtained::Joined));
                    }
                    // Stored complete: look it up on the next round.
                    None => continue,
                },
                Joined::Done(Err(FlightError::Failed(failure))) => {
                    return Err(FillError::from(&*failure));
                }
                Joined::Done(Err(FlightError::WaitTimedOut)) => {
                    return Err(FillError::WaitTimedOut);
                }
                Joined::Done(Err(_)) => return Err(FillError::Abandoned),
            }
        }
        Err(FillError::Vanished)
    }

    /// Run the fill as leader: publish meta and the write's reader source, spawn the body pump.
    async fn lead<F, Fut, E>(
        &self,
        leader: Leader<'_, CacheKey, Published, LeadFailure>,
        key: CacheKey,
        fence: WriteFence,
        fill: F,
        mode: Mode,
    ) -> Result<Hit, FillError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Upstream<E>, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let deadline = self
            .config
            .fill_timeout
            // A timeout too large to represent is no deadline at all (not a panic).
            .and_then(|timeout| Instant::now().checked_add(timeout));
        let counters = &self.counters;
        self.counters.fill_started();
        // Reports this fill's end once, wherever it ends (a dropped future: `Cancelled`).
        let tracker = FillTracker::start(
            Arc::clone(&self.counters),
            key.clone(),
            self.config
                .on_fill_end
                .as_ref()
                .map(|slot| Arc::clone(&slot.0)),
            #[cfg(feature = "metrics")]
            Some(Arc::clone(&self.metrics)),
        );
        let fail = |leader: Leader<'_, _, _, _>, failure: LeadFailure, tracker: FillTracker| {
            if !matches!(failure, LeadFailure::Aborted(_)) {
                // An aborted body was counted and reported by the pump.
                counters.fill_failed();
                tracker.end(FillOutcome::Failed);
            }
            let error = FillError::from(&failure);
            let _ = leader.finish(Err(failure));
            Err(error)
        };
        let upstream = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, fill()).await {
                Ok(result) => result,
                Err(_elapsed) => return fail(leader, LeadFailure::FillTimedOut, tracker),
            },
            None => fill().await,
        };
        let upstream = match upstream {
            Ok(upstream) => upstream,
            Err(error) => return fail(leader, LeadFailure::Upstream(Arc::new(error)), tracker),
        };
        if let (Some(limit), Some(declared)) =
            (self.config.max_body_size, upstream.meta.expected_len)
            && declared > limit
        {
            return fail(leader, LeadFailure::TooLarge { limit, declared }, tracker);
        }
        if upstream.meta.expires_at.is_some() && !self.storage.capabilities().expiry {
            return fail(
                leader,
                LeadFailure::Storage(StorageError::Unsupported(
                    "object expiry (the backend lacks the expiry capability)",
                )),
                tracker,
            );
        }
        let meta = upstream.meta.clone();
        // Under the fill deadline too (found by review: a slow `begin_write`, a saturated
        // blocking pool or a remote backend, held the leader and its followers past it).
        // Dropped there, the backend's cancel safety leaves no visible object.
        let begun = self.storage.begin_write_fenced(&key, upstream.meta, fence);
        let begun = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, begun).await {
                Ok(begun) => begun,
                Err(_elapsed) => return fail(leader, LeadFailure::FillTimedOut, tracker),
            },
            None => begun.await,
        };
        let writer = match begun {
            Ok(writer) => writer,
            Err(error) => return fail(leader, LeadFailure::Storage(error), tracker),
        };
        // No await from here until the pump is spawned and the meta published.
        let source = writer.source();
        let claim = Claim::new();
        let span = tracker.span();
        let pump = Pump {
            counters: Arc::clone(&self.counters),
            claims: claim.counter(),
            writer,
            body: upstream.body,
            deadline,
            max_body_size: self.config.max_body_size,
            // A replace keeps filling without readers whatever the policy: its head already
            // replaced the stored object, so an abort would leave the key with neither body.
            no_reader_policy: match mode {
                Mode::Replace => NoReaderPolicy::KeepFilling,
                Mode::GetOrFill => self.config.no_reader_policy,
            },
            source: source.clone(),
        };
        match source {
            Some(source) => {
                let own_reader = source.open();
                tokio::spawn(pump.run_counted(tracker).instrument(span));
                let _ = leader.finish(Ok(Published {
                    meta: meta.clone(),
                    source: Some(source),
                    _claim: claim,
                }));
                Ok(self.wrap(meta, own_reader))
            }
            None => {
                let outcome = tokio::spawn(pump.run_counted(tracker).instrument(span)).await;
                match outcome {
                    Ok(Ok(_len)) => {
                        let _ = leader.finish(Ok(Published {
                            meta: meta.clone(),
                            source: None,
                            _claim: claim,
                        }));
                        match self
                            .storage
                            .lookup(&key)
                            .await
                            .map_err(FillError::Storage)?
                        {
                            Some(hit) => Ok(self.wrap(hit.meta, hit.body)),
                            None => Err(FillError::Vanished),
                        }
                    }
                    Ok(Err(reason)) => {
                        let _ = leader.finish(Err(LeadFailure::Aborted(reason.clone())));
                        Err(FillError::Aborted(reason))
                    }
                    Err(_join_error) => {
                        let reason = AbortReason::WriterDropped;
                        let _ = leader.finish(Err(LeadFailure::Aborted(reason.clone())));
                        Err(FillError::Aborted(reason))
                    }
                }
            }
        }
    }

    /// The reader handed to callers: counts the bytes it serves and bounds its waits by the
    /// reader wait timeout. One allocation per hit (the storage's reader is already boxed);
    /// the only shared write is on this thread's counter stripe.
    fn wrap(&self, meta: ObjectMeta, body: Box<dyn BodyReader>) -> Hit {
        let body = Box::new(FrontReader {
            inner: body,
            timeout: self.config.reader_wait_timeout,
            stripe: Arc::clone(self.counters.stripe()),
            served: 0,
        });
        Hit { meta, body }
    }
}

/// Copies an upstream body into a writer, enforcing the limits. Runs on a spawned task; if the
/// task is dropped (runtime shutdown) the writer's drop aborts the write.
struct Pump<E> {
    writer: Box<dyn BodyWriter>,
    body: BoxStream<'static, Result<Bytes, E>>,
    deadline: Option<Instant>,
    max_body_size: Option<u64>,
    no_reader_policy: NoReaderPolicy,
    source: Option<Arc<dyn BodySource>>,
    /// Holders of the published body's claim: followers woken with it that have not attached.
    claims: Arc<AtomicUsize>,
    counters: Arc<Counters>,
}

impl<E: std::error::Error + Send + Sync + 'static> Pump<E> {
    /// Await `future` before the fill deadline; `None` if the deadline passed first.
    async fn before_deadline<T>(
        deadline: Option<Instant>,
        future: impl Future<Output = T>,
    ) -> Option<T> {
        match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
            None => Some(future.await),
        }
    }

    fn abort(self, reason: AbortReason) -> Result<u64, AbortReason> {
        self.writer.abort(reason.clone());
        Err(reason)
    }

    /// `run`, with its outcome counted and reported to `tracker` (which, if this task is
    /// dropped, reports `Cancelled` from its own drop).
    async fn run_counted(self, tracker: FillTracker) -> Result<u64, AbortReason> {
        let counters = Arc::clone(&self.counters);
        let mut written = 0;
        let outcome = self.run(&mut written).await;
        counters.fill_ended(outcome.as_ref().map(|_| ()).map_err(AbortReason::kind));
        tracker.end(match &outcome {
            Ok(bytes) => FillOutcome::Completed { bytes: *bytes },
            Err(reason) => FillOutcome::Aborted {
                kind: reason.kind(),
                bytes: written,
            },
        });
        outcome
    }

    /// Pump the body; `written` counts the bytes written so far.
    async fn run(mut self, written: &mut u64) -> Result<u64, AbortReason> {
        loop {
            let Some(next) = Self::before_deadline(self.deadline, self.body.next()).await else {
                return self.abort(AbortReason::FillTimedOut);
            };
            let chunk = match next {
                None => {
                    return match Self::before_deadline(self.deadline, self.writer.finish()).await {
                        Some(result) => result.map_err(|error| error.reason().clone()),
                        // The finish future (and the writer in it) was dropped: aborted as
                        // WriterDropped unless the completion was already applied.
                        None => Err(AbortReason::FillTimedOut),
                    };
                }
                Some(Err(error)) => return self.abort(AbortReason::upstream(error)),
                Some(Ok(chunk)) => chunk,
            };
            let n = chunk.len() as u64;
            if let Some(limit) = self.max_body_size
                && *written + n > limit
            {
                return self.abort(AbortReason::TooLarge { limit });
            }
            match Self::before_deadline(self.deadline, self.writer.write(chunk)).await {
                None => return self.abort(AbortReason::FillTimedOut),
                Some(Err(error)) => return Err(error.reason().clone()),
                Some(Ok(())) => *written += n,
            }
            // Claims first, then readers: a follower opens its reader before it drops its
            // claim, so seeing no claim means its reader is already counted.
            let unread = self.claims.load(Ordering::SeqCst) == 0
                && self.source.as_ref().and_then(|s| s.reader_count()) == Some(0);
            // A write no longer current (invalidated, replaced) can never be looked up again:
            // with nobody reading it, the rest of the body would be pulled and charged for
            // nobody, under either policy (found by review: after an invalidation a
            // `KeepFilling` fill downloaded a whole body nobody could read, evicting live
            // objects for it).
            if unread
                && (self.no_reader_policy == NoReaderPolicy::Abort || !self.writer.is_current())
            {
                // In one step with readers attaching where the backend can: a lookup that
                // attached since the count above keeps its body (found by review: counted as
                // a hit, it then read `NoReaders`).
                match self
                    .source
                    .as_ref()
                    .and_then(|s| s.abort_if_unread(AbortReason::NoReaders))
                {
                    Some(false) => continue,
                    Some(true) | None => return self.abort(AbortReason::NoReaders),
                }
            }
        }
    }
}

/// The reader `StreamCache` hands out: counts bytes served (locally, added to its stripe when
/// the body ends or the reader is dropped) and bounds every wait by the reader wait timeout.
struct FrontReader {
    inner: Box<dyn BodyReader>,
    timeout: Option<Duration>,
    stripe: Arc<Stripe>,
    /// Bytes returned and not yet added to the stripe.
    served: u64,
}

impl FrontReader {
    fn flush(&mut self) {
        self.stripe.served(std::mem::take(&mut self.served));
    }
}

impl Drop for FrontReader {
    fn drop(&mut self) {
        self.flush();
    }
}

#[async_trait]
impl BodyReader for FrontReader {
    /// Cancel safety: as the inner reader; a timeout is a cancelled read, so nothing is lost.
    async fn read(&mut self) -> Result<Option<Bytes>, BodyError> {
        let result = match self.timeout {
            None => self.inner.read().await,
            Some(_) if tokio::runtime::Handle::try_current().is_err() => Err(BodyError::NoRuntime),
            Some(timeout) => tokio::time::timeout(timeout, self.inner.read())
                .await
                .unwrap_or(Err(BodyError::WaitTimedOut)),
        };
        match &result {
            Ok(Some(chunk)) => self.served += chunk.len() as u64,
            Ok(None) | Err(_) => self.flush(),
        }
        result
    }

    /// Cancel safety: as the inner reader.
    async fn seek(&mut self, range: ByteRange) -> Result<(), BodyError> {
        match self.timeout {
            None => self.inner.seek(range).await,
            Some(_) if tokio::runtime::Handle::try_current().is_err() => Err(BodyError::NoRuntime),
            Some(timeout) => tokio::time::timeout(timeout, self.inner.seek(range))
                .await
                .unwrap_or(Err(BodyError::WaitTimedOut)),
        }
    }

    fn state(&self) -> WriteState {
        self.inner.state()
    }

    fn position(&self) -> u64 {
        self.inner.position()
    }
}
