//! Hit-ratio simulator: replays the ARC traces, seeded zipf workloads and the adversarial
//! workloads of issue 17 (a scan mixed into zipf, a zipf whose hot set shifts, a loop slightly
//! larger than the cache) through exact LRU (checked against the published figures), the
//! sampled-LRU model, ttl-lru, the peers and two reference rows (ARC, and Belady's MIN: the
//! offline optimum), and prints markdown tables with each policy's distance from exact LRU and,
//! with the peers on, from the best of exact LRU, quick_cache and moka (TinyLFU).
//!
//! `cargo run --release -p benches --bin hitratio -- [--trace NAME]... [--quick] [--no-peers]
//! [--no-model] [--precision N] [--only SUBSTR] [--trace-dir DIR]` where NAME is one of OLTP, P2,
//! P3, P6, P12, zipf0.8, zipf1.0, zipf1.2, scan, shift, loop, and `--only` (alternatives separated by `|`) keeps exact LRU, the best-peer column's peers plus
//! the rows whose name contains SUBSTR.

use std::path::PathBuf;
use std::time::Instant;

use benches::adaptive::{Adaptive, Config as AdaptiveConfig};
use benches::policy::{
    Arc, Belady, ExactLru, MokaSync, PingoraMemory, Policy, QuickCache, SampledLru, SimResult,
    TtlLru, TtlLruConfig, simulate,
};
use benches::trace::{ARC_TRACES, ArcTrace, TRACE_DIR_ENV, trace_dirs};
use benches::workload::{looping, shifting_zipf, zipf_with_scan};
use benches::zipf::Zipf;
use ttl_lru::Admission;

/// The published exact-LRU figures (ARC paper, Table IV and the P-trace table).
const PUBLISHED: &[(&str, usize, f64)] = &[
    ("OLTP", 1_000, 32.83),
    ("OLTP", 2_000, 42.47),
    ("OLTP", 5_000, 53.65),
    ("OLTP", 10_000, 60.70),
    ("OLTP", 15_000, 64.63),
    ("P2", 32_768, 18.47),
    ("P3", 32_768, 3.57),
    ("P6", 32_768, 4.24),
    ("P12", 32_768, 8.93),
];

const ZIPF_KEYS: u64 = 100_000;
const ZIPF_SIZES: [usize; 2] = [1_000, 10_000];
const ZIPF_SEED: u64 = 0x5EED;
/// The adversarial workloads' parameters: a scan as long as the zipf key space, a new hot set
/// every 200K requests, a loop 10% longer than the cache.
const SCAN_KEYS: usize = 100_000;
const SHIFT_PERIOD: usize = 200_000;
const LOOP_EXCESS: f64 = 1.1;
/// Rows that are references, not contenders (not counted as peers).
const REFERENCES: [&str; 2] = ["ARC (reference)", "Belady MIN (offline optimum)"];
/// The peers whose best a default must match (issue 17's goal), with exact LRU.
const BEST_OF: [&str; 3] = [
    "exact LRU",
    "quick_cache (CLOCK-Pro-like)",
    "moka (TinyLFU, default)",
];

struct Options {
    traces: Vec<String>,
    quick: bool,
    peers: bool,
    model: bool,
    precision: usize,
    only: Option<String>,
    trace_dirs: Vec<PathBuf>,
}

fn usage() -> ! {
    eprintln!(
        "usage: hitratio [--trace NAME]... [--quick] [--no-peers] [--no-model] [--precision N] [--only SUBSTR] [--trace-dir DIR]\n\
         NAME: OLTP P2 P3 P6 P12 zipf0.8 zipf1.0 zipf1.2 scan shift loop (default: all)\n\
         --quick: OLTP and the zipf workloads at 500K requests only"
    );
    std::process::exit(2)
}

fn parse_args() -> Options {
    let mut opts = Options {
        traces: Vec::new(),
        quick: false,
        peers: true,
        model: true,
        precision: 2,
        only: None,
        trace_dirs: trace_dirs(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--trace" => opts.traces.push(args.next().unwrap_or_else(|| usage())),
            "--trace-dir" => {
                let dir = args.next().unwrap_or_else(|| usage());
                opts.trace_dirs.insert(0, PathBuf::from(dir));
            }
            "--quick" => opts.quick = true,
            "--no-peers" => opts.peers = false,
            "--no-model" => opts.model = false,
            "--only" => opts.only = Some(args.next().unwrap_or_else(|| usage())),
            "--precision" => {
                opts.precision = match args.next().map(|n| n.parse::<usize>()) {
                    Some(Ok(n)) if n <= 8 => n,
                    _ => usage(),
                }
            }
            "-h" | "--help" => usage(),
            other => {
                eprintln!("unknown argument {other:?}");
                usage()
            }
        }
    }
    if opts.traces.is_empty() {
        let all: &[&str] = if opts.quick {
            &[
                "OLTP", "zipf0.8", "zipf1.0", "zipf1.2", "scan", "shift", "loop",
            ]
        } else {
            &[
                "OLTP", "P2", "P3", "P6", "P12", "zipf0.8", "zipf1.0", "zipf1.2", "scan", "shift",
                "loop",
            ]
        };
        opts.traces = all.iter().map(|s| (*s).to_owned()).collect();
    }
    opts
}

/// Builds a policy for a capacity and the requests it will replay (the offline optimum must see
/// them first; the others ignore them).
type Build = Box<dyn Fn(usize, &[u64]) -> Box<dyn Policy>>;

/// A named way to build a policy.
struct Contender {
    name: String,
    build: Build,
}

fn contender(
    name: impl Into<String>,
    build: impl Fn(usize) -> Box<dyn Policy> + 'static,
) -> Contender {
    Contender {
        name: name.into(),
        build: Box::new(move |c, _| build(c)),
    }
}

fn contenders(opts: &Options) -> Vec<Contender> {
    let mut list = vec![contender("exact LRU", |c| Box::new(ExactLru::new(c)))];
    list.push(contender(REFERENCES[0], |c| Box::new(Arc::new(c))));
    list.push(Contender {
        name: REFERENCES[1].to_owned(),
        build: Box::new(|c, keys| Box::new(Belady::new(c, keys, false))),
    });
    for pool in [false, true] {
        for k in [1usize, 5, 10, 16] {
            let config = TtlLruConfig {
                samples: k,
                pool,
                admission: Admission::Always,
                shards: 1,
            };
            list.push(ttl_lru_contender(config));
        }
    }
    // Sampled LRU as the store runs it (the default policy until issue 17).
    let lru = TtlLruConfig {
        samples: ttl_lru::DEFAULT_SAMPLES,
        pool: true,
        admission: Admission::Always,
        shards: 8,
    };
    list.push(ttl_lru_contender(lru));
    for admission in [Admission::TinyLfu, Admission::Adaptive] {
        // Each policy with its own default sample count (the adaptive one samples fewer).
        let samples = if admission == Admission::Adaptive {
            ttl_lru::ADAPTIVE_SAMPLES
        } else {
            ttl_lru::DEFAULT_SAMPLES
        };
        list.push(ttl_lru_contender(TtlLruConfig {
            admission,
            samples,
            shards: 1,
            ..lru
        }));
        list.push(ttl_lru_contender(TtlLruConfig {
            admission,
            samples,
            ..lru
        }));
    }
    // The lab's model of the adaptive policy as the store runs it (`policylab --cand
    // minisim,sshare=1,resident=2`: protected share estimated from the samples, hits counted
    // in their entries once per resolution; the store drains a full hit buffer, so no hit is
    // lost).
    list.push(contender(
        "lab adaptive minisim (sshare=1, resident=2)",
        |c| {
            Box::new(Adaptive::new(
                c,
                AdaptiveConfig {
                    slru_sampled_share: true,
                    resident: true,
                    resident_gated: true,
                    ..AdaptiveConfig::minisim()
                },
                42,
            ))
        },
    ));
    if !opts.model {
        return with_peers(list, opts.peers);
    }
    for window in [false, true] {
        let kind = if window { "window" } else { "sampled" };
        for pool in [0usize, 16] {
            for k in [1usize, 5, 10, 16] {
                let label = if pool == 0 {
                    format!("model {kind} k={k}")
                } else {
                    format!("model {kind} k={k} + pool {pool}")
                };
                list.push(contender(label, move |c| {
                    Box::new(if window {
                        SampledLru::windowed(c, k, pool, 42)
                    } else {
                        SampledLru::new(c, k, pool, 42)
                    })
                }));
            }
        }
    }
    with_peers(list, opts.peers)
}

fn ttl_lru_contender(config: TtlLruConfig) -> Contender {
    let mut label = format!("ttl-lru k={}", config.samples);
    if config.pool {
        let size = if config.admission == Admission::Adaptive {
            ttl_lru::ADAPTIVE_POOL_SIZE
        } else {
            ttl_lru::DEFAULT_POOL_SIZE
        };
        label.push_str(&format!(" + pool {size}"));
    }
    match config.admission {
        Admission::TinyLfu => label.push_str(" + TinyLFU admission"),
        Admission::Adaptive => label.push_str(" + adaptive window"),
        _ => {}
    }
    label.push_str(&format!(
        ", {} shard{}",
        config.shards,
        if config.shards == 1 { "" } else { "s" }
    ));
    contender(label, move |c| Box::new(TtlLru::new(c, config)))
}

fn with_peers(mut list: Vec<Contender>, peers: bool) -> Vec<Contender> {
    if peers {
        list.push(contender("moka (TinyLFU, default)", |c| {
            Box::new(MokaSync::tiny_lfu(c as u64))
        }));
        list.push(contender("moka (EvictionPolicy::lru)", |c| {
            Box::new(MokaSync::lru(c as u64))
        }));
        list.push(contender("quick_cache (CLOCK-Pro-like)", |c| {
            Box::new(QuickCache::new(c))
        }));
        list.push(contender("pingora-memory-cache (TinyUFO)", |c| {
            Box::new(PingoraMemory::new(c))
        }));
    }
    list
}

/// A workload: a name, the cache sizes to try and a way to replay it.
struct Workload {
    name: String,
    sizes: Vec<usize>,
    source: Source,
    description: String,
    precision: usize,
}

/// Where a workload's keys come from.
enum Source {
    Trace(ArcTrace),
    Keys(Vec<u64>),
    /// Requests that depend on the cache size (the loop).
    PerSize(Box<dyn Fn(usize) -> Vec<u64>>),
}

impl Workload {
    /// The requests replayed against a cache of `size`.
    fn keys(&self, size: usize) -> Vec<u64> {
        match &self.source {
            Source::Trace(t) => t.keys().collect(),
            Source::Keys(k) => k.clone(),
            Source::PerSize(f) => f(size),
        }
    }
}

fn load_workload(
    name: &str,
    quick: bool,
    dirs: &[PathBuf],
    precision: usize,
) -> Result<Workload, String> {
    let count = if quick { 500_000 } else { 2_000_000 };
    let zipf1 = || Zipf::new(ZIPF_KEYS, 1.0).map_err(|e| e.to_string());
    match name {
        "scan" => {
            return Ok(Workload {
                name: name.to_owned(),
                sizes: ZIPF_SIZES.to_vec(),
                description: format!(
                    "zipf s=1.0 over {ZIPF_KEYS} keys, {count} requests, with a one-time scan of \
                     {SCAN_KEYS} new keys mixed in from the middle (every other request), seed \
                     {ZIPF_SEED:#x}"
                ),
                source: Source::Keys(zipf_with_scan(&zipf1()?, count, SCAN_KEYS, ZIPF_SEED)),
                precision,
            });
        }
        "shift" => {
            return Ok(Workload {
                name: name.to_owned(),
                sizes: ZIPF_SIZES.to_vec(),
                description: format!(
                    "zipf s=1.0 over {ZIPF_KEYS} keys, {count} requests, the ranks mapped to a \
                     new set of keys every {SHIFT_PERIOD} requests, seed {ZIPF_SEED:#x}"
                ),
                source: Source::Keys(shifting_zipf(&zipf1()?, count, SHIFT_PERIOD, ZIPF_SEED)),
                precision,
            });
        }
        "loop" => {
            return Ok(Workload {
                name: name.to_owned(),
                sizes: ZIPF_SIZES.to_vec(),
                description: format!(
                    "a loop over {LOOP_EXCESS} x the cache size keys, {count} requests"
                ),
                source: Source::PerSize(Box::new(move |size| {
                    looping((size as f64 * LOOP_EXCESS).ceil() as u64, count)
                })),
                precision,
            });
        }
        _ => {}
    }
    if let Some(exponent) = name.strip_prefix("zipf") {
        let s: f64 = exponent
            .parse()
            .map_err(|_| format!("bad zipf exponent in {name:?}"))?;
        let zipf = Zipf::new(ZIPF_KEYS, s).map_err(|e| e.to_string())?;
        let keys = zipf.keys(count, ZIPF_SEED);
        return Ok(Workload {
            name: name.to_owned(),
            sizes: ZIPF_SIZES.to_vec(),
            description: format!(
                "zipf s={s} over {ZIPF_KEYS} keys, {count} requests, seed {ZIPF_SEED:#x}"
            ),
            source: Source::Keys(keys),
            precision,
        });
    }
    if !ARC_TRACES.contains(&name) {
        return Err(format!("unknown trace {name:?}"));
    }
    let trace = ArcTrace::load_from(name, dirs).map_err(|e| e.to_string())?;
    let sizes = if name == "OLTP" {
        vec![1_000, 2_000, 5_000, 10_000, 15_000]
    } else {
        vec![32_768]
    };
    Ok(Workload {
        name: name.to_owned(),
        description: format!(
            "ARC trace {name}: {} lines, {} requests",
            trace.lines(),
            trace.requests()
        ),
        sizes,
        source: Source::Trace(trace),
        precision,
    })
}

fn main() {
    let opts = parse_args();
    let mut contenders = contenders(&opts);
    if let Some(only) = &opts.only {
        // Exact LRU stays (every other row is reported against it), and so do the peers of the
        // best-peer column; `|` separates alternatives.
        let mut i = 0;
        contenders.retain(|c| {
            i += 1;
            i == 1
                || BEST_OF.contains(&c.name.as_str())
                || only.split('|').any(|o| c.name.contains(o))
        });
    }
    let mut all_match = true;
    for name in &opts.traces {
        let workload = match load_workload(name, opts.quick, &opts.trace_dirs, opts.precision) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("error: {e} (set {TRACE_DIR_ENV} or pass --trace-dir)");
                std::process::exit(1);
            }
        };
        let started = Instant::now();
        let mut rows: Vec<(String, Vec<SimResult>)> = contenders
            .iter()
            .map(|c| (c.name.clone(), Vec::new()))
            .collect();
        for &size in &workload.sizes {
            let keys = workload.keys(size);
            for (c, row) in contenders.iter().zip(&mut rows) {
                let mut policy = (c.build)(size, &keys);
                row.1.push(simulate(policy.as_mut(), keys.iter().copied()));
            }
        }
        all_match &= print_table(&workload, &rows);
        println!("\n({} s)\n", started.elapsed().as_secs());
    }
    if !all_match {
        eprintln!("exact LRU does NOT reproduce a published figure: the harness is wrong");
        std::process::exit(1);
    }
}

/// Prints one markdown table; returns false if exact LRU missed a published figure.
fn print_table(workload: &Workload, rows: &[(String, Vec<SimResult>)]) -> bool {
    println!("### {}\n\n{}\n", workload.name, workload.description);
    print!("| policy |");
    for size in &workload.sizes {
        print!(" {size} |");
    }
    println!();
    print!("|---|");
    for _ in &workload.sizes {
        print!("---:|");
    }
    println!();
    let lru = &rows[0].1;
    // The best of exact LRU, quick_cache and moka per size, when those rows are there.
    let best: Option<Vec<f64>> = {
        let peers: Vec<&Vec<SimResult>> = rows
            .iter()
            .filter(|(name, _)| BEST_OF.contains(&name.as_str()))
            .map(|(_, r)| r)
            .collect();
        (peers.len() == BEST_OF.len()).then(|| {
            (0..workload.sizes.len())
                .map(|i| {
                    peers
                        .iter()
                        .map(|r| r[i].percent())
                        .fold(f64::MIN, f64::max)
                })
                .collect()
        })
    };
    if best.is_some() {
        println!(
            "(each row: hit ratio %, then its difference to exact LRU and to the best of \
             exact LRU, quick_cache and moka (TinyLFU))\n"
        );
    }
    let mut ok = true;
    let published: Vec<Option<f64>> = workload
        .sizes
        .iter()
        .map(|&s| {
            PUBLISHED
                .iter()
                .find(|(t, size, _)| *t == workload.name && *size == s)
                .map(|p| p.2)
        })
        .collect();
    if published.iter().any(Option::is_some) {
        print!("| published LRU (ARC paper) |");
        for p in &published {
            match p {
                Some(p) => print!(" {p:.2} |"),
                None => print!(" |"),
            }
        }
        println!();
    }
    for (name, results) in rows {
        print!("| {name} |");
        for (i, r) in results.iter().enumerate() {
            let pct = r.percent();
            if std::ptr::eq(results, lru) {
                print!(" {pct:.prec$} |", prec = workload.precision);
                if let Some(p) = published[i] {
                    ok &= ((pct * 100.0).round() / 100.0 - p).abs() < 1e-9;
                }
            } else {
                let delta = pct - lru[i].percent();
                match &best {
                    Some(best) => print!(
                        " {pct:.prec$} ({delta:+.prec$}, {:+.prec$}) |",
                        pct - best[i],
                        prec = workload.precision
                    ),
                    None => print!(
                        " {pct:.prec$} ({delta:+.prec$}) |",
                        prec = workload.precision
                    ),
                }
            }
        }
        println!();
    }
    ok
}
