//! The states a body write can be in, and the typed reasons a write fails.
//!
//! This is the vocabulary that makes a truncated body impossible to mistake for a whole one:
//! a write is `Partial` until it becomes `Complete` (finish succeeded) or `Aborted` (anything
//! else), and neither terminal state ever changes again.

use std::sync::Arc;

/// Where a body write stands. Terminal states (`Complete`, `Aborted`) never change.
#[derive(Debug, Clone)]
pub enum WriteState {
    /// Still being written; this many bytes are readable so far.
    Partial(u64),
    /// `finish` succeeded; the body is exactly this many bytes.
    Complete(u64),
    /// The write failed; readers get every written byte, then this reason as an error.
    Aborted(AbortReason),
}

impl WriteState {
    /// True for `Complete` and `Aborted`.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, WriteState::Partial(_))
    }
}

/// Why a write was aborted. Cloned to every reader of that write.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AbortReason {
    /// The writer was dropped without `finish` (including a filler task that was aborted).
    #[error("the writer was dropped before finishing the body")]
    WriterDropped,
    /// The upstream source of the body failed; the cause is kept.
    #[error("upstream failed: {0}")]
    Upstream(Arc<dyn std::error::Error + Send + Sync>),
    /// The body grew past a size limit.
    #[error("the body exceeds the size limit of {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The storage had no room for the body's next bytes: other writes in progress hold its
    /// capacity, and evicting every complete object would not make enough. Unlike `TooLarge`,
    /// the same body may fit later, once those writes end (a caching proxy should not treat the
    /// object as too big to cache).
    #[error("no room: writes in progress hold the storage's capacity of {capacity} bytes")]
    NoRoom {
        /// The storage's capacity, in bytes.
        capacity: u64,
    },
    /// The body's length differs from the length declared in its meta.
    #[error("declared length {expected} bytes but {written} were written")]
    LengthMismatch {
        /// The declared length.
        expected: u64,
        /// What was written (or would have been, had the write been accepted).
        written: u64,
    },
    /// The fill ran longer than its fill timeout (`StreamCacheBuilder::fill_timeout`). Not to be
    /// confused with `BodyError::WaitTimedOut`, a reader's wait timeout.
    #[error("the fill timed out")]
    FillTimedOut,
    /// The object was purged while it was being written.
    #[error("the object was purged while it was written")]
    Purged,
    /// The storage backend failed to persist the body.
    #[error("storage failed: {0}")]
    Storage(Arc<std::io::Error>),
    /// A `write` or `finish` future was dropped part-way, so the stored bytes are unknown.
    #[error("a write or finish was cancelled part-way")]
    Cancelled,
    /// The fill was stopped because no reader was left (`NoReaderPolicy::Abort`).
    #[error("the fill was stopped because no reader was left")]
    NoReaders,
    /// The stored bytes do not match the checksum written with them (a torn write, bit rot, a
    /// crash that left zeroed blocks): the body is not served past the point it was found.
    #[error("the stored body is corrupt (checksum mismatch)")]
    Corrupt,
}

impl AbortReason {
    /// Wrap any upstream error.
    pub fn upstream<E>(error: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        AbortReason::Upstream(Arc::new(error))
    }

    /// The variant without its payload, for matching and counting.
    pub fn kind(&self) -> AbortKind {
        match self {
            AbortReason::WriterDropped => AbortKind::WriterDropped,
            AbortReason::Upstream(_) => AbortKind::Upstream,
            AbortReason::TooLarge { .. } => AbortKind::TooLarge,
            AbortReason::NoRoom { .. } => AbortKind::NoRoom,
            AbortReason::LengthMismatch { .. } => AbortKind::LengthMismatch,
            AbortReason::FillTimedOut => AbortKind::FillTimedOut,
            AbortReason::Purged => AbortKind::Purged,
            AbortReason::Storage(_) => AbortKind::Storage,
            AbortReason::Cancelled => AbortKind::Cancelled,
            AbortReason::NoReaders => AbortKind::NoReaders,
            AbortReason::Corrupt => AbortKind::Corrupt,
        }
    }
}

/// [`AbortReason`] without payloads: `Copy + Eq`, for assertions and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)] // each mirrors the AbortReason variant of the same name
pub enum AbortKind {
    WriterDropped,
    Upstream,
    TooLarge,
    NoRoom,
    LengthMismatch,
    FillTimedOut,
    Purged,
    Storage,
    Cancelled,
    NoReaders,
    Corrupt,
}
