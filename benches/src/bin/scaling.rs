//! Does it scale: N threads share one store and run a zipf 1.0 mix of 95% gets and 5% inserts
//! for a fixed time each; prints operations per second per store and thread count, so the same
//! binary answers the question on a many-core machine (issue 17).
//!
//! `cargo run --release -p benches --bin scaling -- [--threads N] [--capacity C] [--keys K]
//! [--millis MS] [--stores ttl-lru,quick_cache,moka,floor]` (`ttl-lru` has every default, the
//! adaptive policy since issue 17; `ttl-lru-lru`, sampled LRU, and `ttl-lru-adaptive`, the
//! default's policy named, may be named too)
//!
//! Thread counts run are 1, 2, 4, ... up to `--threads` (default: the machine's available
//! parallelism), and `--threads` itself. The store is filled with the `capacity` most popular
//! keys first, so it starts warm and full (inserts evict). Each thread cycles through its own
//! pre-drawn stream of operations (seeded per thread, one million long), so drawing keys costs
//! nothing inside the timed loop; the threads start together at a barrier and stop on a shared
//! flag checked every 1,024 operations.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use benches::rng::Rng;
use benches::stores::{MokaSync, QuickCache, ShardedFloor, Store, TtlLruStore};
use benches::zipf::{Zipf, scatter};

/// Operations each thread draws up front and cycles through.
const STREAM: usize = 1 << 20;
/// Operations between two looks at the stop flag.
const CHUNK: usize = 1024;
/// Inserts per 100 operations.
const INSERT_PERCENT: u64 = 5;

struct Options {
    threads: usize,
    capacity: usize,
    keys: u64,
    millis: u64,
    stores: Vec<String>,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        capacity: 100_000,
        keys: 1_000_000,
        millis: 1_000,
        stores: ["ttl-lru", "quick_cache", "moka", "floor"]
            .map(String::from)
            .to_vec(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let count = || {
            value
                .replace('_', "")
                .parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{flag}: not a positive count: {value:?}"))
        };
        match flag.as_str() {
            "--threads" => o.threads = count()? as usize,
            "--capacity" => o.capacity = count()? as usize,
            "--keys" => o.keys = count()?,
            "--millis" => o.millis = count()?,
            "--stores" => o.stores = value.split(',').map(String::from).collect(),
            other => return Err(format!("unknown flag {other:?}")),
        }
    }
    if let Some(bad) = o.stores.iter().find(|s| build(s, 1).is_none()) {
        return Err(format!("unknown store {bad:?}"));
    }
    Ok(o)
}

fn build(name: &str, capacity: usize) -> Option<Box<dyn Store>> {
    Some(match name {
        "ttl-lru" => Box::new(TtlLruStore::new(capacity)),
        "ttl-lru-lru" => Box::new(TtlLruStore::with_admission(
            capacity,
            ttl_lru::Admission::Always,
        )),
        "ttl-lru-adaptive" => Box::new(TtlLruStore::with_admission(
            capacity,
            ttl_lru::Admission::Adaptive,
        )),
        "quick_cache" => Box::new(QuickCache::new(capacity)),
        "moka" => Box::new(MokaSync::new(capacity as u64)),
        "floor" => Box::new(ShardedFloor::new(capacity, 64)),
        _ => return None,
    })
}

/// One thread's operations: `(key, true)` inserts, `(key, false)` gets.
fn stream(zipf: &Zipf, seed: u64) -> Vec<(u64, bool)> {
    let mut rng = Rng::new(seed);
    (0..STREAM)
        .map(|_| {
            let key = scatter(zipf.sample(&mut rng));
            (key, rng.below(100) < INSERT_PERCENT)
        })
        .collect()
}

/// Runs `threads` threads over `store` for `millis`; returns operations per second.
fn run(store: &dyn Store, streams: &[Vec<(u64, bool)>], millis: u64) -> f64 {
    let threads = streams.len();
    let stop = AtomicBool::new(false);
    let start = Barrier::new(threads + 1);
    let (ops, elapsed) = std::thread::scope(|scope| {
        let workers: Vec<_> = streams
            .iter()
            .map(|ops| {
                let (stop, start) = (&stop, &start);
                scope.spawn(move || {
                    start.wait();
                    let mut done = 0u64;
                    let mut sink = 0u64;
                    for chunk in ops.chunks(CHUNK).cycle() {
                        sink = sink.wrapping_add(store.mixed(chunk));
                        done += chunk.len() as u64;
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    std::hint::black_box(sink);
                    done
                })
            })
            .collect();
        start.wait();
        let began = Instant::now();
        std::thread::sleep(Duration::from_millis(millis));
        stop.store(true, Ordering::Relaxed);
        let ops: u64 = workers.into_iter().map(|w| w.join().unwrap_or(0)).sum();
        (ops, began.elapsed())
    });
    ops as f64 / elapsed.as_secs_f64()
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("scaling: {msg}");
            eprintln!(
                "usage: scaling [--threads N] [--capacity C] [--keys K] [--millis MS] [--stores a,b,...]"
            );
            std::process::exit(2);
        }
    };
    let zipf = match Zipf::new(o.keys, 1.0) {
        Ok(z) => z,
        Err(e) => {
            eprintln!("scaling: {e}");
            std::process::exit(2);
        }
    };
    let mut counts: Vec<usize> = std::iter::successors(Some(1usize), |n| n.checked_mul(2))
        .take_while(|&n| n < o.threads)
        .collect();
    counts.push(o.threads);
    let streams: Vec<Vec<(u64, bool)>> = (0..o.threads as u64)
        .map(|t| stream(&zipf, 0x5CA1_E000 + t))
        .collect();
    let warm: Vec<u64> = (0..o.capacity as u64).map(scatter).collect();
    println!(
        "zipf 1.0 over {} keys, {}% inserts, capacity {}, {} ms per cell; Mops/s (x: over 1 thread)",
        o.keys, INSERT_PERCENT, o.capacity, o.millis
    );
    let header: Vec<String> = counts.iter().map(|n| format!("{n} thr")).collect();
    println!("| store | {} |", header.join(" | "));
    println!("|---|{}", "---:|".repeat(counts.len()));
    for name in &o.stores {
        let mut cells = Vec::new();
        let mut single = None;
        for &n in &counts {
            // A fresh, warm store per cell, so one cell's inserts do not shape the next.
            let Some(store) = build(name, o.capacity) else {
                continue;
            };
            for chunk in warm.chunks(65_536) {
                store.insert_all(chunk);
            }
            store.settle();
            let rate = run(store.as_ref(), &streams[..n], o.millis);
            let base = *single.get_or_insert(rate);
            cells.push(format!("{:.1} ({:.2}x)", rate / 1e6, rate / base));
        }
        println!("| {name} | {} |", cells.join(" | "));
    }
}
