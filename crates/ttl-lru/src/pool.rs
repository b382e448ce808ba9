//! The Redis-style eviction candidate pool, kept per shard across evictions.
//!
//! Each eviction samples `k` random slots; the pool remembers the best victims seen so far (lowest
//! rank = least recently used, with stale entries ranked before live ones), so a sample that missed
//! the true LRU entry this time still benefits from good candidates found earlier.
//!
//! Candidates are remembered by place and rank only, not by identity. A place may hold another
//! entry by the time it is popped (a swap-remove moved one in, or the candidate was evicted and its
//! place refilled); `Table::choose_victim` re-ranks whatever is there and evicts it if it is as good
//! a victim as the rank recorded, whoever it is. Checking identity instead cost a read of the
//! entry's hash from the cold array per pooled sample and per pop: two cache misses per insert at
//! 1M entries, for no better choice of victim.

/// One remembered eviction candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Smaller is a better victim.
    pub(crate) rank: u64,
    /// The entry's place when sampled (the table's encoded place: array and index).
    pub(crate) idx: u32,
    /// The adaptive policy's sketch count for the entry when it was pooled (0 for the other
    /// policies; it fills padding). Main's victim is the least frequent of the oldest pooled
    /// candidates: reading their counts here instead of the sketch saves a sketch lookup per
    /// candidate per eviction (a pooled entry's count moves only when it is hit, which also
    /// raises its rank and so has it re-pooled with a fresh count).
    pub(crate) freq: u8,
}

/// Up to `capacity` candidates sorted by rank, worst first and the best victim last, so taking
/// the best is a `pop` and dropping the worst for a better candidate is one shift of the
/// entries before the new one's place. (Best-first cost two shifts per insert at capacity, one
/// of them the whole pool; an unsorted array with scans for the best and the worst was measured
/// slower still: 330 against 300 ns per insert at capacity, 10K entries.)
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

    /// Offers a candidate: kept if the pool has room or it beats the worst one. A candidate for a
    /// place already pooled replaces that entry (its rank may have changed).
    #[inline]
    pub(crate) fn offer(&mut self, c: Candidate) {
        // Most samples are worse than every pooled candidate once the pool is full: reject them
        // here, inlined into the sampling loop, before any call (measured: 350 -> 300 ns per
        // insert at capacity, 10K entries). If this place is pooled under an older, better rank,
        // that stale rank stays; `choose_victim` re-ranks a candidate before evicting it.
        if c.rank < self.bar() {
            self.admit(c);
        }
    }

    /// Ranks below this are kept by [`offer`](Self::offer) (`u64::MAX` while the pool has room;
    /// 0 when it is disabled): a sampling loop compares against it and calls
    /// [`admit`](Self::admit) only when it passes, re-reading it afterwards.
    #[inline]
    pub(crate) fn bar(&self) -> u64 {
        if self.entries.len() < self.capacity {
            u64::MAX
        } else {
            self.entries.first().map_or(0, |worst| worst.rank)
        }
    }

    /// The rest of [`offer`](Self::offer), for a candidate below [`bar`](Self::bar).
    #[inline(never)]
    pub(crate) fn admit(&mut self, c: Candidate) {
        if let Some(pos) = self.entries.iter().position(|e| e.idx == c.idx) {
            self.entries.remove(pos);
        }
        // After every worse candidate and before the equal ones, which were offered earlier and
        // so are taken first.
        let at = self.entries.partition_point(|e| e.rank > c.rank);
        if self.entries.len() < self.capacity {
            self.entries.insert(at, c);
        } else {
            // Full, and `c` beats the worst (`bar` said so, so `at >= 1`): the worst leaves and
            // the candidates up to `c`'s place move down one.
            self.entries[..at].rotate_left(1);
            self.entries[at - 1] = c;
        }
    }

    /// Removes and returns the best candidate.
    pub(crate) fn pop_best(&mut self) -> Option<Candidate> {
        self.entries.pop()
    }

    /// The pooled candidates, worst first.
    #[inline]
    pub(crate) fn candidates(&self) -> &[Candidate] {
        &self.entries
    }

    /// The best candidate, left in the pool.
    #[inline]
    pub(crate) fn best(&self) -> Option<Candidate> {
        self.entries.last().copied()
    }

    /// The best remaining rank, if any.
    pub(crate) fn best_rank(&self) -> Option<u64> {
        self.entries.last().map(|c| c.rank)
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// How many candidates the pool keeps (tests).
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn capacity_for_test(&self) -> usize {
        self.capacity
    }

    /// The candidate at `pos` (0 is the worst, `len() - 1` the best).
    #[inline]
    pub(crate) fn at(&self, pos: usize) -> Candidate {
        self.entries[pos]
    }

    /// Removes the candidate at `pos`; the ones after it move down one place.
    pub(crate) fn remove(&mut self, pos: usize) -> Candidate {
        self.entries.remove(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(rank: u64, idx: u32) -> Candidate {
        Candidate { rank, idx, freq: 0 }
    }

    #[test]
    fn pops_the_best_candidates_first() {
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
    fn a_full_pool_tracks_its_worst_candidate() {
        let mut p = EvictionPool::new(3);
        for (r, i) in [(5, 1), (3, 2), (9, 3)] {
            p.offer(c(r, i));
        }
        p.offer(c(7, 4)); // beats 9, which leaves
        p.offer(c(8, 5)); // worse than every candidate now held
        p.offer(c(7, 6)); // ties the worst: rejected
        assert_eq!(p.len(), 3);
        assert_eq!(p.pop_best(), Some(c(3, 2)));
        p.offer(c(6, 7)); // room again
        assert_eq!(p.pop_best(), Some(c(5, 1)));
        assert_eq!(p.pop_best(), Some(c(6, 7)));
        assert_eq!(p.pop_best(), Some(c(7, 4)));
        assert_eq!(p.pop_best(), None);
    }

    #[test]
    fn equal_ranks_leave_in_the_order_they_came() {
        let mut p = EvictionPool::new(4);
        for i in 1..=4 {
            p.offer(c(5, i));
        }
        p.offer(c(3, 9)); // full: the newest of the equal worst (place 4) leaves
        assert_eq!(p.pop_best(), Some(c(3, 9)));
        let order: Vec<u32> = std::iter::from_fn(|| p.pop_best()).map(|c| c.idx).collect();
        assert_eq!(order, vec![1, 2, 3]);
    }

    #[test]
    fn re_offering_a_place_updates_its_rank() {
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
