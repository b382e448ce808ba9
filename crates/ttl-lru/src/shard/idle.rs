//! Time-to-idle in a shard: the setting and the purge of idle entries. The checks themselves
//! sit in the read paths of `shard.rs` (`Slot::idle_ok`: the recency stamp a hit already reads
//! for eviction, compared with `now`, so a hit gains no write and no clock read); the idle
//! times, the cache's and the per-entry column, are the table's (`table/idle.rs`).

use std::hash::Hash;

use super::Shard;
use crate::table::Slot;

impl<K: Eq + Hash, V: Clone> Shard<K, V> {
    /// Sets the time-to-idle (coarse milliseconds; `u64::MAX` for none), at build time.
    pub(crate) fn with_idle(self, idle_ms: u64) -> Self {
        self.table
            .write()
            .set_idle_defaults(idle_ms, self.recency_ms);
        self
    }

    /// Removes the values idle past their time-to-idle (none without one), giving back their
    /// weight. The entries are returned to be reported or dropped after the lock is released.
    pub(super) fn purge_idle(&self, now: u64) -> Vec<Slot<K, V>> {
        if !self.table.read().idles_anything() {
            return Vec::new();
        }
        let mut t = self.table.write();
        let before = t.weight;
        let removed = t.remove_idle(now);
        self.budget.give(before - t.weight);
        removed
    }
}

/// A hit with a time-to-idle writes no more than a hit without one: only its own thread's line
/// and, at most once per recency resolution, the entry's recency stamp (`cache.rs` checks the
/// same without a time-to-idle).
#[cfg(all(test, not(herd_loom)))]
mod tests {
    use std::time::Duration;

    use crate::atomic::writes_during;
    use crate::{Admission, Cache, ManualClock};

    #[test]
    fn an_idle_checked_hit_writes_only_its_own_threads_line() {
        for admission in [Admission::Always, Admission::Adaptive] {
            let clock = ManualClock::new();
            let c: Cache<u64, u64> = Cache::builder(1000)
                .shards(1)
                .clock(clock.clone())
                .admission(admission)
                .time_to_idle(Duration::from_secs(10))
                .build();
            for k in 0..100 {
                c.insert(k, k, Duration::MAX).unwrap();
                // The adaptive policy's first hit on a main entry protects it (the entry's
                // own word, once): done before the hits measured.
                c.get(&k);
            }
            let me = c.inner.tally.mine().expect("this thread has a stripe");
            let at = std::ptr::from_ref(me) as usize;
            let own = at..at + std::mem::size_of_val(me);
            // The adaptive policy's per-thread hit buffer for the shard is this thread's too.
            let buffer = c.inner.shards[0]
                .hit_buffers
                .as_ref()
                .map_or(0..0, |b| b.range(me.index));
            // Keys the adaptive policy's simulations do not sample: a sampled key's hit may fill
            // the buffer and drain it under the shard's write lock (one hit in 8 sampled ones;
            // `shard.rs` tests that path).
            let sampled = |k: &u64| {
                let shard = &c.inner.shards[0];
                let t = shard.table.read();
                t.adaptive
                    .as_ref()
                    .is_some_and(|st| st.minis.sampled(c.hash(k)))
            };
            let keys: Vec<u64> = (0..100).filter(|k| !sampled(k)).collect();
            assert!(keys.len() >= 50, "{} keys not sampled", keys.len());
            let ((), writes) = writes_during(|| {
                for &k in &keys {
                    assert_eq!(c.get(&k), Some(k));
                }
            });
            assert!(
                writes.len() >= 2 * keys.len(),
                "{} writes logged",
                writes.len()
            );
            let shared: Vec<_> = writes
                .iter()
                .filter(|a| !own.contains(a) && !buffer.contains(a))
                .collect();
            assert_eq!(shared, Vec::<&usize>::new(), "{admission:?}");
        }
    }
}
