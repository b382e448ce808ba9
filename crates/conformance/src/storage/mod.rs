//! The storage suite: every rule of `stream_cache::Storage`, `BodyWriter` and `BodyReader` as a
//! case a backend author runs against their own backend.
//!
//! ```no_run
//! # async fn demo() {
//! use stream_cache::MemStorage;
//! conformance::storage::Suite::new(|| async { MemStorage::new(8 << 20) })
//!     .run()
//!     .await
//!     .assert_passed();
//! # }
//! ```
//!
//! How a run works: for each case the factory builds a fresh storage; the case runs under the
//! per-case timeout (a hang is a failure, never a hung test) with panics caught; every storage
//! call inside a case is bounded by the step timeout, so a hang names the step that hung. Cases
//! that need a capability the backend does not declare report *skipped*. The run never stops at
//! a failure.
//!
//! Cancel safety of the cases (every `pub async fn(Ctx) -> CaseResult` here): dropping a case at
//! any await drops what it holds: writers (which abort their writes), readers, and the `JoinSet`s
//! of its reader tasks (which aborts them). The storage itself is left to whoever owns it; the
//! suite drops it with the case.

pub mod check;

mod aborts;
mod basics;
mod faults;
mod ranges;
mod readers;
mod sweeps;
mod writers;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use stream_cache::{Capabilities, Storage};

pub use aborts::{
    explicit_abort_with_cause, length_mismatch_at_finish, length_overrun_at_write,
    lookup_after_abort, size_limit_declared, size_limit_streamed, writer_dropped_lookup_misses,
    writer_dropped_reader_sees_abort,
};
pub use basics::{empty_body, large_body_many_chunks, meta_round_trip, missing_key, round_trip};
pub use faults::{fault_failed_finish, fault_failed_write, fault_stream_aborted_partway};
pub use ranges::{bad_ranges, range_read_complete, range_read_partial};
pub use readers::{
    many_concurrent_readers, partial_read_while_writing, purge_complete_object, purge_during_read,
    reader_cancelled_mid_read, readers_before_during_after_identical,
    waiting_readers_woken_by_every_event,
};
pub use sweeps::{cancel_sweep_purge, cancel_sweep_read, cancel_sweep_write};
pub use writers::{concurrent_writers_one_key, replacing_an_object};

use crate::report::{CaseError, CaseResult, Failure, Outcome, Report, Skip};

/// Knobs of a run. The defaults suit in-memory and local-disk backends on a small CI machine.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// A case that runs longer than this fails as hung (default 30 s).
    pub case_timeout: Duration,
    /// One storage call or read that takes longer than this fails, naming the step (default 5 s).
    /// Use `#[tokio::test(start_paused = true)]` to make hang cases instant.
    pub step_timeout: Duration,
    /// Size of the body in `large_body_many_chunks` (default 256 KiB, capped at the backend's
    /// `max_object_size`).
    pub large_body: usize,
    /// Chunk size for multi-chunk bodies (default 4 KiB).
    pub chunk_size: usize,
    /// Readers in `many_concurrent_readers` (default 16).
    pub readers: usize,
    /// `size_limit_streamed` writes `max_object_size + 1` bytes; above this limit it is skipped
    /// rather than writing that much (default 8 MiB).
    pub max_streamed_limit: u64,
    /// Bound on the polls of one cancellation sweep (default 500).
    pub max_sweep_polls: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            case_timeout: Duration::from_secs(30),
            step_timeout: Duration::from_secs(5),
            large_body: 256 * 1024,
            chunk_size: 4 * 1024,
            readers: 16,
            max_streamed_limit: 8 << 20,
            max_sweep_polls: 500,
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

    /// Set the large body's size.
    pub fn large_body(mut self, bytes: usize) -> Self {
        self.large_body = bytes;
        self
    }

    /// Set the chunk size.
    pub fn chunk_size(mut self, bytes: usize) -> Self {
        self.chunk_size = bytes.max(1);
        self
    }

    /// Set the number of concurrent readers.
    pub fn readers(mut self, readers: usize) -> Self {
        self.readers = readers.max(2);
        self
    }
}

/// A capability a case needs (see [`Capabilities`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Readers attach before `finish` (`partial_reads`).
    PartialReads,
    /// `BodyReader::seek` works (`range_reads`).
    RangeReads,
    /// The backend declares a `max_object_size`.
    SizeLimit,
}

/// What a case works with: a fresh storage, its capabilities, the settings, and its own name
/// (which every failure carries).
#[derive(Clone)]
pub struct Ctx {
    case: &'static str,
    storage: Arc<dyn Storage>,
    capabilities: Capabilities,
    settings: Settings,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("case", &self.case)
            .field("capabilities", &self.capabilities)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    /// A context for running `case` against `storage` directly (the suite builds these itself).
    pub fn new(case: &'static str, storage: Arc<dyn Storage>, settings: Settings) -> Self {
        Ctx {
            case,
            capabilities: storage.capabilities(),
            storage,
            settings,
        }
    }

    /// The same case, against another storage (the fault cases wrap the given one).
    pub fn with_storage(&self, storage: Arc<dyn Storage>) -> Self {
        Ctx::new(self.case, storage, self.settings.clone())
    }

    /// The case's name.
    pub fn case(&self) -> &'static str {
        self.case
    }

    /// The storage under test.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// What it declares.
    pub fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// The run's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether the storage declares `need`.
    pub fn has(&self, need: Need) -> bool {
        match need {
            Need::PartialReads => self.capabilities.partial_reads,
            Need::RangeReads => self.capabilities.range_reads,
            Need::SizeLimit => self.capabilities.max_object_size.is_some(),
        }
    }

    /// `Err(Skipped)` unless the storage declares `need`.
    pub fn require(&self, need: Need) -> CaseResult {
        if self.has(need) {
            return Ok(());
        }
        let capability = match need {
            Need::PartialReads => "partial_reads",
            Need::RangeReads => "range_reads",
            Need::SizeLimit => "max_object_size",
        };
        Err(self.skip(format!("needs the {capability} capability")))
    }

    /// A skip of this case.
    pub fn skip(&self, reason: impl Into<String>) -> CaseError {
        CaseError::Skipped(Skip {
            case: self.case,
            reason: reason.into(),
        })
    }

    /// A failure of this case.
    pub fn failure(&self, expected: impl Into<String>, seen: impl Into<String>) -> CaseError {
        CaseError::Failed(Failure {
            case: self.case,
            expected: expected.into(),
            seen: seen.into(),
        })
    }

    /// Await `future` within the step timeout; past it, fail naming `what`.
    ///
    /// Cancel safety: dropping it drops `future`.
    pub async fn step<T>(
        &self,
        what: &str,
        future: impl Future<Output = T>,
    ) -> Result<T, CaseError> {
        let limit = self.settings.step_timeout;
        tokio::time::timeout(limit, future).await.map_err(|_| {
            self.failure(
                format!("{what}: to complete within {limit:?}"),
                "still pending: a hang or a lost wake-up",
            )
        })
    }

    /// Fail unless `condition`.
    pub fn ensure(
        &self,
        condition: bool,
        expected: impl Into<String>,
        seen: impl Into<String>,
    ) -> CaseResult {
        if condition {
            Ok(())
        } else {
            Err(self.failure(expected, seen))
        }
    }
}

/// One case of the storage suite.
#[derive(Clone, Copy)]
pub struct CaseDef {
    /// The case's name (its function's name in [`crate::storage`]).
    pub name: &'static str,
    /// Runs it.
    pub run: fn(Ctx) -> BoxFuture<'static, CaseResult>,
}

impl std::fmt::Debug for CaseDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

macro_rules! case_table {
    ($($case:ident),* $(,)?) => {
        /// Every case of the storage suite, in the order a run executes them.
        pub const CASES: &[CaseDef] = &[$(CaseDef {
            name: stringify!($case),
            run: |ctx| Box::pin($case(ctx)),
        }),*];
    };
}

case_table!(
    round_trip,
    empty_body,
    large_body_many_chunks,
    meta_round_trip,
    missing_key,
    partial_read_while_writing,
    writer_dropped_lookup_misses,
    writer_dropped_reader_sees_abort,
    explicit_abort_with_cause,
    length_mismatch_at_finish,
    length_overrun_at_write,
    size_limit_declared,
    size_limit_streamed,
    readers_before_during_after_identical,
    many_concurrent_readers,
    waiting_readers_woken_by_every_event,
    reader_cancelled_mid_read,
    concurrent_writers_one_key,
    purge_during_read,
    purge_complete_object,
    range_read_partial,
    range_read_complete,
    bad_ranges,
    lookup_after_abort,
    replacing_an_object,
    cancel_sweep_write,
    cancel_sweep_read,
    cancel_sweep_purge,
    fault_failed_write,
    fault_failed_finish,
    fault_stream_aborted_partway,
);

/// The storage suite over a factory of fresh storages.
pub struct Suite<F> {
    factory: F,
    settings: Settings,
    only: Option<Vec<String>>,
    excluded: Vec<String>,
}

impl<F> std::fmt::Debug for Suite<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Suite")
            .field("settings", &self.settings)
            .field("only", &self.only)
            .field("excluded", &self.excluded)
            .finish_non_exhaustive()
    }
}

impl<F, Fut, S> Suite<F>
where
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
    S: Storage,
{
    /// A suite that calls `factory` once per case for a fresh, empty storage.
    pub fn new(factory: F) -> Self {
        Suite {
            factory,
            settings: Settings::default(),
            only: None,
            excluded: Vec::new(),
        }
    }

    /// Replace the settings.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Shorthand for the per-case timeout.
    pub fn case_timeout(mut self, timeout: Duration) -> Self {
        self.settings.case_timeout = timeout;
        self
    }

    /// Shorthand for the per-step timeout.
    pub fn step_timeout(mut self, timeout: Duration) -> Self {
        self.settings.step_timeout = timeout;
        self
    }

    /// Run only these cases (by name).
    pub fn only<I, N>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = N>,
        N: Into<String>,
    {
        self.only = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Leave these cases out of the run (they do not appear in the report).
    pub fn exclude<I, N>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = N>,
        N: Into<String>,
    {
        self.excluded.extend(names.into_iter().map(Into::into));
        self
    }

    /// Run every selected case, each on a fresh storage, and report them all.
    ///
    /// Cancel safety: dropping the run drops the running case (and its storage); nothing is
    /// reported.
    pub async fn run(&self) -> Report {
        let mut cases = Vec::new();
        for case in CASES {
            let selected = self
                .only
                .as_ref()
                .is_none_or(|only| only.iter().any(|name| name == case.name));
            if !selected || self.excluded.iter().any(|name| name == case.name) {
                continue;
            }
            cases.push(crate::report::CaseReport {
                name: case.name,
                outcome: self.run_case(case).await,
            });
        }
        Report {
            suite: "storage",
            cases,
        }
    }

    /// Run one case on a fresh storage.
    ///
    /// Cancel safety: as [`Suite::run`].
    pub async fn run_case(&self, case: &CaseDef) -> Outcome {
        let limit = self.settings.case_timeout;
        let failed = |expected: String, seen: String| {
            Outcome::Failed(Failure {
                case: case.name,
                expected,
                seen,
            })
        };
        let built =
            tokio::time::timeout(limit, AssertUnwindSafe((self.factory)()).catch_unwind()).await;
        let storage = match built {
            Ok(Ok(storage)) => storage,
            Ok(Err(panic)) => {
                return failed(
                    "the factory to build a storage".into(),
                    panic_message(&*panic),
                );
            }
            Err(_) => {
                return failed(
                    format!("the factory to build a storage within {limit:?}"),
                    "still pending".into(),
                );
            }
        };
        let ctx = Ctx::new(case.name, Arc::new(storage), self.settings.clone());
        let ran =
            tokio::time::timeout(limit, AssertUnwindSafe((case.run)(ctx)).catch_unwind()).await;
        match ran {
            Ok(Ok(result)) => Outcome::from_result(result),
            Ok(Err(panic)) => failed(
                "the case to run without panicking".into(),
                panic_message(&*panic),
            ),
            Err(_) => failed(
                format!("the case to finish within the case timeout of {limit:?}"),
                "it hung (a storage call, a read or a wake-up never completed)".into(),
            ),
        }
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".to_string());
    format!("panicked: {text}")
}
