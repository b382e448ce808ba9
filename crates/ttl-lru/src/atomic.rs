//! The crate's atomic integers: thin wrappers over std's (`#[repr(transparent)]`, every method
//! `#[inline]`, so a build compiles them to the same instructions), which in `cargo test`
//! builds log the address of every write a thread makes. A test can then check which memory a
//! hit writes (`cache.rs`: the default hit path writes only its own thread's line, and a
//! recency stamp at most once per resolution).
//!
//! Every atomic of the crate is one of these, reached through `crate::sync` (loom's replace the
//! modelled ones under `herd_loom`): this crate's `clippy.toml` disallows std's atomic integer
//! types everywhere else, so a shared write added to a hit path, in whatever module, shows up
//! in the log. Loads are not logged; every method that can store is, whether or not it changed
//! the value (a failed compare-and-swap still takes its line exclusive on x86).
#![allow(clippy::disallowed_types)]

use std::sync::atomic::Ordering;

#[cfg(all(test, not(herd_loom)))]
mod log {
    use std::cell::RefCell;

    thread_local! {
        /// The addresses this thread wrote while recording; `None` when not recording.
        static LOG: RefCell<Option<Vec<usize>>> = const { RefCell::new(None) };
    }

    pub(super) fn note<T>(atomic: &T) {
        let addr = std::ptr::from_ref(atomic) as usize;
        let _ = LOG.try_with(|log| {
            if let Some(log) = log.borrow_mut().as_mut() {
                log.push(addr);
            }
        });
    }

    /// Runs `f`, returning its result and the address of every atomic this thread wrote
    /// meanwhile.
    pub(crate) fn writes_during<R>(f: impl FnOnce() -> R) -> (R, Vec<usize>) {
        LOG.with(|log| *log.borrow_mut() = Some(Vec::new()));
        let r = f();
        let log = LOG.with(|log| log.borrow_mut().take()).unwrap_or_default();
        (r, log)
    }
}
#[cfg(all(test, not(herd_loom)))]
pub(crate) use log::writes_during;

/// Logs a write (test builds); nothing otherwise.
#[inline(always)]
fn note<T>(_atomic: &T) {
    #[cfg(all(test, not(herd_loom)))]
    log::note(_atomic);
}

macro_rules! counted {
    ($name:ident, $std:ty, $int:ty) => {
        /// A std atomic (that logs its writes in test builds).
        #[derive(Debug, Default)]
        #[repr(transparent)]
        pub(crate) struct $name($std);

        #[allow(dead_code)]
        impl $name {
            pub(crate) const fn new(v: $int) -> Self {
                Self(<$std>::new(v))
            }
            #[inline]
            pub(crate) fn load(&self, o: Ordering) -> $int {
                self.0.load(o)
            }
            #[inline]
            pub(crate) fn store(&self, v: $int, o: Ordering) {
                note(self);
                self.0.store(v, o)
            }
            #[inline]
            pub(crate) fn swap(&self, v: $int, o: Ordering) -> $int {
                note(self);
                self.0.swap(v, o)
            }
            #[inline]
            pub(crate) fn fetch_add(&self, v: $int, o: Ordering) -> $int {
                note(self);
                self.0.fetch_add(v, o)
            }
            #[inline]
            pub(crate) fn fetch_sub(&self, v: $int, o: Ordering) -> $int {
                note(self);
                self.0.fetch_sub(v, o)
            }
            #[inline]
            pub(crate) fn fetch_or(&self, v: $int, o: Ordering) -> $int {
                note(self);
                self.0.fetch_or(v, o)
            }
            #[inline]
            pub(crate) fn compare_exchange(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                note(self);
                self.0.compare_exchange(current, new, success, failure)
            }
            #[inline]
            pub(crate) fn compare_exchange_weak(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                note(self);
                self.0.compare_exchange_weak(current, new, success, failure)
            }
            #[inline]
            pub(crate) fn fetch_update(
                &self,
                set: Ordering,
                fetch: Ordering,
                f: impl FnMut($int) -> Option<$int>,
            ) -> Result<$int, $int> {
                note(self);
                self.0.fetch_update(set, fetch, f)
            }
        }
    };
}

counted!(AtomicU64, std::sync::atomic::AtomicU64, u64);
counted!(AtomicI64, std::sync::atomic::AtomicI64, i64);
#[cfg(not(herd_loom))]
counted!(AtomicUsize, std::sync::atomic::AtomicUsize, usize);
