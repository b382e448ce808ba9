//! Crash tests without a crash: a helper ([`Damage`]) leaves in a `DiskStorage` directory what
//! a power loss or a failing disk can leave (a finished file whose body blocks are zeroes, a
//! flipped byte in body, header or checksum table, a truncated file, a leftover temp file, a
//! purged or replaced object's file reappearing), and every case checks the one rule: an object
//! is served byte-exact or not at all (a read that ends in an error is "not at all"; `Ok(None)`
//! after wrong or missing bytes never happens), both when the storage is reopened on the damaged
//! directory and when the damage happens under a reader that is already streaming.
#![cfg(unix)]

mod common;

use std::path::Path;

use bytes::Bytes;
use common::{TempDir, drain, object_files};
use stream_cache::{AbortReason, BodyError, DiskStorage, ObjectMeta, Storage};

const BODY_LEN: usize = 200 * 1024; // four checksum blocks, the last one short

fn body() -> Vec<u8> {
    body_of_len(BODY_LEN)
}

fn body_of_len(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// What a crash can leave behind.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// 64 KiB of the body from `at` on were never written: zeroes, length and tail intact.
    ZeroBody { at: usize },
    /// One body byte flipped (bit rot, a torn sector).
    FlipBody { at: usize },
    /// One header byte flipped (inside the key).
    FlipHeader,
    /// One byte of the checksum table flipped.
    FlipTable,
    /// The file cut short at `keep` bytes.
    Truncate { keep: usize },
}

/// The 32-byte tail of an object file: header length, body length, checksum, magic. The body
/// starts at offset 0, the block table follows it, then the header (40 fixed bytes, key, meta),
/// then the tail.
fn tail_field(file: &[u8], index: usize) -> usize {
    let at = file.len() - 32 + 8 * index;
    u64::from_le_bytes(file[at..at + 8].try_into().unwrap()) as usize
}

/// Where the header starts in an object file.
fn header_at(file: &[u8]) -> usize {
    file.len() - 32 - tail_field(file, 0)
}

/// The body length in an object file's tail.
fn body_len(file: &[u8]) -> usize {
    tail_field(file, 1)
}

/// Apply `damage` to the object file at `path`, in place (the same inode, as a crash would).
fn damage(path: &Path, damage: Damage) {
    let mut bytes = std::fs::read(path).unwrap();
    let len = body_len(&bytes);
    let header = header_at(&bytes);
    match damage {
        Damage::ZeroBody { at } => {
            let end = (at + 65536).min(len);
            bytes[at..end].fill(0);
        }
        Damage::FlipBody { at } => bytes[at] ^= 0x40,
        // Inside the key.
        Damage::FlipHeader => bytes[header + 41] ^= 0x01,
        Damage::FlipTable => bytes[len + 3] ^= 0x01,
        Damage::Truncate { keep } => bytes.truncate(keep),
    }
    // Write through the existing file so open readers see the damage.
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_len(bytes.len() as u64).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &bytes, 0).unwrap();
}

async fn store(storage: &DiskStorage, key: &str, body: &[u8]) {
    let mut writer = storage
        .begin_write(&key.into(), ObjectMeta::new("m"))
        .await
        .unwrap();
    for piece in body.chunks(20_000) {
        writer.write(Bytes::copy_from_slice(piece)).await.unwrap();
    }
    writer.finish().await.unwrap();
}

/// How a lookup and a full read of `key` ended.
#[derive(Debug, PartialEq)]
enum Served {
    Nothing,
    Exact,
    Failed(String),
}

/// The rule: byte-exact or not at all; never a clean end after other bytes.
async fn served(storage: &DiskStorage, key: &str, expected: &[u8]) -> Served {
    let Some(mut hit) = storage.lookup(&key.into()).await.unwrap() else {
        return Served::Nothing;
    };
    let (got, end) = drain(&mut *hit.body).await;
    match end {
        Ok(()) => {
            assert!(
                got == expected,
                "served {} wrong bytes as complete",
                got.len()
            );
            Served::Exact
        }
        Err(error) => {
            assert!(
                expected.starts_with(&got),
                "bytes before the error must be exact"
            );
            Served::Failed(format!("{error:?}"))
        }
    }
}

fn corrupt() -> Served {
    Served::Failed(format!("{:?}", BodyError::Aborted(AbortReason::Corrupt)))
}

/// Each damage applied to a closed directory, then the storage reopened on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_found_on_reopen_is_never_served() {
    let cases = [
        (Damage::ZeroBody { at: 70_000 }, corrupt()),
        (Damage::ZeroBody { at: 0 }, corrupt()),
        (Damage::FlipBody { at: 150_000 }, corrupt()),
        (Damage::FlipHeader, Served::Nothing),
        (Damage::FlipTable, Served::Nothing),
        (Damage::Truncate { keep: 100_000 }, Served::Nothing),
        (Damage::Truncate { keep: 30 }, Served::Nothing),
    ];
    for (case, expected) in cases {
        let dir = TempDir::new();
        {
            let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
            store(&storage, "k", &body()).await;
        }
        damage(&object_files(dir.path())[0], case);
        let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
        assert_eq!(served(&storage, "k", &body()).await, expected, "{case:?}");
        // Whatever was found wrong is gone: the next lookup is a clean miss, the file removed,
        // nothing charged for it.
        assert_eq!(served(&storage, "k", &body()).await, Served::Nothing);
        assert!(object_files(dir.path()).is_empty(), "{case:?}");
        assert_eq!(storage.used_bytes(), 0, "{case:?}");
    }
}

/// Damage under a reader already streaming the object (it loaded the checksum table when it
/// opened and has read the first chunk): the read ends with `Corrupt` at the damaged block,
/// after exact bytes only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_mid_stream_ends_the_read_with_corrupt() {
    let long = body_of_len(1 << 20);
    for case in [
        Damage::ZeroBody { at: 600_000 },
        Damage::FlipBody { at: 1_000_000 },
    ] {
        let dir = TempDir::new();
        let storage = DiskStorage::open(dir.path(), 4 << 20).await.unwrap();
        store(&storage, "k", &long).await;
        let mut hit = storage.lookup(&"k".into()).await.unwrap().unwrap();
        let first = hit.body.read().await.unwrap().unwrap();
        assert_eq!(first, long[..first.len()]);
        assert!(first.len() < 600_000);
        damage(&object_files(dir.path())[0], case);
        let (rest, end) = drain(&mut *hit.body).await;
        assert!(
            matches!(end, Err(BodyError::Aborted(AbortReason::Corrupt))),
            "{case:?}: {end:?}"
        );
        assert!(long[first.len()..].starts_with(&rest), "{case:?}");
        // Sticky, and the object is dropped.
        assert!(hit.body.read().await.is_err());
        assert!(storage.lookup(&"k".into()).await.unwrap().is_none());
    }
}

/// A range read verifies the blocks it touches too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_reads_verify_their_blocks() {
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    store(&storage, "k", &body()).await;
    damage(
        &object_files(dir.path())[0],
        Damage::FlipBody { at: 140_000 },
    );
    let mut clean = storage.lookup(&"k".into()).await.unwrap().unwrap();
    clean.body.seek((10_000..20_000).into()).await.unwrap();
    let (got, end) = drain(&mut *clean.body).await;
    end.unwrap();
    assert_eq!(got, body()[10_000..20_000]);
    let mut hit = storage.lookup(&"k".into()).await.unwrap().unwrap();
    hit.body.seek((139_990..140_010).into()).await.unwrap();
    let (got, end) = drain(&mut *hit.body).await;
    assert!(got.is_empty());
    assert!(matches!(end, Err(BodyError::Aborted(AbortReason::Corrupt))));
}

/// A write interrupted by the crash leaves a temp file: never served, removed by `open`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftover_temp_file_is_never_served() {
    let dir = TempDir::new();
    {
        let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
        store(&storage, "k", &body()).await;
        let mut writer = storage
            .begin_write(&"partial".into(), ObjectMeta::default())
            .await
            .unwrap();
        writer.write(Bytes::from_static(b"half")).await.unwrap();
        // The crash: the writer never runs its drop (which would remove the temp file).
        std::mem::forget(writer);
    }
    let leftovers = std::fs::read_dir(dir.path().join("tmp")).unwrap().count();
    assert_eq!(leftovers, 1);
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    assert_eq!(served(&storage, "partial", b"half").await, Served::Nothing);
    assert_eq!(served(&storage, "k", &body()).await, Served::Exact);
    assert_eq!(
        std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
        0
    );
}

/// An unlink that did not reach the disk: the file of a purged object reappears. It is a valid
/// object, so serving it byte-exact is allowed (with `Durability::Full` the purge's directory
/// fsync keeps this from happening); a replaced object's file reappearing beside its newer
/// version never wins over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reappearing_files_are_exact_and_never_beat_a_newer_write() {
    let dir = TempDir::new();
    let aside = TempDir::new();
    {
        let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
        store(&storage, "purged", &body()).await;
        let purged_file = object_files(dir.path())[0].clone();
        std::fs::copy(&purged_file, aside.path().join("purged")).unwrap();
        assert!(storage.purge(&"purged".into()).await.unwrap());
        std::fs::copy(aside.path().join("purged"), &purged_file).unwrap();

        store(&storage, "replaced", b"old version").await;
        let old_file = object_files(dir.path())
            .into_iter()
            .find(|path| path != &purged_file)
            .unwrap();
        std::fs::copy(&old_file, aside.path().join("old")).unwrap();
        store(&storage, "replaced", b"new version").await;
        std::fs::copy(aside.path().join("old"), &old_file).unwrap();
    }
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    let purged = served(&storage, "purged", &body()).await;
    assert!(matches!(purged, Served::Exact | Served::Nothing));
    assert_eq!(
        served(&storage, "replaced", b"new version").await,
        Served::Exact
    );
    assert_eq!(storage.len(), 2);
}
