//! Shared test helpers: a self-removing temp directory, backend factories (so each semantic runs
//! against `MemStorage` and `DiskStorage`), and body-reading helpers.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use stream_cache::{BodyError, BodyReader, DiskStorage, MemStorage, Storage};

/// A temp directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "stream-cache-test-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Mem,
    Disk,
}

/// A storage under test, keeping its directory alive.
pub struct Backend {
    pub storage: Arc<dyn Storage>,
    pub kind: Kind,
    pub dir: Option<TempDir>,
}

pub async fn backend(kind: Kind, max_object_size: Option<u64>) -> Backend {
    match kind {
        Kind::Mem => Backend {
            storage: Arc::new(match max_object_size {
                Some(limit) => MemStorage::with_max_object_size(1 << 30, limit),
                None => MemStorage::new(1 << 30),
            }),
            kind,
            dir: None,
        },
        Kind::Disk => {
            let dir = TempDir::new();
            let mut builder = DiskStorage::builder(dir.path(), 1 << 30);
            if let Some(limit) = max_object_size {
                builder = builder.max_object_size(limit);
            }
            let storage = builder.open().await.expect("open disk storage");
            Backend {
                storage: Arc::new(storage),
                kind,
                dir: Some(dir),
            }
        }
    }
}

/// Read to the end: every byte returned, and how the body ended.
pub async fn drain(reader: &mut dyn BodyReader) -> (Vec<u8>, Result<(), BodyError>) {
    let mut body = Vec::new();
    loop {
        match reader.read().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => return (body, Ok(())),
            Err(error) => return (body, Err(error)),
        }
    }
}

/// Generate one test per backend: `$name::mem` and `$name::disk`.
#[macro_export]
macro_rules! both_backends {
    ($name:ident, $limit:expr, $body:expr) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mem() {
                let backend = common::backend(common::Kind::Mem, $limit).await;
                ($body)(backend.storage.clone()).await;
                drop(backend);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn disk() {
                let backend = common::backend(common::Kind::Disk, $limit).await;
                ($body)(backend.storage.clone()).await;
                drop(backend);
            }
        }
    };
}

/// Every file under a `DiskStorage`'s `objects/` directory (its subdirectories included),
/// sorted: tests find object files without depending on how they are spread.
pub fn object_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![root.join("objects")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read objects dir") {
            let entry = entry.expect("entry");
            if entry.file_type().expect("file type").is_dir() {
                dirs.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    files
}

/// `MemStorage` with two slow spots a test can arm: `begin_write` that first sleeps
/// `begin_delay` (a saturated blocking pool, a remote backend), and `purge` that first waits for
/// `purge_gate` (a backend that awaits I/O or a lock before it fences), setting `purge_entered`
/// once it waits.
pub struct Slowed {
    pub inner: MemStorage,
    pub begin_delay: Option<std::time::Duration>,
    pub purge_gate: std::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
    pub purge_entered: std::sync::atomic::AtomicBool,
}

impl Slowed {
    pub fn new(inner: MemStorage) -> Self {
        Slowed {
            inner,
            begin_delay: None,
            purge_gate: std::sync::Mutex::new(None),
            purge_entered: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

#[async_trait::async_trait]
impl Storage for Slowed {
    fn capabilities(&self) -> stream_cache::Capabilities {
        self.inner.capabilities()
    }

    async fn lookup(
        &self,
        key: &stream_cache::CacheKey,
    ) -> Result<Option<stream_cache::Hit>, stream_cache::StorageError> {
        self.inner.lookup(key).await
    }

    fn fence(&self, key: &stream_cache::CacheKey) -> stream_cache::WriteFence {
        self.inner.fence(key)
    }

    async fn begin_write_fenced(
        &self,
        key: &stream_cache::CacheKey,
        meta: stream_cache::ObjectMeta,
        fence: stream_cache::WriteFence,
    ) -> Result<Box<dyn stream_cache::BodyWriter>, stream_cache::StorageError> {
        if let Some(delay) = self.begin_delay {
            tokio::time::sleep(delay).await;
        }
        self.inner.begin_write_fenced(key, meta, fence).await
    }

    async fn purge(
        &self,
        key: &stream_cache::CacheKey,
    ) -> Result<bool, stream_cache::StorageError> {
        let gate = self.purge_gate.lock().unwrap().take();
        self.purge_entered.store(true, Ordering::SeqCst);
        if let Some(gate) = gate {
            let _ = gate.await;
        }
        self.inner.purge(key).await
    }
}
