//! A cache stampede against a slow backend, with a share of the callers cancelled mid-wait.
//!
//! Run with `cargo run --release --example stampede`. Thousands of requests over a few hundred
//! keys hit a backend that takes 50 ms per call; one caller in five gives up after a random
//! delay (its future is dropped, as a timeout or a disconnected client would). Four strategies
//! are compared:
//!
//! - `no coalescing`: every request calls the backend.
//! - `naive marker`: the classic bug (pingora `RTCache`, issue 931): publish "fill in progress",
//!   await the backend, clear the marker afterwards. A cancelled leader never clears it, so its
//!   followers wait until our 2 s watchdog calls them hung.
//! - `coalesce::run`: a cancelled leader hands the fill to the next follower.
//! - `coalesce::run_detached`: the fill runs on its own task and survives its caller.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use coalesce::Group;
use tokio::sync::Notify;
use tokio::time::{Instant, sleep, timeout};

const REQUESTS: usize = 5_000;
const KEYS: u64 = 300;
const ARRIVAL_SPREAD_MS: u64 = 1_000;
const BACKEND_LATENCY: Duration = Duration::from_millis(50);
const CANCEL_ONE_IN: u64 = 5;
const HANG_WATCHDOG: Duration = Duration::from_secs(2);

/// The slow backend: counts its calls.
#[derive(Clone, Default)]
struct Backend {
    calls: Arc<AtomicU64>,
}

impl Backend {
    async fn fetch(&self, key: u64) -> Result<u64, String> {
        self.calls.fetch_add(1, Relaxed);
        sleep(BACKEND_LATENCY).await;
        Ok(key * 2)
    }
}

/// The buggy single-flight most caches start with: the marker is cleared after the await.
#[derive(Clone, Default)]
struct NaiveMarker {
    flights: Arc<parking_lot::Mutex<HashMap<u64, Arc<NaiveFlight>>>>,
}

/// The published marker: the value once there, and a notification for the waiters.
#[derive(Default)]
struct NaiveFlight {
    value: parking_lot::Mutex<Option<u64>>,
    filled: Notify,
}

impl NaiveMarker {
    async fn get(&self, key: u64, backend: &Backend) -> Result<u64, String> {
        let (flight, leader) = {
            let mut map = self.flights.lock();
            match map.get(&key) {
                Some(f) => (f.clone(), false),
                None => {
                    let f = Arc::new(NaiveFlight::default());
                    map.insert(key, f.clone());
                    (f, true)
                }
            }
        };
        if leader {
            let value = backend.fetch(key).await?; // <- cancelled here: the marker leaks
            *flight.value.lock() = Some(value);
            self.flights.lock().remove(&key);
            flight.filled.notify_waiters();
            return Ok(value);
        }
        loop {
            let notified = flight.filled.notified();
            if let Some(v) = *flight.value.lock() {
                return Ok(v);
            }
            notified.await;
        }
    }
}

#[derive(Default)]
struct Tally {
    completed: u64,
    cancelled: u64,
    hung: u64,
    latencies_us: Vec<u64>,
}

/// A tiny deterministic generator, so every strategy sees the same arrivals and cancellations.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

async fn stampede<F, Fut>(request: F) -> Tally
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<u64, String>> + Send,
{
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut tasks = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        let key = rng.next() % KEYS;
        let start_after = Duration::from_millis(rng.next() % ARRIVAL_SPREAD_MS);
        let cancel_after = rng
            .next()
            .is_multiple_of(CANCEL_ONE_IN)
            .then(|| Duration::from_millis(rng.next() % (2 * BACKEND_LATENCY.as_millis() as u64)));
        let request = request.clone();
        tasks.push(tokio::spawn(async move {
            sleep(start_after).await;
            let started = Instant::now();
            let limit = cancel_after.unwrap_or(HANG_WATCHDOG);
            match timeout(limit, request(key)).await {
                Ok(Ok(v)) => {
                    assert_eq!(v, key * 2, "every caller gets its key's value");
                    Outcome::Completed(started.elapsed())
                }
                Ok(Err(e)) => panic!("backend error: {e}"),
                Err(_) if cancel_after.is_some() => Outcome::Cancelled,
                Err(_) => Outcome::Hung,
            }
        }));
    }
    let mut tally = Tally::default();
    for task in tasks {
        match task.await.expect("request task panicked") {
            Outcome::Completed(latency) => {
                tally.completed += 1;
                tally.latencies_us.push(latency.as_micros() as u64);
            }
            Outcome::Cancelled => tally.cancelled += 1,
            Outcome::Hung => tally.hung += 1,
        }
    }
    tally.latencies_us.sort_unstable();
    tally
}

enum Outcome {
    Completed(Duration),
    Cancelled,
    Hung,
}

fn percentile(sorted: &[u64], p: f64) -> String {
    if sorted.is_empty() {
        return "-".into();
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    format!("{:.1} ms", sorted[i] as f64 / 1000.0)
}

fn row(name: &str, backend: &Backend, t: &Tally) {
    println!(
        "| {name:<24} | {:>13} | {:>9} | {:>9} | {:>4} | {:>9} | {:>9} |",
        backend.calls.load(Relaxed),
        t.completed,
        t.cancelled,
        t.hung,
        percentile(&t.latencies_us, 0.50),
        percentile(&t.latencies_us, 0.99),
    );
}

#[tokio::main]
async fn main() {
    println!(
        "{REQUESTS} requests over {KEYS} keys in {ARRIVAL_SPREAD_MS} ms, backend {} ms per call, \
         1 in {CANCEL_ONE_IN} callers cancelled mid-wait, hang watchdog {} s\n",
        BACKEND_LATENCY.as_millis(),
        HANG_WATCHDOG.as_secs()
    );
    println!(
        "| strategy                 | backend calls | completed | cancelled | hung |       p50 |       p99 |"
    );
    println!(
        "|--------------------------|---------------|-----------|-----------|------|-----------|-----------|"
    );

    let backend = Backend::default();
    let b = backend.clone();
    let tally = stampede(move |key| {
        let b = b.clone();
        async move { b.fetch(key).await }
    })
    .await;
    row("no coalescing", &backend, &tally);

    let backend = Backend::default();
    let (b, naive) = (backend.clone(), NaiveMarker::default());
    let tally = stampede(move |key| {
        let (b, naive) = (b.clone(), naive.clone());
        async move { naive.get(key, &b).await }
    })
    .await;
    row("naive marker (the bug)", &backend, &tally);

    let backend = Backend::default();
    let (b, group) = (backend.clone(), Group::<u64, u64, String>::new());
    let check = group.clone();
    let tally = stampede(move |key| {
        let (b, group) = (b.clone(), group.clone());
        async move {
            group
                .run(key, || b.fetch(key))
                .await
                .map_err(|e| e.to_string())
        }
    })
    .await;
    row("coalesce::run", &backend, &tally);
    assert_eq!(tally.hung, 0, "coalesce must never hang");
    assert_eq!(check.in_flight(), 0);

    let backend = Backend::default();
    let (b, group) = (backend.clone(), Group::<u64, u64, String>::new());
    let check = group.clone();
    let tally = stampede(move |key| {
        let (b, group) = (b.clone(), group.clone());
        async move {
            group
                .run_detached(key, move || async move { b.fetch(key).await })
                .await
                .map_err(|e| e.to_string())
        }
    })
    .await;
    row("coalesce::run_detached", &backend, &tally);
    assert_eq!(tally.hung, 0, "coalesce must never hang");
    // Detached fills may still be finishing for cancelled callers; give them their 50 ms.
    sleep(BACKEND_LATENCY * 2).await;
    assert_eq!(check.in_flight(), 0);
    println!(
        "\nhung = still waiting after {} s: a follower stuck behind a cancelled leader.",
        HANG_WATCHDOG.as_secs()
    );
}
