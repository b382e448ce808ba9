//! Measures what `ttl_lru::TieredCache` over `RedisSecondLevel` buys a fleet (issue 18), with
//! 8 OS processes and Redis on loopback:
//! - a zipf workload over 10,000 keys against a 50 ms origin, L1 only (each process's own
//!   `Cache` read-through) and tiered (L1 + Redis L2 + the Redis fill lease): origin fetches
//!   per (key, ttl window), caller errors, latency;
//! - invalidation: one process invalidates keys one by one, each call returning once every
//!   process has acknowledged dropping its copy (so "until all 8 miss");
//! - cold keys hit by every process at the same instant: the latency of the callers in the
//!   process that filled vs in the processes that waited for it, with fill announcements
//!   (early wake) and without them (polling only, 20 ms polls);
//! - the tiered zipf run again with Redis stopped (killed, then restarted empty) for 5 s
//!   mid-run: caller errors, latency during the outage, fills per process during it;
//! - in one process, the cost of an L1 hit with and without the tier.
//!
//! Each of the 64 workers per process pauses 1 ms between calls (a request rate rather than a
//! busy loop, so the 8 processes do not starve one another of CPU on a small machine).
//!
//! ```text
//! cargo run --release -p coalesce-redis --example fleet_tier
//! ```
//!
//! Origin fetches are counted by each process per (key, ttl window of the wall clock) and
//! merged, so "fetches per key per ttl window" is fetches / distinct (key, window) pairs: 1.0 is
//! one fetch per fleet, 8.0 one per process.

use std::collections::HashMap;
use std::hint::black_box;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use coalesce::DistributedGroup;
use coalesce_redis::test_server::RedisServer;
use coalesce_redis::{RedisLease, RedisSecondLevel};
use redis::AsyncCommands;
use ttl_lru::second_level::{TierSource, U64Codec};
use ttl_lru::{Cache, SecondLevel, TieredCache};

const PROCESSES: usize = 8;
const KEYS: u64 = 10_000;
const WORKERS: usize = 64;
const RUN: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(1);
const ORIGIN_LATENCY: Duration = Duration::from_millis(50);
/// Each worker's pause between calls (about 1,000 calls per second per worker).
const THINK: Duration = Duration::from_millis(1);
const POLL: Duration = Duration::from_millis(20);
const SOFT_TIMEOUT: Duration = Duration::from_millis(50);
const INVALIDATIONS: usize = 200;
const COLD_ROUNDS: u64 = 40;
const COLD_CALLERS: usize = 8;
const COLD_SPACING_MS: u64 = 250;
/// The outage starts this long after the workers start, and lasts `OUTAGE`.
const OUTAGE_AFTER_MS: u64 = 2_500;
const OUTAGE: Duration = Duration::from_secs(5);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        let run = ChildRun {
            url: args[2].clone(),
            mode: args[3].clone(),
            ns: args[4].clone(),
            index: args[5].parse().expect("index"),
            start_ms: args[6].parse().expect("start"),
        };
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(child(run));
    } else {
        parent();
    }
}

struct ChildRun {
    url: String,
    mode: String,
    ns: String,
    index: usize,
    /// Wall-clock ms at which the workload starts (the same instant in every process).
    start_ms: u64,
}

/// A zipf(1.0) sampler over `KEYS` keys: inverse CDF on precomputed cumulative weights, fed by
/// xorshift (no dependency on a random-number crate).
struct Zipf {
    cdf: Arc<Vec<f64>>,
    state: u64,
}

fn zipf_cdf() -> Arc<Vec<f64>> {
    let mut total = 0.0;
    let cdf = (1..=KEYS)
        .map(|k| {
            total += 1.0 / k as f64;
            total
        })
        .collect::<Vec<_>>();
    Arc::new(cdf.iter().map(|c| c / total).collect())
}

impl Zipf {
    fn next(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let u = (self.state >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u) as u64
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn now_ms() -> u64 {
    now_us() / 1000
}

async fn sleep_until_ms(at_ms: u64) {
    let now = now_ms();
    if at_ms > now {
        tokio::time::sleep(Duration::from_millis(at_ms - now)).await;
    }
}

/// A log-linear latency histogram in microseconds (16 sub-buckets per power of two: about 6%
/// resolution), cheap enough to record every call.
#[derive(Clone, Default)]
struct Histogram {
    counts: HashMap<u32, u64>,
}

impl Histogram {
    fn bucket(us: u64) -> u32 {
        if us < 16 {
            return us as u32;
        }
        let exp = 63 - us.leading_zeros();
        let sub = (us >> (exp - 4)) & 15;
        exp * 16 + sub as u32
    }

    fn low(bucket: u32) -> u64 {
        if bucket < 16 {
            return u64::from(bucket);
        }
        let (exp, sub) = (bucket / 16, u64::from(bucket % 16));
        (16 + sub) << (exp - 4)
    }

    fn record(&mut self, us: u64) {
        *self.counts.entry(Self::bucket(us)).or_default() += 1;
    }

    fn merge(&mut self, bucket: u32, n: u64) {
        *self.counts.entry(bucket).or_default() += n;
    }

    fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    fn quantile(&self, q: f64) -> f64 {
        let total = self.total();
        if total == 0 {
            return f64::NAN;
        }
        let target = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut buckets: Vec<_> = self.counts.iter().collect();
        buckets.sort();
        let mut seen = 0;
        for (bucket, n) in buckets {
            seen += n;
            if seen >= target {
                return Self::low(*bucket) as f64 / 1000.0;
            }
        }
        f64::NAN
    }
}

/// The phases of a run, for the outage run: before, during and after Redis is down.
fn phase(run: &ChildRun, at_ms: u64) -> &'static str {
    if run.mode != "outage" {
        return "all";
    }
    let down = run.start_ms + OUTAGE_AFTER_MS;
    let up = down + OUTAGE.as_millis() as u64;
    if at_ms < down {
        "before"
    } else if at_ms < up {
        "during"
    } else {
        "after"
    }
}

async fn child(run: ChildRun) {
    let (url, ns) = (run.url.clone(), run.ns.clone());
    let (url, ns) = (url.as_str(), ns.as_str());
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let cache: Cache<u64, u64> = Cache::new(KEYS * 2);
    let l2 = Arc::new(
        RedisSecondLevel::builder(url)
            .key_prefix(format!("{ns}:l2:"))
            .announce_fills(run.mode != "cold-poll")
            .build()
            .unwrap(),
    );
    let lease = RedisLease::builder(url)
        .key_prefix(format!("{ns}:lease:"))
        .build()
        .unwrap();
    let tier = TieredCache::builder(
        cache.clone(),
        l2.clone() as Arc<dyn SecondLevel>,
        U64Codec,
        U64Codec,
    )
    .l2_soft_timeout(SOFT_TIMEOUT)
    .lease(
        DistributedGroup::builder(Arc::new(lease))
            .ttl(Duration::from_secs(5))
            .poll_interval(POLL),
    )
    .build()
    .unwrap();
    let tiered = run.mode != "l1-only";
    if tiered {
        l2.wait_subscribed().await;
    }
    let _: i64 = con.incr(format!("{ns}:ready"), 1).await.unwrap();
    drop(con);
    sleep_until_ms(run.start_ms).await;

    if run.mode.starts_with("cold") {
        cold(&run, &tier).await;
        return;
    }

    // Fetches by (key, window), and by phase (the outage run's fills per process).
    let fetches = Arc::new(parking_lot::Mutex::new(HashMap::<(u64, u64), u64>::new()));
    let fills_by_phase = Arc::new(parking_lot::Mutex::new(HashMap::<&str, u64>::new()));
    let deadline = Instant::now() + RUN;
    let run = Arc::new(run);
    let cdf = zipf_cdf();
    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let (tier, cache, run) = (tier.clone(), cache.clone(), run.clone());
        let (fetches, fills_by_phase) = (fetches.clone(), fills_by_phase.clone());
        let seed = (run.index * WORKERS + worker) as u64 * 0x9E37_79B9_7F4A_7C15 + 1;
        let mut zipf = Zipf {
            cdf: cdf.clone(),
            state: seed | 1,
        };
        tasks.push(tokio::spawn(async move {
            let mut hist: HashMap<&str, Histogram> = HashMap::new();
            let mut errors: HashMap<&str, u64> = HashMap::new();
            while Instant::now() < deadline {
                let key = zipf.next();
                let origin = {
                    let (fetches, fills_by_phase, run) =
                        (fetches.clone(), fills_by_phase.clone(), run.clone());
                    move || async move {
                        let at = now_ms();
                        *fetches
                            .lock()
                            .entry((key, at / TTL.as_millis() as u64))
                            .or_default() += 1;
                        *fills_by_phase.lock().entry(phase(&run, at)).or_default() += 1;
                        tokio::time::sleep(ORIGIN_LATENCY).await;
                        Ok::<_, std::io::Error>(key)
                    }
                };
                let started = now_us();
                let ok = if tiered {
                    tier.get_or_try_insert(key, |_| TTL, origin).await.is_ok()
                } else {
                    cache.get_or_try_insert(key, |_| TTL, origin).await.is_ok()
                };
                let p = phase(&run, started / 1000);
                hist.entry(p).or_default().record(now_us() - started);
                *errors.entry(p).or_default() += u64::from(!ok);
                // A request rate, not a busy loop: the fleet shares a few cores here.
                tokio::time::sleep(THINK).await;
            }
            (hist, errors)
        }));
    }
    let mut hist: HashMap<&str, Histogram> = HashMap::new();
    for task in tasks {
        let (h, errors) = task.await.unwrap();
        for (p, h) in h {
            let into = hist.entry(p).or_default();
            for (bucket, n) in h.counts {
                into.merge(bucket, n);
            }
        }
        for (p, n) in errors {
            println!("ERRORS {p} {n}");
        }
    }
    for (p, h) in &hist {
        for (bucket, n) in &h.counts {
            println!("H {p} {bucket} {n}");
        }
    }
    for ((key, window), n) in fetches.lock().iter() {
        println!("F {key} {window} {n}");
    }
    for (p, n) in fills_by_phase.lock().iter() {
        println!("FILLS {p} {} {n}", run.index);
    }

    if run.mode == "tiered" {
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        if run.index == 0 {
            let mut took = Vec::with_capacity(INVALIDATIONS);
            let mut min_acked = u64::MAX;
            for key in 0..INVALIDATIONS as u64 {
                let started = Instant::now();
                let done = tier.invalidate(&key).await.expect("invalidate");
                took.push(started.elapsed());
                min_acked = min_acked.min(done.acked);
            }
            took.sort();
            println!(
                "INV {} {} {min_acked}",
                took[took.len() / 2].as_micros(),
                took[took.len() * 99 / 100].as_micros()
            );
            let _: () = con.set(format!("{ns}:inv_done"), 1).await.unwrap();
        } else {
            // Stay subscribed (and acknowledging) until the invalidations are done.
            loop {
                let done: Option<i64> = con.get(format!("{ns}:inv_done")).await.unwrap();
                if done.is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

/// Every round, `COLD_CALLERS` callers in every process read one cold key at the same
/// wall-clock instant; each caller's latency is measured from that instant and reported as the
/// filler's (its process ran the fill) or a waiter's (another process did).
async fn cold(run: &ChildRun, tier: &TieredCache<u64, u64>) {
    for round in 0..COLD_ROUNDS {
        let at_ms = run.start_ms + 500 + round * COLD_SPACING_MS;
        sleep_until_ms(at_ms).await;
        let key = 1_000_000 + round;
        let callers: Vec<_> = (0..COLD_CALLERS)
            .map(|_| {
                let tier = tier.clone();
                tokio::spawn(async move {
                    let got = tier
                        .get_or_try_insert(
                            key,
                            |_| Duration::from_secs(60),
                            || async move {
                                tokio::time::sleep(ORIGIN_LATENCY).await;
                                Ok::<_, std::io::Error>(key)
                            },
                        )
                        .await
                        .unwrap();
                    (now_us() - at_ms * 1000, got.source)
                })
            })
            .collect();
        let mut latencies = Vec::new();
        let mut filled = false;
        for caller in callers {
            let (us, source) = caller.await.unwrap();
            filled |= source == TierSource::Filled;
            latencies.push(us);
        }
        let role = if filled { "filler" } else { "waiter" };
        for us in latencies {
            println!("COLD {role} {us}");
        }
    }
    let stats = tier.stats();
    let lease = stats.lease.unwrap_or_default();
    println!(
        "COLDSTATS {} {} {}",
        stats.fill_wakes, lease.woken, lease.polled
    );
}

fn hit_cost() -> (f64, f64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let cache: Cache<u64, u64> = Cache::new(1024);
        let tier = TieredCache::builder(
            cache.clone(),
            Arc::new(ttl_lru::second_level::MemorySecondLevel::new()),
            U64Codec,
            U64Codec,
        )
        .build()
        .unwrap();
        for k in 0..512 {
            cache.insert(k, k, Duration::from_secs(3600)).unwrap();
        }
        let n = 2_000_000u64;
        let fill = || async { Ok::<_, std::io::Error>(0) };
        let mut plain = Vec::new();
        let mut tiered = Vec::new();
        // Alternate the two, five times each, and keep the best of each (noise only adds).
        for _ in 0..5 {
            let started = Instant::now();
            for i in 0..n {
                black_box(
                    cache
                        .get_or_try_insert(i & 511, |_| TTL, fill)
                        .await
                        .unwrap(),
                );
            }
            plain.push(started.elapsed().as_nanos() as f64 / n as f64);
            let started = Instant::now();
            for i in 0..n {
                black_box(
                    tier.get_or_try_insert(i & 511, |_| TTL, fill)
                        .await
                        .unwrap(),
                );
            }
            tiered.push(started.elapsed().as_nanos() as f64 / n as f64);
        }
        let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        (best(&plain), best(&tiered))
    })
}

/// What the children of one mode printed, merged.
#[derive(Default)]
struct Merged {
    errors: HashMap<String, u64>,
    hist: HashMap<String, Histogram>,
    fetches: HashMap<(u64, u64), u64>,
    fills: HashMap<String, Vec<u64>>,
    inv: Option<(String, String, String)>,
    cold: HashMap<String, Vec<u64>>,
    cold_stats: [u64; 3],
}

fn run_mode(server: &mut RedisServer, mode: &str) -> Merged {
    let url = server.url();
    let exe = std::env::current_exe().unwrap();
    let ns = format!("run-{mode}");
    // Time to start and subscribe before the common start instant.
    let start_ms = now_ms() + 3_000;
    let children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            Command::new(&exe)
                .args([
                    "child",
                    &url,
                    mode,
                    &ns,
                    &i.to_string(),
                    &start_ms.to_string(),
                ])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a child")
        })
        .collect();
    if mode == "outage" {
        let down_at = start_ms + OUTAGE_AFTER_MS;
        std::thread::sleep(Duration::from_millis(down_at.saturating_sub(now_ms())));
        server.kill();
        std::thread::sleep(OUTAGE);
        server.restart().expect("restart redis-server");
    }
    let mut merged = Merged::default();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a child failed");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let num = |i: usize| w[i].parse::<u64>().unwrap();
            match w.first().copied() {
                Some("ERRORS") => *merged.errors.entry(w[1].into()).or_default() += num(2),
                Some("H") => merged
                    .hist
                    .entry(w[1].into())
                    .or_default()
                    .merge(w[2].parse().unwrap(), num(3)),
                Some("F") => *merged.fetches.entry((num(1), num(2))).or_default() += num(3),
                Some("FILLS") => merged.fills.entry(w[1].into()).or_default().push(num(3)),
                Some("INV") => merged.inv = Some((w[1].into(), w[2].into(), w[3].into())),
                Some("COLD") => merged.cold.entry(w[1].into()).or_default().push(num(2)),
                Some("COLDSTATS") => {
                    for i in 0..3 {
                        merged.cold_stats[i] += num(i + 1);
                    }
                }
                _ => {}
            }
        }
    }
    merged
}

fn p50(v: &mut [u64]) -> f64 {
    v.sort_unstable();
    v.get(v.len() / 2)
        .map_or(f64::NAN, |us| *us as f64 / 1000.0)
}

fn parent() {
    let mut server = RedisServer::start().expect("start redis-server");
    println!(
        "{PROCESSES} processes x {WORKERS} workers, zipf over {KEYS} keys, ttl {TTL:?}, origin {ORIGIN_LATENCY:?}, {RUN:?} per run, lease polls every {POLL:?}, soft L2 timeout {SOFT_TIMEOUT:?}\n"
    );
    println!(
        "| mode | origin fetches | (key, window) pairs | fetches per key per window | caller errors | p50 ms | p99 ms | p99.9 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut outage = None;
    let mut l1_fills_per_process_s = 0.0;
    for mode in ["l1-only", "tiered", "outage"] {
        let m = run_mode(&mut server, mode);
        let fetches: u64 = m.fetches.values().sum();
        let pairs = m.fetches.len() as u64;
        let errors: u64 = m.errors.values().sum();
        let mut all = Histogram::default();
        for h in m.hist.values() {
            for (b, n) in &h.counts {
                all.merge(*b, *n);
            }
        }
        println!(
            "| {mode} | {fetches} | {pairs} | {:.2} | {errors} | {:.3} | {:.3} | {:.3} |",
            fetches as f64 / pairs.max(1) as f64,
            all.quantile(0.5),
            all.quantile(0.99),
            all.quantile(0.999),
        );
        if mode == "l1-only" {
            l1_fills_per_process_s = fetches as f64 / PROCESSES as f64 / RUN.as_secs_f64();
        }
        if let Some((p50, p99, acked)) = &m.inv {
            println!(
                "\ninvalidate until all {PROCESSES} processes dropped their copy ({INVALIDATIONS} keys, fewest acks {acked}): p50 {p50} us, p99 {p99} us\n"
            );
        }
        if mode == "outage" {
            outage = Some(m);
        }
    }
    if let Some(m) = outage {
        println!(
            "\nRedis killed {OUTAGE_AFTER_MS} ms into the outage run, restarted (empty) {OUTAGE:?} later:\n"
        );
        println!(
            "| phase | calls | caller errors | p50 ms | p99 ms | p99.9 ms | max bucket ms | origin fills per process |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for p in ["before", "during", "after"] {
            let h = m.hist.get(p).cloned().unwrap_or_default();
            let mut fills = m.fills.get(p).cloned().unwrap_or_default();
            fills.sort_unstable();
            println!(
                "| {p} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {fills:?} |",
                h.total(),
                m.errors.get(p).copied().unwrap_or(0),
                h.quantile(0.5),
                h.quantile(0.99),
                h.quantile(0.999),
                h.quantile(1.0),
            );
        }
        println!(
            "\nL1-only fills per process over {OUTAGE:?} at the L1-only run's rate: {:.0}",
            l1_fills_per_process_s * OUTAGE.as_secs_f64()
        );
    }
    println!(
        "\ncold keys ({COLD_ROUNDS} rounds x {PROCESSES} processes x {COLD_CALLERS} callers, {ORIGIN_LATENCY:?} origin, polls every {POLL:?}), latency from the common start:\n"
    );
    println!(
        "| announcements | filler's callers p50 ms | waiting processes' callers p50 ms | difference ms | fill wakes | woken re-checks | polled re-checks |"
    );
    println!("|---|---|---|---|---|---|---|");
    for mode in ["cold-wake", "cold-poll"] {
        let mut m = run_mode(&mut server, mode);
        let filler = p50(m.cold.entry("filler".into()).or_default());
        let waiter = p50(m.cold.entry("waiter".into()).or_default());
        let [wakes, woken, polled] = m.cold_stats;
        println!(
            "| {} | {filler:.2} | {waiter:.2} | {:.2} | {wakes} | {woken} | {polled} |",
            if mode == "cold-wake" {
                "on (early wake)"
            } else {
                "off (polling only)"
            },
            waiter - filler
        );
    }
    let (plain, tiered) = hit_cost();
    println!(
        "\nL1 hit through read-through (best of 5 x 2M): Cache {plain:.1} ns, TieredCache {tiered:.1} ns"
    );
}
