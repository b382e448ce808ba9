//! `Faulty<S>`: a `Storage` wrapper that injects faults into any backend: fail the Nth lookup,
//! `begin_write`, write, finish or read; abort every stream after N bytes; make every operation
//! stay pending for K polls first.
//!
//! Why: the failure paths are where a backend turns a truncated body into a "complete" one, and
//! real I/O rarely fails on cue. A failed write or finish here does what a real backend must do on
//! an I/O error: it aborts the underlying write (`AbortReason::Storage`), so readers of the inner
//! backend get every written byte and then an error. The fault cases of the storage suite check
//! that no fault makes a truncated body look complete, and the pending stalls give every
//! operation extra await points for the cancellation sweep to drop the future at.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use async_trait::async_trait;
use bytes::Bytes;
use stream_cache::{
    AbortReason, BodyError, BodyReader, BodySource, BodyWriter, ByteRange, CacheKey, Capabilities,
    Hit, ObjectMeta, Storage, StorageError, StorageUsage, WriteError, WriteFence, WriteState,
};

/// The error an injected fault carries (inside `AbortReason::Upstream`, `AbortReason::Storage`,
/// `StorageError::Io` or `BodyError::Io`), so a test can tell injected faults from real ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("injected fault: {0}")]
pub struct InjectedFault(pub String);

fn injected_io(what: String) -> io::Error {
    io::Error::other(InjectedFault(what))
}

/// Which faults a [`Faulty`] injects. Counts are 1-based and run over the wrapper's lifetime
/// (across keys and writers): `fail_write(3)` fails the third `write` call made through it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Fail the Nth `lookup` with `StorageError::Io`.
    pub fail_lookup: Option<u64>,
    /// Fail the Nth `begin_write` with `StorageError::Io` (nothing is written).
    pub fail_begin_write: Option<u64>,
    /// Fail the Nth `write`: the chunk is not stored and the write is aborted with
    /// `AbortReason::Storage`.
    pub fail_write: Option<u64>,
    /// Fail the Nth `finish`: the write is aborted with `AbortReason::Storage`.
    pub fail_finish: Option<u64>,
    /// Fail the Nth `read` with `BodyError::Io` (the reader does not move; a later read may
    /// succeed).
    pub fail_read: Option<u64>,
    /// Abort every write once it holds this many bytes (`AbortReason::Upstream`): the bytes up to
    /// the limit are stored, the rest of the chunk is not.
    pub abort_after_bytes: Option<u64>,
    /// Every operation returns `Pending` this many times (waking itself) before it runs.
    pub pending_polls: u32,
}

impl FaultPlan {
    /// No faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fail the Nth lookup.
    pub fn fail_lookup(mut self, nth: u64) -> Self {
        self.fail_lookup = Some(nth);
        self
    }

    /// Fail the Nth `begin_write`.
    pub fn fail_begin_write(mut self, nth: u64) -> Self {
        self.fail_begin_write = Some(nth);
        self
    }

    /// Fail the Nth `write`.
    pub fn fail_write(mut self, nth: u64) -> Self {
        self.fail_write = Some(nth);
        self
    }

    /// Fail the Nth `finish`.
    pub fn fail_finish(mut self, nth: u64) -> Self {
        self.fail_finish = Some(nth);
        self
    }

    /// Fail the Nth `read`.
    pub fn fail_read(mut self, nth: u64) -> Self {
        self.fail_read = Some(nth);
        self
    }

    /// Abort every stream once it holds `bytes` bytes.
    pub fn abort_after_bytes(mut self, bytes: u64) -> Self {
        self.abort_after_bytes = Some(bytes);
        self
    }

    /// Every operation stays pending for `polls` polls before it runs.
    pub fn pending(mut self, polls: u32) -> Self {
        self.pending_polls = polls;
        self
    }
}

#[derive(Debug, Default)]
struct Counters {
    lookups: AtomicU64,
    begin_writes: AtomicU64,
    writes: AtomicU64,
    finishes: AtomicU64,
    reads: AtomicU64,
}

#[derive(Debug)]
struct FaultState {
    plan: FaultPlan,
    counters: Counters,
}

impl FaultState {
    /// Count one call in `counter`; true if the plan fails this one.
    fn hits(&self, counter: &AtomicU64, nth: Option<u64>) -> Option<u64> {
        let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
        (nth == Some(n)).then_some(n)
    }

    fn stall(&self) -> Stall {
        Stall(self.plan.pending_polls)
    }
}

/// Returns `Pending` (waking itself at once) a fixed number of times, then `Ready`.
struct Stall(u32);

impl Future for Stall {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            return Poll::Ready(());
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A storage backend with injected faults (see [`FaultPlan`]). Capabilities are the inner
/// backend's.
#[derive(Debug)]
pub struct Faulty<S> {
    inner: S,
    state: Arc<FaultState>,
}

impl<S: Storage> Faulty<S> {
    /// Wrap `inner`, injecting the faults in `plan`.
    pub fn new(inner: S, plan: FaultPlan) -> Self {
        Faulty {
            inner,
            state: Arc::new(FaultState {
                plan,
                counters: Counters::default(),
            }),
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The plan in force.
    pub fn plan(&self) -> &FaultPlan {
        &self.state.plan
    }
}

#[async_trait]
impl<S: Storage> Storage for Faulty<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn usage(&self) -> Option<StorageUsage> {
        self.inner.usage()
    }

    /// Cancel safety: dropped during the stall, nothing happened; afterwards, as the inner
    /// backend's lookup.
    async fn lookup(&self, key: &CacheKey) -> Result<Option<Hit>, StorageError> {
        self.state.stall().await;
        let state = &self.state;
        if let Some(n) = state.hits(&state.counters.lookups, state.plan.fail_lookup) {
            return Err(StorageError::Io(Arc::new(injected_io(format!(
                "lookup #{n} failed"
            )))));
        }
        let hit = self.inner.lookup(key).await?;
        Ok(hit.map(|hit| Hit {
            meta: hit.meta,
            body: Box::new(FaultyReader {
                inner: hit.body,
                state: Arc::clone(&self.state),
            }),
        }))
    }

    fn fence(&self, key: &CacheKey) -> WriteFence {
        self.inner.fence(key)
    }

    /// Cancel safety: dropped during the stall, nothing happened; afterwards, as the inner
    /// backend's `begin_write_fenced`. (`begin_write` takes its fence before the stall.)
    async fn begin_write_fenced(
        &self,
        key: &CacheKey,
        meta: ObjectMeta,
        fence: WriteFence,
    ) -> Result<Box<dyn BodyWriter>, StorageError> {
        self.state.stall().await;
        let state = &self.state;
        if let Some(n) = state.hits(&state.counters.begin_writes, state.plan.fail_begin_write) {
            return Err(StorageError::Io(Arc::new(injected_io(format!(
                "begin_write #{n} failed"
            )))));
        }
        let inner = self.inner.begin_write_fenced(key, meta, fence).await?;
        Ok(Box::new(FaultyWriter {
            inner: Some(inner),
            state: Arc::clone(&self.state),
            written: 0,
            failed: None,
        }))
    }

    /// Cancel safety: dropped during the stall, nothing happened; afterwards, as the inner
    /// backend's purge.
    async fn purge(&self, key: &CacheKey) -> Result<bool, StorageError> {
        self.state.stall().await;
        self.inner.purge(key).await
    }

    async fn invalidate(&self, key: &CacheKey) -> Result<bool, StorageError> {
        self.state.stall().await;
        self.inner.invalidate(key).await
    }
}

/// A writer that fails on cue. Dropping it drops the inner writer (the inner backend's abort).
struct FaultyWriter {
    /// `None` once this wrapper aborted or finished the inner writer.
    inner: Option<Box<dyn BodyWriter>>,
    state: Arc<FaultState>,
    written: u64,
    /// The reason this wrapper aborted the write with, reported by every later call.
    failed: Option<AbortReason>,
}

impl FaultyWriter {
    fn fail(&mut self, reason: AbortReason) -> WriteError {
        if let Some(inner) = self.inner.take() {
            inner.abort(reason.clone());
        }
        self.failed = Some(reason.clone());
        WriteError::Aborted(reason)
    }

    fn already_failed(&self) -> Option<WriteError> {
        self.failed.clone().map(WriteError::Aborted)
    }
}

#[async_trait]
impl BodyWriter for FaultyWriter {
    /// Cancel safety: dropped during the stall, nothing was written; afterwards, as the inner
    /// backend's write.
    async fn write(&mut self, chunk: Bytes) -> Result<(), WriteError> {
        self.state.stall().await;
        if let Some(error) = self.already_failed() {
            return Err(error);
        }
        let state = Arc::clone(&self.state);
        if let Some(n) = state.hits(&state.counters.writes, state.plan.fail_write) {
            let reason = AbortReason::Storage(Arc::new(injected_io(format!("write #{n} failed"))));
            return Err(self.fail(reason));
        }
        let len = chunk.len() as u64;
        let Some(inner) = self.inner.as_mut() else {
            return Err(WriteError::Aborted(AbortReason::WriterDropped));
        };
        if let Some(limit) = state.plan.abort_after_bytes
            && self.written + len > limit
        {
            let keep = (limit - self.written) as usize;
            if keep > 0 {
                inner.write(chunk.slice(..keep)).await?;
                self.written += keep as u64;
            }
            let reason =
                AbortReason::upstream(InjectedFault(format!("stream aborted after {limit} bytes")));
            return Err(self.fail(reason));
        }
        inner.write(chunk).await?;
        self.written += len;
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<u64, WriteError> {
        self.state.stall().await;
        if let Some(error) = self.already_failed() {
            return Err(error);
        }
        let state = Arc::clone(&self.state);
        if let Some(n) = state.hits(&state.counters.finishes, state.plan.fail_finish) {
            let reason = AbortReason::Storage(Arc::new(injected_io(format!("finish #{n} failed"))));
            return Err(self.fail(reason));
        }
        match self.inner.take() {
            Some(inner) => inner.finish().await,
            None => Err(WriteError::Aborted(AbortReason::WriterDropped)),
        }
    }

    fn abort(mut self: Box<Self>, reason: AbortReason) {
        if let Some(inner) = self.inner.take() {
            inner.abort(reason);
        }
    }

    fn state(&self) -> WriteState {
        match (&self.inner, &self.failed) {
            (Some(inner), _) => inner.state(),
            (None, Some(reason)) => WriteState::Aborted(reason.clone()),
            (None, None) => WriteState::Aborted(AbortReason::WriterDropped),
        }
    }

    fn is_current(&self) -> bool {
        self.inner.as_ref().is_some_and(|inner| inner.is_current())
    }

    fn source(&self) -> Option<Arc<dyn BodySource>> {
        let inner = self.inner.as_ref()?.source()?;
        Some(Arc::new(FaultySource {
            inner,
            state: Arc::clone(&self.state),
        }))
    }
}

struct FaultySource {
    inner: Arc<dyn BodySource>,
    state: Arc<FaultState>,
}

impl BodySource for FaultySource {
    fn open(&self) -> Box<dyn BodyReader> {
        Box::new(FaultyReader {
            inner: self.inner.open(),
            state: Arc::clone(&self.state),
        })
    }

    fn state(&self) -> WriteState {
        self.inner.state()
    }

    fn reader_count(&self) -> Option<usize> {
        self.inner.reader_count()
    }
}

struct FaultyReader {
    inner: Box<dyn BodyReader>,
    state: Arc<FaultState>,
}

#[async_trait]
impl BodyReader for FaultyReader {
    /// Cancel safety: dropped during the stall, nothing was read; afterwards, as the inner
    /// reader's read.
    async fn read(&mut self) -> Result<Option<Bytes>, BodyError> {
        self.state.stall().await;
        let state = &self.state;
        if let Some(n) = state.hits(&state.counters.reads, state.plan.fail_read) {
            return Err(BodyError::Io(Arc::new(injected_io(format!(
                "read #{n} failed"
            )))));
        }
        self.inner.read().await
    }

    /// Cancel safety: dropped during the stall, the position is unchanged; afterwards, as the
    /// inner reader's seek.
    async fn seek(&mut self, range: ByteRange) -> Result<(), BodyError> {
        self.state.stall().await;
        self.inner.seek(range).await
    }

    fn state(&self) -> WriteState {
        self.inner.state()
    }

    fn position(&self) -> u64 {
        self.inner.position()
    }
}
