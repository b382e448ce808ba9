//! `coalesce` speed (issue 2 "Speed"), side by side in one criterion group:
//! - uncontended lead + finish on a fresh key, through `run` and through `join` + `finish`;
//! - the peers' miss paths: `moka::future::Cache::get_with` and quick_cache's
//!   `get_value_or_guard_async` placeholder (guard + insert), which also store the value in a
//!   100K-entry cache (at capacity after the first 100K keys); `ttl-lru`'s `get_or_try_insert`
//!   is the like-for-like herd row (coalesce + store);
//! - the floor: a `parking_lot::Mutex<HashMap>` insert + remove (registering and clearing an
//!   in-flight marker with no waiter machinery at all);
//! - 1 leader with 1, 100 and 10,000 followers waiting (reported per woken follower), beside the
//!   same harness waking n `tokio::sync::Notify` waiters (the cost of the harness itself).
//!
//! Every batch runs inside one `block_on` of a current-thread tokio runtime, so the executor is not
//! charged per operation. Short runs by default (1 s warm-up, 3 s, 20 samples).

// `criterion_group!` generates a `pub fn` that cannot carry a doc comment.
#![allow(missing_docs)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use ahash::RandomState;
use benches::zipf::scatter;
use coalesce::{Group, Joined};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use parking_lot::Mutex;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Fresh keys for every operation, scattered so hashing is realistic.
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

fn fresh_keys(n: u64) -> impl Iterator<Item = u64> {
    let start = NEXT_KEY.fetch_add(n, Ordering::Relaxed);
    (start..start + n).map(scatter)
}

fn uncontended(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("coalesce/uncontended_miss");
    group.throughput(Throughput::Elements(1));

    let floor: Mutex<HashMap<u64, (), RandomState>> = Mutex::new(HashMap::default());
    group.bench_function("floor: Mutex<HashMap> insert+remove", |b| {
        b.iter_custom(|iters| {
            let started = Instant::now();
            for key in fresh_keys(iters) {
                floor.lock().insert(key, ());
                black_box(floor.lock().remove(&key));
            }
            started.elapsed()
        })
    });

    let flights: Group<u64, u64> = Group::new();
    group.bench_function("coalesce run (lead+finish)", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let started = Instant::now();
                for key in fresh_keys(iters) {
                    let v = flights
                        .run(key, || async move { Ok::<_, Infallible>(key) })
                        .await;
                    black_box(v.ok());
                }
                started.elapsed()
            })
        })
    });
    group.bench_function("coalesce join+finish", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let started = Instant::now();
                for key in fresh_keys(iters) {
                    match flights.join(key).await {
                        Joined::Leader(leader) => black_box(leader.finish(Ok(key)).ok()),
                        Joined::Done(done) => black_box(done.ok()),
                    };
                }
                started.elapsed()
            })
        })
    });
    assert_eq!(flights.in_flight(), 0, "every flight ended");

    let moka: moka::future::Cache<u64, u64, RandomState> = moka::future::Cache::builder()
        .max_capacity(100_000)
        .build_with_hasher(RandomState::new());
    group.bench_function("moka::future get_with (miss, stores)", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let started = Instant::now();
                for key in fresh_keys(iters) {
                    black_box(moka.get_with(key, async move { key }).await);
                }
                started.elapsed()
            })
        })
    });

    let ttl: ttl_lru::Cache<u64, u64> = ttl_lru::Cache::builder(100_000).build();
    group.bench_function("ttl-lru get_or_try_insert (miss, stores)", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let started = Instant::now();
                for key in fresh_keys(iters) {
                    let fetched = ttl
                        .get_or_try_insert(
                            key,
                            |_| Duration::from_secs(3600),
                            || async move { Ok::<_, Infallible>(key) },
                        )
                        .await;
                    black_box(fetched.ok());
                }
                started.elapsed()
            })
        })
    });

    let quick: quick_cache::sync::Cache<u64, u64> = quick_cache::sync::Cache::new(100_000);
    group.bench_function("quick_cache get_value_or_guard_async (miss, stores)", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let started = Instant::now();
                for key in fresh_keys(iters) {
                    match quick.get_value_or_guard_async(&key).await {
                        Ok(v) => {
                            black_box(v);
                        }
                        Err(guard) => {
                            let _ = black_box(guard.insert(key));
                        }
                    }
                }
                started.elapsed()
            })
        })
    });
    group.finish();
}

/// One leader, `n` followers parked on the same key; the leader finishes and every follower is
/// woken and completes. Throughput is per follower.
fn followers(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("coalesce/wake_followers");
    for n in [1usize, 100, 10_000] {
        group.throughput(Throughput::Elements(n as u64));
        let flights: Group<u64, u64> = Group::new();
        group.bench_function(format!("coalesce join/{n}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for key in fresh_keys(iters) {
                        let started = Instant::now();
                        let Joined::Leader(leader) = flights.join(key).await else {
                            panic!("a fresh key must lead");
                        };
                        let mut waiting: FuturesUnordered<_> =
                            (0..n).map(|_| flights.join(key)).collect();
                        // One pass parks every follower (FuturesUnordered polls each new future
                        // once); none can finish before the leader does.
                        futures::future::poll_fn(|cx| {
                            assert!(waiting.poll_next_unpin(cx).is_pending());
                            Poll::Ready(())
                        })
                        .await;
                        black_box(leader.finish(Ok(key)).ok());
                        let mut woken = 0;
                        while let Some(joined) = waiting.next().await {
                            if let Joined::Done(Ok(v)) = joined {
                                woken += usize::from(v == key);
                            }
                        }
                        assert_eq!(woken, n, "every follower got the leader's value");
                        total += started.elapsed();
                    }
                    total
                })
            })
        });
        assert_eq!(flights.in_flight(), 0);

        // The floor for this harness: the same FuturesUnordered of n parked futures, woken by
        // `tokio::sync::Notify::notify_waiters` (no key, no value, no result to clone).
        let notify = tokio::sync::Notify::new();
        group.bench_function(format!("floor: tokio Notify/{n}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let started = Instant::now();
                        let mut waiting: FuturesUnordered<_> =
                            (0..n).map(|_| notify.notified()).collect();
                        futures::future::poll_fn(|cx| {
                            assert!(waiting.poll_next_unpin(cx).is_pending());
                            Poll::Ready(())
                        })
                        .await;
                        notify.notify_waiters();
                        let mut woken = 0;
                        while waiting.next().await.is_some() {
                            woken += 1;
                        }
                        assert_eq!(woken, n);
                        total += started.elapsed();
                    }
                    total
                })
            })
        });
    }
    group.finish();
}

fn short() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args()
}

criterion_group! {
    name = coalesce_benches;
    config = short();
    targets = uncontended, followers
}
criterion_main!(coalesce_benches);
