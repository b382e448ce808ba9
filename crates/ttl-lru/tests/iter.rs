//! Iteration (`Cache::iter`) and predicate removal (`retain`, `invalidate_if`): snapshots of
//! fresh entries, no lock held while user code runs, removals that apply only to the entry the
//! predicate saw, and fences for the removed keys' fills.

use std::collections::BTreeMap;
use std::future::Future;
use std::task::{Context, Waker};
use std::time::Duration;

use ttl_lru::{Cache, ManualClock, Source};

fn cache(shards: usize, clock: &ManualClock) -> Cache<u64, u64> {
    Cache::builder(1000)
        .shards(shards)
        .clock(clock.clone())
        .build()
}

#[test]
fn iter_yields_each_fresh_entry_once_and_holds_no_lock() {
    let clock = ManualClock::new();
    let c = cache(4, &clock);
    for k in 0..50 {
        c.insert(k, k * 2, Duration::from_secs(60)).unwrap();
    }
    c.insert(100, 1, Duration::from_millis(10)).unwrap();
    clock.advance(Duration::from_millis(20));
    let mut seen = BTreeMap::new();
    for (k, v) in c.iter() {
        // Writes from the loop body: a shard lock held across `next` would deadlock here.
        c.insert(k + 1000, v, Duration::from_secs(60)).unwrap();
        c.remove(&(k + 1000));
        assert!(seen.insert(k, v).is_none(), "{k} seen twice");
    }
    let want: BTreeMap<u64, u64> = (0..50).map(|k| (k, k * 2)).collect();
    assert_eq!(
        seen, want,
        "fresh entries only; the expired one is left out"
    );
    assert_eq!(c.stats().hits, 0, "iterating is not an access");
}

#[test]
fn retain_removes_what_the_predicate_rejects_without_holding_a_lock() {
    let clock = ManualClock::new();
    let c = cache(4, &clock);
    for k in 0..100 {
        c.insert(k, k, Duration::MAX).unwrap();
    }
    let removed = c.retain(|k, _| {
        // User code may write to the cache: no shard lock is held while it runs.
        c.insert(5000, 0, Duration::MAX).unwrap();
        k % 2 == 0
    });
    assert_eq!(removed, 50);
    assert!((0..100).all(|k| c.get(&k).is_some() == (k % 2 == 0)));
    assert_eq!(c.invalidate_if(|k, _| *k < 10), 5);
    assert_eq!(c.get(&8), None);
    assert_eq!(c.get(&12), Some(12));
}

#[test]
fn a_key_written_after_the_snapshot_is_not_removed() {
    // Written by a plain insert, or stored by a fill (`insert_fenced`, as a read-through
    // publish stores): a fill's store is as new as an insert, and was removed before.
    for fenced in [false, true] {
        let clock = ManualClock::new();
        let c = cache(1, &clock);
        for k in 0..10 {
            c.insert(k, k, Duration::MAX).unwrap();
        }
        let mut first = None;
        let removed = c.retain(|k, v| {
            if first.is_none() {
                first = Some(*k);
                // Every other key gets a new value the predicate has not judged.
                for other in (0..10).filter(|o| o != k) {
                    let stored = if fenced {
                        c.insert_fenced(c.fence(&other), other, other + 1000, Duration::MAX)
                    } else {
                        c.insert(other, other + 1000, Duration::MAX)
                    };
                    assert_eq!(stored, Ok(true));
                }
            }
            *v >= 1000
        });
        assert_eq!(
            removed, 1,
            "only the entry judged and unchanged (fenced: {fenced})"
        );
        let first = first.unwrap();
        for k in 0..10 {
            let want = (k != first).then_some(k + 1000);
            assert_eq!(c.get(&k), want, "key {k} (fenced: {fenced})");
        }
    }
}

/// More writes to the shard during the pass than its write log remembers (1,024 here): the log
/// cannot tell whether a key was rewritten, so the key is judged again and still removed.
#[test]
fn rejected_keys_are_removed_even_when_the_write_log_overflowed() {
    let clock = ManualClock::new();
    let c = cache(1, &clock);
    for k in 0..10 {
        c.insert(k, k, Duration::MAX).unwrap();
    }
    let mut flooded = false;
    let removed = c.retain(|k, _| {
        if !flooded {
            flooded = true;
            // Removes of absent keys are writes too (each fences its key's fills).
            for other in 0..2_000 {
                c.remove(&(10_000 + other));
            }
        }
        *k >= 10
    });
    assert_eq!(removed, 10);
    assert!((0..10).all(|k| c.get(&k).is_none()));
    assert!(c.is_empty());
}

#[tokio::test]
async fn retain_fences_and_detaches_the_removed_keys_fills() {
    let clock = ManualClock::new();
    let c = cache(1, &clock);
    // A fill of key 5 in flight that started before the entry was written.
    let mut stuck = Box::pin(c.get_or_try_insert(
        5,
        |_| Duration::MAX,
        std::future::pending::<Result<u64, ()>>,
    ));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(stuck.as_mut().poll(&mut cx).is_pending());
    c.insert(5, 5, Duration::MAX).unwrap();
    let fence = c.fence(&5);
    assert_eq!(c.invalidate_if(|k, _| *k == 5), 1);
    assert_eq!(
        c.insert_fenced(fence, 5, 55, Duration::MAX),
        Ok(false),
        "a value fetched before the removal does not land after it"
    );
    // The old flight is detached: the next caller fills afresh instead of joining it.
    let next = c
        .get_or_try_insert(5, |_| Duration::MAX, || async { Ok::<u64, ()>(6) })
        .await
        .unwrap();
    assert_eq!((next.value, next.source), (6, Source::Filled));
    drop(stuck);
}

/// A rejected entry that left by itself while the predicate ran (evicted here: evictions are
/// not logged writes) leaves nothing to remove: a fill of its key that started after it left
/// is newer than the verdict and stores, and nothing is counted. Before, the key's fence was
/// bumped anyway (that fill's value was dropped as fenced, and its flight detached) and the
/// removal counted.
#[test]
fn retain_leaves_alone_a_fill_of_a_key_whose_entry_left_during_the_pass() {
    let clock = ManualClock::new();
    let c = cache(1, &clock);
    c.insert(5, 5, Duration::MAX).unwrap();
    let mut fill_fence = None;
    let removed = c.retain(|k, _| {
        c.set_capacity(0); // evicts every entry
        c.set_capacity(1000);
        fill_fence = Some(c.fence(k)); // a miss's fill of the key starts
        false
    });
    assert_eq!(removed, 0, "nothing was there to remove");
    assert_eq!(
        c.insert_fenced(fill_fence.unwrap(), 5, 55, Duration::MAX),
        Ok(true),
        "the fill that started after the entry left stores"
    );
    assert_eq!(c.get(&5), Some(55));
}
