//! Synchronisation shim: the partial-body cell locks through this module so that loom can model
//! it. Normal builds use `parking_lot`; `--cfg herd_loom` swaps in `loom::sync`.
//!
//! Only the cell (`cell.rs`) goes through the shim: it is the piece whose interleavings matter
//! (appends, terminal transitions and waiter registration). Storage indexes use `parking_lot`
//! directly and are not modelled.

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
}

pub(crate) use imp::Mutex;
