//! Proof that the suite has teeth: a backend with one realistic bug each (see `broken/mod.rs`)
//! fails the suite, and the failure names the case that catches the bug; the same backend without
//! the bug passes. Hang-type bugs cost nothing: the clock is paused, so a step timeout fires as
//! soon as the runtime is idle.

mod broken;

use broken::{Bug, BuggyStorage};
use conformance::Outcome;
use conformance::storage::Suite;
use conformance::{FaultPlan, Faulty};

/// Run the whole suite against `bug` and check that `case` is among the failures, that the
/// failure carries the case's name, and that `assert_passed` panics with a message naming it.
async fn suite_catches(bug: Bug, case: &str) {
    let report = Suite::new(move || async move { BuggyStorage::new(bug, 1 << 20) })
        .settings(with_damage())
        .run()
        .await;
    names_the_failure(bug, case, &report);
}

/// As [`suite_catches`], with every operation of the backend first pending for one poll (it
/// wakes itself), as a backend that awaits I/O or a lock before deciding is: a check that polls
/// once sees `Pending` from it whatever it then decides.
async fn stalled_suite_catches(bug: Bug, case: &str) {
    let report = Suite::new(move || async move {
        Faulty::new(BuggyStorage::new(bug, 1 << 20), FaultPlan::new().pending(1))
    })
    .run()
    .await;
    names_the_failure(bug, case, &report);
}

fn names_the_failure(bug: Bug, case: &str, report: &conformance::Report) {
    println!("{bug:?}:\n{report}");
    match report.outcome(case) {
        Some(Outcome::Failed(failure)) => assert_eq!(failure.case, case),
        other => panic!("{bug:?}: expected `{case}` to fail, got {other:?}\n{report}"),
    }
    let panic = std::panic::catch_unwind(|| report.assert_passed())
        .expect_err("assert_passed must panic when a case failed");
    let message = panic
        .downcast_ref::<String>()
        .expect("the panic message is a String");
    assert!(
        message.contains(&format!("FAILED  {case}")),
        "the panic message must name `{case}`:\n{message}"
    );
}

/// The damage hook: flip a byte in every stored body.
fn with_damage() -> conformance::storage::Settings {
    conformance::storage::Settings::default().damage(|storage: &BuggyStorage| {
        storage.damage();
        async {}
    })
}

#[tokio::test(start_paused = true)]
async fn control_without_a_bug_passes() {
    Suite::new(|| async { BuggyStorage::new(Bug::None, 1 << 20) })
        .settings(with_damage())
        .run()
        .await
        .assert_passed();
}

#[tokio::test(start_paused = true)]
async fn abort_reported_as_clean_end() {
    suite_catches(Bug::AbortAsCleanEnd, "writer_dropped_reader_sees_abort").await;
}

#[tokio::test(start_paused = true)]
async fn lost_wake_up_for_late_readers() {
    suite_catches(Bug::SingleWakerSlot, "many_concurrent_readers").await;
}

#[tokio::test(start_paused = true)]
async fn chunks_reordered_under_concurrency() {
    suite_catches(
        Bug::SharedReadPosition,
        "readers_before_during_after_identical",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn purge_leaves_readers_hanging() {
    suite_catches(Bug::PurgeLeavesReadersHanging, "purge_during_read").await;
}

#[tokio::test(start_paused = true)]
async fn a_dropped_read_that_moved_its_position_leaves_a_hole() {
    suite_catches(Bug::PositionBeforeIo, "read_cancelled_mid_body").await;
}

#[tokio::test(start_paused = true)]
async fn range_off_by_one() {
    suite_catches(Bug::RangeEndInclusive, "range_read_complete").await;
}

#[tokio::test(start_paused = true)]
async fn finish_ignores_length_mismatch() {
    suite_catches(Bug::FinishIgnoresLength, "length_mismatch_at_finish").await;
}

#[tokio::test(start_paused = true)]
async fn writer_drop_noticed_asynchronously() {
    suite_catches(Bug::DropNoticedLater, "writer_dropped_lookup_misses").await;
}

#[tokio::test(start_paused = true)]
async fn purge_undone_by_an_older_write() {
    suite_catches(
        Bug::PurgeUndoneByOlderWrite,
        "purge_is_final_for_a_fenced_write",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn invalidation_undone_by_an_older_write() {
    suite_catches(
        Bug::InvalidateForgetsFences,
        "invalidate_is_final_for_earlier_writes",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn older_write_replaces_a_newer_one() {
    suite_catches(Bug::OlderWriteReplacesNewer, "newer_write_wins").await;
}

#[tokio::test(start_paused = true)]
async fn waiting_seek_never_woken() {
    suite_catches(Bug::SeekNeverRegistersWaker, "seek_waiting_is_woken").await;
}

#[tokio::test(start_paused = true)]
async fn abort_as_clean_end_for_range_readers_only() {
    suite_catches(Bug::AbortAsCleanEndForRanges, "range_reader_sees_abort").await;
}

#[tokio::test(start_paused = true)]
async fn range_end_one_past_the_length_accepted() {
    suite_catches(Bug::RangeEndOnePastSatisfiable, "range_end_one_past_length").await;
}

#[tokio::test(start_paused = true)]
async fn source_reader_turns_an_abort_into_a_clean_end() {
    suite_catches(Bug::SourceReaderAbortAsCleanEnd, "source_reader_sees_abort").await;
}

/// A backend that claims `persistent` but loses everything on a reopen (an in-memory backend
/// with the flag set): the persistent cases catch it.
struct ClaimsPersistence(stream_cache::MemStorage);

#[async_trait::async_trait]
impl stream_cache::Storage for ClaimsPersistence {
    fn capabilities(&self) -> stream_cache::Capabilities {
        self.0.capabilities().with_persistent(true)
    }
    fn usage(&self) -> Option<stream_cache::StorageUsage> {
        self.0.usage()
    }
    async fn lookup(
        &self,
        key: &stream_cache::CacheKey,
    ) -> Result<Option<stream_cache::Hit>, stream_cache::StorageError> {
        self.0.lookup(key).await
    }
    fn fence(&self, key: &stream_cache::CacheKey) -> stream_cache::WriteFence {
        self.0.fence(key)
    }
    async fn begin_write_fenced(
        &self,
        key: &stream_cache::CacheKey,
        meta: stream_cache::ObjectMeta,
        fence: stream_cache::WriteFence,
    ) -> Result<Box<dyn stream_cache::BodyWriter>, stream_cache::StorageError> {
        self.0.begin_write_fenced(key, meta, fence).await
    }
    async fn purge(
        &self,
        key: &stream_cache::CacheKey,
    ) -> Result<bool, stream_cache::StorageError> {
        self.0.purge(key).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_false_claim_of_persistence_is_caught() {
    let report = Suite::new(|| async { ClaimsPersistence(stream_cache::MemStorage::new(1 << 20)) })
        .settings(
            conformance::storage::Settings::default().reopen(|_: &ClaimsPersistence| async {
                ClaimsPersistence(stream_cache::MemStorage::new(1 << 20))
            }),
        )
        .run()
        .await;
    for case in [
        "persistent_complete_objects_survive",
        "persistent_expired_objects_are_misses",
        "persistent_capacity_holds",
    ] {
        assert!(
            matches!(report.outcome(case), Some(Outcome::Failed(_))),
            "{case} must fail: {report}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn checksum_stored_but_never_verified() {
    suite_catches(Bug::ChecksumNotVerified, "corrupted_body_is_not_served").await;
}

#[tokio::test(start_paused = true)]
async fn reader_count_stuck_at_zero() {
    suite_catches(
        Bug::ReaderCountStuckAtZero,
        "reader_count_counts_open_readers",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn checksum_verified_only_after_serving_the_body() {
    suite_catches(Bug::ChecksumVerifiedAtEnd, "corrupted_body_is_not_served").await;
}

#[tokio::test(start_paused = true)]
async fn a_range_that_ends_cleanly_while_the_write_is_open() {
    suite_catches(Bug::RangeEndsCleanBeforeFinish, "range_read_partial").await;
}

/// The same bug behind a backend that stalls one poll per operation: the "must wait" checks
/// drive a read until it stays pending unwoken (they polled it once, which proved nothing here).
#[tokio::test(start_paused = true)]
async fn a_range_that_ends_cleanly_while_the_write_is_open_behind_stalls() {
    stalled_suite_catches(Bug::RangeEndsCleanBeforeFinish, "range_read_partial").await;
}

/// A lost wake-up behind one-poll stalls: the wake probes drive each read until it waits
/// unwoken (one poll armed them on the stall's own wake, so every reader looked woken).
#[tokio::test(start_paused = true)]
async fn lost_wake_up_for_late_readers_behind_stalls() {
    stalled_suite_catches(Bug::SingleWakerSlot, "waiting_readers_woken_by_every_event").await;
}
