//! Bytes per entry at 1M `u64 -> u64` entries, measured with a counting global allocator: the
//! heap growth from an empty process-wide baseline to a store holding the entries (after the
//! store's deferred maintenance has run), divided by the entries it holds. ttl-lru's other
//! policies (sampled LRU, TinyLFU; the `ttl-lru` row is the default, the adaptive policy)
//! follow the peers as rows of their own.
//!
//! `cargo run --release -p benches --bin memory -- [--entries N]`

use std::alloc::System;

use benches::stores::{Store, TtlLruStore, all_stores};
use benches::zipf::scatter;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn main() {
    let mut entries: usize = 1_000_000;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--entries", Some(n)) => match n.parse() {
                Ok(n) if n > 0 => entries = n,
                _ => {
                    eprintln!("--entries needs a positive integer, got {n:?}");
                    std::process::exit(2);
                }
            },
            _ => {
                eprintln!("usage: memory [--entries N]");
                std::process::exit(2);
            }
        }
    }
    let keys: Vec<u64> = (0..entries as u64).map(scatter).collect();
    let names: Vec<&'static str> = all_stores(1).iter().map(|s| s.name()).collect();
    println!("| store | entries held | heap bytes | bytes/entry |");
    println!("|---|---:|---:|---:|");
    // ttl-lru's other policies after the list (they share the store's name there).
    let policies = [
        ("ttl-lru sampled LRU", ttl_lru::Admission::Always),
        ("ttl-lru + TinyLFU", ttl_lru::Admission::TinyLfu),
    ];
    let rows = names
        .iter()
        .map(|&n| (n, None))
        .chain(policies.iter().map(|&(n, a)| (n, Some(a))));
    for (name, admission) in rows {
        let region = Region::new(GLOBAL);
        let store: Box<dyn Store> = match admission {
            Some(a) => Box::new(TtlLruStore::with_admission(entries, a)),
            None => all_stores(entries)
                .into_iter()
                .find(|s| s.name() == name)
                .expect("same list"),
        };
        fill(store.as_ref(), &keys);
        let change = region.change();
        // stats_alloc already folds realloc growth/shrink into these two counters.
        let held = change
            .bytes_allocated
            .saturating_sub(change.bytes_deallocated);
        let present = store.get_all(&keys);
        println!(
            "| {name} | {present} | {held} | {:.1} |",
            held as f64 / present.max(1) as f64
        );
        drop(store);
    }
}

fn fill(store: &dyn Store, keys: &[u64]) {
    for chunk in keys.chunks(65_536) {
        store.insert_all(chunk);
    }
    store.settle();
}
