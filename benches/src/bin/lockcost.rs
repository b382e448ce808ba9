//! What a shard read lock costs by itself, uncontended: `parking_lot::RwLock::read` plus its
//! unlock (a compare-and-swap and a fetch-sub on one shared word) against the scheme of
//! ttl-lru's `shard_lock.rs` (a sequentially consistent swap of the reader's own mark, a load of
//! the lock word, a release store), each around one load from a 64 KiB array, and the load
//! alone. Prints ns per iteration; docs/benchmarks.md ("Session 5") quotes it.
//!
//! The mark scheme is re-stated here rather than imported: the lock is private to ttl-lru, and
//! what is measured is the instruction pattern, which this copies exactly.
//!
//! `cargo run --release -p benches --bin lockcost -- [iterations]`

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

/// Keeps a word on its own cache line, as the lock word and the marks are.
#[repr(align(128))]
struct Padded(AtomicU64);

fn main() {
    let iterations: u64 = match std::env::args().nth(1).map(|a| a.replace('_', "").parse()) {
        None => 50_000_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: lockcost [iterations > 0]");
            std::process::exit(2);
        }
    };
    let data: Vec<u64> = (0..8192).collect();
    // A scattered index, so the loop is not a stream the prefetcher hides.
    let at = |i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 51) as usize;

    let rw = parking_lot::RwLock::new(data.clone());
    let ns = time(iterations, |i| {
        let g = rw.read();
        g[at(i)]
    });
    println!("parking_lot read + unlock: {ns:.2} ns");

    let (mark, word) = (Padded(AtomicU64::new(0)), Padded(AtomicU64::new(0)));
    let ns = time(iterations, |i| {
        mark.0.swap(1, Ordering::SeqCst);
        assert_eq!(word.0.load(Ordering::SeqCst) & 1, 0, "no writer here");
        let v = data[at(i)];
        mark.0.store(0, Ordering::Release);
        v
    });
    println!("mark swap + release store:  {ns:.2} ns");

    let ns = time(iterations, |i| data[at(i)]);
    println!("the load alone:             {ns:.2} ns");
}

fn time(iterations: u64, mut step: impl FnMut(u64) -> u64) -> f64 {
    let started = std::time::Instant::now();
    let mut sum = 0u64;
    for i in 0..iterations {
        sum = sum.wrapping_add(step(i));
    }
    black_box(sum);
    started.elapsed().as_nanos() as f64 / iterations as f64
}
