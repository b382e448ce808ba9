//! [`RedisSecondLevel`]: `ttl-lru`'s [`SecondLevel`] on Redis, with the fleet-wide fence (a
//! per-key version key, compare-and-set and invalidate as Lua scripts, so each is atomic in
//! Redis) and the backplane (`backplane.rs`) that makes every process drop its L1 copy.
//!
//! Keys: the value of key `k` (any bytes) lives at `{prefix}d:{k}`, its version at
//! `{prefix}v:{k}`, and every version comes from one counter at `{prefix}counter`. A key gets a
//! version when one is first read (a fill reads it before it asks the origin) and keeps it for
//! `version_ttl`; an invalidation draws it a new one. A store is refused if the key's version
//! changed or is gone since the fill read it (expired, evicted, lost with a restart): fail
//! closed, so no eviction policy can let a fill that read before an invalidation store after
//! it. (The cost: one small version key per key read within `version_ttl`.) Versions only
//! grow: each is drawn past Redis's clock in microseconds, so a counter that went back (a
//! restart from a snapshot, a replica promoted while behind) hands none out again.
//!
//! **Fleet-wide invalidation** ([`SecondLevel::invalidate_all`]) sets a version *floor* at
//! `{prefix}floor`, a new counter value above every version handed out before: a
//! key's version reads as the larger of its own and the floor, so every version
//! read before no longer matches, and every value is stored as `{stamp}:{bytes}` (the stamp:
//! the version it was written at, or the floor for an unconditional `set`), and a value
//! stamped under the floor reads as missing. O(1) in Redis: nothing is scanned; old values
//! expire with their ttl. The floor has no ttl: under an `allkeys-*` eviction policy Redis may
//! evict it, which would resurrect values stored before the last `invalidate_all`; use
//! `noeviction` or a `volatile-*` policy (which never evicts keys without a ttl).
//!
//! **Failover** is Redis's asynchronous replication: an invalidation acknowledged by a primary
//! that fails before replicating it is lost (a replica promoted while behind still holds the old
//! value, which L2 reads then serve). Versions do not repeat across it (above), so no fill that
//! read before the failover stores after a later invalidation; call `invalidate_all` after an
//! unplanned failover if values written just before it must not come back.
//!
//! **Upgrading** from a build without the floor, or one whose keys without a version read as a
//! shared epoch (`{prefix}epoch`, still honoured as a lower bound for new versions): do not mix
//! builds in one fleet on one prefix; change `key_prefix` with the upgrade instead (the new
//! fleet starts cold in L2). A standalone Redis (or one primary): the scripts touch several
//! keys, which a Redis Cluster would need in one hash slot.

use std::fmt;
use std::sync::Weak;
use std::time::Duration;

use async_trait::async_trait;
use coalesce::LeaseError;
use ttl_lru::second_level::{Invalidated, L1Sink, L2Entry, L2Error, SecondLevel, Version};

use crate::backplane::{self, Backplane, BackplaneStats};
use crate::connection::Connector;
use crate::lease::{ConfigError, MAX_SETTING};

/// Value and remaining ttl in one round trip (`PTTL` -1: no expiry); a value stamped under
/// the floor (`KEYS[2]`), or without a stamp, reads as missing.
const GET: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return false end
local sep = string.find(v, ':', 1, true)
if not sep then return false end
local stamp = tonumber(string.sub(v, 1, sep - 1))
local floor = tonumber(redis.call('GET', KEYS[2]) or '0')
if not stamp or stamp < floor then return false end
return {string.sub(v, sep + 1), redis.call('PTTL', KEYS[1])}
";

/// An unconditional store, stamped with the current floor (`KEYS[2]`).
const SET: &str = r"
local stamped = (redis.call('GET', KEYS[2]) or '0') .. ':' .. ARGV[1]
if ARGV[2] == '0' then
    redis.call('SET', KEYS[1], stamped)
else
    redis.call('SET', KEYS[1], stamped, 'PX', ARGV[2])
end
return 1
";

/// The Lua that draws a new version from the counter `counter`: first raised to Redis's clock
/// in microseconds and past `above` (the floor, the epoch of older builds), then `INCR`. So
/// versions only grow, even across a counter that went back: evicted, lost with a restart, or
/// older on a replica promoted while behind (found by review: a promoted replica's counter
/// handed out a version again, and a fill that had read it before the failover stored after the
/// new invalidation). Holds while the fleet invalidates less than once per microsecond on
/// average and the primaries' clocks do not go back by more than a failover takes.
macro_rules! next_version_lua {
    () => {
        r"
local function next_version(counter, above)
    local now = redis.call('TIME')
    local least = math.max(tonumber(now[1] .. string.format('%06d', tonumber(now[2]))), above)
    if tonumber(redis.call('GET', counter) or '0') < least then
        redis.call('SET', counter, string.format('%d', least))
    end
    return string.format('%d', redis.call('INCR', counter))
end
"
    };
}

/// A key's version (`KEYS[1]`), raised to the floor (`KEYS[2]`). A key without one gets one
/// now, drawn from the counter (`KEYS[3]`) and kept `version_ttl` (`ARGV[1]` ms): a store checks
/// the key's own version and is refused when it is gone, so no eviction or expiry of a
/// version can let a fill that read before an invalidation match after it. (Until review found
/// it, a key without a version read as a shared epoch: an invalidated key whose version Redis
/// then evicted, which the `volatile-*` policies these docs recommend may do, read as that
/// epoch again, and a fill that had read it before the invalidation stored a stale value.)
const VERSION: &str = concat!(
    next_version_lua!(),
    r"
local floor = tonumber(redis.call('GET', KEYS[2]) or '0')
local version = redis.call('GET', KEYS[1])
if not version then
    version = next_version(KEYS[3], floor)
    redis.call('SET', KEYS[1], version, 'PX', ARGV[1])
end
if floor > tonumber(version) then return string.format('%d', floor) end
return version
"
);

/// Stores only while the key's version (`KEYS[2]`, raised to the floor `KEYS[3]`) is still the
/// caller's, refused when the key has none (expired or evicted since the caller read it: never
/// guessed), and with `ARGV[6]` = `1` only where no value is visible (a cached error never
/// replaces a value: `set_if_version_absent`); a stored value is announced on the backplane's
/// fill channel (`ARGV[4]`, the key in `ARGV[5]`), in the same script, so waiters in other
/// processes re-check at once.
const SET_IF_VERSION: &str = r"
local current = redis.call('GET', KEYS[2])
if not current then return 0 end
local floor = redis.call('GET', KEYS[3])
if floor and tonumber(floor) > tonumber(current) then current = floor end
if current ~= ARGV[1] then return 0 end
if ARGV[6] == '1' then
    local held = redis.call('GET', KEYS[1])
    if held then
        local sep = string.find(held, ':', 1, true)
        local stamp = sep and tonumber(string.sub(held, 1, sep - 1))
        if stamp and stamp >= tonumber(floor or '0') then return 0 end
    end
end
local stamped = ARGV[1] .. ':' .. ARGV[2]
if ARGV[3] == '0' then
    redis.call('SET', KEYS[1], stamped)
else
    redis.call('SET', KEYS[1], stamped, 'PX', ARGV[3])
end
if ARGV[4] ~= '' then
    redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return 1
";

/// Gives the key a new version (kept `version_ttl`), deletes the value, publishes on the
/// backplane. Versions come from one counter (`KEYS[3]`, see `next_version_lua!`), never a
/// per-key `INCR`: a per-key count restarts at 1 once its key expires, so a fill that read
/// version 1 just before could write after an invalidation that produced 1 again. Drawn past
/// the epoch of older builds (`KEYS[4]`) and the floor (`KEYS[5]`).
const INVALIDATE: &str = concat!(
    next_version_lua!(),
    r"
local above = math.max(tonumber(redis.call('GET', KEYS[4]) or '0'),
                       tonumber(redis.call('GET', KEYS[5]) or '0'))
local version = next_version(KEYS[3], above)
redis.call('SET', KEYS[2], version, 'PX', ARGV[1])
redis.call('DEL', KEYS[1])
local receivers = 0
if ARGV[2] ~= '' then
    receivers = redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return {tonumber(version), receivers}
"
);

/// Raises the floor (`KEYS[2]`) to a new counter (`KEYS[1]`) value above every version, the
/// epoch of older builds (`KEYS[3]`) and the old floor, and publishes on the backplane's `all`
/// channel.
const INVALIDATE_ALL: &str = concat!(
    next_version_lua!(),
    r"
local above = math.max(tonumber(redis.call('GET', KEYS[2]) or '0'),
                       tonumber(redis.call('GET', KEYS[3]) or '0'))
local floor = next_version(KEYS[1], above)
redis.call('SET', KEYS[2], floor)
local receivers = 0
if ARGV[1] ~= '' then
    receivers = redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return {tonumber(floor), receivers}
"
);

/// Redis's default `proto-max-bulk-len`: the largest value it accepts.
pub const REDIS_MAX_VALUE_LEN: usize = 512 * 1024 * 1024;

/// A second level in Redis, shared by every process that talks to the same Redis with the same
/// key prefix.
///
/// Every call is bounded (at most `connect_timeout` to (re)connect, then `command_timeout`),
/// reconnects on its own after `reconnect_backoff`, and answers an [`L2Error`] instead of
/// hanging. [`invalidate`](SecondLevel::invalidate) additionally waits up to `ack_timeout` for
/// the backplane's acknowledgements.
///
/// # Cancellation
/// Each call's await is its round trip; dropped there, the command may still run in Redis
/// (atomically: a script runs whole or not at all). A dropped `invalidate` may have bumped the
/// version and published without waiting for the acknowledgements.
pub struct RedisSecondLevel {
    connector: Connector,
    prefix: String,
    get: redis::Script,
    set: redis::Script,
    invalidate_all: redis::Script,
    version: redis::Script,
    set_if_version: redis::Script,
    invalidate: redis::Script,
    version_ttl: Duration,
    ack_timeout: Duration,
    max_value_len: usize,
    backplane: Option<Backplane>,
    announce_fills: bool,
}

impl fmt::Debug for RedisSecondLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSecondLevel")
            .field("prefix", &self.prefix)
            .field("backplane", &self.backplane.is_some())
            .finish_non_exhaustive()
    }
}

/// Builds a [`RedisSecondLevel`].
#[derive(Debug, Clone)]
pub struct RedisSecondLevelBuilder {
    url: String,
    prefix: String,
    connect_timeout: Duration,
    command_timeout: Duration,
    reconnect_backoff: Duration,
    version_ttl: Duration,
    ack_timeout: Duration,
    ping_interval: Duration,
    max_value_len: usize,
    backplane: bool,
    announce_fills: bool,
}

impl RedisSecondLevelBuilder {
    /// Prefix of every key (and of the backplane channel, `{prefix}bp`). Default `"herd:l2:"`.
    ///
    /// One keyspace per prefix: caches of different key types (or codecs) need prefixes of
    /// their own, and lease prefixes of their own (`RedisLease`). Sharing one, their keys can
    /// collide in Redis, and every invalidation of one cache's key reaches the other's
    /// backplane as a key it cannot decode, which empties its whole L1 (safe, never stale, but
    /// each such invalidation costs it every L1 hit: `TierStats::backplane_resyncs`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
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

    /// After a failed connect (or a lost subscription), wait this long before the next. Default 1 s.
    pub fn reconnect_backoff(mut self, backoff: Duration) -> Self {
        self.reconnect_backoff = backoff;
        self
    }

    /// How long a key's version is kept (from the first read of a key without one, and from each
    /// invalidation). Once it is gone, a fill that read it is refused (its L2 write is lost, never
    /// a stale value stored) and the next read draws a new one. A fill that runs longer than
    /// this loses its L2 write. Default 24 h.
    pub fn version_ttl(mut self, ttl: Duration) -> Self {
        self.version_ttl = ttl;
        self
    }

    /// Longest wait, in `invalidate`, for the backplane's acknowledgements. Default 500 ms.
    pub fn ack_timeout(mut self, limit: Duration) -> Self {
        self.ack_timeout = limit;
        self
    }

    /// How often the subscriber pings Redis to notice a silently dead connection. Default 1 s.
    pub fn ping_interval(mut self, interval: Duration) -> Self {
        self.ping_interval = interval;
        self
    }

    /// Values longer than this are refused with [`L2Error::TooLarge`] before they are sent.
    /// Default [`REDIS_MAX_VALUE_LEN`]; set it to your server's `proto-max-bulk-len`.
    pub fn max_value_len(mut self, limit: usize) -> Self {
        self.max_value_len = limit;
        self
    }

    /// Whether a fenced write that stored announces the key on the backplane (one `PUBLISH`
    /// inside the write's script), waking other processes' leaders that wait for this fill
    /// before their next poll. Default on (with the backplane); off, waiters poll.
    pub fn announce_fills(mut self, on: bool) -> Self {
        self.announce_fills = on;
        self
    }

    /// Whether to run the backplane (subscribe, acknowledge, publish invalidations). Default on.
    pub fn backplane(mut self, on: bool) -> Self {
        self.backplane = on;
        self
    }

    /// Checks the settings and builds it. Does not connect: the first call (or the backplane's
    /// first attach) does.
    pub fn build(self) -> Result<RedisSecondLevel, ConfigError> {
        for (limit, what) in [
            (self.connect_timeout, "connect timeout"),
            (self.command_timeout, "command timeout"),
            (self.ack_timeout, "ack timeout"),
            (self.ping_interval, "ping interval"),
            (self.version_ttl, "version ttl"),
        ] {
            if limit.is_zero() {
                return Err(ConfigError::ZeroTimeout(what));
            }
            if limit > MAX_SETTING {
                return Err(ConfigError::TooLong(what));
            }
        }
        let client = redis::Client::open(self.url.as_str()).map_err(ConfigError::Url)?;
        let connector = Connector::new(
            client.clone(),
            self.connect_timeout,
            self.command_timeout,
            self.reconnect_backoff,
        );
        let backplane = self.backplane.then(|| {
            Backplane::new(
                client.clone(),
                backplane::Settings {
                    channel: format!("{}bp", self.prefix),
                    fill_channel: String::new(),
                    all_channel: String::new(),
                    connect_timeout: self.connect_timeout,
                    command_timeout: self.command_timeout,
                    reconnect_backoff: self.reconnect_backoff,
                    ping_interval: self.ping_interval,
                },
                connector.clone(),
            )
        });
        Ok(RedisSecondLevel {
            connector,
            prefix: self.prefix,
            get: redis::Script::new(GET),
            set: redis::Script::new(SET),
            invalidate_all: redis::Script::new(INVALIDATE_ALL),
            version: redis::Script::new(VERSION),
            set_if_version: redis::Script::new(SET_IF_VERSION),
            invalidate: redis::Script::new(INVALIDATE),
            version_ttl: self.version_ttl,
            ack_timeout: self.ack_timeout,
            max_value_len: self.max_value_len,
            backplane,
            announce_fills: self.announce_fills,
        })
    }
}

/// Redis's answer turned into the tier's error.
fn l2_error(error: LeaseError) -> L2Error {
    match error {
        LeaseError::TimedOut(limit) => L2Error::TimedOut(limit),
        other => L2Error::unavailable(other),
    }
}

/// `ttl` in whole milliseconds for `PX` (rounded down, so L2 never keeps a value longer than
/// asked); `0` means no expiry.
fn ttl_millis(ttl: Duration) -> Result<u64, L2Error> {
    if ttl < Duration::from_millis(1) {
        return Err(L2Error::InvalidTtl(ttl));
    }
    // Redis keeps expiry times as signed 64-bit milliseconds since the epoch; beyond a
    // quarter of that range the value simply does not expire.
    let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    Ok(if millis > i64::MAX as u64 / 4 {
        0
    } else {
        millis
    })
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisSecondLevel {
    /// A second level on the Redis at `url`, with default settings.
    pub fn new(url: &str) -> Result<Self, ConfigError> {
        Self::builder(url).build()
    }

    /// Starts a builder for the Redis at `url`.
    pub fn builder(url: impl Into<String>) -> RedisSecondLevelBuilder {
        RedisSecondLevelBuilder {
            url: url.into(),
            prefix: "herd:l2:".to_owned(),
            connect_timeout: Duration::from_millis(250),
            command_timeout: Duration::from_millis(100),
            reconnect_backoff: Duration::from_secs(1),
            version_ttl: Duration::from_secs(24 * 3600),
            ack_timeout: Duration::from_millis(500),
            ping_interval: Duration::from_secs(1),
            max_value_len: REDIS_MAX_VALUE_LEN,
            backplane: true,
            announce_fills: true,
        }
    }

    /// The Redis key of `key`'s value.
    pub fn data_key(&self, key: &[u8]) -> Vec<u8> {
        [self.prefix.as_bytes(), b"d:", key].concat()
    }

    /// The Redis key of `key`'s version.
    pub fn version_key(&self, key: &[u8]) -> Vec<u8> {
        [self.prefix.as_bytes(), b"v:", key].concat()
    }

    /// The Redis key of the counter every version comes from.
    pub fn counter_key(&self) -> Vec<u8> {
        [self.prefix.as_bytes(), b"counter"].concat()
    }

    /// The Redis key of the version floor that `invalidate_all` raises.
    pub fn floor_key(&self) -> Vec<u8> {
        [self.prefix.as_bytes(), b"floor"].concat()
    }

    /// The Redis key of the epoch older builds read a key without a version as (now only a
    /// lower bound for new versions).
    pub fn epoch_key(&self) -> Vec<u8> {
        [self.prefix.as_bytes(), b"epoch"].concat()
    }

    /// The backplane's counters (`None` without a backplane).
    pub fn backplane_stats(&self) -> Option<BackplaneStats> {
        self.backplane.as_ref().map(Backplane::stats)
    }

    /// Waits until the backplane's subscription is live (returns at once without a backplane).
    /// Starts the subscriber if no tier is attached yet, so it may be called before or after
    /// building the `TieredCache`s over this L2. Waits as long as Redis is unreachable: bound it
    /// with `tokio::time::timeout` where a start-up must not wait for Redis.
    ///
    /// # Cancellation
    /// Safe to drop at any point.
    pub async fn wait_subscribed(&self) {
        if let Some(backplane) = &self.backplane {
            backplane.wait_subscribed().await;
        }
    }

    /// `set_if_version`, and with `only_absent` the `set_if_version_absent` rule (one script).
    async fn store_if_version(
        &self,
        key: &[u8],
        version: Version,
        value: &[u8],
        ttl: Duration,
        only_absent: bool,
    ) -> Result<bool, L2Error> {
        self.check_len(value)?;
        let millis = ttl_millis(ttl)?;
        let (data, version_key) = (self.data_key(key), self.version_key(key));
        let floor = self.floor_key();
        let fills = match &self.backplane {
            Some(backplane) if self.announce_fills => backplane.fill_channel().to_owned(),
            _ => String::new(),
        };
        let stored: i64 = self
            .connector
            .run(|mut connection| async move {
                self.set_if_version
                    .key(data)
                    .key(version_key)
                    .key(floor)
                    .arg(version.0.to_string())
                    .arg(value)
                    .arg(millis)
                    .arg(fills)
                    .arg(key)
                    .arg(if only_absent { "1" } else { "0" })
                    .invoke_async(&mut connection)
                    .await
            })
            .await
            .map_err(l2_error)?;
        Ok(stored == 1)
    }

    fn check_len(&self, value: &[u8]) -> Result<(), L2Error> {
        if value.len() > self.max_value_len {
            return Err(L2Error::TooLarge {
                len: value.len(),
                limit: self.max_value_len,
            });
        }
        Ok(())
    }
}

#[async_trait]
impl SecondLevel for RedisSecondLevel {
    async fn get(&self, key: &[u8]) -> Result<Option<L2Entry>, L2Error> {
        // Every L1 miss reads here: a subscriber that ended with its runtime starts again.
        if let Some(backplane) = &self.backplane {
            backplane.ensure_running();
        }
        let (data, floor) = (self.data_key(key), self.floor_key());
        let found: Option<(Vec<u8>, i64)> = self
            .connector
            .run(|mut connection| async move {
                self.get
                    .key(data)
                    .key(floor)
                    .invoke_async(&mut connection)
                    .await
            })
            .await
            .map_err(l2_error)?;
        Ok(found.and_then(|(value, pttl)| match pttl {
            -1 => Some(L2Entry { value, ttl: None }),
            ms if ms > 0 => Some(L2Entry {
                value,
                ttl: Some(Duration::from_millis(ms.unsigned_abs())),
            }),
            _ => None,
        }))
    }

    async fn set(&self, key: &[u8], value: &[u8], ttl: Duration) -> Result<(), L2Error> {
        self.check_len(value)?;
        let millis = ttl_millis(ttl)?;
        let (data, floor) = (self.data_key(key), self.floor_key());
        self.connector
            .run(|mut connection| async move {
                self.set
                    .key(data)
                    .key(floor)
                    .arg(value)
                    .arg(millis)
                    .invoke_async::<()>(&mut connection)
                    .await
            })
            .await
            .map_err(l2_error)
    }

    async fn delete(&self, key: &[u8]) -> Result<(), L2Error> {
        let data = self.data_key(key);
        self.connector
            .run(|mut connection| async move {
                redis::cmd("DEL")
                    .arg(data)
                    .query_async::<()>(&mut connection)
                    .await
            })
            .await
            .map_err(l2_error)
    }

    async fn version(&self, key: &[u8]) -> Result<Version, L2Error> {
        let version_key = self.version_key(key);
        let (floor, counter) = (self.floor_key(), self.counter_key());
        let version_ttl = ms(self.version_ttl);
        let version: u64 = self
            .connector
            .run(|mut connection| async move {
                self.version
                    .key(version_key)
                    .key(floor)
                    .key(counter)
                    .arg(version_ttl)
                    .invoke_async(&mut connection)
                    .await
            })
            .await
            .map_err(l2_error)?;
        Ok(Version(version))
    }

    async fn set_if_version(
        &self,
        key: &[u8],
        version: Version,
        value: &[u8],
        ttl: Duration,
    ) -> Result<bool, L2Error> {
        self.store_if_version(key, version, value, ttl, false).await
    }

    async fn set_if_version_absent(
        &self,
        key: &[u8],
        version: Version,
        value: &[u8],
        ttl: Duration,
    ) -> Result<bool, L2Error> {
        self.store_if_version(key, version, value, ttl, true).await
    }

    async fn invalidate(&self, key: &[u8]) -> Result<Invalidated, L2Error> {
        let (data, version_key) = (self.data_key(key), self.version_key(key));
        let counter = self.counter_key();
        let (epoch, floor) = (self.epoch_key(), self.floor_key());
        let mut acks = self.backplane.as_ref().map(Backplane::expect_acks);
        let (channel, message) = match (&self.backplane, &acks) {
            (Some(backplane), Some(acks)) => (backplane.channel().to_owned(), acks.message(key)),
            _ => (String::new(), Vec::new()),
        };
        let version_ttl = ms(self.version_ttl);
        let (version, receivers): (u64, u64) = self
            .connector
            .run(|mut connection| async move {
                self.invalidate
                    .key(data)
                    .key(version_key)
                    .key(counter)
                    .key(epoch)
                    .key(floor)
                    .arg(version_ttl)
                    .arg(channel)
                    .arg(message)
                    .invoke_async(&mut connection)
                    .await
            })
            .await
            .map_err(l2_error)?;
        let acked = match acks.as_mut() {
            Some(acks) => acks.wait(receivers, self.ack_timeout).await,
            None => 0,
        };
        Ok(Invalidated::new(Version(version), receivers, acked))
    }

    async fn invalidate_all(&self) -> Result<Invalidated, L2Error> {
        let (counter, floor, epoch) = (self.counter_key(), self.floor_key(), self.epoch_key());
        let mut acks = self.backplane.as_ref().map(Backplane::expect_acks);
        let (channel, message) = match (&self.backplane, &acks) {
            (Some(backplane), Some(acks)) => {
                (backplane.all_channel().to_owned(), acks.message(&[]))
            }
            _ => (String::new(), Vec::new()),
        };
        let (version, receivers): (u64, u64) = self
            .connector
            .run(|mut connection| async move {
                self.invalidate_all
                    .key(counter)
                    .key(floor)
                    .key(epoch)
                    .arg(channel)
                    .arg(message)
                    .invoke_async(&mut connection)
                    .await
            })
            .await
            .map_err(l2_error)?;
        let acked = match acks.as_mut() {
            Some(acks) => acks.wait(receivers, self.ack_timeout).await,
            None => 0,
        };
        Ok(Invalidated::new(Version(version), receivers, acked))
    }

    fn attach(&self, sink: Weak<dyn L1Sink>) {
        if let Some(backplane) = &self.backplane {
            backplane.attach(sink);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every duration setting is refused at zero and past `MAX_SETTING`: `Duration::MAX` as a
    /// ping interval panicked tokio's interval in the backplane's task (which then stayed
    /// "subscribed" and never re-subscribed), as an ack timeout panicked an acknowledgement
    /// wait after its invalidation ran, and as a version ttl was refused by Redis every time.
    #[test]
    fn durations_past_the_maximum_are_refused_at_build() {
        type Set = fn(RedisSecondLevelBuilder, Duration) -> RedisSecondLevelBuilder;
        let settings: [(&str, Set); 5] = [
            ("connect timeout", RedisSecondLevelBuilder::connect_timeout),
            ("command timeout", RedisSecondLevelBuilder::command_timeout),
            ("ack timeout", RedisSecondLevelBuilder::ack_timeout),
            ("ping interval", RedisSecondLevelBuilder::ping_interval),
            ("version ttl", RedisSecondLevelBuilder::version_ttl),
        ];
        for (name, set) in settings {
            for bad in [MAX_SETTING + Duration::from_secs(1), Duration::MAX] {
                let built = set(RedisSecondLevel::builder("redis://127.0.0.1:1/"), bad).build();
                assert!(
                    matches!(built, Err(ConfigError::TooLong(what)) if what == name),
                    "{name} = {bad:?}"
                );
            }
            let fine = set(
                RedisSecondLevel::builder("redis://127.0.0.1:1/"),
                MAX_SETTING,
            )
            .build();
            assert!(fine.is_ok(), "{name} = {MAX_SETTING:?}");
        }
    }
}
