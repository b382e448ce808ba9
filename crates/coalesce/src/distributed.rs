//! [`DistributedGroup`]: a [`Group`] whose leaders also take a cross-process [`FillLease`], so a
//! fleet of processes fills a key about once instead of once per process.
//!
//! Built on the public API only ([`Group::join`], [`Leader::finish`]): the in-process flight
//! decides which caller of this process leads, the lease decides which process fills.
//!
//! The rules (cachekit's distributed fill lock, in its `flight.rs`): suppression is an optimisation,
//! never an availability dependency. A lease service that errs or answers late means "fill now"
//! (traced). A lease held by another process means "re-check the shared cache every
//! `poll_interval`" for as long as it stays held: a holder that died loses it within one `ttl`
//! (then this process takes it), and a live holder renews it while its fill runs, so a fill
//! longer than `ttl` is not duplicated. A lease still held after `max_wait` (default six `ttl`s:
//! a holder whose fill hangs while it keeps renewing) is filled past anyway.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::future::{Future, pending, poll_fn};
use std::hash::Hash;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::Poll;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

use crate::lease::{Acquire, FillLease, LeaseError, LeaseToken, MAX_LEASE_TTL, MIN_LEASE_TTL};
use crate::{FlightError, Group, Joined, Leader};

/// How a lease key is made from a group key.
type LeaseKeyFn<K> = dyn Fn(&K) -> String + Send + Sync;

/// A [`Group`] in distributed mode: the in-process leader of a key also tries a [`FillLease`].
///
/// - **Granted**: re-check the shared cache once (a process that held the lease just before may
///   have stored the value), otherwise fill; the caller's `fill` stores the value in the shared
///   cache. While the re-check and the fill run, the lease is extended every third of `ttl`
///   ([`FillLease::renew`]), so a fill that takes longer than `ttl` keeps it; an extension that
///   finds the lease gone stops extending and is counted ([`LeaseStats::lost`]). The lease is
///   then released on a background task, so the caller does not wait for it, while this
///   process's next leader for the key waits for that release first and never finds its own
///   stale lease.
/// - **Held elsewhere**: call the caller's `recheck` ("is it in the shared cache yet?") every
///   `poll_interval`, trying the lease again after each miss: a holder that died loses its lease
///   within one `ttl` and this process takes it; a live holder renews it, and this process waits
///   until `max_wait` (default six `ttl`s) has passed since its first attempt, then fills
///   anyway. A lease taken after such a wait whose re-check still misses means the holder
///   ended without a value (its fill failed or stored nothing), or died: this process then
///   releases it at once and fills without it ([`LeaseStats::empty_handovers`]), so the other
///   processes that waited do not fill one after another behind it, each waiting for the
///   last (after a holder's death they fill side by side, as without a lease).
/// - **Lease error or timeout** (`lease_timeout`): fill at once, traced with `tracing` (fail
///   open).
///
/// Local followers wait for the local leader exactly as in a [`Group`]. Needs a tokio runtime
/// with time enabled.
///
/// ```
/// use std::sync::Arc;
/// use coalesce::{DistributedGroup, Group, MemoryLease};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // One lease service shared by every process (here: two groups in one process).
/// let lease = Arc::new(MemoryLease::new());
/// let shared_cache = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
/// let a: DistributedGroup<String, u64> = DistributedGroup::new(Group::new(), lease.clone());
///
/// let cache = shared_cache.clone();
/// let value = a
///     .run(
///         "user:42".to_string(),
///         || {
///             let cache = cache.clone();
///             async move { cache.lock().unwrap().get("user:42").copied() }
///         },
///         || async {
///             let v = 42; // the backend's answer, stored where other processes look
///             cache.lock().unwrap().insert("user:42", v);
///             Ok(v)
///         },
///     )
///     .await;
/// assert_eq!(value.unwrap(), 42);
/// assert_eq!(a.stats().granted, 1);
/// # }
/// ```
pub struct DistributedGroup<K, V, E = std::convert::Infallible> {
    group: Group<K, V, E>,
    shared: Arc<Shared>,
    lease_key: Arc<LeaseKeyFn<K>>,
}

/// Settings of a [`DistributedGroup`], checked by [`DistributedBuilder::build`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Settings {
    ttl: Duration,
    poll_interval: Duration,
    lease_timeout: Duration,
    /// `None`: six `ttl`s.
    max_wait: Option<Duration>,
}

impl Settings {
    /// How long a process waits for a lease held elsewhere before it fills anyway.
    fn max_wait(&self) -> Duration {
        self.max_wait.unwrap_or(self.ttl.saturating_mul(6))
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(5),
            poll_interval: Duration::from_millis(100),
            lease_timeout: Duration::from_millis(200),
            max_wait: None,
        }
    }
}

/// A setting that [`DistributedBuilder::build`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// The lease time-to-live is under [`MIN_LEASE_TTL`].
    #[error("lease ttl {0:?} is under the 1 ms minimum")]
    TtlTooShort(Duration),
    /// The lease time-to-live is over [`MAX_LEASE_TTL`] (24 h):
    /// no lease service could grant it, so every fill would run without one.
    #[error("lease ttl {0:?} is over the 24 h maximum")]
    TtlTooLong(Duration),
    /// A zero poll interval would re-check the shared cache in a busy loop.
    #[error("the poll interval must be greater than zero")]
    ZeroPollInterval,
    /// A zero lease timeout would fail open on every call.
    #[error("the lease timeout must be greater than zero")]
    ZeroLeaseTimeout,
    /// The lease timeout is not under the lease ttl: a grant (or an extension) answered that
    /// late is already expired when it arrives, so another process may hold the key's lease
    /// while this one fills believing it does.
    #[error("the lease timeout {lease_timeout:?} must be under the lease ttl {ttl:?}")]
    LeaseTimeoutNotUnderTtl {
        /// The lease timeout.
        lease_timeout: Duration,
        /// The lease ttl.
        ttl: Duration,
    },
}

/// Builds a [`DistributedGroup`] with non-default settings.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use coalesce::{DistributedGroup, Group, MemoryLease};
///
/// let group: DistributedGroup<String, Vec<u8>> = DistributedGroup::builder(Arc::new(MemoryLease::new()))
///     .ttl(Duration::from_secs(2))
///     .poll_interval(Duration::from_millis(50))
///     .lease_timeout(Duration::from_millis(100))
///     .build(Group::new())
///     .unwrap();
/// # let _ = group;
/// ```
#[derive(Clone)]
pub struct DistributedBuilder {
    lease: Arc<dyn FillLease>,
    settings: Settings,
}

impl fmt::Debug for DistributedBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DistributedBuilder")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl DistributedBuilder {
    /// The lease's time-to-live: how long a lease outlives a holder that died (a live holder
    /// renews it every third of it while its fill runs). Default 5 s. Make it longer than a
    /// typical fill; 1 ms to 24 h ([`build`](Self::build) refuses others).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.settings.ttl = ttl;
        self
    }

    /// How long a process waits for a lease another process keeps renewing before it fills
    /// anyway (a holder whose fill hangs). Default six `ttl`s. It used to be one `ttl`, so
    /// every process waiting on a fill longer than `ttl` filled again, although the holder was
    /// renewing its lease precisely so that none would.
    pub fn max_wait(mut self, limit: Duration) -> Self {
        self.settings.max_wait = Some(limit);
        self
    }

    /// How often a process that found the lease held re-checks the shared cache. Default 100 ms.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.settings.poll_interval = interval;
        self
    }

    /// The longest this group waits for any one lease call before it fills without the lease
    /// (fail open). Default 200 ms. Must be under the ttl (a grant answered that late arrives
    /// expired): `build` refuses it otherwise.
    pub fn lease_timeout(mut self, limit: Duration) -> Self {
        self.settings.lease_timeout = limit;
        self
    }

    /// Builds the group over `group`, with lease keys made by `K`'s `Display`.
    pub fn build<K, V, E>(
        self,
        group: Group<K, V, E>,
    ) -> Result<DistributedGroup<K, V, E>, SettingsError>
    where
        K: fmt::Display,
    {
        self.build_keyed(group, |key: &K| key.to_string())
    }

    /// Builds the group over `group`, with lease keys made by `lease_key` (which must give
    /// distinct keys distinct strings; a lease service may add its own prefix).
    pub fn build_keyed<K, V, E>(
        self,
        group: Group<K, V, E>,
        lease_key: impl Fn(&K) -> String + Send + Sync + 'static,
    ) -> Result<DistributedGroup<K, V, E>, SettingsError> {
        let Settings {
            ttl,
            poll_interval,
            lease_timeout,
            max_wait: _,
        } = self.settings;
        if ttl < MIN_LEASE_TTL {
            return Err(SettingsError::TtlTooShort(ttl));
        }
        if ttl > MAX_LEASE_TTL {
            return Err(SettingsError::TtlTooLong(ttl));
        }
        if poll_interval.is_zero() {
            return Err(SettingsError::ZeroPollInterval);
        }
        if lease_timeout.is_zero() {
            return Err(SettingsError::ZeroLeaseTimeout);
        }
        if lease_timeout >= ttl {
            return Err(SettingsError::LeaseTimeoutNotUnderTtl { lease_timeout, ttl });
        }
        Ok(DistributedGroup {
            group,
            shared: Arc::new(Shared {
                lease: self.lease,
                settings: self.settings,
                pending: parking_lot::Mutex::new(HashMap::new()),
                next_release: AtomicU64::new(0),
                counters: Counters::default(),
            }),
            lease_key: Arc::new(lease_key),
        })
    }
}

/// What [`DistributedGroup::refresh`] did.
#[derive(Debug)]
pub enum Refresh<V, E> {
    /// This process refreshed the key (or joined a local flight that did); its outcome.
    Done(Result<V, FlightError<E>>),
    /// Another process holds the fill lease, so it is refreshing the key: keep serving the
    /// stale value. Nothing was filled.
    StoodDown,
}

/// Counts of what the lease decided, summed since the group was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Leaders that were granted the lease.
    pub granted: u64,
    /// Leaders that found the lease held by someone else on their first attempt.
    pub held_elsewhere: u64,
    /// Leaders whose re-check found the value, so they filled nothing.
    pub found_by_recheck: u64,
    /// Leaders that waited `max_wait` (six `ttl`s by default) for another holder and then
    /// filled without the lease.
    pub filled_after_wait: u64,
    /// Leaders that took the lease after waiting for another holder, found no value (that
    /// holder ended without one, or died), and filled without the lease, releasing it at once.
    pub empty_handovers: u64,
    /// Leaders that filled without the lease because the service erred or timed out.
    pub failed_open: u64,
    /// Re-checks of the shared cache started by a wake ([`DistributedGroup::run_woken`]) before
    /// the poll interval was over.
    pub woken: u64,
    /// Re-checks of the shared cache started because a poll interval passed (the fallback when
    /// no wake comes: none configured, or its message was lost).
    pub polled: u64,
    /// Refreshes that stood down because another process held the lease.
    pub stood_down: u64,
    /// Background releases that erred or timed out (the lease then expires on its own).
    pub release_failures: u64,
    /// Extensions of a held lease while its fill ran (every third of `ttl`).
    pub renewed: u64,
    /// Extensions that erred or timed out (retried at the next third of `ttl`).
    pub renew_failures: u64,
    /// Fills whose lease was gone when it was to be extended (expired or taken: another process
    /// may be filling the same key). Renewal stops for that fill; the fill goes on.
    pub lost: u64,
}

#[derive(Debug, Default)]
struct Counters {
    granted: AtomicU64,
    held_elsewhere: AtomicU64,
    found_by_recheck: AtomicU64,
    filled_after_wait: AtomicU64,
    empty_handovers: AtomicU64,
    failed_open: AtomicU64,
    woken: AtomicU64,
    polled: AtomicU64,
    stood_down: AtomicU64,
    release_failures: AtomicU64,
    renewed: AtomicU64,
    renew_failures: AtomicU64,
    lost: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

/// What the group shares with its background release tasks.
struct Shared {
    lease: Arc<dyn FillLease>,
    settings: Settings,
    /// Releases sent in the background and not yet answered, by lease key: the next leader of
    /// the key in this process waits for them, so it never finds its own stale lease.
    pending: parking_lot::Mutex<HashMap<String, PendingRelease>>,
    next_release: AtomicU64,
    counters: Counters,
}

struct PendingRelease {
    id: u64,
    handle: JoinHandle<()>,
}

/// A lease this process holds. Dropping it (after the fill, or because the leader was dropped)
/// sends the release on a background task; outside a tokio runtime the lease expires instead.
struct HeldLease {
    shared: Arc<Shared>,
    key: String,
    token: LeaseToken,
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        let key = std::mem::take(&mut self.key);
        let token = self.token.clone();
        self.shared.release_in_background(key, token);
    }
}

/// The local lead and the lease, in one value so that dropping it releases the lease (field
/// order: `held` drops first, registering the pending release) before the lead is handed to a
/// local follower, whose own attempt then waits for that release.
struct Lead<'g, K: Hash + Eq, V, E> {
    held: Option<HeldLease>,
    leader: Leader<'g, K, V, E>,
}

impl<K: Hash + Eq, V: Clone, E> Lead<'_, K, V, E> {
    fn finish(self, result: Result<V, E>) -> Result<V, FlightError<E>> {
        let Lead { held, leader } = self;
        drop(held);
        leader.finish(result)
    }
}

/// What a leader does after asking the lease.
enum Step<V> {
    /// The shared cache had the value: publish it, fill nothing.
    Found(V),
    /// Fill (with the lease in `Lead::held`, or without it: fail open or waited out).
    Fill,
    /// A refresh found the lease held elsewhere.
    StandDown,
}

impl<K, V, E> fmt::Debug for DistributedGroup<K, V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DistributedGroup")
            .field("group", &self.group)
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl<K, V, E> Clone for DistributedGroup<K, V, E> {
    fn clone(&self) -> Self {
        Self {
            group: self.group.clone(),
            shared: Arc::clone(&self.shared),
            lease_key: Arc::clone(&self.lease_key),
        }
    }
}

impl DistributedGroup<(), ()> {
    /// Starts a [`DistributedBuilder`] over `lease`.
    pub fn builder(lease: Arc<dyn FillLease>) -> DistributedBuilder {
        DistributedBuilder {
            lease,
            settings: Settings::default(),
        }
    }
}

impl<K: fmt::Display, V, E> DistributedGroup<K, V, E> {
    /// `group` in distributed mode over `lease`, with default settings (ttl 5 s, poll every
    /// 100 ms, lease calls limited to 200 ms) and lease keys made by `K`'s `Display`.
    pub fn new(group: Group<K, V, E>, lease: Arc<dyn FillLease>) -> Self {
        match DistributedGroup::builder(lease).build(group) {
            Ok(built) => built,
            Err(error) => unreachable!("the default settings are valid: {error}"),
        }
    }
}

impl<K, V, E> DistributedGroup<K, V, E> {
    /// The in-process group (its stats, `in_flight`, `forget`...).
    pub fn group(&self) -> &Group<K, V, E> {
        &self.group
    }

    /// A snapshot of the lease counters.
    pub fn stats(&self) -> LeaseStats {
        let c = &self.shared.counters;
        LeaseStats {
            granted: c.granted.load(Relaxed),
            held_elsewhere: c.held_elsewhere.load(Relaxed),
            found_by_recheck: c.found_by_recheck.load(Relaxed),
            filled_after_wait: c.filled_after_wait.load(Relaxed),
            empty_handovers: c.empty_handovers.load(Relaxed),
            failed_open: c.failed_open.load(Relaxed),
            woken: c.woken.load(Relaxed),
            polled: c.polled.load(Relaxed),
            stood_down: c.stood_down.load(Relaxed),
            renewed: c.renewed.load(Relaxed),
            renew_failures: c.renew_failures.load(Relaxed),
            lost: c.lost.load(Relaxed),
            release_failures: c.release_failures.load(Relaxed),
        }
    }

    /// Number of lease releases sent in the background and not yet answered.
    pub fn pending_releases(&self) -> usize {
        self.shared
            .pending
            .lock()
            .values()
            .filter(|p| !p.handle.is_finished())
            .count()
    }
}

impl<K, V, E> DistributedGroup<K, V, E>
where
    K: Hash + Eq + Clone,
    V: Clone,
{
    /// Returns the value for `key`, filling it at most once per process (through the local
    /// [`Group`]) and about once per fleet (through the lease).
    ///
    /// `fill` must store the value where the other processes' `recheck` finds it (the shared
    /// cache) before it returns. `recheck` reads that cache: `Some(value)` ends the wait with
    /// that value and no fill. Only the local leader calls either.
    ///
    /// # Cancellation
    /// Dropped at any await, nothing is left that can make a caller hang: the local lead passes
    /// to the oldest waiting local follower (as with [`Group::run`]), which runs this same
    /// sequence itself. At each await:
    /// - waiting as a local follower: this caller leaves the queue;
    /// - waiting for this process's previous release of the key: nothing is held yet;
    /// - asking the lease service: a lease granted to the dropped call is never seen here and
    ///   expires after its `ttl` (local followers that take over meanwhile wait at most that
    ///   long, re-checking the shared cache);
    /// - re-checking the shared cache, waiting between polls, or filling (with its lease
    ///   extensions, which stop with it): a lease held is released on a background task (registered first, so the follower taking over waits
    ///   for it rather than finding this process's stale lease), then the lead is handed on.
    pub async fn run<C, CFut, F, FFut>(
        &self,
        key: K,
        recheck: C,
        fill: F,
    ) -> Result<V, FlightError<E>>
    where
        C: FnMut() -> CFut,
        CFut: Future<Output = Option<V>>,
        F: FnOnce() -> FFut,
        FFut: Future<Output = Result<V, E>>,
    {
        self.run_woken(key, recheck, fill, pending::<()>).await
    }

    /// [`run`](DistributedGroup::run), with an early wake: while the lease is held elsewhere,
    /// this process re-checks the shared cache when the current `wake()` future completes, not
    /// only every `poll_interval`. `wake` is called before each lease attempt (so a signal sent
    /// after that attempt's answer and before the wait is not lost: make the future start
    /// listening when it is created, e.g. `tokio::sync::Notify::notified`, or a future whose
    /// state is armed at creation); it typically completes when another process announces that
    /// the value landed in the shared cache (a backplane message). Polling stays the fallback: a
    /// wake that never comes (a lost message) costs at most one `poll_interval`, and a spurious
    /// one costs one re-check. Counted in [`LeaseStats::woken`] and [`LeaseStats::polled`].
    ///
    /// # Cancellation
    /// As [`run`](DistributedGroup::run); a wake future is dropped with the wait it belongs to.
    pub async fn run_woken<C, CFut, F, FFut, W, WFut>(
        &self,
        key: K,
        mut recheck: C,
        fill: F,
        mut wake: W,
    ) -> Result<V, FlightError<E>>
    where
        C: FnMut() -> CFut,
        CFut: Future<Output = Option<V>>,
        F: FnOnce() -> FFut,
        FFut: Future<Output = Result<V, E>>,
        W: FnMut() -> WFut,
        WFut: Future<Output = ()>,
    {
        let mut lead = match self.group.join(key).await {
            Joined::Leader(leader) => Lead { held: None, leader },
            Joined::Done(result) => return result,
        };
        let lease_key = (self.lease_key)(lead.leader.key());
        match self
            .shared
            .decide(&mut lead, &lease_key, Some((&mut recheck, &mut wake)))
            .await
        {
            Step::Found(value) => lead.finish(Ok(value)),
            Step::Fill => {
                let result = self.shared.fill_renewing(lead.held.as_ref(), fill()).await;
                lead.finish(result)
            }
            Step::StandDown => unreachable!("only a refresh stands down"),
        }
    }

    /// A stale-while-revalidate refresh of `key`: fills (and, in `fill`, stores) a fresh value
    /// unless another process holds the fill lease, in which case it stands down and the caller
    /// keeps serving its stale value. A lease error refreshes anyway (fail open). If a local
    /// flight for `key` is already running, this waits for it and returns its outcome.
    ///
    /// # Cancellation
    /// As [`run`](DistributedGroup::run): dropped at any await, a lease held is released in the
    /// background and the local lead passes to a waiting local follower. Standing down also
    /// hands the local lead to a waiting follower (which then asks the lease itself).
    pub async fn refresh<F, FFut>(&self, key: K, fill: F) -> Refresh<V, E>
    where
        F: FnOnce() -> FFut,
        FFut: Future<Output = Result<V, E>>,
    {
        let mut lead = match self.group.join(key).await {
            Joined::Leader(leader) => Lead { held: None, leader },
            Joined::Done(result) => return Refresh::Done(result),
        };
        let lease_key = (self.lease_key)(lead.leader.key());
        // A refresh neither re-checks nor waits: no recheck, no wake.
        type NoRecheck<V> = fn() -> std::future::Ready<Option<V>>;
        type NoWake = fn() -> std::future::Pending<()>;
        let no_recheck: Option<(&mut NoRecheck<V>, &mut NoWake)> = None;
        match self.shared.decide(&mut lead, &lease_key, no_recheck).await {
            Step::Fill => {
                let result = self.shared.fill_renewing(lead.held.as_ref(), fill()).await;
                Refresh::Done(lead.finish(result))
            }
            Step::StandDown => {
                // The lead goes to a waiting local follower, if any, as a drop would hand it;
                // but standing down is a decision, not a caller gone away, so the group does
                // not count it as abandoned (its `Stats::abandoned` stays a cancellation count).
                let Lead { held, leader } = lead;
                drop(held);
                leader.stand_down();
                Refresh::StoodDown
            }
            Step::Found(_) => unreachable!("a refresh does not re-check"),
        }
    }
}

impl Shared {
    /// Asks the lease what the leader `lead` should do. With `recheck` (and its wake), waits
    /// for a lease held elsewhere (re-checking at each wake or poll); without it (a refresh),
    /// stands down at once.
    async fn decide<K, V, E, C, CFut, W, WFut>(
        self: &Arc<Self>,
        lead: &mut Lead<'_, K, V, E>,
        lease_key: &str,
        mut recheck: Option<(&mut C, &mut W)>,
    ) -> Step<V>
    where
        K: Hash + Eq,
        C: FnMut() -> CFut,
        CFut: Future<Output = Option<V>>,
        W: FnMut() -> WFut,
        WFut: Future<Output = ()>,
    {
        self.await_pending_release(lease_key).await;
        let deadline = saturating_deadline(Instant::now(), self.settings.max_wait());
        let mut first = true;
        loop {
            // Armed before the lease attempt: a wake sent after the holder's answer and before
            // the wait below still ends that wait.
            let mut woken = pin!(recheck.as_mut().map(|(_, wake)| wake()));
            match self.try_acquire(lease_key).await {
                Ok(Acquire::Acquired(token)) => {
                    bump(&self.counters.granted);
                    lead.held = Some(HeldLease {
                        shared: Arc::clone(self),
                        key: lease_key.to_owned(),
                        token,
                    });
                    let Some((recheck, _)) = recheck.as_mut() else {
                        return Step::Fill;
                    };
                    // Double-check: the previous holder may have stored just before we asked.
                    // Renewed meanwhile, from the grant: a re-check slower than two thirds of
                    // the ttl let the lease expire before the fill's renewal began, and another
                    // process filled the same key.
                    if let Some(value) = self.fill_renewing(lead.held.as_ref(), recheck()).await {
                        bump(&self.counters.found_by_recheck);
                        return Step::Found(value);
                    }
                    if !first {
                        // We waited for a holder that then ended without a value (or died).
                        // The other processes that waited are where we are: holding the lease
                        // would queue them behind our fill, and each behind the next (they
                        // answered after one fill time each, up to `max_wait`). Released now,
                        // in the background; we fill without it.
                        bump(&self.counters.empty_handovers);
                        lead.held = None;
                    }
                    return Step::Fill;
                }
                Ok(Acquire::HeldElsewhere) => {
                    if first {
                        bump(&self.counters.held_elsewhere);
                    }
                    if recheck.is_none() {
                        bump(&self.counters.stood_down);
                        tracing::debug!(
                            lease_key,
                            "fill lease held elsewhere; refresh stands down"
                        );
                        return Step::StandDown;
                    }
                }
                Err(error) => {
                    bump(&self.counters.failed_open);
                    tracing::warn!(lease_key, %error, "fill lease unavailable; filling without it (fail open)");
                    return Step::Fill;
                }
            }
            first = false;
            let Some((recheck, _)) = recheck.as_mut() else {
                unreachable!("returned above");
            };
            let now = Instant::now();
            if now < deadline {
                let mut sleep = pin!(tokio::time::sleep_until(
                    deadline.min(saturating_deadline(now, self.settings.poll_interval)),
                ));
                // Whichever comes first: the poll interval or the wake.
                let by_wake = poll_fn(|cx| {
                    if let Some(wake) = woken.as_mut().as_pin_mut()
                        && wake.poll(cx).is_ready()
                    {
                        return Poll::Ready(true);
                    }
                    sleep.as_mut().poll(cx).map(|()| false)
                })
                .await;
                bump(if by_wake {
                    &self.counters.woken
                } else {
                    &self.counters.polled
                });
                if let Some(value) = recheck().await {
                    bump(&self.counters.found_by_recheck);
                    return Step::Found(value);
                }
            }
            if Instant::now() >= deadline {
                bump(&self.counters.filled_after_wait);
                tracing::debug!(
                    lease_key,
                    "fill lease still held after max_wait; filling anyway"
                );
                return Step::Fill;
            }
        }
    }

    /// Runs `fill`, extending `held` (if any) every third of `ttl` until the fill is done, so a
    /// fill that takes longer than one `ttl` keeps its lease and no other process starts the
    /// same fill meanwhile. Dropped, it stops renewing with the fill (the lease is then released
    /// by `HeldLease`'s `Drop`, or expires).
    async fn fill_renewing<T>(&self, held: Option<&HeldLease>, fill: impl Future<Output = T>) -> T {
        let Some(held) = held else {
            return fill.await;
        };
        let mut fill = pin!(fill);
        let mut renewal = pin!(self.keep_renewed(&held.key, &held.token));
        poll_fn(|cx| {
            if let Poll::Ready(out) = fill.as_mut().poll(cx) {
                return Poll::Ready(out);
            }
            // Never ready (it ends in `pending`): it only registers its next timer or call.
            let _ = renewal.as_mut().poll(cx);
            Poll::Pending
        })
        .await
    }

    /// Extends `key`'s lease every third of `ttl`, for ever (the caller drops it when the fill
    /// is done). Stops extending, but stays pending, once the lease is gone or the service
    /// cannot extend leases; an error or a timeout is retried at the next third.
    async fn keep_renewed(&self, key: &str, token: &LeaseToken) {
        let every = (self.settings.ttl / 3).max(MIN_LEASE_TTL);
        let limit = self.settings.lease_timeout;
        loop {
            tokio::time::sleep_until(saturating_deadline(Instant::now(), every)).await;
            match timeout(limit, self.lease.renew(key, token, self.settings.ttl)).await {
                Ok(Ok(true)) => bump(&self.counters.renewed),
                Ok(Ok(false)) => {
                    bump(&self.counters.lost);
                    tracing::warn!(
                        lease_key = key,
                        "fill lease gone before the fill finished (expired or taken); another process may fill too"
                    );
                    break;
                }
                Ok(Err(LeaseError::RenewUnsupported)) => {
                    tracing::debug!(
                        lease_key = key,
                        "the lease service cannot extend leases; a fill longer than the ttl loses its lease"
                    );
                    break;
                }
                Ok(Err(error)) => {
                    bump(&self.counters.renew_failures);
                    tracing::warn!(lease_key = key, %error, "fill lease renewal failed; retrying");
                }
                Err(_elapsed) => {
                    bump(&self.counters.renew_failures);
                    tracing::warn!(
                        lease_key = key,
                        ?limit,
                        "fill lease renewal timed out; retrying"
                    );
                }
            }
        }
        pending::<()>().await;
    }

    async fn try_acquire(&self, key: &str) -> Result<Acquire, LeaseError> {
        let limit = self.settings.lease_timeout;
        match timeout(limit, self.lease.try_acquire(key, self.settings.ttl)).await {
            Ok(answer) => answer,
            Err(_elapsed) => Err(LeaseError::TimedOut(limit)),
        }
    }

    /// Waits (at most `lease_timeout`) for this process's own release of `key`, if one is in
    /// flight. Dropped while waiting, the release is put back for the next leader.
    async fn await_pending_release(&self, key: &str) {
        let Some(pending) = self.pending.lock().remove(key) else {
            return;
        };
        let mut waiting = Reinsert {
            shared: self,
            key,
            pending: Some(pending),
        };
        if let Some(pending) = waiting.pending.as_mut() {
            // A release that panicked or was cancelled ends the wait as well.
            let _ = timeout(self.settings.lease_timeout, &mut pending.handle).await;
        }
    }

    /// Sends `release(key, token)` on a background task and records it in `pending` until it
    /// is answered. Outside a tokio runtime the lease is left to expire.
    fn release_in_background(self: &Arc<Self>, key: String, token: LeaseToken) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(
                lease_key = key,
                "no tokio runtime to release the fill lease on; it expires after its ttl"
            );
            return;
        };
        // Spawn under the lock, so the task cannot finish (and look for its entry) before the
        // entry is in the map.
        let mut pending = self.pending.lock();
        let id = self.next_release.fetch_add(1, Relaxed);
        let shared = Arc::clone(self);
        let task_key = key.clone();
        let handle = runtime.spawn(async move {
            shared.release_now(&task_key, &token).await;
            let mut pending = shared.pending.lock();
            if pending.get(&task_key).is_some_and(|p| p.id == id) {
                pending.remove(&task_key);
            }
        });
        // An older release of the key still in flight (after a takeover) goes on, detached.
        pending.insert(key, PendingRelease { id, handle });
    }

    async fn release_now(&self, key: &str, token: &LeaseToken) {
        let limit = self.settings.lease_timeout;
        let error = match timeout(limit, self.lease.release(key, token)).await {
            Ok(Ok(_released)) => return,
            Ok(Err(error)) => error,
            Err(_elapsed) => LeaseError::TimedOut(limit),
        };
        bump(&self.counters.release_failures);
        tracing::warn!(lease_key = key, %error, "fill lease release failed; it expires after its ttl");
    }
}

/// Puts a taken pending release back in the map if the wait for it was dropped before it was
/// answered (and no newer release of the key was registered meanwhile).
struct Reinsert<'a> {
    shared: &'a Shared,
    key: &'a str,
    pending: Option<PendingRelease>,
}

impl Drop for Reinsert<'_> {
    fn drop(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        if pending.handle.is_finished() {
            return;
        }
        if let Entry::Vacant(slot) = self.shared.pending.lock().entry(self.key.to_owned()) {
            slot.insert(pending);
        }
    }
}

/// `now + after`, saturating about 30 years out (as tokio does for "never") instead of panicking
/// on a `Duration::MAX` setting.
fn saturating_deadline(now: Instant, after: Duration) -> Instant {
    now.checked_add(after)
        .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 24 * 3600))
}

#[cfg(test)]
mod wake_tests {
    //! The early wake of [`DistributedGroup::run_woken`], on tokio's paused clock: a delivered
    //! wake ends the wait before the poll interval; a lost one falls back to polling.

    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::Notify;
    use tokio::time::Instant;

    use super::{DistributedGroup, LeaseStats};
    use crate::lease::{Acquire, FillLease};
    use crate::{Group, MemoryLease};

    /// Another "process" holds the lease and stores 7 in the shared cache after 50 ms,
    /// announcing it on `notify` if `deliver`; this one waits with a 10 s poll interval.
    async fn wait_for_the_holder(deliver: bool) -> (u64, LeaseStats, Duration) {
        let lease = Arc::new(MemoryLease::new());
        let held = lease.try_acquire("k", Duration::from_secs(60)).await;
        assert!(matches!(held, Ok(Acquire::Acquired(_))));
        let group: DistributedGroup<String, u64> = DistributedGroup::builder(lease)
            .ttl(Duration::from_secs(60))
            .poll_interval(Duration::from_secs(10))
            .build(Group::new())
            .unwrap();
        let shared = Arc::new(parking_lot::Mutex::new(None::<u64>));
        let notify = Arc::new(Notify::new());
        let holder = {
            let (shared, notify) = (shared.clone(), notify.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                *shared.lock() = Some(7);
                if deliver {
                    notify.notify_waiters();
                }
            })
        };
        let start = Instant::now();
        let value = group
            .run_woken(
                "k".to_string(),
                || {
                    let found = *shared.lock();
                    async move { found }
                },
                || async { Ok::<_, std::convert::Infallible>(0) },
                || notify.notified(),
            )
            .await
            .unwrap();
        holder.await.unwrap();
        (value, group.stats(), start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_delivered_wake_ends_the_wait_before_the_poll_interval() {
        let (value, stats, waited) = wait_for_the_holder(true).await;
        assert_eq!(value, 7);
        assert_eq!(
            (stats.woken, stats.polled, stats.found_by_recheck),
            (1, 0, 1)
        );
        assert_eq!(waited, Duration::from_millis(50), "no poll interval on top");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_wake_still_completes_by_polling() {
        let (value, stats, waited) = wait_for_the_holder(false).await;
        assert_eq!(value, 7);
        assert_eq!(
            (stats.woken, stats.polled, stats.found_by_recheck),
            (0, 1, 1)
        );
        assert_eq!(waited, Duration::from_secs(10), "one poll interval");
    }
}
