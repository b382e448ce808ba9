//! Loom models of the store's racy transitions (run with `cargo xtask loom`, or
//! `RUSTFLAGS="--cfg herd_loom" cargo test --release -p ttl-lru --test loom --target-dir target/loom`).
//!
//! Under `herd_loom` the shard's lock (built on loom's atomics, mutex and tracked cell), recency stamps, refresh gates and invalidation fences are
//! loom types, so these models explore every interleaving of: lookups against evicting inserts and
//! swap-removes (a reader never sees another key's slot), purges against re-inserts, a fill's
//! fenced publish against a concurrent remove, the one-refresh gate, and inserts into different
//! shards of a full cache drawing on its one capacity budget, the adaptive policy's flagging
//! hits and full-buffer drain against an evicting insert, and two read-through misses of one
//! key (the coalescing group and the leader's re-check of the store).
#![cfg(herd_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use ttl_lru::{Cache, ManualClock};

const FOREVER: Duration = Duration::MAX;

/// A one-shard cache with sampled LRU (`Admission::Always`): these models check the lock and
/// the table's moves, and assert that an insert at capacity stores, which the default
/// adaptive policy may decline (its own models build `full_adaptive_cache`).
fn cache(capacity: u64, clock: &ManualClock) -> Cache<u64, u64> {
    Cache::builder(capacity)
        .shards(1)
        .seed(7)
        .samples(2)
        .admission(ttl_lru::Admission::Always)
        .clock(clock.clone())
        .build()
}

/// An adaptive cache of capacity 2 holding 5 -> 50 and 6 -> 60 (one shard, 2 samples):
/// keys its miniature simulations sample, so their hits are buffered (a unit test in
/// `shard.rs` pins that).
fn full_adaptive_cache() -> Cache<u64, u64> {
    let c: Cache<u64, u64> = Cache::builder(2)
        .shards(1)
        .seed(7)
        .samples(2)
        .admission(ttl_lru::Admission::Adaptive)
        .clock(ManualClock::new())
        .build();
    c.insert(5, 50, FOREVER).unwrap();
    c.insert(6, 60, FOREVER).unwrap();
    c
}

/// A reader looks up a key while another thread's insert evicts it (capacity 1): the reader gets
/// the old value or nothing, never the new key's value; the bound holds afterwards.
#[test]
fn get_vs_evicting_insert() {
    loom::model(|| {
        let clock = ManualClock::new();
        let c = cache(1, &clock);
        c.insert(1, 10, FOREVER).unwrap();
        let reader = {
            let c = c.clone();
            thread::spawn(move || c.get(&1))
        };
        let writer = {
            let c = c.clone();
            thread::spawn(move || c.insert(2, 20, FOREVER).unwrap())
        };
        let seen = reader.join().unwrap();
        assert!(writer.join().unwrap());
        assert!(seen.is_none() || seen == Some(10), "reader saw {seen:?}");
        assert_eq!(c.len(), 1);
        assert_eq!(c.get(&2), Some(20));
    });
}

/// Two readers and an evicting writer on one shard. Under loom a cache has one reader mark, so
/// whichever reader comes first marks it and the other counts itself in the lock word: both
/// kinds of reader race the writer's drain (loom's tracked cell fails the model if a read
/// overlaps the write), and each reader sees the old value or nothing, never half a write.
#[test]
fn marked_and_shared_readers_vs_evicting_writer() {
    loom::model(|| {
        let clock = ManualClock::new();
        let c = cache(1, &clock);
        c.insert(1, 10, FOREVER).unwrap();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let c = c.clone();
                thread::spawn(move || c.get(&1))
            })
            .collect();
        assert!(c.insert(2, 20, FOREVER).unwrap());
        for r in readers {
            let seen = r.join().unwrap();
            assert!(seen.is_none() || seen == Some(10), "reader saw {seen:?}");
        }
        assert_eq!(c.len(), 1);
        assert_eq!(c.get(&2), Some(20));
    });
}

/// A remove swap-moves the last slot into the removed one while a reader looks up the moved key
/// and a writer replaces another key in place: the moved key stays readable throughout.
#[test]
fn get_vs_swap_remove_vs_replace() {
    loom::model(|| {
        let clock = ManualClock::new();
        let c = cache(3, &clock);
        for k in 1..=3 {
            c.insert(k, k * 10, FOREVER).unwrap();
        }
        let remover = {
            let c = c.clone();
            thread::spawn(move || c.remove(&1))
        };
        let replacer = {
            let c = c.clone();
            thread::spawn(move || c.insert(2, 21, FOREVER).unwrap())
        };
        assert_eq!(c.get(&3), Some(30), "the moved entry must stay visible");
        assert_eq!(remover.join().unwrap(), Some(10));
        assert!(replacer.join().unwrap());
        assert_eq!(c.get(&1), None);
        assert_eq!(c.get(&2), Some(21));
        assert_eq!(c.get(&3), Some(30));
        assert_eq!(c.len(), 2);
    });
}

/// An expired entry is purged while it is re-inserted and read: the purge never removes the fresh
/// re-insert, and the expired value is never served.
#[test]
fn purge_expired_vs_reinsert_vs_get() {
    loom::model(|| {
        let clock = ManualClock::new();
        let c = cache(4, &clock);
        c.insert(1, 10, Duration::from_millis(5)).unwrap();
        clock.advance_ms(10);
        let purger = {
            let c = c.clone();
            thread::spawn(move || c.purge_expired())
        };
        let writer = {
            let c = c.clone();
            thread::spawn(move || c.insert(1, 11, FOREVER).unwrap())
        };
        let seen = c.get(&1);
        assert!(seen.is_none() || seen == Some(11), "served {seen:?}");
        assert!(purger.join().unwrap() <= 1);
        assert!(writer.join().unwrap());
        assert_eq!(c.get(&1), Some(11));
    });
}

/// Generation fencing: a fill reads the source after taking the key's fence and publishes with
/// `insert_fenced`, while a writer updates the source and then removes the key. Whatever the
/// interleaving, the cache never ends up holding a value older than the source.
#[test]
fn fenced_fill_vs_remove() {
    loom::model(|| {
        let clock = ManualClock::new();
        let c = cache(4, &clock);
        let source = Arc::new(AtomicU64::new(1));
        let filler = {
            let (c, source) = (c.clone(), Arc::clone(&source));
            thread::spawn(move || {
                let fence = c.fence(&1);
                let v = source.load(Ordering::SeqCst);
                c.insert_fenced(fence, 1, v, FOREVER).unwrap()
            })
        };
        source.store(2, Ordering::SeqCst);
        c.remove(&1);
        filler.join().unwrap();
        let cached = c.get(&1);
        assert!(
            cached.is_none() || cached == Some(2),
            "cache holds {cached:?}, source says 2"
        );
    });
}

/// Two readers find the same stale entry: exactly one claims its refresh.
#[test]
fn stale_refresh_is_claimed_once() {
    loom::model(|| {
        let clock = ManualClock::new();
        let c: Cache<u64, u64> = Cache::builder(4)
            .shards(1)
            .seed(7)
            .stale_while_revalidate(Duration::from_secs(10))
            .clock(clock.clone())
            .build();
        c.insert(1, 10, Duration::from_millis(5)).unwrap();
        clock.advance_ms(10);
        let other = {
            let c = c.clone();
            thread::spawn(move || c.try_claim_refresh(&1))
        };
        let mine = c.try_claim_refresh(&1);
        let theirs = other.join().unwrap();
        assert!(mine ^ theirs, "claims: {mine} {theirs}");
    });
}

/// A claimed refresh that fails is released while another reader tries to claim, and a writer
/// stores the refreshed value: never two refreshes of the same stale entry at once, and the new
/// value is fresh (nothing left to claim) afterwards.
#[test]
fn refresh_release_vs_claim_vs_replace() {
    loom::model(|| {
        let clock = ManualClock::new();
        let c: Cache<u64, u64> = Cache::builder(4)
            .shards(1)
            .seed(7)
            .stale_while_revalidate(Duration::from_secs(10))
            .clock(clock.clone())
            .build();
        c.insert(1, 10, Duration::from_millis(5)).unwrap();
        clock.advance_ms(10);
        assert!(c.try_claim_refresh(&1));
        let releaser = {
            let c = c.clone();
            thread::spawn(move || c.release_refresh(&1, Duration::ZERO))
        };
        let writer = {
            let c = c.clone();
            thread::spawn(move || c.insert(1, 11, FOREVER).unwrap())
        };
        // At most one of these two claims can succeed: the released gate reopens once.
        let a = c.try_claim_refresh(&1);
        let b = c.try_claim_refresh(&1);
        assert!(!(a && b), "the gate was claimed twice after one release");
        releaser.join().unwrap();
        assert!(writer.join().unwrap());
        assert!(!c.try_claim_refresh(&1), "a fresh entry needs no refresh");
        assert_eq!(c.get(&1), Some(11));
    });
}

/// Two inserts race into a full two-shard cache of capacity 1 (the shards share one budget):
/// whichever shard a key lands in, each insert makes room (in its own shard or, when that one is
/// empty, in the other) and the cache never holds more than one entry; afterwards the budget is
/// whole: one more insert is stored and is all the cache holds. Under both policies: the
/// adaptive one (the default) may decline a newcomer instead, and the cache still holds exactly
/// one entry at the end (a leaked or doubled unit of budget would leave none or two).
#[test]
fn inserts_into_different_shards_share_one_budget() {
    for admission in [ttl_lru::Admission::Always, ttl_lru::Admission::Adaptive] {
        loom::model(move || {
            let clock = ManualClock::new();
            let c: Cache<u64, u64> = Cache::builder(128)
                .shards(2)
                .seed(7)
                .samples(2)
                .admission(admission)
                .clock(clock.clone())
                .build();
            c.set_capacity(1);
            c.insert(1, 10, FOREVER).unwrap();
            let writers: Vec<_> = [2u64, 3]
                .into_iter()
                .map(|k| {
                    let c = c.clone();
                    thread::spawn(move || c.insert(k, k * 10, FOREVER).unwrap())
                })
                .collect();
            for w in writers {
                let stored = w.join().unwrap();
                assert!(stored || admission == ttl_lru::Admission::Adaptive);
            }
            assert_eq!(c.len(), 1);
            let stored = c.insert(4, 40, FOREVER).unwrap();
            assert!(stored || admission == ttl_lru::Admission::Adaptive);
            assert_eq!(c.len(), 1);
            if stored {
                assert_eq!(c.get(&4), Some(40));
            }
        });
    }
}

/// The adaptive policy (issue 17): two readers hit a main entry (each may set its protected
/// flag, in the entry's stamp word, under the read lock; one of them owns the model's one
/// stripe and buffers its hit) while the writer's insert at capacity samples those flags and
/// evicts or declines under the write lock. Readers see the old value or nothing, and the
/// bound holds.
#[test]
fn adaptive_flagging_readers_vs_evicting_writer() {
    loom::model(|| {
        let c = full_adaptive_cache();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let c = c.clone();
                thread::spawn(move || c.get(&5))
            })
            .collect();
        let stored = c.insert(3, 30, FOREVER).unwrap();
        for r in readers {
            let seen = r.join().unwrap();
            assert!(seen.is_none() || seen == Some(50), "reader saw {seen:?}");
        }
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&3).is_some(), stored);
    });
}

/// The adaptive policy's full-buffer drain (issue 17): this thread (the model's one stripe)
/// has buffered 7 hits on a sampled key; its 8th fills the buffer and drains it under a
/// `try_write` of the shard lock while another thread's insert at capacity takes the write
/// lock. Whichever gets it, the other waits or skips (a failed `try_write` leaves the buffer
/// for the next insert): the reader sees the old value or nothing, the bound holds, nothing
/// hangs.
#[test]
fn adaptive_full_buffer_drain_vs_evicting_writer() {
    loom::model(|| {
        let c = full_adaptive_cache();
        for _ in 0..7 {
            assert_eq!(c.get(&5), Some(50));
        }
        let writer = {
            let c = c.clone();
            thread::spawn(move || c.insert(3, 30, FOREVER).unwrap())
        };
        let seen = c.get(&5);
        let stored = writer.join().unwrap();
        assert!(seen.is_none() || seen == Some(50), "reader saw {seen:?}");
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&3).is_some(), stored);
    });
}

/// `set_capacity` re-sizes the adaptive policy (issue 17: each shard's state under its write
/// lock, the simulations under their own lock, taken outside every shard lock) while another
/// thread's insert at capacity evicts and feeds the simulations (key 12 is sampled too): the
/// shrunk bound holds once both are done, and nothing hangs.
#[test]
fn adaptive_resize_vs_evicting_writer() {
    loom::model(|| {
        let c = full_adaptive_cache();
        let writer = {
            let c = c.clone();
            thread::spawn(move || c.insert(12, 120, FOREVER).unwrap())
        };
        c.set_capacity(1);
        writer.join().unwrap();
        assert!(c.len() <= 1, "{} entries in a cache of 1", c.len());
        c.insert(20, 200, FOREVER).unwrap();
        assert!(c.len() <= 1);
    });
}

/// Two read-through misses of one key race: whatever the interleaving, the fill runs once. The
/// interleaving that needs care: the second caller's lookup misses, the first caller's fill
/// stores and ends its flight, and only then does the second join (as a new leader). It must
/// find the stored value (its leader re-checks the store when the shard's store count moved
/// since its lookup, which the flight's end orders before the join), not fill again.
#[test]
fn read_through_miss_vs_fill_that_stores_and_ends() {
    loom::model(|| {
        let clock = ManualClock::new();
        let c = cache(4, &clock);
        let runs = Arc::new(AtomicU64::new(0));
        let call = |c: Cache<u64, u64>, runs: Arc<AtomicU64>, value: u64| {
            let fill = move || {
                runs.fetch_add(1, Ordering::SeqCst);
                std::future::ready(Ok::<u64, ()>(value))
            };
            loom::future::block_on(c.get_or_try_insert(1, |_| FOREVER, fill))
                .map(|f| f.value)
                .unwrap()
        };
        let other = {
            let (c, runs) = (c.clone(), Arc::clone(&runs));
            thread::spawn(move || call(c, runs, 20))
        };
        let mine = call(c.clone(), Arc::clone(&runs), 10);
        let theirs = other.join().unwrap();
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the fill ran more than once"
        );
        assert_eq!(mine, theirs);
        assert_eq!(c.get(&1), Some(mine));
    });
}
