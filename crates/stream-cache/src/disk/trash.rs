//! Removed objects are unlinked after the index lock is released, not under it.
//!
//! Unlinking a large file frees its blocks (with `discard`, synchronously): about 4 ms for a
//! 16 MiB object on the machine of docs/benchmarks.md. Done under the index lock, as
//! evictions, replacements, expiries and purges once did, that stalled every lookup and
//! write of the storage. Now `Index::drop_object` renames the file into `tmp/` (a metadata
//! update, as cheap as the lookup's own work) and queues it; the guard every caller holds the
//! lock through ([`IndexGuard`]) takes the queue when it unlocks and unlinks the files right
//! after, on the same thread. The operation that removed them still pays the unlink (as it
//! did; so when it returns the files are gone and the disk holds what the index charges),
//! but no other lookup or write waits for it. A crash in between leaves the file in `tmp/`,
//! which `open` empties. In debug builds, unlinking a file while this thread holds the index
//! lock panics (`remove_quietly`), so a removal path that regresses fails the tests.

use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;

use parking_lot::MutexGuard;

use super::{DiskShared, Index, remove_quietly};

thread_local! {
    /// Whether this thread holds a storage's index lock (debug builds check it before an unlink).
    static HOLDS_INDEX: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread holds an index lock now.
pub(super) fn holds_index_lock() -> bool {
    HOLDS_INDEX.with(Cell::get)
}

/// The locked index; unlinks what was removed under it once the lock is released.
pub(super) struct IndexGuard<'a> {
    guard: Option<MutexGuard<'a, Index>>,
}

impl DiskShared {
    /// Locks the index (see the module docs for what the guard does when dropped).
    pub(super) fn lock_index(&self) -> IndexGuard<'_> {
        let guard = self.index.lock();
        HOLDS_INDEX.with(|h| h.set(true));
        IndexGuard { guard: Some(guard) }
    }
}

impl Deref for IndexGuard<'_> {
    type Target = Index;

    fn deref(&self) -> &Index {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl DerefMut for IndexGuard<'_> {
    fn deref_mut(&mut self) -> &mut Index {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for IndexGuard<'_> {
    fn drop(&mut self) {
        let trash = self
            .guard
            .as_mut()
            .map(|index| std::mem::take(&mut index.trash))
            .unwrap_or_default();
        drop(self.guard.take());
        HOLDS_INDEX.with(|h| h.set(false));
        reap(trash);
    }
}

/// Unlinks removed object files (the index lock is no longer held).
pub(super) fn reap(trash: Vec<PathBuf>) {
    for path in &trash {
        remove_quietly(path);
    }
}
