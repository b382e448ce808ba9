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
