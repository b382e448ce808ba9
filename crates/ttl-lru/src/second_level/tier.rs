//! [`TieredCache`]: a `ttl_lru::Cache` (L1) over a [`SecondLevel`] (L2), built on the cache's
//! public read-through only. The leader of the cache's local flight does the L2 work inside its
//! fill, so everything the cache promises about coalescing, cancellation and fences still holds.

use crate::sync::Ordering::Relaxed;
use crate::sync::plain::AtomicU64;
use std::any::Any;
use std::convert::Infallible;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Weak};
use std::time::Duration;

use coalesce::{DistributedBuilder, DistributedGroup, Group, Refresh, SettingsError};
use tokio::time::{Instant, timeout};

use super::backend::{Invalidated, L1Sink, L2Error, SecondLevel, Version};
use super::codec::{Codec, CodecError};
use super::stats::{Counters, TierStats, bump};

mod wake;
use crate::{Cache, Fence, FetchError, Source};

/// L2 rejects ttls under its 1 ms resolution.
const MIN_L2_TTL: Duration = Duration::from_millis(1);

/// Where a [`TieredCache`] call's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TierSource {
    /// A fresh value in this process's L1.
    L1,
    /// This call's leader found it in L2 (stored in L1 for L2's remaining ttl, unless a full
    /// L1's admission policy declined it).
    L2,
    /// Another process filled it while this one waited for the fleet lease.
    Fleet,
    /// This call ran the origin fill.
    Filled,
    /// Another caller in this process led the flight (its source is in its own answer).
    Joined,
    /// A stale L1 value (stale-while-revalidate); a refresh through L2 runs in the background.
    Stale,
}

/// A tiered read-through result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierFetched<V> {
    /// The value.
    pub value: V,
    /// Where it came from.
    pub source: TierSource,
}

/// A setting [`TierBuilder::build`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TierConfigError {
    /// A zero timeout would skip L2 on every call.
    #[error("the {0} must be greater than zero")]
    ZeroTimeout(&'static str),
    /// Negative entries in L2 need a ttl of at least 1 ms.
    #[error("the L2 negative ttl {0:?} is under 1 ms")]
    NegativeTtl(Duration),
    /// The fleet lease's settings.
    #[error("fleet lease: {0}")]
    Lease(#[from] SettingsError),
}

/// Why [`TieredCache::invalidate`] could not invalidate across the fleet. This process's L1 is
/// invalidated in every case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidateError {
    /// The key does not encode: only this process's L1 was invalidated.
    #[error("the key does not encode: {0}")]
    Key(#[source] CodecError),
    /// L2 failed or timed out: other processes and L2 may still hold the value.
    #[error("the second level did not invalidate: {0}")]
    L2(#[source] L2Error),
}

/// What the fleet lease's local group is keyed by: one flight per fill (`id`), so a fill
/// started after a local invalidation never joins a fill that started before it; the lease key
/// is shared by every process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FlightKey {
    lease: String,
    id: u64,
}

type Lease = DistributedGroup<FlightKey, (), Infallible>;

/// Builds a [`TieredCache`].
pub struct TierBuilder<K, V> {
    cache: Cache<K, V>,
    l2: Arc<dyn SecondLevel>,
    keys: Box<dyn Codec<K>>,
    values: Box<dyn Codec<V>>,
    lease: Option<DistributedBuilder>,
    negative: Option<(Box<dyn Any + Send + Sync>, Duration)>,
    l2_timeout: Duration,
    l2_soft_timeout: Option<Duration>,
    invalidate_timeout: Duration,
}

/// The codec of one error type `E` for negative entries in L2.
struct Negative<E> {
    codec: Box<dyn Codec<E>>,
}

/// L2 holds a one-byte tag before the encoded payload: a value or a cached fill error.
const TAG_VALUE: u8 = 0;
const TAG_ERROR: u8 = 1;

impl<K, V> std::fmt::Debug for TierBuilder<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TierBuilder")
            .field("l2_timeout", &self.l2_timeout)
            .field("invalidate_timeout", &self.invalidate_timeout)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl<K, V> TierBuilder<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// The **hard** timeout: the longest any one L2 call (version, read, fenced write, and the
    /// reads of a background refresh) may take before the tier gives up on it and goes on
    /// without L2 (fail open). Default 100 ms.
    pub fn l2_timeout(mut self, limit: Duration) -> Self {
        self.l2_timeout = limit;
        self
    }

    /// The **soft** timeout: the longest an L1 miss's caller waits for L2's answer (the version
    /// and the read together) before its leader stops waiting for L2 and fills from the origin
    /// at once, as if L2 were down (the value then stays out of L2: no version was read, so the
    /// write could not be fenced). A caller with a stale L1 copy never waits for L2 (the cache's
    /// stale-while-revalidate answers it at once, and with a fleet lease the refresh runs under
    /// the hard timeout only; without one it is cut at the soft timeout too, and then fills
    /// without L2). Default: none (each call is bounded by the hard timeout alone, so the reads
    /// can take two of them). Set it under twice the hard timeout to bound what a slow L2 adds
    /// to a miss's *reads*. It does not bound the rest of a miss: after the origin's fill, the
    /// fenced write to L2 (skipped when no version was read) takes up to one hard timeout
    /// before the value is published to the leader and its followers, and with a fleet lease
    /// the leader may also wait up to the lease's `lease_timeout` to take the lease, one hard
    /// timeout to read L2 again once it holds it, and one to read the version its write is
    /// fenced by. So a miss against an L2 that answers just under the hard timeout `h` waits
    /// `min(soft, 2h)` + fill + `h` without a lease.
    pub fn l2_soft_timeout(mut self, limit: Duration) -> Self {
        self.l2_soft_timeout = Some(limit);
        self
    }

    /// The longest [`TieredCache::invalidate`] waits for L2 and the backplane's
    /// acknowledgements. Default 1 s. Make it longer than the L2's own bound on an invalidation
    /// (for `RedisSecondLevel`: connect and command timeouts plus its `ack_timeout`, 850 ms by
    /// default), or a slow acknowledgement reads as a failed invalidation.
    pub fn invalidate_timeout(mut self, limit: Duration) -> Self {
        self.invalidate_timeout = limit;
        self
    }

    /// Takes the fleet lease (`coalesce::DistributedGroup`, e.g. over `coalesce_redis`'s
    /// `RedisLease`) after an L2 miss, so a fleet fills a cold key about once: the other
    /// processes re-check L2 every `poll_interval` until the holder's value lands.
    pub fn lease(mut self, lease: DistributedBuilder) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Carries fill errors of type `E` through L2 too (negative entries), encoded by `codec`,
    /// for `ttl` in L2: a process that finds one answers the error without filling, and caches
    /// it in its L1 for the cache's own `negative_ttl`. Errors of other types, from callers with
    /// another `E`, stay out of L2 (and an L2 error entry reads as a miss to them). Fenced like
    /// values.
    pub fn negative_caching<E: Send + Sync + 'static>(
        mut self,
        codec: impl Codec<E>,
        ttl: Duration,
    ) -> Self {
        let negative = Negative::<E> {
            codec: Box::new(codec),
        };
        self.negative = Some((Box::new(negative), ttl));
        self
    }

    /// Checks the settings, builds the tier and attaches it to the L2's backplane.
    pub fn build(self) -> Result<TieredCache<K, V>, TierConfigError> {
        if let Some((_, ttl)) = &self.negative
            && *ttl < MIN_L2_TTL
        {
            return Err(TierConfigError::NegativeTtl(*ttl));
        }
        if self.l2_timeout.is_zero() {
            return Err(TierConfigError::ZeroTimeout("l2 timeout"));
        }
        if self.l2_soft_timeout.is_some_and(|soft| soft.is_zero()) {
            return Err(TierConfigError::ZeroTimeout("l2 soft timeout"));
        }
        if self.invalidate_timeout.is_zero() {
            return Err(TierConfigError::ZeroTimeout("invalidate timeout"));
        }
        let lease = match self.lease {
            Some(builder) => {
                Some(builder.build_keyed(Group::new(), |key: &FlightKey| key.lease.clone())?)
            }
            None => None,
        };
        let inner = Arc::new(Tier {
            cache: self.cache,
            l2: self.l2,
            keys: self.keys,
            values: self.values,
            lease,
            negative: self.negative,
            l2_timeout: self.l2_timeout,
            l2_soft_timeout: self.l2_soft_timeout,
            invalidate_timeout: self.invalidate_timeout,
            next_flight: AtomicU64::new(0),
            waiters: wake::Waiters::default(),
            counters: Counters::default(),
        });
        let sink: Weak<dyn L1Sink> = Arc::downgrade(&inner) as Weak<dyn L1Sink>;
        inner.l2.attach(sink);
        Ok(TieredCache { inner })
    }
}

/// A `ttl-lru` [`Cache`] (L1, per process) over a [`SecondLevel`] (L2, shared by a fleet).
///
/// A read ([`get_or_try_insert`](Self::get_or_try_insert)):
/// 1. **L1 hit**: answered by [`Cache::get`] alone: no L2 call, no allocation, no shared write
///    beyond the cache's own hit path.
/// 2. **L1 miss**: the cache's read-through coalesces this process's callers; only its leader
///    goes on. The leader reads the key's L2 version, then the value: an L2 hit is decoded and
///    stored in L1 for the time L2 has left (measured from before the L2 request was sent, so
///    never longer than L2 keeps it; a full L1 may decline a new key, as any insert).
/// 3. **L2 miss**: with a fleet lease, the leader takes it (or waits for the holder, re-checking
///    L2 when the holder's write is announced on the backplane ([`L1Sink::filled_encoded`]) and
///    every poll interval in case the announcement is lost; a holder that died loses its lease
///    within one lease ttl, a live one renews it while its fill runs, and a lease still held
///    after the lease's `max_wait` is filled past anyway); without one it fills.
/// 4. **Fill**: the origin's value is written to L2 only if the key's version is still the one
///    read in step 2 (a compare-and-set in L2), then to L1 through the cache's own fence (and
///    its policy, which may decline a new key in a full L1: L2 still has it). If the
///    version moved (the key was invalidated somewhere in the fleet meanwhile), the value goes to
///    neither L2 nor L1; the callers of this flight still get it.
///
/// **Stale-while-revalidate** (the cache's `stale_while_revalidate` window): a stale L1 copy
/// is answered at once and one background refresh goes through steps 2-4, except that on an L2
/// miss it asks the fleet lease once ([`DistributedGroup::refresh`]): if another process holds
/// it (it is refreshing the key), this refresh **stands down**: it does not fill, but waits in
/// the background for that process's value as a miss does (re-checking L2 at each poll or fill
/// announcement, filling itself only after `max_wait`), while every read gets the stale copy;
/// counted in [`TierStats::stand_downs`]. The copy's stale window is never extended: when it
/// ends, the cache abandons the refresh and the next read waits like a miss.
///
/// **Fail open.** Every L2 call is bounded by `l2_timeout` (the hard timeout), and a miss's
/// wait for L2's answer by `l2_soft_timeout` when set ([`TierBuilder::l2_soft_timeout`]); an L2 error or timeout means "go on
/// with L1 and the local single flight" and is counted ([`TierStats`]). Without a readable
/// version nothing is written to L2 (the write could not be fenced).
///
/// **Invalidation** ([`invalidate`](Self::invalidate)) changes the key's L2 version, deletes it
/// from L2, tells every attached process (the backplane) to drop its L1 copy and waits for their
/// acknowledgements (bounded); this process's L1 is invalidated before and after that.
///
/// Codec failures never poison a key: a value that does not decode reads as an L2 miss (and is
/// overwritten by the fill), one that does not encode is kept out of L2 only.
///
/// **Negative entries** ([`TierBuilder::negative_caching`]): fill errors of one chosen type go
/// through L2 too. An L2 entry is a tag byte (`0`: value, `1`: fill error) and the codec's bytes.
///
/// Needs a tokio runtime with time enabled. Cheap to clone.
pub struct TieredCache<K, V> {
    inner: Arc<Tier<K, V>>,
}

impl<K, V> Clone for TieredCache<K, V> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K, V> std::fmt::Debug for TieredCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredCache")
            .field("cache", &self.inner.cache)
            .field("l2_timeout", &self.inner.l2_timeout)
            .finish_non_exhaustive()
    }
}

struct Tier<K, V> {
    cache: Cache<K, V>,
    l2: Arc<dyn SecondLevel>,
    keys: Box<dyn Codec<K>>,
    values: Box<dyn Codec<V>>,
    lease: Option<Lease>,
    negative: Option<(Box<dyn Any + Send + Sync>, Duration)>,
    l2_timeout: Duration,
    l2_soft_timeout: Option<Duration>,
    invalidate_timeout: Duration,
    next_flight: AtomicU64,
    /// Leaders waiting for another process's fill, woken by its announcement.
    waiters: wake::Waiters,
    counters: Counters,
}

/// What the leader's fill tells the cache's ttl function and the caller: the L1 ttl and where
/// the value came from.
struct Note {
    ttl: Ttl,
    source: TierSource,
}

enum Ttl {
    /// Store for this long.
    For(Duration),
    /// Store until this instant (an L2 hit's remaining ttl).
    Until(Instant),
}

impl Default for Note {
    fn default() -> Self {
        Note {
            ttl: Ttl::For(Duration::ZERO),
            source: TierSource::Filled,
        }
    }
}

type SharedNote = Arc<parking_lot::Mutex<Note>>;

impl<K, V> TieredCache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Starts a tier of `cache` over `l2`, with `keys` and `values` encoding what L2 stores.
    pub fn builder(
        cache: Cache<K, V>,
        l2: Arc<dyn SecondLevel>,
        keys: impl Codec<K>,
        values: impl Codec<V>,
    ) -> TierBuilder<K, V> {
        TierBuilder {
            cache,
            l2,
            keys: Box::new(keys),
            values: Box::new(values),
            lease: None,
            negative: None,
            l2_timeout: Duration::from_millis(100),
            l2_soft_timeout: None,
            invalidate_timeout: Duration::from_secs(1),
        }
    }

    /// The L1 cache.
    pub fn cache(&self) -> &Cache<K, V> {
        &self.inner.cache
    }

    /// The L1 value, if fresh (no L2 call).
    pub fn get(&self, key: &K) -> Option<V> {
        self.inner.cache.get(key)
    }

    /// A snapshot of the tier's counters.
    pub fn stats(&self) -> TierStats {
        let lease = self.inner.lease.as_ref().map(DistributedGroup::stats);
        self.inner.counters.snapshot(lease)
    }

    /// Returns the value of `key` from L1, else L2, else runs `fill` (once per process through
    /// the cache's read-through, about once per fleet with a lease) and stores its value in L2
    /// and L1 for `ttl_fn(&value)`; see the [type docs](TieredCache) for each step.
    ///
    /// `fill` is called (not awaited) only by the local leader, before it reads L2; its future
    /// is dropped unpolled when L2 has the value. Fill errors are returned (and cached in L1 for
    /// the cache's `negative_ttl`, as by [`Cache::get_or_try_insert`]); they are written to L2
    /// only with a negative codec for `E` ([`TierBuilder::negative_caching`]), and an error found
    /// there is returned as this call's [`FetchError::Failed`].
    ///
    /// # Cancellation
    /// - Dropped while waiting for another local caller's flight: it leaves the queue.
    /// - Dropped while leading (at the L2 version read, the L2 read, the lease, the fill or the
    ///   fenced L2 write): the cache hands the flight to the oldest waiting caller, which starts
    ///   over from step 2; a lease held is released in the background; an L2 write already sent
    ///   may land, but only while the key's version is unchanged (it is fenced in L2 itself).
    ///   Dropped while the lease is being acquired (a round trip to the lease service), the
    ///   lease may have been granted with nobody to see it: it is not released, and until its
    ///   ttl ends the caller that takes over, and other processes, find it held and wait (up to
    ///   one lease ttl), as with [`coalesce::DistributedGroup::run`].
    ///
    /// # Errors
    /// As [`Cache::get_or_try_insert`]. L2 failures are never returned: they are counted.
    pub async fn get_or_try_insert<E, T, F, Fut>(
        &self,
        key: K,
        ttl_fn: T,
        fill: F,
    ) -> Result<TierFetched<V>, FetchError<E>>
    where
        E: Send + Sync + 'static,
        T: FnOnce(&V) -> Duration + Send + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        if let Some(value) = self.inner.cache.get(&key) {
            return Ok(TierFetched {
                value,
                source: TierSource::L1,
            });
        }
        let note: SharedNote = Arc::default();
        let tier = Arc::clone(&self.inner);
        let lead_note = Arc::clone(&note);
        let lead_key = key.clone();
        let make = move || {
            // Called when this caller leads a miss, or claimed the background refresh of a
            // stale copy (stale-while-revalidate): a stale L1 copy says which. Only with a
            // lease (the stand-down needs it), on the L1-miss path only. `Cache` has no
            // uncounted way to ask, so this lookup is one more lookup (a miss, or a stale hit)
            // in the cache's own `Stats` per leader.
            let refresh =
                tier.lease.is_some() && tier.cache.lookup(&lead_key).is_some_and(|e| e.is_stale());
            let origin = fill();
            tier.lead(lead_key, ttl_fn, origin, lead_note, refresh)
        };
        let ttl_note = Arc::clone(&note);
        let l1_ttl = move |_: &V| match ttl_note.lock().ttl {
            Ttl::For(ttl) => ttl,
            Ttl::Until(at) => at.saturating_duration_since(Instant::now()),
        };
        // Await: the cache's read-through (its cancellation rules apply, see above).
        let fetched = self
            .inner
            .cache
            .get_or_try_insert(key, l1_ttl, make)
            .await?;
        let source = match fetched.source {
            Source::Hit => TierSource::L1,
            Source::Joined => TierSource::Joined,
            Source::Stale => TierSource::Stale,
            Source::Filled => note.lock().source,
        };
        Ok(TierFetched {
            value: fetched.value,
            source,
        })
    }

    /// Invalidates `key` across the fleet: invalidates this process's L1, changes the key's L2
    /// version and deletes its L2 value
    /// (atomically: a fill anywhere that read the version before cannot write after), tells every
    /// attached process to drop its L1 copy and waits for their acknowledgements (bounded by
    /// `invalidate_timeout`), then invalidates this process's L1 again (each L1 invalidation
    /// also fences this process's in-flight fills of the key and detaches them from later
    /// callers).
    ///
    /// When this returns `Ok`, no process whose acknowledgement is counted in
    /// [`Invalidated::acked`] serves the old value from L1, no fill that started before can
    /// write it to L2 or to those L1s, and the next read anywhere goes to L2 (then fills).
    ///
    /// # Cancellation
    /// Dropped while waiting for L2: this process's L1 copy is already dropped (L1 is
    /// invalidated before and after the L2 call), but the L2 invalidation may or may not have
    /// happened (it is atomic in L2; the acknowledgements were not awaited), and a local fill
    /// that read L2 meanwhile may still store the old value here. Call it again.
    ///
    /// # Errors
    /// [`InvalidateError::Key`] (the key does not encode) and [`InvalidateError::L2`] (L2 failed
    /// or timed out): this process's L1 is invalidated anyway; other processes may not be.
    pub async fn invalidate(&self, key: &K) -> Result<Invalidated, InvalidateError> {
        let tier = &self.inner;
        bump(&tier.counters.invalidations);
        let encoded = match tier.keys.encode(key) {
            Ok(bytes) => bytes,
            Err(error) => {
                bump(&tier.counters.codec_errors);
                bump(&tier.counters.invalidation_failures);
                tier.cache.invalidate(key);
                return Err(InvalidateError::Key(error));
            }
        };
        // Before L2 too: dropped at the await below, this process's L1 is already clean.
        tier.cache.invalidate(key);
        let result = match timeout(tier.invalidate_timeout, tier.l2.invalidate(&encoded)).await {
            Ok(result) => result,
            Err(_elapsed) => Err(L2Error::TimedOut(tier.invalidate_timeout)),
        };
        // And after L2: a local fill that started between the two read L2 before the L2
        // invalidation, and took its L1 fence before this second one, which fences it.
        tier.cache.invalidate(key);
        tier.settle_invalidation(result)
    }
}

impl<K, V> TieredCache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Invalidates **every** key across the fleet: invalidates this process's L1, then L2's
    /// [`SecondLevel::invalidate_all`] (every value stored before becomes unreadable and every
    /// version read before stops matching, atomically, so no fill anywhere that started before
    /// can write to L2 after; every attached process drops its whole L1 and fences its fills,
    /// acknowledged, bounded by `invalidate_timeout`), then this process's L1 again.
    ///
    /// When this returns `Ok`, the guarantees of [`invalidate`](Self::invalidate) hold for every
    /// key at once.
    ///
    /// # Cancellation
    /// As [`invalidate`](Self::invalidate): dropped while waiting for L2, this process's L1 is
    /// already empty but the fleet-wide part may or may not have happened. Call it again.
    ///
    /// # Errors
    /// [`InvalidateError::L2`]: L2 failed, timed out or does not support it
    /// ([`L2Error::Unsupported`]); this process's L1 is invalidated anyway.
    pub async fn invalidate_all(&self) -> Result<Invalidated, InvalidateError> {
        let tier = &self.inner;
        bump(&tier.counters.invalidations);
        tier.cache.invalidate_all();
        let result = match timeout(tier.invalidate_timeout, tier.l2.invalidate_all()).await {
            Ok(result) => result,
            Err(_elapsed) => Err(L2Error::TimedOut(tier.invalidate_timeout)),
        };
        // Again after L2, as in `invalidate`: fences local fills that read L2 in between.
        tier.cache.invalidate_all();
        tier.settle_invalidation(result)
    }
}

impl<K, V> Tier<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Counts and traces an invalidation's L2 outcome.
    fn settle_invalidation(
        &self,
        result: Result<Invalidated, L2Error>,
    ) -> Result<Invalidated, InvalidateError> {
        match result {
            Ok(done) => {
                if done.acked < done.receivers {
                    bump(&self.counters.unacked_invalidations);
                    tracing::warn!(
                        receivers = done.receivers,
                        acked = done.acked,
                        "invalidation not acknowledged by every backplane subscriber"
                    );
                }
                Ok(done)
            }
            Err(error) => {
                bump(&self.counters.invalidation_failures);
                tracing::warn!(%error, "fleet invalidation failed; only this process's L1 was invalidated");
                Err(InvalidateError::L2(error))
            }
        }
    }
}

/// What an L2 read found and decoded.
struct L2Hit<V, E> {
    found: Result<V, E>,
    until: Option<Instant>,
}

impl<K, V> Tier<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Runs one L2 call under `l2_timeout`; a failure is counted, traced and read as `None`.
    async fn l2_call<T>(
        &self,
        what: &'static str,
        call: impl Future<Output = Result<T, L2Error>>,
    ) -> Option<T> {
        match timeout(self.l2_timeout, call).await {
            Ok(Ok(answer)) => Some(answer),
            Ok(Err(error)) => {
                bump(&self.counters.l2_errors);
                tracing::warn!(what, %error, "second level failed; going on without it");
                None
            }
            Err(_elapsed) => {
                bump(&self.counters.l2_timeouts);
                tracing::warn!(what, limit = ?self.l2_timeout, "second level timed out; going on without it");
                None
            }
        }
    }

    /// The negative codec for `E`, if the tier carries errors of that type through L2.
    fn negative<E: 'static>(&self) -> Option<(&Negative<E>, Duration)> {
        let (codec, ttl) = self.negative.as_ref()?;
        Some((codec.downcast_ref::<Negative<E>>()?, *ttl))
    }

    /// Reads and decodes `key` from L2; a miss, an error, an undecodable entry and an error
    /// entry of another error type are all `None`.
    async fn read_l2<E: 'static>(&self, key: &[u8]) -> Option<L2Hit<V, E>> {
        let sent = Instant::now();
        let entry = match self.l2_call("get", self.l2.get(key)).await? {
            Some(entry) if entry.ttl != Some(Duration::ZERO) => entry,
            _ => {
                bump(&self.counters.l2_misses);
                return None;
            }
        };
        let found = match entry.value.split_first() {
            Some((&TAG_VALUE, value)) => self.values.decode(value).map(Ok),
            Some((&TAG_ERROR, error)) => match self.negative::<E>() {
                Some((negative, _)) => negative.codec.decode(error).map(Err),
                None => {
                    // Another caller's error type: a miss for this one.
                    bump(&self.counters.l2_misses);
                    return None;
                }
            },
            _ => Err(CodecError::decode(BadTag(entry.value.first().copied()))),
        };
        match found {
            Ok(found) => {
                if found.is_ok() {
                    bump(&self.counters.l2_hits);
                } else {
                    bump(&self.counters.l2_negative_hits);
                }
                Some(L2Hit {
                    found,
                    until: entry.ttl.map(|ttl| sent.checked_add(ttl).unwrap_or(sent)),
                })
            }
            Err(error) => {
                bump(&self.counters.codec_errors);
                tracing::warn!(%error, "L2 entry does not decode; treated as a miss");
                None
            }
        }
    }

    /// A hit's outcome for the flight, recorded in `note` (L1 ttl: L2's remaining one, or
    /// `ttl_fn`'s for a value stored in L2 without expiry; an error is cached by the cache for
    /// its own `negative_ttl`).
    fn take_hit<E, T: FnOnce(&V) -> Duration>(
        note: &SharedNote,
        hit: L2Hit<V, E>,
        ttl_fn: T,
        source: TierSource,
    ) -> Result<V, E> {
        if let Ok(value) = &hit.found {
            let ttl = match hit.until {
                Some(at) => Ttl::Until(at),
                None => Ttl::For(ttl_fn(value)),
            };
            *note.lock() = Note { ttl, source };
        }
        hit.found
    }

    /// The local leader's work: L2, then the fleet lease, then the fill.
    async fn lead<E, T, Fut>(
        self: Arc<Self>,
        key: K,
        ttl_fn: T,
        origin: Fut,
        note: SharedNote,
        refresh: bool,
    ) -> Result<V, E>
    where
        E: Send + Sync + 'static,
        T: FnOnce(&V) -> Duration,
        Fut: Future<Output = Result<V, E>>,
    {
        let encoded = match self.keys.encode(&key) {
            Ok(bytes) => bytes,
            Err(error) => {
                // No L2 for a key that does not encode: an L1-only fill.
                bump(&self.counters.codec_errors);
                tracing::warn!(%error, "key does not encode; filling without L2");
                bump(&self.counters.fills);
                let value = origin.await?;
                note.lock().ttl = Ttl::For(ttl_fn(&value));
                return Ok(value);
            }
        };
        // This process's writes of the key from here on: a refused L2 write below leaves L1 to
        // a newer one (`fill`).
        let fence = self.cache.fence(&key);
        // The version first: anything that invalidates the key after this point fences our write.
        let reads = async {
            let version = self.l2_call("version", self.l2.version(&encoded)).await;
            (version, self.read_l2::<E>(&encoded).await)
        };
        // A refresh (known only with a lease, see `get_or_try_insert`) has no caller waiting.
        let soft = self.l2_soft_timeout.filter(|_| !refresh);
        let (version, hit) = match soft {
            None => reads.await,
            Some(soft) => match timeout(soft, reads).await {
                Ok(answers) => answers,
                Err(_elapsed) => {
                    // Soft timeout: a caller waits; stop waiting for L2 and fill (fail open).
                    bump(&self.counters.l2_soft_timeouts);
                    tracing::warn!(limit = ?soft, "second level slower than the soft timeout; filling without it");
                    return self
                        .fill(&key, &encoded, fence, None, ttl_fn, origin, &note)
                        .await;
                }
            },
        };
        if let Some(hit) = hit {
            return Self::take_hit(&note, hit, ttl_fn, TierSource::L2);
        }
        let Some(lease) = &self.lease else {
            return self
                .fill(&key, &encoded, fence, version, ttl_fn, origin, &note)
                .await;
        };
        // The lease's closures share the fill's parts and its outcome through these cells
        // (never locked across an await).
        let parts = parking_lot::Mutex::new(Some((ttl_fn, origin)));
        let outcome: parking_lot::Mutex<Option<Result<V, E>>> = parking_lot::Mutex::new(None);
        let flight = FlightKey {
            lease: hex(&encoded),
            id: self.next_flight.fetch_add(1, Relaxed),
        };
        let recheck = || async {
            let hit = self.read_l2::<E>(&encoded).await?;
            let Some((ttl_fn, _)) = parts.lock().take() else {
                return Some(());
            };
            bump(&self.counters.fleet_fills_found);
            *outcome.lock() = Some(Self::take_hit(&note, hit, ttl_fn, TierSource::Fleet));
            Some(())
        };
        let fill = || async {
            let taken = parts.lock().take();
            if let Some((ttl_fn, origin)) = taken {
                // The version as of now, not as of the lookup: the lease may have had this
                // process wait for another's fill, across an invalidation of the key, and a
                // version read before it would have this write refused (and every other
                // waiter's: the key then stayed uncached everywhere). One more L2 call per
                // fill under a lease; anything invalidated after it still fences this write.
                let version = match self.l2_call("version", self.l2.version(&encoded)).await {
                    Some(now) => Some(now),
                    None => version,
                };
                let result = self
                    .fill(&key, &encoded, fence, version, ttl_fn, origin, &note)
                    .await;
                *outcome.lock() = Some(result);
            }
            Ok(())
        };
        if refresh {
            // Await: the lease (cancel-safe, as `run` below).
            if let Refresh::StoodDown = lease.refresh(flight.clone(), fill).await {
                // Another process holds the lease: it is refreshing the key. This refresh runs
                // in the background (its caller got the stale copy, and so does every reader
                // while it runs): it waits for that process's value like a miss below, bounded
                // by `max_wait` and by the copy's stale window (the cache abandons a refresh
                // there). It used to re-store the stale copy and end, which restarted the
                // copy's stale window at every stale read: stale for as long as the other
                // process held the lease, with no bound.
                bump(&self.counters.stand_downs);
            }
        }
        // Registered before the lease is asked: an announcement of the holder's write that
        // arrives while this leader waits re-checks L2 at once (polling is the fallback).
        let waiting = self.waiters.register(&encoded);
        let wake = || waiting.signal.armed();
        // Await: the lease (cancel-safe: a lease held is released in the background; the
        // registration is dropped with this future).
        if outcome.lock().is_none() {
            let _ = lease.run_woken(flight, recheck, fill, wake).await;
        }
        drop(waiting);
        let done = outcome.lock().take();
        match done {
            Some(result) => result,
            // The lease neither found nor filled (only if the group broke its contract): fill
            // here, without the lease.
            None => {
                let taken = parts.lock().take();
                match taken {
                    Some((ttl_fn, origin)) => {
                        self.fill(&key, &encoded, fence, version, ttl_fn, origin, &note)
                            .await
                    }
                    None => unreachable!(
                        "the fill parts are taken only by a step that sets the outcome"
                    ),
                }
            }
        }
    }

    /// Runs the origin fill, then writes its value (or, with a negative codec for `E`, its
    /// error) to L2 fenced by `version`. A refused write (the key was invalidated since
    /// `version` was read) removes the key from L1, which fences the cache's own write of this
    /// flight's outcome, unless this process wrote the key since `fence` (taken as the leader
    /// began): that write already fenced this flight, and the entry it left (a flight started
    /// after an invalidation reached this process, a local insert) is no older than this
    /// process's view of the key; a later invalidation reaches it through the backplane, as
    /// it reaches any L1 entry. Removing it cost one more L2 read or fill.
    #[allow(clippy::too_many_arguments)]
    async fn fill<E, T, Fut>(
        &self,
        key: &K,
        encoded: &[u8],
        fence: Fence,
        version: Option<Version>,
        ttl_fn: T,
        origin: Fut,
        note: &SharedNote,
    ) -> Result<V, E>
    where
        E: Send + Sync + 'static,
        T: FnOnce(&V) -> Duration,
        Fut: Future<Output = Result<V, E>>,
    {
        bump(&self.counters.fills);
        let result = origin.await;
        let (bytes, ttl) = match &result {
            Ok(value) => {
                let ttl = ttl_fn(value);
                *note.lock() = Note {
                    ttl: Ttl::For(ttl),
                    source: TierSource::Filled,
                };
                (self.values.encode(value), ttl)
            }
            Err(error) => match self.negative::<E>() {
                Some((negative, ttl)) => (negative.codec.encode(error), ttl),
                None => return result,
            },
        };
        let Some(version) = version else {
            bump(&self.counters.skipped_writes);
            return result;
        };
        if ttl < MIN_L2_TTL {
            bump(&self.counters.skipped_writes);
            return result;
        }
        let payload = match bytes {
            Ok(payload) => payload,
            Err(error) => {
                bump(&self.counters.codec_errors);
                tracing::warn!(%error, "fill outcome does not encode; kept out of L2");
                return result;
            }
        };
        let tag = if result.is_ok() { TAG_VALUE } else { TAG_ERROR };
        let mut bytes = Vec::with_capacity(payload.len() + 1);
        bytes.push(tag);
        bytes.extend_from_slice(&payload);
        // An error never replaces a value another process stored at this version.
        let (write, call) = match result.is_ok() {
            true => (
                self.l2.set_if_version(encoded, version, &bytes, ttl),
                "set_if_version",
            ),
            false => (
                self.l2.set_if_version_absent(encoded, version, &bytes, ttl),
                "set_if_version_absent",
            ),
        };
        match self.l2_call(call, write).await {
            Some(true) => bump(&self.counters.l2_writes),
            Some(false) => {
                bump(&self.counters.fenced_writes);
                // Invalidated in the fleet since this fill began, or (an error) another
                // process stored a value: keep it out of L1 too, so the next read goes to L2.
                self.cache.remove_unless_written_since(fence, key);
            }
            None => {}
        }
        result
    }
}

/// An L2 entry whose first byte is no known tag (or that is empty).
#[derive(Debug, thiserror::Error)]
#[error("L2 entry tag {0:?} is neither a value (0) nor an error (1)")]
struct BadTag(Option<u8>);

impl<K, V> L1Sink for Tier<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn invalidate_encoded(&self, key: &[u8]) {
        match self.keys.decode(key) {
            Ok(key) => {
                bump(&self.counters.backplane_received);
                self.cache.invalidate(&key);
            }
            Err(error) => {
                // Not knowing which entry it names, drop them all (safe, never stale). Seen
                // on every invalidation when caches of other key types share this L2's
                // keyspace: each needs a key prefix of its own (`RedisSecondLevel`'s docs).
                bump(&self.counters.codec_errors);
                bump(&self.counters.backplane_resyncs);
                tracing::warn!(%error, "backplane key does not decode; invalidating all of L1");
                self.cache.invalidate_all();
            }
        }
    }

    fn invalidate_all(&self) {
        bump(&self.counters.backplane_resyncs);
        self.cache.invalidate_all();
    }

    fn filled_encoded(&self, key: &[u8]) {
        if self.waiters.announce(key) {
            bump(&self.counters.fill_wakes);
        }
    }
}

/// Lower-case hex: lease keys are strings, encoded keys any bytes.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}
