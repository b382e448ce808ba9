//! Reads libtest's `test result: ok. N passed; M failed; ...` lines, so the loom runner can report
//! how many models actually ran instead of trusting the exit status alone (0 models also exits 0).

/// Counts from one or more libtest summary lines, summed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TestCounts {
    /// Tests that ran and passed.
    pub(crate) passed: u64,
    /// Tests that ran and failed.
    pub(crate) failed: u64,
    /// Tests marked `#[ignore]`, not run.
    pub(crate) ignored: u64,
    /// Tests excluded by a name filter, not run.
    pub(crate) filtered_out: u64,
}

impl TestCounts {
    /// Tests that actually ran.
    pub(crate) fn ran(&self) -> u64 {
        self.passed + self.failed
    }

    fn add(&mut self, other: TestCounts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
        self.filtered_out += other.filtered_out;
    }
}

/// Accumulates the summary lines of a test run fed to it line by line.
#[derive(Debug, Default)]
pub(crate) struct SummaryCollector {
    counts: Option<TestCounts>,
    failed_tests: Vec<String>,
}

impl SummaryCollector {
    /// Feeds one line of the harness's stdout; lines that are neither a summary nor a failed
    /// test's result are ignored.
    pub(crate) fn feed(&mut self, line: &str) {
        if let Some(counts) = parse_summary_line(line) {
            self.counts
                .get_or_insert_with(TestCounts::default)
                .add(counts);
        } else if let Some(name) = parse_failed_test(line) {
            self.failed_tests.push(name);
        }
    }

    /// The summed counts, or `None` if no summary line was seen (the harness never finished).
    pub(crate) fn counts(&self) -> Option<TestCounts> {
        self.counts
    }

    /// Names of the tests reported as failed, in the order they finished.
    pub(crate) fn failed_tests(&self) -> &[String] {
        &self.failed_tests
    }
}

/// Parses `test NAME ... FAILED`, libtest's per-test line for a failure, into `NAME`.
pub(crate) fn parse_failed_test(line: &str) -> Option<String> {
    let line = strip_ansi(line);
    let name = line
        .trim_end()
        .strip_prefix("test ")?
        .strip_suffix(" ... FAILED")?;
    (!name.is_empty() && !name.contains(' ')).then(|| name.to_owned())
}

/// Parses one libtest summary line, e.g.
/// `test result: FAILED. 5 passed; 1 failed; 0 ignored; 0 measured; 2 filtered out; finished in 3.1s`.
/// ANSI colour codes (from `--color=always`) are ignored.
pub(crate) fn parse_summary_line(line: &str) -> Option<TestCounts> {
    let line = strip_ansi(line);
    let rest = line.trim_end().strip_prefix("test result: ")?;
    let (verdict, counts) = rest.split_once(". ")?;
    if verdict != "ok" && verdict != "FAILED" {
        return None;
    }
    let mut parsed = TestCounts::default();
    let mut saw_passed = false;
    for field in counts.split(';') {
        let Some((number, label)) = field.trim().split_once(' ') else {
            continue;
        };
        let Ok(number) = number.parse::<u64>() else {
            continue;
        };
        match label {
            "passed" => {
                parsed.passed = number;
                saw_passed = true;
            }
            "failed" => parsed.failed = number,
            "ignored" => parsed.ignored = number,
            "filtered out" => parsed.filtered_out = number,
            _ => {}
        }
    }
    saw_passed.then_some(parsed)
}

/// Removes `ESC [ ... <letter>` escape sequences.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_passing_summary() {
        let counts = parse_summary_line(
            "test result: ok. 6 passed; 0 failed; 1 ignored; 0 measured; 2 filtered out; finished in 12.34s",
        )
        .unwrap();
        assert_eq!(
            counts,
            TestCounts {
                passed: 6,
                failed: 0,
                ignored: 1,
                filtered_out: 2
            }
        );
        assert_eq!(counts.ran(), 6);
    }

    #[test]
    fn parses_a_failing_summary() {
        let counts = parse_summary_line(
            "test result: FAILED. 4 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.50s\n",
        )
        .unwrap();
        assert_eq!((counts.passed, counts.failed, counts.ran()), (4, 2, 6));
    }

    #[test]
    fn parses_an_empty_run() {
        let counts = parse_summary_line(
            "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
        )
        .unwrap();
        assert_eq!(counts.ran(), 0);
    }

    #[test]
    fn parses_coloured_output() {
        let line = "test result: \u{1b}[32mok\u{1b}[0m. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s";
        assert_eq!(parse_summary_line(line).unwrap().passed, 3);
    }

    #[test]
    fn ignores_other_lines() {
        for line in [
            "",
            "running 6 tests",
            "test leader_finish_wakes_all ... ok",
            "failures:",
            "  test result: ok. 1 passed; 0 failed;",
            "test result: maybe. 1 passed; 0 failed;",
            "test result: ok. lots passed",
        ] {
            assert_eq!(parse_summary_line(line), None, "{line:?}");
        }
    }

    #[test]
    fn collector_sums_several_binaries_and_reports_none_when_silent() {
        let mut collector = SummaryCollector::default();
        collector.feed("running 2 tests");
        collector.feed("test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s");
        collector.feed("test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 3 filtered out; finished in 1s");
        let counts = collector.counts().unwrap();
        assert_eq!(
            (counts.passed, counts.failed, counts.filtered_out),
            (3, 1, 3)
        );

        assert_eq!(SummaryCollector::default().counts(), None);
    }

    #[test]
    fn collector_names_failed_tests() {
        let mut collector = SummaryCollector::default();
        for line in [
            "running 3 tests",
            "test leader_finish_wakes_all ... ok",
            "test stale_guard_cannot_remove_newer ... FAILED",
            "test join_races_finish ... \u{1b}[31mFAILED\u{1b}[0m",
            "---- stale_guard_cannot_remove_newer stdout ----",
        ] {
            collector.feed(line);
        }
        assert_eq!(
            collector.failed_tests(),
            ["stale_guard_cannot_remove_newer", "join_races_finish"]
        );
        assert_eq!(
            parse_failed_test("test result: FAILED. 0 passed; 1 failed;"),
            None
        );
    }
}
