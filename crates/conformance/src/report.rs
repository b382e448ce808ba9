//! What a case returns and what a run reports: typed failures (case, expected, seen), skips with
//! their reason, and a [`Report`] whose [`Report::assert_passed`] panics once, listing every
//! failed case.
//!
//! Why a report rather than `assert!`s inside the cases: a suite that stops at the first failure
//! (Arrow `object_store`'s integration tests) hides every later bug until the first is fixed, and a
//! backend author wants the whole list at once. Skips are a separate outcome so a backend that
//! lacks a capability can never be counted as having passed the cases that need it.

use std::fmt;

/// A case found the backend breaking the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{case}: expected {expected}; seen {seen}")]
pub struct Failure {
    /// The case that failed (its function name).
    pub case: &'static str,
    /// What the contract requires at the failing step.
    pub expected: String,
    /// What the backend did instead.
    pub seen: String,
}

/// A case that could not run against this backend (a capability it does not declare).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{case} skipped: {reason}")]
pub struct Skip {
    /// The skipped case.
    pub case: &'static str,
    /// Why it was skipped, e.g. "needs the partial_reads capability".
    pub reason: String,
}

/// Why a case did not pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaseError {
    /// The backend broke the contract.
    #[error(transparent)]
    Failed(Failure),
    /// The case needs something the backend does not declare.
    #[error(transparent)]
    Skipped(Skip),
}

impl CaseError {
    /// The failure, if this is one.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            CaseError::Failed(failure) => Some(failure),
            CaseError::Skipped(_) => None,
        }
    }
}

impl From<Failure> for CaseError {
    fn from(failure: Failure) -> Self {
        CaseError::Failed(failure)
    }
}

/// What every case returns: `Ok(())` when the backend kept the contract.
pub type CaseResult = Result<(), CaseError>;

/// How one case ended in a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The backend kept the contract.
    Passed,
    /// The backend broke it (or the case hung or panicked).
    Failed(Failure),
    /// The case needs a capability the backend does not declare.
    Skipped(Skip),
}

impl Outcome {
    /// Map a case's result to its outcome.
    pub fn from_result(result: CaseResult) -> Self {
        match result {
            Ok(()) => Outcome::Passed,
            Err(CaseError::Failed(failure)) => Outcome::Failed(failure),
            Err(CaseError::Skipped(skip)) => Outcome::Skipped(skip),
        }
    }

    /// True for `Passed`.
    pub fn is_passed(&self) -> bool {
        matches!(self, Outcome::Passed)
    }

    /// True for `Failed`.
    pub fn is_failed(&self) -> bool {
        matches!(self, Outcome::Failed(_))
    }

    /// True for `Skipped`.
    pub fn is_skipped(&self) -> bool {
        matches!(self, Outcome::Skipped(_))
    }
}

/// One case's line in a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseReport {
    /// The case's name (its function name).
    pub name: &'static str,
    /// How it ended.
    pub outcome: Outcome,
}

/// The result of a whole run: every case, in the order they ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Which suite produced this report ("storage", "read_through").
    pub suite: &'static str,
    /// Every case that ran (or was skipped).
    pub cases: Vec<CaseReport>,
}

impl Report {
    /// The outcome of the case called `name`, if it ran.
    pub fn outcome(&self, name: &str) -> Option<&Outcome> {
        self.cases
            .iter()
            .find(|case| case.name == name)
            .map(|case| &case.outcome)
    }

    /// Names of the cases that passed.
    pub fn passed(&self) -> Vec<&'static str> {
        self.names_where(Outcome::is_passed)
    }

    /// Names of the cases that failed.
    pub fn failed(&self) -> Vec<&'static str> {
        self.names_where(Outcome::is_failed)
    }

    /// Names of the cases that were skipped.
    pub fn skipped(&self) -> Vec<&'static str> {
        self.names_where(Outcome::is_skipped)
    }

    /// Every failure, in run order.
    pub fn failures(&self) -> Vec<&Failure> {
        self.cases
            .iter()
            .filter_map(|case| match &case.outcome {
                Outcome::Failed(failure) => Some(failure),
                _ => None,
            })
            .collect()
    }

    /// True when no case failed (skips allowed).
    pub fn all_passed(&self) -> bool {
        self.cases.iter().all(|case| !case.outcome.is_failed())
    }

    /// Panic, once, listing every failed case with what was expected and what was seen. Skipped
    /// cases do not fail the assertion (they are listed in `Display`, never counted as passed),
    /// but a run in which no case passed does: "nothing ran" is not "conforms".
    #[track_caller]
    pub fn assert_passed(&self) {
        if !self.all_passed() {
            panic!("{self}");
        }
        if self.passed().is_empty() {
            panic!(
                "conformance suite `{}`: no case passed ({} skipped): nothing was checked\n{self}",
                self.suite,
                self.skipped().len()
            );
        }
    }

    fn names_where(&self, keep: impl Fn(&Outcome) -> bool) -> Vec<&'static str> {
        self.cases
            .iter()
            .filter(|case| keep(&case.outcome))
            .map(|case| case.name)
            .collect()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (passed, failed, skipped) = (
            self.passed().len(),
            self.failed().len(),
            self.skipped().len(),
        );
        writeln!(
            f,
            "conformance suite `{}`: {passed} passed, {failed} failed, {skipped} skipped",
            self.suite
        )?;
        for case in &self.cases {
            match &case.outcome {
                Outcome::Failed(failure) => {
                    writeln!(f, "FAILED  {}", case.name)?;
                    writeln!(f, "    expected: {}", failure.expected)?;
                    writeln!(f, "    seen:     {}", failure.seen)?;
                }
                Outcome::Skipped(skip) => writeln!(f, "skipped {}: {}", case.name, skip.reason)?,
                Outcome::Passed => {}
            }
        }
        Ok(())
    }
}
