//! Issue 17: an invalidation fence is per key. A read-through fill loses its publish only to a
//! write (insert, remove, invalidate, clear) of its own key, not to writes of other keys.
//!
//! `fills_of_unwritten_keys_are_not_fenced_by_other_writes` is also the measurement the issue
//! asks for: a write-heavy mixed workload on tokio's paused clock (fills of keys nobody writes,
//! each taking 10 ms, while plain inserts and removes of other keys go on) prints how many
//! fills lost their publish at each write rate. Before the fix (16 fence stripes per shard)
//! most of them did; run with `--nocapture` to see the table.

use std::time::Duration;

use tokio::time::sleep;
use ttl_lru::{Cache, TokioClock};

const FILLS: u64 = 256;

/// Runs `FILLS` read-through fills of keys 0..FILLS (10 ms each) while `writes_per_ms` plain
/// writes of other keys (three inserts to one remove) go on; returns `Stats::fenced`.
async fn fenced_fills(writes_per_ms: u64, shards: usize) -> u64 {
    let c: Cache<u64, u64> = Cache::builder(100_000)
        .shards(shards)
        .seed(11)
        .clock(TokioClock::new())
        .build();
    let fills: Vec<_> = (0..FILLS)
        .map(|k| {
            let c = c.clone();
            tokio::spawn(async move {
                let fill = || async move {
                    sleep(Duration::from_millis(10)).await;
                    Ok::<u64, ()>(k)
                };
                c.get_or_try_insert(k, |_| Duration::MAX, fill).await
            })
        })
        .collect();
    tokio::task::yield_now().await;
    let mut key = 1_000_000u64;
    for _ in 0..10 {
        for w in 0..writes_per_ms {
            key += 1;
            if w % 4 == 3 {
                c.remove(&(key - 2));
            } else {
                c.insert(key, key, Duration::MAX).unwrap();
            }
        }
        sleep(Duration::from_millis(1)).await;
    }
    for f in fills {
        f.await.unwrap().unwrap();
    }
    let stored = (0..FILLS).filter(|k| c.contains_key(k)).count() as u64;
    let fenced = c.stats().fenced;
    assert_eq!(stored + fenced, FILLS);
    fenced
}

#[tokio::test(start_paused = true)]
async fn fills_of_unwritten_keys_are_not_fenced_by_other_writes() {
    println!("fills of never-written keys that lost their publish, of {FILLS} (10 ms fills):");
    println!("| writes/ms | 1 shard | 8 shards | 64 shards |");
    let mut lost = Vec::new();
    for writes_per_ms in [1u64, 4, 16] {
        let row: Vec<u64> = {
            let mut row = Vec::new();
            for shards in [1usize, 8, 64] {
                row.push(fenced_fills(writes_per_ms, shards).await);
            }
            row
        };
        println!(
            "| {writes_per_ms:>9} | {:>7} | {:>8} | {:>9} |",
            row[0], row[1], row[2]
        );
        lost.extend(row);
    }
    assert!(
        lost.iter().all(|&n| n == 0),
        "fills lost to writes of other keys: {lost:?}"
    );
}

/// A write of the fill's own key still fences it, and only it.
#[tokio::test(start_paused = true)]
async fn a_write_of_its_own_key_still_fences_a_fill() {
    let c: Cache<u64, u64> = Cache::builder(1_000)
        .shards(1)
        .clock(TokioClock::new())
        .build();
    let slow = |v: u64| {
        move || async move {
            sleep(Duration::from_millis(10)).await;
            Ok::<u64, ()>(v)
        }
    };
    let (c1, c2) = (c.clone(), c.clone());
    let a = tokio::spawn(async move { c1.get_or_try_insert(1, |_| Duration::MAX, slow(1)).await });
    let b = tokio::spawn(async move { c2.get_or_try_insert(2, |_| Duration::MAX, slow(2)).await });
    tokio::task::yield_now().await;
    c.insert(1, 100, Duration::MAX).unwrap();
    for k in 10..600 {
        c.insert(k, k, Duration::MAX).unwrap();
    }
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    assert_eq!(
        c.get(&1),
        Some(100),
        "the older fill did not overwrite the insert"
    );
    assert_eq!(c.get(&2), Some(2), "the fill of key 2 was stored");
    assert_eq!(c.stats().fenced, 1);
}
