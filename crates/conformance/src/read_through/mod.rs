//! The read-through-cache suite: coalescing, leader cancellation, error sharing and "no caller
//! ever hangs", against any cache behind the small [`ReadThrough`] trait.
//!
//! ```no_run
//! # async fn demo() {
//! use conformance::read_through::{Suite, TtlLruAdapter};
//! Suite::new(|| async { TtlLruAdapter::new(ttl_lru::Cache::new(1_000)) })
//!     .run()
//!     .await
//!     .assert_passed();
//! # }
//! ```
//!
//! Why a trait of its own: read-through caches differ in their signatures (error types, TTL
//! functions, detached fills), but the contract a caller relies on is the same. An adapter of a
//! dozen lines maps a cache onto [`ReadThrough`] (see [`TtlLruAdapter`]).
//!
//! Cancel safety of the cases (every `pub async fn(Ctx) -> CaseResult` here): dropping a case at
//! any await drops the calls it is driving, which is itself what the cases test a cache for; a
//! spawned caller (in `leader_panic_does_not_hang`) is left to finish on its own.

mod cases;
mod ttl_lru;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;

pub use self::cases::{
    cancel_sweep, coalesces_concurrent_misses, error_shared_with_followers, follower_cancelled,
    hit_after_fill, keys_are_independent, leader_cancelled_alone_releases_key,
    leader_cancelled_hands_over, leader_panic_does_not_hang,
};
pub use self::ttl_lru::{TtlLruAdapter, TtlLruMode};
use crate::report::{CaseError, CaseResult, Outcome, Report};
use crate::runner::{self, CaseLimits, case_table};

/// A fill's error. Cloneable, so a cache can share one error with every coalesced caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fill failed: {0}")]
pub struct FillError(pub String);

/// The fill a caller hands to [`ReadThrough::get_or_fill`]: called at most once, only if that
/// caller's call runs the fill.
pub type Fill = Box<dyn FnOnce() -> BoxFuture<'static, Result<String, FillError>> + Send>;

/// Why a read-through call returned no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The fill failed (this caller's or the one it joined); the fill's error, unchanged.
    #[error("the fill failed: {0}")]
    Failed(FillError),
    /// Any other failure (a timeout, an abandoned fill...), described.
    #[error("{0}")]
    Other(String),
}

/// What a read-through cache declares about itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadThroughCapabilities {
    /// The fill runs detached from the caller that started it (on a spawned task) and survives
    /// that caller being dropped; otherwise a dropped leader's fill is dropped with it and a
    /// waiting caller runs its own.
    pub fills_survive_caller: bool,
}

impl ReadThroughCapabilities {
    /// Set `fills_survive_caller`.
    pub const fn with_fills_survive_caller(mut self, yes: bool) -> Self {
        self.fills_survive_caller = yes;
        self
    }
}

/// A read-through cache of `String` keys and values, as the suite sees it.
#[async_trait]
pub trait ReadThrough: Send + Sync + 'static {
    /// What the cache declares.
    fn capabilities(&self) -> ReadThroughCapabilities {
        ReadThroughCapabilities::default()
    }

    /// The cached value of `key`, or the value of one fill shared by every concurrent caller of
    /// `key`: `fill` is called only if this call runs the fill. A failed fill's error reaches
    /// every caller that was waiting on it.
    ///
    /// Cancel safety (the contract the suite checks): dropping the call at any await leaves no
    /// caller of the key waiting on a fill that nobody will finish.
    async fn get_or_fill(&self, key: String, fill: Fill) -> Result<String, ReadError>;
}

#[async_trait]
impl<T: ReadThrough + ?Sized> ReadThrough for Arc<T> {
    fn capabilities(&self) -> ReadThroughCapabilities {
        (**self).capabilities()
    }

    async fn get_or_fill(&self, key: String, fill: Fill) -> Result<String, ReadError> {
        (**self).get_or_fill(key, fill).await
    }
}

/// Knobs of a read-through run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// A case running longer than this fails as hung (default 30 s).
    pub case_timeout: Duration,
    /// One call that takes longer than this fails, naming the step (default 5 s).
    pub step_timeout: Duration,
    /// Concurrent callers in the coalescing cases (default 8).
    pub callers: usize,
    /// Bound on the polls of the cancellation sweep (default 200).
    pub max_sweep_polls: usize,
    /// A caller counts as waiting once its future returned `Pending` and was not woken for this
    /// long (default 20 ms). Exact under a paused clock (`start_paused`), where it costs nothing;
    /// on a real clock it must exceed the cache's own I/O before it joins a fill.
    pub settle: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            case_timeout: Duration::from_secs(30),
            step_timeout: Duration::from_secs(5),
            callers: 8,
            max_sweep_polls: 200,
            settle: Duration::from_millis(20),
        }
    }
}

impl Settings {
    /// Set the per-case timeout.
    pub fn case_timeout(mut self, timeout: Duration) -> Self {
        self.case_timeout = timeout;
        self
    }

    /// Set the per-step timeout.
    pub fn step_timeout(mut self, timeout: Duration) -> Self {
        self.step_timeout = timeout;
        self
    }

    /// Set the settle window.
    pub fn settle(mut self, quiet: Duration) -> Self {
        self.settle = quiet;
        self
    }
}

/// What a read-through case works with: a fresh cache, the settings and the case's name.
#[derive(Clone)]
pub struct Ctx {
    case: &'static str,
    cache: Arc<dyn ReadThrough>,
    settings: Settings,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("case", &self.case)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    /// A context for running `case` against `cache` directly.
    pub fn new(case: &'static str, cache: Arc<dyn ReadThrough>, settings: Settings) -> Self {
        Ctx {
            case,
            cache,
            settings,
        }
    }

    /// The cache under test.
    pub fn cache(&self) -> &Arc<dyn ReadThrough> {
        &self.cache
    }

    /// The run's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A failure of this case.
    pub fn failure(&self, expected: impl Into<String>, seen: impl Into<String>) -> CaseError {
        runner::failure(self.case, expected, seen)
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
    ///
    /// Cancel safety: dropping it drops `future`.
    pub async fn step<T>(
        &self,
        what: &str,
        future: impl Future<Output = T>,
    ) -> Result<T, CaseError> {
        let pending = "still pending: a caller left waiting on a fill nobody finishes";
        let limit = self.settings.step_timeout;
        runner::step(self.case, limit, what, "complete", pending, future).await
    }
}

/// One case of the read-through suite.
pub type CaseDef = runner::CaseDef<Ctx>;

case_table!(
    /// Every case of the read-through suite, in run order.
    Ctx;
    coalesces_concurrent_misses,
    hit_after_fill,
    error_shared_with_followers,
    leader_cancelled_hands_over,
    leader_cancelled_alone_releases_key,
    leader_panic_does_not_hang,
    follower_cancelled,
    keys_are_independent,
    cancel_sweep,
);

/// The read-through suite over a factory of fresh caches.
pub type Suite<F> = runner::Suite<F, Settings>;

impl<F, Fut, C> Suite<F>
where
    F: Fn() -> Fut,
    Fut: Future<Output = C>,
    C: ReadThrough,
{
    /// A suite that calls `factory` once per case for a fresh, empty cache.
    pub fn new(factory: F) -> Self {
        Suite::with_factory(factory)
    }

    /// Run every selected case, each on a fresh cache under the case timeout, and report
    /// them all.
    ///
    /// Cancel safety: dropping the run drops the running case; nothing is reported.
    pub async fn run(&self) -> Report {
        self.run_cases("read_through", CASES, async |case| {
            self.run_case(case).await
        })
        .await
    }

    /// Run one case on a fresh cache.
    ///
    /// Cancel safety: as [`Suite::run`].
    pub async fn run_case(&self, case: &CaseDef) -> Outcome {
        let settings = self.current_settings();
        let limits = CaseLimits {
            case_timeout: settings.case_timeout,
            factory_timeout: false,
            subject: "a cache",
            hung: "it hung",
        };
        self.run_one(case, limits, |cache| {
            Ctx::new(case.name, Arc::new(cache), settings.clone())
        })
        .await
    }
}
