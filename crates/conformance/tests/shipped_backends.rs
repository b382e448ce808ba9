//! The storage suite against the two backends `stream-cache` ships, in both forms (`Suite` and
//! `storage_tests!`), and under `Faulty` with every operation stalled: all must pass.

use conformance::storage::{CASES, Settings, Suite};
use conformance::{FaultPlan, Faulty, Guarded, TempDir};
use stream_cache::{DiskStorage, MemStorage};

/// Disk storage in a fresh temp directory, removed when the storage is dropped.
async fn disk(limit: Option<u64>) -> Guarded<DiskStorage> {
    disk_with(64 << 20, limit).await
}

async fn disk_with(capacity: u64, limit: Option<u64>) -> Guarded<DiskStorage> {
    let dir = TempDir::new();
    let mut builder = DiskStorage::builder(dir.path(), capacity);
    if let Some(limit) = limit {
        builder = builder.max_object_size(limit);
    }
    let storage = builder.open().await.expect("open disk storage");
    Guarded::new(storage, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_storage_passes_the_suite() {
    let report = Suite::new(|| async { MemStorage::new(4 << 20) })
        .run()
        .await;
    println!("{report}");
    report.assert_passed();
    assert_eq!(report.cases.len(), CASES.len());
    assert!(
        report.skipped().is_empty(),
        "MemStorage declares every capability: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_storage_passes_the_suite() {
    let report = Suite::new(|| disk(Some(512 * 1024))).run().await;
    println!("{report}");
    report.assert_passed();
    assert!(report.skipped().is_empty(), "{report}");
}

/// A bounded `DiskStorage` always has an object size limit (what fits in its capacity beside
/// a file's header and tail), so the limit cases run even without `max_object_size`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_storage_without_a_limit_is_limited_by_its_capacity() {
    let report = Suite::new(|| disk_with(1 << 20, None))
        .only(["round_trip", "size_limit_declared", "size_limit_streamed"])
        .run()
        .await;
    report.assert_passed();
    assert_eq!(
        report.passed(),
        ["round_trip", "size_limit_declared", "size_limit_streamed"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_storage_passes_under_stalls() {
    let report =
        Suite::new(|| async { Faulty::new(MemStorage::new(4 << 20), FaultPlan::new().pending(2)) })
            .run()
            .await;
    report.assert_passed();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_storage_passes_under_stalls() {
    let report = Suite::new(|| async {
        Faulty::new(disk(Some(256 * 1024)).await, FaultPlan::new().pending(1))
    })
    .run()
    .await;
    report.assert_passed();
}

conformance::storage_tests!(mem_macro, || async { MemStorage::new(4 << 20) });

conformance::storage_tests!(
    disk_macro,
    || disk(Some(256 * 1024)),
    Settings::default().large_body(128 * 1024)
);

#[test]
fn the_macro_generates_every_case() {
    let listed: Vec<&str> = CASES.iter().map(|case| case.name).collect();
    assert_eq!(mem_macro::GENERATED, listed.as_slice());
}
