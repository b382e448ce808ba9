//! Conformance suites a backend author runs against their own implementation: hold a custom
//! `stream_cache::Storage` (or a read-through cache) to the same contract as the shipped ones.
//!
//! The contract that matters most, "a reader never sees a clean end for a write that failed", is
//! exactly the one a backend author gets wrong, so every abort path (writer dropped, explicit
//! abort, length mismatch, size limit, purge, injected I/O faults, cancellation at every await)
//! has a case here.
//!
//! Core types:
//! - [`storage::Suite`]: runs every storage case, each on a fresh storage from your factory, and
//!   returns a [`Report`] (passed / failed / skipped per case, with expected vs seen).
//!   [`storage_tests!`] generates one `#[test]` per case instead.
//! - [`Faulty`]: wraps any backend and injects faults (fail the Nth write or lookup, stay pending
//!   K polls, abort a stream part-way).
//! - [`read_through::Suite`] over the [`read_through::ReadThrough`] trait: coalescing, leader
//!   cancellation, error sharing, no hang; [`read_through::TtlLruAdapter`] runs it on
//!   `ttl_lru::Cache`.
//!
//! ```
//! use stream_cache::MemStorage;
//!
//! # tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(async {
//! let report = conformance::storage::Suite::new(|| async { MemStorage::new(4 << 20) })
//!     .only(["round_trip", "writer_dropped_reader_sees_abort", "range_read_partial"])
//!     .run()
//!     .await;
//! assert_eq!(report.passed().len(), 3);
//! report.assert_passed(); // panics once, listing every failed case
//! # });
//! ```
//!
//! See `docs/conformance.md` for the case list, capability gating, and a backend written from
//! scratch outside this crate.

pub mod faulty;
pub mod lease;
pub mod read_through;
pub mod report;
pub mod runner;
pub mod second_level;
pub mod storage;
pub mod support;
pub mod sweep;

pub use faulty::{FaultPlan, Faulty, InjectedFault};
pub use report::{CaseError, CaseReport, CaseResult, Failure, Outcome, Report, Skip};
pub use support::{Guarded, TempDir};

/// Support for the macros; not a public API.
#[doc(hidden)]
pub mod __private {
    use std::future::Future;

    use crate::report::Outcome;
    use crate::storage::{CASES, Settings, Suite};

    /// Run storage case `name` on a fresh multi-thread runtime (2 workers, all drivers).
    /// Panics with the report if it failed, and if it was skipped: a skip that the
    /// `storage_tests!` user did not declare (with `skip: [...]`) must not pass as a test.
    pub fn run_storage_case<F, Fut, S>(name: &str, factory: F, settings: Settings)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = S>,
        S: stream_cache::Storage,
    {
        let report = run(name, factory, settings);
        if let Some(Outcome::Skipped(skip)) = report.outcome(name) {
            panic!(
                "conformance: {name} was SKIPPED ({}), so it did not run. If the backend lacks \
                 this on purpose, list the case in `storage_tests!(..., skip: [{name}])`: it then \
                 shows as ignored",
                skip.reason
            );
        }
        report.assert_passed();
    }

    /// Run storage case `name`, declared skipped by the `storage_tests!` user (the generated
    /// test is `#[ignore]`d; this runs with `--ignored`): panics unless it is indeed skipped,
    /// so the declaration cannot hide a case that runs and fails or passes unseen.
    pub fn run_declared_skip<F, Fut, S>(name: &str, factory: F, settings: Settings)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = S>,
        S: stream_cache::Storage,
    {
        let report = run(name, factory, settings);
        match report.outcome(name) {
            Some(Outcome::Skipped(_)) => {}
            other => panic!(
                "conformance: {name} is declared skipped in `storage_tests!` but it ran \
                 ({other:?}); remove it from `skip: [...]`\n{report}"
            ),
        }
    }

    fn run<F, Fut, S>(name: &str, factory: F, settings: Settings) -> crate::Report
    where
        F: Fn() -> Fut,
        Fut: Future<Output = S>,
        S: stream_cache::Storage,
    {
        assert!(
            CASES.iter().any(|case| case.name == name),
            "no storage case named {name}"
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("build a tokio runtime");
        runtime.block_on(Suite::new(factory).settings(settings).only([name]).run())
    }
}

/// Generate one `#[test]` per storage case in a module called `$name`:
///
/// ```ignore
/// conformance::storage_tests!(my_storage, || async { MyStorage::for_tests().await });
/// // with settings:
/// conformance::storage_tests!(my_small_storage, || async { MyStorage::small().await },
///     conformance::storage::Settings::default().large_body(16 * 1024));
/// ```
///
/// The factory expression is evaluated in each generated test (inside the module, with
/// `use super::*`). Each test runs its case on its own multi-thread tokio runtime.
///
/// A case the backend skips (it lacks a capability) *fails* its test: "nothing ran" must never
/// read as "conforms". Declare the cases your backend skips on purpose with `skip: [...]`; they
/// are generated `#[ignore]`d, so libtest shows them as ignored, and `--ignored` checks that
/// they are indeed skipped:
///
/// ```ignore
/// conformance::storage_tests!(no_ranges, || async { MyStorage::new() },
///     conformance::storage::Settings::default(),
///     skip: [range_read_partial, range_read_complete, bad_ranges]);
/// ```
#[macro_export]
macro_rules! storage_tests {
    ($name:ident, $factory:expr $(,)?) => {
        $crate::storage_tests!($name, $factory, $crate::storage::Settings::default());
    };
    ($name:ident, $factory:expr, $settings:expr $(,)?) => {
        $crate::storage_tests!($name, $factory, $settings, skip: []);
    };
    ($name:ident, $factory:expr, $settings:expr, skip: [$($skip:ident),* $(,)?] $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $crate::__storage_case_tests!(
                ($) [$factory, $settings] [$($skip)*]
                round_trip
                empty_body
                large_body_many_chunks
                meta_round_trip
                missing_key
                partial_read_while_writing
                writer_dropped_lookup_misses
                writer_dropped_reader_sees_abort
                explicit_abort_with_cause
                length_mismatch_at_finish
                length_overrun_at_write
                size_limit_declared
                size_limit_streamed
                readers_before_during_after_identical
                many_concurrent_readers
                waiting_readers_woken_by_every_event
                reader_cancelled_mid_read
                read_cancelled_mid_body
                concurrent_writers_one_key
                purge_during_read
                purge_complete_object
                range_read_partial
                range_read_complete
                bad_ranges
                lookup_after_abort
                replacing_an_object
                cancel_sweep_write
                cancel_sweep_read
                cancel_sweep_purge
                fault_failed_write
                fault_failed_finish
                fault_stream_aborted_partway
                purge_is_final_for_a_fenced_write
                newer_write_wins
                invalidate_is_final_for_earlier_writes
                seek_waiting_is_woken
                range_reader_sees_abort
                range_end_one_past_length
                source_reader_sees_abort
                reader_count_counts_open_readers
                expired_object_is_a_miss
                persistent_complete_objects_survive
                persistent_purge_is_final
                persistent_capacity_holds
                persistent_expired_objects_are_misses
                corrupted_body_is_not_served
            );
        }
    };
}

/// The per-case half of [`storage_tests!`]; not a public API. `$d` is a `$` token, so that the
/// local `__storage_case_test` macro can match each case against the declared skips.
#[doc(hidden)]
#[macro_export]
macro_rules! __storage_case_tests {
    (($d:tt) [$factory:expr, $settings:expr] [$($skip:ident)*] $($case:ident)*) => {
        /// The case names this module generated, for checking against `storage::CASES`.
        #[allow(dead_code)]
        pub const GENERATED: &[&str] = &[$(stringify!($case)),*];
        /// The cases declared skipped (generated `#[ignore]`d).
        #[allow(dead_code)]
        pub const DECLARED_SKIPS: &[&str] = &[$(stringify!($skip)),*];
        macro_rules! __storage_case_test {
            $(
                ($skip) => {
                    #[test]
                    #[ignore = "declared skipped (storage_tests! skip: [...]); --ignored checks it is"]
                    fn $skip() {
                        $crate::__private::run_declared_skip(stringify!($skip), $factory, $settings);
                    }
                };
            )*
            ($d other:ident) => {
                #[test]
                fn $d other() {
                    $crate::__private::run_storage_case(stringify!($d other), $factory, $settings);
                }
            };
        }
        $( __storage_case_test!($case); )*
    };
}

/// The user guide's conformance recipe (`docs/guide/conformance.md`), compiled and run as a doc
/// test so that it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/conformance.md")]
pub struct ConformanceRecipe;
