//! One store's get-hit cost in isolation: builds only the named store, fills it with `entries`
//! keys, then times `ops` lookups of those keys in a scattered order and prints ns per get. With
//! `insert` as the fourth argument it times `ops` inserts of new keys instead (at capacity: each
//! evicts, or is declined by an admission policy: ttl-lru's default declines most of these
//! keys, asked for once, and the output says how many); with `zipf`, `ops` lookups of the same keys drawn zipf(1.0) (every one a hit, most
//! of them on a hot few: what a production read mix looks like, where the uniform order makes
//! most hits a key's first few); with `fill`, `ops` read-through lookups of new keys (each a
//! miss whose trivial fill stores its value or has it declined, at capacity: ttl-lru's `get_or_try_insert`,
//! quick_cache's `get_value_or_guard_async`; the criterion `coalesce/uncontended_miss` group
//! measures the same below its target size).
//!
//! The criterion `get_hit` group builds every store before it measures any, and runs long; this
//! is the small, single-store program to put under `perf record`, `valgrind --tool=cachegrind`
//! or a loop of interleaved runs when comparing two builds of one store (docs/benchmarks.md).
//!
//! `cargo run --release -p benches --bin hitprobe -- <ttl-lru|ttl-lru-lru|ttl-lru-tinylfu|ttl-lru-adaptive|quick_cache|floor> [entries] [ops] [get|insert|zipf|fill]`
//!
//! `ttl-lru` is the store with every default (the adaptive policy since issue 17, as
//! `ttl-lru-adaptive`); `ttl-lru-lru` is sampled LRU (`Admission::Always`, the default before).
//! `ttl-lru-lru:SAMPLES:POOL` builds sampled LRU with other eviction settings
//! (`ttl-lru-lru:5:0`: 5 samples, no candidate pool; `ttl-lru:S:P` in docs/benchmarks.md before
//! issue 17's default changed), to measure what they cost on inserts at capacity;
//! `ttl-lru-adaptive:SAMPLES:POOL` the same with the adaptive policy.

use benches::stores::{QuickCache, ShardedFloor, Store, TtlLruStore};
use benches::zipf::scatter;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: usize| {
        args.get(i).map_or(Ok(default), |a| {
            a.replace('_', "")
                .parse()
                .map_err(|_| format!("not a count: {a}"))
        })
    };
    let (entries, gets) = match (number(1, 100_000), number(2, 2_000_000)) {
        (Ok(e), Ok(g)) if e > 0 => (e, g),
        (Err(msg), _) | (_, Err(msg)) => return usage(&msg),
        _ => return usage("entries must be at least 1"),
    };
    let (insert, zipf) = match args.get(3).map(String::as_str) {
        None | Some("get") => (false, false),
        Some("insert" | "fill") => (true, false),
        Some("zipf") => (false, true),
        Some(other) => return usage(&format!("unknown mode {other:?}")),
    };
    let store: Box<dyn Store> = match args.first().map(String::as_str) {
        Some("ttl-lru") => Box::new(TtlLruStore::new(entries)),
        Some("ttl-lru-lru") => Box::new(TtlLruStore::with_admission(
            entries,
            ttl_lru::Admission::Always,
        )),
        Some("ttl-lru-tinylfu") => Box::new(TtlLruStore::with_admission(
            entries,
            ttl_lru::Admission::TinyLfu,
        )),
        Some("ttl-lru-adaptive") => Box::new(TtlLruStore::with_admission(
            entries,
            ttl_lru::Admission::Adaptive,
        )),
        Some(spec) if spec.starts_with("ttl-lru-lru:") || spec.starts_with("ttl-lru-adaptive:") => {
            let (prefix, rest) = spec.split_once(':').unwrap_or((spec, ""));
            let mut parts = rest.split(':').map(str::parse::<usize>);
            match (parts.next(), parts.next(), parts.next()) {
                (Some(Ok(samples)), Some(Ok(pool)), None) if samples > 0 => {
                    if prefix == "ttl-lru-lru" {
                        Box::new(TtlLruStore::with_eviction(entries, samples, pool))
                    } else {
                        Box::new(TtlLruStore::with_admission_eviction(
                            entries,
                            ttl_lru::Admission::Adaptive,
                            samples,
                            pool,
                        ))
                    }
                }
                _ => return usage(&format!("not {prefix}:SAMPLES:POOL: {spec:?}")),
            }
        }
        Some("quick_cache") => Box::new(QuickCache::new(entries)),
        Some("floor") => Box::new(ShardedFloor::new(entries, 64)),
        other => return usage(&format!("unknown store {other:?}")),
    };
    let keys: Vec<u64> = (0..entries as u64).map(scatter).collect();
    for chunk in keys.chunks(65_536) {
        store.insert_all(chunk);
    }
    store.settle();
    if insert {
        let fresh: Vec<u64> = (entries as u64..(entries + gets) as u64)
            .map(scatter)
            .collect();
        let fill = args.get(3).is_some_and(|m| m == "fill");
        let declined_before = store.declined();
        let started = std::time::Instant::now();
        if fill {
            if !store.read_through_all(&fresh) {
                return usage(&format!("{} has no read-through path", store.name()));
            }
        } else {
            store.insert_all(&fresh);
        }
        let ns = started.elapsed().as_nanos() as f64 / gets.max(1) as f64;
        let what = if fill { "fill" } else { "insert" };
        // Declined writes (an admission policy's) did less work than stored ones: printed so
        // that a table quoting this time can say what it measured. The time stays last.
        println!(
            "{} entries={entries} {what}s={gets} declined={} ns/{what}={ns:.1}",
            store.name(),
            store.declined() - declined_before
        );
        return;
    }
    let order: Vec<u64> = if zipf {
        // Ranks 0..entries drawn zipf(1.0), scattered as the inserted keys were.
        benches::zipf::Zipf::new(entries as u64, 1.0)
            .expect("entries >= 1")
            .keys(gets, 0x5EED)
    } else {
        (0..gets as u64)
            .map(|i| keys[(scatter(i) % entries as u64) as usize])
            .collect()
    };
    let started = std::time::Instant::now();
    let hits = store.get_all(&order);
    let ns = started.elapsed().as_nanos() as f64 / gets.max(1) as f64;
    println!(
        "{} entries={entries} gets={gets} hits={hits} ns/get={ns:.1}",
        store.name()
    );
}

fn usage(problem: &str) {
    eprintln!("hitprobe: {problem}");
    eprintln!(
        "usage: hitprobe <ttl-lru|ttl-lru-lru|ttl-lru-tinylfu|ttl-lru-adaptive|ttl-lru-lru:SAMPLES:POOL|ttl-lru-adaptive:SAMPLES:POOL|quick_cache|floor> [entries=100000] [ops=2000000] [get|insert|zipf|fill]"
    );
    std::process::exit(2);
}
