//! Synchronisation shim: the partial-body cell locks through this module so that loom can model
//! it. Normal builds use `parking_lot`; `--cfg herd_loom` swaps in `loom::sync`.
//!
//! The cell (`cell.rs`: appends, terminal transitions, waiter registration), the write fences
//! (`fence.rs`) and `MemStorage`'s index lock go through the shim, so the loom models can run
//! `MemStorage` itself for the fence; `DiskStorage`'s index uses `parking_lot` directly and is
//! not modelled (its locking follows the same protocol).

#[cfg(not(herd_loom))]
mod imp {
    /// A mutex whose `lock` never fails (no poisoning), the same shape under loom.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(parking_lot::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(parking_lot::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
            self.0.lock()
        }
    }

    /// A reader-writer lock, the same shape under loom.
    #[derive(Debug, Default)]
    pub(crate) struct RwLock<T>(parking_lot::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(parking_lot::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> parking_lot::RwLockReadGuard<'_, T> {
            self.0.read()
        }

        pub(crate) fn write(&self) -> parking_lot::RwLockWriteGuard<'_, T> {
            self.0.write()
        }
    }
}

#[cfg(herd_loom)]
mod imp {
    /// A mutex whose `lock` never fails (a poisoned loom mutex is a test failure anyway).
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().expect("loom mutex poisoned")
        }
    }

    impl<T: Default> Default for Mutex<T> {
        fn default() -> Self {
            Self::new(T::default())
        }
    }

    /// A reader-writer lock (a poisoned loom lock is a test failure anyway).
    #[derive(Debug)]
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
            self.0.read().expect("loom lock poisoned")
        }

        pub(crate) fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
            self.0.write().expect("loom lock poisoned")
        }
    }
}

pub(crate) use imp::{Mutex, RwLock};
