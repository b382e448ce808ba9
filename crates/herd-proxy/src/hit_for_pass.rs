//! Hit-for-pass: the URLs whose last response may not be stored, remembered for a while, so
//! their requests go straight to the origin, each on its own fetch.
//!
//! Without it every request for such a URL missed, joined the fill in progress, waited for its
//! response head only to learn it could not share it, and then fetched its own: against a slow
//! origin, every burst took two origin round trips per request (Varnish's reason for the same
//! mechanism). A body that outgrew the object limit is remembered too: otherwise each request
//! filled it again and every client of that fill got a body that failed at the limit.
//!
//! The marks live in a bounded `ttl_lru::Cache` (old marks are evicted, never a memory leak),
//! each holding its deadline on the proxy's own clock, so tests expire them without sleeping.

use std::time::{Duration, SystemTime};

use stream_cache::CacheKey;

use crate::clock::Clock;

/// Most URLs remembered at once (the least recently used go first).
const CAPACITY: u64 = 65_536;

/// The marks (none when the setting is zero).
#[derive(Clone)]
pub(crate) struct HitForPass {
    marks: Option<ttl_lru::Cache<CacheKey, SystemTime>>,
    ttl: Duration,
    clock: Clock,
}

impl HitForPass {
    pub(crate) fn new(ttl: Duration, clock: Clock) -> Self {
        // Sampled LRU, not the store's default adaptive policy: that one may decline a new
        // mark while the table is full, and an unmarked URL serializes its requests behind
        // fills again. The newest mark is the one that matters here.
        let marks = (!ttl.is_zero()).then(|| {
            ttl_lru::Cache::builder(CAPACITY)
                .admission(ttl_lru::Admission::Always)
                .build()
        });
        HitForPass { marks, ttl, clock }
    }

    /// Pass `key` for the configured time from now.
    pub(crate) fn mark(&self, key: &CacheKey) {
        let Some(marks) = &self.marks else { return };
        let until = self.clock.now() + self.ttl;
        // The store's own ttl only retires marks nobody asks about; `is_marked` decides.
        let _ = marks.insert(key.clone(), until, self.ttl);
    }

    /// Whether `key` is to be passed now.
    pub(crate) fn is_marked(&self, key: &CacheKey) -> bool {
        let Some(marks) = &self.marks else {
            return false;
        };
        marks.get(key).is_some_and(|until| self.clock.now() < until)
    }

    /// Forget `key`'s mark (a purge: the next request fills again).
    pub(crate) fn clear(&self, key: &CacheKey) {
        if let Some(marks) = &self.marks {
            marks.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full table still takes a new mark (and evicts an old one): under a policy that may
    /// decline a newcomer (the store's default) a hot URL's first mark could be lost, and its
    /// requests serialized behind fills again.
    #[test]
    fn a_full_table_takes_every_new_mark() {
        let clock = Clock::manual(SystemTime::UNIX_EPOCH);
        let marks = HitForPass::new(Duration::from_secs(60), clock);
        let key = |i: u64| CacheKey::from(format!("GET http://h/{i}"));
        for i in 0..CAPACITY {
            marks.mark(&key(i));
            marks.is_marked(&key(i)); // each old mark asked about: more frequent than a newcomer
        }
        for i in CAPACITY..CAPACITY + 64 {
            marks.mark(&key(i));
            assert!(marks.is_marked(&key(i)), "mark {i} was not kept");
        }
    }
}
