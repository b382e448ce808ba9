//! Synchronisation shim: parking_lot/std normally, loom under `--cfg herd_loom`, so the loom models
//! in `tests/loom.rs` explore the real shard code (locks, recency stamps, refresh gates, fences).

#[cfg(not(herd_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(herd_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

/// A reader-writer lock with infallible guards on both backends.
pub(crate) struct RwLock<T> {
    #[cfg(not(herd_loom))]
    inner: parking_lot::RwLock<T>,
    #[cfg(herd_loom)]
    inner: loom::sync::RwLock<T>,
}

#[cfg(not(herd_loom))]
pub(crate) type ReadGuard<'a, T> = parking_lot::RwLockReadGuard<'a, T>;
#[cfg(not(herd_loom))]
pub(crate) type WriteGuard<'a, T> = parking_lot::RwLockWriteGuard<'a, T>;
#[cfg(herd_loom)]
pub(crate) type ReadGuard<'a, T> = loom::sync::RwLockReadGuard<'a, T>;
#[cfg(herd_loom)]
pub(crate) type WriteGuard<'a, T> = loom::sync::RwLockWriteGuard<'a, T>;

impl<T> RwLock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            #[cfg(not(herd_loom))]
            inner: parking_lot::RwLock::new(value),
            #[cfg(herd_loom)]
            inner: loom::sync::RwLock::new(value),
        }
    }

    #[inline]
    pub(crate) fn read(&self) -> ReadGuard<'_, T> {
        #[cfg(not(herd_loom))]
        {
            self.inner.read()
        }
        #[cfg(herd_loom)]
        {
            self.inner.read().unwrap_or_else(|e| e.into_inner())
        }
    }

    #[inline]
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        #[cfg(not(herd_loom))]
        {
            self.inner.write()
        }
        #[cfg(herd_loom)]
        {
            self.inner.write().unwrap_or_else(|e| e.into_inner())
        }
    }
}
