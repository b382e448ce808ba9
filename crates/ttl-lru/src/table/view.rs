//! Read access to a table's values for the shard's snapshots (`Cache::iter`, `retain`): kept
//! out of `table.rs` so the eviction code there stays as it is.

use super::{Slot, Table};

impl<K, V> Slot<K, V> {
    /// The entry's key.
    #[inline]
    pub(crate) fn key(&self) -> &K {
        &self.key
    }
}

impl<K, V> Table<K, V> {
    /// Every stored value (cached errors are kept apart and not included).
    #[inline]
    pub(crate) fn values(&self) -> &[Slot<K, V>] {
        &self.slots
    }
}

impl<K, V> Slot<K, V> {
    /// The entry's key and value, by move (for the eviction listener).
    #[inline]
    pub(crate) fn into_parts(self) -> (K, V) {
        (self.key, self.value)
    }
}

impl<K, V> Slot<K, V> {
    /// Whether the entry was accessed (read or written) less than `idle_ms` ago, by its
    /// recorded recency stamp (`u64::MAX`: no time-to-idle). The stamp is the one hits already
    /// keep for eviction, so a hit reads one word of the slot it reads anyway.
    #[inline]
    pub(crate) fn idle_ok(&self, now: u64, idle_ms: u64) -> bool {
        now.saturating_sub(self.stamp()) < idle_ms
    }

    /// The recency stamp without the adaptive policy's flags, which share its word.
    #[inline]
    fn stamp(&self) -> u64 {
        self.last_access.load(crate::sync::Ordering::Relaxed) & crate::adaptive::STAMP
    }

    /// The hit path's check and touch in one: whether the value is fresh (within its TTL and
    /// not idle), and if so records the access (as [`Slot::touch`]). `gate_ms` is the table's
    /// gate (`table/idle.rs`: at most `every_ms` and every idle time the table holds), and
    /// `idle_ms` gives the entry's idle time, read only past the gate: a stamp younger than the
    /// gate (the common, read-mostly case) needs neither a touch nor an idle check, so that
    /// case compares once, as a hit without a time-to-idle always did.
    ///
    /// Only for policies whose stamp word carries no flags (not the adaptive one, which reads
    /// and touches through [`fresh`](Self::fresh) and its own `touch_flagged`): it stores a
    /// bare stamp.
    #[inline]
    pub(crate) fn hit(
        &self,
        now: u64,
        gate_ms: u64,
        idle_ms: impl FnOnce() -> u64,
        every_ms: u64,
    ) -> bool {
        if now >= self.expires_at {
            return false;
        }
        let since = now.saturating_sub(self.last_access.load(crate::sync::Ordering::Relaxed));
        if since >= gate_ms {
            if since >= idle_ms() {
                return false;
            }
            if since >= every_ms {
                self.last_access.store(now, crate::sync::Ordering::Relaxed);
            }
        }
        true
    }

    /// Whether the value is fresh (within its TTL and not idle), without touching it: the
    /// check of [`hit`](Self::hit), for a policy that touches through its own path. As there,
    /// a stamp younger than the table's gate (`gate_ms`) cannot be idle, so the value's idle
    /// time is read only for an older one.
    #[inline]
    pub(crate) fn fresh(&self, now: u64, gate_ms: u64, idle_ms: impl FnOnce() -> u64) -> bool {
        if now >= self.expires_at {
            return false;
        }
        let since = now.saturating_sub(self.stamp());
        since < gate_ms || since < idle_ms()
    }

    /// When the entry stops being fresh: its TTL or its idle deadline, whichever is first.
    #[inline]
    pub(crate) fn deadline(&self, idle_ms: u64) -> u64 {
        let idle = self.stamp().saturating_add(idle_ms);
        self.expires_at.min(idle)
    }
}

impl<K: Eq + std::hash::Hash, V> Table<K, V> {
    /// Removes every value idle for its idle time or longer (`purge_expired` with a
    /// time-to-idle, the cache's or an entry's own).
    pub(crate) fn remove_idle(&mut self, now: u64) -> Vec<Slot<K, V>> {
        let mut removed = Vec::new();
        // From the end: a swap-remove only moves an entry that was already checked.
        for i in (0..self.slots.len()).rev() {
            if !self.slots[i].idle_ok(now, self.idle_of(i))
                && let super::Removed::Value(slot) = self.remove_at(super::At::Value(i))
            {
                removed.push(slot);
            }
        }
        removed
    }
}
