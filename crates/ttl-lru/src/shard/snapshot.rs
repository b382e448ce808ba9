//! A shard's side of iteration and predicate removal (`Cache::iter`, `Cache::retain`): a copy
//! of its fresh entries taken under the read lock together with the shard's write sequences,
//! and a removal that applies only if the key was not written since that copy (so a predicate
//! only ever removes the entry it judged). In a module of its own so the shard's write and
//! eviction code is untouched.

use std::borrow::Borrow;
use std::hash::Hash;

use super::Shard;
use crate::listener::RemovalCause;
use crate::sync::Ordering;

/// Whether a conditional removal applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unwritten {
    /// No write of the key since the fence: the entry was removed.
    Removed,
    /// No write of the key since the fence, and no entry either (evicted, or gone idle, since
    /// the copy): nothing of what was judged is left, and nothing was touched.
    Gone,
    /// The key was written since: the entry there now is newer than the one judged.
    Written,
    /// More writes went to the shard since the fence than its write log remembers: unknown.
    Unknown,
}

/// The shard's write sequences a copy reflects: its plain writes and removals (`writes`, whose
/// log fences fills) and its stores of any kind, fills' included (`stores`, whose log is kept
/// for this check alone: a fill's store must not be removed for a verdict on the value it
/// replaced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    writes: u64,
    stores: u64,
}

impl<K: Eq + Hash + Clone, V: Clone> Shard<K, V> {
    /// Both write sequences, as of now (under the shard's lock, so matching the table).
    fn seen(&self) -> Seen {
        Seen {
            writes: self.writes.load(Ordering::Acquire),
            stores: self.stores.load(Ordering::Acquire),
        }
    }

    /// The shard's fresh values, cloned under the read lock (`K::clone` and `V::clone` run
    /// there, as `V::clone` does on every hit; nothing else of the user's), with the write
    /// sequences they reflect.
    pub(crate) fn snapshot(&self, now: u64) -> (Seen, Vec<(K, V)>) {
        let t = self.table.read();
        let fence = self.seen();
        let entries = t
            .values()
            .iter()
            .enumerate()
            .filter(|&(i, s)| now < s.expires_at && s.idle_ok(now, t.idle_of(i)))
            .map(|(_, s)| (s.key().clone(), s.value.clone()))
            .collect();
        (fence, entries)
    }

    /// One key's fresh value with the write sequences it reflects.
    pub(crate) fn peek_fenced<Q>(&self, hash: u64, q: &Q, now: u64) -> (Seen, Option<V>)
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        let fence = self.seen();
        let value = t
            .find_value(hash, q)
            .filter(|&i| now < t.slot(i).expires_at && t.slot(i).idle_ok(now, t.idle_of(i)))
            .map(|i| t.slot(i).value.clone());
        (fence, value)
    }

    /// Removes `q`'s entry (fencing its in-flight fills, as `remove` does) unless the key was
    /// written (inserted, removed, filled) after `fence`.
    pub(crate) fn remove_unwritten<Q>(&self, hash: u64, q: &Q, fence: Seen, now: u64) -> Unwritten
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let mut t = self.table.write();
        let now_seen = self.seen();
        let (writes, stores) = (now_seen.writes, now_seen.stores);
        if writes.wrapping_sub(fence.writes) > t.writes.len()
            || stores.wrapping_sub(fence.stores) > t.stored.len()
        {
            return Unwritten::Unknown;
        }
        if t.writes.fences(fence.writes, writes, hash)
            || t.stored.fences(fence.stores, stores, hash)
        {
            return Unwritten::Written;
        }
        let removed = self.remove_key_locked(&mut t, hash, q);
        if removed.is_none() {
            // A fill of the key running now started after the entry left (evictions are not
            // logged writes): it is newer than the verdict, and is neither fenced nor counted.
            return Unwritten::Gone;
        }
        self.bump_fence(&mut t, hash);
        drop(t);
        // Reported (or dropped: key and value are user types) here, unlocked.
        self.report(removed, RemovalCause::Invalidated, now);
        Unwritten::Removed
    }
}
