//! Measures what `ttl_lru::TieredCache` over `RedisSecondLevel` buys a fleet (issue 18):
//! 8 processes run a zipf workload over 10,000 keys against a 50 ms origin, L1 only (each
//! process's own `Cache` read-through) and tiered (L1 + Redis L2 + the Redis fill lease); then
//! one process invalidates keys one by one, each call returning once every process has
//! acknowledged dropping its copy; and, in one process, the cost of an L1 hit with and without
//! the tier.
//!
//! ```text
//! cargo run --release -p coalesce-redis --example fleet_tier
//! ```
//!
//! Origin fetches are counted in Redis per (key, ttl window of the wall clock), so "fetches per
//! key per ttl window" is fetches / distinct (key, window) pairs fetched: 1.0 is one fetch per
//! fleet, 8.0 one per process.

use std::hint::black_box;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use coalesce::DistributedGroup;
use coalesce_redis::test_server::RedisServer;
use coalesce_redis::{RedisLease, RedisSecondLevel};
use redis::AsyncCommands;
use ttl_lru::second_level::U64Codec;
use ttl_lru::{Cache, SecondLevel, TieredCache};

const PROCESSES: usize = 8;
const KEYS: u64 = 10_000;
const WORKERS: usize = 64;
const RUN: Duration = Duration::from_secs(4);
const TTL: Duration = Duration::from_secs(1);
const ORIGIN_LATENCY: Duration = Duration::from_millis(50);
const INVALIDATIONS: usize = 200;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        let (url, tiered, ns, index) = (
            &args[2],
            args[3] == "tiered",
            &args[4],
            args[5].parse::<usize>().expect("index"),
        );
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(child(url, tiered, ns, index));
    } else {
        parent();
    }
}

/// A zipf(1.0) sampler over `KEYS` keys: inverse CDF on precomputed cumulative weights, fed by
/// xorshift (no dependency on a random-number crate).
struct Zipf {
    cdf: Vec<f64>,
    state: u64,
}

impl Zipf {
    fn new(seed: u64) -> Self {
        let mut total = 0.0;
        let cdf = (1..=KEYS)
            .map(|k| {
                total += 1.0 / k as f64;
                total
            })
            .collect::<Vec<_>>();
        let cdf = cdf.iter().map(|c| c / total).collect();
        Zipf {
            cdf,
            state: seed | 1,
        }
    }

    fn next(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let u = (self.state >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u) as u64
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

async fn wait_for(con: &mut redis::aio::MultiplexedConnection, key: &str, at_least: i64) {
    loop {
        let n: Option<i64> = con.get(key).await.unwrap();
        if n.unwrap_or(0) >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn child(url: &str, tiered: bool, ns: &str, index: usize) {
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let cache: Cache<u64, u64> = Cache::new(KEYS * 2);
    let l2 = Arc::new(
        RedisSecondLevel::builder(url)
            .key_prefix(format!("{ns}:l2:"))
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
    .lease(
        DistributedGroup::builder(Arc::new(lease))
            .ttl(Duration::from_secs(5))
            .poll_interval(Duration::from_millis(5)),
    )
    .build()
    .unwrap();
    if tiered {
        l2.wait_subscribed().await;
    }
    let _: i64 = con.incr(format!("{ns}:ready"), 1).await.unwrap();
    wait_for(&mut con, &format!("{ns}:ready"), PROCESSES as i64).await;

    let deadline = Instant::now() + RUN;
    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let (tier, cache, con, ns) = (tier.clone(), cache.clone(), con.clone(), ns.to_owned());
        let seed = (index * WORKERS + worker) as u64 * 0x9E37_79B9_7F4A_7C15 + 1;
        tasks.push(tokio::spawn(async move {
            let mut zipf = Zipf::new(seed);
            let mut errors = 0u64;
            while Instant::now() < deadline {
                let key = zipf.next();
                let origin = {
                    let (mut con, ns) = (con.clone(), ns.clone());
                    move || async move {
                        let window = now_ms() / TTL.as_millis() as u64;
                        let _: i64 = con.incr(format!("{ns}:fetch:{key}:{window}"), 1).await?;
                        tokio::time::sleep(ORIGIN_LATENCY).await;
                        Ok::<_, redis::RedisError>(key)
                    }
                };
                let ok = if tiered {
                    tier.get_or_try_insert(key, |_| TTL, origin).await.is_ok()
                } else {
                    cache.get_or_try_insert(key, |_| TTL, origin).await.is_ok()
                };
                errors += u64::from(!ok);
            }
            errors
        }));
    }
    let mut errors = 0;
    for task in tasks {
        errors += task.await.unwrap();
    }
    println!("ERRORS {errors}");

    if tiered {
        if index == 0 {
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
            wait_for(&mut con, &format!("{ns}:inv_done"), 1).await;
        }
    }
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
        let started = Instant::now();
        for i in 0..n {
            black_box(
                cache
                    .get_or_try_insert(i & 511, |_| TTL, fill)
                    .await
                    .unwrap(),
            );
        }
        let plain = started.elapsed().as_nanos() as f64 / n as f64;
        let started = Instant::now();
        for i in 0..n {
            black_box(
                tier.get_or_try_insert(i & 511, |_| TTL, fill)
                    .await
                    .unwrap(),
            );
        }
        let tiered = started.elapsed().as_nanos() as f64 / n as f64;
        (plain, tiered)
    })
}

fn parent() {
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let exe = std::env::current_exe().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "{PROCESSES} processes x {WORKERS} workers, zipf over {KEYS} keys, ttl {TTL:?}, origin {ORIGIN_LATENCY:?}, {RUN:?}\n"
    );
    println!(
        "| mode | origin fetches | (key, window) pairs | fetches per key per window | caller errors |"
    );
    println!("|---|---|---|---|---|");
    for mode in ["l1-only", "tiered"] {
        let ns = format!("run-{mode}");
        let children: Vec<_> = (0..PROCESSES)
            .map(|i| {
                Command::new(&exe)
                    .args(["child", &url, mode, &ns, &i.to_string()])
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("spawn a child")
            })
            .collect();
        let mut errors = 0u64;
        let mut inv = None;
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success());
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.first().copied() {
                    Some("ERRORS") => errors += words[1].parse::<u64>().unwrap(),
                    Some("INV") => {
                        inv = Some((
                            words[1].to_owned(),
                            words[2].to_owned(),
                            words[3].to_owned(),
                        ))
                    }
                    _ => {}
                }
            }
        }
        let (pairs, fetches) = runtime.block_on(async {
            let client = redis::Client::open(url.as_str()).unwrap();
            let mut con = client.get_multiplexed_async_connection().await.unwrap();
            let keys: Vec<String> = con.keys(format!("{ns}:fetch:*")).await.unwrap();
            let mut total = 0u64;
            for key in &keys {
                let n: u64 = con.get(key).await.unwrap();
                total += n;
            }
            (keys.len() as u64, total)
        });
        println!(
            "| {mode} | {fetches} | {pairs} | {:.2} | {errors} |",
            fetches as f64 / pairs.max(1) as f64
        );
        if let Some((p50, p99, acked)) = inv {
            println!(
                "\ninvalidate until all {PROCESSES} processes dropped their copy ({INVALIDATIONS} keys, fewest acks {acked}): p50 {p50} us, p99 {p99} us\n"
            );
        }
    }
    let (plain, tiered) = hit_cost();
    println!("L1 hit through read-through: Cache {plain:.1} ns, TieredCache {tiered:.1} ns");
}
