//! `DistributedGroup` over a shared `MemoryLease`, with several groups playing several
//! processes, on tokio's paused clock: one fill per key across "processes", waiting out a held
//! lease from this process's own attempt, failing open on errors and timeouts, background
//! release without finding our own stale lease, refresh standing down, and cancellation at
//! every await.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;
use coalesce::{
    Acquire, DistributedGroup, FillLease, FlightError, Group, LeaseError, LeaseToken, MemoryLease,
    Refresh,
};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(100);
const LEASE_TIMEOUT: Duration = Duration::from_millis(200);
const FILL_TIME: Duration = Duration::from_secs(1);

type Proc = DistributedGroup<u32, u64, String>;
type Outcome = Result<u64, FlightError<String>>;

/// The shared cache and the metered backend every "process" talks to.
#[derive(Clone, Default)]
struct World {
    cache: Arc<Mutex<HashMap<u32, u64>>>,
    backend_calls: Arc<AtomicUsize>,
}

impl World {
    fn process(&self, lease: Arc<dyn FillLease>) -> Proc {
        DistributedGroup::builder(lease)
            .ttl(TTL)
            .poll_interval(POLL)
            .lease_timeout(LEASE_TIMEOUT)
            .build(Group::new())
            .unwrap()
    }

    fn cached(&self, key: u32) -> Option<u64> {
        self.cache.lock().unwrap().get(&key).copied()
    }

    /// A caller of `proc`: the shared cache first, then the distributed group.
    fn call(&self, proc: &Proc, key: u32) -> Pin<Box<dyn Future<Output = Outcome> + Send>> {
        self.call_taking(proc, key, FILL_TIME)
    }

    /// [`call`](Self::call) whose backend takes `fill_time`.
    fn call_taking(
        &self,
        proc: &Proc,
        key: u32,
        fill_time: Duration,
    ) -> Pin<Box<dyn Future<Output = Outcome> + Send>> {
        let (world, proc) = (self.clone(), proc.clone());
        Box::pin(async move {
            if let Some(hit) = world.cached(key) {
                return Ok(hit);
            }
            let recheck = || {
                let world = world.clone();
                async move {
                    tokio::task::yield_now().await; // a round trip to the shared cache
                    world.cached(key)
                }
            };
            let fill = || {
                let world = world.clone();
                async move {
                    world.backend_calls.fetch_add(1, SeqCst);
                    tokio::time::sleep(fill_time).await;
                    let value = u64::from(key) * 10;
                    world.cache.lock().unwrap().insert(key, value);
                    Ok(value)
                }
            };
            proc.run(key, recheck, fill).await
        })
    }

    fn calls(&self) -> usize {
        self.backend_calls.load(SeqCst)
    }

    /// A caller of `proc` whose backend fails after `FILL_TIME` (nothing is stored).
    fn call_failing(&self, proc: &Proc, key: u32) -> Pin<Box<dyn Future<Output = Outcome> + Send>> {
        let (world, proc) = (self.clone(), proc.clone());
        Box::pin(async move {
            let recheck = || {
                let world = world.clone();
                async move { world.cached(key) }
            };
            let fill = || {
                let world = world.clone();
                async move {
                    world.backend_calls.fetch_add(1, SeqCst);
                    tokio::time::sleep(FILL_TIME).await;
                    Err("backend down".to_owned())
                }
            };
            proc.run(key, recheck, fill).await
        })
    }
}

/// Someone else (a process that died, say) holding `key`'s lease for `ttl`.
async fn foreign_holder(lease: &dyn FillLease, key: u32, ttl: Duration) -> LeaseToken {
    match lease.try_acquire(&key.to_string(), ttl).await.unwrap() {
        Acquire::Acquired(token) => token,
        Acquire::HeldElsewhere => panic!("expected the lease to be free"),
    }
}

/// Lets spawned tasks (background releases) run.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn two_processes_with_many_callers_fill_a_key_once() {
    let world = World::default();
    let lease = Arc::new(MemoryLease::new());
    let (a, b) = (world.process(lease.clone()), world.process(lease.clone()));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let proc = if i % 2 == 0 { &a } else { &b };
        tasks.push(tokio::spawn(world.call(proc, 7)));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(70));
    }
    assert_eq!(world.calls(), 1, "one backend call across both processes");
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.granted + sb.granted, 1);
    assert_eq!(sa.held_elsewhere + sb.held_elsewhere, 1);
    assert_eq!(sa.found_by_recheck + sb.found_by_recheck, 1);
    assert_eq!(sa.failed_open + sb.failed_open, 0);
    settle().await;
    assert_eq!(lease.held(), 0, "the winner released its lease");
}

#[tokio::test(start_paused = true)]
async fn without_the_lease_each_process_fills() {
    // The control for the test above: plain groups, same callers.
    let world = World::default();
    let groups: Vec<Group<u32, u64, String>> = vec![Group::new(), Group::new()];
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (world, group) = (world.clone(), groups[i % 2].clone());
        tasks.push(tokio::spawn(async move {
            group
                .run(7, || async move {
                    world.backend_calls.fetch_add(1, SeqCst);
                    tokio::time::sleep(FILL_TIME).await;
                    Ok::<_, String>(70)
                })
                .await
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(70));
    }
    assert_eq!(world.backend_calls.load(SeqCst), 2);
}

/// A lease held past `max_wait` (six ttls by default) from this process's own first attempt
/// (a holder whose fill hangs while it keeps its lease) is filled past.
#[tokio::test(start_paused = true)]
async fn a_held_lease_is_waited_out_for_max_wait_from_our_own_attempt_then_we_fill() {
    let world = World::default();
    let lease = Arc::new(MemoryLease::new());
    // A holder that never stores and whose lease outlives our patience.
    foreign_holder(&*lease, 7, TTL * 10).await;
    let proc = world.process(lease.clone());
    tokio::time::advance(Duration::from_secs(3)).await;
    let started = Instant::now();
    assert_eq!(world.call(&proc, 7).await, Ok(70));
    let waited = started.elapsed() - FILL_TIME;
    let max_wait = TTL * 6;
    assert!(
        waited >= max_wait && waited < max_wait + POLL,
        "waited {waited:?}, expected max_wait ({max_wait:?}) measured from our own attempt"
    );
    assert_eq!(world.calls(), 1);
    let stats = proc.stats();
    assert_eq!((stats.held_elsewhere, stats.filled_after_wait), (1, 1));
    assert_eq!(stats.granted, 0);
}

/// A fill longer than the ttl keeps its renewed lease, and a process waiting on it waits for
/// its value instead of filling again after one ttl (it did, so every waiting process
/// duplicated any fill longer than the ttl, the very thing the renewal is for).
#[tokio::test(start_paused = true)]
async fn a_waiting_process_does_not_duplicate_a_fill_longer_than_the_ttl() {
    let world = World::default();
    let lease = Arc::new(MemoryLease::new());
    let (a, b) = (world.process(lease.clone()), world.process(lease.clone()));
    let long = tokio::spawn(world.call_taking(&a, 7, TTL * 3));
    settle().await;
    assert_eq!(world.call(&b, 7).await, Ok(70));
    assert_eq!(long.await.unwrap(), Ok(70));
    assert_eq!(world.calls(), 1, "one backend call in the fleet");
    let stats = b.stats();
    assert_eq!((stats.held_elsewhere, stats.filled_after_wait), (1, 0));
    assert!(stats.found_by_recheck >= 1, "{stats:?}");
}

/// The lease is renewed from its grant, not from the fill's start: a re-check after the grant
/// that takes longer than two thirds of the ttl does not let the lease expire before the fill
/// renews it. Found by review: renewal began with the fill, so a slow shared-cache read after
/// the grant let another process take the lease and fill the same key.
#[tokio::test(start_paused = true)]
async fn a_slow_recheck_after_the_grant_keeps_the_lease() {
    let world = World::default();
    let lease = Arc::new(MemoryLease::new());
    let (a, b) = (world.process(lease.clone()), world.process(lease.clone()));
    let slow = {
        let (world, a) = (world.clone(), a.clone());
        tokio::spawn(async move {
            let recheck = || {
                let world = world.clone();
                async move {
                    tokio::time::sleep(TTL * 4 / 5).await; // a slow shared-cache read
                    world.cached(7)
                }
            };
            let fill = || {
                let world = world.clone();
                async move {
                    world.backend_calls.fetch_add(1, SeqCst);
                    tokio::time::sleep(FILL_TIME * 3).await;
                    world.cache.lock().unwrap().insert(7, 70);
                    Ok(70)
                }
            };
            a.run(7, recheck, fill).await
        })
    };
    // Past the ttl since A's grant, during A's fill.
    tokio::time::sleep(TTL + Duration::from_millis(200)).await;
    assert_eq!(world.call(&b, 7).await, Ok(70));
    assert_eq!(slow.await.unwrap(), Ok(70));
    assert_eq!(world.calls(), 1, "one backend call in the fleet");
    assert_eq!(b.stats().granted, 0, "{:?}", b.stats());
}

#[tokio::test(start_paused = true)]
async fn a_lease_that_expires_while_we_wait_is_taken_at_the_next_poll() {
    let world = World::default();
    let lease = Arc::new(MemoryLease::new());
    foreign_holder(&*lease, 7, Duration::from_secs(2)).await;
    let proc = world.process(lease.clone());
    let started = Instant::now();
    assert_eq!(world.call(&proc, 7).await, Ok(70));
    let waited = started.elapsed() - FILL_TIME;
    assert!(waited >= Duration::from_secs(2) && waited < Duration::from_secs(2) + POLL);
    let stats = proc.stats();
    assert_eq!(
        (stats.held_elsewhere, stats.granted, stats.filled_after_wait),
        (1, 1, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_value_stored_by_the_holder_ends_the_wait_without_a_fill() {
    let world = World::default();
    let lease = Arc::new(MemoryLease::new());
    foreign_holder(&*lease, 7, TTL).await;
    let proc = world.process(lease.clone());
    let other = world.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(750)).await;
        other.cache.lock().unwrap().insert(7, 99);
    });
    let started = Instant::now();
    assert_eq!(world.call(&proc, 7).await, Ok(99));
    assert!(started.elapsed() < Duration::from_millis(750) + POLL * 2);
    assert_eq!(world.calls(), 0);
    assert_eq!(proc.stats().found_by_recheck, 1);
}

#[tokio::test(start_paused = true)]
async fn a_lease_service_that_is_down_means_fill_at_once() {
    let world = World::default();
    let lease = Arc::new(MemoryLease::new());
    lease.set_available(false);
    let proc = world.process(lease.clone());
    let started = Instant::now();
    assert_eq!(world.call(&proc, 7).await, Ok(70));
    assert_eq!(started.elapsed(), FILL_TIME, "no time lost to the lease");
    assert_eq!(proc.stats().failed_open, 1);
    assert_eq!(world.calls(), 1);
}

/// A lease service that accepts the connection and never answers.
struct Silent;

#[async_trait]
impl FillLease for Silent {
    async fn try_acquire(&self, _: &str, _: Duration) -> Result<Acquire, LeaseError> {
        std::future::pending().await
    }
    async fn release(&self, _: &str, _: &LeaseToken) -> Result<bool, LeaseError> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_service_that_never_answers_costs_one_lease_timeout() {
    let world = World::default();
    let proc = world.process(Arc::new(Silent));
    let started = Instant::now();
    assert_eq!(world.call(&proc, 7).await, Ok(70));
    assert_eq!(started.elapsed(), LEASE_TIMEOUT + FILL_TIME);
    assert_eq!(proc.stats().failed_open, 1);
}

/// Delegates to a `MemoryLease`, but a release takes `delay` to arrive.
struct SlowRelease {
    inner: Arc<MemoryLease>,
    delay: Duration,
    releases: AtomicUsize,
}

#[async_trait]
impl FillLease for SlowRelease {
    async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Acquire, LeaseError> {
        self.inner.try_acquire(key, ttl).await
    }
    async fn release(&self, key: &str, token: &LeaseToken) -> Result<bool, LeaseError> {
        tokio::time::sleep(self.delay).await;
        self.releases.fetch_add(1, SeqCst);
        self.inner.release(key, token).await
    }
}

#[tokio::test(start_paused = true)]
async fn release_does_not_delay_the_caller_and_our_next_leader_never_finds_our_stale_lease() {
    let world = World::default();
    let memory = Arc::new(MemoryLease::new());
    let slow = Arc::new(SlowRelease {
        inner: memory.clone(),
        delay: LEASE_TIMEOUT / 2,
        releases: AtomicUsize::new(0),
    });
    let proc = world.process(slow.clone());
    let started = Instant::now();
    assert_eq!(world.call(&proc, 7).await, Ok(70));
    assert_eq!(
        started.elapsed(),
        FILL_TIME,
        "the caller did not wait for the release"
    );
    assert_eq!(proc.pending_releases(), 1);
    assert_eq!(memory.held(), 1, "the release is still on its way");

    // The value is evicted from the shared cache; the next miss in this process leads again.
    world.cache.lock().unwrap().clear();
    assert_eq!(world.call(&proc, 7).await, Ok(70));
    let stats = proc.stats();
    assert_eq!(
        stats.granted, 2,
        "the second leader waited for our release: {stats:?}"
    );
    assert_eq!(stats.held_elsewhere, 0);
    assert_eq!(world.calls(), 2);
    tokio::time::sleep(LEASE_TIMEOUT).await;
    assert_eq!(slow.releases.load(SeqCst), 2);
    assert_eq!(memory.held(), 0);
    assert_eq!(proc.pending_releases(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_release_that_fails_is_counted_and_the_lease_expires() {
    let world = World::default();
    let lease = Arc::new(MemoryLease::new());
    let proc = world.process(lease.clone());
    let world2 = world.clone();
    let lease2 = lease.clone();
    let fill_then_outage = async move {
        let value = proc
            .run(
                7,
                || async { None },
                || async move {
                    let v = 70;
                    world2.cache.lock().unwrap().insert(7, v);
                    lease2.set_available(false); // the service goes away before the release
                    Ok(v)
                },
            )
            .await;
        (proc, value)
    };
    let (proc, value) = fill_then_outage.await;
    assert_eq!(value, Ok(70));
    settle().await;
    assert_eq!(proc.stats().release_failures, 1);
    lease.set_available(true);
    assert_eq!(lease.held(), 1);
    tokio::time::advance(TTL).await;
    assert_eq!(lease.held(), 0);
}

#[tokio::test(start_paused = true)]
async fn refresh_stands_down_while_another_process_holds_the_lease() {
    let world = World::default();
    let lease = Arc::new(MemoryLease::new());
    let proc = world.process(lease.clone());
    let token = foreign_holder(&*lease, 7, TTL).await;
    let calls = AtomicUsize::new(0);
    let refresh = proc
        .refresh(7, || async {
            calls.fetch_add(1, SeqCst);
            Ok(1)
        })
        .await;
    assert!(matches!(refresh, Refresh::StoodDown));
    assert_eq!(calls.load(SeqCst), 0);
    assert_eq!(proc.stats().stood_down, 1);
    assert_eq!(proc.group().in_flight(), 0);
    // Standing down is not a caller that went away.
    assert_eq!(proc.group().stats().abandoned, 0);

    // Once the lease is free, the refresh runs, and releases it afterwards.
    assert!(lease.release("7", &token).await.unwrap());
    let refresh = proc
        .refresh(7, || async {
            calls.fetch_add(1, SeqCst);
            Ok(2)
        })
        .await;
    assert!(matches!(refresh, Refresh::Done(Ok(2))));
    settle().await;
    assert_eq!(lease.held(), 0);

    // A lease service that is down does not stop a refresh.
    lease.set_available(false);
    let refresh = proc
        .refresh(7, || async {
            calls.fetch_add(1, SeqCst);
            Ok(3)
        })
        .await;
    assert!(matches!(refresh, Refresh::Done(Ok(3))));
    assert_eq!(calls.load(SeqCst), 2);
    assert_eq!(proc.stats().failed_open, 1);
}

/// Delegates to a `MemoryLease`, but an acquisition takes `delay` to answer.
struct SlowAcquire {
    inner: Arc<MemoryLease>,
    delay: Duration,
}

#[async_trait]
impl FillLease for SlowAcquire {
    async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Acquire, LeaseError> {
        tokio::time::sleep(self.delay).await;
        self.inner.try_acquire(key, ttl).await
    }
    async fn release(&self, key: &str, token: &LeaseToken) -> Result<bool, LeaseError> {
        self.inner.release(key, token).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_refresh_that_stands_down_hands_local_callers_on() {
    let world = World::default();
    let memory = Arc::new(MemoryLease::new());
    let lease = Arc::new(SlowAcquire {
        inner: memory.clone(),
        delay: Duration::from_millis(50),
    });
    let proc = world.process(lease);
    foreign_holder(&*memory, 7, Duration::from_secs(1)).await;
    let refresh = {
        let proc = proc.clone();
        tokio::spawn(async move { proc.refresh(7, || async { Ok(0) }).await })
    };
    settle().await; // the refresh leads locally and is asking the lease
    let caller = tokio::spawn(world.call(&proc, 7));
    settle().await;
    assert_eq!(
        proc.group().stats().joined,
        1,
        "the caller queued behind the refresh"
    );
    assert!(matches!(refresh.await.unwrap(), Refresh::StoodDown));
    // The queued caller was handed the lead, waited for the foreign lease to expire, and filled.
    assert_eq!(caller.await.unwrap(), Ok(70));
    assert_eq!(world.calls(), 1);
    let stats = proc.stats();
    assert_eq!((stats.stood_down, stats.granted), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_leader_releases_and_a_local_follower_takes_over_without_waiting() {
    let world = World::default();
    let lease = Arc::new(MemoryLease::new());
    let proc = world.process(lease.clone());
    let mut leader = world.call(&proc, 7);
    let waker = Waker::noop();
    // Poll until the leader is inside its fill (the backend has been called).
    while world.calls() == 0 {
        assert!(
            leader
                .as_mut()
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(lease.held(), 1);
    let follower = tokio::spawn(world.call(&proc, 7));
    settle().await;
    assert_eq!(proc.group().stats().joined, 1);
    let started = Instant::now();
    drop(leader);
    assert_eq!(follower.await.unwrap(), Ok(70));
    assert_eq!(
        started.elapsed(),
        FILL_TIME,
        "the follower found no stale lease of ours"
    );
    let stats = proc.stats();
    assert_eq!((stats.granted, stats.held_elsewhere), (2, 0));
    settle().await;
    assert_eq!(lease.held(), 0);
    assert_eq!(proc.group().in_flight(), 0);
}

/// Polls `fut` `n` times (advancing the paused clock by one poll interval between polls, so
/// timers fire), returning its output if it completed.
async fn poll_n(
    fut: &mut Pin<Box<dyn Future<Output = Outcome> + Send>>,
    n: usize,
) -> Option<Outcome> {
    for _ in 0..n {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            return Some(out);
        }
        tokio::time::advance(POLL).await;
    }
    None
}

/// Drops a leader after every number of polls, on the granted path and on the held-elsewhere
/// path: the queued local follower always completes, no flight is left, and the lease ends up
/// free (released in the background, or never taken).
#[tokio::test(start_paused = true)]
async fn cancellation_sweep_over_every_await_of_a_leader() {
    for held_elsewhere in [false, true] {
        let mut completed_at = None;
        for n in 0.. {
            let world = World::default();
            let lease = Arc::new(MemoryLease::new());
            let proc = world.process(lease.clone());
            if held_elsewhere {
                // Another process holds the lease for 1 s and never stores.
                foreign_holder(&*lease, 7, Duration::from_secs(1)).await;
            }
            let mut leader = world.call(&proc, 7);
            if let Some(out) = poll_n(&mut leader, n).await {
                assert_eq!(out, Ok(70));
                completed_at = Some(n);
                break;
            }
            let follower = tokio::spawn(world.call(&proc, 7));
            settle().await;
            drop(leader);
            let out = tokio::time::timeout(TTL * 4, follower)
                .await
                .unwrap_or_else(|_| {
                    panic!("follower stuck after the leader was dropped at poll {n}")
                })
                .unwrap();
            assert_eq!(out, Ok(70), "poll {n}");
            settle().await;
            assert_eq!(proc.group().in_flight(), 0, "poll {n}");
            tokio::time::advance(Duration::from_secs(1)).await; // the foreign lease expires
            assert_eq!(lease.held(), 0, "poll {n}: a lease was left behind");
            assert!(world.calls() <= 2, "poll {n}");
            assert!(n < 1000, "the leader never completes");
        }
        assert!(
            completed_at.unwrap() > 3,
            "the sweep covered several awaits"
        );
    }
}

/// `proc`'s leader for `key` on a spawned task, with a fill that takes `fill_time` and stores
/// nothing (the re-check always misses).
fn spawn_long_fill(proc: &Proc, key: u32, fill_time: Duration) -> tokio::task::JoinHandle<Outcome> {
    let proc = proc.clone();
    tokio::spawn(async move {
        proc.run(
            key,
            || async { None },
            || async move {
                tokio::time::sleep(fill_time).await;
                Ok(u64::from(key) * 10)
            },
        )
        .await
    })
}

#[tokio::test(start_paused = true)]
async fn a_fill_longer_than_the_ttl_keeps_its_lease() {
    let lease = Arc::new(MemoryLease::new());
    let proc = World::default().process(lease.clone());
    let task = spawn_long_fill(&proc, 7, TTL * 3);
    // Two ttls in: without extensions the lease would have expired a ttl ago.
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(lease.held(), 1);
    assert_eq!(
        lease.try_acquire("7", TTL).await.unwrap(),
        Acquire::HeldElsewhere,
        "another process must not start the same fill"
    );
    assert_eq!(task.await.unwrap(), Ok(70));
    let stats = proc.stats();
    // One extension every third of the ttl over three ttls (the last may meet the fill's end).
    assert!((8..=9).contains(&stats.renewed), "{stats:?}");
    assert_eq!((stats.renew_failures, stats.lost), (0, 0));
    settle().await;
    assert_eq!(lease.held(), 0, "released once the fill is done");
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(
        proc.stats().renewed,
        stats.renewed,
        "no extension after the fill"
    );
}

/// Delegates to a `MemoryLease`, but every extension finds the lease gone.
struct Forgetful {
    inner: Arc<MemoryLease>,
    renewals: AtomicUsize,
}

#[async_trait]
impl FillLease for Forgetful {
    async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Acquire, LeaseError> {
        self.inner.try_acquire(key, ttl).await
    }
    async fn release(&self, key: &str, token: &LeaseToken) -> Result<bool, LeaseError> {
        self.inner.release(key, token).await
    }
    async fn renew(&self, _: &str, _: &LeaseToken, _: Duration) -> Result<bool, LeaseError> {
        self.renewals.fetch_add(1, SeqCst);
        Ok(false)
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_stops_the_extensions_but_not_the_fill() {
    let lease = Arc::new(Forgetful {
        inner: Arc::new(MemoryLease::new()),
        renewals: AtomicUsize::new(0),
    });
    let proc = World::default().process(lease.clone());
    let task = spawn_long_fill(&proc, 7, TTL * 3);
    assert_eq!(task.await.unwrap(), Ok(70));
    assert_eq!(lease.renewals.load(SeqCst), 1, "asked once, then stopped");
    let stats = proc.stats();
    assert_eq!((stats.lost, stats.renewed, stats.renew_failures), (1, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_service_that_cannot_extend_leases_still_fills_and_counts_no_failure() {
    // `SlowRelease` keeps `FillLease::renew`'s default: `RenewUnsupported`.
    let memory = Arc::new(MemoryLease::new());
    let lease = Arc::new(SlowRelease {
        inner: memory.clone(),
        delay: Duration::ZERO,
        releases: AtomicUsize::new(0),
    });
    let proc = World::default().process(lease);
    let task = spawn_long_fill(&proc, 7, TTL * 3);
    assert_eq!(task.await.unwrap(), Ok(70));
    let stats = proc.stats();
    assert_eq!((stats.renewed, stats.renew_failures, stats.lost), (0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_leader_dropped_while_filling_stops_extending_and_releases() {
    let lease = Arc::new(MemoryLease::new());
    let proc = World::default().process(lease.clone());
    let task = spawn_long_fill(&proc, 7, TTL * 3);
    tokio::time::sleep(TTL).await;
    let before = proc.stats().renewed;
    assert!(before >= 2, "extended while it ran: {before}");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    settle().await;
    assert_eq!(lease.held(), 0, "released in the background");
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(proc.stats().renewed, before, "no extension after the drop");
    assert_eq!(proc.group().in_flight(), 0);
}

#[test]
fn run_and_refresh_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let proc: Proc = World::default().process(Arc::new(MemoryLease::new()));
    let run = proc.run(1, || async { None }, || async { Ok(1) });
    assert_send(&run);
    let refresh = proc.refresh(1, || async { Ok(1) });
    assert_send(&refresh);
}

/// A lease ttl no service can grant is refused when the group is built: with `Duration::MAX`
/// ("never expire") every `try_acquire` failed, every fill failed open, and fleet-wide single
/// flight was silently off.
#[test]
fn a_lease_ttl_no_service_can_grant_is_refused_at_build() {
    use coalesce::SettingsError;
    use coalesce::lease::MAX_LEASE_TTL;
    let build = |ttl| {
        DistributedGroup::builder(Arc::new(MemoryLease::new()))
            .ttl(ttl)
            .build::<u32, u64, String>(Group::new())
            .map(drop)
    };
    assert_eq!(build(MAX_LEASE_TTL), Ok(()));
    for ttl in [MAX_LEASE_TTL + Duration::from_millis(1), Duration::MAX] {
        assert!(
            matches!(build(ttl), Err(SettingsError::TtlTooLong(t)) if t == ttl),
            "ttl {ttl:?}"
        );
    }
    assert!(matches!(
        build(Duration::ZERO),
        Err(SettingsError::TtlTooShort(_))
    ));
}

/// A lease timeout that is not under the ttl is refused at build: a grant answered that late
/// arrives expired (the defaults allowed a 100 ms ttl with the 200 ms default timeout).
#[test]
fn a_lease_timeout_not_under_the_ttl_is_refused_at_build() {
    use coalesce::SettingsError;
    let build = |ttl: Duration, lease_timeout: Duration| {
        DistributedGroup::builder(Arc::new(MemoryLease::new()))
            .ttl(ttl)
            .lease_timeout(lease_timeout)
            .build::<u32, u64, String>(Group::new())
            .map(drop)
    };
    let ms = Duration::from_millis;
    assert_eq!(build(ms(300), ms(200)), Ok(()));
    for (ttl, lease_timeout) in [(ms(100), ms(200)), (ms(200), ms(200))] {
        assert_eq!(
            build(ttl, lease_timeout),
            Err(SettingsError::LeaseTimeoutNotUnderTtl { lease_timeout, ttl })
        );
    }
}

/// Four processes miss one key while the backend is down: the lease holder's fill fails after
/// one fill time, and the others, which waited for it, then fill side by side. Before, each
/// took the lease in turn and filled holding it, so the last answered after four fill times
/// (and with more processes, after `max_wait`).
#[tokio::test(start_paused = true)]
async fn after_a_holder_ends_without_a_value_the_waiters_fill_side_by_side() {
    let world = World::default();
    let lease = Arc::new(MemoryLease::new());
    let procs: Vec<Proc> = (0..4).map(|_| world.process(lease.clone())).collect();
    let started = Instant::now();
    let calls: Vec<_> = procs
        .iter()
        .map(|proc| {
            let call = world.call_failing(proc, 7);
            tokio::spawn(async move {
                let outcome = call.await;
                (outcome, started.elapsed())
            })
        })
        .collect();
    for call in calls {
        let (outcome, took) = call.await.unwrap();
        assert!(outcome.is_err());
        // One fill, then their own: each may find the lease held for an instant by another
        // that is about to release it, one poll more per process (serial: 1, 2, 3, 4 fills).
        assert!(
            took <= FILL_TIME * 2 + POLL * 4,
            "a process answered after {took:?}: it queued behind another's fill"
        );
    }
    assert_eq!(world.calls(), 4, "each process tried its own fill");
    let handovers: u64 = procs.iter().map(|p| p.stats().empty_handovers).sum();
    assert!(handovers >= 1);
    settle().await;
    assert!(
        matches!(lease.try_acquire("7", TTL).await, Ok(Acquire::Acquired(_))),
        "every lease was released"
    );
}
