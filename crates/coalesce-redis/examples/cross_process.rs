//! Measures what the Redis fill lease buys across OS processes: 8 processes x 200 concurrent
//! callers on the same 50 cold keys, against a backend that counts its calls in Redis (`INCR`),
//! with the lease and without it; plus the lease's own round trip.
//!
//! ```text
//! cargo run --release -p coalesce-redis --example cross_process
//! ```
//!
//! The parent starts a throwaway `redis-server`, then for each mode and round spawns itself 8
//! times (`cross_process child ...`). The children meet at a barrier in Redis, then every caller
//! reads the shared cache (a Redis `GET`); on a miss it goes through a `coalesce::Group` (no
//! lease) or a `DistributedGroup` over `RedisLease` (lease), whose fill `INCR`s the call
//! counter, sleeps the backend's latency, and `SET`s the value. Each child prints its callers'
//! latencies and its lease counters; the parent totals them.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use coalesce::{DistributedGroup, FillLease, Group};
use coalesce_redis::RedisLease;
use coalesce_redis::test_server::RedisServer;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

const PROCESSES: usize = 8;
const CALLERS: usize = 200;
const KEYS: usize = 50;
const ROUNDS: usize = 5;
const BACKEND_LATENCY: Duration = Duration::from_millis(50);
const LEASE_TTL: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    NoLease,
    Lease { poll_ms: u64 },
}

impl Mode {
    fn arg(self) -> String {
        match self {
            Mode::NoLease => "none".into(),
            Mode::Lease { poll_ms } => format!("lease:{poll_ms}"),
        }
    }

    fn parse(arg: &str) -> Mode {
        match arg.strip_prefix("lease:") {
            Some(ms) => Mode::Lease {
                poll_ms: ms.parse().expect("poll ms"),
            },
            None => Mode::NoLease,
        }
    }

    fn label(self) -> String {
        match self {
            Mode::NoLease => "no lease (per-process coalescing only)".into(),
            Mode::Lease { poll_ms } => format!("Redis lease, poll every {poll_ms} ms"),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        let (url, mode, ns) = (&args[2], Mode::parse(&args[3]), &args[4]);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(child(url, mode, ns));
    } else {
        parent();
    }
}

async fn connect(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis")
}

/// One process: meet the others, then 200 concurrent callers, caller `i` asking for key
/// `i % 50`. Prints `LAT` (microseconds per caller) and `STATS` lines.
async fn child(url: &str, mode: Mode, ns: &str) {
    let mut con = connect(url).await;
    let lease: Arc<dyn FillLease> = Arc::new(
        RedisLease::builder(url)
            .key_prefix(format!("{ns}:lease:"))
            .build()
            .unwrap(),
    );
    let distributed: DistributedGroup<usize, String, redis::RedisError> = match mode {
        Mode::Lease { poll_ms } => DistributedGroup::builder(lease.clone())
            .ttl(LEASE_TTL)
            .poll_interval(Duration::from_millis(poll_ms))
            .build(Group::new())
            .unwrap(),
        Mode::NoLease => DistributedGroup::new(Group::new(), lease.clone()),
    };
    let local: Group<usize, String, redis::RedisError> = Group::new();
    // Warm the lease's connection (a process's connection is long-lived in production).
    let _ = lease.try_acquire(&format!("{ns}:warmup"), LEASE_TTL).await;

    let _: i64 = con.incr(format!("{ns}:ready"), 1).await.unwrap();
    while con
        .get::<_, Option<String>>(format!("{ns}:go"))
        .await
        .unwrap()
        .is_none()
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let mut tasks = Vec::with_capacity(CALLERS);
    for caller in 0..CALLERS {
        let (mut con, ns, distributed, local) = (
            con.clone(),
            ns.to_owned(),
            distributed.clone(),
            local.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let key = caller % KEYS;
            let cache_key = format!("{ns}:cache:{key}");
            let hit: Option<String> = con.get(&cache_key).await.unwrap();
            if hit.is_none() {
                let fill = || {
                    let (mut con, ns, cache_key) = (con.clone(), ns.clone(), cache_key.clone());
                    async move {
                        let _: i64 = con.incr(format!("{ns}:calls"), 1).await?;
                        tokio::time::sleep(BACKEND_LATENCY).await;
                        let value = format!("value-{key}");
                        let _: () = con.set(&cache_key, &value).await?;
                        Ok(value)
                    }
                };
                let value = match mode {
                    Mode::NoLease => local.run(key, fill).await,
                    Mode::Lease { .. } => {
                        let recheck = || {
                            let (mut con, cache_key) = (con.clone(), cache_key.clone());
                            async move {
                                con.get::<_, Option<String>>(&cache_key)
                                    .await
                                    .ok()
                                    .flatten()
                            }
                        };
                        distributed.run(key, recheck, fill).await
                    }
                };
                value.expect("a value");
            }
            started.elapsed()
        }));
    }
    let mut latencies = Vec::with_capacity(CALLERS);
    for task in tasks {
        latencies.push(task.await.unwrap().as_micros().to_string());
    }
    println!("LAT {}", latencies.join(","));
    let s = distributed.stats();
    println!(
        "STATS {} {} {} {} {}",
        s.granted, s.held_elsewhere, s.found_by_recheck, s.filled_after_wait, s.failed_open
    );
}

#[derive(Default)]
struct Totals {
    calls: Vec<u64>,
    latencies_us: Vec<u64>,
    stats: [u64; 5],
    wall: Duration,
}

fn parent() {
    let server =
        RedisServer::start().expect("a redis-server binary (apt-get install -y redis-server)");
    let url = server.url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut con = runtime.block_on(connect(&url));
    let exe = std::env::current_exe().unwrap();

    println!(
        "{PROCESSES} processes x {CALLERS} concurrent callers on {KEYS} cold keys (caller i asks key i % {KEYS}), \
         backend latency {BACKEND_LATENCY:?}, lease ttl {LEASE_TTL:?}, {ROUNDS} rounds per mode\n"
    );
    let modes = [
        Mode::NoLease,
        Mode::Lease { poll_ms: 100 },
        Mode::Lease { poll_ms: 20 },
    ];
    let mut results = Vec::new();
    for mode in modes {
        let mut totals = Totals::default();
        for round in 0..ROUNDS {
            let ns = format!("bench:{}:{round}", mode.arg().replace(':', "-"));
            let children: Vec<_> = (0..PROCESSES)
                .map(|_| {
                    Command::new(&exe)
                        .args(["child", &url, &mode.arg(), &ns])
                        .stdout(Stdio::piped())
                        .spawn()
                        .expect("spawn a child")
                })
                .collect();
            runtime.block_on(async {
                while con
                    .get::<_, Option<usize>>(format!("{ns}:ready"))
                    .await
                    .unwrap()
                    .unwrap_or(0)
                    < PROCESSES
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let _: () = con.set(format!("{ns}:go"), 1).await.unwrap();
            });
            let started = Instant::now();
            for child in children {
                let out = child.wait_with_output().unwrap();
                assert!(out.status.success(), "a child failed");
                for line in String::from_utf8(out.stdout).unwrap().lines() {
                    if let Some(list) = line.strip_prefix("LAT ") {
                        totals
                            .latencies_us
                            .extend(list.split(',').map(|v| v.parse::<u64>().unwrap()));
                    } else if let Some(stats) = line.strip_prefix("STATS ") {
                        for (slot, v) in totals.stats.iter_mut().zip(stats.split(' ')) {
                            *slot += v.parse::<u64>().unwrap();
                        }
                    }
                }
            }
            totals.wall += started.elapsed();
            let calls: u64 = runtime.block_on(async {
                con.get::<_, Option<u64>>(format!("{ns}:calls"))
                    .await
                    .unwrap()
                    .unwrap_or(0)
            });
            totals.calls.push(calls);
        }
        results.push((mode, totals));
    }

    println!(
        "| mode | backend calls per round (50 keys) | calls per key | caller p50 | caller p99 | caller max |"
    );
    println!("|---|---|---|---|---|---|");
    for (mode, totals) in &mut results {
        totals.latencies_us.sort_unstable();
        let pct = |p: f64| {
            let v = &totals.latencies_us;
            v[((v.len() as f64 - 1.0) * p).round() as usize] as f64 / 1000.0
        };
        let mean_calls = totals.calls.iter().sum::<u64>() as f64 / totals.calls.len() as f64;
        println!(
            "| {} | {:?} | {:.2} | {:.1} ms | {:.1} ms | {:.1} ms |",
            mode.label(),
            totals.calls,
            mean_calls / KEYS as f64,
            pct(0.50),
            pct(0.99),
            pct(1.0),
        );
    }
    println!();
    for (mode, totals) in &results {
        if let Mode::Lease { .. } = mode {
            let [granted, held, found, after_wait, failed_open] = totals.stats;
            println!(
                "{}: over {ROUNDS} rounds, leaders granted {granted}, found it held {held}, \
                 found the value on re-check {found}, filled after waiting a ttl {after_wait}, failed open {failed_open}",
                mode.label()
            );
        }
    }

    // The lease's own round trip, sequential, on a warm connection.
    let lease = RedisLease::builder(&url)
        .key_prefix("bench:rtt:")
        .build()
        .unwrap();
    let (acquire, release, get) = runtime.block_on(async {
        let _ = lease.try_acquire("warmup", LEASE_TTL).await;
        let (mut acquire, mut release, mut get) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..2000 {
            let key = format!("k{i}");
            let t = Instant::now();
            let _: Option<String> = con.get(format!("bench:rtt:cache:{i}")).await.unwrap();
            get.push(t.elapsed());
            let t = Instant::now();
            let granted = lease.try_acquire(&key, LEASE_TTL).await.unwrap();
            acquire.push(t.elapsed());
            let coalesce::Acquire::Acquired(token) = granted else {
                panic!("fresh key held")
            };
            let t = Instant::now();
            assert!(lease.release(&key, &token).await.unwrap());
            release.push(t.elapsed());
        }
        (acquire, release, get)
    });
    println!("\nround trips on loopback, 2000 sequential calls each, warm connection:");
    for (name, mut v) in [
        ("GET (shared cache read, for scale)", get),
        ("try_acquire (SET NX PX)", acquire),
        ("release (compare-and-delete script)", release),
    ] {
        v.sort_unstable();
        let at = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e6;
        println!("  {name}: p50 {:.0} us, p99 {:.0} us", at(0.5), at(0.99));
    }
    drop(server);
}
