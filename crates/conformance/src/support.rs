//! Helpers for writing factories: a self-removing [`TempDir`] and [`Guarded`], which keeps
//! something (a temp directory, a server handle) alive exactly as long as the storage it backs.
//!
//! Why: the suite asks the factory for a fresh storage per case and drops it when the case ends.
//! A file-backed storage needs its directory to outlive it and to disappear afterwards, without
//! the storage type itself knowing about tests.

use std::any::Any;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use stream_cache::{
    BodyWriter, CacheKey, Capabilities, Hit, ObjectMeta, Storage, StorageError, StorageUsage,
    WriteFence,
};

/// A fresh directory under the system temp dir, removed (with its contents) on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Create a new, empty, uniquely named directory.
    ///
    /// # Panics
    /// If the directory cannot be created (tests cannot proceed without it).
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "conformance-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|error| panic!("create temp dir {}: {error}", path.display()));
        TempDir(path)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Default for TempDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A storage plus a guard dropped after it (declaration order): `Guarded::new(disk, temp_dir)`.
/// Delegates every `Storage` method to the storage.
pub struct Guarded<S> {
    storage: S,
    _guard: Box<dyn Any + Send + Sync>,
}

impl<S> Guarded<S> {
    /// Keep `guard` alive as long as `storage`.
    pub fn new(storage: S, guard: impl Any + Send + Sync) -> Self {
        Guarded {
            storage,
            _guard: Box::new(guard),
        }
    }

    /// The storage.
    pub fn storage(&self) -> &S {
        &self.storage
    }
}

impl<S: fmt::Debug> fmt::Debug for Guarded<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guarded")
            .field("storage", &self.storage)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<S: Storage> Storage for Guarded<S> {
    fn capabilities(&self) -> Capabilities {
        self.storage.capabilities()
    }

    fn usage(&self) -> Option<StorageUsage> {
        self.storage.usage()
    }

    async fn lookup(&self, key: &CacheKey) -> Result<Option<Hit>, StorageError> {
        self.storage.lookup(key).await
    }

    fn fence(&self, key: &CacheKey) -> WriteFence {
        self.storage.fence(key)
    }

    async fn begin_write_fenced(
        &self,
        key: &CacheKey,
        meta: ObjectMeta,
        fence: WriteFence,
    ) -> Result<Box<dyn BodyWriter>, StorageError> {
        self.storage.begin_write_fenced(key, meta, fence).await
    }

    async fn begin_write(
        &self,
        key: &CacheKey,
        meta: ObjectMeta,
    ) -> Result<Box<dyn BodyWriter>, StorageError> {
        self.storage.begin_write(key, meta).await
    }

    async fn purge(&self, key: &CacheKey) -> Result<bool, StorageError> {
        self.storage.purge(key).await
    }

    async fn invalidate(&self, key: &CacheKey) -> Result<bool, StorageError> {
        self.storage.invalidate(key).await
    }
}
