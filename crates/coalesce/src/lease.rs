//! [`FillLease`]: a lease on a key shared by many processes, so that a fleet fills a key once.
//!
//! In-process coalescing turns N concurrent misses into one fill per process; a fleet of
//! processes still sends one fill per process. A fill lease (a short-lived, owner-tokened lock
//! in a shared service such as Redis) lets one process fill while the others wait for the shared
//! cache. The rule every user of this trait keeps: **suppression is an optimisation, never an
//! availability dependency**. A lease service that errs or is slow means "fill anyway", and a
//! lease always expires on its own, so a process that dies holding one blocks nobody for longer
//! than its time-to-live.
//!
//! [`MemoryLease`] is the in-process implementation (tests, single-node use);
//! `coalesce-redis` implements it on Redis. [`DistributedGroup`](crate::DistributedGroup) is the
//! group that uses it.

mod memory;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use memory::MemoryLease;

/// The shortest time-to-live a lease accepts: Redis counts `PX` in whole milliseconds.
pub const MIN_LEASE_TTL: Duration = Duration::from_millis(1);

/// The longest time-to-live a lease accepts: 24 hours. A fill lease is held for one fill;
/// a longer one only delays the next owner after a holder died, and a `Duration::MAX`
/// ("never") overflows every service's clock (`Instant` arithmetic, Redis's signed
/// milliseconds), which made every acquire fail and every fill run without a lease.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// A lease service: at most one owner per key at a time, each lease expiring on its own.
///
/// Implementations must guarantee, for one key:
/// - **mutual exclusion**: while a lease is held and not expired, `try_acquire` returns
///   [`Acquire::HeldElsewhere`] to everyone, including the holder itself;
/// - **owner-only release and renew**: only the token that acquired the lease can release or
///   extend it; with any other token (including the owner's, once the lease expired and someone
///   else took it) both are no-ops that return `false`;
/// - **expiry**: a lease not released is free again once its `ttl` has passed;
/// - **bounded calls**: a service that cannot be reached returns a [`LeaseError`] (within the
///   implementation's own timeout), never hangs.
///
/// The trait is object-safe (`Arc<dyn FillLease>`); the methods are `async` through
/// `async-trait`.
///
/// # Cancellation
/// A call dropped before it completes may or may not have taken effect on the service. A lease
/// granted to a dropped `try_acquire` is never seen by its caller, and expires after its `ttl`.
#[async_trait]
pub trait FillLease: Send + Sync {
    /// Tries to become the owner of `key` for `ttl`. Never waits for the lease to be free.
    ///
    /// A `ttl` under [`MIN_LEASE_TTL`] is [`LeaseError::InvalidTtl`].
    async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Acquire, LeaseError>;

    /// Releases `key` if `token` still owns it. Returns whether this call released it; releasing
    /// a lease this token no longer owns (expired, or taken by another owner since) changes
    /// nothing and returns `false`.
    async fn release(&self, key: &str, token: &LeaseToken) -> Result<bool, LeaseError>;

    /// Extends `key`'s lease to `ttl` from now if `token` still owns it. Returns whether it did.
    ///
    /// Optional: the default answers [`LeaseError::RenewUnsupported`].
    async fn renew(
        &self,
        key: &str,
        token: &LeaseToken,
        ttl: Duration,
    ) -> Result<bool, LeaseError> {
        let _ = (key, token, ttl);
        Err(LeaseError::RenewUnsupported)
    }
}

/// What [`FillLease::try_acquire`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an acquired lease should be released once the fill is stored"]
pub enum Acquire {
    /// This caller owns the lease; the token releases or renews it.
    Acquired(LeaseToken),
    /// Someone else (another process, or another caller in this one) holds it.
    HeldElsewhere,
}

/// Proof of ownership of a lease: an opaque string, unique per acquisition.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LeaseToken(Arc<str>);

impl LeaseToken {
    /// Wraps an implementation's token (a random string, a counter...). It must never be handed
    /// out twice by one service.
    pub fn new(token: impl Into<Arc<str>>) -> Self {
        Self(token.into())
    }

    /// The token as the service stores it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LeaseToken").field(&&*self.0).finish()
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a lease call produced no answer. Every variant means the same thing to a
/// [`DistributedGroup`](crate::DistributedGroup): fill anyway (fail open).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The service could not be reached or refused the command (connection refused or lost,
    /// a protocol error, a script error...).
    #[error("the lease service is unavailable: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The service did not answer within this limit.
    #[error("the lease service did not answer within {0:?}")]
    TimedOut(Duration),
    /// A time-to-live under [`MIN_LEASE_TTL`] or over [`MAX_LEASE_TTL`].
    #[error("invalid lease time-to-live {0:?}: it must be from 1 ms to 24 h")]
    InvalidTtl(Duration),
    /// This implementation does not support [`FillLease::renew`].
    #[error("this lease service does not support renew")]
    RenewUnsupported,
}

impl LeaseError {
    /// An [`Unavailable`](LeaseError::Unavailable) error from any error value.
    pub fn unavailable(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Unavailable(error.into())
    }
}

/// Checks a time-to-live against [`MIN_LEASE_TTL`] and [`MAX_LEASE_TTL`]: for
/// implementations.
pub fn check_ttl(ttl: Duration) -> Result<(), LeaseError> {
    if !(MIN_LEASE_TTL..=MAX_LEASE_TTL).contains(&ttl) {
        return Err(LeaseError::InvalidTtl(ttl));
    }
    Ok(())
}
