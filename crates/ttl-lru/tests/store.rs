//! Plain-store semantics: TTLs on a manual clock, capacity as a hard bound (checked against a model
//! over a long pseudo-random op sequence), weigher rejection, capacity 0, TTL 0, `set_capacity`,
//! purge, clear, stats, determinism under a seed, admission.

use std::collections::HashMap;
use std::time::Duration;

use ttl_lru::{Admission, Cache, Freshness, InsertError, ManualClock};

const SEC: Duration = Duration::from_secs(1);
const FOREVER: Duration = Duration::MAX;

fn cache(capacity: u64, clock: &ManualClock) -> Cache<u64, u64> {
    Cache::builder(capacity)
        .clock(clock.clone())
        .seed(1)
        .build()
}

#[test]
fn insert_get_remove_roundtrip() {
    let clock = ManualClock::new();
    let c = cache(100, &clock);
    assert!(c.is_empty());
    assert_eq!(c.insert(1, 10, FOREVER), Ok(true));
    assert_eq!(c.insert(2, 20, FOREVER), Ok(true));
    assert_eq!(c.get(&1), Some(10));
    assert!(c.contains_key(&2));
    assert_eq!(c.len(), 2);
    assert_eq!(c.insert(1, 11, FOREVER), Ok(true));
    assert_eq!(c.get(&1), Some(11));
    assert_eq!(c.len(), 2, "replacing does not grow");
    assert_eq!(c.remove(&1), Some(11));
    assert_eq!(c.get(&1), None);
    assert_eq!(c.remove(&1), None);
    assert_eq!(c.len(), 1);
}

#[test]
fn borrowed_lookups_work() {
    let c: Cache<String, u32> = Cache::new(10);
    c.insert("key".to_string(), 1, FOREVER).unwrap();
    assert_eq!(c.get("key"), Some(1));
    assert!(c.contains_key("key"));
    assert_eq!(c.remove("key"), Some(1));
}

#[test]
fn string_keys_survive_churn_with_borrowed_lookups() {
    // The table does not store key hashes: evictions, swap-removes and the index's growth hash
    // the stored `String` again, which must agree with the `&str` lookups.
    let c: Cache<String, usize> = Cache::builder(200).shards(2).seed(7).build();
    for i in 0..2_000usize {
        let key = format!("key-{i}");
        c.insert(key.clone(), i, FOREVER).unwrap();
        if i % 5 == 0 {
            let old = format!("key-{}", i / 2);
            c.remove(old.as_str());
        }
        assert!(c.len() <= 200);
    }
    let mut found = 0;
    for i in 0..2_000usize {
        let key = format!("key-{i}");
        if let Some(v) = c.get(key.as_str()) {
            assert_eq!(v, i);
            assert!(c.contains_key(key.as_str()));
            found += 1;
        }
    }
    assert_eq!(found, c.len());
    for i in 0..2_000usize {
        c.remove(format!("key-{i}").as_str());
    }
    assert!(c.is_empty());
}

#[test]
fn entries_expire_after_their_ttl() {
    let clock = ManualClock::new();
    let c = cache(100, &clock);
    c.insert(1, 10, SEC).unwrap();
    c.insert(2, 20, FOREVER).unwrap();
    clock.advance(Duration::from_millis(999));
    assert_eq!(c.get(&1), Some(10));
    let e = c.lookup(&1).unwrap();
    assert_eq!(e.expires_in(), Some(Duration::from_millis(1)));
    assert!(e.is_fresh());
    clock.advance(Duration::from_millis(1));
    assert_eq!(c.get(&1), None);
    assert!(c.lookup(&1).is_none(), "no stale window configured");
    assert!(!c.contains_key(&1));
    assert_eq!(c.get(&2), Some(20));
    assert_eq!(c.lookup(&2).unwrap().expires_in(), None);
    assert_eq!(c.len(), 2, "expired entries stay until purged or evicted");
    assert_eq!(c.purge_expired(), 1);
    assert_eq!(c.len(), 1);
    assert_eq!(c.stats().expirations, 1);
}

#[test]
fn lookup_marks_stale_entries_inside_the_window() {
    let clock = ManualClock::new();
    let c: Cache<u64, u64> = Cache::builder(10)
        .clock(clock.clone())
        .stale_while_revalidate(Duration::from_secs(5))
        .build();
    c.insert(1, 10, SEC).unwrap();
    clock.advance(Duration::from_secs(2));
    assert_eq!(c.get(&1), None, "get only returns fresh values");
    let e = c.lookup(&1).unwrap();
    assert_eq!(e.freshness(), Freshness::Stale);
    assert_eq!(e.expires_in(), Some(Duration::ZERO));
    assert_eq!(*e.value(), 10);
    assert_eq!(c.purge_expired(), 0, "still servable stale");
    clock.advance(Duration::from_secs(4));
    assert!(c.lookup(&1).is_none());
    assert_eq!(c.purge_expired(), 1);
}

#[test]
fn ttl_zero_stores_nothing_and_removes_the_old_value() {
    let clock = ManualClock::new();
    let c = cache(10, &clock);
    c.insert(1, 10, FOREVER).unwrap();
    assert_eq!(c.insert(1, 11, Duration::ZERO), Ok(false));
    assert_eq!(c.get(&1), None);
    assert!(c.is_empty());
}

#[test]
fn ttl_zero_with_a_stale_window_is_stored_stale() {
    let clock = ManualClock::new();
    let c: Cache<u64, u64> = Cache::builder(10)
        .clock(clock.clone())
        .stale_while_revalidate(SEC)
        .build();
    assert_eq!(c.insert(1, 10, Duration::ZERO), Ok(true));
    assert_eq!(c.get(&1), None);
    assert!(c.lookup(&1).unwrap().is_stale());
}

#[test]
fn capacity_zero_stores_nothing_with_a_typed_error() {
    let c: Cache<u64, u64> = Cache::new(0);
    assert_eq!(
        c.insert(1, 1, FOREVER),
        Err(InsertError::TooHeavy {
            weight: 1,
            limit: 0
        })
    );
    assert!(c.is_empty());
    assert_eq!(c.get(&1), None);
    assert_eq!(c.stats().rejections, 1);
}

/// A capacity past 2^62 counts as 2^62 (the budget's bound): an entry heavier than that is
/// too heavy, not a write that retries evicting for room it can never get (it spun forever).
#[test]
fn an_entry_heavier_than_any_budget_is_too_heavy_not_a_hang() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let c: Cache<u64, u64> = Cache::builder(u64::MAX).weigher(|_, v: &u64| *v).build();
        let heavy = c.insert(1, u64::MAX, FOREVER);
        let most = c.insert(2, 1 << 62, FOREVER);
        let _ = done.send((heavy, most, c.len()));
    });
    let (heavy, most, len) = finished
        .recv_timeout(Duration::from_secs(30))
        .expect("the insert of a 2^64 - 1 weight hung");
    assert_eq!(
        heavy,
        Err(InsertError::TooHeavy {
            weight: u64::MAX,
            limit: 1 << 62
        })
    );
    assert_eq!((most, len), (Ok(true), 1));
}

/// Any capacity works with every admission policy, at build time and through `set_capacity`:
/// the policies size their frequency state and idle unit from the share, which overflowed for
/// capacities near `u64::MAX` (a panic in debug builds, a division by zero under the shard lock
/// in release ones; a `set_capacity` that panicked so left the budget behind its total, and
/// every later insert spun for room).
#[test]
fn huge_capacities_work_with_every_admission_policy() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for admission in [Admission::TinyLfu, Admission::Adaptive] {
            for capacity in [u64::MAX, 1 << 63, 1 << 61] {
                let c: Cache<u64, u64> = Cache::builder(capacity)
                    .admission(admission)
                    .shards(1)
                    .build();
                for k in 0..100 {
                    c.insert(k, k, FOREVER).unwrap();
                    let _ = c.get(&k);
                }
                assert_eq!(c.len(), 100, "{admission:?} at {capacity}");
            }
            let c: Cache<u64, u64> = Cache::builder(1000).admission(admission).shards(1).build();
            c.set_capacity(u64::MAX);
            c.set_capacity(1000);
            for k in 0..2_000 {
                let _ = c.insert(k, k, FOREVER);
            }
            assert!(
                c.len() <= 1000 && !c.is_empty(),
                "{admission:?}: {}",
                c.len()
            );
        }
        let _ = done.send(());
    });
    finished
        .recv_timeout(Duration::from_secs(60))
        .expect("a policy at a huge capacity panicked or hung");
}

#[test]
fn overweight_entries_are_rejected_with_the_reason() {
    let c: Cache<u64, Vec<u8>> = Cache::builder(100)
        .shards(1)
        .weigher(|_, v: &Vec<u8>| v.len() as u64)
        .build();
    assert_eq!(c.insert(1, vec![0; 60], FOREVER), Ok(true));
    let err = c.insert(2, vec![0; 101], FOREVER).unwrap_err();
    assert_eq!(
        err,
        InsertError::TooHeavy {
            weight: 101,
            limit: 100
        }
    );
    assert!(err.to_string().contains("101"));
    // A too-heavy replacement removes the outdated old value.
    assert!(c.insert(1, vec![0; 500], FOREVER).is_err());
    assert_eq!(c.get(&1), None);
}

#[test]
fn weight_is_a_hard_bound() {
    let c: Cache<u64, Vec<u8>> = Cache::builder(100)
        .shards(1)
        .weigher(|_, v: &Vec<u8>| v.len() as u64)
        .build();
    for k in 0..50u64 {
        c.insert(k, vec![0; (k % 30 + 1) as usize], FOREVER)
            .unwrap();
        assert!(c.weight() <= 100, "weight {} after insert {k}", c.weight());
    }
    assert_eq!(c.stats().weight, c.weight());
}

#[test]
fn set_capacity_shrinks_before_returning() {
    let c: Cache<u64, u64> = Cache::builder(1000).shards(4).build();
    for k in 0..1000 {
        c.insert(k, k, FOREVER).unwrap();
    }
    // One budget for all shards: nothing was evicted before the cache was full.
    let before = c.len();
    assert_eq!(before, 1000);
    let evicted = c.set_capacity(100);
    assert_eq!(c.capacity(), 100);
    assert!(c.len() <= 100);
    assert_eq!(evicted, before - c.len());
    let left = c.len();
    assert_eq!(c.set_capacity(0), left);
    assert!(c.is_empty());
    assert!(c.insert(1, 1, FOREVER).is_err());
    c.set_capacity(10);
    assert_eq!(c.insert(1, 1, FOREVER), Ok(true));
}

#[test]
fn clear_and_invalidate_all_empty_the_cache() {
    let c: Cache<u64, u64> = Cache::new(100);
    for k in 0..10 {
        c.insert(k, k, FOREVER).unwrap();
    }
    assert_eq!(c.clear(), 10);
    assert!(c.is_empty());
    c.insert(1, 1, FOREVER).unwrap();
    assert_eq!(c.invalidate_all(), 1);
    assert_eq!(c.get(&1), None);
}

#[test]
fn shrink_evicts_a_fraction() {
    let c: Cache<u64, u64> = Cache::builder(1000).shards(1).build();
    for k in 0..1000 {
        c.insert(k, k, FOREVER).unwrap();
    }
    let evicted = c.shrink(0.25);
    assert_eq!(evicted, 250);
    assert_eq!(c.len(), 1000 - evicted);
    assert_eq!(c.shrink(f64::NAN), 0);
    c.shrink(1.0);
    assert!(c.is_empty());
}

#[test]
fn fenced_insert_loses_to_a_later_remove_or_insert() {
    let c: Cache<u64, u64> = Cache::new(10);
    let f = c.fence(&1);
    c.remove(&1);
    assert_eq!(c.insert_fenced(f, 1, 10, FOREVER), Ok(false));
    assert_eq!(c.get(&1), None);
    let f = c.fence(&1);
    c.insert(1, 20, FOREVER).unwrap();
    assert_eq!(c.insert_fenced(f, 1, 10, FOREVER), Ok(false));
    assert_eq!(c.get(&1), Some(20));
    let f = c.fence(&1);
    assert_eq!(c.insert_fenced(f, 1, 30, FOREVER), Ok(true));
    assert_eq!(c.get(&1), Some(30));
    let f = c.fence(&1);
    c.clear();
    assert_eq!(c.insert_fenced(f, 1, 40, FOREVER), Ok(false));
    assert_eq!(c.stats().fenced, 3);
}

#[test]
fn stats_count_what_happened() {
    let clock = ManualClock::new();
    let c = cache(2, &clock);
    c.insert(1, 1, SEC).unwrap();
    c.insert(2, 2, FOREVER).unwrap();
    assert_eq!(c.get(&1), Some(1));
    assert_eq!(c.get(&3), None);
    clock.advance(SEC);
    assert_eq!(c.get(&1), None);
    c.insert(3, 3, FOREVER).unwrap(); // evicts the expired key 1 (an expiration) or key 2
    let s = c.stats();
    assert_eq!(s.hits, 1);
    assert_eq!(s.misses, 2);
    assert_eq!(s.lookups, 3);
    assert_eq!(s.inserts, 3);
    assert_eq!(s.evictions + s.expirations, 1);
    assert_eq!(s.size, 2);
    assert_eq!(s.capacity, 2);
    assert!((s.hit_ratio() - 1.0 / 3.0).abs() < 1e-9);
}

#[test]
fn stats_are_exact_across_threads() {
    // Every frequent counter is a per-thread stripe written without a locked instruction; the
    // sums must still be exact with threads that outnumber the stripes, and after they exit.
    let c: Cache<u64, u64> = Cache::builder(1_000).seed(3).build();
    let threads = 24u64;
    let per_thread = 4_000u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let c = c.clone();
            s.spawn(move || {
                for i in 0..per_thread {
                    let k = t * per_thread + i;
                    c.insert(k, k, FOREVER).unwrap();
                    c.get(&k);
                    c.get(&(k + 1_000_000));
                }
            });
        }
    });
    let s = c.stats();
    let ops = threads * per_thread;
    // Every insert of a new key is stored or declined by the admission policy (the default's
    // may decline one at capacity); each stored one is later evicted, or is still there.
    assert_eq!(s.inserts + s.rejections, ops);
    assert_eq!(s.lookups, 2 * ops);
    assert_eq!(s.hits + s.misses, 2 * ops);
    assert!(s.misses >= ops, "every lookup of an absent key misses");
    assert_eq!(s.evictions + s.expirations + s.size, s.inserts);
    assert!(s.size <= 1_000);
}

#[test]
fn expired_samples_are_evicted_before_live_ones() {
    // Half the entries are expired: with 5 samples almost every eviction sees one and takes it,
    // where a blind choice would take a live entry half the time.
    let clock = ManualClock::new();
    let c: Cache<u64, u64> = Cache::builder(100)
        .shards(1)
        .seed(3)
        .clock(clock.clone())
        .build();
    for k in 0..100 {
        let ttl = if k % 2 == 0 { SEC } else { FOREVER };
        c.insert(k, k, ttl).unwrap();
    }
    clock.advance(SEC * 2);
    for k in 100..120 {
        c.insert(k, k, FOREVER).unwrap();
    }
    let s = c.stats();
    assert_eq!(s.expirations + s.evictions, 20);
    assert!(
        s.expirations >= 17,
        "only {} of 20 victims were expired",
        s.expirations
    );
}

#[test]
fn sampled_eviction_keeps_recently_used_entries() {
    // Sampled LRU (`Admission::Always`; the adaptive policy's own tests are in its modules).
    // Touch the first half after inserting everything; then overflow. Most survivors must be from
    // the touched half.
    let clock = ManualClock::new();
    let c: Cache<u64, u64> = Cache::builder(1000)
        .shards(1)
        .clock(clock.clone())
        .seed(9)
        .admission(Admission::Always)
        .build();
    for k in 0..1000 {
        clock.advance_ms(1);
        c.insert(k, k, FOREVER).unwrap();
    }
    for k in 0..500 {
        clock.advance_ms(1);
        c.get(&k);
    }
    for k in 1000..1500 {
        clock.advance_ms(1);
        c.insert(k, k, FOREVER).unwrap();
    }
    let touched_kept = (0..500).filter(|k| c.contains_key(k)).count();
    let untouched_kept = (500..1000).filter(|k| c.contains_key(k)).count();
    assert!(
        touched_kept > 4 * untouched_kept,
        "touched {touched_kept} vs untouched {untouched_kept}"
    );
}

/// A deterministic op sequence against a model: capacity is never exceeded, every value read back
/// is the last one written for its key, removed keys are gone.
#[test]
fn capacity_model_check_over_random_ops() {
    for (seed, shards, capacity, pool, admission) in [
        (1u64, 1, 64, true, Admission::Always),
        (2, 4, 200, true, Admission::Always),
        (3, 2, 50, false, Admission::Always),
        (4, 8, 1000, true, Admission::Always),
        (5, 1, 64, true, Admission::Adaptive),
        (6, 4, 200, true, Admission::Adaptive),
        (7, 2, 50, false, Admission::Adaptive),
        (8, 8, 1000, true, Admission::Adaptive),
    ] {
        let clock = ManualClock::new();
        let c: Cache<u64, u64> = Cache::builder(capacity)
            .shards(shards)
            .seed(seed)
            .eviction_pool(pool)
            .admission(admission)
            .clock(clock.clone())
            .build();
        let mut model: HashMap<u64, (u64, u64)> = HashMap::new(); // key -> (value, expires_at)
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut now = 0u64;
        for step in 0..20_000u64 {
            let r = next();
            let key = r % (capacity * 3);
            match (r >> 32) % 10 {
                0..=3 => {
                    let ttl = if (r >> 40) % 4 == 0 {
                        5 + (r >> 44) % 20
                    } else {
                        u64::MAX
                    };
                    let d = if ttl == u64::MAX {
                        FOREVER
                    } else {
                        Duration::from_millis(ttl)
                    };
                    match c.insert(key, step, d) {
                        Ok(true) => {
                            model.insert(key, (step, now.saturating_add(ttl)));
                        }
                        // Declined (the adaptive policy, at capacity): never over a value of
                        // the key, which would then be served in place of the newer one.
                        Ok(false) if admission == Admission::Adaptive => {
                            assert!(!c.contains_key(&key), "declined over a stored value");
                            model.remove(&key);
                        }
                        other => panic!("insert of {key} at step {step}: {other:?}"),
                    }
                }
                4..=7 => {
                    if let Some(v) = c.get(&key) {
                        let (mv, exp) = model.get(&key).copied().expect("value never written");
                        assert_eq!(v, mv, "stale value for key {key} at step {step}");
                        assert!(now < exp, "expired value served");
                    }
                }
                8 => {
                    let got = c.remove(&key);
                    if let Some(v) = got {
                        assert_eq!(Some(v), model.get(&key).map(|m| m.0));
                    }
                    model.remove(&key);
                    assert_eq!(c.get(&key), None);
                }
                _ => {
                    now += 1;
                    clock.advance_ms(1);
                }
            }
            assert!(
                c.len() as u64 <= capacity,
                "len {} > {capacity} at step {step}",
                c.len()
            );
        }
        // Final sweep: everything still readable is the latest unexpired write.
        for key in 0..capacity * 3 {
            if let Some(v) = c.get(&key) {
                let (mv, exp) = model[&key];
                assert_eq!(v, mv);
                assert!(now < exp);
            }
        }
        assert!(!c.is_empty());
    }
}

#[test]
fn seeded_caches_behave_identically() {
    let run = || {
        let clock = ManualClock::new();
        let c: Cache<u64, u64> = Cache::builder(100)
            .seed(42)
            .shards(2)
            .clock(clock.clone())
            .build();
        for k in 0..1000u64 {
            clock.advance_ms(1);
            c.insert(k * 7 % 500, k, FOREVER).unwrap();
            c.get(&(k % 50));
        }
        let mut keys: Vec<u64> = (0..500).filter(|k| c.contains_key(k)).collect();
        keys.sort_unstable();
        keys
    };
    assert_eq!(run(), run());
}

#[test]
fn tinylfu_admission_protects_frequent_keys_from_a_scan() {
    // A manual clock ticking once per request, so recency is exact and the test deterministic.
    let clock = ManualClock::new();
    let build = |admission| -> Cache<u64, u64> {
        Cache::builder(100)
            .shards(1)
            .seed(5)
            .admission(admission)
            .clock(clock.clone())
            .build()
    };
    for admission in [Admission::Always, Admission::TinyLfu] {
        let c = build(admission);
        // A hot set of 50 keys, read often.
        for _ in 0..20 {
            for k in 0..50 {
                clock.advance_ms(1);
                if c.get(&k).is_none() {
                    c.insert(k, k, FOREVER).unwrap();
                }
            }
        }
        // A one-pass scan of 1000 cold keys.
        for k in 1000..2000 {
            clock.advance_ms(1);
            if c.get(&k).is_none() {
                c.insert(k, k, FOREVER).unwrap();
            }
        }
        let hot_kept = (0..50).filter(|k| c.contains_key(k)).count();
        match admission {
            Admission::TinyLfu => {
                assert!(hot_kept >= 45, "TinyLFU kept only {hot_kept} hot keys");
                assert!(c.stats().rejections > 0);
            }
            _ => assert!(
                hot_kept < 10,
                "plain LRU should lose the hot set to the scan, kept {hot_kept}"
            ),
        }
        assert!(c.len() <= 100);
    }
}

/// Issue 17: a cache of capacity N holds N entries, however many shards it has: at build time
/// (capacity used to be split over the shards, so uneven hashing evicted before the cache was
/// full) and after any resize (`set_capacity` below the shard count left shards with capacity
/// 0: a 16-shard cache set to 4 refused 11 of 16 inserts and held 2 entries).
#[test]
fn a_cache_of_capacity_n_holds_n_entries_at_build_time_and_after_any_resize() {
    for admission in [Admission::Always, Admission::Adaptive] {
        holds_n_entries(admission);
    }
}

fn holds_n_entries(admission: Admission) {
    for (capacity, shards) in [(1000u64, 16usize), (200, 3), (64, 1), (4096, 64)] {
        let c: Cache<u64, u64> = Cache::builder(capacity)
            .shards(shards)
            .seed(3)
            .admission(admission)
            .build();
        for k in 0..capacity {
            assert_eq!(c.insert(k, k, FOREVER), Ok(true), "{admission:?}");
        }
        assert_eq!(c.len() as u64, capacity, "{capacity} over {shards} shards");
        assert_eq!(
            c.stats().evictions,
            0,
            "nothing evicted before the cache was full"
        );
        for k in capacity..3 * capacity {
            // At capacity the adaptive policy may decline a newcomer (`Ok(false)`).
            let stored = c.insert(k, k, FOREVER);
            assert!(
                stored == Ok(true) || (stored == Ok(false) && admission == Admission::Adaptive),
                "{admission:?}: {stored:?}"
            );
            assert!(c.len() as u64 <= capacity);
        }
        assert_eq!(c.len() as u64, capacity);
    }
    let c: Cache<u64, u64> = Cache::builder(1024)
        .shards(16)
        .seed(3)
        .admission(admission)
        .build();
    let mut next = 0u64;
    for capacity in [4u64, 1, 7, 100, 3, 1000, 0, 2] {
        c.set_capacity(capacity);
        assert!(c.len() as u64 <= capacity, "after set_capacity({capacity})");
        for _ in 0..16.max(capacity) {
            assert_eq!(
                c.insert(next, next, FOREVER).is_ok(),
                capacity > 0,
                "insert {next} at capacity {capacity}"
            );
            next += 1;
        }
        assert_eq!(c.len() as u64, capacity, "holds {capacity} entries");
    }
}

/// With a weigher, an entry may weigh up to the whole capacity whatever the shard count (it
/// used to be `capacity / shards`).
#[test]
fn an_entry_may_weigh_the_whole_capacity_in_a_sharded_cache() {
    for (admission, seed) in [
        (Admission::Always, 1),
        (Admission::Adaptive, 1),
        (Admission::Adaptive, 2),
    ] {
        let c: Cache<u64, Vec<u8>> = Cache::builder(256)
            .shards(4)
            .seed(seed)
            .admission(admission)
            .weigher(|_, v: &Vec<u8>| v.len() as u64)
            .build();
        assert_eq!(c.insert(1, vec![0; 200], FOREVER), Ok(true));
        assert_eq!(c.insert(2, vec![0; 56], FOREVER), Ok(true));
        assert_eq!(c.weight(), 256);
        // Never too heavy. The adaptive policy may decline it while the key is less frequent
        // than the entries it would evict; each try counts in the sketch of misses.
        let mut tries = 1;
        loop {
            match c.insert(3, vec![0; 256], FOREVER) {
                Ok(true) => break,
                Ok(false) if admission == Admission::Adaptive && tries < 4 => tries += 1,
                other => panic!("{admission:?}, try {tries}: {other:?}"),
            }
        }
        assert_eq!((c.len(), c.weight()), (1, 256), "{admission:?}");
        assert!(c.insert(4, vec![0; 257], FOREVER).is_err());
    }
}

/// The shared budget stays exact under concurrent inserts, replacements, removes and resizes:
/// once the threads are done, filling the cache with new keys holds exactly its capacity (a
/// leaked or double-counted unit of budget would show as one entry too few or too many).
#[test]
fn the_capacity_budget_stays_exact_under_concurrent_writes_and_resizes() {
    let c: Cache<u64, u64> = Cache::builder(512).shards(8).seed(9).build();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for _ in 0..20_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let key = x % 2_000;
                    match x >> 60 {
                        0..=9 => {
                            c.insert(key, x, FOREVER).unwrap();
                        }
                        10..=13 => {
                            c.remove(&key);
                        }
                        _ => {
                            c.get(&key);
                        }
                    }
                }
            })
        })
        .collect();
    for cap in [3u64, 300, 1, 512, 64, 700, 20] {
        c.set_capacity(cap);
        std::thread::yield_now();
    }
    for t in threads {
        t.join().unwrap();
    }
    for cap in [100u64, 7, 250] {
        c.set_capacity(cap);
        assert!(c.len() as u64 <= cap);
        for k in 0..cap {
            c.insert(1_000_000 + cap * 10_000 + k, k, FOREVER).unwrap();
        }
        assert_eq!(c.len() as u64, cap, "capacity {cap}");
    }
}

/// An out-of-range sample count or pool size is taken as the most the builder allows, never
/// a panic or a walk without end under a shard's lock. Found by review: `samples(usize::MAX)`
/// overflowed `draw + samples` at the first eviction (a panic, or in release a slice out of
/// bounds or a loop of `usize::MAX` samples), and `eviction_pool_size(usize::MAX)` failed to
/// allocate at `build`.
#[test]
fn huge_sample_counts_and_pool_sizes_are_clamped() {
    for admission in [Admission::Always, Admission::TinyLfu, Admission::Adaptive] {
        let c: Cache<u64, u64> = Cache::builder(8)
            .shards(1)
            .admission(admission)
            .samples(usize::MAX)
            .eviction_pool_size(usize::MAX)
            .build();
        for k in 0..100 {
            let _ = c.insert(k, k, Duration::MAX);
        }
        assert!(c.len() <= 8, "{admission:?}: {}", c.len());
    }
}
