//! The storage contract: `Storage`, `BodyWriter`, `BodyReader`, `BodySource` and the plain data
//! types they exchange (`CacheKey`, `ObjectMeta`, `ByteRange`, `Capabilities`, `Hit`).
//!
//! These are the traits a backend author implements and the `conformance` suite tests, so every
//! rule a backend must keep is written on the method it applies to.

use std::fmt;
use std::ops::{Range, RangeFrom, RangeFull};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{BodyError, StorageError, WriteError};
use crate::fence::WriteFence;
use crate::state::{AbortReason, WriteState};

/// A cache key: arbitrary bytes, cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(Bytes);

impl CacheKey {
    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(&self.0) {
            Ok(text) => write!(f, "CacheKey({text:?})"),
            Err(_) => write!(f, "CacheKey({:?})", self.0),
        }
    }
}

impl From<&str> for CacheKey {
    fn from(key: &str) -> Self {
        CacheKey(Bytes::copy_from_slice(key.as_bytes()))
    }
}

impl From<String> for CacheKey {
    fn from(key: String) -> Self {
        CacheKey(Bytes::from(key))
    }
}

impl From<&[u8]> for CacheKey {
    fn from(key: &[u8]) -> Self {
        CacheKey(Bytes::copy_from_slice(key))
    }
}

impl From<Vec<u8>> for CacheKey {
    fn from(key: Vec<u8>) -> Self {
        CacheKey(Bytes::from(key))
    }
}

impl From<Bytes> for CacheKey {
    fn from(key: Bytes) -> Self {
        CacheKey(key)
    }
}

/// What is stored beside a body: an optional declared length (checked at `finish`), an optional
/// expiry, and opaque user bytes (headers, a content type...), returned unchanged by `lookup`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The declared body length. Writing more, or finishing with fewer, aborts the write with
    /// `LengthMismatch`.
    pub expected_len: Option<u64>,
    /// Opaque user metadata.
    pub user: Bytes,
    /// When the object stops being fresh: from then on `lookup` misses and the object may be
    /// evicted at once. Wall-clock time, so it survives a restart of a persistent backend
    /// (stored to the millisecond). Honoured only by backends with the `expiry` capability
    /// (`StreamCache` refuses expiring fills for the others).
    pub expires_at: Option<SystemTime>,
}

impl ObjectMeta {
    /// Meta with user bytes and no declared length.
    pub fn new(user: impl Into<Bytes>) -> Self {
        ObjectMeta {
            expected_len: None,
            user: user.into(),
            expires_at: None,
        }
    }

    /// Declare the body length.
    pub fn with_len(mut self, len: u64) -> Self {
        self.expected_len = Some(len);
        self
    }

    /// Expire `ttl` from now (a TTL too large to represent means no expiry).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.expires_at = SystemTime::now().checked_add(ttl);
        self
    }

    /// Expire at `at`.
    pub fn with_expiry(mut self, at: SystemTime) -> Self {
        self.expires_at = Some(at);
        self
    }

    /// True if the object has an expiry and it is not after `now`.
    pub fn is_expired_at(&self, now: SystemTime) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

/// A byte range of a body: `start..end`, end exclusive, `None` meaning "to the end".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub start: u64,
    /// One past the last byte, or `None` for the rest of the body.
    pub end: Option<u64>,
}

impl ByteRange {
    /// `start..end` (`end = None` reads to the end of the body).
    pub fn new(start: u64, end: Option<u64>) -> Self {
        ByteRange { start, end }
    }
}

impl From<Range<u64>> for ByteRange {
    fn from(range: Range<u64>) -> Self {
        ByteRange::new(range.start, Some(range.end))
    }
}

impl From<RangeFrom<u64>> for ByteRange {
    fn from(range: RangeFrom<u64>) -> Self {
        ByteRange::new(range.start, None)
    }
}

impl From<RangeFull> for ByteRange {
    fn from(_: RangeFull) -> Self {
        ByteRange::new(0, None)
    }
}

/// What a backend supports. Conformance cases that need a missing capability are skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Capabilities {
    /// `lookup` returns in-progress bodies and `BodyWriter::source` returns `Some`: readers may
    /// attach before `finish`.
    pub partial_reads: bool,
    /// `BodyReader::seek` works (on partial bodies too, if `partial_reads`).
    pub range_reads: bool,
    /// The largest body the backend accepts; larger writes abort with `TooLarge`.
    pub max_object_size: Option<u64>,
    /// Complete objects survive a restart of the backend.
    pub persistent: bool,
    /// `ObjectMeta::expires_at` is kept: `lookup` of an expired object misses (and the object
    /// becomes evictable at once). A backend without it may ignore the expiry, so
    /// `StreamCache` refuses to fill an expiring object into it (`StorageError::Unsupported`)
    /// rather than serve it past its expiry.
    pub expiry: bool,
}

impl Capabilities {
    /// Nothing optional supported.
    pub const fn none() -> Self {
        Capabilities {
            partial_reads: false,
            range_reads: false,
            max_object_size: None,
            persistent: false,
            expiry: false,
        }
    }

    /// Set `partial_reads`.
    pub const fn with_partial_reads(mut self, yes: bool) -> Self {
        self.partial_reads = yes;
        self
    }

    /// Set `range_reads`.
    pub const fn with_range_reads(mut self, yes: bool) -> Self {
        self.range_reads = yes;
        self
    }

    /// Set `max_object_size`.
    pub const fn with_max_object_size(mut self, limit: Option<u64>) -> Self {
        self.max_object_size = limit;
        self
    }

    /// Set `persistent`.
    pub const fn with_persistent(mut self, yes: bool) -> Self {
        self.persistent = yes;
        self
    }

    /// Set `expiry`.
    pub const fn with_expiry(mut self, yes: bool) -> Self {
        self.expiry = yes;
        self
    }
}

/// How many bytes a backend holds and may hold ([`Storage::usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageUsage {
    /// Bytes charged now (as the backend accounts them: bodies, and files plus metadata for
    /// `DiskStorage`).
    pub used_bytes: u64,
    /// The byte capacity, if bounded.
    pub capacity_bytes: Option<u64>,
}

/// A found object: its meta and a reader bound to the write that produced (or is producing) it.
pub struct Hit {
    /// The meta given to `begin_write`.
    pub meta: ObjectMeta,
    /// A reader positioned at offset 0.
    pub body: Box<dyn BodyReader>,
}

impl fmt::Debug for Hit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hit")
            .field("meta", &self.meta)
            .field("state", &self.body.state())
            .finish()
    }
}

/// A storage backend for streamed bodies.
///
/// Contract (tested by the `conformance` crate):
/// - A key maps to at most one *current* write. `begin_write` replaces whatever the key held
///   (complete or in progress): later lookups see the new write; readers already attached to an
///   older write stay bound to it and see exactly its bytes, ending however it ends.
/// - `lookup` never returns an aborted write, and never returns a write that was superseded.
///   With `partial_reads` it returns in-progress writes; without, only complete ones.
/// - An aborted write (explicit `abort`, writer dropped, limit, length mismatch, purge) is marked
///   aborted *before* it stops being visible to `lookup`, so no reader can attach to it and see a
///   clean end.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// What this backend supports.
    fn capabilities(&self) -> Capabilities;

    /// Used and capacity bytes, for monitoring; `None` (the default) if the backend does not
    /// account them. Cheap: `StreamCache::stats` calls it.
    fn usage(&self) -> Option<StorageUsage> {
        None
    }

    /// Find the current object for `key`.
    ///
    /// Cancel safety: dropping the future leaves the storage unchanged.
    async fn lookup(&self, key: &CacheKey) -> Result<Option<Hit>, StorageError>;

    /// Take a fence for a write of `key` that starts now (see [`crate::FenceTable`], which
    /// implements this for a backend). A fill takes it before it asks its origin for anything.
    fn fence(&self, key: &CacheKey) -> WriteFence;

    /// Start writing a new object for `key`, replacing the current one (see the trait docs),
    /// as the write that took `fence`. Where the write becomes visible, under the same lock as
    /// `purge`, the backend checks the fence:
    /// - `key` was purged after `fence` was taken: the write is returned already aborted with
    ///   `Purged` and never becomes visible (a purge is final);
    /// - a write whose fence is newer was made visible meanwhile: the write never becomes the
    ///   key's object (it still runs for readers bound to it through `source`): the newer write
    ///   wins, always.
    ///
    /// Fails with `StorageError::TooLarge` if `meta.expected_len` exceeds the object size limit,
    /// `StorageError::NoRoom` if writes in progress hold the capacity (a bounded backend that
    /// never evicts them; nothing was evicted or replaced for the refused write),
    /// `StorageError::ForeignFence` if `fence` was taken for another key or from another storage.
    ///
    /// Cancel safety: dropping the future leaves no visible object and no leftover resources.
    async fn begin_write_fenced(
        &self,
        key: &CacheKey,
        meta: ObjectMeta,
        fence: WriteFence,
    ) -> Result<Box<dyn BodyWriter>, StorageError>;

    /// [`begin_write_fenced`](Storage::begin_write_fenced) with a fence taken in this call's
    /// first poll: of two `begin_write` calls for one key, the one called later wins, however
    /// their awaits interleave; a purge that returns while this call is under way is final.
    ///
    /// Cancel safety: as `begin_write_fenced`.
    async fn begin_write(
        &self,
        key: &CacheKey,
        meta: ObjectMeta,
    ) -> Result<Box<dyn BodyWriter>, StorageError> {
        let fence = self.fence(key);
        self.begin_write_fenced(key, meta, fence).await
    }

    /// Remove `key`. An in-progress write is aborted with `Purged` (its readers get every byte
    /// written, then that error); readers of a complete object may finish reading it. Every
    /// write whose fence was taken before this call is fenced out (see `begin_write_fenced`).
    /// Returns whether anything was removed.
    ///
    /// Cancel safety: dropping the future may leave the purge half done (the write aborted but
    /// the complete object still present); calling `purge` again completes it.
    async fn purge(&self, key: &CacheKey) -> Result<bool, StorageError>;

    /// Remove `key` from lookups without cutting off anyone already reading it: as
    /// [`purge`](Storage::purge) (the complete object goes, every write whose fence was taken
    /// before this call is fenced out, later lookups miss), except that an in-progress write is
    /// detached, not aborted: it goes on for the readers bound to it and ends however it ends
    /// (a complete body for them), but never becomes the key's object again, as a superseded
    /// write. For an invalidation that says "stored copies are out of date" (an HTTP cache
    /// after a `POST` to the URL), where a purge says "stop serving this".
    ///
    /// The default purges: a backend that cannot detach a write aborts it (its readers see an
    /// error, never a clean short end). `MemStorage` and `DiskStorage` detach.
    ///
    /// Cancel safety: as `purge`.
    async fn invalidate(&self, key: &CacheKey) -> Result<bool, StorageError> {
        self.purge(key).await
    }
}

/// The writing half of one object.
///
/// Dropping a writer without `finish` aborts the write with `WriterDropped`, synchronously in
/// `Drop`, before the object stops being visible to `lookup`.
#[async_trait]
pub trait BodyWriter: Send {
    /// Append a chunk. Exceeding a size limit or the declared length aborts the write. Fails with
    /// the abort reason once the write is aborted (for instance by a purge).
    ///
    /// Cancel safety: backend-specific; a backend that cannot tell how much of a cancelled write
    /// was stored must abort the write with `Cancelled` (`DiskStorage` does; `MemStorage` writes
    /// are atomic and never await).
    async fn write(&mut self, chunk: Bytes) -> Result<(), WriteError>;

    /// Complete the object: checks the declared length (a mismatch aborts with
    /// `LengthMismatch`), makes it the key's complete object (unless superseded), and returns its
    /// length. Readers then reach `Ok(None)` after the last byte.
    ///
    /// Cancel safety: dropping the future drops the writer, which aborts the write unless the
    /// completion was already applied.
    async fn finish(self: Box<Self>) -> Result<u64, WriteError>;

    /// Abort the write with `reason`; readers get every written byte, then `Err(Aborted(reason))`.
    /// Applied synchronously. A write that is already terminal keeps its state.
    fn abort(self: Box<Self>, reason: AbortReason);

    /// The state of this write.
    fn state(&self) -> WriteState;

    /// A handle that opens readers bound to this write, for callers that must attach to this
    /// exact write rather than whatever `lookup` returns later. `None` when the backend does not
    /// support partial reads.
    fn source(&self) -> Option<Arc<dyn BodySource>>;

    /// Whether this write is still its key's current write, the one `finish` would make the
    /// key's object: not once it was replaced, purged or invalidated (or aborted). A
    /// `StreamCache` fill stops a write that is no longer current once nobody reads it, whatever
    /// its [`NoReaderPolicy`](crate::NoReaderPolicy): nothing could ever read the rest. The
    /// default says `true` (a backend that cannot tell keeps such fills going to their end).
    /// May take the backend's index lock; called only when a write has no reader.
    fn is_current(&self) -> bool {
        true
    }
}

/// Opens readers bound to one write (see [`BodyWriter::source`]).
pub trait BodySource: Send + Sync {
    /// A new reader at offset 0 of this write.
    fn open(&self) -> Box<dyn BodyReader>;

    /// The state of this write.
    fn state(&self) -> WriteState;

    /// How many readers are attached to this write, if the backend tracks it.
    fn reader_count(&self) -> Option<usize>;

    /// Aborts the write with `reason` if no reader is attached, in one step with readers
    /// attaching (a `lookup` that attaches either comes first, and nothing is aborted, or
    /// after, and misses); whether it aborted. `None` (the default): the backend cannot, and a
    /// caller falls back to [`reader_count`](Self::reader_count), which can race an attach.
    /// Aborting here marks the write only: the writer's own `abort` then does the backend's
    /// bookkeeping.
    fn abort_if_unread(&self, reason: AbortReason) -> Option<bool> {
        let _ = reason;
        None
    }
}

/// The reading half: one reader, bound to one write.
#[async_trait]
pub trait BodyReader: Send {
    /// The next chunk. `Ok(None)` means one thing only: the write finished successfully and every
    /// byte (of the range, after a `seek`) was read. While the write is in progress this waits for
    /// more bytes. After an abort it returns every written byte, then `Err(Aborted(reason))` on
    /// this and every later call.
    ///
    /// Cancel safety: dropping the future loses nothing; the next call returns the same bytes.
    async fn read(&mut self) -> Result<Option<Bytes>, BodyError>;

    /// Restrict later reads to `range`. Waits until `range.start` is written or the write is
    /// terminal. A start or end past a completed length is `RangeNotSatisfiable`; an end before
    /// the start is `InvalidRange`. On a partial body an end past what is finally written is
    /// reported when the write completes. `Unsupported` without the `range_reads` capability.
    ///
    /// Cancel safety: dropping the future leaves the position unchanged.
    async fn seek(&mut self, range: ByteRange) -> Result<(), BodyError>;

    /// The state of the write this reader is bound to.
    fn state(&self) -> WriteState;

    /// The body offset of the next byte `read` returns.
    fn position(&self) -> u64;
}

/// Read a body to its end. Returns the bytes, or the error that ended it (after an abort, the
/// error comes after the bytes written so far, which are discarded here).
///
/// Cancel safety: dropping the future drops the bytes read so far; the reader's position has
/// moved past them.
pub async fn read_to_end(reader: &mut dyn BodyReader) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    while let Some(chunk) = reader.read().await? {
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Share one backend between several caches (or a cache and direct users).
#[async_trait]
impl<S: Storage + ?Sized> Storage for Arc<S> {
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }

    fn usage(&self) -> Option<StorageUsage> {
        (**self).usage()
    }

    async fn lookup(&self, key: &CacheKey) -> Result<Option<Hit>, StorageError> {
        (**self).lookup(key).await
    }

    fn fence(&self, key: &CacheKey) -> WriteFence {
        (**self).fence(key)
    }

    async fn begin_write_fenced(
        &self,
        key: &CacheKey,
        meta: ObjectMeta,
        fence: WriteFence,
    ) -> Result<Box<dyn BodyWriter>, StorageError> {
        (**self).begin_write_fenced(key, meta, fence).await
    }

    async fn begin_write(
        &self,
        key: &CacheKey,
        meta: ObjectMeta,
    ) -> Result<Box<dyn BodyWriter>, StorageError> {
        (**self).begin_write(key, meta).await
    }

    async fn purge(&self, key: &CacheKey) -> Result<bool, StorageError> {
        (**self).purge(key).await
    }

    async fn invalidate(&self, key: &CacheKey) -> Result<bool, StorageError> {
        (**self).invalidate(key).await
    }
}
