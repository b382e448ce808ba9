//! Iteration and predicate removal: [`Cache::iter`] (a weakly consistent snapshot, shard by
//! shard), [`Cache::retain`] and [`Cache::invalidate_if`].
//!
//! No shard lock is held while user code (the consumer of the iterator, the predicate) runs:
//! each shard's fresh entries are cloned under its read lock, the lock is released, and only
//! then are they handed out or judged. A removal then applies only if the key was not written
//! since that copy (the shard's write log says so, the same log that fences fills), so a
//! predicate never removes a value it did not see: a key written meanwhile holds a newer entry,
//! which is kept. Where the log cannot tell (more writes went to the shard during the pass than
//! it remembers), the key's current value is read again and judged again.

use std::hash::Hash;

use crate::cache::Cache;
use crate::shard::Unwritten;

/// An owned iterator over a snapshot of a cache's fresh entries, one shard at a time: see
/// [`Cache::iter`].
pub struct Iter<K, V> {
    cache: Cache<K, V>,
    next_shard: usize,
    current: std::vec::IntoIter<(K, V)>,
}

impl<K, V> std::fmt::Debug for Iter<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter")
            .field("next_shard", &self.next_shard)
            .field("buffered", &self.current.len())
            .finish_non_exhaustive()
    }
}

impl<K, V> Iterator for Iter<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    type Item = (K, V);

    fn next(&mut self) -> Option<(K, V)> {
        loop {
            if let Some(entry) = self.current.next() {
                return Some(entry);
            }
            let shard = self.cache.inner.shards.get(self.next_shard)?;
            self.next_shard += 1;
            self.current = shard.snapshot(self.cache.now()).1.into_iter();
        }
    }
}

impl<K, V> Cache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Iterates over owned `(key, value)` copies of the fresh entries (within their TTL; stale
    /// values and cached errors are left out), shard by shard.
    ///
    /// Weakly consistent, like `ConcurrentHashMap`'s iterators: each shard is copied at once
    /// under its read lock (when the iterator reaches it), so an entry is seen at most once and
    /// as it was at that moment; writes to a shard after its copy are not seen, writes to shards
    /// not reached yet are. No lock is held between calls to `next`, so the iterator may be kept
    /// across awaits and the cache used freely meanwhile. Memory: one shard's fresh entries at
    /// a time. Reading does not count as an access (no recency, no hit counts).
    pub fn iter(&self) -> Iter<K, V> {
        Iter {
            cache: self.clone(),
            next_shard: 0,
            current: Vec::new().into_iter(),
        }
    }

    /// Keeps the fresh entries for which `keep(&key, &value)` is true and invalidates the others
    /// (as [`invalidate`](Self::invalidate): each removed key's in-flight fill is fenced and
    /// detached). Returns how many were removed.
    ///
    /// `keep` runs with no lock held, on a copy of each shard's fresh entries. An entry whose key
    /// is written (inserted, removed, filled) after its shard was copied is newer than what
    /// `keep` saw and is left alone, and so is a key whose entry left by itself (evicted) before
    /// its removal: a fill of it is then newer than the verdict, and nothing is counted;
    /// entries that are stale or expired are not offered (expiry
    /// and `purge_expired` deal with them). Entries that exist from the start of the call to
    /// its end and that `keep` rejects are gone when it returns.
    pub fn retain<P>(&self, mut keep: P) -> usize
    where
        P: FnMut(&K, &V) -> bool,
    {
        let mut removed = 0;
        for shard in self.inner.shards.iter() {
            let (fence, entries) = shard.snapshot(self.now());
            for (key, value) in entries {
                if keep(&key, &value) {
                    continue;
                }
                let hash = self.hash(&key);
                let mut fence = fence;
                loop {
                    match shard.remove_unwritten(hash, &key, fence, self.now()) {
                        Unwritten::Removed => {
                            self.inner.group.forget(&key);
                            removed += 1;
                            break;
                        }
                        Unwritten::Written | Unwritten::Gone => break,
                        // The log overflowed: judge the key's current entry afresh.
                        Unwritten::Unknown => match shard.peek_fenced(hash, &key, self.now()) {
                            (now_fence, Some(v)) if !keep(&key, &v) => fence = now_fence,
                            _ => break,
                        },
                    }
                }
            }
        }
        removed
    }

    /// Invalidates the fresh entries for which `predicate(&key, &value)` is true: the inverse
    /// of [`retain`](Self::retain), with the same guarantees. Returns how many were removed.
    pub fn invalidate_if<P>(&self, mut predicate: P) -> usize
    where
        P: FnMut(&K, &V) -> bool,
    {
        self.retain(|k, v| !predicate(k, v))
    }
}
