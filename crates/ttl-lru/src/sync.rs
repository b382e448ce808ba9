//! Synchronisation shim: parking_lot/std normally, loom under `--cfg herd_loom`, so the loom models
//! in `tests/loom.rs` explore the real shard code (the shard lock, recency stamps, refresh gates,
//! fences).
//!
//! The shard lock itself (`shard_lock.rs`) is built here from atomics, a mutex and a cell, not
//! taken from a library, so loom checks it too: its readers and writers race through the same
//! instructions in the models as in production.

pub(crate) use std::sync::atomic::Ordering;

// Atomics loom models (the shard lock, recency stamps, refresh gates, fences, the capacity
// budget): ours (`atomic.rs`: std's, logging writes in test builds), loom's under `herd_loom`.
#[cfg(not(herd_loom))]
pub(crate) use crate::atomic::{AtomicI64, AtomicU64};

#[cfg(herd_loom)]
pub(crate) use loom::sync::atomic::{AtomicI64, AtomicU64};

/// Atomics loom does not model (counters, the admission sketch, the clock's tick).
pub(crate) mod plain {
    pub(crate) use crate::atomic::AtomicU64;
    /// Thread indices (`tally.rs`; loom numbers its threads itself, below).
    #[cfg(not(herd_loom))]
    pub(crate) use crate::atomic::AtomicUsize;
}

/// A zero whose first value is itself a sequentially consistent store. Free outside loom;
/// under loom it matters: loom lets a `SeqCst` load skip a newer `SeqCst` store only in favour
/// of another `SeqCst` store, and treats the value an atomic was created with as not `SeqCst`,
/// so without this store it explores a shard-lock reader and writer that both read the initial
/// zeros, an outcome the language's sequentially consistent order rules out.
pub(crate) fn sc_zero() -> AtomicU64 {
    let zero = AtomicU64::new(0);
    zero.store(0, Ordering::SeqCst);
    zero
}

/// A mutex with an infallible guard on both backends (the shard lock's writer queue).
pub(crate) struct Mutex {
    #[cfg(not(herd_loom))]
    inner: parking_lot::Mutex<()>,
    #[cfg(herd_loom)]
    inner: loom::sync::Mutex<()>,
}

#[cfg(not(herd_loom))]
pub(crate) type MutexGuard<'a> = parking_lot::MutexGuard<'a, ()>;
#[cfg(herd_loom)]
pub(crate) type MutexGuard<'a> = loom::sync::MutexGuard<'a, ()>;

impl Mutex {
    pub(crate) fn new() -> Self {
        Self {
            #[cfg(not(herd_loom))]
            inner: parking_lot::Mutex::new(()),
            #[cfg(herd_loom)]
            inner: loom::sync::Mutex::new(()),
        }
    }

    /// The guard if the mutex is free now; `None` instead of waiting.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_>> {
        #[cfg(not(herd_loom))]
        {
            self.inner.try_lock()
        }
        #[cfg(herd_loom)]
        {
            self.inner.try_lock().ok()
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_> {
        #[cfg(not(herd_loom))]
        {
            self.inner.lock()
        }
        #[cfg(herd_loom)]
        {
            self.inner.lock().unwrap_or_else(|e| e.into_inner())
        }
    }
}

// The cell below is the shard lock's storage; see `shard_lock.rs` for why `unsafe` is allowed
// for it and how loom checks it.
#[allow(unsafe_code)]
mod cell {
    /// A cell whose accesses loom tracks: under loom, a read that overlaps a write (a hole in the
    /// shard lock) fails the model.
    pub(crate) struct Cell<T> {
        #[cfg(not(herd_loom))]
        inner: std::cell::UnsafeCell<T>,
        #[cfg(herd_loom)]
        inner: loom::cell::UnsafeCell<T>,
    }

    /// Shared access to a [`Cell`]'s content, tracked under loom for as long as it lives.
    pub(crate) struct CellRef<T> {
        #[cfg(not(herd_loom))]
        ptr: *const T,
        #[cfg(herd_loom)]
        ptr: loom::cell::ConstPtr<T>,
    }

    /// Exclusive access to a [`Cell`]'s content, tracked under loom for as long as it lives.
    pub(crate) struct CellMut<T> {
        #[cfg(not(herd_loom))]
        ptr: *mut T,
        #[cfg(herd_loom)]
        ptr: loom::cell::MutPtr<T>,
    }

    impl<T> Cell<T> {
        pub(crate) fn new(value: T) -> Self {
            Self {
                #[cfg(not(herd_loom))]
                inner: std::cell::UnsafeCell::new(value),
                #[cfg(herd_loom)]
                inner: loom::cell::UnsafeCell::new(value),
            }
        }

        #[inline]
        pub(crate) fn get(&self) -> CellRef<T> {
            CellRef {
                ptr: self.inner.get(),
            }
        }

        #[inline]
        pub(crate) fn get_mut(&self) -> CellMut<T> {
            #[cfg(not(herd_loom))]
            {
                CellMut {
                    ptr: self.inner.get(),
                }
            }
            #[cfg(herd_loom)]
            {
                CellMut {
                    ptr: self.inner.get_mut(),
                }
            }
        }
    }

    impl<T> CellRef<T> {
        /// # Safety
        /// No `CellMut` of the same cell may be in use while the returned reference is.
        #[inline]
        pub(crate) unsafe fn get(&self) -> &T {
            #[cfg(not(herd_loom))]
            // SAFETY: the caller guarantees no concurrent exclusive access.
            unsafe {
                &*self.ptr
            }
            #[cfg(herd_loom)]
            // SAFETY: as above (and loom checks it).
            unsafe {
                self.ptr.deref()
            }
        }
    }

    impl<T> CellMut<T> {
        /// # Safety
        /// No other `CellRef` or `CellMut` of the same cell may be in use while the returned
        /// reference is.
        #[inline]
        #[allow(clippy::mut_from_ref)]
        pub(crate) unsafe fn get(&self) -> &mut T {
            #[cfg(not(herd_loom))]
            // SAFETY: the caller guarantees exclusive access.
            unsafe {
                &mut *self.ptr
            }
            #[cfg(herd_loom)]
            // SAFETY: as above (and loom checks it).
            unsafe {
                self.ptr.deref()
            }
        }
    }
}
pub(crate) use cell::{Cell, CellMut, CellRef};

/// One round of waiting for another thread (a writer draining readers): a pause instruction
/// for the first rounds, then a yield to the scheduler, so a descheduled reader gets to run.
/// Under loom, always a yield (loom requires it of every spin loop).
#[inline]
pub(crate) fn wait_round(round: u32) {
    #[cfg(not(herd_loom))]
    {
        if round < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    #[cfg(herd_loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
}

/// This thread's small index (the same one that picks its counter stripe in `tally.rs`), or
/// `usize::MAX` while its thread-locals are being destroyed.
#[cfg(not(herd_loom))]
#[inline]
pub(crate) fn thread_index() -> usize {
    crate::tally::thread_index()
}

/// This loom thread's index: loom runs its threads on one OS thread, so `std` thread-locals
/// cannot tell them apart. Counted afresh in every execution of a model.
#[cfg(herd_loom)]
pub(crate) fn thread_index() -> usize {
    use loom::sync::atomic::AtomicUsize;
    loom::lazy_static! {
        static ref NEXT: AtomicUsize = AtomicUsize::new(0);
    }
    loom::thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}
