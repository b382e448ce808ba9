//! Typed errors for readers, writers, storage backends and the `StreamCache` front.
//!
//! Every failure a caller can see has a variant here; nothing is reported by panicking, hanging
//! or ending a body early.

use std::sync::Arc;

use crate::state::AbortReason;

/// Why a body read (or seek) failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// The write this reader is bound to was aborted; every written byte has been read.
    /// Returned by this and every later read.
    #[error("the body write was aborted: {0}")]
    Aborted(AbortReason),
    /// The requested range lies (partly) past the end of the completed body.
    #[error("range {start}..{} is not satisfiable for a body of {len} bytes", end.map_or_else(String::new, |e| e.to_string()))]
    RangeNotSatisfiable {
        /// First requested byte.
        start: u64,
        /// One past the last requested byte, if bounded.
        end: Option<u64>,
        /// The completed body's length.
        len: u64,
    },
    /// The range ends before it starts.
    #[error("invalid range {start}..{end}")]
    InvalidRange {
        /// First requested byte.
        start: u64,
        /// One past the last requested byte.
        end: u64,
    },
    /// No progress arrived within the reader wait timeout. The reader stays usable.
    #[error("timed out waiting for body data")]
    WaitTimedOut,
    /// The backend does not support this operation (see [`crate::Capabilities`]).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// Reading stored bytes failed.
    #[error("read failed: {0}")]
    Io(Arc<std::io::Error>),
    /// The read needs a tokio runtime (a reader wait timeout, a file read) and was polled
    /// outside one.
    #[error("no tokio runtime: this read must run inside one")]
    NoRuntime,
}

/// Why a `BodyWriter` call failed. A failed write is always an aborted write.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The write is aborted (by this call or earlier); readers see the same reason.
    #[error("the body write is aborted: {0}")]
    Aborted(AbortReason),
}

impl WriteError {
    /// The abort reason behind this error.
    pub fn reason(&self) -> &AbortReason {
        match self {
            WriteError::Aborted(reason) => reason,
        }
    }
}

/// Why a `Storage` operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// I/O failed.
    #[error("storage I/O failed: {0}")]
    Io(Arc<std::io::Error>),
    /// The declared body length exceeds what this storage accepts.
    #[error("declared length {declared} exceeds the object size limit of {limit} bytes")]
    TooLarge {
        /// The storage's per-object limit.
        limit: u64,
        /// The length declared in the meta.
        declared: u64,
    },
    /// No room for this write now: writes in progress hold the storage's capacity, and
    /// evicting every complete object would not make enough (nothing was evicted or replaced).
    /// Unlike `TooLarge`, the same write may fit later.
    #[error("no room for a new write: writes in progress hold the capacity of {capacity} bytes")]
    NoRoom {
        /// The storage's capacity.
        capacity: u64,
    },
    /// The backend does not support this operation.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// A [`WriteFence`](crate::WriteFence) taken for another key, or from another storage, was
    /// handed to `begin_write_fenced`.
    #[error("the write fence was taken for another key or from another storage")]
    ForeignFence,
    /// The backend needs a tokio runtime (file I/O runs on its blocking pool) and was called
    /// outside one.
    #[error("no tokio runtime: this storage operation must run inside one")]
    NoRuntime,
    /// A backend-specific failure.
    #[error("backend failed: {0}")]
    Backend(Arc<dyn std::error::Error + Send + Sync>),
}

impl From<std::io::Error> for StorageError {
    fn from(error: std::io::Error) -> Self {
        StorageError::Io(Arc::new(error))
    }
}

/// Why `StreamCache::get_or_fill` could not hand out a body reader.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum FillError {
    /// The fill failed before it published meta (shared with the callers waiting on it).
    #[error("upstream failed before the body started: {0}")]
    Upstream(Arc<dyn std::error::Error + Send + Sync>),
    /// The storage backend failed.
    #[error(transparent)]
    Storage(StorageError),
    /// The declared body length exceeds the cache's maximum body size; nothing was stored.
    #[error("declared length {declared} exceeds the maximum body size of {limit} bytes")]
    TooLarge {
        /// The maximum body size.
        limit: u64,
        /// The length declared in the fill's meta.
        declared: u64,
    },
    /// The backend cannot expose partial bodies, so the fill had to complete before any reader
    /// could attach, and it was aborted.
    #[error("the body write was aborted before it could be read: {0}")]
    Aborted(AbortReason),
    /// The fill did not publish meta within the fill timeout (`FillError::WaitTimedOut` is the
    /// coalescing wait timeout).
    #[error("the fill timed out before the body started")]
    FillTimedOut,
    /// This caller waited longer than the coalescing wait timeout.
    #[error("timed out waiting for another caller's fill")]
    WaitTimedOut,
    /// The fill ended without a result and this caller could not take it over.
    #[error("the fill was abandoned")]
    Abandoned,
    /// The object kept vanishing between publication and lookup (purged repeatedly).
    #[error("the object vanished before it could be read")]
    Vanished,
    /// A fill (or a wait for one) needs a tokio runtime (the body is pumped by a spawned task,
    /// timeouts use tokio's clock) and `get_or_fill` was polled outside one. Hits that need no
    /// runtime (a `MemStorage` lookup) are still served.
    #[error("no tokio runtime: get_or_fill must fill inside one")]
    NoRuntime,
}
