//! The [`SecondLevel`] contract: what a shared store under a `ttl-lru` cache (Redis, or the
//! in-memory one for tests) must do for the tier to be correct across a fleet, and the
//! [`L1Sink`] through which a backplane tells this process to drop its L1 copies.

use std::sync::Weak;
use std::time::Duration;

use async_trait::async_trait;

/// A key's invalidation version in the second level. An invalidation changes it; a write made
/// with [`SecondLevel::set_if_version`] lands only while it is unchanged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version(pub u64);

/// A value read from the second level, with its remaining time-to-live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L2Entry {
    /// The encoded value.
    pub value: Vec<u8>,
    /// Time left before the second level drops it; `None`: it does not expire.
    pub ttl: Option<Duration>,
}

/// What an invalidation reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Invalidated {
    /// The key's version after the invalidation.
    pub version: Version,
    /// Subscribers the backplane message reached (0 without a backplane).
    pub receivers: u64,
    /// Subscribers that confirmed they dropped their L1 copy before the call returned. When
    /// `acked < receivers` the missing ones did not answer within the backend's ack timeout.
    pub acked: u64,
}

impl Invalidated {
    /// An invalidation result, for implementations.
    pub fn new(version: Version, receivers: u64, acked: u64) -> Self {
        Self {
            version,
            receivers,
            acked,
        }
    }
}

/// Why a second-level call produced no answer. To the tier every variant means the same: go on
/// with L1 and the local single flight (fail open); each is counted in the tier's stats.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum L2Error {
    /// The store could not be reached or refused the command.
    #[error("the second level is unavailable: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store did not answer within this limit.
    #[error("the second level did not answer within {0:?}")]
    TimedOut(Duration),
    /// The encoded value is larger than the store accepts.
    #[error("value of {len} bytes exceeds the second level's limit of {limit} bytes")]
    TooLarge {
        /// The encoded length.
        len: usize,
        /// The store's limit.
        limit: usize,
    },
    /// A time-to-live under 1 ms (the store counts whole milliseconds).
    #[error("invalid second-level ttl {0:?}: it must be at least 1 ms")]
    InvalidTtl(Duration),
    /// The store does not implement this operation (e.g. [`SecondLevel::invalidate_all`]).
    #[error("the second level does not support {0}")]
    Unsupported(&'static str),
}

impl L2Error {
    /// An [`Unavailable`](L2Error::Unavailable) error from any error value.
    pub fn unavailable(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Unavailable(error.into())
    }
}

/// A shared store of encoded values under a `ttl-lru` cache, with the per-key versions that make
/// an invalidation final across a fleet.
///
/// Implementations guarantee, per key:
/// - **expiry**: a value is not returned once its ttl has passed, and `get` reports the time it
///   has left (never more than it was stored for);
/// - **fence**: [`set_if_version`](Self::set_if_version) stores only if the key's version is
///   still the one given, atomically with the check; [`invalidate`](Self::invalidate) changes
///   the version and deletes the value atomically, so a write that read the version before an
///   invalidation can never land after it;
/// - **versions never repeat** within one version lifetime (an implementation may let an
///   untouched version expire after a long time; a fill longer than that is not fenced);
/// - **bounded calls**: an unreachable store answers with an [`L2Error`] within the
///   implementation's own timeout, never hangs (the tier adds its own timeout on top);
/// - **keys and values are any bytes**, including empty;
/// - **fill announcements** (optional, best effort): after a `set_if_version` that stored, the
///   attached [`L1Sink`]s of every process are told ([`L1Sink::filled_encoded`]), so waiters
///   wake early; without them the tier polls.
///
/// # Cancellation
/// A call dropped before it completes may or may not have taken effect. A dropped
/// `set_if_version` (or `set_if_version_absent`) is still fenced: it lands, if at all, only
/// while the version is unchanged (and, for the latter, where no value is).
#[async_trait]
pub trait SecondLevel: Send + Sync + 'static {
    /// The value and its remaining ttl, or `None`.
    async fn get(&self, key: &[u8]) -> Result<Option<L2Entry>, L2Error>;

    /// Stores `value` for `ttl` (at least 1 ms; `Duration::MAX`: no expiry), unconditionally.
    async fn set(&self, key: &[u8], value: &[u8], ttl: Duration) -> Result<(), L2Error>;

    /// Deletes the value (not the version: a delete does not fence fills; use `invalidate`).
    async fn delete(&self, key: &[u8]) -> Result<(), L2Error>;

    /// The key's current version (a key never invalidated has a version too).
    async fn version(&self, key: &[u8]) -> Result<Version, L2Error>;

    /// Stores `value` for `ttl` only if the key's version is still `version`; returns whether it
    /// stored. Atomic with respect to [`invalidate`](Self::invalidate).
    async fn set_if_version(
        &self,
        key: &[u8],
        version: Version,
        value: &[u8],
        ttl: Duration,
    ) -> Result<bool, L2Error>;

    /// [`set_if_version`](Self::set_if_version), but only where the key holds no value: how a
    /// cached error is written, so that it never replaces a value another process stored at the
    /// same version (that process's fill succeeded where this one's failed; last writer wins
    /// served the error fleet-wide for its negative ttl). Returns whether it stored.
    /// Default: `set_if_version` (last writer wins), for backends written before it.
    async fn set_if_version_absent(
        &self,
        key: &[u8],
        version: Version,
        value: &[u8],
        ttl: Duration,
    ) -> Result<bool, L2Error> {
        self.set_if_version(key, version, value, ttl).await
    }

    /// Changes the key's version and deletes its value, atomically; then tells every attached
    /// [`L1Sink`] in the fleet (the backplane) to drop its copy, and waits (bounded) for them to
    /// confirm. Returns what it reached.
    async fn invalidate(&self, key: &[u8]) -> Result<Invalidated, L2Error>;

    /// Invalidates **every** key at once, fleet-wide: afterwards no value stored before is
    /// returned by [`get`](Self::get), every version read before no longer matches (so no
    /// [`set_if_version`](Self::set_if_version) that read its version before can land after),
    /// and every attached [`L1Sink`] in the fleet is told to drop everything
    /// ([`L1Sink::invalidate_all`]), waiting (bounded) for their confirmations. Returns the
    /// version floor it set (every version read afterwards is at least that) and what the
    /// message reached. Default: [`L2Error::Unsupported`].
    async fn invalidate_all(&self) -> Result<Invalidated, L2Error> {
        Err(L2Error::Unsupported("invalidate_all"))
    }

    /// Registers a sink to be told about invalidations made anywhere in the fleet. A backend
    /// without a backplane ignores it (the default). Called by the tier when it is built.
    fn attach(&self, sink: Weak<dyn L1Sink>) {
        let _ = sink;
    }
}

/// Where a backplane delivers invalidations: a tier's L1 (implemented by
/// [`TieredCache`](crate::TieredCache)).
pub trait L1Sink: Send + Sync {
    /// Drops the L1 copy of the key whose encoded form is `key`, and fences its in-flight fills.
    fn invalidate_encoded(&self, key: &[u8]);

    /// Drops every L1 entry and fences every in-flight fill: the backplane may have missed
    /// messages (its subscription was lost and is back), or the fleet invalidated everything
    /// ([`SecondLevel::invalidate_all`]).
    fn invalidate_all(&self);

    /// A fenced write of the key whose encoded form is `key` just landed in L2 (announced by
    /// the process that wrote it): leaders of this process waiting for another process's fill
    /// re-check L2 now instead of at their next poll. Best effort: a lost announcement costs a
    /// poll interval. Default: ignored.
    fn filled_encoded(&self, key: &[u8]) {
        let _ = key;
    }
}
