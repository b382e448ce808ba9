//! The second-level tier over the in-memory L2, with "processes" simulated as separate caches
//! over one shared store: L1/L2 answers and remaining ttls, one fill per fleet with a lease,
//! the fleet-wide fence, the backplane, fail-open on an L2 that errs or stalls, codec failures,
//! and cancellation at every await. Timeouts run on tokio's paused clock.

// The crate's `clippy.toml` keeps std's atomics out of the crate's own modules (its hit-path
// tests log writes through its wrappers); this test's counters are not one of them.
#![allow(clippy::disallowed_types)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use coalesce::{DistributedGroup, MemoryLease};
use futures::FutureExt;
use ttl_lru::second_level::{
    BytesCodec, Codec, CodecError, MemorySecondLevel, StringCodec, TierSource, U64Codec,
};
use ttl_lru::{Cache, SecondLevel, TieredCache, TokioClock};

type Tier = TieredCache<String, u64>;

const TTL: Duration = Duration::from_secs(10);

fn l1() -> Cache<String, u64> {
    Cache::builder(1000).clock(TokioClock::new()).build()
}

fn process(l2: &MemorySecondLevel) -> Tier {
    TieredCache::builder(l1(), Arc::new(l2.clone()), StringCodec, U64Codec)
        .build()
        .unwrap()
}

fn leased(l2: &MemorySecondLevel, lease: &Arc<MemoryLease>) -> Tier {
    TieredCache::builder(l1(), Arc::new(l2.clone()), StringCodec, U64Codec)
        .lease(
            DistributedGroup::builder(lease.clone())
                .ttl(Duration::from_secs(30))
                .poll_interval(Duration::from_millis(10)),
        )
        .build()
        .unwrap()
}

async fn read(tier: &Tier, key: &str, value: u64, calls: &Arc<AtomicUsize>) -> (u64, TierSource) {
    let calls = calls.clone();
    let got = tier
        .get_or_try_insert(
            key.to_string(),
            |_| TTL,
            move || async move {
                calls.fetch_add(1, SeqCst);
                Ok::<_, String>(value)
            },
        )
        .await
        .unwrap();
    (got.value, got.source)
}

#[tokio::test(start_paused = true)]
async fn l1_then_l2_then_fill_each_answer_says_where_it_came_from() {
    let l2 = MemorySecondLevel::new();
    let (a, b) = (process(&l2), process(&l2));
    let calls = Arc::new(AtomicUsize::new(0));
    assert_eq!(read(&a, "k", 1, &calls).await, (1, TierSource::Filled));
    assert_eq!(read(&a, "k", 2, &calls).await, (1, TierSource::L1));
    assert_eq!(read(&b, "k", 3, &calls).await, (1, TierSource::L2));
    assert_eq!(read(&b, "k", 4, &calls).await, (1, TierSource::L1));
    assert_eq!(calls.load(SeqCst), 1);
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.fills, sa.l2_writes, sa.l2_misses), (1, 1, 1));
    assert_eq!((sb.fills, sb.l2_hits), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn an_l2_hit_lives_in_l1_for_the_remaining_ttl_never_longer() {
    let l2 = MemorySecondLevel::new();
    let (a, b) = (process(&l2), process(&l2));
    let calls = Arc::new(AtomicUsize::new(0));
    read(&a, "k", 1, &calls).await;
    tokio::time::advance(Duration::from_secs(7)).await;
    assert_eq!(read(&b, "k", 2, &calls).await, (1, TierSource::L2));
    let left = b.cache().lookup("k").unwrap().expires_in().unwrap();
    assert!(
        left <= Duration::from_secs(3),
        "L1 ttl {left:?} outlives L2's"
    );
    tokio::time::advance(Duration::from_secs(3)).await;
    assert_eq!(
        b.get(&"k".to_string()),
        None,
        "gone from L1 when gone from L2"
    );
}

#[tokio::test(start_paused = true)]
async fn two_processes_with_a_lease_fill_a_cold_key_once() {
    let l2 = MemorySecondLevel::new();
    let lease = Arc::new(MemoryLease::new());
    let procs = [leased(&l2, &lease), leased(&l2, &lease)];
    let calls = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for p in &procs {
        for _ in 0..50 {
            let (p, calls) = (p.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                let calls2 = calls.clone();
                p.get_or_try_insert(
                    "cold".to_string(),
                    |_| TTL,
                    move || async move {
                        calls2.fetch_add(1, SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok::<_, String>(7)
                    },
                )
                .await
                .unwrap()
                .value
            }));
        }
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 7);
    }
    assert_eq!(calls.load(SeqCst), 1, "one fill for the fleet");
    let found: u64 = procs.iter().map(|p| p.stats().fleet_fills_found).sum();
    assert_eq!(
        found, 1,
        "the other process found the value by re-checking L2"
    );
}

/// Starts `tier`'s read-through fill of `key` with `value` and lets it run until it waits for
/// the returned gate (on the paused clock).
async fn gated_fill(
    tier: &Tier,
    key: &str,
    value: u64,
) -> (
    Arc<tokio::sync::Notify>,
    tokio::task::JoinHandle<
        Result<ttl_lru::second_level::TierFetched<u64>, ttl_lru::FetchError<String>>,
    >,
) {
    let gate = Arc::new(tokio::sync::Notify::new());
    let filling = {
        let (tier, gate, key) = (tier.clone(), gate.clone(), key.to_string());
        tokio::spawn(async move {
            tier.get_or_try_insert(
                key,
                |_| TTL,
                move || async move {
                    gate.notified().await;
                    Ok::<_, String>(value)
                },
            )
            .await
        })
    };
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    (gate, filling)
}

#[tokio::test(start_paused = true)]
async fn a_fill_that_began_before_an_invalidation_reaches_no_l2_and_no_l1() {
    let l2 = MemorySecondLevel::new();
    let (a, b) = (process(&l2), process(&l2));
    let calls = Arc::new(AtomicUsize::new(0));
    // A caches the old value; B's fill starts and waits for the gate.
    read(&a, "k", 1, &calls).await;
    l2.delete(b"k").await.unwrap();
    let (gate, filling) = gated_fill(&b, "k", 1).await;
    let done = a.invalidate(&"k".to_string()).await.unwrap();
    assert_eq!((done.receivers, done.acked), (2, 2));
    gate.notify_one();
    let got = filling.await.unwrap().unwrap();
    assert_eq!(got.value, 1, "B's callers still get B's value");
    assert!(!l2.contains(b"k"), "B's value never reached L2");
    assert_eq!(a.get(&"k".to_string()), None);
    assert_eq!(b.get(&"k".to_string()), None, "nor B's L1");
    assert_eq!(b.stats().fenced_writes, 1);
    assert_eq!(read(&b, "k", 2, &calls).await, (2, TierSource::Filled));
    assert_eq!(read(&a, "k", 3, &calls).await, (2, TierSource::L2));
}

/// A fill that began before an invalidation ends after a newer fill of the same process
/// stored the key: its refused L2 write keeps its own value out of L1 and leaves the newer
/// one there. It used to remove the key from L1 whatever held it, so the process's next read
/// went to L2 for a value it had.
#[tokio::test(start_paused = true)]
async fn a_refused_l2_write_leaves_a_newer_l1_value_alone() {
    let l2 = MemorySecondLevel::new();
    let (a, b) = (process(&l2), process(&l2));
    let calls = Arc::new(AtomicUsize::new(0));
    let (gate, old_fill) = gated_fill(&b, "k", 1).await;
    let done = a.invalidate(&"k".to_string()).await.unwrap();
    assert_eq!((done.receivers, done.acked), (2, 2));
    // B's next caller starts afresh (the invalidation detached the old fill) and stores 2.
    assert_eq!(read(&b, "k", 2, &calls).await, (2, TierSource::Filled));
    gate.notify_one();
    let got = old_fill.await.unwrap().unwrap();
    assert_eq!(got.value, 1, "the old fill's callers still get its value");
    assert_eq!(b.stats().fenced_writes, 1, "its L2 write was refused");
    assert!(l2.contains(b"k"), "the newer fill's value is in L2");
    assert_eq!(
        b.get(&"k".to_string()),
        Some(2),
        "the newer fill's value stays in B's L1"
    );
    let l2_reads = b.stats().l2_hits + b.stats().l2_misses;
    assert_eq!(read(&b, "k", 3, &calls).await, (2, TierSource::L1));
    assert_eq!(b.stats().l2_hits + b.stats().l2_misses, l2_reads);
}

#[tokio::test(start_paused = true)]
async fn an_invalidation_drops_every_processs_l1_copy() {
    let l2 = MemorySecondLevel::new();
    let procs: Vec<Tier> = (0..4).map(|_| process(&l2)).collect();
    let calls = Arc::new(AtomicUsize::new(0));
    for p in &procs {
        read(p, "k", 1, &calls).await;
        assert!(p.get(&"k".to_string()).is_some());
    }
    let done = procs[2].invalidate(&"k".to_string()).await.unwrap();
    assert_eq!((done.receivers, done.acked), (4, 4));
    for p in &procs {
        assert_eq!(p.get(&"k".to_string()), None);
    }
    assert_eq!(
        read(&procs[0], "k", 2, &calls).await,
        (2, TierSource::Filled)
    );
    let received: u64 = procs.iter().map(|p| p.stats().backplane_received).sum();
    assert_eq!(received, 4);
}

#[tokio::test(start_paused = true)]
async fn an_l2_that_errs_or_stalls_costs_a_timeout_and_fills_go_on() {
    let l2 = MemorySecondLevel::new();
    let tier = TieredCache::builder(l1(), Arc::new(l2.clone()), StringCodec, U64Codec)
        .l2_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    l2.set_down(true);
    assert_eq!(read(&tier, "a", 1, &calls).await, (1, TierSource::Filled));
    let s = tier.stats();
    assert_eq!(
        (s.l2_errors, s.skipped_writes),
        (2, 1),
        "version and get failed"
    );
    assert_eq!(tier.get(&"a".to_string()), Some(1), "L1 still works");
    l2.set_down(false);
    l2.set_stalled(true);
    assert_eq!(read(&tier, "b", 2, &calls).await, (2, TierSource::Filled));
    assert_eq!(tier.stats().l2_timeouts, 2);
    assert!(tier.invalidate(&"b".to_string()).await.is_err());
    assert_eq!(tier.get(&"b".to_string()), None, "L1 invalidated anyway");
    l2.set_stalled(false);
    // Recovers alone once L2 answers.
    assert_eq!(read(&tier, "c", 3, &calls).await, (3, TierSource::Filled));
    assert!(l2.contains(b"c"));
}

/// Fails to decode anything starting with 0xFF, and to encode 13.
struct Picky;

impl Codec<u64> for Picky {
    fn encode(&self, value: &u64) -> Result<Vec<u8>, CodecError> {
        if *value == 13 {
            return Err(CodecError::encode("unlucky"));
        }
        U64Codec.encode(value)
    }
    fn decode(&self, bytes: &[u8]) -> Result<u64, CodecError> {
        if bytes.first() == Some(&0xFF) {
            return Err(CodecError::decode("bad first byte"));
        }
        U64Codec.decode(bytes)
    }
}

#[tokio::test(start_paused = true)]
async fn codec_failures_are_misses_and_never_poison_a_key() {
    let l2 = MemorySecondLevel::new();
    let tier = TieredCache::builder(l1(), Arc::new(l2.clone()), StringCodec, Picky)
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    l2.set(b"k", &[0xFF; 8], TTL).await.unwrap();
    let got = tier
        .get_or_try_insert("k".to_string(), |_| TTL, || async { Ok::<_, String>(5) })
        .await
        .unwrap();
    assert_eq!((got.value, got.source), (5, TierSource::Filled));
    let stored = l2.get(b"k").await.unwrap().unwrap().value;
    assert_eq!(stored[0], 0, "tagged as a value");
    assert_eq!(stored[1..], 5u64.to_be_bytes());
    assert_eq!(read(&tier, "u", 13, &calls).await, (13, TierSource::Filled));
    assert!(!l2.contains(b"u"), "an unencodable value stays out of L2");
    assert_eq!(
        tier.get(&"u".to_string()),
        Some(13),
        "and is still cached in L1"
    );
    assert_eq!(tier.stats().codec_errors, 2);
}

#[tokio::test(start_paused = true)]
async fn a_value_larger_than_l2_accepts_is_served_and_kept_in_l1() {
    let l2 = MemorySecondLevel::new().with_max_value_len(4);
    let tier = TieredCache::builder(
        Cache::builder(10).clock(TokioClock::new()).build(),
        Arc::new(l2.clone()),
        StringCodec,
        BytesCodec,
    )
    .build()
    .unwrap();
    let got = tier
        .get_or_try_insert(
            "big".to_string(),
            |_| TTL,
            || async { Ok::<_, String>(vec![0u8; 64]) },
        )
        .await
        .unwrap();
    assert_eq!(got.value.len(), 64);
    assert!(!l2.contains(b"big"));
    assert_eq!(tier.stats().l2_errors, 1);
    assert_eq!(tier.get(&"big".to_string()).map(|v| v.len()), Some(64));
}

#[tokio::test(start_paused = true)]
async fn keys_with_any_bytes_round_trip_through_l2_and_the_backplane() {
    let l2 = MemorySecondLevel::new();
    let mk = || {
        TieredCache::builder(
            Cache::<Vec<u8>, u64>::builder(10)
                .clock(TokioClock::new())
                .build(),
            Arc::new(l2.clone()),
            BytesCodec,
            U64Codec,
        )
        .build()
        .unwrap()
    };
    let (a, b) = (mk(), mk());
    for key in [vec![], vec![0u8, 0xFF, b'\n', b' '], vec![0xC3, 0x28]] {
        let fill = || async { Ok::<_, String>(9) };
        a.get_or_try_insert(key.clone(), |_| TTL, fill)
            .await
            .unwrap();
        let got = b
            .get_or_try_insert(key.clone(), |_| TTL, fill)
            .await
            .unwrap();
        assert_eq!(got.source, TierSource::L2, "{key:?}");
        a.invalidate(&key).await.unwrap();
        assert_eq!(b.get(&key), None, "{key:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_read_dropped_at_any_await_leaves_nothing_stuck() {
    let lease = Arc::new(MemoryLease::new());
    for polls in 0..12 {
        let l2 = MemorySecondLevel::new();
        let tier = leased(&l2, &lease);
        let key = format!("k{polls}");
        {
            let fut = tier.get_or_try_insert(
                key.clone(),
                |_| TTL,
                || async {
                    tokio::task::yield_now().await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Ok::<_, String>(1)
                },
            );
            let mut fut = std::pin::pin!(fut);
            for _ in 0..polls {
                if (&mut fut).now_or_never().is_some() {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(tier.cache().fills_in_flight(), 0, "after {polls} polls");
        let calls = Arc::new(AtomicUsize::new(0));
        let (v, _) = tokio::time::timeout(Duration::from_secs(60), read(&tier, &key, 2, &calls))
            .await
            .expect("no hang after a dropped read");
        assert!(v == 1 || v == 2);
    }
}

#[tokio::test(start_paused = true)]
async fn an_invalidate_dropped_while_l2_stalls_has_already_cleaned_this_l1() {
    let l2 = MemorySecondLevel::new();
    let tier = process(&l2);
    let calls = Arc::new(AtomicUsize::new(0));
    read(&tier, "k", 1, &calls).await;
    l2.set_stalled(true);
    assert!(
        tier.invalidate(&"k".to_string()).now_or_never().is_none(),
        "pending on the stalled L2"
    );
    assert_eq!(tier.get(&"k".to_string()), None);
}

/// A process over `l2` that caches fill errors (`String`) in L1 and L2 for 5 s.
fn caching_errors(l2: &MemorySecondLevel) -> Tier {
    TieredCache::builder(
        Cache::builder(100)
            .clock(TokioClock::new())
            .negative_ttl(Duration::from_secs(5))
            .build(),
        Arc::new(l2.clone()),
        StringCodec,
        U64Codec,
    )
    .negative_caching(StringCodec, Duration::from_secs(5))
    .build()
    .unwrap()
}

/// Two processes fill one key at the same version: A's fill succeeds and stores, then B's
/// fails. B's error does not replace A's value in L2 (before, last writer won, and the fleet
/// was served B's error for its negative ttl), and B's own L1 does not keep it either.
#[tokio::test(start_paused = true)]
async fn a_fill_error_never_replaces_a_value_another_process_stored() {
    let l2 = MemorySecondLevel::new();
    let (a, b, c) = (
        caching_errors(&l2),
        caching_errors(&l2),
        caching_errors(&l2),
    );
    let gate = Arc::new(tokio::sync::Notify::new());
    let failing = {
        let gate = Arc::clone(&gate);
        tokio::spawn(async move {
            b.get_or_try_insert(
                "k".into(),
                |_| TTL,
                || async move {
                    gate.notified().await;
                    Err::<u64, String>("origin down".into())
                },
            )
            .await
            .map(|got| got.value)
        })
    };
    tokio::task::yield_now().await; // B has read the version and is filling
    let stored = a
        .get_or_try_insert("k".into(), |_| TTL, || async { Ok::<u64, String>(7) })
        .await
        .unwrap();
    assert_eq!(stored.value, 7);
    gate.notify_waiters();
    assert!(
        failing.await.unwrap().is_err(),
        "B's own caller gets its error"
    );
    let read = c
        .get_or_try_insert("k".into(), |_| TTL, || async { Ok::<u64, String>(0) })
        .await
        .unwrap();
    assert_eq!((read.value, read.source), (7, TierSource::L2));
}

#[tokio::test(start_paused = true)]
async fn fill_errors_go_through_l2_with_a_negative_codec_and_are_fenced() {
    let l2 = MemorySecondLevel::new();
    let (a, b): (Tier, Tier) = (caching_errors(&l2), caching_errors(&l2));
    let failing = || async { Err::<u64, String>("origin down".into()) };
    let err = a
        .get_or_try_insert("k".into(), |_| TTL, failing)
        .await
        .unwrap_err();
    assert_eq!(err.fill_error().map(|e| e.as_str()), Some("origin down"));
    // B answers A's error from L2 without calling its origin.
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = {
        let calls = calls.clone();
        move || async move {
            calls.fetch_add(1, SeqCst);
            Ok::<u64, String>(1)
        }
    };
    let err = b
        .get_or_try_insert("k".into(), |_| TTL, counted.clone())
        .await
        .unwrap_err();
    assert_eq!(err.fill_error().map(|e| e.as_str()), Some("origin down"));
    assert_eq!(calls.load(SeqCst), 0);
    assert_eq!(b.stats().l2_negative_hits, 1);
    // A caller with another error type reads the entry as a miss and fills.
    let other = b
        .get_or_try_insert("k2".into(), |_| TTL, || async { Err::<u64, u32>(7) })
        .await
        .unwrap_err();
    assert_eq!(other.fill_error().map(|e| **e), Some(7));
    assert!(
        !l2.contains(b"k2"),
        "an error type without a codec stays out of L2"
    );
    // The negative entry expires from L2 with its ttl; then the key fills again.
    tokio::time::advance(Duration::from_secs(6)).await;
    let got = b
        .get_or_try_insert("k".into(), |_| TTL, counted)
        .await
        .unwrap();
    assert_eq!((got.value, got.source), (1, TierSource::Filled));
    // Fenced like values: an error from a fill that began before an invalidation stays out.
    let gate = Arc::new(tokio::sync::Notify::new());
    let failing_late = {
        let (a, gate) = (a.clone(), gate.clone());
        tokio::spawn(async move {
            a.get_or_try_insert(
                "late".into(),
                |_| TTL,
                move || async move {
                    gate.notified().await;
                    Err::<u64, String>("stale failure".into())
                },
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(1)).await;
    b.invalidate(&"late".to_string()).await.unwrap();
    gate.notify_one();
    assert!(failing_late.await.unwrap().is_err());
    assert!(!l2.contains(b"late"));
    assert_eq!(a.stats().fenced_writes, 1);
}

/// A tier with a stale-while-revalidate window over the shared L2 and lease.
fn leased_swr(l2: &MemorySecondLevel, lease: &Arc<MemoryLease>) -> Tier {
    let cache = Cache::builder(1000)
        .clock(TokioClock::new())
        .stale_while_revalidate(Duration::from_secs(60))
        .build();
    TieredCache::builder(cache, Arc::new(l2.clone()), StringCodec, U64Codec)
        .lease(
            DistributedGroup::builder(lease.clone())
                .ttl(Duration::from_secs(30))
                .poll_interval(Duration::from_millis(10)),
        )
        .build()
        .unwrap()
}

/// A tier (stale-while-revalidate 60 s, leased) that filled `k` = 1 and is now 1 s past its
/// ttl in L1 (stale) and in L2 (gone), while another process holds the key's lease for 600 s
/// (the tier's lease key is the hex of the encoded key), refreshing it. Returns its L2, the
/// tier and its fill-call count.
async fn stale_while_another_process_holds_the_lease() -> (MemorySecondLevel, Tier, Arc<AtomicUsize>)
{
    use coalesce::{Acquire, FillLease};
    let l2 = MemorySecondLevel::new();
    let lease = Arc::new(MemoryLease::new());
    let b = leased_swr(&l2, &lease);
    let calls = Arc::new(AtomicUsize::new(0));
    assert_eq!(read(&b, "k", 1, &calls).await, (1, TierSource::Filled));
    tokio::time::advance(TTL + Duration::from_secs(1)).await;
    let held = lease.try_acquire("6b", Duration::from_secs(600)).await;
    assert!(matches!(held, Ok(Acquire::Acquired(_))));
    (l2, b, calls)
}

#[tokio::test(start_paused = true)]
async fn a_refresh_stands_down_while_another_process_holds_the_lease_and_serves_stale() {
    let (l2, b, calls) = stale_while_another_process_holds_the_lease().await;
    assert_eq!(read(&b, "k", 2, &calls).await, (1, TierSource::Stale));
    // Longer than the lease ttl: a refresh that waited for the holder would have filled by now.
    for _ in 0..50 {
        tokio::time::advance(Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
    }
    assert_eq!(
        calls.load(SeqCst),
        1,
        "the refresh stood down: no fill here"
    );
    assert!(b.stats().stand_downs >= 1);
    assert!(b.stats().lease.unwrap().stood_down >= 1);
    assert_eq!(
        read(&b, "k", 3, &calls).await,
        (1, TierSource::Stale),
        "the stale copy is still served"
    );
    // Once the holder's value lands in L2, the next refresh takes it (no fill here either).
    l2.set(b"k", &[0, 9, 0, 0, 0, 0, 0, 0, 0], TTL)
        .await
        .unwrap();
    tokio::task::yield_now().await;
    for _ in 0..5 {
        tokio::time::advance(Duration::from_millis(10)).await;
        tokio::task::yield_now().await;
    }
    let _ = read(&b, "k", 4, &calls).await;
    for _ in 0..5 {
        tokio::time::advance(Duration::from_millis(10)).await;
        tokio::task::yield_now().await;
    }
    assert_eq!(calls.load(SeqCst), 1);
}

/// While another process holds the lease for longer than the stale window, the stale copy is
/// served for that window and no longer: before, each stale read's refresh stood down by
/// re-storing the copy, which restarted its window, so it was served stale for as long as the
/// lease was held (here 600 s).
#[tokio::test(start_paused = true)]
async fn a_refresh_standing_down_does_not_extend_the_stale_window() {
    let expired = tokio::time::Instant::now() + TTL;
    let (_l2, b, calls) = stale_while_another_process_holds_the_lease().await;
    let window_end = expired + Duration::from_secs(60);
    let mut stale_reads = 0;
    while tokio::time::Instant::now() < expired + Duration::from_secs(200) {
        let asked = tokio::time::Instant::now();
        let got = read(&b, "k", 2, &calls).await;
        if got == (1, TierSource::Stale) {
            stale_reads += 1;
            assert!(
                asked < window_end,
                "served stale {:?} after its window ended",
                asked - window_end
            );
        }
        tokio::time::advance(Duration::from_secs(30)).await;
    }
    assert!(
        stale_reads >= 2,
        "the copy was served stale inside its window"
    );
    assert!(b.stats().stand_downs >= 1);
}

/// Process A fills a cold key in 50 ms while B (10 s polls) waits for A's lease; returns B's
/// wait on the paused clock and B's stats.
async fn wait_for_the_other_process(l2: &MemorySecondLevel) -> (Duration, ttl_lru::TierStats) {
    let lease = Arc::new(MemoryLease::new());
    let slow_polls = |l2: &MemorySecondLevel| {
        TieredCache::builder(l1(), Arc::new(l2.clone()), StringCodec, U64Codec)
            .lease(
                DistributedGroup::builder(lease.clone())
                    .ttl(Duration::from_secs(60))
                    .poll_interval(Duration::from_secs(10)),
            )
            .build()
            .unwrap()
    };
    let (a, b): (Tier, Tier) = (slow_polls(l2), slow_polls(l2));
    let filler = tokio::spawn(async move {
        a.get_or_try_insert(
            "cold".to_string(),
            |_| TTL,
            || async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok::<_, String>(7)
            },
        )
        .await
        .unwrap()
    });
    tokio::task::yield_now().await;
    let start = tokio::time::Instant::now();
    let got = b
        .get_or_try_insert("cold".to_string(), |_| TTL, || async { Ok::<_, String>(8) })
        .await
        .unwrap();
    assert_eq!((got.value, got.source), (7, TierSource::Fleet));
    assert_eq!(filler.await.unwrap().source, TierSource::Filled);
    (start.elapsed(), b.stats())
}

#[tokio::test(start_paused = true)]
async fn a_fill_announcement_wakes_the_other_processs_waiter_before_its_poll() {
    let l2 = MemorySecondLevel::new();
    let (waited, stats) = wait_for_the_other_process(&l2).await;
    assert_eq!(
        waited,
        Duration::from_millis(50),
        "no poll interval on top of the fill"
    );
    assert_eq!(stats.fill_wakes, 1);
    let lease = stats.lease.unwrap();
    assert_eq!((lease.woken, lease.polled), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_lost_fill_announcement_still_completes_by_polling() {
    let l2 = MemorySecondLevel::new();
    l2.set_fill_announcements_lost(true);
    let (waited, stats) = wait_for_the_other_process(&l2).await;
    assert_eq!(waited, Duration::from_secs(10), "one poll interval");
    assert_eq!(stats.fill_wakes, 0);
    let lease = stats.lease.unwrap();
    assert_eq!((lease.woken, lease.polled), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn the_soft_timeout_bounds_a_misss_wait_for_a_slow_l2_and_the_hard_one_each_call() {
    let l2 = MemorySecondLevel::new();
    let tier = |soft: Option<Duration>| {
        let builder = TieredCache::builder(l1(), Arc::new(l2.clone()), StringCodec, U64Codec)
            .l2_timeout(Duration::from_millis(100));
        match soft {
            Some(soft) => builder.l2_soft_timeout(soft),
            None => builder,
        }
        .build()
        .unwrap()
    };
    let (hard_only, soft) = (tier(None), tier(Some(Duration::from_millis(30))));
    let calls = Arc::new(AtomicUsize::new(0));
    l2.set_stalled(true);
    let start = tokio::time::Instant::now();
    assert_eq!(
        read(&hard_only, "a", 1, &calls).await,
        (1, TierSource::Filled)
    );
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(200),
        "two hard timeouts"
    );
    assert_eq!(hard_only.stats().l2_timeouts, 2);
    let start = tokio::time::Instant::now();
    assert_eq!(read(&soft, "b", 2, &calls).await, (2, TierSource::Filled));
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(30),
        "the soft timeout"
    );
    let s = soft.stats();
    assert_eq!((s.l2_soft_timeouts, s.skipped_writes), (1, 1));
    l2.set_stalled(false);
    assert!(
        TieredCache::builder(l1(), Arc::new(l2.clone()), StringCodec, U64Codec)
            .l2_soft_timeout(Duration::ZERO)
            .build()
            .is_err()
    );
}

#[tokio::test(start_paused = true)]
async fn invalidate_all_reaches_every_key_every_process_and_fences_fills_that_began_before() {
    let l2 = MemorySecondLevel::new();
    let (a, b) = (process(&l2), process(&l2));
    let calls = Arc::new(AtomicUsize::new(0));
    for key in ["x", "y"] {
        read(&a, key, 1, &calls).await;
        assert_eq!(read(&b, key, 2, &calls).await, (1, TierSource::L2));
    }
    // A fill in B that began (read its version) before the invalidation.
    let gate = Arc::new(tokio::sync::Notify::new());
    let late = {
        let (b, gate) = (b.clone(), gate.clone());
        tokio::spawn(async move {
            b.get_or_try_insert(
                "z".to_string(),
                |_| TTL,
                move || async move {
                    gate.notified().await;
                    Ok::<_, String>(9)
                },
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(1)).await;
    let done = a.invalidate_all().await.unwrap();
    assert_eq!((done.receivers, done.acked), (2, 2));
    gate.notify_one();
    assert_eq!(
        late.await.unwrap().unwrap().value,
        9,
        "its callers still get it"
    );
    for key in [b"x".as_slice(), b"y", b"z"] {
        assert!(!l2.contains(key), "nothing from before in L2");
    }
    for p in [&a, &b] {
        for key in ["x", "y", "z"] {
            assert_eq!(
                p.get(&key.to_string()),
                None,
                "nothing from before in any L1"
            );
        }
    }
    assert_eq!(b.stats().fenced_writes, 1);
    assert_eq!(
        read(&b, "x", 3, &calls).await,
        (3, TierSource::Filled),
        "refills"
    );
}

#[test]
fn zero_timeouts_are_refused() {
    let l2: Arc<dyn SecondLevel> = Arc::new(MemorySecondLevel::new());
    let err = TieredCache::builder(l1(), l2, StringCodec, U64Codec)
        .l2_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(err.to_string(), "the l2 timeout must be greater than zero");
}

/// `CborCodec` (feature `serde`; the workspace's tests enable it through coalesce-redis's
/// dev-dependency): round trip of a struct, typed errors for garbage and trailing bytes.
#[cfg(feature = "serde")]
mod cbor {
    use ttl_lru::second_level::{CborCodec, Codec, CodecError};

    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    struct User {
        id: u64,
        name: String,
        tags: Vec<String>,
    }

    #[test]
    fn a_struct_round_trips_and_bad_bytes_are_typed_errors() {
        let codec = CborCodec::<User>::new();
        let user = User {
            id: 42,
            name: "Ada\0Lovelace".into(),
            tags: vec!["a".into(), String::new()],
        };
        let bytes = codec.encode(&user).unwrap();
        assert_eq!(codec.decode(&bytes).unwrap(), user);
        assert!(matches!(
            codec.decode(&[0xFF, 0x00]),
            Err(CodecError::Decode(_))
        ));
        assert!(matches!(codec.decode(&[]), Err(CodecError::Decode(_))));
        let mut trailing = bytes.clone();
        trailing.push(0);
        let err = codec.decode(&trailing).unwrap_err();
        assert!(err.to_string().contains("1 trailing bytes"), "{err}");
        // Another type's encoding is a typed error, not a panic or a wrong value.
        let other = CborCodec::<u64>::new().encode(&7).unwrap();
        assert!(matches!(codec.decode(&other), Err(CodecError::Decode(_))));
    }
}

/// Three leased processes miss one key; it is invalidated in the fleet while the lease holder
/// fills. The holder's write is refused (it read the version before the invalidation); the
/// processes that waited for it then fill with the version as of their fill, so the value
/// lands in L2. Before, they filled with the versions they read before waiting: every write
/// was refused and the key stayed uncached. (That they fill side by side rather than one after
/// another is coalesce's `after_a_holder_ends_without_a_value_the_waiters_fill_side_by_side`.)
#[tokio::test(start_paused = true)]
async fn an_invalidation_during_a_leased_fill_does_not_leave_the_key_uncached() {
    let l2 = MemorySecondLevel::new();
    let lease = Arc::new(MemoryLease::new());
    let tiers: Vec<Tier> = (0..3).map(|_| leased(&l2, &lease)).collect();
    let invalidator = process(&l2);
    let started = tokio::time::Instant::now();
    let reads: Vec<_> = tiers
        .iter()
        .cloned()
        .map(|tier| {
            tokio::spawn(async move {
                let got = tier
                    .get_or_try_insert(
                        "k".to_string(),
                        |_| TTL,
                        || async {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            Ok::<_, String>(7)
                        },
                    )
                    .await
                    .unwrap();
                (got.value, started.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    invalidator.invalidate(&"k".to_string()).await.unwrap();
    for read in reads {
        let (value, took) = read.await.unwrap();
        assert_eq!(value, 7);
        assert!(took < Duration::from_secs(3), "answered after {took:?}");
    }
    let fenced: u64 = tiers.iter().map(|t| t.stats().fenced_writes).sum();
    assert!(fenced >= 1, "the holder's write was refused");
    assert!(
        l2.get(b"k").await.unwrap().is_some(),
        "a fill after the invalidation reached L2 ({fenced} refused)"
    );
}
