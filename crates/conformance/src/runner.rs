//! The machinery every suite shares: a case table ([`CaseDef`]), the [`Suite`] that holds a
//! factory, settings and the case selection, and the run of one case on a fresh subject under
//! the case timeout with panics caught.
//!
//! Why one runner: the storage, read-through and lease suites differ only in what a case works
//! with (their `Ctx`) and their settings; how a case is selected, isolated, timed out and
//! reported must be the same everywhere, so a fix to it lands in every suite at once. Each suite
//! names its instance (`storage::Suite<F>` is `Suite<F, storage::Settings>`) and adds its own
//! `new`, `run` and `run_case` with the bounds its subject needs.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::report::{CaseError, CaseReport, CaseResult, Failure, Outcome, Report, Skip};
use crate::sweep::SweepError;

/// One case of a suite whose cases work with a `C` (the suite's `Ctx`).
pub struct CaseDef<C> {
    /// The case's name (its function's name in the suite's module).
    pub name: &'static str,
    /// Runs it.
    pub run: fn(C) -> BoxFuture<'static, CaseResult>,
}

impl<C> Clone for CaseDef<C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C> Copy for CaseDef<C> {}

impl<C> std::fmt::Debug for CaseDef<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// `CASES`, a const table of [`CaseDef`]s named after the case functions, in run order.
macro_rules! case_table {
    ($(#[$doc:meta])* $ctx:ty; $($case:ident),* $(,)?) => {
        $(#[$doc])*
        pub const CASES: &[$crate::runner::CaseDef<$ctx>] = &[$($crate::runner::CaseDef {
            name: stringify!($case),
            run: |ctx| Box::pin($case(ctx)),
        }),*];
    };
}
pub(crate) use case_table;

/// A suite over a factory `F` of fresh subjects, with settings `T` (the suite's `Settings`).
pub struct Suite<F, T> {
    factory: F,
    settings: T,
    only: Option<Vec<String>>,
    excluded: Vec<String>,
}

impl<F, T: std::fmt::Debug> std::fmt::Debug for Suite<F, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Suite")
            .field("settings", &self.settings)
            .field("only", &self.only)
            .field("excluded", &self.excluded)
            .finish_non_exhaustive()
    }
}

impl<F, T> Suite<F, T> {
    /// Replace the settings.
    pub fn settings(mut self, settings: T) -> Self {
        self.settings = settings;
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

    /// A suite with default settings that selects every case.
    pub(crate) fn with_factory(factory: F) -> Self
    where
        T: Default,
    {
        Suite {
            factory,
            settings: T::default(),
            only: None,
            excluded: Vec::new(),
        }
    }

    /// The settings, for the suite's own shorthands.
    pub(crate) fn settings_mut(&mut self) -> &mut T {
        &mut self.settings
    }

    /// The settings its cases run with.
    pub(crate) fn current_settings(&self) -> &T {
        &self.settings
    }

    /// Whether `name` is in `only` (when set) and not excluded.
    fn selects(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|selected| selected == name))
            && !self.excluded.iter().any(|excluded| excluded == name)
    }

    /// Run every selected case of `cases` with `run_case`, one after another, and report them
    /// all under `suite`.
    ///
    /// Cancel safety: dropping it drops the running case; nothing is reported.
    pub(crate) async fn run_cases<C>(
        &self,
        suite: &'static str,
        cases: &[CaseDef<C>],
        run_case: impl AsyncFn(&CaseDef<C>) -> Outcome,
    ) -> Report {
        let mut ran = Vec::new();
        // A misspelt name in `only` or `exclude` would otherwise select nothing and let an
        // empty report pass: report it as a failure of its own.
        let unknown: Vec<&str> = (self.only.iter().flatten())
            .chain(&self.excluded)
            .filter(|name| !cases.iter().any(|case| case.name == name.as_str()))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            ran.push(CaseReport {
                name: "case_selection",
                outcome: Outcome::Failed(Failure {
                    case: "case_selection",
                    expected: format!("`only`/`exclude` to name cases of the {suite} suite"),
                    seen: format!("unknown case names: {unknown:?}"),
                }),
            });
        }
        for case in cases.iter().filter(|case| self.selects(case.name)) {
            ran.push(CaseReport {
                name: case.name,
                outcome: run_case(case).await,
            });
        }
        Report { suite, cases: ran }
    }

    /// Run `case` on a fresh subject from the factory, wrapped into its context by `ctx`.
    ///
    /// Cancel safety: dropping it drops the factory's future or the case (and its subject).
    pub(crate) async fn run_one<Fut, S, C>(
        &self,
        case: &CaseDef<C>,
        limits: CaseLimits,
        ctx: impl FnOnce(S) -> C,
    ) -> Outcome
    where
        F: Fn() -> Fut,
        Fut: Future<Output = S>,
    {
        let failed = |expected: String, seen: String| {
            Outcome::Failed(Failure {
                case: case.name,
                expected,
                seen,
            })
        };
        let limit = limits.case_timeout;
        let built = AssertUnwindSafe((self.factory)()).catch_unwind();
        let built = if limits.factory_timeout {
            tokio::time::timeout(limit, built).await
        } else {
            Ok(built.await)
        };
        let subject = match built {
            Ok(Ok(subject)) => subject,
            Ok(Err(panic)) => {
                return failed(
                    format!("the factory to build {}", limits.subject),
                    panic_message(&*panic),
                );
            }
            Err(_) => {
                return failed(
                    format!("the factory to build {} within {limit:?}", limits.subject),
                    "still pending".into(),
                );
            }
        };
        let ran = AssertUnwindSafe((case.run)(ctx(subject))).catch_unwind();
        match tokio::time::timeout(limit, ran).await {
            Ok(Ok(result)) => Outcome::from_result(result),
            Ok(Err(panic)) => failed(
                "the case to run without panicking".into(),
                panic_message(&*panic),
            ),
            Err(_) => failed(
                format!("the case to finish within the case timeout of {limit:?}"),
                limits.hung.into(),
            ),
        }
    }
}

/// How a suite bounds and words the run of one case.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CaseLimits {
    /// The case timeout.
    pub(crate) case_timeout: Duration,
    /// Whether building the subject also counts against the case timeout.
    pub(crate) factory_timeout: bool,
    /// What the factory builds, with its article ("a storage").
    pub(crate) subject: &'static str,
    /// What a failure says was seen when the case hung.
    pub(crate) hung: &'static str,
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

/// A failure of `case`.
pub(crate) fn failure(
    case: &'static str,
    expected: impl Into<String>,
    seen: impl Into<String>,
) -> CaseError {
    CaseError::Failed(Failure {
        case,
        expected: expected.into(),
        seen: seen.into(),
    })
}

/// Fail `case` unless `condition`.
pub(crate) fn ensure(
    case: &'static str,
    condition: bool,
    expected: impl Into<String>,
    seen: impl Into<String>,
) -> CaseResult {
    if condition {
        Ok(())
    } else {
        Err(failure(case, expected, seen))
    }
}

/// A skip of `case`.
pub(crate) fn skip(case: &'static str, reason: impl Into<String>) -> CaseError {
    CaseError::Skipped(Skip {
        case,
        reason: reason.into(),
    })
}

/// Await `future` within `limit`; past it, fail `case` expecting "`{what}`: to `{verb}` within
/// `{limit}`" and seeing `pending`.
///
/// Cancel safety: dropping it drops `future`.
pub(crate) async fn step<T>(
    case: &'static str,
    limit: Duration,
    what: &str,
    verb: &str,
    pending: &str,
    future: impl Future<Output = T>,
) -> Result<T, CaseError> {
    tokio::time::timeout(limit, future)
        .await
        .map_err(|_| failure(case, format!("{what}: to {verb} within {limit:?}"), pending))
}

/// A cancellation sweep's error as a failure of `case`: a failed check says where the future was
/// dropped (`dropped`, e.g. "the write future"); a sweep that could not finish fails expecting
/// `finish`.
pub(crate) fn sweep_failure(
    case: &'static str,
    dropped: &str,
    finish: &str,
    error: SweepError<CaseError>,
) -> CaseError {
    match error {
        SweepError::Check {
            polls,
            error: CaseError::Failed(failure),
        } => CaseError::Failed(Failure {
            expected: format!(
                "after dropping {dropped} at poll {polls}: {}",
                failure.expected
            ),
            ..failure
        }),
        SweepError::Check { error, .. } => error,
        other => failure(case, finish, other.to_string()),
    }
}
