//! Policy lab (issue 17): runs candidate sampled eviction policies (`benches::adaptive`) side by
//! side with exact LRU, quick_cache and moka's TinyLFU, and prints every cell with its distance
//! to the best of those three peers, then a summary per candidate: the worst cell, the cells
//! more than 0.5 points behind, and the average over all cells against quick_cache's.
//!
//! `cargo run --release -p benches --bin policylab -- [--trace NAME]... [--cand SPEC]...
//! [--peer-cache FILE] [--trace-dir DIR] [--seed N]` (N seeds the candidates' sampling; 42)
//!
//! NAME: OLTP P2 P3 P6 P12 zipf0.8 zipf1.0 zipf1.2 scan shift loop (default: OLTP and the
//! zipfs). `scan`, `shift` and `loop` are `hitratio`'s (`benches::workload`, same parameters):
//! zipf 1.0 with a one-time scan of 100K new keys mixed in from the middle; zipf 1.0 whose
//! popular keys move to a new set every 200K requests; a loop 10% longer than the cache.
//!
//! SPEC: a mode (`lru`, `tinylfu`, `bias`, `win`) and comma-separated options: `init=F`,
//! `ghost=F` (ARC-style step per ghost hit), `climb=PERIOD/STEP` (Caffeine's hill climber),
//! `min=F`, `max=F` (window share bounds), `k=N`, `pool=N`, `res=N`, `period=N` (sketch aging,
//! x capacity), `door=0|1`, `hitrec=N` (record 1 hit in N), `resident=0|1|2` (hits raise the entry's own
//! count instead of the sketch's: `Config::resident`; 2: only hits a resolution apart),
//! `pgate=0|1` (a main entry is protected only by a hit a resolution after its stamp), `ghosts=F` (ghost slots per entry),
//! `density=PERIOD` (Caffeine's density climber), `marginal=REACH/STEP[/DRIFT]` (per-region
//! marginal ghosts), `guard=PERIOD` and `gb=F` (shrink-only density guard and its threshold), `ga=F` (the guard also grows the window above
//! this `ln` density ratio),
//! `keep=0|1` (a duel-winning victim stays pooled), `keepn=0|1` (only after a duel against a
//! newcomer), `nodecline=0|1` (never refuse a newcomer: a window of at least one entry whose
//! newest entry duels in the newcomer's place), `keepm=N` (only a victim that won by at most N
//! counts; -1 off), `slru=0|1` and `share=F` (sampled SLRU
//! main space and its protected share), `sshare=0|1` (that share estimated from the samples),
//! `scale=0|1` (marginal step x capacity/1000), `hitbuf=N` (hits buffered, N at most, into the sketch at the next miss), `lfu=N` (least frequent of the N oldest
//! main candidates), `added=0|1` (sketch aging counts only raising records), `reset=F` and
//! `halvings=N` (phase-change reset: the sketch halved N times, 4 by default, when a period of
//! `capacity` requests hits F less, as a share, than the one before), `rwin=F` (the window's
//! share raised to at least F on such a phase change), `mdrop=F` (a phase change is a period
//! whose hits on main entries fall below F x the previous period's), `epoch=0|1` (on a phase
//! change, entries not hit since count 0 in duels), `confirm=N` (a drop resets only if the hit
//! ratio is still down N periods later), `idle=F` (a duelling main
//! victim's frequency halved per F x capacity requests since its last stamp), `stale=F` (a
//! duelling main victim's count capped at F x the sketch's aging period / its idle requests),
//! `tie=F` (a tied duel goes to the newcomer when the victim has been idle F capacities), `cons=0|1` (the
//! sketch's conservative update; 0 raises all four counters, as moka does), `thin=0|1` (with
//! `hitbuf`, a miss is recorded with the probability a buffered hit had of being kept),
//! `width=N` (sketch counters per row per entry of capacity; 4), `pmin=N` (the sketch ages no
//! more often than every N records), `dead=F` (the window holds its share less F),
//! `accel=F` and `acap=F` (marginal-ghost momentum: x F per same-way ghost hit, at most F of the
//! capacity per hit), `veto=0|1` (no ghost growth while the window earned less per entry than
//! main in the guard's last period; momentum only while it earned more), `fast=MULT/BELOW` (a
//! window ghost moves MULT times as far while under BELOW of the last ~64 counted ghosts were
//! main victims'), `mini=COUNT/SIZE/PERIOD[/MAX[/DECAY]]` (miniature simulations pick the
//! window share: COUNT copies at fixed shares `MAX x (i / (COUNT - 1))^2`, SIZE entries each,
//! fed one hash bucket in `capacity / SIZE`; every PERIOD x capacity requests the window takes
//! the share of the copy with the fewest misses, each period's plus DECAY x the last score;
//! the window then shrinks by demoting its oldest entries), `mrate=N` (the minis' sampling
//! modulus is at least N), `malt=N` (the copies run twice, with the candidate's `lfu` and with
//! N, and the main space takes the winner's pick too), `msamp=N` and `mpool=N` (the copies'
//! own samples per eviction and pool size; 0: the cache's), `mskip=MASK` (bit K skips the K-th
//! copy in build order, pick-major: with `minisim`'s copies 1 = 0% pick 12, 2 = 25% pick 12,
//! 4 = 100%, 8 = 0% pick 1, 16 = 25% pick 1), `mgrid=SHARE:PICK/...` (the copies are exactly
//! these, at most 8; pick 0 is the candidate's `lfu`).
//! Example: `--cand win,init=0.01,ghost=0.002`. `best` is `Config::recommended()`, the
//! candidate this lab recommends (the same as
//! `win,init=0,marginal=0.05/1,min=0,keep=0,guard=1,period=64,slru=1`); `next` is
//! `Config::next()`, the best candidate found since (`best,keep=1,lfu=4,added=1,period=24,
//! dead=0.08,idle=8`); `minisim` is `Config::minisim()`, the policy ttl-lru's
//! `Admission::Adaptive` runs (`next,lfu=12,width=8,marginal=0/0,guard=0,dead=0,
//! mini=6/1000/8/1/0.5,mrate=4,malt=1`; with `malt=0` the first candidate found that meets
//! every cell). Each takes options after it: `--cand best,idle=8`.
//!
//! `--wins` prints, per candidate with miniature simulations, the share of periods each copy
//! won in each cell.
//!
//! The peers' results do not depend on the candidates: `--peer-cache FILE` stores them and reuses
//! them (moka's hashing is randomly seeded, so its cells move by up to about 0.4 point a run).

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use benches::adaptive::{Adapt, Adaptive, Config, MINI_GRID_MAX, Mode};
use benches::policy::{ExactLru, MokaSync, Policy, QuickCache, SimResult, simulate};
use benches::trace::{ARC_TRACES, ArcTrace, trace_dirs};
use benches::workload::{looping, shifting_zipf, zipf_with_scan};
use benches::zipf::Zipf;

const PEERS: [&str; 3] = ["exact LRU", "quick_cache", "moka TinyLFU"];
const ZIPF_KEYS: u64 = 100_000;
const ZIPF_SEED: u64 = 0x5EED;
/// `hitratio`'s adversarial workloads: a scan as long as the zipf key space (every other request
/// from the middle on), a new hot set every 200K requests, a loop 10% longer than the cache.
const SCAN_KEYS: usize = 100_000;
const SHIFT_PERIOD: usize = 200_000;
const LOOP_EXCESS: f64 = 1.1;

fn usage() -> ! {
    eprintln!(
        "usage: policylab [--trace NAME]... [--cand SPEC]... [--peer-cache FILE] [--trace-dir DIR] [--seed N] [--wins]\n\
         (see the module docs for NAME and SPEC)"
    );
    std::process::exit(2)
}

fn parse_spec(spec: &str) -> Result<Config, String> {
    let mut parts = spec.split(',');
    let mut mode = parts.next().unwrap_or_default();
    let mut cfg = Config::store(Mode::Lru);
    let mut init = None;
    let mut adapt = Adapt::Fixed;
    let (mut min, mut max) = (0.0, 1.0);
    if mode == "best" || mode == "next" || mode == "minisim" {
        // `best`, `next` or `minisim` with options: that candidate, options applied over it.
        cfg = match mode {
            "best" => Config::recommended(),
            "next" => Config::next(),
            _ => Config::minisim(),
        };
        if let Mode::Window {
            init: i,
            adapt: a,
            min: lo,
            max: hi,
        } = cfg.mode
        {
            (init, adapt, min, max) = (Some(i), a, lo, hi);
        }
        mode = "win";
    }
    for opt in parts {
        let (k, v) = opt
            .split_once('=')
            .ok_or_else(|| format!("option {opt:?} is not KEY=VALUE"))?;
        let f = || {
            v.parse::<f64>()
                .map_err(|_| format!("bad number in {opt:?}"))
        };
        let n = || {
            v.parse::<u64>()
                .map_err(|_| format!("bad integer in {opt:?}"))
        };
        match k {
            "init" => init = Some(f()?),
            "ghost" => adapt = Adapt::Ghost { step: f()? },
            "climb" => {
                let (p, s) = v
                    .split_once('/')
                    .ok_or_else(|| format!("climb wants PERIOD/STEP, got {v:?}"))?;
                adapt = Adapt::Climb {
                    period: p.parse().map_err(|_| format!("bad period {p:?}"))?,
                    step: s.parse().map_err(|_| format!("bad step {s:?}"))?,
                };
            }
            "density" => adapt = Adapt::Density { period: f()? },
            "marginal" => {
                // REACH/STEP[/DRIFT]
                let parts: Vec<&str> = v.split('/').collect();
                let num = |i: usize| -> Result<f64, String> {
                    parts.get(i).map_or(Ok(0.0), |p| {
                        p.parse().map_err(|_| format!("bad number {p:?}"))
                    })
                };
                if parts.len() < 2 {
                    return Err(format!("marginal wants REACH/STEP[/DRIFT], got {v:?}"));
                }
                adapt = Adapt::Marginal {
                    reach: num(0)?,
                    step: num(1)?,
                    drift: num(2)?,
                };
            }
            "min" => min = f()?,
            "max" => max = f()?,
            "k" => cfg.samples = n()? as usize,
            "pool" => cfg.pool = n()? as usize,
            "res" => cfg.resolution = n()?,
            "period" => cfg.sketch_period = n()?,
            "door" => cfg.doorkeeper = n()? != 0,
            "hitrec" => cfg.hit_record = n()?.max(1),
            "pgate" => cfg.protect_gated = n()? != 0,
            "resident" => {
                let v = n()?;
                cfg.resident = v != 0;
                cfg.resident_gated = v == 2;
            }
            "added" => cfg.count_added_only = n()? != 0,
            "guard" => cfg.guard = f()?,
            "gb" => cfg.guard_below = f()?,
            "ga" => cfg.guard_above = f()?,
            "slru" => cfg.slru = n()? != 0,
            "share" => cfg.slru_share = f()?,
            "hitbuf" => cfg.hit_buffer = n()? as usize,
            "sshare" => cfg.slru_sampled_share = n()? != 0,
            "scale" => cfg.scale_step = n()? != 0,
            "keep" => cfg.keep_winner = n()? != 0,
            "keepn" => cfg.keep_newcomer_winner = n()? != 0,
            "nodecline" => cfg.no_decline = n()? != 0,
            "keepm" => cfg.keep_margin = v.parse().map_err(|_| format!("bad margin in {opt:?}"))?,
            "lfu" => cfg.lfu_pick = n()? as usize,
            "ghosts" => cfg.ghost_ratio = f()?,
            "reset" => cfg.reset_drop = f()?,
            "idle" => cfg.idle = f()?,
            "stale" => cfg.stale = f()?,
            "tie" => cfg.tie_idle = f()?,
            "rwin" => cfg.reset_window = f()?,
            "mdrop" => cfg.reset_main_drop = f()?,
            "epoch" => cfg.epoch = n()? != 0,
            "confirm" => cfg.confirm = n()? as u32,
            "novel" => cfg.novel = f()?,
            "cons" => cfg.conservative = n()? != 0,
            "thin" => cfg.thin_misses = n()? != 0,
            "width" => cfg.sketch_width = n()?.max(1) as usize,
            "pmin" => cfg.sketch_min_records = n()?,
            "dead" => cfg.dead_band = f()?,
            "accel" => cfg.accel = f()?,
            "acap" => cfg.accel_cap = f()?,
            "veto" => cfg.veto = n()? != 0,
            "fast" => {
                let (m, b) = v
                    .split_once('/')
                    .ok_or_else(|| format!("fast wants MULT/BELOW, got {v:?}"))?;
                cfg.fast_mult = m.parse().map_err(|_| format!("bad multiplier {m:?}"))?;
                cfg.fast_below = b.parse().map_err(|_| format!("bad share {b:?}"))?;
            }
            "halvings" => cfg.reset_halvings = n()? as u32,
            "mrate" => cfg.mini_rate_min = n()?,
            "malt" => cfg.mini_alt_pick = n()? as usize,
            "msamp" => cfg.mini_samples = n()? as usize,
            "mpool" => cfg.mini_pool = n()? as usize,
            "mskip" => cfg.mini_skip = n()?,
            "mgrid" => {
                // SHARE:PICK/SHARE:PICK/...
                let mut len = 0;
                for c in v.split('/') {
                    let (sh, pk) = c
                        .split_once(':')
                        .ok_or_else(|| format!("mgrid wants SHARE:PICK/..., got {v:?}"))?;
                    if len == MINI_GRID_MAX {
                        return Err(format!("mgrid takes at most {MINI_GRID_MAX} copies"));
                    }
                    cfg.mini_grid[len] = (
                        sh.parse().map_err(|_| format!("bad share {sh:?}"))?,
                        pk.parse().map_err(|_| format!("bad pick {pk:?}"))?,
                    );
                    len += 1;
                }
                cfg.mini_grid_len = len;
            }
            "mini" => {
                // COUNT/SIZE/PERIOD[/MAX[/DECAY]]
                let parts: Vec<&str> = v.split('/').collect();
                let num = |i: usize, d: f64| -> Result<f64, String> {
                    parts.get(i).map_or(Ok(d), |p| {
                        p.parse().map_err(|_| format!("bad number {p:?}"))
                    })
                };
                cfg.minis = num(0, 0.0)? as usize;
                cfg.mini_size = num(1, 100.0)? as usize;
                cfg.mini_period = num(2, 1.0)?;
                cfg.mini_max = num(3, 1.0)?;
                cfg.mini_decay = num(4, 0.0)?;
            }
            _ => return Err(format!("unknown option {k:?}")),
        }
    }
    cfg.mode = match mode {
        "lru" => Mode::Lru,
        "tinylfu" => Mode::TinyLfu,
        "bias" => Mode::Biased {
            init: init.unwrap_or(0.0),
            adapt,
        },
        "win" => Mode::Window {
            init: init.unwrap_or(0.01),
            adapt,
            min,
            max,
        },
        other => return Err(format!("unknown mode {other:?}")),
    };
    Ok(cfg)
}

/// A workload: its cache sizes and its keys at each size.
struct Workload {
    name: String,
    sizes: Vec<usize>,
    keys: Box<dyn Fn(usize) -> Box<dyn Iterator<Item = u64>>>,
}

fn zipf_keys(s: f64, count: usize) -> Vec<u64> {
    Zipf::new(ZIPF_KEYS, s)
        .expect("valid zipf")
        .keys(count, ZIPF_SEED)
}

fn load(name: &str, dirs: &[PathBuf]) -> Result<Workload, String> {
    let shared = |keys: Vec<u64>| -> Box<dyn Fn(usize) -> Box<dyn Iterator<Item = u64>>> {
        let keys = std::rc::Rc::new(keys);
        Box::new(move |_| {
            let keys = keys.clone();
            Box::new((0..keys.len()).map(move |i| keys[i]))
        })
    };
    let zipf_sizes = vec![1_000, 10_000];
    let w = |sizes: Vec<usize>, keys| Workload {
        name: name.to_owned(),
        sizes,
        keys,
    };
    if let Some(exp) = name.strip_prefix("zipf") {
        let s: f64 = exp.parse().map_err(|_| format!("bad exponent {name:?}"))?;
        return Ok(w(zipf_sizes, shared(zipf_keys(s, 2_000_000))));
    }
    // The same workloads, with the same parameters, as `hitratio`'s (whose rows the docs quote).
    let count = 2_000_000;
    let zipf1 = || Zipf::new(ZIPF_KEYS, 1.0).map_err(|e| e.to_string());
    match name {
        "scan" => {
            let keys = zipf_with_scan(&zipf1()?, count, SCAN_KEYS, ZIPF_SEED);
            return Ok(w(zipf_sizes, shared(keys)));
        }
        "shift" => {
            let keys = shifting_zipf(&zipf1()?, count, SHIFT_PERIOD, ZIPF_SEED);
            return Ok(w(zipf_sizes, shared(keys)));
        }
        "loop" => {
            return Ok(w(
                zipf_sizes,
                Box::new(move |size| {
                    let keys = looping((size as f64 * LOOP_EXCESS).ceil() as u64, count);
                    Box::new(keys.into_iter())
                }),
            ));
        }
        _ => {}
    }
    if !ARC_TRACES.contains(&name) {
        return Err(format!("unknown workload {name:?}"));
    }
    let trace = ArcTrace::load_from(name, dirs).map_err(|e| e.to_string())?;
    let sizes = if name == "OLTP" {
        vec![1_000, 2_000, 5_000, 10_000, 15_000]
    } else {
        vec![32_768]
    };
    Ok(w(sizes, shared(trace.keys().collect())))
}

fn peer(name: &str, size: usize) -> Box<dyn Policy> {
    match name {
        "exact LRU" => Box::new(ExactLru::new(size)),
        "quick_cache" => Box::new(QuickCache::new(size)),
        "moka TinyLFU" => Box::new(MokaSync::tiny_lfu(size as u64)),
        _ => unreachable!(),
    }
}

type PeerCache = HashMap<(String, usize, String), SimResult>;

fn read_cache(path: &Option<PathBuf>) -> PeerCache {
    let mut cache = PeerCache::new();
    let Some(text) = path.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) else {
        return cache;
    };
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if let [w, s, p, h, r] = f[..]
            && let (Ok(s), Ok(h), Ok(r)) = (s.parse(), h.parse(), r.parse())
        {
            cache.insert(
                (w.to_owned(), s, p.to_owned()),
                SimResult {
                    hits: h,
                    requests: r,
                },
            );
        }
    }
    cache
}

fn main() {
    let mut traces = Vec::new();
    let mut cands: Vec<(String, Config)> = Vec::new();
    let mut peer_cache_path = None;
    let mut dirs = trace_dirs();
    let mut seed = 42u64;
    let mut wins = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--trace" => traces.push(args.next().unwrap_or_else(|| usage())),
            "--cand" => {
                let spec = args.next().unwrap_or_else(|| usage());
                match parse_spec(&spec) {
                    Ok(c) => cands.push((spec, c)),
                    Err(e) => {
                        eprintln!("{e}");
                        usage()
                    }
                }
            }
            "--seed" => {
                seed = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--peer-cache" => {
                peer_cache_path = Some(PathBuf::from(args.next().unwrap_or_else(|| usage())))
            }
            "--wins" => wins = true,
            "--trace-dir" => dirs.insert(0, PathBuf::from(args.next().unwrap_or_else(|| usage()))),
            _ => usage(),
        }
    }
    if traces.is_empty() {
        traces = ["OLTP", "zipf0.8", "zipf1.0", "zipf1.2"]
            .map(String::from)
            .to_vec();
    }
    let mut peer_cache = read_cache(&peer_cache_path);
    // Per candidate: (cell, candidate %, best peer %, quick_cache %).
    let mut summary: Vec<Vec<(String, f64, f64, f64)>> = vec![Vec::new(); cands.len()];
    // Per candidate: its copies (share, pick), and per cell the periods each copy won.
    type Wins = (Vec<(f64, usize)>, Vec<(String, Vec<u64>)>);
    let mut win_tables: Vec<Wins> = vec![(Vec::new(), Vec::new()); cands.len()];
    for name in &traces {
        let w = match load(name, &dirs) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1)
            }
        };
        let mut peer_rows: Vec<Vec<f64>> = Vec::new();
        for p in PEERS {
            let mut row = Vec::new();
            for &size in &w.sizes {
                let key = (w.name.clone(), size, p.to_owned());
                let r = match peer_cache.get(&key) {
                    Some(r) => *r,
                    None => {
                        let r = simulate(peer(p, size).as_mut(), (w.keys)(size));
                        peer_cache.insert(key, r);
                        if let Some(path) = &peer_cache_path {
                            let mut f = std::fs::OpenOptions::new()
                                .create(true)
                                .append(true)
                                .open(path)
                                .expect("peer cache file");
                            writeln!(f, "{}\t{size}\t{p}\t{}\t{}", w.name, r.hits, r.requests)
                                .expect("write peer cache");
                        }
                        r
                    }
                };
                row.push(r.percent());
            }
            peer_rows.push(row);
        }
        let best: Vec<f64> = (0..w.sizes.len())
            .map(|i| peer_rows.iter().map(|r| r[i]).fold(f64::MIN, f64::max))
            .collect();
        println!("### {}\n", w.name);
        print!("| policy |");
        w.sizes.iter().for_each(|s| print!(" {s} |"));
        println!();
        print!("|---|");
        w.sizes.iter().for_each(|_| print!("---:|"));
        println!();
        for (p, row) in PEERS.iter().zip(&peer_rows) {
            print!("| {p} |");
            for (i, v) in row.iter().enumerate() {
                print!(" {v:.2} ({:+.2}) |", v - best[i]);
            }
            println!();
        }
        for (ci, (spec, cfg)) in cands.iter().enumerate() {
            print!("| {spec} |");
            for (i, &size) in w.sizes.iter().enumerate() {
                let mut model = Adaptive::new(size, *cfg, seed);
                let v = simulate(&mut model, (w.keys)(size)).percent();
                print!(
                    " {v:.2} ({:+.2}) p={:.3}^{:.3} r={} |",
                    v - best[i],
                    model.param(),
                    model.max_param,
                    model.resets
                );
                let cell = if w.sizes.len() > 1 {
                    format!("{} {size}", w.name)
                } else {
                    w.name.clone()
                };
                if wins && !model.mini_wins.is_empty() {
                    win_tables[ci].0 = model.mini_copies();
                    win_tables[ci]
                        .1
                        .push((cell.clone(), model.mini_wins.clone()));
                }
                summary[ci].push((cell, v, best[i], peer_rows[1][i]));
            }
            println!();
            let _ = std::io::stdout().flush();
        }
        println!();
    }
    for ((spec, _), (copies, cells)) in cands.iter().zip(&win_tables) {
        if cells.is_empty() {
            continue;
        }
        println!("### periods won per copy (share/pick), %: {spec}\n");
        print!("| cell | periods |");
        copies
            .iter()
            .for_each(|(sh, pk)| print!(" {:.0}%/{pk} |", sh * 100.0));
        println!();
        print!("|---|---:|");
        copies.iter().for_each(|_| print!("---:|"));
        println!();
        for (cell, w) in cells {
            let total: u64 = w.iter().sum();
            print!("| {cell} | {total} |");
            for &k in w {
                print!(" {:.0} |", 100.0 * k as f64 / total.max(1) as f64);
            }
            println!();
        }
        println!();
    }
    println!("### summary (cells: candidate minus the best peer)\n");
    for ((spec, _), cells) in cands.iter().zip(&summary) {
        let worst =
            cells
                .iter()
                .map(|(c, v, b, _)| (v - b, c))
                .fold(
                    (f64::MAX, None),
                    |acc, (d, c)| {
                        if d < acc.0 { (d, Some(c)) } else { acc }
                    },
                );
        let misses: Vec<String> = cells
            .iter()
            .filter(|(_, v, b, _)| v - b < -0.5)
            .map(|(c, v, b, _)| format!("{c} {:+.2}", v - b))
            .collect();
        let n = cells.len() as f64;
        let avg: f64 = cells.iter().map(|c| c.1).sum::<f64>() / n;
        let qc: f64 = cells.iter().map(|c| c.3).sum::<f64>() / n;
        println!(
            "- {spec}: worst {:+.2} ({}), misses: [{}], average {avg:.2} vs quick_cache {qc:.2} ({:+.2})",
            worst.0,
            worst.1.map_or("-", |c| c.as_str()),
            misses.join(", "),
            avg - qc
        );
    }
}
