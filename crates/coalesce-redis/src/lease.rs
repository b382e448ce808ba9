//! [`RedisLease`]: [`FillLease`] on Redis: `SET key token NX PX ttl` to acquire, Lua scripts that
//! compare the token before deleting (release) or extending (renew).

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use coalesce::lease::check_ttl;
use coalesce::{Acquire, FillLease, LeaseError, LeaseToken};

use crate::connection::Connector;

/// Deletes the lease only if it still holds the caller's token: an owner whose lease expired
/// and was taken by another process must not delete the new owner's lease.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
";

/// Extends the lease only if it still holds the caller's token.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// A fill lease held in Redis, shared by every process that talks to the same Redis.
///
/// Every call is bounded: at most `connect_timeout` to (re)connect and `command_timeout` for the
/// command. A Redis that is down or unreachable gives [`LeaseError::Unavailable`] or
/// [`LeaseError::TimedOut`] (callers fail open), never a hang; after a failed connect, calls
/// fail at once for `reconnect_backoff`, then the next call reconnects.
///
/// # Cancellation
/// Each method has one await that matters: the round trip (after a connect, if one is due). A
/// call dropped there may still reach Redis: a dropped `try_acquire` may leave a lease nobody
/// knows the token of, which expires after its ttl; a dropped `release` or `renew` may or may
/// not have happened. The shared multiplexed connection is unaffected (the late answer is read
/// and discarded), and a dropped connect is retried by the next call.
///
/// ```no_run
/// use std::sync::Arc;
/// use coalesce::{DistributedGroup, Group};
/// use coalesce_redis::RedisLease;
///
/// let lease = RedisLease::builder("redis://127.0.0.1:6379/")
///     .key_prefix("myapp:fill:")
///     .build()
///     .unwrap();
/// let group: DistributedGroup<String, Vec<u8>> = DistributedGroup::new(Group::new(), Arc::new(lease));
/// # let _ = group;
/// ```
pub struct RedisLease {
    connector: Connector,
    key_prefix: String,
    release: redis::Script,
    renew: redis::Script,
    token_nonce: u64,
    next_token: AtomicU64,
}

impl fmt::Debug for RedisLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLease")
            .field("key_prefix", &self.key_prefix)
            .finish_non_exhaustive()
    }
}

/// A setting [`RedisLeaseBuilder::build`] refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The URL is not a Redis URL.
    #[error("invalid redis url: {0}")]
    Url(#[source] redis::RedisError),
    /// A zero timeout would fail every call.
    #[error("the {0} must be greater than zero")]
    ZeroTimeout(&'static str),
    /// A duration over [`MAX_SETTING`]: none means "never" here, and a larger one overflowed
    /// clocks (tokio's interval panicked in the backplane's task, an acknowledgement wait
    /// panicked after its invalidation had run) or was refused by Redis on every call.
    #[error("the {0} must be at most 365 days")]
    TooLong(&'static str),
}

/// The longest duration a setting of this crate takes (365 days).
pub const MAX_SETTING: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Builds a [`RedisLease`].
#[derive(Debug, Clone)]
pub struct RedisLeaseBuilder {
    url: String,
    key_prefix: String,
    connect_timeout: Duration,
    command_timeout: Duration,
    reconnect_backoff: Duration,
}

impl RedisLeaseBuilder {
    /// Prefix of every lease key in Redis. Default `"herd:lease:"`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Longest wait to (re)connect. Default 250 ms.
    pub fn connect_timeout(mut self, limit: Duration) -> Self {
        self.connect_timeout = limit;
        self
    }

    /// Longest wait for one command's answer. Default 100 ms.
    pub fn command_timeout(mut self, limit: Duration) -> Self {
        self.command_timeout = limit;
        self
    }

    /// After a failed connect, calls fail at once for this long before the next connect.
    /// Default 1 s.
    pub fn reconnect_backoff(mut self, backoff: Duration) -> Self {
        self.reconnect_backoff = backoff;
        self
    }

    /// Checks the settings and builds the lease. Does not connect: the first call does.
    pub fn build(self) -> Result<RedisLease, ConfigError> {
        if self.connect_timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout("connect timeout"));
        }
        if self.command_timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout("command timeout"));
        }
        let client = redis::Client::open(self.url.as_str()).map_err(ConfigError::Url)?;
        Ok(RedisLease {
            connector: Connector::new(
                client,
                self.connect_timeout,
                self.command_timeout,
                self.reconnect_backoff,
            ),
            key_prefix: self.key_prefix,
            release: redis::Script::new(RELEASE),
            renew: redis::Script::new(RENEW),
            token_nonce: token_nonce(),
            next_token: AtomicU64::new(0),
        })
    }
}

/// A per-instance random number, so tokens from different processes (or instances) differ:
/// std's `RandomState` is seeded from the OS's randomness once per process, and mixes the
/// process id and the time on top.
fn token_nonce() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    hasher.write_u128(now.as_nanos());
    hasher.finish()
}

/// `ttl` in whole milliseconds for `PX`, rounded up so a lease never expires before its ttl.
fn ttl_millis(ttl: Duration) -> Result<u64, LeaseError> {
    check_ttl(ttl)?;
    let millis = ttl.as_nanos().div_ceil(1_000_000);
    // Redis keeps expiry times as signed 64-bit milliseconds since the epoch.
    u64::try_from(millis)
        .ok()
        .filter(|&ms| ms <= i64::MAX as u64 / 2)
        .ok_or(LeaseError::InvalidTtl(ttl))
}

impl RedisLease {
    /// A lease on the Redis at `url` (`redis://host:port/db`) with default settings.
    pub fn new(url: &str) -> Result<Self, ConfigError> {
        Self::builder(url).build()
    }

    /// Starts a [`RedisLeaseBuilder`] for the Redis at `url`.
    pub fn builder(url: impl Into<String>) -> RedisLeaseBuilder {
        RedisLeaseBuilder {
            url: url.into(),
            key_prefix: "herd:lease:".to_owned(),
            connect_timeout: Duration::from_millis(250),
            command_timeout: Duration::from_millis(100),
            reconnect_backoff: Duration::from_secs(1),
        }
    }

    /// The Redis key that holds `key`'s lease.
    pub fn redis_key(&self, key: &str) -> String {
        format!("{}{key}", self.key_prefix)
    }

    fn token(&self) -> LeaseToken {
        let n = self.next_token.fetch_add(1, Relaxed);
        LeaseToken::new(format!("{:016x}-{n:x}", self.token_nonce))
    }
}

/// How long after an unanswered acquisition's first background release (which deleted
/// nothing) it is sent again, and again: TCP sends a lost segment again after 0.2, 0.6, 1.4,
/// 3 and 6.2 s, so a `SET` still in flight lands within these as a rule. Three compare-and-
/// deletes at most per unanswered acquisition.
const LATE_SET_RETRIES: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(5)];

/// A `try_acquire` whose `SET` may have run without its answer reaching us: dropped while
/// armed (`redis_key` set), it releases the token in the background (again later if nothing
/// was there yet: [`LATE_SET_RETRIES`]).
struct Unanswered {
    connector: Connector,
    release: redis::Script,
    redis_key: Option<String>,
    token: LeaseToken,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        let Some(redis_key) = self.redis_key.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime to send it on: the lease expires after its ttl
        };
        let (connector, release, token) = (
            self.connector.clone(),
            self.release.clone(),
            self.token.clone(),
        );
        runtime.spawn(async move {
            // Sent at once, then again after each of `LATE_SET_RETRIES` while nothing was
            // deleted: the `SET` may still be on its way (a lost packet the kernel sends again
            // after the call gave up, the connection forgotten), and a release that arrives
            // first finds nothing and cannot stop it.
            let mut delays = LATE_SET_RETRIES.iter();
            loop {
                let (release, redis_key, token) = (&release, &redis_key, &token);
                let released = connector
                    .run(|mut connection| async move {
                        release
                            .key(redis_key)
                            .arg(token.as_str())
                            .invoke_async::<i64>(&mut connection)
                            .await
                    })
                    .await;
                match released {
                    Ok(deleted) if deleted > 0 => return,
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(%error, "could not release a lease whose acquisition went unanswered; it expires after its ttl");
                    }
                }
                let Some(delay) = delays.next() else { return };
                tokio::time::sleep(*delay).await;
            }
        });
    }
}

#[async_trait]
impl FillLease for RedisLease {
    /// `SET key token NX PX ttl`. A call that ends without Redis's answer (timed out, failed
    /// after sending, or dropped) may still have taken the lease, under a token nobody holds:
    /// the key would stay locked for `ttl`, this process's next leader included. So the
    /// compare-and-delete of that token is then sent on a background task (a no-op if the
    /// `SET` never ran), and again 1 and 6 s later while it has deleted nothing (a `SET`
    /// retransmitted late lands after a release that overtook it).
    async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Acquire, LeaseError> {
        let millis = ttl_millis(ttl)?;
        let token = self.token();
        let redis_key = self.redis_key(key);
        let mut unanswered = Unanswered {
            connector: self.connector.clone(),
            release: self.release.clone(),
            redis_key: Some(redis_key.clone()),
            token: token.clone(),
        };
        let set: Option<String> = self
            .connector
            .run(|mut connection| {
                let token = token.as_str().to_owned();
                async move {
                    redis::cmd("SET")
                        .arg(&redis_key)
                        .arg(token)
                        .arg("NX")
                        .arg("PX")
                        .arg(millis)
                        .query_async(&mut connection)
                        .await
                }
            })
            .await?;
        unanswered.redis_key = None; // answered: the lease is ours or someone else's, known
        Ok(match set {
            Some(_ok) => Acquire::Acquired(token),
            None => Acquire::HeldElsewhere,
        })
    }

    /// Compare-and-delete script.
    async fn release(&self, key: &str, token: &LeaseToken) -> Result<bool, LeaseError> {
        let redis_key = self.redis_key(key);
        let deleted: i64 = self
            .connector
            .run(|mut connection| async move {
                self.release
                    .key(&redis_key)
                    .arg(token.as_str())
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(deleted == 1)
    }

    /// Compare-and-extend script.
    async fn renew(
        &self,
        key: &str,
        token: &LeaseToken,
        ttl: Duration,
    ) -> Result<bool, LeaseError> {
        let millis = ttl_millis(ttl)?;
        let redis_key = self.redis_key(key);
        let extended: i64 = self
            .connector
            .run(|mut connection| async move {
                self.renew
                    .key(&redis_key)
                    .arg(token.as_str())
                    .arg(millis)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(extended == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_milliseconds_and_bad_ones_are_errors() {
        assert_eq!(ttl_millis(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_micros(1500)).unwrap(), 2);
        assert_eq!(ttl_millis(Duration::from_secs(5)).unwrap(), 5000);
        assert!(matches!(
            ttl_millis(Duration::from_micros(999)),
            Err(LeaseError::InvalidTtl(_))
        ));
        assert!(matches!(
            ttl_millis(Duration::MAX),
            Err(LeaseError::InvalidTtl(_))
        ));
    }

    #[test]
    fn tokens_are_unique_within_and_across_instances() {
        let a = RedisLease::new("redis://127.0.0.1:1/").unwrap();
        let b = RedisLease::new("redis://127.0.0.1:1/").unwrap();
        let (a1, a2, b1) = (a.token(), a.token(), b.token());
        assert_ne!(a1, a2);
        assert_ne!(a1, b1);
    }

    #[test]
    fn bad_settings_are_typed_errors() {
        assert!(matches!(
            RedisLease::new("not a url"),
            Err(ConfigError::Url(_))
        ));
        assert!(matches!(
            RedisLease::builder("redis://127.0.0.1/")
                .command_timeout(Duration::ZERO)
                .build(),
            Err(ConfigError::ZeroTimeout(_))
        ));
    }
}
