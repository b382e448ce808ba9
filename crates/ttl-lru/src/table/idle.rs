//! Time-to-idle in a table: the cache's setting, and a per-entry column for entries written
//! with one of their own (`Cache::insert_with_idle`, `CacheBuilder::time_to_idle_by`).
//!
//! The column is a cold column like the weights and gates, with one difference: it does not
//! exist until the first entry with an idle time other than the cache's is written, so a cache
//! that never uses per-entry idle times carries no byte and no read for them. Once it exists it
//! is pushed, swap-removed and replaced together with the slots, and holds every value's idle
//! time (the cache's for entries without their own), in coarse milliseconds, `u64::MAX` for
//! none. Like the stamp it is compared with, it is written only under the write lock.
//!
//! The hit path's gate (`gate_ms`): a hit whose stamp is younger than the smallest idle time
//! the table has ever held, and younger than the recency resolution, can neither be idle nor
//! need a new stamp, so it looks at nothing else (the common read-mostly hit compares once,
//! as it did before per-entry idle times existed). Only an older stamp reads the entry's own
//! idle time.

use super::{Slot, Table};

/// A table's idle times.
pub(crate) struct Idles {
    /// The cache's time-to-idle (`u64::MAX`: none): what an entry without its own has.
    default_ms: u64,
    /// `min(recency_ms, default_ms, every idle time ever stored)`.
    gate_ms: u64,
    /// Each value's idle time, parallel to the slots; empty until the first entry with its own.
    per_entry: Vec<u64>,
    /// `default_ms != u64::MAX || !per_entry.is_empty()`: one test for the write paths of a
    /// cache that never idles anything.
    any: bool,
}

impl Idles {
    /// Shrinks the per-entry column's room as [`Table::compact`] does the others'.
    pub(crate) fn compact(&mut self, keep: usize) {
        if self.per_entry.capacity() > 2 * keep.max(4) {
            self.per_entry.shrink_to(keep);
        }
    }

    pub(crate) fn new() -> Self {
        Self {
            default_ms: u64::MAX,
            gate_ms: 1,
            per_entry: Vec::new(),
            any: false,
        }
    }
}

impl<K, V> Table<K, V> {
    /// Sets the cache's time-to-idle and recency resolution (at build time, table empty).
    pub(crate) fn set_idle_defaults(&mut self, idle_ms: u64, recency_ms: u64) {
        debug_assert!(self.slots.is_empty(), "set at build time");
        let recency_ms = recency_ms.max(1);
        self.idles = Idles {
            default_ms: idle_ms,
            gate_ms: recency_ms.min(idle_ms),
            per_entry: Vec::new(),
            any: idle_ms != u64::MAX,
        };
    }

    /// The idle time of the value at `i` (`u64::MAX`: none).
    #[inline]
    pub(crate) fn idle_of(&self, i: usize) -> u64 {
        match self.idles.per_entry.get(i) {
            Some(&ms) => ms,
            None => self.idles.default_ms,
        }
    }

    /// The hit path's gate: a stamp younger than this is neither idle nor due for a new stamp.
    #[inline]
    pub(crate) fn hit_gate_ms(&self) -> u64 {
        self.idles.gate_ms
    }

    /// Whether any value may have an idle time (the cache's, or one of its own).
    #[inline]
    pub(crate) fn idles_anything(&self) -> bool {
        self.idles.any
    }

    /// Gives the value at `i` (just written) its own idle time, or the cache's (`None`). The
    /// column is created on the first value whose idle time differs from the cache's.
    #[inline]
    pub(crate) fn set_idle(&mut self, i: usize, idle_ms: Option<u64>) {
        if idle_ms.is_some() || !self.idles.per_entry.is_empty() {
            self.set_idle_column(i, idle_ms);
        }
    }

    #[inline(never)]
    fn set_idle_column(&mut self, i: usize, idle_ms: Option<u64>) {
        let ms = idle_ms.unwrap_or(self.idles.default_ms);
        if self.idles.per_entry.is_empty() {
            if ms == self.idles.default_ms {
                return;
            }
            let default = self.idles.default_ms;
            self.idles.per_entry.reserve_exact(self.slots.capacity());
            self.idles.per_entry.resize(self.slots.len(), default);
            self.idles.any = true;
        }
        self.idles.per_entry[i] = ms;
        self.idles.gate_ms = self.idles.gate_ms.min(ms);
    }

    /// Pushes the column's entry for a new last value (the cache's idle time until
    /// [`set_idle`](Self::set_idle) says otherwise).
    #[inline]
    pub(super) fn push_idle(&mut self) {
        if !self.idles.per_entry.is_empty() {
            if self.idles.per_entry.len() == self.idles.per_entry.capacity() {
                let more = self.slots.capacity() - self.idles.per_entry.len();
                self.idles.per_entry.reserve_exact(more.max(1));
            }
            self.idles.per_entry.push(self.idles.default_ms);
        }
    }

    /// Swap-removes the column's entry for the value at `i`, after folding the value's idle
    /// deadline into its expiry: the slot is leaving the table, and whoever receives it (the
    /// eviction listener, the expired-or-evicted count) then sees an idle value as expired
    /// without knowing its idle time.
    #[inline]
    pub(super) fn swap_remove_idle(&mut self, i: usize) {
        if self.idles.any {
            self.fold_idle_deadline(i);
            if !self.idles.per_entry.is_empty() {
                self.idles.per_entry.swap_remove(i);
            }
        }
    }

    /// Folds the idle deadline of the value at `i` into its expiry (it is about to leave the
    /// table: see [`swap_remove_idle`](Self::swap_remove_idle)).
    #[inline]
    pub(super) fn fold_idle_deadline(&mut self, i: usize) {
        if !self.idles.any {
            return;
        }
        let idle = self.idle_of(i);
        if idle != u64::MAX {
            let s = &mut self.slots[i];
            s.expires_at = s.deadline(idle);
        }
    }

    /// Empties the column (the table is being emptied). The gate keeps the smallest idle time
    /// seen: a smaller gate only sends more hits to the slower check, never a wrong answer.
    pub(super) fn clear_idles(&mut self) {
        self.idles.per_entry = Vec::new();
        self.idles.any = self.idles.default_ms != u64::MAX;
    }

    /// The expiry the eviction ranking uses for the value at `i`: its TTL, or its idle
    /// deadline if that comes first (an idle value is as dead as an expired one).
    #[inline]
    pub(super) fn ranked_expiry(&self, s: &Slot<K, V>, i: usize) -> u64 {
        if self.idles_anything() {
            s.deadline(self.idle_of(i))
        } else {
            s.expires_at
        }
    }
}
