//! Write fences: what makes a purge final and keeps a newer write from being replaced by an older
//! one, however long the older one took to get going.
//!
//! Why it exists: a fill can spend a long time before its write becomes visible (fetching the
//! origin's headers, creating a file). A purge in that window removes nothing, and the fill then
//! publishes the body it fetched *before* the purge; worse, a fill started after the purge can be
//! replaced by the older one that finishes its preamble later. The fix is ttl-lru's
//! `insert_fenced` design: a fill takes a [`WriteFence`] (a ticket) when it starts, and the
//! storage checks it at the one place it makes a write visible, under the same lock as its index
//! and its purges.
//!
//! Design:
//! - Tickets come from one counter per table, so they order every fill and purge of a storage.
//! - Per key, the table remembers the newest purge and the newest write made visible, but only
//!   while some fence of that key is held (`holders`): a fence taken later gets a larger ticket
//!   and needs neither record. So the table is O(keys with a fill in its preamble), never
//!   O(keys ever purged), and nothing has false positives (unlike a striped fence, which would
//!   abort an unrelated fill with `Purged`).
//! - [`FenceTable::admit`] and [`FenceTable::purge`] must run under the backend's index lock, so
//!   that "check, then make visible" and "fence, then remove" cannot interleave.
//!
//! The table is public so that third-party backends implement [`crate::Storage::fence`] and
//! [`crate::Storage::begin_write_fenced`] with it (the conformance suite checks they do).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sync::Mutex;
use crate::traits::CacheKey;

/// A ticket ordering one write against the purges and other writes of its key. Taken when a
/// fill starts ([`crate::Storage::fence`]) and handed to
/// [`crate::Storage::begin_write_fenced`]. Holding it keeps a few bytes of per-key bookkeeping
/// alive in its table; dropping it releases them.
pub struct WriteFence {
    key: CacheKey,
    ticket: u64,
    table: Arc<TableInner>,
}

impl fmt::Debug for WriteFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteFence")
            .field("key", &self.key)
            .field("ticket", &self.ticket)
            .finish()
    }
}

impl WriteFence {
    /// The key this fence was taken for.
    pub fn key(&self) -> &CacheKey {
        &self.key
    }

    /// The ticket: larger means the fill started later.
    pub fn ticket(&self) -> u64 {
        self.ticket
    }
}

impl Drop for WriteFence {
    fn drop(&mut self) {
        let mut keys = self.table.keys.lock();
        if let Some(entry) = keys.get_mut(&self.key) {
            entry.holders -= 1;
            if entry.holders == 0 {
                keys.remove(&self.key);
            }
        }
    }
}

/// What [`FenceTable::admit`] decided for a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Make the write visible: nothing newer happened to its key since its fence was taken.
    Admitted,
    /// The key was purged after the fence was taken: abort the write with
    /// [`AbortReason::Purged`](crate::AbortReason::Purged) and never make it visible.
    Purged,
    /// A newer write of the key was made visible: this one may run for its own readers but must
    /// never become the key's object.
    Superseded,
}

/// Per-key fences of one storage (see the module docs). Cheap to clone: clones share the table.
#[derive(Clone, Default)]
pub struct FenceTable {
    inner: Arc<TableInner>,
}

impl fmt::Debug for FenceTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceTable")
            .field("keys_fenced", &self.keys_fenced())
            .finish()
    }
}

#[derive(Default)]
struct TableInner {
    next_ticket: AtomicU64,
    keys: Mutex<HashMap<CacheKey, KeyFence>>,
}

#[derive(Debug, Default)]
struct KeyFence {
    /// Fences of this key currently held.
    holders: usize,
    /// The ticket of the newest purge since the oldest held fence was taken (0: none).
    purged_at: u64,
    /// The ticket of the newest write made visible since then (0: none).
    visible_at: u64,
}

impl FenceTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    fn next_ticket(&self) -> u64 {
        // Tickets start at 1 so that 0 can mean "no purge, no visible write".
        self.inner.next_ticket.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Take a fence for `key`. The ticket is drawn under the table lock so that it is ordered
    /// with every purge of the key.
    pub fn fence(&self, key: &CacheKey) -> WriteFence {
        let mut keys = self.inner.keys.lock();
        let ticket = self.next_ticket();
        keys.entry(key.clone()).or_default().holders += 1;
        drop(keys);
        WriteFence {
            key: key.clone(),
            ticket,
            table: Arc::clone(&self.inner),
        }
    }

    /// Record a purge of `key`: every fence of it held now is fenced out. Call under the
    /// backend's index lock, together with removing the key's object.
    pub fn purge(&self, key: &CacheKey) {
        let mut keys = self.inner.keys.lock();
        if let Some(entry) = keys.get_mut(key) {
            entry.purged_at = self.next_ticket();
        }
    }

    /// Decide whether the write holding `fence` may become visible, and if so record it as the
    /// key's newest visible write. Call under the backend's index lock, and make the write
    /// visible (or not) before releasing it.
    ///
    /// A fence from another table, or for another key, is never admitted (`Superseded`).
    pub fn admit(&self, fence: &WriteFence) -> Admission {
        self.decide(fence, true)
    }

    /// What [`admit`](Self::admit) would answer, recording nothing: for a write the backend
    /// refuses anyway (no room), which must not fence out an older write that could still be
    /// stored.
    pub fn check(&self, fence: &WriteFence) -> Admission {
        self.decide(fence, false)
    }

    fn decide(&self, fence: &WriteFence, record: bool) -> Admission {
        if !Arc::ptr_eq(&self.inner, &fence.table) {
            return Admission::Superseded;
        }
        let mut keys = self.inner.keys.lock();
        let Some(entry) = keys.get_mut(&fence.key) else {
            // Unreachable while `fence` is alive: it holds its entry.
            return Admission::Superseded;
        };
        if fence.ticket < entry.purged_at {
            Admission::Purged
        } else if fence.ticket < entry.visible_at {
            Admission::Superseded
        } else {
            if record {
                entry.visible_at = fence.ticket;
            }
            Admission::Admitted
        }
    }

    /// True if `fence` was taken from this table for `key`: a backend refuses any other fence
    /// with `StorageError::ForeignFence`.
    pub fn issued(&self, fence: &WriteFence, key: &CacheKey) -> bool {
        Arc::ptr_eq(&self.inner, &fence.table) && fence.key == *key
    }

    /// Keys with at least one fence held: the table's size (bounded by fills in their preamble).
    pub fn keys_fenced(&self) -> usize {
        self.inner.keys.lock().len()
    }
}
