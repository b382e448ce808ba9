//! The latency spike of the TinyLFU admission filter's aging: a cache with `Admission::TinyLfu`
//! halves a shard's frequency sketch on the request that crosses the sample size (32 x the
//! shard's capacity), inline. This fills a cache, then times every one of enough gets for each
//! shard to age at least once, and prints the slowest gets and a count of gets above 100 us
//! and 1 ms. docs/benchmarks.md quotes it ("Session 6").
//!
//! The gets are timed one by one with `Instant` (tens of ns of overhead each), which is fine
//! for what is looked for: single gets that take hundreds of microseconds or milliseconds.
//! Scheduling noise on a shared machine also makes slow gets; compare the count of spikes
//! with the number of agings (one per shard per sample size), not single values.
//!
//! `cargo run --release -p benches --bin agespike -- [capacity=1000000] [gets]`

use std::hint::black_box;
use std::time::{Duration, Instant};

use benches::zipf::scatter;
use ttl_lru::{Admission, Cache};

const SHARDS: usize = 8;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| args.get(i).map(|a| a.replace('_', "").parse::<u64>());
    let capacity = match number(0) {
        None => 1_000_000,
        Some(Ok(n)) if n >= SHARDS as u64 => n,
        _ => return usage(),
    };
    // Each shard ages after 32 x its capacity records; a little more than that per shard.
    let gets = match number(1) {
        None => capacity / SHARDS as u64 * 32 * SHARDS as u64 * 9 / 8,
        Some(Ok(n)) if n > 0 => n,
        _ => return usage(),
    };
    let cache: Cache<u64, u64> = Cache::builder(capacity)
        .shards(SHARDS)
        .admission(Admission::TinyLfu)
        .build();
    for k in 0..capacity {
        cache
            .insert(scatter(k), k, Duration::MAX)
            .expect("a u64 weighs 1, below any capacity");
    }
    let mut slowest = [Duration::ZERO; 12];
    let (mut over_100us, mut over_1ms) = (0u64, 0u64);
    let started = Instant::now();
    for i in 0..gets {
        let key = scatter(scatter(i) % capacity);
        let t = Instant::now();
        black_box(cache.get(&key));
        let took = t.elapsed();
        if took > Duration::from_micros(100) {
            over_100us += 1;
            over_1ms += u64::from(took > Duration::from_millis(1));
        }
        if took > slowest[0] {
            slowest[0] = took;
            slowest.sort_unstable();
        }
    }
    let elapsed = started.elapsed();
    slowest.reverse();
    let shown: Vec<String> = slowest
        .iter()
        .map(|d| format!("{:.0}", d.as_secs_f64() * 1e6))
        .collect();
    println!(
        "capacity={capacity} shards={SHARDS} gets={gets} agings_expected={} mean_ns={:.1} over_100us={over_100us} over_1ms={over_1ms} slowest_us=[{}]",
        // Each shard sees about gets / SHARDS of the requests and ages every 32 x its capacity.
        SHARDS as u64 * (gets / SHARDS as u64 / (capacity / SHARDS as u64 * 32)),
        elapsed.as_nanos() as f64 / gets as f64,
        shown.join(", ")
    );
}

fn usage() {
    eprintln!("usage: agespike [capacity >= 8] [gets > 0]");
    std::process::exit(2);
}
