//! The synchronisation shim: `parking_lot`/`std` in normal builds, `loom` under `--cfg herd_loom`.
//!
//! Everything in this crate that two threads can race on goes through this module, so the loom
//! models in `tests/loom.rs` see every lock and every reference count. Statistics (`stats.rs`) are
//! plain integers under the shard lock, and the one counted outside it a plain std atomic: they
//! carry no invariant.

#[cfg(not(herd_loom))]
mod imp {
    pub(crate) use std::sync::Arc;

    /// A mutex that never poisons: a panicking fill must not wedge the group.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(parking_lot::Mutex<T>);

    pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(parking_lot::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock()
        }
    }
}

#[cfg(herd_loom)]
mod imp {
    pub(crate) use loom::sync::Arc;

    /// Loom's mutex, with poisoning unwrapped away (the normal build uses parking_lot, which
    /// does not poison either).
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            match self.0.lock() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            }
        }
    }
}

pub(crate) use imp::*;
