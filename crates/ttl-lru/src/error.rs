//! Typed errors: what a write or a read-through call can fail with, and why.

use std::sync::Arc;

/// Why `insert` did not store an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InsertError {
    /// The entry's weight exceeds the cache's capacity (with capacity 0 every entry is too
    /// heavy). Any previous entry for the key was removed, since it no longer holds the latest
    /// value.
    #[error("entry weight {weight} exceeds the cache capacity {limit}")]
    TooHeavy {
        /// The weigher's verdict (at least 1).
        weight: u64,
        /// The cache's capacity.
        limit: u64,
    },
}

/// Why a read-through call produced no value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError<E> {
    /// The fill failed: this call's, the one it joined, or an error cached for `negative_ttl`.
    #[error("the fill failed")]
    Failed(Arc<E>),
    /// This call's wait on another caller's fill ran past `wait_timeout`; the fill goes on.
    /// (The workspace's word for a wait running out; [`FetchError::FillTimedOut`] is the fill
    /// itself running out. Named `TimedOut` until issue 14.)
    #[error("timed out waiting for another caller's fill")]
    WaitTimedOut,
    /// A detached fill ran longer than its `fill_timeout` and was cancelled.
    #[error("the detached fill ran past its fill_timeout")]
    FillTimedOut,
    /// The fill ended without a result (its task panicked or was aborted) and this call could not
    /// take it over.
    #[error("the fill was abandoned without a result")]
    Abandoned,
    /// The fill this call joined failed with an error of another type than this call's `E`
    /// (two call sites share a key but disagree on the error type).
    #[error("the joined fill failed with an error of a different type")]
    ErrorTypeMismatch,
    /// A batch fill ([`Cache::get_or_try_insert_many`](crate::Cache::get_or_try_insert_many))
    /// returned no value for this key (it asked for it). Not cached: the next call fills again.
    #[error("the batch fill returned no value for this key")]
    MissingFromBatch,
}

impl<E> FetchError<E> {
    /// The fill's error, when there is one.
    pub fn fill_error(&self) -> Option<&Arc<E>> {
        match self {
            FetchError::Failed(e) => Some(e),
            _ => None,
        }
    }
}

/// Bad input to the registry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// No live cache is registered under this name.
    #[error("no cache named {0:?}")]
    NotFound(String),
    /// `shrink_all` takes a fraction in `[0, 1]`.
    #[error("shrink fraction {0} is not within [0, 1]")]
    BadFraction(f64),
    /// The maintenance interval must be positive.
    #[error("the maintenance interval must be positive")]
    ZeroInterval,
    /// The maintenance task needs a tokio runtime.
    #[error("no tokio runtime is running")]
    NoRuntime,
    /// A memory-pressure watcher needs `0 < low < high <= 1` and steps and a minimum scale
    /// within `(0, 1]` (the shrink step below 1); the config as given.
    #[error("bad memory-pressure config: {0}")]
    BadPressureConfig(String),
}
