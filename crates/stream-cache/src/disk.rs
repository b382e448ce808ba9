//! `DiskStorage`: bodies in files, readable while they are written.
//!
//! Layout under the root directory:
//! - `tmp/<hash>-<pid>-<id>.tmp`: a body being written. Readers attached to that write share one
//!   read handle and tail the file as it grows; the write's partial-body cell says how many bytes
//!   are flushed and whether the write is open, complete or aborted.
//! - `objects/<hash>.obj`: a complete object, renamed into place by `finish`.
//!
//! File format: header (`HERDSC01`, key length u32, meta length u32, declared length u64 or
//! `u64::MAX`, key, meta) + body + footer (body length u64, `HERDEND1`). A lookup serves a file
//! only if the footer is present and the sizes add up, so a torn or foreign file is a miss, and
//! temp files are never served as complete: `open` deletes every leftover in `tmp/`.
//!
//! Visibility changes (replace, finish, abort, purge) happen under one index mutex, with the
//! cheap metadata syscalls (`rename`, `unlink`) done synchronously inside it so they are ordered
//! with lookups; body bytes go through tokio's fs and blocking-pool reads. Readers read by
//! position (`pread`), so a rename or unlink of the file under them does not disturb them.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Context;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use tokio::io::AsyncWriteExt;

use crate::cell::{BodyCell, CellLimits, Cursor, Ready};
use crate::error::{BodyError, StorageError, WriteError};
use crate::fence::{Admission, FenceTable, WriteFence};
use crate::state::{AbortReason, WriteState};
use crate::traits::{
    BodyReader, BodySource, BodyWriter, ByteRange, CacheKey, Capabilities, Hit, ObjectMeta, Storage,
};

const HEAD_MAGIC: &[u8; 8] = b"HERDSC01";
const TAIL_MAGIC: &[u8; 8] = b"HERDEND1";
const HEAD_FIXED: u64 = 8 + 4 + 4 + 8;
const TAIL_LEN: u64 = 8 + 8;
const NO_LEN: u64 = u64::MAX;
/// Largest chunk one `read` returns.
const READ_CHUNK: u64 = 64 * 1024;

/// File-backed storage. Cheap to clone (shared state behind an `Arc`).
///
/// Use one `DiskStorage` per directory (clone it to share): `open` deletes every temp file in
/// the directory, including those of another live instance.
#[derive(Clone, Debug)]
pub struct DiskStorage {
    shared: Arc<DiskShared>,
}

#[derive(Debug)]
struct DiskShared {
    objects: PathBuf,
    tmp: PathBuf,
    /// Writes in progress: key -> its current write. Lock order: `active`, then `fences`.
    active: Mutex<HashMap<CacheKey, Arc<ActiveWrite>>>,
    fences: FenceTable,
    next_id: AtomicU64,
    max_object_size: Option<u64>,
}

/// One write in progress, shared by its writer and the readers bound to it.
#[derive(Debug)]
struct ActiveWrite {
    id: u64,
    meta: ObjectMeta,
    cell: Arc<BodyCell>,
    read_handle: Arc<std::fs::File>,
    body_offset: u64,
    tmp_path: PathBuf,
}

fn key_hash(key: &CacheKey) -> u64 {
    // FNV-1a: stable across processes and versions, so file names survive restarts. Collisions
    // are harmless: the header stores the key and a lookup checks it.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

fn io_error(error: io::Error) -> AbortReason {
    AbortReason::Storage(Arc::new(error))
}

fn remove_quietly(path: &Path) {
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

fn encode_header(key: &CacheKey, meta: &ObjectMeta) -> io::Result<Vec<u8>> {
    let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "key or meta longer than 4 GiB");
    let key_len = u32::try_from(key.as_bytes().len()).map_err(|_| too_big())?;
    let meta_len = u32::try_from(meta.user.len()).map_err(|_| too_big())?;
    let mut header = Vec::with_capacity(HEAD_FIXED as usize + key_len as usize + meta_len as usize);
    header.extend_from_slice(HEAD_MAGIC);
    header.extend_from_slice(&key_len.to_le_bytes());
    header.extend_from_slice(&meta_len.to_le_bytes());
    header.extend_from_slice(&meta.expected_len.unwrap_or(NO_LEN).to_le_bytes());
    header.extend_from_slice(key.as_bytes());
    header.extend_from_slice(&meta.user);
    Ok(header)
}

/// A validated complete object file.
struct StoredObject {
    meta: ObjectMeta,
    body_offset: u64,
    body_len: u64,
    file: std::fs::File,
}

/// Open and validate `path` as the complete object for `key`. `Ok(None)` for a missing, torn,
/// foreign or colliding file.
fn open_stored(path: &Path, key: &CacheKey) -> io::Result<Option<StoredObject>> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let file_len = file.metadata()?.len();
    if file_len < HEAD_FIXED + TAIL_LEN {
        return Ok(None);
    }
    let mut fixed = [0u8; HEAD_FIXED as usize];
    read_exact_at(&file, &mut fixed, 0)?;
    if &fixed[..8] != HEAD_MAGIC {
        return Ok(None);
    }
    let key_len = u64::from(u32::from_le_bytes(
        fixed[8..12].try_into().expect("4 bytes"),
    ));
    let meta_len = u64::from(u32::from_le_bytes(
        fixed[12..16].try_into().expect("4 bytes"),
    ));
    let declared = u64::from_le_bytes(fixed[16..24].try_into().expect("8 bytes"));
    let body_offset = HEAD_FIXED + key_len + meta_len;
    if body_offset + TAIL_LEN > file_len {
        return Ok(None);
    }
    let mut tail = [0u8; TAIL_LEN as usize];
    read_exact_at(&file, &mut tail, file_len - TAIL_LEN)?;
    if &tail[8..] != TAIL_MAGIC {
        return Ok(None);
    }
    let body_len = u64::from_le_bytes(tail[..8].try_into().expect("8 bytes"));
    if body_offset
        .checked_add(body_len)
        .and_then(|n| n.checked_add(TAIL_LEN))
        != Some(file_len)
    {
        return Ok(None);
    }
    let mut names = vec![0u8; (key_len + meta_len) as usize];
    read_exact_at(&file, &mut names, HEAD_FIXED)?;
    if &names[..key_len as usize] != key.as_bytes() {
        return Ok(None);
    }
    let user = Bytes::copy_from_slice(&names[key_len as usize..]);
    Ok(Some(StoredObject {
        meta: ObjectMeta {
            expected_len: (declared != NO_LEN).then_some(declared),
            user,
        },
        body_offset,
        body_len,
        file,
    }))
}

/// `StorageError::NoRuntime` unless called inside a tokio runtime (file I/O needs its blocking
/// pool; tokio would panic).
fn need_runtime() -> Result<(), StorageError> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => Ok(()),
        Err(_) => Err(StorageError::NoRuntime),
    }
}

/// The io error a file read outside a runtime fails with.
fn no_runtime_io() -> io::Error {
    io::Error::other("no tokio runtime: DiskStorage readers must be polled inside one")
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

impl DiskStorage {
    /// Open (creating if needed) storage under `root`, with no object size limit. Deletes every
    /// leftover temp file: a write interrupted by a restart is never served.
    ///
    /// Cancel safety: dropping the future part-way may leave some leftovers; the next `open`
    /// removes them.
    pub async fn open(root: impl AsRef<Path>) -> Result<Self, StorageError> {
        Self::open_with_limit(root, None).await
    }

    /// As [`DiskStorage::open`], with a per-object size limit (same cancel safety).
    pub async fn open_with_limit(
        root: impl AsRef<Path>,
        max_object_size: Option<u64>,
    ) -> Result<Self, StorageError> {
        need_runtime()?;
        let root = root.as_ref();
        let objects = root.join("objects");
        let tmp = root.join("tmp");
        tokio::fs::create_dir_all(&objects).await?;
        tokio::fs::create_dir_all(&tmp).await?;
        let mut leftovers = tokio::fs::read_dir(&tmp).await?;
        while let Some(entry) = leftovers.next_entry().await? {
            tracing::debug!(path = %entry.path().display(), "stream-cache: removing leftover temp file");
            match tokio::fs::remove_file(entry.path()).await {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(DiskStorage {
            shared: Arc::new(DiskShared {
                objects,
                tmp,
                active: Mutex::new(HashMap::new()),
                fences: FenceTable::new(),
                next_id: AtomicU64::new(1),
                max_object_size,
            }),
        })
    }

    /// Number of writes in progress.
    pub fn writes_in_progress(&self) -> usize {
        self.shared.active.lock().len()
    }
}

impl DiskShared {
    fn object_path(&self, key: &CacheKey) -> PathBuf {
        self.objects.join(format!("{:016x}.obj", key_hash(key)))
    }

    /// Abort a write, unindex it (in that order, under the index lock), and delete its temp file.
    fn abort_write(&self, key: &CacheKey, write: &ActiveWrite, reason: AbortReason) {
        {
            let mut active = self.active.lock();
            write.cell.abort(reason);
            if active
                .get(key)
                .is_some_and(|current| current.id == write.id)
            {
                active.remove(key);
            }
        }
        remove_quietly(&write.tmp_path);
    }
}

/// Removes a temp file unless disarmed: makes `begin_write` cancel-safe.
struct TempFileGuard {
    path: Option<PathBuf>,
}

impl Drop for TempFileGuard {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
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
            .with_max_object_size(self.shared.max_object_size)
            .with_persistent(true)
    }

    /// Cancel safety: the in-progress check takes no await; dropping the future while the
    /// complete file is opened (on the blocking pool) changes nothing.
    async fn lookup(&self, key: &CacheKey) -> Result<Option<Hit>, StorageError> {
        need_runtime()?;
        let in_progress = self.shared.active.lock().get(key).cloned();
        if let Some(write) = in_progress
            && !matches!(write.cell.state(), WriteState::Aborted(_))
        {
            return Ok(Some(Hit {
                meta: write.meta.clone(),
                body: Box::new(DiskReader::new(
                    write.cell.cursor(),
                    Arc::clone(&write.read_handle),
                    write.body_offset,
                )),
            }));
        }
        let path = self.shared.object_path(key);
        let key_owned = key.clone();
        let Some(stored) = blocking(move || open_stored(&path, &key_owned)).await? else {
            return Ok(None);
        };
        Ok(Some(Hit {
            meta: stored.meta,
            body: Box::new(DiskReader::new(
                BodyCell::completed(stored.body_len).cursor(),
                Arc::new(stored.file),
                stored.body_offset,
            )),
        }))
    }

    fn fence(&self, key: &CacheKey) -> WriteFence {
        self.shared.fences.fence(key)
    }

    /// Cancel safety: if dropped before it returns, the temp file is removed (guard) and the
    /// index is untouched: the index changes only in the final, await-free step, which is also
    /// where the fence is checked.
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
        if let (Some(limit), Some(declared)) = (self.shared.max_object_size, meta.expected_len)
            && declared > limit
        {
            return Err(StorageError::TooLarge { limit, declared });
        }
        let shared = &self.shared;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let tmp_path = shared.tmp.join(format!(
            "{:016x}-{}-{id}.tmp",
            key_hash(key),
            std::process::id()
        ));
        let mut guard = TempFileGuard {
            path: Some(tmp_path.clone()),
        };
        let header = encode_header(key, &meta)?;
        let mut file = tokio::fs::File::create(&tmp_path).await?;
        file.write_all(&header).await?;
        file.flush().await?;
        let read_handle = tokio::fs::File::open(&tmp_path).await?.into_std().await;
        let write = Arc::new(ActiveWrite {
            id,
            meta,
            cell: BodyCell::new(
                false,
                CellLimits {
                    expected_len: write_expected_len(&header),
                    max_len: shared.max_object_size,
                },
            ),
            read_handle: Arc::new(read_handle),
            body_offset: header.len() as u64,
            tmp_path,
        });
        let admission = {
            let mut active = shared.active.lock();
            let admission = shared.fences.admit(&fence);
            match admission {
                Admission::Admitted => {
                    // Replacing: the previous complete object stops being visible now. A
                    // previous in-progress write keeps going for the readers bound to it but
                    // will not publish.
                    remove_quietly(&shared.object_path(key));
                    active.insert(key.clone(), Arc::clone(&write));
                }
                // Never indexed: runs for readers bound to it, `finish` removes its file.
                Admission::Superseded => {}
                Admission::Purged => {
                    write.cell.abort(AbortReason::Purged);
                }
            }
            admission
        };
        drop(fence);
        if admission != Admission::Purged {
            // A purged write's temp file goes with the guard.
            guard.path = None;
        }
        Ok(Box::new(DiskWriter {
            shared: Arc::clone(shared),
            key: key.clone(),
            write,
            file,
            done: admission == Admission::Purged,
            in_flight: false,
        }))
    }

    /// Cancel safety: no await; the purge happens entirely in the first poll.
    async fn purge(&self, key: &CacheKey) -> Result<bool, StorageError> {
        let mut active = self.shared.active.lock();
        self.shared.fences.purge(key);
        let mut removed = false;
        if let Some(write) = active.remove(key) {
            write.cell.abort(AbortReason::Purged);
            removed = true;
        }
        match std::fs::remove_file(self.shared.object_path(key)) {
            Ok(()) => removed = true,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error.into()),
        }
        Ok(removed)
    }
}

/// The declared length recorded in an encoded header.
fn write_expected_len(header: &[u8]) -> Option<u64> {
    let declared = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
    (declared != NO_LEN).then_some(declared)
}

/// Writer for one `DiskStorage` object.
#[derive(Debug)]
struct DiskWriter {
    shared: Arc<DiskShared>,
    key: CacheKey,
    write: Arc<ActiveWrite>,
    file: tokio::fs::File,
    /// Set once the write reached a terminal state through this writer.
    done: bool,
    /// Set while file I/O is under way; still set on entry means a call was cancelled part-way.
    in_flight: bool,
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
        self.in_flight = true;
        let written = async {
            self.file.write_all(&chunk).await?;
            self.file.flush().await
        }
        .await;
        self.in_flight = false;
        if let Err(error) = written {
            return Err(self.fail(io_error(error)));
        }
        match self.write.cell.advance(n) {
            Ok(_) => Ok(()),
            Err(reason) => Err(self.fail(reason)),
        }
    }

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
        self.in_flight = true;
        let mut tail = [0u8; TAIL_LEN as usize];
        tail[..8].copy_from_slice(&len.to_le_bytes());
        tail[8..].copy_from_slice(TAIL_MAGIC);
        let written = async {
            self.file.write_all(&tail).await?;
            self.file.flush().await
        }
        .await;
        self.in_flight = false;
        if let Err(error) = written {
            return Err(self.fail(io_error(error)));
        }
        let shared = Arc::clone(&self.shared);
        let mut active = shared.active.lock();
        let current = active
            .get(&self.key)
            .is_some_and(|current| current.id == self.write.id);
        if current {
            if let Err(error) = std::fs::rename(&self.write.tmp_path, shared.object_path(&self.key))
            {
                drop(active);
                return Err(self.fail(io_error(error)));
            }
            active.remove(&self.key);
        } else {
            // Superseded or purged: this write completes for its own readers but never becomes
            // the key's object.
            remove_quietly(&self.write.tmp_path);
        }
        self.done = true;
        let outcome = self.write.cell.complete().map_err(WriteError::Aborted);
        drop(active);
        outcome
    }

    fn abort(mut self: Box<Self>, reason: AbortReason) {
        self.done = true;
        self.shared.abort_write(&self.key, &self.write, reason);
    }

    fn state(&self) -> WriteState {
        self.write.cell.state()
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
        Box::new(DiskReader::new(
            self.write.cell.cursor(),
            Arc::clone(&self.write.read_handle),
            self.write.body_offset,
        ))
    }

    fn state(&self) -> WriteState {
        self.write.cell.state()
    }

    fn reader_count(&self) -> Option<usize> {
        Some(self.write.cell.reader_count())
    }
}

/// Reader over a file: waits on the write's cell, then reads by position.
#[derive(Debug)]
struct DiskReader {
    cursor: Cursor,
    file: Arc<std::fs::File>,
    body_offset: u64,
}

impl DiskReader {
    fn new(cursor: Cursor, file: Arc<std::fs::File>, body_offset: u64) -> Self {
        DiskReader {
            cursor,
            file,
            body_offset,
        }
    }
}

#[async_trait]
impl BodyReader for DiskReader {
    /// Cancel safety: the position moves only after the bytes are in hand; a read dropped while
    /// it runs on the blocking pool is simply repeated by the next call.
    async fn read(&mut self) -> Result<Option<Bytes>, BodyError> {
        let ready = std::future::poll_fn(|cx: &mut Context<'_>| self.cursor.poll_ready(cx)).await?;
        let upto = match ready {
            Ready::End => return Ok(None),
            Ready::Data { upto } => upto,
        };
        let pos = self.cursor.position();
        let want = (upto - pos).min(READ_CHUNK) as usize;
        let file = Arc::clone(&self.file);
        let offset = self.body_offset + pos;
        let bytes = blocking(move || {
            let mut buf = vec![0u8; want];
            read_exact_at(&file, &mut buf, offset)?;
            Ok(Bytes::from(buf))
        })
        .await
        .map_err(|error| BodyError::Io(Arc::new(error)))?;
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
