//! `DiskStorage` as issue 15 wants it: bounded (capacity holds at every step, CLOCK eviction of
//! complete objects only, readers keep evicted files), rebuilt by one scan on restart, durable
//! or not by choice, header/footer length disagreement is a miss that removes the file, and
//! expiring objects are misses (also after a restart).

mod common;

use std::path::Path;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use common::{TempDir, drain, object_files};
use stream_cache::{
    AbortReason, BodyWriter, DiskStorage, Durability, ObjectMeta, Storage, StorageError, WriteError,
};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn store(storage: &DiskStorage, key: &str, meta: ObjectMeta, body: &[u8]) -> u64 {
    let mut writer = storage.begin_write(&key.into(), meta).await.unwrap();
    for piece in body.chunks(16 * 1024) {
        writer.write(Bytes::copy_from_slice(piece)).await.unwrap();
    }
    writer.finish().await.unwrap()
}

/// Fills `storage` to its last byte with two writes in progress (one object may not be that
/// large: the per-object limit is below the capacity), and returns them.
async fn fill_to_capacity(storage: &DiskStorage, capacity: u64) -> Vec<Box<dyn BodyWriter>> {
    let mut filling = Vec::new();
    for name in ["filling 1", "filling 2"] {
        let key = name.into();
        filling.push(
            storage
                .begin_write(&key, ObjectMeta::default())
                .await
                .unwrap(),
        );
    }
    let left = capacity - storage.used_bytes();
    for (i, w) in filling.iter_mut().enumerate() {
        let part = if i == 0 { left / 2 } else { left - left / 2 };
        w.write(Bytes::from(pattern(part as usize, 3)))
            .await
            .unwrap();
    }
    assert_eq!(storage.used_bytes(), capacity);
    filling
}

/// A write in progress of 150 KiB ("first"), then a second write ("second") of 200 KiB, which
/// a 300 KiB storage cannot hold beside it: the first writer, and the second write's answer.
async fn second_write_past_the_first(
    storage: &DiskStorage,
) -> (Box<dyn BodyWriter>, Result<(), WriteError>) {
    let mut first = storage
        .begin_write(&"first".into(), ObjectMeta::default())
        .await
        .unwrap();
    first
        .write(Bytes::from(pattern(150 * 1024, 1)))
        .await
        .unwrap();
    let mut second = storage
        .begin_write(&"second".into(), ObjectMeta::default())
        .await
        .unwrap();
    let refused = second.write(Bytes::from(pattern(200 * 1024, 2))).await;
    (first, refused)
}

async fn body_of(storage: &DiskStorage, key: &str) -> Option<Vec<u8>> {
    let mut hit = storage.lookup(&key.into()).await.unwrap()?;
    let (body, end) = drain(&mut *hit.body).await;
    end.unwrap();
    Some(body)
}

fn le64(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

/// The same object in the file format of earlier versions (version 2: header, body, block
/// table, then a 24-byte tail of body length, checksum and `HERDEND2`; the header's magic
/// `HERDSC02`), from a file in the current format (body, block table, header, then a 32-byte
/// tail of header length, body length, checksum and `HERDEND3`).
fn to_version_2(file: &[u8]) -> Vec<u8> {
    let n = file.len();
    let header_len = le64(&file[n - 32..]) as usize;
    let body_len = le64(&file[n - 24..]) as usize;
    let header_at = n - 32 - header_len;
    let mut header = file[header_at..n - 32].to_vec();
    assert_eq!(&header[..8], b"HERDSC03");
    header[..8].copy_from_slice(b"HERDSC02");
    let table = &file[body_len..header_at];
    let mut sum = xxhash_rust::xxh3::Xxh3Default::new();
    sum.update(&header);
    sum.update(table);
    sum.update(&(body_len as u64).to_le_bytes());
    let mut out = header;
    out.extend_from_slice(&file[..body_len]);
    out.extend_from_slice(table);
    out.extend_from_slice(&(body_len as u64).to_le_bytes());
    out.extend_from_slice(&sum.digest().to_le_bytes());
    out.extend_from_slice(b"HERDEND2");
    out
}

/// Bytes of the files (object and temp files; not the directories) under `root`.
fn bytes_on_disk(root: &Path) -> u64 {
    let temp = std::fs::read_dir(root.join("tmp"))
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().len());
    let objects = object_files(root)
        .into_iter()
        .map(|path| std::fs::metadata(path).unwrap().len());
    temp.chain(objects).sum()
}

/// Objects through a storage of a fraction of their total size: used bytes (and the files
/// actually on disk) never exceed the capacity, checked after every write and every finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_holds_at_every_step() {
    let dir = TempDir::new();
    let capacity = 256 * 1024;
    let storage = DiskStorage::open(dir.path(), capacity).await.unwrap();
    for i in 0..60 {
        let key = format!("object-{i}");
        let mut writer = storage
            .begin_write(&key.as_str().into(), ObjectMeta::new("m"))
            .await
            .unwrap();
        for piece in pattern(40 * 1024, i as u8).chunks(8 * 1024) {
            writer.write(Bytes::copy_from_slice(piece)).await.unwrap();
            assert!(storage.used_bytes() <= capacity, "{}", storage.used_bytes());
            assert!(bytes_on_disk(dir.path()) <= capacity);
        }
        writer.finish().await.unwrap();
        assert!(storage.used_bytes() <= capacity, "{}", storage.used_bytes());
        assert_eq!(bytes_on_disk(dir.path()), storage.used_bytes());
        let usage = storage.usage().unwrap();
        assert_eq!(usage.capacity_bytes, Some(capacity));
    }
    // The latest objects are there, the oldest were evicted.
    assert_eq!(
        body_of(&storage, "object-59").await,
        Some(pattern(40 * 1024, 59))
    );
    assert_eq!(body_of(&storage, "object-0").await, None);
    assert!(storage.len() >= 5);
    assert!(storage.eviction_records() <= 2 * storage.len() + 17);
}

/// CLOCK: an object read since the last sweep gets a second chance; an object being read when
/// it is evicted is still read to its end, byte-exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_spares_readers_and_referenced_objects() {
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), 200 * 1024).await.unwrap();
    store(&storage, "a", ObjectMeta::default(), &pattern(60 * 1024, 1)).await;
    store(&storage, "b", ObjectMeta::default(), &pattern(60 * 1024, 2)).await;
    store(&storage, "c", ObjectMeta::default(), &pattern(60 * 1024, 3)).await;
    // A reader of "a" is open; "a" is referenced by that lookup.
    let mut reading = storage.lookup(&"a".into()).await.unwrap().unwrap();
    store(&storage, "d", ObjectMeta::default(), &pattern(60 * 1024, 4)).await;
    // "b" (not referenced) went first, "a" got its second chance.
    assert!(storage.lookup(&"b".into()).await.unwrap().is_none());
    assert!(storage.lookup(&"a".into()).await.unwrap().is_some());
    // Push everything old out, "a" included, while its first reader is still open.
    store(&storage, "e", ObjectMeta::default(), &pattern(60 * 1024, 5)).await;
    store(&storage, "f", ObjectMeta::default(), &pattern(60 * 1024, 6)).await;
    store(&storage, "g", ObjectMeta::default(), &pattern(60 * 1024, 7)).await;
    store(&storage, "h", ObjectMeta::default(), &pattern(60 * 1024, 8)).await;
    assert!(storage.lookup(&"a".into()).await.unwrap().is_none());
    let (body, end) = drain(&mut *reading.body).await;
    assert!(end.is_ok(), "{end:?}");
    assert_eq!(body, pattern(60 * 1024, 1));
}

/// A write that cannot get room because everything else is in progress aborts with
/// `NoRoom { capacity }` (not `TooLarge`: the same body fits once the others end); nothing in
/// progress is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_in_progress_are_never_evicted() {
    let dir = TempDir::new();
    let capacity = 300 * 1024;
    let storage = DiskStorage::open(dir.path(), capacity).await.unwrap();
    let (first, refused) = second_write_past_the_first(&storage).await;
    assert!(
        matches!(
            refused,
            Err(WriteError::Aborted(AbortReason::NoRoom { capacity: c })) if c == capacity
        ),
        "{refused:?}"
    );
    first.finish().await.unwrap();
    assert_eq!(
        body_of(&storage, "first").await,
        Some(pattern(150 * 1024, 1))
    );
    assert!(storage.used_bytes() <= capacity);
}

/// A write that cannot get room even if every complete object went is refused without
/// evicting any: before, it evicted the whole cache on its way to failing (two large fills
/// in progress were enough to wipe a disk cache). And a `replace` refused for room keeps the
/// key's old object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_cannot_fit_evicts_nothing() {
    let dir = TempDir::new();
    let capacity = 300 * 1024;
    let storage = DiskStorage::open(dir.path(), capacity).await.unwrap();
    for (i, key) in ["a", "b", "c"].into_iter().enumerate() {
        store(
            &storage,
            key,
            ObjectMeta::default(),
            &pattern(20 * 1024, i as u8),
        )
        .await;
    }
    let (first, refused) = second_write_past_the_first(&storage).await;
    assert!(
        matches!(
            refused,
            Err(WriteError::Aborted(AbortReason::NoRoom { .. }))
        ),
        "{refused:?}"
    );
    for (i, key) in ["a", "b", "c"].into_iter().enumerate() {
        let kept = body_of(&storage, key).await == Some(pattern(20 * 1024, i as u8));
        assert!(kept, "{key} was evicted for a write that could not fit");
    }
    drop(first);
    assert!(storage.used_bytes() <= capacity);

    // A replacement whose head alone does not fit beside the writes in progress (here one
    // that fills the storage to the byte) is refused before the key's object is dropped.
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), capacity).await.unwrap();
    store(&storage, "k", ObjectMeta::default(), b"old body").await;
    let filling = fill_to_capacity(&storage, capacity).await;
    let big_head = ObjectMeta::new(vec![b'm'; 4096]);
    let refused = storage.begin_write(&"k".into(), big_head).await;
    assert!(
        matches!(refused, Err(StorageError::NoRoom { capacity: c }) if c == capacity),
        "refused for room with an error, not a writer born aborted: {:?}",
        refused.map(|_| ())
    );
    assert_eq!(body_of(&storage, "k").await, Some(b"old body".to_vec()));
    drop(filling);

    // A superseded write (an older fence: it will never be the key's object, but its file is
    // real) gets no room beyond the capacity either.
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), capacity).await.unwrap();
    let old_fence = storage.fence(&"late".into());
    let newer = storage
        .begin_write(&"late".into(), ObjectMeta::default())
        .await
        .unwrap();
    let filling = fill_to_capacity(&storage, capacity).await;
    let late = storage
        .begin_write_fenced(&"late".into(), ObjectMeta::default(), old_fence)
        .await;
    assert!(matches!(late, Err(StorageError::NoRoom { .. })));
    assert!(
        storage.used_bytes() <= capacity,
        "{} bytes used of {capacity}",
        storage.used_bytes()
    );
    drop((late, newer, filling));

    // A newer fence's write refused for room never became visible: an older fence's write of
    // the key, begun once there is room, is still stored (before, the refusal was recorded as
    // the key's newest visible write, and the older write was superseded by nothing).
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), capacity).await.unwrap();
    let (older, newer) = (storage.fence(&"k".into()), storage.fence(&"k".into()));
    let filling = fill_to_capacity(&storage, capacity).await;
    let refused = storage
        .begin_write_fenced(&"k".into(), ObjectMeta::new(vec![b'm'; 4096]), newer)
        .await;
    assert!(matches!(refused, Err(StorageError::NoRoom { .. })));
    drop(filling);
    let mut writer = storage
        .begin_write_fenced(&"k".into(), ObjectMeta::default(), older)
        .await
        .unwrap();
    writer.write(Bytes::from_static(b"older")).await.unwrap();
    writer.finish().await.unwrap();
    assert_eq!(body_of(&storage, "k").await, Some(b"older".to_vec()));
}

/// Restart: one scan rebuilds the index and the used bytes; a smaller capacity holds from the
/// first moment (the oldest objects are evicted by `open`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_rebuilds_index_and_capacity() {
    let dir = TempDir::new();
    let (used, len) = {
        let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
        for i in 0..8u8 {
            let key = format!("k{i}");
            store(
                &storage,
                &key,
                ObjectMeta::new(vec![i]),
                &pattern(30_000, i),
            )
            .await;
        }
        (storage.used_bytes(), storage.len())
    };
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    assert_eq!(storage.len(), len);
    assert_eq!(storage.used_bytes(), used);
    let hit = storage.lookup(&"k3".into()).await.unwrap().unwrap();
    assert_eq!(hit.meta.user, Bytes::from(vec![3u8]));
    assert_eq!(body_of(&storage, "k3").await, Some(pattern(30_000, 3)));
    drop(storage);

    let small = DiskStorage::open(dir.path(), 100_000).await.unwrap();
    assert!(small.used_bytes() <= 100_000);
    assert_eq!(bytes_on_disk(dir.path()), small.used_bytes());
    assert_eq!(body_of(&small, "k7").await, Some(pattern(30_000, 7)));
    assert_eq!(body_of(&small, "k0").await, None);
    // Writes after the reopen do not reuse a surviving file's name.
    store(&small, "k7", ObjectMeta::default(), b"new").await;
    assert_eq!(body_of(&small, "k7").await.as_deref(), Some(&b"new"[..]));
}

/// A header whose declared length disagrees with the tail's is a miss, and the file is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_footer_length_mismatch_is_a_miss_and_removed() {
    let dir = TempDir::new();
    let body = pattern(1000, 9);
    {
        let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
        store(&storage, "k", ObjectMeta::default().with_len(1000), &body).await;
    }
    let files = object_files(dir.path());
    assert_eq!(files.len(), 1);
    // The declared length (header bytes 16..24; the header sits before the 32-byte tail,
    // whose first field is its length) now says 1001.
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let header_at = bytes.len() - 32 - le64(&bytes[bytes.len() - 32..]) as usize;
    bytes[header_at + 16..header_at + 24].copy_from_slice(&1001u64.to_le_bytes());
    std::fs::write(&files[0], &bytes).unwrap();
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    assert!(storage.lookup(&"k".into()).await.unwrap().is_none());
    assert!(object_files(dir.path()).is_empty(), "the file is removed");
}

/// `Durability::None` stores and reopens the same way (it only skips the fsyncs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durability_none_round_trips() {
    let dir = TempDir::new();
    {
        let storage = DiskStorage::builder(dir.path(), 1 << 20)
            .durability(Durability::None)
            .open()
            .await
            .unwrap();
        store(&storage, "k", ObjectMeta::default(), &pattern(100_000, 1)).await;
        assert!(storage.purge(&"gone".into()).await.is_ok());
    }
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    assert_eq!(body_of(&storage, "k").await, Some(pattern(100_000, 1)));
}

/// Freshness: an expired object is a miss (and its file goes), before and after a restart; an
/// object still fresh survives the restart with its expiry. (Expiry is wall-clock time; the
/// tests use expiries an hour away or already past, never a wait.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_objects_are_misses_across_restarts() {
    let dir = TempDir::new();
    let future = SystemTime::now() + Duration::from_secs(3600);
    let past = SystemTime::now() - Duration::from_secs(1);
    {
        let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
        store(
            &storage,
            "fresh",
            ObjectMeta::default().with_expiry(future),
            b"fresh",
        )
        .await;
        store(
            &storage,
            "stale",
            ObjectMeta::default().with_expiry(past),
            b"stale",
        )
        .await;
        store(
            &storage,
            "unread",
            ObjectMeta::default().with_expiry(past),
            b"unread",
        )
        .await;
        assert!(storage.lookup(&"stale".into()).await.unwrap().is_none());
        assert_eq!(storage.len(), 2, "stale went at its lookup");
    }
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    assert_eq!(storage.len(), 1, "the scan drops what expired");
    assert_eq!(object_files(dir.path()).len(), 1);
    let hit = storage.lookup(&"fresh".into()).await.unwrap().unwrap();
    let at = hit.meta.expires_at.unwrap();
    let drift = at.duration_since(future).unwrap_or_else(|e| e.duration());
    assert!(
        drift < Duration::from_millis(1),
        "stored to the millisecond"
    );
    assert!(storage.lookup(&"unread".into()).await.unwrap().is_none());
}

/// A declared length that cannot fit in the capacity is refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn begin_write_without_room_for_the_declared_length_is_refused() {
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), 100_000).await.unwrap();
    let refused = storage
        .begin_write(&"k".into(), ObjectMeta::default().with_len(100_000))
        .await;
    assert!(matches!(refused, Err(StorageError::TooLarge { .. })));
}

/// Issue 15's eviction check: objects through a storage of 10% of their total size; the used
/// bytes (and the bytes on disk, every 250 objects) never exceed the capacity, and the eviction
/// records stay O(objects). 2,000 objects by default; the 100,000 with
/// `HERD_DISK_TEST_OBJECTS=100000 cargo test --release -p stream-cache --test disk
/// objects_through` (about a minute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_through_a_tenth_of_their_size() {
    let dir = TempDir::new();
    let count: u64 = std::env::var("HERD_DISK_TEST_OBJECTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    // Listing the directory costs O(objects): check the files on disk a few hundred times.
    let disk_check_every = (count / 8).clamp(1, 250);
    let body = pattern(200, 1);
    let file_len = 40 + 6 + 200 + 8 + 32; // header with a 6-byte key, body, one block, tail
    let capacity = count * file_len / 10;
    let storage = DiskStorage::builder(dir.path(), capacity)
        .durability(Durability::None)
        .open()
        .await
        .unwrap();
    for i in 0..count {
        let key = format!("{i:06}");
        store(&storage, &key, ObjectMeta::default(), &body).await;
        assert!(storage.used_bytes() <= capacity, "object {i}");
        if i % disk_check_every == 0 {
            assert!(bytes_on_disk(dir.path()) <= capacity, "object {i}");
        }
    }
    assert!(storage.len() as u64 >= count / 10 - 1);
    assert!(storage.eviction_records() <= 2 * storage.len() + 17);
    let last = format!("{:06}", count - 1);
    assert_eq!(body_of(&storage, &last).await, Some(body));
}

/// What `Durability::Full` syncs: one directory fsync per `finish` (after the rename), none with
/// `Durability::None`; a purge that unlinks nothing and finds no unsynced unlink syncs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_syncs_per_finish_and_purge() {
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    let before = storage.dir_syncs();
    store(&storage, "a", ObjectMeta::default(), &pattern(70_000, 1)).await;
    store(&storage, "b", ObjectMeta::default(), b"b").await;
    assert_eq!(storage.dir_syncs(), before + 2, "one per finish");
    assert!(!storage.purge(&"never-stored".into()).await.unwrap());
    assert_eq!(storage.dir_syncs(), before + 2, "nothing to make durable");
    assert!(storage.purge(&"a".into()).await.unwrap());
    assert_eq!(storage.dir_syncs(), before + 3, "the unlink is synced");

    let none_dir = TempDir::new();
    let none = DiskStorage::builder(none_dir.path(), 1 << 20)
        .durability(Durability::None)
        .open()
        .await
        .unwrap();
    store(&none, "a", ObjectMeta::default(), b"a").await;
    assert!(none.purge(&"a".into()).await.unwrap());
    assert_eq!(none.dir_syncs(), 0);
}

/// An eviction unlinks a file without syncing the directory; a later purge of that key finds
/// nothing to remove but must still sync, or a power loss could bring the evicted file back and
/// undo a purge that returned. (Before the fix a purge synced only when it removed something.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_syncs_an_eviction_not_yet_synced() {
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), 150 * 1024).await.unwrap();
    store(&storage, "a", ObjectMeta::default(), &pattern(60 * 1024, 1)).await;
    store(&storage, "b", ObjectMeta::default(), &pattern(60 * 1024, 2)).await;
    // A write in progress evicts "a"; no finish (and so no directory sync) follows yet.
    let mut writer = storage
        .begin_write(&"c".into(), ObjectMeta::default())
        .await
        .unwrap();
    writer
        .write(Bytes::from(pattern(60 * 1024, 3)))
        .await
        .unwrap();
    assert!(
        storage.lookup(&"a".into()).await.unwrap().is_none(),
        "evicted"
    );
    let before = storage.dir_syncs();
    assert!(!storage.purge(&"a".into()).await.unwrap());
    assert_eq!(
        storage.dir_syncs(),
        before + 1,
        "the eviction's unlink is synced"
    );
    // Synced now: a second purge has nothing to make durable.
    assert!(!storage.purge(&"a".into()).await.unwrap());
    assert_eq!(storage.dir_syncs(), before + 1);
    writer.finish().await.unwrap();
}

/// After a restart, an unlink of the previous run may not be synced yet (a power loss could
/// bring its file back), so the first purge of a key syncs its subdirectory: before, `open`
/// counted every subdirectory as synced and such a purge returned without a sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_after_a_restart_syncs_what_the_last_run_unlinked() {
    let dir = TempDir::new();
    {
        let storage = DiskStorage::open(dir.path(), 150 * 1024).await.unwrap();
        store(&storage, "a", ObjectMeta::default(), &pattern(60 * 1024, 1)).await;
        store(&storage, "b", ObjectMeta::default(), &pattern(60 * 1024, 2)).await;
        // A write in progress evicts "a"; the process ends before anything syncs that.
        let mut writer = storage
            .begin_write(&"c".into(), ObjectMeta::default())
            .await
            .unwrap();
        writer
            .write(Bytes::from(pattern(60 * 1024, 3)))
            .await
            .unwrap();
        assert!(storage.lookup(&"a".into()).await.unwrap().is_none());
    }
    let storage = DiskStorage::open(dir.path(), 150 * 1024).await.unwrap();
    let before = storage.dir_syncs();
    assert!(!storage.purge(&"a".into()).await.unwrap());
    assert_eq!(
        storage.dir_syncs(),
        before + 1,
        "the purge synced its directory"
    );
    assert!(!storage.purge(&"a".into()).await.unwrap());
    assert_eq!(storage.dir_syncs(), before + 1, "once");
}

/// The first key of the form `{prefix}{i}` whose files live in (`same`) or outside
/// (`!same`) `dir`.
fn key_in(storage: &DiskStorage, prefix: &str, dir: &Path, same: bool) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|key| (storage.object_dir(&key.as_str().into()) == dir) == same)
        .unwrap()
}

/// With object files in subdirectories, `purge` syncs the subdirectory of the purged key's
/// files (where every file the key ever had lives) whenever an unlink in it is not yet
/// durable, and only that one: an unsynced eviction in another subdirectory cannot bring back
/// a file of this key. A `finish` syncs its own subdirectory (which also makes the unlink of the
/// object it replaced durable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_syncs_the_subdirectory_with_the_unsynced_unlink() {
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), 150 * 1024).await.unwrap();
    let a_dir = storage.object_dir(&"a".into());
    let elsewhere = key_in(&storage, "x", &a_dir, false);
    let beside = key_in(&storage, "y", &a_dir, true);
    store(&storage, "a", ObjectMeta::default(), &pattern(60 * 1024, 1)).await;
    assert!(!storage.unsynced_unlinks(&"a".into()));
    store(&storage, "b", ObjectMeta::default(), &pattern(60 * 1024, 2)).await;
    // A write in progress evicts "a"; no finish (and so no directory sync) follows yet.
    let mut writer = storage
        .begin_write(&"c".into(), ObjectMeta::default())
        .await
        .unwrap();
    writer
        .write(Bytes::from(pattern(60 * 1024, 3)))
        .await
        .unwrap();
    assert!(storage.lookup(&"a".into()).await.unwrap().is_none());
    assert!(
        storage.unsynced_unlinks(&"a".into()),
        "a's eviction is not durable yet"
    );
    assert!(!storage.unsynced_unlinks(&elsewhere.as_str().into()));

    let before = storage.dir_syncs();
    assert!(!storage.purge(&elsewhere.as_str().into()).await.unwrap());
    assert_eq!(
        storage.dir_syncs(),
        before,
        "nothing unsynced where its files live"
    );
    assert!(storage.unsynced_unlinks(&"a".into()));

    assert!(!storage.purge(&beside.as_str().into()).await.unwrap());
    assert_eq!(
        storage.dir_syncs(),
        before + 1,
        "a's subdirectory is synced"
    );
    assert!(!storage.unsynced_unlinks(&"a".into()));
    writer.finish().await.unwrap();

    // A replacement unlinks the old file at `begin_write`; the `finish` syncs the same
    // subdirectory after its rename, which makes that unlink durable too.
    store(&storage, "a", ObjectMeta::default(), b"one").await;
    store(&storage, "a", ObjectMeta::default(), b"two").await;
    assert!(!storage.unsynced_unlinks(&"a".into()));
}

/// `open` creates the 256 object subdirectories and makes them durable (a new subdirectory's
/// entry needs its parent synced): on a fresh root it syncs `objects/` and the root, on a
/// reopen `objects/` again (cheap, and it covers subdirectories a `Durability::None` run
/// created); `Durability::None` syncs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_makes_the_subdirectories_durable() {
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    assert_eq!(storage.dir_syncs(), 2, "objects/ and the root");
    let subdirs: Vec<_> = std::fs::read_dir(dir.path().join("objects"))
        .unwrap()
        .map(|entry| entry.unwrap())
        .collect();
    assert_eq!(subdirs.len(), 256);
    assert!(subdirs.iter().all(|e| e.file_type().unwrap().is_dir()));
    drop(storage);
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    assert_eq!(storage.dir_syncs(), 1, "objects/");
    drop(storage);

    let none_dir = TempDir::new();
    let none = DiskStorage::builder(none_dir.path(), 1 << 20)
        .durability(Durability::None)
        .open()
        .await
        .unwrap();
    assert_eq!(none.dir_syncs(), 0);
}

/// A directory written by earlier versions (every object file directly in `objects/`, in
/// file format version 2) is taken over: `open` moves each valid file into its subdirectory,
/// keeps the newest file per key, and serves every object byte-exact, ranges included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flat_layout_files_are_moved_into_place() {
    let dir = TempDir::new();
    let (used, stale) = {
        let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
        store(&storage, "k0", ObjectMeta::default(), b"replaced").await;
        let stale = object_files(dir.path())[0].clone();
        let kept = std::fs::read(&stale).unwrap();
        for i in 0..10u8 {
            let key = format!("k{i}");
            store(&storage, &key, ObjectMeta::default(), &pattern(5000, i)).await;
        }
        // The replaced object of k0 reappears (an unlink lost by a crash of the old version).
        std::fs::write(&stale, kept).unwrap();
        (storage.used_bytes(), stale)
    };
    // Flatten and convert: what the old version left.
    let objects = dir.path().join("objects");
    for file in object_files(dir.path()) {
        let old = to_version_2(&std::fs::read(&file).unwrap());
        std::fs::remove_file(&file).unwrap();
        std::fs::write(objects.join(file.file_name().unwrap()), old).unwrap();
    }
    for entry in std::fs::read_dir(&objects).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            std::fs::remove_dir(path).unwrap();
        }
    }
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    assert_eq!(storage.len(), 10);
    // Version 2 tails are 8 bytes shorter.
    assert_eq!(storage.used_bytes(), used - 10 * 8);
    for i in 0..10u8 {
        let key = format!("k{i}");
        assert_eq!(body_of(&storage, &key).await, Some(pattern(5000, i)));
    }
    let mut hit = storage.lookup(&"k3".into()).await.unwrap().unwrap();
    hit.body.seek((100..200).into()).await.unwrap();
    let (got, end) = drain(&mut *hit.body).await;
    end.unwrap();
    assert_eq!(got, pattern(5000, 3)[100..200]);
    let files = object_files(dir.path());
    assert_eq!(files.len(), 10, "the older k0 file is gone");
    assert!(!files.iter().any(|f| f.file_name() == stale.file_name()));
    assert!(
        files.iter().all(|f| f.parent() != Some(&*objects)),
        "every file is in a subdirectory"
    );
    for i in 0..10u8 {
        let key = format!("k{i}");
        let home = storage.object_dir(&key.as_str().into());
        assert!(files.iter().any(|f| f.parent() == Some(&*home)), "{key}");
    }
}

/// A file under `objects/` whose name carries the largest seq (or any junk) does not stop
/// `open`: it is removed as invalid, and the storage works. Its seq overflowed `seq + 1`, a
/// panic in debug builds, from a file name alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_named_with_the_largest_seq_does_not_break_open() {
    let dir = TempDir::new();
    let subdir = dir.path().join("objects").join("00");
    std::fs::create_dir_all(&subdir).unwrap();
    let crafted = subdir.join("0000000000000000-ffffffffffffffff.obj");
    std::fs::write(&crafted, b"not an object").unwrap();
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    assert!(!crafted.exists(), "the invalid file is removed");
    store(&storage, "k", ObjectMeta::default(), b"body").await;
    assert_eq!(body_of(&storage, "k").await, Some(b"body".to_vec()));
}

/// `begin_write` dropped while its temp file's creation waits on a busy blocking pool leaves
/// no temp file once that creation runs (it leaked one per cancelled call until the next
/// `open`).
#[test]
fn a_begin_write_dropped_while_its_file_is_being_created_leaves_no_temp_file() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = TempDir::new();
        let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
        // The one blocking thread is busy until `release` is sent.
        let (release, busy) = std::sync::mpsc::channel::<()>();
        let occupied = tokio::task::spawn_blocking(move || busy.recv());
        {
            let key = "k".into();
            let begin = storage.begin_write(&key, ObjectMeta::default());
            let mut begin = std::pin::pin!(begin);
            let polled = futures::poll!(begin.as_mut());
            assert!(
                polled.is_pending(),
                "the file's creation waits for the pool"
            );
        }
        release.send(()).unwrap();
        let _ = occupied.await;
        // Queued after the creation: when it has run, the creation has too.
        tokio::task::spawn_blocking(|| ()).await.unwrap();
        let left: Vec<_> = std::fs::read_dir(dir.path().join("tmp"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "left in tmp/: {left:?}");
    });
}

/// Replaces the one object file under `root` with a directory of the same name: the file is
/// there, but reading it fails (EISDIR), as an unreadable file's would (EIO, EACCES).
fn make_the_object_unreadable(root: &Path) {
    let files = object_files(root);
    assert_eq!(files.len(), 1);
    std::fs::remove_file(&files[0]).unwrap();
    std::fs::create_dir(&files[0]).unwrap();
}

/// One object file that cannot be read neither keeps the storage from opening nor fails its
/// key's lookups for ever: it is a miss, and the key can be stored again. Before, `open`
/// returned the I/O error on every restart, and at run time every lookup of the key (so every
/// fill of it through `StreamCache`) failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_object_file_is_a_miss_not_an_error() {
    // At run time.
    let dir = TempDir::new();
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    store(&storage, "k", ObjectMeta::default(), b"body").await;
    make_the_object_unreadable(dir.path());
    assert!(storage.lookup(&"k".into()).await.unwrap().is_none());
    store(&storage, "k", ObjectMeta::default(), b"again").await;
    assert_eq!(body_of(&storage, "k").await, Some(b"again".to_vec()));
    // Across a restart.
    let dir = TempDir::new();
    {
        let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
        store(&storage, "k", ObjectMeta::default(), b"body").await;
    }
    make_the_object_unreadable(dir.path());
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    assert!(storage.lookup(&"k".into()).await.unwrap().is_none());
    store(&storage, "k", ObjectMeta::default(), b"stored after").await;
    assert_eq!(body_of(&storage, "k").await, Some(b"stored after".to_vec()));
}

/// Two files for one key after a crash (the older reappeared) where the newer one has
/// expired: the key is a miss. Before, the scan dropped the expired newer file first and then
/// kept the older version, so a restart served content the key had been replaced over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_never_brings_back_a_replaced_version() {
    let dir = TempDir::new();
    let past = SystemTime::now() - Duration::from_secs(1);
    let kept_aside = dir.path().join("old-version");
    {
        let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
        store(&storage, "k", ObjectMeta::default(), b"old").await;
        let old = object_files(dir.path()).pop().unwrap();
        std::fs::copy(&old, &kept_aside).unwrap();
        // (Stored already expired: what it is at the restart below.)
        store(
            &storage,
            "k",
            ObjectMeta::default().with_expiry(past),
            b"new",
        )
        .await;
        std::fs::rename(&kept_aside, &old).unwrap(); // the crash left it behind
    }
    assert_eq!(object_files(dir.path()).len(), 2);
    let storage = DiskStorage::open(dir.path(), 1 << 20).await.unwrap();
    assert!(storage.lookup(&"k".into()).await.unwrap().is_none());
    assert!(object_files(dir.path()).is_empty());
}
