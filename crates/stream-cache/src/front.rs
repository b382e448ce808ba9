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

use crate::error::{BodyError, FillError, StorageError};
use crate::fence::WriteFence;
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
    /// Keep filling: the body is cached for later callers (the default).
    #[default]
    KeepFilling,
    /// Abort the write (`AbortReason::NoReaders`) at the next chunk after the last reader left.
    /// A caller woken with the published body counts as a reader until it has attached (or its
    /// `get_or_fill` future is dropped), so a body is never aborted under a caller that asked
    /// for it.
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

    /// A cache over `storage`.
    pub fn build<S: Storage>(self, storage: S) -> StreamCache<S> {
        let mut group = Group::builder();
        if let Some(timeout) = self.coalesce_wait_timeout {
            group = group.wait_timeout(timeout);
        }
        StreamCache {
            storage: Arc::new(storage),
            group: group.build(),
            config: self,
            counters: Arc::default(),
        }
    }
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
}

impl<S: Storage> Clone for StreamCache<S> {
    fn clone(&self) -> Self {
        StreamCache {
            storage: Arc::clone(&self.storage),
            group: self.group.clone(),
            config: self.config.clone(),
            counters: Arc::clone(&self.counters),
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
        self.group.forget(&key);
        self.storage.purge(&key).await
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
        let key = key.into();
        let mut fill = Some(fill);
        for attempt in 0..MAX_ATTEMPTS {
            if let Some(hit) = self
                .storage
                .lookup(&key)
                .await
                .map_err(FillError::Storage)?
            {
                return Ok(if attempt == 0 {
                    self.counted_hit(hit)
                } else {
                    // This call was counted as a miss already.
                    self.wrap(hit.meta, hit.body)
                });
            }
            if attempt == 0 {
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
                    // The object may have been published between our lookup and our lead.
                    match self.storage.lookup(&key).await {
                        Ok(Some(hit)) => {
                            let published = Published {
                                meta: hit.meta.clone(),
                                source: None,
                                _claim: Claim::new(),
                            };
                            let _ = leader.finish(Ok(published));
                            return Ok(self.wrap(hit.meta, hit.body));
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
                    return self.lead(leader, key, fence, fill).await;
                }
                // The reader is opened before `published` (and its claim) is dropped.
                Joined::Done(Ok(published)) => match &published.source {
                    Some(source) => return Ok(self.wrap(published.meta.clone(), source.open())),
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
        let fail = |leader: Leader<'_, _, _, _>, failure: LeadFailure| {
            if !matches!(failure, LeadFailure::Aborted(_)) {
                // An aborted body was counted by the pump.
                counters.fill_failed();
            }
            let error = FillError::from(&failure);
            let _ = leader.finish(Err(failure));
            Err(error)
        };
        self.counters.fill_started();
        let upstream = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, fill()).await {
                Ok(result) => result,
                Err(_elapsed) => return fail(leader, LeadFailure::FillTimedOut),
            },
            None => fill().await,
        };
        let upstream = match upstream {
            Ok(upstream) => upstream,
            Err(error) => return fail(leader, LeadFailure::Upstream(Arc::new(error))),
        };
        if let (Some(limit), Some(declared)) =
            (self.config.max_body_size, upstream.meta.expected_len)
            && declared > limit
        {
            return fail(leader, LeadFailure::TooLarge { limit, declared });
        }
        if upstream.meta.expires_at.is_some() && !self.storage.capabilities().expiry {
            return fail(
                leader,
                LeadFailure::Storage(StorageError::Unsupported(
                    "object expiry (the backend lacks the expiry capability)",
                )),
            );
        }
        let meta = upstream.meta.clone();
        let writer = match self
            .storage
            .begin_write_fenced(&key, upstream.meta, fence)
            .await
        {
            Ok(writer) => writer,
            Err(error) => return fail(leader, LeadFailure::Storage(error)),
        };
        // No await from here until the pump is spawned and the meta published.
        let source = writer.source();
        let claim = Claim::new();
        let pump = Pump {
            counters: Arc::clone(&self.counters),
            claims: claim.counter(),
            writer,
            body: upstream.body,
            deadline,
            max_body_size: self.config.max_body_size,
            no_reader_policy: self.config.no_reader_policy,
            source: source.clone(),
        };
        match source {
            Some(source) => {
                let own_reader = source.open();
                tokio::spawn(pump.run_counted());
                let _ = leader.finish(Ok(Published {
                    meta: meta.clone(),
                    source: Some(source),
                    _claim: claim,
                }));
                Ok(self.wrap(meta, own_reader))
            }
            None => {
                let outcome = tokio::spawn(pump.run_counted()).await;
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
                    Ok(Err(reason)) => fail(leader, LeadFailure::Aborted(reason)),
                    Err(_join_error) => {
                        fail(leader, LeadFailure::Aborted(AbortReason::WriterDropped))
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

    /// `run`, with its outcome counted.
    async fn run_counted(self) -> Result<u64, AbortReason> {
        let counters = Arc::clone(&self.counters);
        let outcome = self.run().await;
        counters.fill_ended(outcome.as_ref().map(|_| ()).map_err(AbortReason::kind));
        outcome
    }

    async fn run(mut self) -> Result<u64, AbortReason> {
        let mut written = 0u64;
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
                && written + n > limit
            {
                return self.abort(AbortReason::TooLarge { limit });
            }
            match Self::before_deadline(self.deadline, self.writer.write(chunk)).await {
                None => return self.abort(AbortReason::FillTimedOut),
                Some(Err(error)) => return Err(error.reason().clone()),
                Some(Ok(())) => written += n,
            }
            // Claims first, then readers: a follower opens its reader before it drops its
            // claim, so seeing no claim means its reader is already counted.
            if self.no_reader_policy == NoReaderPolicy::Abort
                && self.claims.load(Ordering::SeqCst) == 0
                && self.source.as_ref().and_then(|s| s.reader_count()) == Some(0)
            {
                return self.abort(AbortReason::NoReaders);
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
