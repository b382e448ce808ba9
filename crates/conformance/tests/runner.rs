//! The runner's own guarantees: a run never stops at a failure, a panic or a hang is a failure
//! with a clear message (never a hung test), skipped cases are never counted as passed, and the
//! cases that need no capability pass on a backend that declares none.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use conformance::Outcome;
use conformance::storage::{CASES, Settings, Suite};
use stream_cache::{
    AbortReason, BodySource, BodyWriter, CacheKey, Capabilities, Hit, MemStorage, ObjectMeta,
    Storage, StorageError, WriteError, WriteFence, WriteState,
};

/// `MemStorage` presented as a backend without partial or range reads and without a size
/// limit: lookups only return complete objects and writers offer no source.
struct CompleteOnly(MemStorage);

struct NoSource(Box<dyn BodyWriter>);

#[async_trait]
impl BodyWriter for NoSource {
    async fn write(&mut self, chunk: Bytes) -> Result<(), WriteError> {
        self.0.write(chunk).await
    }
    async fn finish(self: Box<Self>) -> Result<u64, WriteError> {
        self.0.finish().await
    }
    fn abort(self: Box<Self>, reason: AbortReason) {
        self.0.abort(reason)
    }
    fn state(&self) -> WriteState {
        self.0.state()
    }
    fn source(&self) -> Option<Arc<dyn BodySource>> {
        None
    }
}

#[async_trait]
impl Storage for CompleteOnly {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
    }
    async fn lookup(&self, key: &CacheKey) -> Result<Option<Hit>, StorageError> {
        let hit = self.0.lookup(key).await?;
        Ok(hit.filter(|hit| matches!(hit.body.state(), WriteState::Complete(_))))
    }
    fn fence(&self, key: &CacheKey) -> WriteFence {
        self.0.fence(key)
    }
    async fn begin_write_fenced(
        &self,
        key: &CacheKey,
        meta: ObjectMeta,
        fence: WriteFence,
    ) -> Result<Box<dyn BodyWriter>, StorageError> {
        Ok(Box::new(NoSource(
            self.0.begin_write_fenced(key, meta, fence).await?,
        )))
    }
    async fn purge(&self, key: &CacheKey) -> Result<bool, StorageError> {
        self.0.purge(key).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_capabilities_gated_cases_are_skipped_and_the_rest_pass() {
    let report = Suite::new(|| async { CompleteOnly(MemStorage::new(4 << 20)) })
        .run()
        .await;
    println!("{report}");
    report.assert_passed();
    let skipped = report.skipped();
    for gated in [
        "partial_read_while_writing",
        "writer_dropped_reader_sees_abort",
        "many_concurrent_readers",
        "range_read_complete",
        "range_read_partial",
        "size_limit_declared",
    ] {
        assert!(
            skipped.contains(&gated),
            "{gated} must be skipped: {report}"
        );
        assert!(!report.passed().contains(&gated));
    }
    for ungated in [
        "round_trip",
        "writer_dropped_lookup_misses",
        "length_mismatch_at_finish",
        "concurrent_writers_one_key",
        "replacing_an_object",
        "cancel_sweep_write",
        "fault_failed_write",
    ] {
        assert!(
            report.passed().contains(&ungated),
            "{ungated} must pass: {report}"
        );
    }
    assert_eq!(report.passed().len() + skipped.len(), CASES.len());
}

/// Every operation hangs (or panics) on cue.
struct Broken {
    panic: bool,
}

#[async_trait]
impl Storage for Broken {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
            .with_partial_reads(true)
            .with_range_reads(true)
    }
    async fn lookup(&self, _: &CacheKey) -> Result<Option<Hit>, StorageError> {
        self.misbehave().await
    }
    fn fence(&self, key: &CacheKey) -> WriteFence {
        stream_cache::FenceTable::new().fence(key)
    }
    async fn begin_write_fenced(
        &self,
        _: &CacheKey,
        _: ObjectMeta,
        _: WriteFence,
    ) -> Result<Box<dyn BodyWriter>, StorageError> {
        self.misbehave().await
    }
    async fn purge(&self, _: &CacheKey) -> Result<bool, StorageError> {
        self.misbehave().await
    }
}

impl Broken {
    async fn misbehave<T>(&self) -> T {
        if self.panic {
            panic!("the backend exploded");
        }
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_hanging_backend_fails_every_case_and_the_run_completes() {
    let report = Suite::new(|| async { Broken { panic: false } }).run().await;
    assert_eq!(
        report.cases.len(),
        CASES.len(),
        "the run went through every case"
    );
    assert!(report.passed().is_empty(), "{report}");
    let round_trip = report.outcome("round_trip").unwrap();
    match round_trip {
        Outcome::Failed(failure) => {
            assert_eq!(failure.case, "round_trip");
            assert!(
                failure.expected.contains("to complete within 5s"),
                "{failure}"
            );
            assert!(failure.seen.contains("hang"), "{failure}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn the_case_timeout_bounds_a_case_whose_steps_allow_longer() {
    let settings = Settings::default()
        .step_timeout(Duration::from_secs(3600))
        .case_timeout(Duration::from_secs(1));
    let report = Suite::new(|| async { Broken { panic: false } })
        .settings(settings)
        .only(["round_trip"])
        .run()
        .await;
    match report.outcome("round_trip").unwrap() {
        Outcome::Failed(failure) => assert!(failure.expected.contains("case timeout"), "{failure}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_panicking_backend_fails_every_case_and_the_run_completes() {
    let report = Suite::new(|| async { Broken { panic: true } }).run().await;
    assert_eq!(report.cases.len(), CASES.len());
    assert!(report.passed().is_empty(), "{report}");
    assert!(
        report
            .failures()
            .iter()
            .all(|f| f.seen.contains("the backend exploded")),
        "{report}"
    );
}

#[tokio::test]
async fn a_panicking_factory_is_a_failure() {
    let report = Suite::new(|| async {
        panic!("no storage today");
        #[allow(unreachable_code)]
        MemStorage::new(1)
    })
    .only(["round_trip"])
    .run()
    .await;
    assert_eq!(report.failed(), ["round_trip"]);
    assert!(report.failures()[0].seen.contains("no storage today"));
}

#[test]
fn assert_passed_lists_every_failure_once() {
    let report = conformance::Report {
        suite: "storage",
        cases: vec![
            conformance::CaseReport {
                name: "round_trip",
                outcome: Outcome::Failed(conformance::Failure {
                    case: "round_trip",
                    expected: "11 bytes".into(),
                    seen: "6 bytes".into(),
                }),
            },
            conformance::CaseReport {
                name: "empty_body",
                outcome: Outcome::Passed,
            },
            conformance::CaseReport {
                name: "range_read_complete",
                outcome: Outcome::Skipped(conformance::Skip {
                    case: "range_read_complete",
                    reason: "needs the range_reads capability".into(),
                }),
            },
            conformance::CaseReport {
                name: "bad_ranges",
                outcome: Outcome::Failed(conformance::Failure {
                    case: "bad_ranges",
                    expected: "InvalidRange".into(),
                    seen: "Ok(())".into(),
                }),
            },
        ],
    };
    assert!(!report.all_passed());
    let message = std::panic::catch_unwind(|| report.assert_passed())
        .unwrap_err()
        .downcast::<String>()
        .unwrap();
    assert!(message.starts_with("conformance suite `storage`: 1 passed, 2 failed, 1 skipped"));
    assert!(message.contains("FAILED  round_trip\n    expected: 11 bytes\n    seen:     6 bytes"));
    assert!(message.contains("FAILED  bad_ranges"));
    assert!(message.contains("skipped range_read_complete: needs the range_reads capability"));

    let skipped_only = conformance::Report {
        suite: "storage",
        cases: report.cases[1..3].to_vec(),
    };
    skipped_only.assert_passed();
    assert_eq!(skipped_only.passed(), ["empty_body"]);
}

#[tokio::test]
async fn a_misspelt_case_name_fails_the_run_instead_of_selecting_nothing() {
    let report = Suite::new(|| async { MemStorage::new(1 << 20) })
        .only(["round_trip", "round_tirp"])
        .exclude(["no_such_case"])
        .run()
        .await;
    assert_eq!(report.failed(), ["case_selection"], "{report}");
    let failure = &report.failures()[0];
    assert!(
        failure.seen.contains("round_tirp") && failure.seen.contains("no_such_case"),
        "{failure}"
    );
    assert_eq!(
        report.passed(),
        ["round_trip"],
        "the names that exist still run"
    );
}

/// Trap 1 (issue 15): a run in which every case was skipped does not pass `assert_passed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_where_nothing_passed_fails() {
    let report = Suite::new(|| async { CompleteOnly(MemStorage::new(4 << 20)) })
        .only(["partial_read_while_writing", "range_read_partial"])
        .run()
        .await;
    assert_eq!(report.skipped().len(), 2);
    let panic = std::panic::catch_unwind(|| report.assert_passed())
        .expect_err("nothing passed: assert_passed must panic");
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("no case passed"), "{message}");
}

/// Trap 2 (issue 15): in the `storage_tests!` form a skip the user did not declare fails its
/// test (it used to pass silently).
#[test]
fn an_undeclared_skip_fails_its_generated_test() {
    let panic = std::panic::catch_unwind(|| {
        conformance::__private::run_storage_case(
            "partial_read_while_writing",
            || async { CompleteOnly(MemStorage::new(4 << 20)) },
            Settings::default(),
        )
    })
    .expect_err("an undeclared skip must fail");
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("SKIPPED"), "{message}");
    assert!(
        message.contains("skip: [partial_read_while_writing]"),
        "{message}"
    );
}

/// ... and a declared skip that actually runs fails too (with `--ignored`), so the list cannot
/// hide a case.
#[test]
fn a_declared_skip_that_runs_fails() {
    let panic = std::panic::catch_unwind(|| {
        conformance::__private::run_declared_skip(
            "round_trip",
            || async { CompleteOnly(MemStorage::new(4 << 20)) },
            Settings::default(),
        )
    })
    .expect_err("a declared skip that runs must fail");
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("declared skipped"), "{message}");
}

// The backend without partial or range reads, in the macro form: every case it skips is
// declared, so libtest lists them as ignored (and `--ignored` checks they are skipped).
conformance::storage_tests!(
    complete_only_macro,
    || async { CompleteOnly(MemStorage::new(4 << 20)) },
    Settings::default(),
    skip: [
        partial_read_while_writing,
        writer_dropped_reader_sees_abort,
        explicit_abort_with_cause,
        size_limit_declared,
        size_limit_streamed,
        readers_before_during_after_identical,
        many_concurrent_readers,
        waiting_readers_woken_by_every_event,
        reader_cancelled_mid_read,
        purge_during_read,
        range_read_partial,
        range_read_complete,
        bad_ranges,
        seek_waiting_is_woken,
        range_reader_sees_abort,
        range_end_one_past_length,
        source_reader_sees_abort,
        reader_count_counts_open_readers,
        expired_object_is_a_miss,
        persistent_complete_objects_survive,
        persistent_purge_is_final,
        persistent_capacity_holds,
        persistent_expired_objects_are_misses,
        corrupted_body_is_not_served,
    ]
);

/// The declared list is exactly what the suite skips for this backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_declared_skips_match_the_suite() {
    let report = Suite::new(|| async { CompleteOnly(MemStorage::new(4 << 20)) })
        .run()
        .await;
    assert_eq!(report.skipped(), complete_only_macro::DECLARED_SKIPS);
    assert_eq!(complete_only_macro::GENERATED.len(), CASES.len());
}
