//! The Redis-style eviction candidate pool, kept per shard across evictions.
//!
//! Each eviction samples `k` random slots; the pool remembers the best victims seen so far (lowest
//! rank = least recently used, with stale entries ranked before live ones), so a sample that missed
//! the true LRU entry this time still benefits from good candidates found earlier. Candidates are
//! remembered by slot index and key hash: swap-remove can move an entry, so the index is only a hint
//! checked against the hash, with a hash-table probe as the fallback.

/// One remembered eviction candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Smaller is a better victim.
    pub(crate) rank: u64,
    /// The full 64-bit key hash: identifies the entry.
    pub(crate) hash: u64,
    /// Where the entry was when sampled (a hint).
    pub(crate) idx: u32,
}

/// Up to `capacity` candidates sorted by rank, best victim first.
#[derive(Debug)]
pub(crate) struct EvictionPool {
    entries: Vec<Candidate>,
    capacity: usize,
}

impl EvictionPool {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: Vec::with_capacity(capacity),
            capacity,
        }
    }

    pub(crate) fn is_enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Whether [`offer`](Self::offer) would drop a candidate of this rank unseen: the pool is
    /// full and its worst candidate is no worse.
    #[inline]
    pub(crate) fn would_reject(&self, rank: u64) -> bool {
        self.entries.len() == self.capacity
            && self.entries.last().is_some_and(|worst| worst.rank <= rank)
    }

    /// Offers a candidate: kept if the pool has room or it beats the worst one. A candidate for a
    /// hash already pooled replaces that entry (its rank may have changed).
    pub(crate) fn offer(&mut self, c: Candidate) {
        if self.capacity == 0 {
            return;
        }
        // Most samples are worse than every pooled candidate once the pool is full: reject them
        // before the scan. (If this hash is pooled under an older, better rank, that stale rank
        // stays; `choose_victim` re-ranks a candidate before evicting it.)
        if self.entries.len() == self.capacity
            && self
                .entries
                .last()
                .is_some_and(|worst| worst.rank <= c.rank)
        {
            return;
        }
        if let Some(pos) = self.entries.iter().position(|e| e.hash == c.hash) {
            self.entries.remove(pos);
        } else if self.entries.len() == self.capacity {
            match self.entries.last() {
                Some(worst) if worst.rank > c.rank => {
                    self.entries.pop();
                }
                _ => return,
            }
        }
        let at = self.entries.partition_point(|e| e.rank <= c.rank);
        self.entries.insert(at, c);
    }

    /// Removes and returns the best candidate.
    pub(crate) fn pop_best(&mut self) -> Option<Candidate> {
        if self.entries.is_empty() {
            None
        } else {
            Some(self.entries.remove(0))
        }
    }

    /// The best remaining rank, if any.
    pub(crate) fn best_rank(&self) -> Option<u64> {
        self.entries.first().map(|c| c.rank)
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(rank: u64, hash: u64) -> Candidate {
        Candidate { rank, hash, idx: 0 }
    }

    #[test]
    fn keeps_the_best_candidates_sorted() {
        let mut p = EvictionPool::new(3);
        for (r, h) in [(5, 1), (3, 2), (9, 3), (1, 4), (7, 5)] {
            p.offer(c(r, h));
        }
        assert_eq!(p.len(), 3);
        assert_eq!(p.pop_best(), Some(c(1, 4)));
        assert_eq!(p.pop_best(), Some(c(3, 2)));
        assert_eq!(p.pop_best(), Some(c(5, 1)));
        assert_eq!(p.pop_best(), None);
    }

    #[test]
    fn re_offering_a_hash_updates_its_rank() {
        let mut p = EvictionPool::new(4);
        p.offer(c(1, 7));
        p.offer(c(2, 8));
        p.offer(c(10, 7));
        assert_eq!(p.len(), 2);
        assert_eq!(p.best_rank(), Some(2));
    }

    #[test]
    fn disabled_pool_keeps_nothing() {
        let mut p = EvictionPool::new(0);
        p.offer(c(1, 1));
        assert!(!p.is_enabled());
        assert_eq!(p.pop_best(), None);
    }
}
