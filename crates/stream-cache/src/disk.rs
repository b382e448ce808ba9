//! `DiskStorage`: bodies in files, readable while they are written, bounded in bytes, durable by
//! default, and verified as they are read.
//!
//! Layout under the root directory:
//! - `tmp/<seq>-<pid>.tmp`: a body being written. Readers attached to that write share one read
//!   handle and tail the file as it grows; the write's partial-body cell says how many bytes are
//!   written and whether the write is open, complete or aborted.
//! - `objects/<dd>/<key hash>-<seq>.obj`: a complete object, renamed into place by `finish`.
//!   `dd` is one of 256 subdirectories (`00`..`ff`), picked by a byte of the (mixed) key hash, so
//!   every file a key ever has lives in the same one (`layout.rs` says why and how). `seq` is
//!   unique per storage directory (the scan at `open` continues after the largest one found), so
//!   two keys whose hashes collide get two files; the in-memory index maps the *full key* to its
//!   file, and the header's key is compared again on every open. A collision is never another
//!   key's body.
//!
//! Why subdirectories: one directory of every object is what nginx (`levels=`) and Squid
//! (`L1`/`L2`) avoid, because a directory's cost per create, rename and unlink and its listing
//! grow with its size, and because file systems cap it (ext4 without `large_dir` refuses new
//! entries once its two-level hashed index is full, around ten million names). 256
//! subdirectories hold about 400 files each at 100,000 objects and stay far from such limits
//! up to hundreds of millions. On this machine's ext4 the per-insert cost at capacity measured
//! flat from 1,000 to 100,000 objects with either layout once the benchmark compared like with
//! like (docs/benchmarks.md, "DiskStorage benchmarks", says what it compared before and what
//! the subdirectories changed: 0-15% at 100,000 objects). 256 rather than nginx's 4,096: no
//! difference was measurable at the scale, and 4,096 empty directories cost 16 MiB
//! (not charged to the capacity) and 4,096 directory reads per `open`; 256 cost 1 MiB. They
//! are created by `open`. Keys built to share a subdirectory (the hash is not keyed) only make
//! that subdirectory slower, never wrong.
//!
//! Directories written by the flat layout of earlier versions (`objects/<key hash>-<seq>.obj`,
//! same file format) are taken over, not dropped: the scan at `open` validates each such file as
//! any other and moves the valid ones into their subdirectory (one rename each, made durable
//! before `open` returns), so an upgrade keeps the cache warm.
//!
//! File format, version 3 (integers little-endian): body + block table (XXH3-64 of each 64 KiB
//! block of the body) + header (`HERDSC03`, key length u32, meta length u32, declared length
//! u64, expiry in Unix milliseconds u64, body length u64, key, meta) + tail (header length u64,
//! body length u64, XXH3-64 of header + table + body length, `HERDEND3`). Table, header and
//! tail are written by `finish` in one write. The body comes first so that it starts at offset
//! 0: 64 KiB chunks then fill whole page-cache folios, where a body at offset 41 (the header's
//! length with a 1-byte key) cost 50% more per write on this machine's kernel
//! (docs/benchmarks.md, "DiskStorage benchmarks"). Version 2 files (`HERDSC02` header first,
//! then body, table and a tail of body length, checksum and `HERDEND2`), written by earlier
//! versions, are still read and served; new files are always version 3. A file is served only
//! if the magics match, the header's and the tail's lengths agree, the file is exactly as long
//! as they say, and the tail's checksum
//! matches; otherwise it is a miss and the file is removed. Readers of a finished file verify
//! each block against the table *before* returning any byte of it: a block that does not match
//! ends the read with `Err(Aborted(Corrupt))` (and drops the object), never `Ok(None)` and never
//! a wrong byte. Readers attached to a write still in progress do not verify: they read what
//! this process wrote moments before through the same open file (from the page cache unless
//! memory pressure evicted it in between), a block's sum exists only once the block is
//! complete, and verifying would hold every tailing reader back by up to a 64 KiB block (time
//! to first byte of a streamed fill). Damage on the medium is caught by every lookup after the
//! write finished; what a tailing reader could miss is a block rewritten behind this process's
//! back (another writer of the cache directory) or lost from the page cache and misread.
//!
//! Why XXH3-64 per block: it is the fastest well-reviewed non-cryptographic hash available in
//! the lock file already (via `redis`), 64 bits make an accidental match negligible, and
//! per-block sums let range reads and mid-stream reads verify without reading the whole body
//! (a whole-body CRC could only say "bad" after serving every byte). The table costs 8 bytes per
//! 64 KiB (0.012%). It is not a defence against an attacker who can write the cache directory.
//!
//! Capacity: every byte written to a file (body, table, header, tail) is charged when it is
//! written (the header's when the write begins), so the capacity holds at all times, counting
//! writes in progress. To make room, complete objects are evicted (CLOCK with a referenced
//! bit, as `MemStorage`); a write that cannot get room because everything else is in progress
//! aborts with `NoRoom` (the same body may fit later). Evicting unlinks the file: readers that have it open keep reading
//! it (Unix keeps an unlinked file alive while it is open; on Windows std opens files with
//! delete sharing, so the name goes and the data stays until the last handle closes). Such
//! files occupy disk until their readers finish, without being charged.
//!
//! Durability (`Durability::Full`, the default). When `finish` returns `Ok`:
//! - the file's bytes (body, block table, header with its final body length, tail) were written
//!   and `fdatasync`ed *before* its rename into its subdirectory: a name under `objects/` never
//!   points at a file whose blocks were not yet on stable storage (`fdatasync` flushes the data
//!   and what is needed to read it back, size and block map; not the timestamps, which nothing
//!   reads);
//! - the subdirectory it was renamed into was `fsync`ed *after* the rename: the object survives
//!   a power loss. That fsync also makes every earlier unlink in that subdirectory durable (the
//!   replaced object of the same key included: it lived in the same subdirectory);
//! - the subdirectory's own entry is durable: `open` creates all 256 and fsyncs `objects/`
//!   (and the root when it created `objects/` or `tmp/`, and the root's parent when it created
//!   the root) before it returns, at every open, so subdirectories a `Durability::None` run
//!   created are covered too (test `open_makes_the_subdirectories_durable`).
//!
//! That is one file `fdatasync` and one directory `fsync` per finished object (test
//! `directory_syncs_per_finish_and_purge`). The file is written by position from the blocking
//! pool, one trip per chunk with no staging copy, and the block table, header, tail and
//! `fdatasync` take one trip at `finish`. With the flush a 16 MiB object costs 0.95-1.10x a
//! bare `tokio::fs` write + `sync_all` in most runs on this machine (1.3x in one of seven),
//! although the
//! protocol needs a new file (whose first sync also writes its directory entry on ext4 without
//! a journal) and a second, ordered flush for the rename that a rewrite + `sync_all` does not
//! (docs/benchmarks.md, "DiskStorage benchmarks", measures each part). Directory fsyncs are
//! not batched across concurrent finishes: measured here one costs 0.1-0.2 ms against 5-9 ms
//! for the file's `fdatasync`.
//!
//! `purge` fsyncs the subdirectory of the key's files before it returns whenever an object file
//! in that subdirectory was unlinked since the last fsync of it began (its own, or an
//! eviction's: an evicted copy of the key that came back after a power loss would undo the
//! purge). Every file the key ever had lives in that subdirectory, so one fsync covers them
//! all, and unsynced unlinks elsewhere cannot concern it: the rule is tracked per
//! subdirectory (tests `purge_syncs_an_eviction_not_yet_synced`,
//! `purge_syncs_the_subdirectory_with_the_unsynced_unlink`).
//! Evictions, expiries and replacements alone are not synced: a file that reappears after a
//! crash is a complete, verified object nobody purged; the scan keeps the newest per key and
//! re-applies the capacity. So a key whose replacement began but never finished can come back
//! with its previous (valid) object after a power loss; `purge` it if that must not happen.
//! `Durability::None` skips every fsync: faster, and a crash may lose recent objects or bring
//! back purged ones (never serve a wrong one: the checksums still hold).
//!
//! Restart: `open` deletes every temp file, then walks `objects/` and its subdirectories once,
//! reading each object file's header, table and tail (not its body): invalid files are removed,
//! expired ones too, files of the flat layout are moved into place, and the index and used
//! bytes are rebuilt; if the files exceed the capacity, the oldest are evicted before `open`
//! returns. With `Durability::Full` every subdirectory the scan changed is fsynced before
//! `open` returns.
//!
//! Locking: the index (current writes, complete objects, CLOCK, used bytes) is one mutex; cheap
//! metadata syscalls (`rename`) run inside it so they are ordered with lookups; unlinks (which
//! free a file's blocks: milliseconds for a large one) run right after it is released
//! (`disk/trash.rs`: a removed file is first renamed into `tmp/` under the lock); fsyncs and
//! body bytes run outside it (tokio's fs, the blocking pool). Readers read by position
//! (`pread`), so a rename or unlink of the file under them does not disturb them.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::Context;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use xxhash_rust::xxh3::{Xxh3Default, xxh3_64};

use crate::cell::{BodyCell, CellLimits, Cursor, Ready};
use crate::error::{BodyError, StorageError, WriteError};
use crate::fence::{Admission, FenceTable, WriteFence};
use crate::state::{AbortReason, WriteState};
use crate::traits::{
    BodyReader, BodySource, BodyWriter, ByteRange, CacheKey, Capabilities, Hit, ObjectMeta,
    Storage, StorageUsage,
};

mod layout;
mod trash;

use layout::{Layout, SUBDIRS, subdir_of, sync_dir};

const HEAD_MAGIC: &[u8; 8] = b"HERDSC03";
const TAIL_MAGIC: &[u8; 8] = b"HERDEND3";
/// The format before the header moved behind the body (still read, never written).
const HEAD_MAGIC_V2: &[u8; 8] = b"HERDSC02";
const TAIL_MAGIC_V2: &[u8; 8] = b"HERDEND2";
/// Magic, key length, meta length, declared length, expiry, body length.
const HEAD_FIXED: u64 = 8 + 4 + 4 + 8 + 8 + 8;
/// Where the header's body length sits (filled in by `finish`).
const BODY_LEN_AT: u64 = 32;
/// Header length, body length, checksum, magic.
const TAIL_FIXED: u64 = 8 + 8 + 8 + 8;
/// Body length, checksum, magic (version 2).
const TAIL_FIXED_V2: u64 = 8 + 8 + 8;
const NONE: u64 = u64::MAX;
/// Checksum block size.
pub(crate) const BLOCK: u64 = 64 * 1024;
/// Checksum blocks a verifying read fetches and checks at once (256 KiB).
const VERIFIED_READ_BLOCKS: u64 = 4;
/// Largest chunk a read of a write in progress returns.
const READ_CHUNK: u64 = 64 * 1024;
/// Key and meta bytes an object at the size limit may carry and still fit in the capacity (at
/// most an eighth of the capacity; a larger header can make such a write abort with
/// `TooLarge { limit: capacity }`).
const KEY_META_ALLOWANCE: u64 = 64 * 1024;
/// Stale CLOCK records tolerated beyond one per object before compaction (as `MemStorage`).
const CLOCK_SLACK: usize = 16;

/// Whether `DiskStorage` flushes to stable storage (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// `fdatasync` each finished file before its rename and fsync its directory after it; a
    /// purge fsyncs the key's directory whenever an unlink in it is not yet durable: a finished object
    /// survives a power loss, a purged one stays purged (the default; see the module docs).
    #[default]
    Full,
    /// No fsync: a crash may lose objects finished shortly before it (or bring back a purged
    /// one); what is served is still verified byte-exact. For caches that would rather refill.
    None,
}

/// Options for [`DiskStorage`]: `DiskStorage::builder(root, capacity)...open().await`.
#[derive(Debug, Clone)]
pub struct DiskStorageBuilder {
    root: PathBuf,
    capacity: u64,
    max_object_size: Option<u64>,
    durability: Durability,
}

impl DiskStorageBuilder {
    /// The largest body accepted (a larger declared length is refused, a larger body aborts
    /// with `TooLarge`). Never more than the capacity minus a file's overhead (header with up
    /// to 64 KiB (at most an eighth of the capacity) of key and meta, block table, tail), which
    /// is also the default.
    pub fn max_object_size(mut self, limit: u64) -> Self {
        self.max_object_size = Some(limit);
        self
    }

    /// Flush policy (default [`Durability::Full`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Open (creating if needed) the storage: deletes leftover temp files, scans the objects
    /// (header, table and tail of each, not the body), removes invalid and expired ones, and
    /// evicts down to the capacity. Fails with `StorageError::NoRuntime` outside a tokio
    /// runtime.
    ///
    /// Use one `DiskStorage` per directory (clone it to share): `open` deletes every temp file
    /// in the directory, including those of another live instance.
    ///
    /// Cancel safety: the scan runs on the blocking pool and finishes even if the future is
    /// dropped; nothing is opened; the next `open` scans again.
    pub async fn open(self) -> Result<DiskStorage, StorageError> {
        need_runtime()?;
        let objects = self.root.join("objects");
        let tmp = self.root.join("tmp");
        let durability = self.durability;
        let capacity = self.capacity;
        let layout = Layout::new(objects, tmp.clone());
        let scan = {
            let layout = layout.clone();
            let root = self.root.clone();
            let tmp = tmp.clone();
            blocking(move || scan(&root, &layout, &tmp, capacity, durability)).await?
        };
        // An object at the limit must fit in the capacity with its header (key and meta up to
        // `KEY_META_ALLOWANCE`), block table and tail.
        let overhead = HEAD_FIXED
            + TAIL_FIXED
            + 8 * blocks_for(capacity)
            + KEY_META_ALLOWANCE.min(capacity / 8);
        let max_object_size = self
            .max_object_size
            .unwrap_or(u64::MAX)
            .min(capacity.saturating_sub(overhead));
        // The scan synced whatever it removed (`Durability::Full`), but not what the previous
        // run unlinked without a sync yet (an eviction, a replacement): a power loss can still
        // bring those files back. So a subdirectory that existed before and that the scan did
        // not sync starts with one unlink not known to be synced, and the first purge of a key
        // in it syncs it (a purge after a restart used to find "nothing unsynced" and return
        // without one).
        let mut scan = scan;
        let dir_synced: Box<[AtomicU64]> = scan
            .index
            .unlinks
            .iter()
            .copied()
            .map(AtomicU64::new)
            .collect();
        for (unlinks, &unsynced) in scan.index.unlinks.iter_mut().zip(&scan.unsynced) {
            *unlinks += u64::from(unsynced);
        }
        Ok(DiskStorage {
            shared: Arc::new(DiskShared {
                root: self.root,
                layout,
                tmp,
                index: Mutex::new(scan.index),
                fences: FenceTable::new(),
                next_seq: AtomicU64::new(scan.next_seq),
                dir_synced,
                dir_syncs: AtomicU64::new(scan.dir_syncs),
                #[cfg(test)]
                fail_next_dir_sync: AtomicBool::new(false),
                #[cfg(test)]
                hold_next_create: parking_lot::Mutex::new(None),
                #[cfg(test)]
                hold_next_dir_sync: parking_lot::Mutex::new(None),
                capacity,
                max_object_size,
                durability,
            }),
        })
    }
}

/// File-backed storage. Cheap to clone (shared state behind an `Arc`). See the module docs for
/// the format, capacity, durability and restart rules.
#[derive(Clone, Debug)]
pub struct DiskStorage {
    shared: Arc<DiskShared>,
}

#[derive(Debug)]
struct DiskShared {
    root: PathBuf,
    layout: Layout,
    tmp: PathBuf,
    /// Lock order: `index`, then `fences`.
    index: Mutex<Index>,
    fences: FenceTable,
    next_seq: AtomicU64,
    /// Per object subdirectory: `Index::unlinks` as it was when the last successful fsync of
    /// that subdirectory started: every unlink in it counted up to there is durable.
    dir_synced: Box<[AtomicU64]>,
    /// Directory fsyncs done, the restart scan's included (for tests of the durability rules).
    dir_syncs: AtomicU64,
    /// Makes the next object-directory fsync fail (tests of a failed durable `finish`).
    #[cfg(test)]
    fail_next_dir_sync: AtomicBool,
    /// Holds the next `begin_write`'s file creation on the blocking pool until the sender
    /// sends (tests of what happens inside that await, whatever the scheduler does).
    #[cfg(test)]
    hold_next_create: parking_lot::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    /// Holds the next directory fsync on the blocking pool until the sender sends.
    #[cfg(test)]
    hold_next_dir_sync: parking_lot::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    capacity: u64,
    max_object_size: u64,
    durability: Durability,
}

#[derive(Debug)]
struct Index {
    /// Writes in progress that are the key's current write.
    active: HashMap<CacheKey, Arc<ActiveWrite>>,
    /// Complete objects.
    objects: HashMap<CacheKey, Stored>,
    /// CLOCK order of complete objects as (key, seq); stale records are skipped and compacted.
    clock: VecDeque<(CacheKey, u64)>,
    /// Bytes of every object file plus every temp file written so far.
    used: u64,
    /// The part of `used` that complete objects hold: all eviction can free.
    complete: u64,
    /// Per object subdirectory: object files unlinked in it so far (evictions, replacements,
    /// purges, expiries): compared with `DiskShared::dir_synced` to know whether an unlink may
    /// still be undone by a power loss.
    unlinks: Vec<u64>,
    /// Object files removed under the lock, renamed into `tmp/`, to be unlinked once it is
    /// released (`disk/trash.rs`).
    trash: Vec<PathBuf>,
}

#[derive(Debug)]
struct Stored {
    seq: u64,
    /// The file's length, as charged.
    len: u64,
    expires_ms: Option<u64>,
    referenced: bool,
}

/// One write (current or superseded), shared by its writer and the readers bound to it.
#[derive(Debug)]
struct ActiveWrite {
    seq: u64,
    meta: ObjectMeta,
    cell: Arc<BodyCell>,
    /// The temp file, opened read-write: the writer writes by position, readers read by
    /// position (one handle, one `open` per write).
    file: Arc<std::fs::File>,
    body_offset: u64,
    tmp_path: PathBuf,
    /// Bytes of its temp file charged to `Index::used`; changed under the index lock only.
    charged: AtomicU64,
    /// Set (under the index lock) once `finish` renamed the temp file to its object path,
    /// before the object is published: an abort from then on removes that file instead.
    renamed: AtomicBool,
}

impl ActiveWrite {
    /// Where this write's file is now (read under the index lock).
    fn file_path(&self, layout: &Layout, key: &CacheKey) -> PathBuf {
        match self.renamed.load(Ordering::Relaxed) {
            true => layout.object_path(key, self.seq),
            false => self.tmp_path.clone(),
        }
    }
}

fn io_error(error: io::Error) -> AbortReason {
    AbortReason::Storage(Arc::new(error))
}

fn remove_quietly(path: &Path) {
    debug_assert!(
        !trash::holds_index_lock(),
        "{} unlinked under the index lock (disk/trash.rs)",
        path.display()
    );
    if let Err(error) = std::fs::remove_file(path)
        && error.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), %error, "stream-cache: could not remove file");
    }
}

fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        std::os::windows::fs::FileExt::seek_read(file, buf, offset)
    }
}

/// Write all of `buf` at `offset` (by position: no shared cursor, so readers of the same handle
/// are not disturbed).
fn write_all_at(file: &std::fs::File, buf: &[u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        let (mut buf, mut offset) = (buf, offset);
        while !buf.is_empty() {
            match std::os::windows::fs::FileExt::seek_write(file, buf, offset)? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }
}

fn read_exact_at(file: &std::fs::File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match read_at(file, buf, offset)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

fn le_u32(bytes: &[u8]) -> u64 {
    u64::from(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
}

fn le_u64(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
}

fn unix_ms(time: SystemTime) -> u64 {
    // Before 1970 counts as already expired; far future saturates below NONE.
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(NONE - 1))
        .min(NONE - 1)
}

fn now_ms() -> u64 {
    unix_ms(SystemTime::now())
}

fn encode_header(key: &CacheKey, meta: &ObjectMeta) -> io::Result<Vec<u8>> {
    let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "key or meta longer than 4 GiB");
    let key_len = u32::try_from(key.as_bytes().len()).map_err(|_| too_big())?;
    let meta_len = u32::try_from(meta.user.len()).map_err(|_| too_big())?;
    let mut header = Vec::with_capacity(HEAD_FIXED as usize + key_len as usize + meta_len as usize);
    header.extend_from_slice(HEAD_MAGIC);
    header.extend_from_slice(&key_len.to_le_bytes());
    header.extend_from_slice(&meta_len.to_le_bytes());
    header.extend_from_slice(&meta.expected_len.unwrap_or(NONE).to_le_bytes());
    header.extend_from_slice(&meta.expires_at.map_or(NONE, unix_ms).to_le_bytes());
    header.extend_from_slice(&NONE.to_le_bytes());
    header.extend_from_slice(key.as_bytes());
    header.extend_from_slice(&meta.user);
    Ok(header)
}

/// The checksum in the tail: header (with its final body length) + block table + body length.
fn footer_sum(header: &[u8], table: &[u8], body_len: u64) -> u64 {
    let mut hasher = Xxh3Default::new();
    hasher.update(header);
    hasher.update(table);
    hasher.update(&body_len.to_le_bytes());
    hasher.digest()
}

fn blocks_for(body_len: u64) -> u64 {
    body_len.div_ceil(BLOCK)
}

/// A validated complete object file.
struct StoredObject {
    key: CacheKey,
    meta: ObjectMeta,
    expires_ms: Option<u64>,
    body_offset: u64,
    body_len: u64,
    file_len: u64,
    blocks: Arc<[u64]>,
    file: std::fs::File,
}

enum Opened {
    Missing,
    /// Torn, foreign, mismatched or corrupt: never served, removed by the caller.
    Invalid(&'static str),
    Valid(StoredObject),
}

/// Open and validate `path` as a complete object (see the module docs for every check). Reads
/// both formats: the current one (body first) and version 2 (header first).
fn open_stored(path: &Path) -> io::Result<Opened> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Opened::Missing),
        Err(error) => return Err(error),
    };
    let file_len = file.metadata()?.len();
    if file_len < HEAD_FIXED + TAIL_FIXED_V2 {
        return Ok(Opened::Invalid("shorter than header and tail"));
    }
    let mut magic = [0u8; 8];
    read_exact_at(&file, &mut magic, file_len - 8)?;
    let v3 = match &magic {
        m if m == TAIL_MAGIC => true,
        m if m == TAIL_MAGIC_V2 => false,
        _ => return Ok(Opened::Invalid("tail magic")),
    };
    let (tail_len, head_magic) = if v3 {
        (TAIL_FIXED, HEAD_MAGIC)
    } else {
        (TAIL_FIXED_V2, HEAD_MAGIC_V2)
    };
    if file_len < HEAD_FIXED + tail_len {
        return Ok(Opened::Invalid("shorter than header and tail"));
    }
    let mut tail = [0u8; TAIL_FIXED as usize];
    let tail = &mut tail[..tail_len as usize];
    read_exact_at(&file, tail, file_len - tail_len)?;
    let fields = if v3 { &tail[8..] } else { &tail[..] };
    let body_len = le_u64(&fields[..8]);
    let sum = le_u64(&fields[8..16]);
    let Some(table_len) = blocks_for(body_len).checked_mul(8) else {
        return Ok(Opened::Invalid("file length differs from header and tail"));
    };
    // Version 3: body, table, header, tail. Version 2: header, body, table, tail.
    let header_at = if v3 {
        match body_len.checked_add(table_len) {
            Some(at) if at.saturating_add(HEAD_FIXED) <= file_len => at,
            _ => return Ok(Opened::Invalid("file length differs from header and tail")),
        }
    } else {
        0
    };
    let mut fixed = [0u8; HEAD_FIXED as usize];
    read_exact_at(&file, &mut fixed, header_at)?;
    if &fixed[..8] != head_magic {
        return Ok(Opened::Invalid("header magic"));
    }
    let key_len = le_u32(&fixed[8..12]);
    let meta_len = le_u32(&fixed[12..16]);
    let declared = le_u64(&fixed[16..24]);
    let expires = le_u64(&fixed[24..32]);
    let head_body_len = le_u64(&fixed[32..40]);
    if head_body_len != body_len {
        return Ok(Opened::Invalid(
            "header and tail disagree on the body length",
        ));
    }
    let header_len = HEAD_FIXED + key_len + meta_len;
    if v3 && le_u64(&tail[..8]) != header_len {
        return Ok(Opened::Invalid(
            "header and tail disagree on the header length",
        ));
    }
    let expected_len = header_len
        .checked_add(body_len)
        .and_then(|n| n.checked_add(table_len))
        .and_then(|n| n.checked_add(tail_len));
    if expected_len != Some(file_len) {
        return Ok(Opened::Invalid("file length differs from header and tail"));
    }
    let mut header = vec![0u8; header_len as usize];
    read_exact_at(&file, &mut header, header_at)?;
    let (body_offset, table_at) = if v3 {
        (0, body_len)
    } else {
        (header_len, header_len + body_len)
    };
    let mut table = vec![0u8; table_len as usize];
    read_exact_at(&file, &mut table, table_at)?;
    if footer_sum(&header, &table, body_len) != sum {
        return Ok(Opened::Invalid("header or block table checksum"));
    }
    if declared != NONE && declared != body_len {
        return Ok(Opened::Invalid(
            "declared length differs from the body length",
        ));
    }
    let key_end = (HEAD_FIXED + key_len) as usize;
    let key = CacheKey::from(&header[HEAD_FIXED as usize..key_end]);
    let expires_ms = (expires != NONE).then_some(expires);
    let blocks: Arc<[u64]> = table.chunks_exact(8).map(le_u64).collect();
    Ok(Opened::Valid(StoredObject {
        key,
        meta: ObjectMeta {
            expected_len: (declared != NONE).then_some(declared),
            user: Bytes::copy_from_slice(&header[key_end..]),
            expires_at: expires_ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        },
        expires_ms,
        body_offset,
        body_len,
        file_len,
        blocks,
        file,
    }))
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(no_runtime_io());
    }
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(join_error) => Err(io::Error::other(join_error)),
    }
}

/// `StorageError::NoRuntime` unless called inside a tokio runtime (file I/O needs its blocking
/// pool; tokio would panic).
fn need_runtime() -> Result<(), StorageError> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => Ok(()),
        Err(_) => Err(StorageError::NoRuntime),
    }
}

/// The io error a file operation outside a runtime fails with.
fn no_runtime_io() -> io::Error {
    io::Error::other("no tokio runtime: DiskStorage must be used inside one")
}

struct Scanned {
    index: Index,
    next_seq: u64,
    /// Directory fsyncs the scan did.
    dir_syncs: u64,
    /// Per subdirectory: it existed before this open and the scan did not sync it, so the
    /// last run's unlinks in it may not be durable.
    unsynced: Vec<bool>,
}

/// The restart scan (see the module docs). Runs on the blocking pool.
fn scan(
    root: &Path,
    layout: &Layout,
    tmp: &Path,
    capacity: u64,
    durability: Durability,
) -> io::Result<Scanned> {
    let new_root = !root.is_dir();
    let preexisting: Vec<bool> = (0..SUBDIRS)
        .map(|subdir| layout.subdir_path(subdir).is_dir())
        .collect();
    let mut created = layout.create_dirs()?;
    if !tmp.is_dir() {
        std::fs::create_dir_all(tmp)?;
        created = true;
    }
    for entry in std::fs::read_dir(tmp)? {
        let path = entry?.path();
        tracing::debug!(path = %path.display(), "stream-cache: removing leftover temp file");
        remove_quietly(&path);
    }
    let now = now_ms();
    // Per key: the newest file found (seq, length, expiry, where it is now).
    let mut found: HashMap<CacheKey, (u64, u64, Option<u64>, PathBuf)> = HashMap::new();
    let mut next_seq = 1;
    // Subdirectories whose entries changed (removals, moves in) and need a sync.
    let mut touched = vec![false; SUBDIRS];
    let mut note = |path: &Path| {
        if let Some(subdir) = layout.subdir_holding(path) {
            touched[subdir] = true;
        }
    };
    for (path, seq) in layout.list()? {
        let opened = open_stored(&path).unwrap_or_else(|error| {
            // Unreadable (EIO, EACCES, a directory by that name): one bad file must not keep
            // the whole storage from opening. Its seq still counts, so no new file takes its
            // name while it may linger.
            tracing::warn!(path = %path.display(), %error, "stream-cache: unreadable object");
            next_seq = next_seq.max(seq.saturating_add(1));
            Opened::Invalid("unreadable")
        });
        let stored = match opened {
            Opened::Missing => continue,
            Opened::Invalid(why) => {
                tracing::info!(path = %path.display(), why, "stream-cache: removing invalid object");
                remove_quietly(&path);
                note(&path);
                continue;
            }
            Opened::Valid(stored) => stored,
        };
        // Only a valid file's seq counts (a file named with seq `u64::MAX` overflowed this
        // addition: a panic in debug builds, from nothing but a file name).
        next_seq = next_seq.max(seq.saturating_add(1));
        // Two files for one key (one reappeared after a crash): the newer write wins, expired
        // or not (an expired newer version leaves the key a miss; checking expiry first
        // brought the older version back).
        let key = stored.key.clone();
        let entry = (seq, stored.file_len, stored.expires_ms, path);
        match found.get(&key) {
            Some((other, ..)) if *other >= seq => {
                remove_quietly(&entry.3);
                note(&entry.3);
            }
            _ => {
                if let Some(older) = found.insert(key, entry) {
                    remove_quietly(&older.3);
                    note(&older.3);
                }
            }
        }
    }
    let mut by_age: Vec<_> = found
        .into_iter()
        .filter(|(_, (_, _, expires_ms, path))| {
            let expired = expires_ms.is_some_and(|at| at <= now);
            if expired {
                remove_quietly(path);
                note(path);
            }
            !expired
        })
        .collect();
    by_age.sort_by_key(|(_, (seq, ..))| *seq);
    let mut index = Index::new();
    for (key, (seq, len, expires_ms, path)) in by_age {
        // A file of the flat layout of earlier versions (or one a person moved) goes where
        // this version looks for it.
        let home = layout.object_path(&key, seq);
        if path != home {
            std::fs::rename(&path, &home)?;
            note(&path);
            note(&home);
        }
        index.used += len;
        index.complete += len;
        index.clock.push_back((key.clone(), seq));
        index.objects.insert(
            key,
            Stored {
                seq,
                len,
                expires_ms,
                referenced: false,
            },
        );
    }
    // Oldest first: nothing is referenced yet. No one else sees this index yet: the files
    // it moves aside are unlinked at once (this runs on the blocking pool).
    index.make_room(0, capacity, layout);
    trash::reap(std::mem::take(&mut index.trash));
    let mut dir_syncs = 0;
    let mut sync = |dir: &Path| {
        dir_syncs += 1;
        sync_dir(dir)
    };
    let mut unsynced = preexisting;
    if durability == Durability::Full {
        // Every removal, move and new directory is durable before `open` returns (the
        // per-subdirectory counters start out synced). New directories need their parent
        // synced; the objects directory is synced at every open (once, cheap) so that
        // subdirectories created by a run with `Durability::None` are durable too.
        for (subdir, unlinked) in index.unlinks.iter().enumerate() {
            if *unlinked > 0 || touched[subdir] {
                sync(&layout.subdir_path(subdir))?;
                unsynced[subdir] = false;
            }
        }
        sync(layout.objects())?;
        if created {
            sync(root)?;
        }
        if new_root {
            let parent = root.parent().filter(|p| !p.as_os_str().is_empty());
            sync(parent.unwrap_or(Path::new(".")))?;
        }
    }
    Ok(Scanned {
        index,
        next_seq,
        dir_syncs,
        unsynced,
    })
}

impl Index {
    fn new() -> Self {
        Index {
            active: HashMap::new(),
            objects: HashMap::new(),
            clock: VecDeque::new(),
            used: 0,
            complete: 0,
            unlinks: vec![0; SUBDIRS],
            trash: Vec::new(),
        }
    }

    /// Remove the complete object of `key` from the index and its file from `objects/`: the
    /// file is renamed into `tmp/` here and unlinked once the lock is released
    /// (`disk/trash.rs`), because freeing a large file's blocks takes milliseconds (about
    /// 4 ms for 16 MiB here) that every lookup would otherwise wait out behind this lock. For
    /// the durability rules the rename is the unlink: the name leaves the subdirectory.
    fn drop_object(&mut self, key: &CacheKey, layout: &Layout) -> Option<Stored> {
        let stored = self.objects.remove(key)?;
        self.used -= stored.len;
        self.complete -= stored.len;
        self.discard_file(key, stored.seq, layout);
        self.compact_if_stale();
        Some(stored)
    }

    /// Moves the object file of `key`'s write `seq` out of `objects/` (into `tmp/`, unlinked
    /// once the lock is released) and counts the unlink its subdirectory's next purge must sync.
    fn discard_file(&mut self, key: &CacheKey, seq: u64, layout: &Layout) {
        let (path, trash) = (layout.object_path(key, seq), layout.trash_path(key, seq));
        match std::fs::rename(&path, &trash) {
            Ok(()) => self.trash.push(trash),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            // Could not move it aside (e.g. `tmp/` gone): unlink it where it is, still after
            // the lock is released.
            Err(_) => self.trash.push(path),
        }
        self.unlinks[subdir_of(key)] += 1;
    }

    fn compact_if_stale(&mut self) {
        if self.clock.len() <= 2 * self.objects.len() + CLOCK_SLACK {
            return;
        }
        let objects = &self.objects;
        self.clock
            .retain(|(key, seq)| objects.get(key).is_some_and(|s| s.seq == *seq));
    }

    /// Evict complete objects (CLOCK) until `extra` more bytes fit in `capacity`. Returns
    /// whether anything was evicted; the caller checks whether it fits now.
    fn make_room(&mut self, extra: u64, capacity: u64, layout: &Layout) -> bool {
        // Writes in progress hold the rest: if `extra` would not fit even with every complete
        // object gone, evict none (the write fails either way; it used to wipe the cache
        // first).
        if (self.used - self.complete).saturating_add(extra) > capacity {
            return false;
        }
        let mut evicted = false;
        while self.used.saturating_add(extra) > capacity {
            let Some((key, seq)) = self.clock.pop_front() else {
                break;
            };
            let Some(stored) = self.objects.get_mut(&key) else {
                continue;
            };
            if stored.seq != seq {
                continue;
            }
            // An expired object gets no second chance (the clock is read only for those).
            let expired = stored.expires_ms.is_some_and(|at| at <= now_ms());
            if stored.referenced && !expired {
                stored.referenced = false;
                self.clock.push_back((key, seq));
                continue;
            }
            self.drop_object(&key, layout);
            evicted = true;
        }
        evicted
    }
}

impl DiskStorage {
    /// Options for a storage under `root` holding at most `capacity` bytes of files.
    pub fn builder(root: impl AsRef<Path>, capacity: u64) -> DiskStorageBuilder {
        DiskStorageBuilder {
            root: root.as_ref().to_path_buf(),
            capacity,
            max_object_size: None,
            durability: Durability::Full,
        }
    }

    /// Open (creating if needed) storage under `root` bounded to `capacity` bytes of files,
    /// durable, with no per-object limit beyond the capacity. See
    /// [`DiskStorageBuilder::open`] (same errors and cancel safety).
    pub async fn open(root: impl AsRef<Path>, capacity: u64) -> Result<Self, StorageError> {
        Self::builder(root, capacity).open().await
    }

    /// The directory this storage lives in (what to reopen after a restart).
    pub fn root(&self) -> &Path {
        &self.shared.root
    }

    /// Number of writes in progress (current ones).
    pub fn writes_in_progress(&self) -> usize {
        self.shared.lock_index().active.len()
    }

    /// Number of complete objects.
    pub fn len(&self) -> usize {
        self.shared.lock_index().objects.len()
    }

    /// True when no complete object is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of files charged now (complete objects and writes in progress).
    pub fn used_bytes(&self) -> u64 {
        self.shared.lock_index().used
    }

    /// The byte capacity.
    pub fn capacity(&self) -> u64 {
        self.shared.capacity
    }

    /// Directory fsyncs done so far, `open`'s included (for tests of the durability rules).
    #[doc(hidden)]
    pub fn dir_syncs(&self) -> u64 {
        self.shared.dir_syncs.load(Ordering::Relaxed)
    }

    /// The subdirectory every file of `key` lives in (for tests of the layout).
    #[doc(hidden)]
    pub fn object_dir(&self, key: &CacheKey) -> PathBuf {
        self.shared.layout.subdir_path(subdir_of(key))
    }

    /// Whether an unlink in the subdirectory of `key`'s files may still be undone by a power
    /// loss (for tests of the durability rules).
    #[doc(hidden)]
    pub fn unsynced_unlinks(&self, key: &CacheKey) -> bool {
        let index = self.shared.lock_index();
        self.shared.unsynced(&index, subdir_of(key))
    }

    /// Records in the eviction queue (for tests of the bookkeeping bound).
    #[doc(hidden)]
    pub fn eviction_records(&self) -> usize {
        self.shared.lock_index().clock.len()
    }
}

impl DiskShared {
    /// fsync one object subdirectory (renames and unlinks in it survive a power loss).
    async fn sync_subdir(&self, subdir: usize) -> io::Result<()> {
        // Read before the fsync starts: the unlinks done by then are what it makes durable.
        let upto = self.lock_index().unlinks[subdir];
        #[cfg(test)]
        if self.fail_next_dir_sync.swap(false, Ordering::Relaxed) {
            return Err(io::Error::other("injected directory fsync failure"));
        }
        let dir = self.layout.subdir_path(subdir);
        #[cfg(test)]
        let held = self.hold_next_dir_sync.lock().take();
        blocking(move || {
            #[cfg(test)]
            if let Some(held) = held {
                let _ = held.recv();
            }
            sync_dir(&dir)
        })
        .await?;
        self.dir_synced[subdir].fetch_max(upto, Ordering::Relaxed);
        self.dir_syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Whether an unlink in `subdir` may still be undone by a power loss.
    fn unsynced(&self, index: &Index, subdir: usize) -> bool {
        index.unlinks[subdir] > self.dir_synced[subdir].load(Ordering::Relaxed)
    }

    /// Give back a write's charged bytes (once: the charge is swapped out).
    fn release(index: &mut Index, write: &ActiveWrite) {
        index.used -= write.charged.swap(0, Ordering::Relaxed);
    }

    /// Charges a new write's head (`len` bytes), evicting complete objects to make room; with
    /// none, aborts the write (`NoRoom`, which `begin_write` turns into the error `NoRoom`).
    /// Returns whether it was charged.
    fn charge_head(&self, index: &mut Index, write: &ActiveWrite, len: u64) -> bool {
        index.make_room(len, self.capacity, &self.layout);
        if index.used + len > self.capacity {
            write.cell.abort(self.no_room(0, len));
            return false;
        }
        index.used += len;
        write.charged.store(len, Ordering::Relaxed);
        true
    }

    /// Charge `n` more bytes of `write`'s temp file, evicting complete objects to make room.
    fn reserve(&self, write: &ActiveWrite, n: u64) -> Result<(), AbortReason> {
        let mut index = self.lock_index();
        if let WriteState::Aborted(reason) = write.cell.state() {
            return Err(reason);
        }
        index.make_room(n, self.capacity, &self.layout);
        if index.used.saturating_add(n) > self.capacity {
            return Err(self.no_room(write.charged.load(Ordering::Relaxed), n));
        }
        index.used += n;
        write.charged.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// Why a write that has `charged` bytes cannot get `n` more: `TooLarge` if it alone would
    /// outgrow the capacity, else `NoRoom` (writes in progress hold the room; the same body may
    /// fit later).
    fn no_room(&self, charged: u64, n: u64) -> AbortReason {
        if charged.saturating_add(n) > self.capacity {
            AbortReason::TooLarge {
                limit: self.capacity,
            }
        } else {
            AbortReason::NoRoom {
                capacity: self.capacity,
            }
        }
    }

    /// Abort a write, unindex it (in that order, under the index lock), give back its bytes and
    /// delete its temp file.
    fn abort_write(&self, key: &CacheKey, write: &ActiveWrite, reason: AbortReason) {
        let path = {
            let mut index = self.lock_index();
            write.cell.abort(reason);
            if index
                .active
                .get(key)
                .is_some_and(|current| current.seq == write.seq)
            {
                index.active.remove(key);
            }
            Self::release(&mut index, write);
            if write.renamed.load(Ordering::Relaxed) {
                // A durable `finish` renamed it into place and was dropped (or failed) while
                // syncing that name: the name may be durable, so its removal is an unlink the
                // next purge of the subdirectory must sync. Moved out of `objects/` and counted
                // under the lock, as an evicted object's, so a purge that takes it next sees
                // both (left uncounted, that purge returned without an fsync, and a power loss
                // brought the object back).
                index.discard_file(key, write.seq, &self.layout);
                return;
            }
            write.tmp_path.clone()
        };
        remove_quietly(&path);
    }

    /// Drop a complete object found corrupt by a reader (if it is still the key's object).
    fn drop_corrupt(&self, key: &CacheKey, seq: u64) {
        let mut index = self.lock_index();
        if index.objects.get(key).is_some_and(|s| s.seq == seq) {
            tracing::warn!(?key, "stream-cache: dropping a corrupt object");
            index.drop_object(key, &self.layout);
        }
    }
}

/// Removes a temp file unless disarmed: makes `begin_write` cancel-safe.
struct TempFileGuard {
    path: Option<PathBuf>,
    /// Set when the guard removes the file, for the blocking task that creates it: dropped
    /// while that task is still queued on the blocking pool, the guard finds no file to
    /// remove, and the task, which runs anyway, must remove what it then creates (it leaked
    /// one temp file per cancelled `begin_write` until the next `open`).
    abandoned: Arc<AtomicBool>,
}

impl Drop for TempFileGuard {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            self.abandoned.store(true, Ordering::SeqCst);
            remove_quietly(&path);
        }
    }
}

#[async_trait]
impl Storage for DiskStorage {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
            .with_partial_reads(true)
            .with_range_reads(true)
            .with_max_object_size(Some(self.shared.max_object_size))
            .with_persistent(true)
            .with_expiry(true)
    }

    fn usage(&self) -> Option<StorageUsage> {
        Some(StorageUsage {
            used_bytes: self.used_bytes(),
            capacity_bytes: Some(self.shared.capacity),
        })
    }

    /// Cancel safety: the index check takes no await; dropping the future while the complete
    /// file is opened and validated (on the blocking pool) changes nothing (its index entry
    /// counts as referenced): an invalid file that open would have found stays until the next
    /// lookup of the key finds it and removes it.
    async fn lookup(&self, key: &CacheKey) -> Result<Option<Hit>, StorageError> {
        need_runtime()?;
        let seq = {
            let mut index = self.shared.lock_index();
            if let Some(write) = index.active.get(key)
                && write
                    .meta
                    .expires_at
                    .is_none_or(|at| at > SystemTime::now())
            {
                // Attached before the state is read, as `MemStorage::lookup` (an abort made
                // only while no reader is attached is then prevented or seen).
                let cursor = write.cell.cursor();
                if !matches!(write.cell.state(), WriteState::Aborted(_)) {
                    return Ok(Some(Hit {
                        meta: write.meta.clone(),
                        body: Box::new(DiskReader::tailing(
                            cursor,
                            Arc::clone(&write.file),
                            write.body_offset,
                        )),
                    }));
                }
            }
            let Some(stored) = index.objects.get_mut(key) else {
                return Ok(None);
            };
            // The clock is read only for objects that expire.
            if stored.expires_ms.is_some_and(|at| at <= now_ms()) {
                index.drop_object(key, &self.shared.layout);
                return Ok(None);
            }
            stored.referenced = true;
            stored.seq
        };
        let path = self.shared.layout.object_path(key, seq);
        // The outer error is the runtime's (no runtime, a failed blocking task); the inner one
        // the file's, which makes this object unreadable: dropped like a corrupt one (it used
        // to fail this key's every lookup, and so every fill of it, until a restart).
        let opened = blocking(move || Ok(open_stored(&path))).await?;
        let opened = opened.unwrap_or_else(|error| {
            tracing::warn!(?key, %error, "stream-cache: unreadable object");
            Opened::Invalid("unreadable")
        });
        let stored = match opened {
            Opened::Valid(stored) if stored.key == *key => stored,
            Opened::Missing => return Ok(None),
            Opened::Valid(_) | Opened::Invalid(_) => {
                // Removed (file and index entry) so the next lookup is a clean miss.
                self.shared.drop_corrupt(key, seq);
                return Ok(None);
            }
        };
        Ok(Some(Hit {
            meta: stored.meta,
            body: Box::new(DiskReader {
                cursor: BodyCell::completed(stored.body_len).cursor(),
                file: Arc::new(stored.file),
                body_offset: stored.body_offset,
                verify: Some(Verify {
                    blocks: stored.blocks,
                    body_len: stored.body_len,
                    owner: Arc::downgrade(&self.shared),
                    key: key.clone(),
                    seq,
                }),
                corrupt: false,
            }),
        }))
    }

    fn fence(&self, key: &CacheKey) -> WriteFence {
        self.shared.fences.fence(key)
    }

    /// Cancel safety: if dropped before it returns, the temp file is removed (guard) and the
    /// index is untouched: the index changes only in the final, await-free step, which is also
    /// where the fence is checked and the header's bytes are charged.
    async fn begin_write_fenced(
        &self,
        key: &CacheKey,
        meta: ObjectMeta,
        fence: WriteFence,
    ) -> Result<Box<dyn BodyWriter>, StorageError> {
        if !self.shared.fences.issued(&fence, key) {
            return Err(StorageError::ForeignFence);
        }
        need_runtime()?;
        let limit = self.shared.max_object_size;
        if let Some(declared) = meta.expected_len
            && declared > limit
        {
            return Err(StorageError::TooLarge { limit, declared });
        }
        let shared = &self.shared;
        let seq = shared.next_seq.fetch_add(1, Ordering::Relaxed);
        let tmp_path = shared
            .tmp
            .join(format!("{seq:016x}-{}.tmp", std::process::id()));
        let mut guard = TempFileGuard {
            path: Some(tmp_path.clone()),
            abandoned: Arc::new(AtomicBool::new(false)),
        };
        let header = encode_header(key, &meta)?;
        // One trip to the blocking pool. The body starts at offset 0 (64 KiB chunks land on
        // page-cache folio boundaries); the header is written by `finish`, with its final body
        // length, after the block table, in the same trip. Its bytes are charged now.
        let file = {
            let (path, abandoned) = (tmp_path.clone(), Arc::clone(&guard.abandoned));
            #[cfg(test)]
            let held = shared.hold_next_create.lock().take();
            blocking(move || {
                #[cfg(test)]
                if let Some(held) = held {
                    let _ = held.recv();
                }
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&path)?;
                // After creating, before the guard could see it (both `SeqCst`): either the
                // guard's removal comes after this file exists, or this sees the flag.
                if abandoned.load(Ordering::SeqCst) {
                    remove_quietly(&path);
                }
                Ok(file)
            })
            .await?
        };
        let write = Arc::new(ActiveWrite {
            seq,
            cell: BodyCell::new(
                false,
                CellLimits {
                    expected_len: meta.expected_len,
                    max_len: Some(limit),
                },
            ),
            meta,
            file: Arc::new(file),
            body_offset: 0,
            tmp_path,
            charged: AtomicU64::new(0),
            renamed: AtomicBool::new(false),
        });
        {
            let mut index = shared.lock_index();
            let no_room = (index.used - index.complete) + header.len() as u64 > shared.capacity;
            // A write refused for room is not visible: it must not fence out an older write of
            // the key that could still be stored (`check` records nothing).
            let admission = match no_room {
                true => shared.fences.check(&fence),
                false => shared.fences.admit(&fence),
            };
            if admission == Admission::Admitted && no_room {
                // No room even if every complete object went (writes in progress hold it):
                // refused before anything is dropped, so the key's previous object stays.
                write.cell.abort(shared.no_room(0, header.len() as u64));
            } else if admission == Admission::Admitted {
                // Replacing: the previous object stops being visible now (its readers keep
                // their open files). A previous write in progress keeps going for the readers
                // bound to it but will not publish.
                index.drop_object(key, &shared.layout);
                if shared.charge_head(&mut index, &write, header.len() as u64) {
                    index.active.insert(key.clone(), Arc::clone(&write));
                }
            } else if admission == Admission::Purged {
                write.cell.abort(AbortReason::Purged);
            } else {
                // Superseded: never indexed, but its file is real disk space, which must fit
                // as any write's (it was charged without a check, one head over capacity).
                shared.charge_head(&mut index, &write, header.len() as u64);
            }
        }
        drop(fence);
        if let WriteState::Aborted(AbortReason::NoRoom { .. } | AbortReason::TooLarge { .. }) =
            write.cell.state()
        {
            // Refused for room: an error, not a writer born aborted, so a caller that would
            // publish it (`StreamCache`) has nothing to hand its readers but the refusal (its
            // readers got a body that failed at its first byte). The guard removes the file.
            return Err(StorageError::NoRoom {
                capacity: shared.capacity,
            });
        }
        let born_aborted = write.cell.state().is_terminal();
        if !born_aborted {
            // A write born aborted (purged) has its temp file removed by the guard.
            guard.path = None;
        }
        Ok(Box::new(DiskWriter {
            shared: Arc::clone(shared),
            key: key.clone(),
            end: 0,
            write,
            header,
            blocks: Vec::new(),
            block_hasher: Xxh3Default::new(),
            block_fill: 0,
            done: born_aborted,
            in_flight: false,
        }))
    }

    /// With `Durability::Full` the subdirectory of the key's files is fsynced before `purge`
    /// returns whenever an object file in it was unlinked since its last fsync: this key's, or
    /// any other there (an eviction is not synced by itself, and an evicted copy of this key
    /// that reappeared after a power loss would undo the purge).
    ///
    /// Cancel safety: the purge is applied in the first poll; with `Durability::Full` it then
    /// fsyncs the subdirectory on the blocking pool: dropped there, the purge holds in this process
    /// but may not survive a power loss.
    async fn purge(&self, key: &CacheKey) -> Result<bool, StorageError> {
        self.remove(key, true).await
    }

    /// As `purge`, but a write in progress is detached, not aborted: it completes for the
    /// readers bound to it (their open file) and its `finish` finds it is no longer current,
    /// as a superseded write's does.
    ///
    /// Cancel safety: as `purge`.
    async fn invalidate(&self, key: &CacheKey) -> Result<bool, StorageError> {
        self.remove(key, false).await
    }
}

impl DiskStorage {
    /// `purge` (`abort`) or `invalidate`.
    async fn remove(&self, key: &CacheKey, abort: bool) -> Result<bool, StorageError> {
        let (removed, unsynced) = {
            let mut index = self.shared.lock_index();
            self.shared.fences.purge(key);
            let mut removed = false;
            if let Some(write) = index.active.remove(key) {
                // Its temp file stays charged until its writer goes (and removes it): the
                // bytes are on disk until then.
                if abort {
                    write.cell.abort(AbortReason::Purged);
                }
                if write.renamed.load(Ordering::Relaxed) {
                    // A durable `finish` renamed it into place and is syncing that name: its
                    // file is removed here, counted, so that this purge's fsync below makes
                    // the removal durable (left to the finish, it was unlinked unsynced, and
                    // a power loss brought the purged object back).
                    index.trash.push(write.file_path(&self.shared.layout, key));
                    index.unlinks[subdir_of(key)] += 1;
                }
                removed = true;
            }
            removed |= index.drop_object(key, &self.shared.layout).is_some();
            let unsynced = self.shared.unsynced(&index, subdir_of(key));
            (removed, unsynced)
        };
        if unsynced && self.shared.durability == Durability::Full {
            // Every file this key ever had lives in this one subdirectory: its own object's
            // unlink and any evicted or replaced copy's are made durable by this one fsync.
            self.shared.sync_subdir(subdir_of(key)).await?;
        }
        Ok(removed)
    }
}

/// Writer for one `DiskStorage` object.
struct DiskWriter {
    shared: Arc<DiskShared>,
    key: CacheKey,
    write: Arc<ActiveWrite>,
    /// Where the next body byte goes in the file.
    end: u64,
    /// The encoded header (its body length is filled in by `finish`).
    header: Vec<u8>,
    /// Checksums of the complete blocks so far.
    blocks: Vec<u64>,
    block_hasher: Xxh3Default,
    /// Bytes hashed into the current block.
    block_fill: u64,
    /// Set once the write reached a terminal state through this writer.
    done: bool,
    /// Set while file I/O is under way; still set on entry means a call was cancelled part-way.
    in_flight: bool,
}

impl std::fmt::Debug for DiskWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskWriter")
            .field("key", &self.key)
            .field("seq", &self.write.seq)
            .field("state", &self.write.cell.state())
            .finish_non_exhaustive()
    }
}

impl DiskWriter {
    fn fail(&mut self, reason: AbortReason) -> WriteError {
        self.done = true;
        self.shared
            .abort_write(&self.key, &self.write, reason.clone());
        // Report the write's actual terminal reason (an earlier abort wins).
        match self.write.cell.state() {
            WriteState::Aborted(actual) => WriteError::Aborted(actual),
            _ => WriteError::Aborted(reason),
        }
    }

    /// Feed body bytes into the per-block checksums.
    fn hash(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = (BLOCK - self.block_fill) as usize;
            let (head, rest) = bytes.split_at(room.min(bytes.len()));
            self.block_hasher.update(head);
            self.block_fill += head.len() as u64;
            if self.block_fill == BLOCK {
                self.blocks.push(self.block_hasher.digest());
                self.block_hasher = Xxh3Default::new();
                self.block_fill = 0;
            }
            bytes = rest;
        }
    }

    /// What follows a body of `len` bytes: block table, header (with its body length filled
    /// in) and tail.
    fn footer(&mut self, len: u64) -> Vec<u8> {
        if self.block_fill > 0 {
            self.blocks.push(self.block_hasher.digest());
            self.block_fill = 0;
        }
        self.header[BODY_LEN_AT as usize..(BODY_LEN_AT + 8) as usize]
            .copy_from_slice(&len.to_le_bytes());
        let mut table = Vec::with_capacity(self.blocks.len() * 8);
        for sum in &self.blocks {
            table.extend_from_slice(&sum.to_le_bytes());
        }
        let sum = footer_sum(&self.header, &table, len);
        let mut footer = table;
        footer.reserve(self.header.len() + TAIL_FIXED as usize);
        footer.extend_from_slice(&self.header);
        footer.extend_from_slice(&(self.header.len() as u64).to_le_bytes());
        footer.extend_from_slice(&len.to_le_bytes());
        footer.extend_from_slice(&sum.to_le_bytes());
        footer.extend_from_slice(TAIL_MAGIC);
        footer
    }
}

#[async_trait]
impl BodyWriter for DiskWriter {
    /// Cancel safety: dropping the future part-way leaves an unknown number of bytes in the
    /// file; the next call on this writer aborts the write with `Cancelled` (as does dropping it).
    async fn write(&mut self, chunk: Bytes) -> Result<(), WriteError> {
        if self.in_flight {
            return Err(self.fail(AbortReason::Cancelled));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(self.fail(io_error(no_runtime_io())));
        }
        if chunk.is_empty() {
            return match self.write.cell.state() {
                WriteState::Aborted(reason) => Err(self.fail(reason)),
                _ => Ok(()),
            };
        }
        let n = chunk.len() as u64;
        if let Err(reason) = self.write.cell.admit(n) {
            return Err(self.fail(reason));
        }
        if let Err(reason) = self.shared.reserve(&self.write, n) {
            return Err(self.fail(reason));
        }
        self.hash(&chunk);
        // The chunk moves to the blocking pool as it is (no copy into a staging buffer) and
        // is written by position in one trip.
        let file = Arc::clone(&self.write.file);
        let at = self.end;
        self.in_flight = true;
        let written = blocking(move || write_all_at(&file, &chunk, at)).await;
        self.in_flight = false;
        if let Err(error) = written {
            return Err(self.fail(io_error(error)));
        }
        self.end += n;
        match self.write.cell.advance(n) {
            Ok(_) => Ok(()),
            Err(reason) => Err(self.fail(reason)),
        }
    }

    /// Cancel safety: dropped part-way, the writer is dropped and the write aborted
    /// (`WriterDropped`), unless the completion was already applied; the temp file is removed.
    async fn finish(mut self: Box<Self>) -> Result<u64, WriteError> {
        if self.in_flight {
            return Err(self.fail(AbortReason::Cancelled));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(self.fail(io_error(no_runtime_io())));
        }
        let len = match self.write.cell.check_complete() {
            Ok(len) => len,
            Err(reason) => return Err(self.fail(reason)),
        };
        let footer = self.footer(len);
        // The header's bytes were charged by `begin_write`.
        let more = (footer.len() - self.header.len()) as u64;
        if let Err(reason) = self.shared.reserve(&self.write, more) {
            return Err(self.fail(reason));
        }
        let durable = self.shared.durability == Durability::Full;
        // Block table, header (with its body length), tail and, when durable, `fdatasync`:
        // one write and one trip to the blocking pool. `fdatasync` flushes the bytes and what
        // is needed to read them back (the file's size and block map), not its timestamps,
        // which nothing reads.
        let written = {
            let file = Arc::clone(&self.write.file);
            let at = self.end;
            self.in_flight = true;
            blocking(move || {
                write_all_at(&file, &footer, at)?;
                if durable {
                    file.sync_data()?;
                }
                Ok(())
            })
            .await
        };
        self.in_flight = false;
        if let Err(error) = written {
            return Err(self.fail(io_error(error)));
        }
        let shared = Arc::clone(&self.shared);
        let subdir = subdir_of(&self.key);
        // The file goes to its object path while it is still the key's current write, but the
        // object is published only once that name is durable (when it must be): `Ok` from a
        // durable `finish` means the object survives a power loss, and a failed directory sync
        // is this write's failure. (It used to publish first and only log a failed sync.)
        // Meanwhile the write stays in `active`: lookups keep tailing it.
        {
            let mut index = shared.lock_index();
            let current = index
                .active
                .get(&self.key)
                .is_some_and(|current| current.seq == self.write.seq);
            if !current {
                // Superseded or purged: this write completes for its own readers (unless it
                // was aborted) but never becomes the key's object.
                DiskShared::release(&mut index, &self.write);
                // Unlinked once the lock is released (`disk/trash.rs`): it may be large.
                index.trash.push(self.write.tmp_path.clone());
                self.done = true;
                let outcome = self.write.cell.complete().map_err(WriteError::Aborted);
                drop(index);
                return outcome;
            }
            let path = shared.layout.object_path(&self.key, self.write.seq);
            if let Err(error) = std::fs::rename(&self.write.tmp_path, &path) {
                drop(index);
                return Err(self.fail(io_error(error)));
            }
            self.write.renamed.store(true, Ordering::Relaxed);
        }
        // Cancel safety: dropped here, the writer's `Drop` aborts the write, which removes the
        // renamed file; nothing was published.
        if durable && let Err(error) = shared.sync_subdir(subdir).await {
            tracing::warn!(%error, "stream-cache: could not sync an object directory");
            return Err(self.fail(io_error(error)));
        }
        let mut index = shared.lock_index();
        let current = index
            .active
            .get(&self.key)
            .is_some_and(|current| current.seq == self.write.seq);
        if current {
            index.active.remove(&self.key);
            let charged = self.write.charged.swap(0, Ordering::Relaxed);
            index.complete += charged;
            index.objects.insert(
                self.key.clone(),
                Stored {
                    seq: self.write.seq,
                    len: charged,
                    expires_ms: self.write.meta.expires_at.map(unix_ms),
                    referenced: false,
                },
            );
            index.clock.push_back((self.key.clone(), self.write.seq));
            index.compact_if_stale();
        } else {
            // Replaced or purged while its name was synced: never the key's object (a purge
            // removed the file already; a newer write did not, and this unlink counts toward
            // the next sync of the directory).
            DiskShared::release(&mut index, &self.write);
            let path = self.write.file_path(&shared.layout, &self.key);
            index.trash.push(path);
            index.unlinks[subdir] += 1;
        }
        self.done = true;
        let outcome = self.write.cell.complete().map_err(WriteError::Aborted);
        drop(index);
        outcome
    }

    fn abort(mut self: Box<Self>, reason: AbortReason) {
        self.done = true;
        self.shared.abort_write(&self.key, &self.write, reason);
    }

    fn state(&self) -> WriteState {
        self.write.cell.state()
    }

    fn is_current(&self) -> bool {
        let index = self.shared.lock_index();
        !self.write.cell.state().is_terminal()
            && index
                .active
                .get(&self.key)
                .is_some_and(|current| current.seq == self.write.seq)
    }

    fn source(&self) -> Option<Arc<dyn BodySource>> {
        Some(Arc::new(DiskSource {
            write: Arc::clone(&self.write),
        }))
    }
}

impl Drop for DiskWriter {
    fn drop(&mut self) {
        if !self.done {
            self.shared
                .abort_write(&self.key, &self.write, AbortReason::WriterDropped);
        }
    }
}

/// Opens readers bound to one `DiskStorage` write.
#[derive(Debug)]
struct DiskSource {
    write: Arc<ActiveWrite>,
}

impl BodySource for DiskSource {
    fn open(&self) -> Box<dyn BodyReader> {
        Box::new(DiskReader::tailing(
            self.write.cell.cursor(),
            Arc::clone(&self.write.file),
            self.write.body_offset,
        ))
    }

    fn state(&self) -> WriteState {
        self.write.cell.state()
    }

    fn reader_count(&self) -> Option<usize> {
        Some(self.write.cell.reader_count())
    }

    fn abort_if_unread(&self, reason: AbortReason) -> Option<bool> {
        Some(self.write.cell.abort_if_unread(reason))
    }
}

/// What a reader of a finished file checks its blocks against.
#[derive(Debug)]
struct Verify {
    blocks: Arc<[u64]>,
    body_len: u64,
    /// The storage and object to drop when a block is found corrupt.
    owner: Weak<DiskShared>,
    key: CacheKey,
    seq: u64,
}

/// Reader over a file: waits on the write's cell, then reads by position; verifies every block
/// of a finished file before returning any byte of it.
#[derive(Debug)]
struct DiskReader {
    cursor: Cursor,
    file: Arc<std::fs::File>,
    body_offset: u64,
    verify: Option<Verify>,
    /// Set once a block failed its checksum: every later read fails the same way.
    corrupt: bool,
}

impl DiskReader {
    /// A reader of a write in progress (no block table yet, so no verification).
    fn tailing(cursor: Cursor, file: Arc<std::fs::File>, body_offset: u64) -> Self {
        DiskReader {
            cursor,
            file,
            body_offset,
            verify: None,
            corrupt: false,
        }
    }
}

#[async_trait]
impl BodyReader for DiskReader {
    /// Cancel safety: the position moves only after the bytes are in hand; a read dropped while
    /// it runs on the blocking pool is simply repeated by the next call.
    async fn read(&mut self) -> Result<Option<Bytes>, BodyError> {
        if self.corrupt {
            return Err(BodyError::Aborted(AbortReason::Corrupt));
        }
        let ready = std::future::poll_fn(|cx: &mut Context<'_>| self.cursor.poll_ready(cx)).await?;
        let upto = match ready {
            Ready::End => return Ok(None),
            Ready::Data { upto } => upto,
        };
        let pos = self.cursor.position();
        let file = Arc::clone(&self.file);
        let body_offset = self.body_offset;
        let bytes = match &self.verify {
            None => {
                let want = (upto - pos).min(READ_CHUNK) as usize;
                blocking(move || {
                    let mut buf = vec![0u8; want];
                    read_exact_at(&file, &mut buf, body_offset + pos)?;
                    Ok(Bytes::from(buf))
                })
                .await
                .map_err(|error| BodyError::Io(Arc::new(error)))?
            }
            Some(verify) => {
                // Whole blocks covering [pos, upto), at most `VERIFIED_READ_BLOCKS` of them per
                // read (one trip to the blocking pool), each checked before any byte is returned.
                let first = pos / BLOCK;
                let last = upto
                    .div_ceil(BLOCK)
                    .min(first + VERIFIED_READ_BLOCKS)
                    .min(verify.blocks.len() as u64);
                let start = first * BLOCK;
                let end = (last * BLOCK).min(verify.body_len);
                let span = blocking(move || {
                    let mut buf = vec![0u8; (end - start) as usize];
                    read_exact_at(&file, &mut buf, body_offset + start)?;
                    Ok(Bytes::from(buf))
                })
                .await
                .map_err(|error| BodyError::Io(Arc::new(error)))?;
                let intact = span
                    .chunks(BLOCK as usize)
                    .zip(&verify.blocks[first as usize..last as usize])
                    .all(|(block, expected)| xxh3_64(block) == *expected);
                if !intact {
                    self.corrupt = true;
                    if let Some(owner) = verify.owner.upgrade() {
                        owner.drop_corrupt(&verify.key, verify.seq);
                    }
                    return Err(BodyError::Aborted(AbortReason::Corrupt));
                }
                span.slice((pos - start) as usize..(upto.min(end) - start) as usize)
            }
        };
        self.cursor.consume(bytes.len() as u64);
        Ok(Some(bytes))
    }

    async fn seek(&mut self, range: ByteRange) -> Result<(), BodyError> {
        std::future::poll_fn(|cx: &mut Context<'_>| {
            self.cursor.poll_seek(range.start, range.end, cx)
        })
        .await
    }

    fn state(&self) -> WriteState {
        self.cursor.state()
    }

    fn position(&self) -> u64 {
        self.cursor.position()
    }
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use super::*;

    async fn store(storage: &DiskStorage, key: &str, body: &'static [u8]) {
        let mut writer = storage
            .begin_write(&key.into(), ObjectMeta::default())
            .await
            .unwrap();
        writer.write(Bytes::from_static(body)).await.unwrap();
        writer.finish().await.unwrap();
    }

    async fn body_of(storage: &DiskStorage, key: &str) -> Option<Vec<u8>> {
        let mut hit = storage.lookup(&key.into()).await.unwrap()?;
        Some(crate::read_to_end(&mut *hit.body).await.unwrap())
    }

    /// A fresh directory under the system's temp dir for one test (`tag`, this process, now).
    fn temp_root(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "{tag}-{}-{:?}",
            std::process::id(),
            SystemTime::now()
        ))
    }

    /// A 1 MiB `DiskStorage` at `root` with `Durability::Full`.
    async fn durable(root: &Path) -> DiskStorage {
        DiskStorage::builder(root, 1 << 20)
            .durability(Durability::Full)
            .open()
            .await
            .unwrap()
    }

    /// `begin_write` awaits the blocking pool (it creates the temp file) before the write
    /// becomes visible: a purge in that window is final. The creation is held there, so the
    /// window is certain: the integration test this replaces tried keys until a first poll
    /// happened to be pending, and on a loaded 2-core CI machine none of 100 was (a woken
    /// blocking thread can preempt its waker and finish first).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_purge_while_begin_write_creates_its_file_is_final() {
        let root = temp_root("stream-cache-begin-purge");
        let storage = DiskStorage::builder(&root, 1 << 20).open().await.unwrap();
        store(&storage, "k", b"older").await;
        let (release, held) = std::sync::mpsc::channel();
        *storage.shared.hold_next_create.lock() = Some(held);
        let key: CacheKey = "k".into();
        let mut begin = std::pin::pin!(storage.begin_write(&key, ObjectMeta::new("old")));
        assert!(
            futures::poll!(begin.as_mut()).is_pending(),
            "held on the pool"
        );
        storage.purge(&key).await.unwrap();
        release.send(()).unwrap();
        let mut writer = begin.await.unwrap();
        let _ = writer.write(Bytes::from_static(b"old")).await;
        let _ = writer.finish().await;
        assert_eq!(body_of(&storage, "k").await, None, "the purge came undone");
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Writes `body` to `key` and spawns its durable `finish`, returned once the file is renamed
    /// into place and the finish is held at its directory's fsync (sending on the returned
    /// channel lets it go on).
    async fn finish_held_at_its_sync(
        storage: &DiskStorage,
        key: &CacheKey,
    ) -> (
        tokio::task::JoinHandle<Result<u64, WriteError>>,
        std::sync::mpsc::Sender<()>,
    ) {
        let mut writer = storage
            .begin_write(key, ObjectMeta::default())
            .await
            .unwrap();
        writer.write(Bytes::from_static(b"body")).await.unwrap();
        let (release, held) = std::sync::mpsc::channel();
        *storage.shared.hold_next_dir_sync.lock() = Some(held);
        let finish = tokio::spawn(writer.finish());
        while storage.shared.hold_next_dir_sync.lock().is_some() {
            tokio::task::yield_now().await;
        }
        (finish, release)
    }

    /// A purge while a durable `finish` syncs the name it just renamed into place removes that
    /// file itself and syncs the directory before it returns: the purge survives a power loss.
    /// Found by review: the purge saw no unsynced unlink and returned at once, and the finish
    /// then unlinked the file without a sync, so after a power loss the restart scan found
    /// the fsynced file and served the purged body.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_purge_during_a_durable_finish_is_durable() {
        let root = temp_root("stream-cache-purge-finish");
        let storage = durable(&root).await;
        let key: CacheKey = "k".into();
        let (finish, release) = finish_held_at_its_sync(&storage, &key).await;
        let subdir = storage.shared.layout.subdir_path(subdir_of(&key));
        let files = || std::fs::read_dir(&subdir).unwrap().count();
        assert_eq!(files(), 1, "the renamed object file");
        assert!(storage.purge(&key).await.unwrap());
        assert_eq!(files(), 0, "the purge removed the renamed file");
        assert!(!storage.unsynced_unlinks(&key), "and synced its removal");
        release.send(()).unwrap();
        assert!(finish.await.unwrap().is_err(), "the purged write failed");
        assert_eq!(body_of(&storage, "k").await, None);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A durable `finish` dropped while it syncs the name it renamed into place (a fill's
    /// deadline, a runtime shutdown) removes that file, and the removal counts as an unlink the
    /// next purge must sync: found by review, the uncounted unlink let a purge return without an
    /// fsync while the renamed name might be durable (a power loss then served the body again).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_durable_finish_dropped_during_its_sync_leaves_an_unlink_to_sync() {
        let root = temp_root("stream-cache-finish-dropped");
        let storage = durable(&root).await;
        let key: CacheKey = "k".into();
        let (finish, release) = finish_held_at_its_sync(&storage, &key).await;
        finish.abort();
        assert!(finish.await.unwrap_err().is_cancelled());
        let subdir = storage.shared.layout.subdir_path(subdir_of(&key));
        assert_eq!(std::fs::read_dir(&subdir).unwrap().count(), 0);
        assert!(
            storage.unsynced_unlinks(&key),
            "the removal is an unlink to sync"
        );
        let syncs = storage.dir_syncs();
        storage.purge(&key).await.unwrap();
        assert!(
            storage.dir_syncs() > syncs,
            "the purge synced the directory"
        );
        release.send(()).unwrap();
        let _ = std::fs::remove_dir_all(&root);
    }

    /// An invalidation in the same window (a durable `finish` syncing the name it renamed into
    /// place) is as durable as the purge above, but does not fail the write: its reader gets
    /// the whole body, the finish succeeds, and the object is not stored.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_invalidation_during_a_durable_finish_is_durable_and_lets_the_reader_finish() {
        let root = temp_root("stream-cache-invalidate-finish");
        let storage = durable(&root).await;
        let key: CacheKey = "k".into();
        let (finish, release) = finish_held_at_its_sync(&storage, &key).await;
        // The write stays the key's (lookups tail it) until its name is synced.
        let mut reader = storage.lookup(&key).await.unwrap().unwrap().body;
        let subdir = storage.shared.layout.subdir_path(subdir_of(&key));
        let files = || std::fs::read_dir(&subdir).unwrap().count();
        assert_eq!(files(), 1, "the renamed object file");
        assert!(storage.invalidate(&key).await.unwrap());
        assert_eq!(files(), 0, "the invalidation removed the renamed file");
        assert!(!storage.unsynced_unlinks(&key), "and synced its removal");
        release.send(()).unwrap();
        assert_eq!(
            finish.await.unwrap().unwrap(),
            4,
            "the detached write completes"
        );
        assert_eq!(
            crate::read_to_end(&mut *reader).await.unwrap(),
            b"body".to_vec()
        );
        assert_eq!(body_of(&storage, "k").await, None);
        assert_eq!(storage.used_bytes(), 0);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A durable `finish` whose directory fsync fails is the write's failure, and nothing of it
    /// stays: before, it published the object and returned `Ok` (the failure only logged),
    /// though the object's name might not survive a power loss.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_durable_finish_whose_directory_sync_fails_is_an_error() {
        let root = temp_root("stream-cache-dirsync");
        let storage = durable(&root).await;
        let mut writer = storage
            .begin_write(&"k".into(), ObjectMeta::default())
            .await
            .unwrap();
        let mut reader = storage.lookup(&"k".into()).await.unwrap().unwrap().body;
        writer.write(Bytes::from_static(b"body")).await.unwrap();
        storage
            .shared
            .fail_next_dir_sync
            .store(true, Ordering::Relaxed);
        let finished = writer.finish().await;
        assert!(
            matches!(finished, Err(WriteError::Aborted(AbortReason::Storage(_)))),
            "{finished:?}"
        );
        assert!(
            crate::read_to_end(&mut *reader).await.is_err(),
            "its reader sees the failure"
        );
        assert!(storage.lookup(&"k".into()).await.unwrap().is_none());
        assert_eq!(storage.used_bytes(), 0);
        let files = std::fs::read_dir(root.join("objects"))
            .unwrap()
            .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
            .count();
        assert_eq!(files, 0, "the renamed file was removed");
        store(&storage, "k", b"again").await;
        assert_eq!(body_of(&storage, "k").await.unwrap(), b"again");
        drop(storage);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Issue 15: keys whose name hashes collide (as an attacker can arrange for FNV-1a) are two
    /// objects: neither's write nor purge touches the other, before and after a restart.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn colliding_keys_are_both_stored() {
        layout::COLLIDE.store(true, Ordering::Relaxed);
        let root = temp_root("stream-cache-collide");
        let storage = DiskStorage::open(&root, 1 << 20).await.unwrap();
        store(&storage, "a", b"body of a").await;
        store(&storage, "b", b"body of b").await;
        let names: Vec<_> = std::fs::read_dir(root.join("objects").join("00"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2);
        assert!(names.iter().all(|n| n.starts_with("0000000000000000-")));
        assert_eq!(body_of(&storage, "a").await.unwrap(), b"body of a");
        assert_eq!(body_of(&storage, "b").await.unwrap(), b"body of b");
        assert!(storage.purge(&"b".into()).await.unwrap());
        assert_eq!(body_of(&storage, "a").await.unwrap(), b"body of a");
        store(&storage, "c", b"body of c").await;
        drop(storage);
        let storage = DiskStorage::open(&root, 1 << 20).await.unwrap();
        assert_eq!(body_of(&storage, "a").await.unwrap(), b"body of a");
        assert_eq!(body_of(&storage, "b").await, None);
        assert_eq!(body_of(&storage, "c").await.unwrap(), b"body of c");
        drop(storage);
        let _ = std::fs::remove_dir_all(&root);
    }
}
