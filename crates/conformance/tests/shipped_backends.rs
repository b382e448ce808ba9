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

/// What `MemStorage` skips: it is not persistent, and keeps no checksums to damage.
const MEM_SKIPS: [&str; 5] = [
    "persistent_complete_objects_survive",
    "persistent_purge_is_final",
    "persistent_capacity_holds",
    "persistent_expired_objects_are_misses",
    "corrupted_body_is_not_served",
];

/// Flip one byte in the middle of the body of every object file under `root` (Unix only;
/// elsewhere nothing is damaged and the case checks an intact body).
#[cfg(not(unix))]
fn damage_files(_root: &std::path::Path) {}

/// Flip one byte in the middle of the body of every object file under `root`.
#[cfg(unix)]
fn damage_files(root: &std::path::Path) {
    use std::os::unix::fs::FileExt;
    // Object files sit in subdirectories of `objects/`.
    let mut files = Vec::new();
    for dir in std::fs::read_dir(root.join("objects")).expect("objects dir") {
        let dir = dir.expect("entry").path();
        if dir.is_dir() {
            for entry in std::fs::read_dir(&dir).expect("object subdir") {
                files.push(entry.expect("entry").path());
            }
        }
    }
    for path in files {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open object");
        // The body starts at offset 0; its length is in the 32-byte tail (header length,
        // body length, checksum, magic).
        let len = file.metadata().expect("metadata").len();
        let mut tail = [0u8; 32];
        file.read_exact_at(&mut tail, len - 32).expect("tail");
        let body_len = u64::from_le_bytes(tail[8..16].try_into().unwrap());
        if body_len == 0 {
            continue;
        }
        let at = body_len / 2;
        let mut byte = [0u8; 1];
        file.read_exact_at(&mut byte, at).expect("body byte");
        byte[0] ^= 0x20;
        file.write_all_at(&byte, at).expect("flip");
    }
}

/// Reopen and damage hooks for a `DiskStorage` (the first instance keeps the directory alive).
fn reopen_disk(settings: Settings) -> Settings {
    settings
        .damage(|storage: &Guarded<DiskStorage>| {
            damage_files(storage.storage().root());
            async {}
        })
        .reopen(|old: &Guarded<DiskStorage>| {
            let root = old.storage().root().to_path_buf();
            let capacity = old.storage().capacity();
            async move {
                let storage = DiskStorage::open(root, capacity)
                    .await
                    .expect("reopen disk storage");
                Guarded::new(storage, ())
            }
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_storage_passes_the_suite() {
    let report = Suite::new(|| async { MemStorage::new(4 << 20) })
        .run()
        .await;
    println!("{report}");
    report.assert_passed();
    assert_eq!(report.cases.len(), CASES.len());
    assert_eq!(
        report.skipped(),
        MEM_SKIPS,
        "MemStorage declares every capability but persistence: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_storage_passes_the_suite() {
    let report = Suite::new(|| disk(Some(512 * 1024)))
        .settings(reopen_disk(Settings::default()))
        .run()
        .await;
    println!("{report}");
    report.assert_passed();
    assert!(report.skipped().is_empty(), "{report}");
}

/// `DiskStorage` declares `persistent`: without a reopen hook its persistent cases fail (the
/// claim is checked, not trusted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_backend_without_a_reopen_hook_fails() {
    let report = Suite::new(|| disk(None))
        .only(["persistent_complete_objects_survive"])
        .run()
        .await;
    assert_eq!(report.failed(), ["persistent_complete_objects_survive"]);
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
    .settings(
        Settings::default()
            .damage(|storage: &Faulty<Guarded<DiskStorage>>| {
                damage_files(storage.inner().storage().root());
                async {}
            })
            .reopen(|old: &Faulty<Guarded<DiskStorage>>| {
                let root = old.inner().storage().root().to_path_buf();
                let capacity = old.inner().storage().capacity();
                async move {
                    let storage = DiskStorage::open(root, capacity)
                        .await
                        .expect("reopen disk storage");
                    Faulty::new(Guarded::new(storage, ()), FaultPlan::new().pending(1))
                }
            }),
    )
    .run()
    .await;
    report.assert_passed();
    assert!(report.skipped().is_empty(), "{report}");
}

conformance::storage_tests!(
    mem_macro,
    || async { MemStorage::new(4 << 20) },
    Settings::default(),
    skip: [
        persistent_complete_objects_survive,
        persistent_purge_is_final,
        persistent_capacity_holds,
        persistent_expired_objects_are_misses,
        corrupted_body_is_not_served,
    ]
);

conformance::storage_tests!(
    disk_macro,
    || disk(Some(256 * 1024)),
    reopen_disk(Settings::default().large_body(128 * 1024))
);

#[test]
fn the_macro_generates_every_case() {
    let listed: Vec<&str> = CASES.iter().map(|case| case.name).collect();
    assert_eq!(mem_macro::GENERATED, listed.as_slice());
}
