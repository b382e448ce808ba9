//! A shard's side of iteration and predicate removal (`Cache::iter`, `Cache::retain`): a copy
//! of its fresh entries taken under the read lock together with the shard's write sequence, and
//! a removal that applies only if the key was not written since that copy (so a predicate only
//! ever removes the entry it judged). In a module of its own so the shard's write and eviction
//! code is untouched.

use std::borrow::Borrow;
use std::hash::Hash;

use super::Shard;
use crate::listener::RemovalCause;
use crate::sync::Ordering;

/// Whether a conditional removal applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unwritten {
    /// No write of the key since the fence: the entry (if still there) was removed.
    Removed,
    /// The key was written since: the entry there now is newer than the one judged.
    Written,
    /// More writes went to the shard since the fence than its write log remembers: unknown.
    Unknown,
}

impl<K: Eq + Hash + Clone, V: Clone> Shard<K, V> {
    /// The shard's fresh values, cloned under the read lock (`K::clone` and `V::clone` run
    /// there, as `V::clone` does on every hit; nothing else of the user's), with the write
    /// sequence they reflect.
    pub(crate) fn snapshot(&self, now: u64) -> (u64, Vec<(K, V)>) {
        let t = self.table.read();
        let fence = self.writes.load(Ordering::Acquire);
        let entries = t
            .values()
            .iter()
            .enumerate()
            .filter(|&(i, s)| now < s.expires_at && s.idle_ok(now, t.idle_of(i)))
            .map(|(_, s)| (s.key().clone(), s.value.clone()))
            .collect();
        (fence, entries)
    }

    /// One key's fresh value with the write sequence it reflects.
    pub(crate) fn peek_fenced<Q>(&self, hash: u64, q: &Q, now: u64) -> (u64, Option<V>)
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.table.read();
        let fence = self.writes.load(Ordering::Acquire);
        let value = t
            .find_value(hash, q)
            .filter(|&i| now < t.slot(i).expires_at && t.slot(i).idle_ok(now, t.idle_of(i)))
            .map(|i| t.slot(i).value.clone());
        (fence, value)
    }

    /// Removes `q`'s entry (fencing its in-flight fills, as `remove` does) unless the key was
    /// written after `fence`.
    pub(crate) fn remove_unwritten<Q>(&self, hash: u64, q: &Q, fence: u64, now: u64) -> Unwritten
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let mut t = self.table.write();
        let seq = self.writes.load(Ordering::Relaxed);
        if seq.wrapping_sub(fence) > t.writes.len() {
            return Unwritten::Unknown;
        }
        if t.writes.fences(fence, seq, hash) {
            return Unwritten::Written;
        }
        self.bump_fence(&mut t, hash);
        let removed = self.remove_key_locked(&mut t, hash, q);
        drop(t);
        // Reported (or dropped: key and value are user types) here, unlocked.
        self.report(removed, RemovalCause::Invalidated, now);
        Unwritten::Removed
    }
}
