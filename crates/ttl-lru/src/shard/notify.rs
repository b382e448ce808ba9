//! Hands what a shard removed to the cache's eviction listener (`listener.rs`), after the
//! shard's lock is released. Every removal site of `shard.rs` already collects its removed
//! entries under the lock and drops them after unlocking; these helpers replace those drops.
//! Without a listener they are the same drops (one branch on `None`).

use std::hash::Hash;
use std::sync::Arc;

use super::{Evicted, Shard};
use crate::listener::{Listener, RemovalCause};
use crate::table::{Removed, Slot};

impl<K: Eq + Hash, V: Clone> Shard<K, V> {
    /// Gives the shard the cache's listener (at build time).
    pub(crate) fn with_listener(mut self, listener: Option<Arc<Listener<K, V>>>) -> Self {
        self.listener = listener;
        self
    }

    /// Reports a value taken out of the shard (unlocked), or drops it. A value past its TTL
    /// (or idle past its time-to-idle) that is evicted counts as expired.
    #[inline]
    pub(crate) fn report(&self, removed: Option<Removed<K, V>>, cause: RemovalCause, now: u64) {
        let Some(listener) = &self.listener else {
            return;
        };
        if let Some(Removed::Value(slot)) = removed {
            deliver(listener, slot, cause, now);
        }
    }

    /// Reports a batch of eviction victims (unlocked), or drops them.
    #[inline]
    pub(super) fn report_evicted(&self, evicted: Evicted<K, V>, now: u64) {
        let Some(listener) = &self.listener else {
            return;
        };
        for removed in evicted.first.into_iter().chain(evicted.rest) {
            if let Removed::Value(slot) = removed {
                deliver(listener, slot, RemovalCause::Size, now);
            }
        }
    }

    /// Reports values removed together for one cause (clear, purge), or drops them.
    pub(super) fn report_all(
        &self,
        removed: impl IntoIterator<Item = Slot<K, V>>,
        cause: RemovalCause,
        now: u64,
    ) {
        let Some(listener) = &self.listener else {
            return;
        };
        for slot in removed {
            deliver(listener, slot, cause, now);
        }
    }
}

fn deliver<K, V>(listener: &Listener<K, V>, slot: Slot<K, V>, cause: RemovalCause, now: u64) {
    // A value leaving its table has its idle deadline folded into its expiry
    // (`table/idle.rs`), so an idle victim shows as expired here. An expired value is
    // reported as such whatever removed it: a victim, or its key's write (the listener's docs).
    let cause = match cause {
        RemovalCause::Size | RemovalCause::Replaced if now >= slot.expires_at => {
            RemovalCause::Expired
        }
        other => other,
    };
    let (key, value) = slot.into_parts();
    listener.deliver(key, value, cause);
}
