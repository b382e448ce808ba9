//! Backend-specific guarantees: `DiskStorage` never serves a temp or torn file and cleans
//! leftovers on restart; `MemStorage` shares chunks with readers (no copies), stays within its
//! byte bound and evicts complete objects only.

mod common;

use bytes::Bytes;
use common::{TempDir, drain};
use stream_cache::{
    AbortReason, CacheKey, DiskStorage, MemStorage, ObjectMeta, Storage, StorageError, WriteError,
};

fn key(name: &str) -> CacheKey {
    CacheKey::from(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_restart_cleans_leftovers_and_keeps_complete_objects() {
    let dir = TempDir::new();
    {
        let storage = DiskStorage::open(dir.path(), 1 << 30).await.unwrap();
        let mut done = storage
            .begin_write(&key("done"), ObjectMeta::new("kept"))
            .await
            .unwrap();
        done.write(Bytes::from_static(b"complete body"))
            .await
            .unwrap();
        done.finish().await.unwrap();

        let mut crashed = storage
            .begin_write(&key("crashed"), ObjectMeta::default())
            .await
            .unwrap();
        crashed.write(Bytes::from_static(b"half")).await.unwrap();
        // A crash: the writer never runs its drop.
        std::mem::forget(crashed);
    }
    let tmp = dir.path().join("tmp");
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        1,
        "the interrupted write left a temp file"
    );

    let storage = DiskStorage::open(dir.path(), 1 << 30).await.unwrap();
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "restart removes leftovers"
    );
    assert!(storage.lookup(&key("crashed")).await.unwrap().is_none());
    let mut hit = storage
        .lookup(&key("done"))
        .await
        .unwrap()
        .expect("complete object persists");
    assert_eq!(hit.meta.user, "kept");
    let (body, end) = drain(&mut *hit.body).await;
    assert!(end.is_ok());
    assert_eq!(body, b"complete body");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_never_serves_a_torn_object_file() {
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), 1 << 30).await.unwrap();
    let mut w = storage
        .begin_write(&key("torn"), ObjectMeta::default())
        .await
        .unwrap();
    w.write(Bytes::from_static(b"0123456789")).await.unwrap();
    w.finish().await.unwrap();
    let objects = common::object_files(dir.path());
    assert_eq!(objects.len(), 1);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&objects[0])
        .unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(len - 1).unwrap(); // lose the end of the footer
    assert!(storage.lookup(&key("torn")).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_reader_of_complete_object_survives_purge() {
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), 1 << 30).await.unwrap();
    let mut w = storage
        .begin_write(&key("k"), ObjectMeta::default())
        .await
        .unwrap();
    w.write(Bytes::from_static(b"still readable"))
        .await
        .unwrap();
    w.finish().await.unwrap();
    let mut hit = storage.lookup(&key("k")).await.unwrap().unwrap();
    assert!(storage.purge(&key("k")).await.unwrap());
    assert!(storage.lookup(&key("k")).await.unwrap().is_none());
    let (body, end) = drain(&mut *hit.body).await;
    assert!(end.is_ok());
    assert_eq!(body, b"still readable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_abort_removes_the_temp_file() {
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), 1 << 30).await.unwrap();
    let mut w = storage
        .begin_write(&key("k"), ObjectMeta::default())
        .await
        .unwrap();
    w.write(Bytes::from_static(b"doomed")).await.unwrap();
    assert_eq!(
        std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
        1
    );
    drop(w);
    assert_eq!(
        std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
        0
    );
    assert_eq!(common::object_files(dir.path()).len(), 0);
    assert_eq!(storage.writes_in_progress(), 0);
}

#[tokio::test]
async fn mem_readers_share_the_writers_chunks() {
    let storage = MemStorage::new(1 << 20);
    let chunk = Bytes::from(vec![7u8; 4096]);
    let mut w = storage
        .begin_write(&key("k"), ObjectMeta::default())
        .await
        .unwrap();
    let mut early = storage.lookup(&key("k")).await.unwrap().unwrap();
    w.write(chunk.clone()).await.unwrap();
    w.finish().await.unwrap();
    let mut late = storage.lookup(&key("k")).await.unwrap().unwrap();
    for reader in [&mut early, &mut late] {
        let got = reader.body.read().await.unwrap().unwrap();
        assert_eq!(
            got.as_ptr(),
            chunk.as_ptr(),
            "a reader got a copy, not the shared chunk"
        );
        assert_eq!(got.len(), chunk.len());
    }
}

#[tokio::test]
async fn mem_evicts_complete_objects_only() {
    let storage = MemStorage::new(100);
    let body = |n: usize| Bytes::from(vec![b'x'; n]);

    let mut a = storage
        .begin_write(&key("a"), ObjectMeta::default())
        .await
        .unwrap();
    a.write(body(60)).await.unwrap();
    a.finish().await.unwrap();
    assert_eq!(storage.used_bytes(), 60);

    // An in-progress write pushes usage over the bound: the complete object goes.
    let mut b = storage
        .begin_write(&key("b"), ObjectMeta::default())
        .await
        .unwrap();
    b.write(body(60)).await.unwrap();
    assert!(storage.lookup(&key("a")).await.unwrap().is_none());
    assert_eq!(storage.used_bytes(), 60);

    // A second in-progress write that would take writes in progress over the bound cannot get
    // room (they are never evicted): it is refused, b is not evicted from under its readers,
    // and the bound holds. (It used to be taken: 120 bytes used of 100, and with many such
    // writes a proxy grew by a whole object per abandoned fill.)
    let mut c = storage
        .begin_write(&key("c"), ObjectMeta::default())
        .await
        .unwrap();
    let mut c_reader = storage.lookup(&key("c")).await.unwrap().unwrap();
    let refused = c.write(body(60)).await;
    assert!(
        matches!(
            refused,
            Err(WriteError::Aborted(AbortReason::NoRoom { capacity: 100 }))
        ),
        "{refused:?}"
    );
    assert_eq!(storage.used_bytes(), 60);
    assert!(storage.lookup(&key("b")).await.unwrap().is_some());
    assert!(storage.lookup(&key("c")).await.unwrap().is_none());
    let (_, end) = drain(&mut *c_reader.body).await;
    assert!(
        end.is_err(),
        "the refused write's reader sees an error, not a clean end"
    );

    // b completes, and a new write evicts it like any complete object.
    b.finish().await.unwrap();
    let mut d = storage
        .begin_write(&key("d"), ObjectMeta::default())
        .await
        .unwrap();
    d.write(body(60)).await.unwrap();
    assert!(storage.lookup(&key("b")).await.unwrap().is_none());
    assert!(storage.used_bytes() <= 100);
    d.finish().await.unwrap();
    assert!(storage.lookup(&key("d")).await.unwrap().is_some());

    // A body that alone outgrows the storage is `TooLarge`, not `NoRoom`: it never fits.
    let mut e = storage
        .begin_write(&key("e"), ObjectMeta::default())
        .await
        .unwrap();
    e.write(body(60)).await.unwrap();
    let refused = e.write(body(60)).await;
    assert!(
        matches!(
            refused,
            Err(WriteError::Aborted(AbortReason::TooLarge { limit: 100 }))
        ),
        "{refused:?}"
    );
}

/// A write whose declared length the writes in progress leave no room for is refused at
/// `begin_write` (`NoRoom`), before it replaces the key's object: found by review, it replaced
/// the object and then its first chunk was refused, so a `replace` lost the stale copy.
#[tokio::test]
async fn mem_refuses_a_declared_length_without_room_before_replacing() {
    let storage = MemStorage::new(100);
    let body = |n: usize| Bytes::from(vec![b'x'; n]);
    let mut k = storage
        .begin_write(&key("k"), ObjectMeta::default())
        .await
        .unwrap();
    k.write(body(10)).await.unwrap();
    k.finish().await.unwrap();
    let mut big = storage
        .begin_write(&key("big"), ObjectMeta::default())
        .await
        .unwrap();
    big.write(body(85)).await.unwrap();
    let refused = storage
        .begin_write(&key("k"), ObjectMeta::default().with_len(20))
        .await;
    assert!(
        matches!(refused, Err(StorageError::NoRoom { capacity: 100 })),
        "{:?}",
        refused.map(|w| w.state())
    );
    let kept = storage.lookup(&key("k")).await.unwrap();
    assert!(
        kept.is_some(),
        "the key's object was replaced by a refused write"
    );
    big.finish().await.unwrap();
    // With the room back, the same write is taken.
    assert!(
        storage
            .begin_write(&key("k"), ObjectMeta::default().with_len(20))
            .await
            .is_ok()
    );
}

/// A write that stops being the key's object while in progress (replaced, or expired at a
/// lookup; purged writes abort) goes on for its readers, and its bytes stay charged and
/// bounded until it ends. Before, they were released at once and its later chunks were neither
/// checked nor charged: such a write grew past the capacity while `used_bytes` said 0.
#[tokio::test]
async fn mem_writes_that_are_no_longer_current_stay_charged_and_bounded() {
    let body = |n: usize| Bytes::from(vec![b'x'; n]);
    for detach in ["replace", "expire"] {
        let storage = MemStorage::new(100);
        let meta = match detach {
            "expire" => ObjectMeta::default()
                .with_expiry(std::time::SystemTime::now() - std::time::Duration::from_secs(1)),
            _ => ObjectMeta::default(),
        };
        let mut a = storage.begin_write(&key("a"), meta).await.unwrap();
        let mut a_reader = a.source().unwrap().open();
        a.write(body(40)).await.unwrap();
        let replacement = match detach {
            "replace" => Some(
                storage
                    .begin_write(&key("a"), ObjectMeta::default())
                    .await
                    .unwrap(),
            ),
            _ => {
                assert!(storage.lookup(&key("a")).await.unwrap().is_none());
                None
            }
        };
        assert_eq!(storage.used_bytes(), 40, "{detach}: still charged");
        a.write(body(40)).await.unwrap();
        assert_eq!(storage.used_bytes(), 80, "{detach}: charged as it grows");
        let refused = a.write(body(40)).await;
        assert!(refused.is_err(), "{detach}: bounded: 120 bytes of 100");
        assert_eq!(storage.used_bytes(), 0, "{detach}: released as it ended");
        let (read, end) = drain(&mut *a_reader).await;
        assert_eq!(read.len(), 80);
        assert!(end.is_err(), "{detach}: its reader sees the abort");
        drop(replacement);
        // A detached write that finishes releases its charge too.
        let mut b = storage
            .begin_write(&key("b"), ObjectMeta::default())
            .await
            .unwrap();
        b.write(body(30)).await.unwrap();
        let newer = storage
            .begin_write(&key("b"), ObjectMeta::default())
            .await
            .unwrap();
        b.finish().await.unwrap();
        assert_eq!(
            storage.used_bytes(),
            0,
            "{detach}: a finished detached write"
        );
        drop(newer);
    }
}

#[tokio::test]
async fn mem_accounting_returns_to_zero() {
    let storage = MemStorage::new(1 << 20);
    let mut w = storage
        .begin_write(&key("k"), ObjectMeta::default())
        .await
        .unwrap();
    w.write(Bytes::from_static(b"12345")).await.unwrap();
    w.finish().await.unwrap();
    let mut aborted = storage
        .begin_write(&key("j"), ObjectMeta::default())
        .await
        .unwrap();
    aborted.write(Bytes::from_static(b"678")).await.unwrap();
    assert_eq!(storage.used_bytes(), 8);
    drop(aborted);
    assert_eq!(storage.used_bytes(), 5);
    assert!(storage.purge(&key("k")).await.unwrap());
    assert_eq!(storage.used_bytes(), 0);
    assert!(storage.is_empty());
}
