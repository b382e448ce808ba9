//! Turns each crate's loom run into a verdict and prints the summary table. Kept pure (no
//! processes) so the rules for "passed" are unit-tested: a zero exit status alone is not enough,
//! because a harness that ran 0 models also exits 0.

use crate::libtest::TestCounts;
use std::fmt::Write as _;

/// What happened when one crate's loom test binary was built and run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CrateRun {
    /// Package name.
    pub(crate) name: String,
    /// Whether `cargo test` exited with status 0.
    pub(crate) exit_success: bool,
    /// `cargo test`'s exit code, `None` if it was killed by a signal.
    pub(crate) exit_code: Option<i32>,
    /// Summed libtest counts, `None` if the harness never printed a summary (build failure,
    /// crash, abort).
    pub(crate) counts: Option<TestCounts>,
    /// Wall-clock seconds including the build.
    pub(crate) seconds: f64,
}

/// The verdict for one crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every model ran and passed.
    Passed,
    /// At least one model failed.
    ModelsFailed,
    /// No libtest summary: the build failed or the harness crashed.
    NoSummary,
    /// The harness ran 0 models and no filter was given: the models are missing or compiled
    /// out (e.g. the `herd_loom` cfg did not reach them).
    NoModelsRan,
    /// A filter matched no model in this crate: a warning, not a failure.
    FilterMatchedNothing,
}

impl Verdict {
    /// Decides the verdict for a run; `filtered` says whether the user narrowed the models.
    pub(crate) fn of(run: &CrateRun, filtered: bool) -> Verdict {
        match run.counts {
            Some(counts) if counts.failed > 0 => Verdict::ModelsFailed,
            // A summary without failures but a failed exit: something after the harness (or a
            // second binary) went wrong; count it as a failure of the models' run.
            Some(_) if !run.exit_success => Verdict::ModelsFailed,
            None => Verdict::NoSummary,
            Some(counts) if counts.ran() == 0 && filtered => Verdict::FilterMatchedNothing,
            Some(counts) if counts.ran() == 0 => Verdict::NoModelsRan,
            Some(_) => Verdict::Passed,
        }
    }

    /// Whether this verdict makes `cargo xtask loom` exit non-zero.
    pub(crate) fn is_failure(self) -> bool {
        !matches!(self, Verdict::Passed | Verdict::FilterMatchedNothing)
    }

    fn label(self, run: &CrateRun) -> String {
        match self {
            Verdict::Passed => "ok".to_owned(),
            Verdict::ModelsFailed => "FAILED".to_owned(),
            Verdict::NoSummary => match run.exit_code {
                Some(code) => {
                    format!("ERROR (exit {code}, no test summary: build failed or harness crashed)")
                }
                None => "ERROR (killed by a signal)".to_owned(),
            },
            Verdict::NoModelsRan => "FAILED (0 models ran)".to_owned(),
            Verdict::FilterMatchedNothing => "warning: filter matched nothing".to_owned(),
        }
    }
}

/// Renders the summary table printed after every crate has run.
pub(crate) fn summary_table(runs: &[CrateRun], filtered: bool, preemptions: &str) -> String {
    let name_width = runs
        .iter()
        .map(|run| run.name.len())
        .chain(["crate".len()])
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(out, "loom summary (LOOM_MAX_PREEMPTIONS={preemptions})");
    let _ = writeln!(
        out,
        "{:<name_width$}  {:>6}  {:>6}  {:>8}  status",
        "crate", "models", "failed", "seconds"
    );
    for run in runs {
        let verdict = Verdict::of(run, filtered);
        let (ran, failed) = match run.counts {
            Some(counts) => (counts.ran().to_string(), counts.failed.to_string()),
            None => ("-".to_owned(), "-".to_owned()),
        };
        let _ = writeln!(
            out,
            "{:<name_width$}  {ran:>6}  {failed:>6}  {:>8.1}  {}",
            run.name,
            run.seconds,
            verdict.label(run)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(exit_code: Option<i32>, counts: Option<(u64, u64)>) -> CrateRun {
        CrateRun {
            name: "coalesce".to_owned(),
            exit_success: exit_code == Some(0),
            exit_code,
            counts: counts.map(|(passed, failed)| TestCounts {
                passed,
                failed,
                ..TestCounts::default()
            }),
            seconds: 2.04,
        }
    }

    #[test]
    fn verdicts() {
        let cases = [
            (run(Some(0), Some((6, 0))), false, Verdict::Passed),
            (run(Some(101), Some((5, 1))), false, Verdict::ModelsFailed),
            (run(Some(1), Some((6, 0))), false, Verdict::ModelsFailed),
            (run(Some(101), None), false, Verdict::NoSummary),
            (run(None, None), false, Verdict::NoSummary),
            (run(Some(0), None), false, Verdict::NoSummary),
            (run(Some(0), Some((0, 0))), false, Verdict::NoModelsRan),
            (
                run(Some(0), Some((0, 0))),
                true,
                Verdict::FilterMatchedNothing,
            ),
            (run(Some(101), Some((0, 1))), true, Verdict::ModelsFailed),
        ];
        for (crate_run, filtered, expected) in cases {
            assert_eq!(
                Verdict::of(&crate_run, filtered),
                expected,
                "{crate_run:?} filtered={filtered}"
            );
        }
    }

    #[test]
    fn only_passed_and_empty_filter_are_not_failures() {
        assert!(!Verdict::Passed.is_failure());
        assert!(!Verdict::FilterMatchedNothing.is_failure());
        assert!(Verdict::ModelsFailed.is_failure());
        assert!(Verdict::NoSummary.is_failure());
        assert!(Verdict::NoModelsRan.is_failure());
    }

    #[test]
    fn table_lists_every_crate_with_counts_and_status() {
        let mut failing = run(Some(101), Some((5, 1)));
        failing.name = "ttl-lru".to_owned();
        let mut broken = run(Some(101), None);
        broken.name = "stream-cache".to_owned();
        let table = summary_table(&[run(Some(0), Some((6, 0))), failing, broken], false, "2");
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "loom summary (LOOM_MAX_PREEMPTIONS=2)");
        assert_eq!(lines[1], "crate         models  failed   seconds  status");
        assert_eq!(lines[2], "coalesce           6       0       2.0  ok");
        assert_eq!(lines[3], "ttl-lru            6       1       2.0  FAILED");
        assert_eq!(
            lines[4],
            "stream-cache       -       -       2.0  ERROR (exit 101, no test summary: build failed or harness crashed)"
        );
    }
}
