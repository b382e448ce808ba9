//! The fill-lease suite: hold any [`coalesce::FillLease`] (the shipped `MemoryLease` and
//! `coalesce_redis::RedisLease`, or your own on etcd, Postgres, DynamoDB...) to the contract a
//! `DistributedGroup` relies on: mutual exclusion, owner-only release and renew, expiry, and
//! prompt errors (never a hang) when the service is down.
//!
//! ```
//! use std::sync::Arc;
//! use coalesce::MemoryLease;
//! use conformance::lease::{MemoryService, Suite};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
//! Suite::new(|| async { MemoryService::new(Arc::new(MemoryLease::new())) })
//!     .run()
//!     .await
//!     .assert_passed(); // panics once, listing every failed case
//! # });
//! ```
//!
//! Each case runs on a fresh service from the factory, under a case timeout, with keys of its
//! own. Expiry cases sleep on tokio's clock: a lease timed on tokio's clock (like `MemoryLease`)
//! runs them at once on a paused runtime; a real service (Redis) really waits a few short ttls.
//!
//! # Cancel safety of the cases and helpers
//! Every case and `Ctx` helper here is a sequence of lease calls, each wrapped in `step` (which
//! bounds it by the step timeout and drops the call's future when that runs out). Dropping a case
//! or helper drops the lease call in flight, with the cancel safety that lease documents: a
//! `try_acquire`/`acquire` dropped after the service granted the lease leaves that lease to
//! expire after its ttl (nobody holds its token to release it); a dropped `release` or `renew`
//! may or may not have taken effect. Nothing else is held across an await.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use coalesce::{Acquire, FillLease, LeaseError, LeaseToken, MemoryLease};
use futures::future::join_all;

use crate::report::{CaseError, CaseResult, Outcome, Report};
use crate::runner::{self, CaseLimits, case_table};

/// A lease service under test: the lease, and a way to take the service down.
#[async_trait]
pub trait LeaseService: Send + Sync + 'static {
    /// The lease under test (every call of a case uses this one handle).
    fn lease(&self) -> Arc<dyn FillLease>;

    /// Makes the service unreachable for the rest of the case (kill the server, play a
    /// partition...). Returns `false` if this service cannot be taken down; the cases that
    /// need it are then skipped.
    async fn take_down(&self) -> bool;
}

/// [`MemoryLease`] as a [`LeaseService`]: taken down with `set_available(false)`.
#[derive(Debug, Clone)]
pub struct MemoryService {
    lease: Arc<MemoryLease>,
}

impl MemoryService {
    /// Wraps `lease`.
    pub fn new(lease: Arc<MemoryLease>) -> Self {
        MemoryService { lease }
    }
}

#[async_trait]
impl LeaseService for MemoryService {
    fn lease(&self) -> Arc<dyn FillLease> {
        self.lease.clone()
    }

    async fn take_down(&self) -> bool {
        self.lease.set_available(false);
        true
    }
}

/// Knobs of a lease run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// A case running longer than this fails as hung (default 30 s).
    pub case_timeout: Duration,
    /// One lease call taking longer than this fails, naming the step (default 5 s): a service
    /// that is down must answer with an error well within it.
    pub step_timeout: Duration,
    /// The ttl of leases a case lets expire (default 200 ms; a real service really waits
    /// twice this).
    pub short_ttl: Duration,
    /// The ttl of leases that must not expire during a case (default 60 s).
    pub long_ttl: Duration,
    /// Concurrent acquirers in the mutual-exclusion race (default 16).
    pub contenders: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            case_timeout: Duration::from_secs(30),
            step_timeout: Duration::from_secs(5),
            short_ttl: Duration::from_millis(200),
            long_ttl: Duration::from_secs(60),
            contenders: 16,
        }
    }
}

/// What a lease case works with: a fresh service, the settings, the case's name and a key
/// namespace of its own (so cases never see each other's leases, even on a shared server).
#[derive(Clone)]
pub struct Ctx {
    case: &'static str,
    service: Arc<dyn LeaseService>,
    lease: Arc<dyn FillLease>,
    settings: Settings,
    namespace: String,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("case", &self.case)
            .field("namespace", &self.namespace)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Distinguishes runs against a shared, persistent service.
fn run_nonce() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{nanos:x}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Relaxed)
    )
}

impl Ctx {
    /// A context for running `case` against `service` directly.
    pub fn new(case: &'static str, service: Arc<dyn LeaseService>, settings: Settings) -> Self {
        Ctx {
            case,
            lease: service.lease(),
            service,
            settings,
            namespace: format!("conformance:{case}:{}", run_nonce()),
        }
    }

    /// The lease under test.
    pub fn lease(&self) -> &dyn FillLease {
        &*self.lease
    }

    /// The run's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A key of this case's own.
    pub fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.namespace)
    }

    /// A failure of this case.
    pub fn failure(&self, expected: impl Into<String>, seen: impl Into<String>) -> CaseError {
        runner::failure(self.case, expected, seen)
    }

    /// A skip of this case.
    pub fn skip(&self, reason: impl Into<String>) -> CaseError {
        runner::skip(self.case, reason)
    }

    /// Fail unless `condition`.
    pub fn ensure(
        &self,
        condition: bool,
        expected: impl Into<String>,
        seen: impl Into<String>,
    ) -> CaseResult {
        runner::ensure(self.case, condition, expected, seen)
    }

    /// Await `future` within the step timeout; past it, fail naming `what`.
    pub async fn step<T>(
        &self,
        what: &str,
        future: impl Future<Output = T>,
    ) -> Result<T, CaseError> {
        let pending = "still pending: a lease call that hangs stalls every fill of the key";
        let limit = self.settings.step_timeout;
        runner::step(self.case, limit, what, "answer", pending, future).await
    }

    /// `try_acquire(key, ttl)`, which must answer `Ok`.
    pub async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Acquire, CaseError> {
        let what = format!("try_acquire({key:?}, {ttl:?})");
        match self.step(&what, self.lease.try_acquire(key, ttl)).await? {
            Ok(answer) => Ok(answer),
            Err(error) => Err(self.failure(format!("{what} to answer"), format!("error: {error}"))),
        }
    }

    /// `try_acquire(key, ttl)`, which must grant the lease.
    pub async fn acquire(&self, key: &str, ttl: Duration) -> Result<LeaseToken, CaseError> {
        match self.try_acquire(key, ttl).await? {
            Acquire::Acquired(token) => Ok(token),
            Acquire::HeldElsewhere => Err(self.failure(
                format!("try_acquire({key:?}) on a free key to grant the lease"),
                "HeldElsewhere",
            )),
        }
    }

    /// `try_acquire(key, ttl)`, which must find the lease held.
    pub async fn expect_held(&self, key: &str, ttl: Duration, why: &str) -> CaseResult {
        let answer = self.try_acquire(key, ttl).await?;
        self.ensure(
            answer == Acquire::HeldElsewhere,
            format!("try_acquire({key:?}) to find the lease held ({why})"),
            format!("{answer:?}"),
        )
    }

    /// `release(key, token)`, which must answer `Ok`.
    pub async fn release(&self, key: &str, token: &LeaseToken) -> Result<bool, CaseError> {
        let what = format!("release({key:?}, {token})");
        match self.step(&what, self.lease.release(key, token)).await? {
            Ok(released) => Ok(released),
            Err(error) => Err(self.failure(format!("{what} to answer"), format!("error: {error}"))),
        }
    }

    /// `renew(key, token, ttl)`; a lease without renew skips the case.
    pub async fn renew(
        &self,
        key: &str,
        token: &LeaseToken,
        ttl: Duration,
    ) -> Result<bool, CaseError> {
        let what = format!("renew({key:?}, {token}, {ttl:?})");
        match self.step(&what, self.lease.renew(key, token, ttl)).await? {
            Ok(renewed) => Ok(renewed),
            Err(LeaseError::RenewUnsupported) => Err(self.skip("the lease does not support renew")),
            Err(error) => Err(self.failure(format!("{what} to answer"), format!("error: {error}"))),
        }
    }

    /// Sleeps (on tokio's clock) past one short ttl.
    pub async fn outlive_short_ttl(&self) {
        tokio::time::sleep(self.settings.short_ttl * 2).await;
    }
}

/// One case of the lease suite.
pub type CaseDef = runner::CaseDef<Ctx>;

case_table!(
    /// Every case of the lease suite, in run order.
    Ctx;
    held_lease_excludes_everyone,
    concurrent_acquires_grant_exactly_one,
    keys_are_independent,
    tokens_are_unique,
    owner_release_frees_the_key,
    stranger_release_is_a_noop,
    second_release_is_a_noop,
    expired_owner_cannot_release_the_successor,
    lease_expires_after_its_ttl,
    renew_extends_the_lease,
    stranger_renew_is_a_noop,
    renew_after_expiry_is_refused,
    expired_owner_cannot_renew_the_successor,
    invalid_ttl_is_a_typed_error,
    service_down_answers_errors_promptly,
);

/// While a lease is held, `try_acquire` finds it held, also for its own holder.
pub async fn held_lease_excludes_everyone(ctx: Ctx) -> CaseResult {
    let key = ctx.key("k");
    let long = ctx.settings.long_ttl;
    ctx.acquire(&key, long).await?;
    ctx.expect_held(&key, long, "just acquired").await?;
    ctx.expect_held(&key, long, "asked again").await
}

/// Many concurrent `try_acquire`s of one free key: exactly one is granted.
pub async fn concurrent_acquires_grant_exactly_one(ctx: Ctx) -> CaseResult {
    let key = ctx.key("contended");
    let long = ctx.settings.long_ttl;
    let answers = join_all((0..ctx.settings.contenders).map(|_| ctx.try_acquire(&key, long))).await;
    let mut granted = 0;
    for answer in answers {
        if matches!(answer?, Acquire::Acquired(_)) {
            granted += 1;
        }
    }
    ctx.ensure(
        granted == 1,
        format!(
            "exactly 1 of {} concurrent acquirers granted",
            ctx.settings.contenders
        ),
        format!("{granted} granted"),
    )
}

/// A lease on one key says nothing about another.
pub async fn keys_are_independent(ctx: Ctx) -> CaseResult {
    let long = ctx.settings.long_ttl;
    ctx.acquire(&ctx.key("a"), long).await?;
    ctx.acquire(&ctx.key("b"), long).await?;
    ctx.expect_held(&ctx.key("a"), long, "b's lease must not free a")
        .await
}

/// Each acquisition gets a new token, even of a key released and acquired again.
pub async fn tokens_are_unique(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key("k"), ctx.settings.long_ttl);
    let first = ctx.acquire(&key, long).await?;
    ctx.release(&key, &first).await?;
    let second = ctx.acquire(&key, long).await?;
    let other = ctx.acquire(&ctx.key("other"), long).await?;
    ctx.ensure(
        first != second && second != other && first != other,
        "distinct tokens for distinct acquisitions",
        format!("{first}, {second}, {other}"),
    )
}

/// The owner's release returns true and frees the key at once.
pub async fn owner_release_frees_the_key(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key("k"), ctx.settings.long_ttl);
    let token = ctx.acquire(&key, long).await?;
    let released = ctx.release(&key, &token).await?;
    ctx.ensure(released, "release by the owner to return true", "false")?;
    ctx.acquire(&key, long).await.map(drop)
}

/// A release with someone else's token changes nothing and returns false.
pub async fn stranger_release_is_a_noop(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key("k"), ctx.settings.long_ttl);
    let token = ctx.acquire(&key, long).await?;
    // A real token, of another key: the most plausible stranger.
    let stranger = ctx.acquire(&ctx.key("other"), long).await?;
    let released = ctx.release(&key, &stranger).await?;
    ctx.ensure(
        !released,
        "release with another token to return false",
        "true",
    )?;
    let made_up = LeaseToken::new("made-up-token");
    let released = ctx.release(&key, &made_up).await?;
    ctx.ensure(
        !released,
        "release with a made-up token to return false",
        "true",
    )?;
    ctx.expect_held(&key, long, "a stranger's release must not free it")
        .await?;
    let released = ctx.release(&key, &token).await?;
    ctx.ensure(released, "the owner's release to still work", "false")
}

/// Releasing twice: the second is a no-op.
pub async fn second_release_is_a_noop(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key("k"), ctx.settings.long_ttl);
    let token = ctx.acquire(&key, long).await?;
    ctx.release(&key, &token).await?;
    let again = ctx.release(&key, &token).await?;
    ctx.ensure(!again, "a second release to return false", "true")
}

/// An owner whose lease expired and was taken by another must not release (or renew) the new
/// owner's lease: the ABA trap of a plain `DEL`.
pub async fn expired_owner_cannot_release_the_successor(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key("k"), ctx.settings.long_ttl);
    let old = ctx.acquire(&key, ctx.settings.short_ttl).await?;
    ctx.outlive_short_ttl().await;
    let new = ctx.acquire(&key, long).await?;
    let released = ctx.release(&key, &old).await?;
    ctx.ensure(
        !released,
        "the expired owner's release to return false",
        "true",
    )?;
    ctx.expect_held(&key, long, "the expired owner's release must not free it")
        .await?;
    let released = ctx.release(&key, &new).await?;
    ctx.ensure(released, "the new owner's release to work", "false")
}

/// An owner whose lease expired and was taken by another must not renew the new owner's lease
/// either (its extension would outlive the new owner's intent, and keep the key from the next
/// one): the renew returns false and the successor's lease is as it was.
pub async fn expired_owner_cannot_renew_the_successor(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key("k"), ctx.settings.long_ttl);
    let old = ctx.acquire(&key, ctx.settings.short_ttl).await?;
    ctx.outlive_short_ttl().await;
    let new = ctx.acquire(&key, ctx.settings.short_ttl).await?;
    let renewed = ctx.renew(&key, &old, long).await?;
    ctx.ensure(
        !renewed,
        "the expired owner's renew to return false",
        "true",
    )?;
    // Not extended: the successor's short lease still runs out on time.
    ctx.outlive_short_ttl().await;
    let after = ctx.acquire(&key, long).await?;
    let released = ctx.release(&key, &new).await?;
    ctx.ensure(!released, "the successor's lease to have expired", "true")?;
    ctx.release(&key, &after).await.map(drop)
}

/// A lease that is not released is free again after its ttl, and not before.
pub async fn lease_expires_after_its_ttl(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key("k"), ctx.settings.long_ttl);
    ctx.acquire(&key, ctx.settings.short_ttl).await?;
    ctx.expect_held(&key, long, "within its ttl").await?;
    ctx.outlive_short_ttl().await;
    ctx.acquire(&key, long).await.map(drop)
}

/// The owner's renew returns true and keeps the lease past its original ttl.
pub async fn renew_extends_the_lease(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key("k"), ctx.settings.long_ttl);
    let token = ctx.acquire(&key, ctx.settings.short_ttl).await?;
    let renewed = ctx.renew(&key, &token, long).await?;
    ctx.ensure(renewed, "renew by the owner to return true", "false")?;
    ctx.outlive_short_ttl().await;
    ctx.expect_held(&key, long, "renewed past its original ttl")
        .await?;
    let released = ctx.release(&key, &token).await?;
    ctx.ensure(released, "the owner to release the renewed lease", "false")
}

/// A renew with someone else's token changes nothing and returns false.
pub async fn stranger_renew_is_a_noop(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key("k"), ctx.settings.long_ttl);
    ctx.acquire(&key, ctx.settings.short_ttl).await?;
    let stranger = ctx.acquire(&ctx.key("other"), long).await?;
    let renewed = ctx.renew(&key, &stranger, long).await?;
    ctx.ensure(!renewed, "renew with another token to return false", "true")?;
    ctx.outlive_short_ttl().await;
    ctx.acquire(&key, long)
        .await
        .map(drop)
        .map_err(|_| ctx.failure("the lease to expire on its original ttl", "still held"))
}

/// Renewing a lease that already expired is refused and does not resurrect it.
pub async fn renew_after_expiry_is_refused(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key("k"), ctx.settings.long_ttl);
    let token = ctx.acquire(&key, ctx.settings.short_ttl).await?;
    ctx.outlive_short_ttl().await;
    let renewed = ctx.renew(&key, &token, long).await?;
    ctx.ensure(
        !renewed,
        "renew of an expired lease to return false",
        "true",
    )?;
    ctx.acquire(&key, long).await.map(drop)
}

/// A ttl under 1 ms or over 24 h ([`coalesce::lease::MAX_LEASE_TTL`]) is a typed error, not a
/// lease that expires at once (or never, or a clock overflow).
pub async fn invalid_ttl_is_a_typed_error(ctx: Ctx) -> CaseResult {
    let key = ctx.key("k");
    let over = coalesce::lease::MAX_LEASE_TTL + Duration::from_millis(1);
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(999),
        over,
        Duration::MAX,
    ] {
        let answer = ctx
            .step(
                "try_acquire with a bad ttl",
                ctx.lease.try_acquire(&key, ttl),
            )
            .await?;
        ctx.ensure(
            matches!(answer, Err(LeaseError::InvalidTtl(_))),
            format!("try_acquire with ttl {ttl:?} to be LeaseError::InvalidTtl"),
            format!("{answer:?}"),
        )?;
    }
    // And nothing was taken by the refused calls.
    ctx.acquire(&key, ctx.settings.long_ttl).await.map(drop)
}

/// With the service down, every call answers an error within the step timeout: never a hang,
/// never a pretend grant.
pub async fn service_down_answers_errors_promptly(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key("k"), ctx.settings.long_ttl);
    let token = ctx.acquire(&key, long).await?;
    if !ctx.step("take_down", ctx.service.take_down()).await? {
        return Err(ctx.skip("this service cannot be taken down"));
    }
    for attempt in 0..3 {
        let answer = ctx
            .step(
                "try_acquire while down",
                ctx.lease.try_acquire(&ctx.key("fresh"), long),
            )
            .await?;
        ctx.ensure(
            answer.is_err(),
            format!("try_acquire while the service is down to be an error (attempt {attempt})"),
            format!("{answer:?}"),
        )?;
    }
    let answer = ctx
        .step("release while down", ctx.lease.release(&key, &token))
        .await?;
    ctx.ensure(
        answer.is_err(),
        "release while the service is down to be an error",
        format!("{answer:?}"),
    )?;
    let answer = ctx
        .step("renew while down", ctx.lease.renew(&key, &token, long))
        .await?;
    ctx.ensure(
        answer.is_err(),
        "renew while the service is down to be an error",
        format!("{answer:?}"),
    )
}

/// The lease suite over a factory of fresh services.
pub type Suite<F> = runner::Suite<F, Settings>;

impl<F, Fut, S> Suite<F>
where
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
    S: LeaseService,
{
    /// A suite that calls `factory` once per case for a fresh service.
    pub fn new(factory: F) -> Self {
        Suite::with_factory(factory)
    }

    /// Run every selected case, each on a fresh service under the case timeout, and report
    /// them all.
    ///
    /// Cancel safety: dropping the run drops the running case; nothing is reported.
    pub async fn run(&self) -> Report {
        self.run_cases("lease", CASES, async |case| self.run_case(case).await)
            .await
    }

    /// Run one case on a fresh service.
    ///
    /// Cancel safety: as [`Suite::run`].
    pub async fn run_case(&self, case: &CaseDef) -> Outcome {
        let settings = self.current_settings();
        let limits = CaseLimits {
            case_timeout: settings.case_timeout,
            factory_timeout: false,
            subject: "a service",
            hung: "it hung",
        };
        self.run_one(case, limits, |service| {
            Ctx::new(case.name, Arc::new(service), settings.clone())
        })
        .await
    }
}
