//! `RedisLease` on a real `redis-server`: groups in distributed mode fill once across
//! "processes" (separate connections); killing Redis mid-fill lets fills go on (fail open) and
//! nothing hangs; the lease reconnects when Redis comes back; a Redis that never answers costs a
//! timeout, not a hang. Run by `main.rs`'s harness, which hands each test a fresh server.

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coalesce::{Acquire, DistributedGroup, FillLease, FlightError, Group, LeaseError};
use coalesce_redis::RedisLease;
use coalesce_redis::test_server::RedisServer;
use tokio::sync::Notify;

use crate::forwarder::Forwarder;

/// Guards against a hang: far above anything these tests should take, and it is the only
/// wall-clock limit here (nothing asserts on elapsed time).
const HANG_GUARD: Duration = Duration::from_secs(30);

type Proc = DistributedGroup<u32, u64, String>;

fn lease(url: &str) -> Arc<RedisLease> {
    Arc::new(
        RedisLease::builder(url)
            .connect_timeout(Duration::from_millis(200))
            .command_timeout(Duration::from_millis(200))
            .reconnect_backoff(Duration::from_millis(100))
            .build()
            .unwrap(),
    )
}

fn process(lease: Arc<RedisLease>) -> Proc {
    DistributedGroup::builder(lease)
        .ttl(Duration::from_secs(10))
        .poll_interval(Duration::from_millis(20))
        .lease_timeout(Duration::from_millis(500))
        .build(Group::new())
        .unwrap()
}

#[derive(Clone, Default)]
struct World {
    cache: Arc<Mutex<HashMap<u32, u64>>>,
    backend_calls: Arc<AtomicUsize>,
}

impl World {
    /// A caller: the shared cache, then `proc`; the fill waits for `gate` (if any) before it
    /// stores.
    async fn call(
        &self,
        proc: &Proc,
        key: u32,
        gate: Option<Arc<Notify>>,
    ) -> Result<u64, FlightError<String>> {
        if let Some(hit) = self.cache.lock().unwrap().get(&key).copied() {
            return Ok(hit);
        }
        let recheck = || async { self.cache.lock().unwrap().get(&key).copied() };
        let fill = || async {
            self.backend_calls.fetch_add(1, SeqCst);
            if let Some(gate) = gate {
                gate.notified().await;
            }
            let value = u64::from(key) + 1000;
            self.cache.lock().unwrap().insert(key, value);
            Ok(value)
        };
        proc.run(key, recheck, fill).await
    }
}

pub(crate) async fn two_processes_fill_each_key_once_through_redis(server: RedisServer) {
    let world = World::default();
    let (a, b) = (process(lease(&server.url())), process(lease(&server.url())));
    let gate = Arc::new(Notify::new());
    let mut tasks = Vec::new();
    for key in 0..10u32 {
        for caller in 0..10 {
            let (world, proc, gate) = (
                world.clone(),
                if caller % 2 == 0 {
                    a.clone()
                } else {
                    b.clone()
                },
                gate.clone(),
            );
            tasks.push(tokio::spawn(async move {
                world.call(&proc, key, Some(gate)).await
            }));
        }
    }
    // Let every leader reach the lease before any fill may finish.
    tokio::time::timeout(HANG_GUARD, async {
        while a.stats().granted
            + b.stats().granted
            + a.stats().held_elsewhere
            + b.stats().held_elsewhere
            < 20
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("both processes' leaders asked the lease");
    loop {
        gate.notify_waiters();
        if tasks.iter().all(|t| t.is_finished()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for (i, task) in tasks.into_iter().enumerate() {
        let key = (i / 10) as u32;
        assert_eq!(task.await.unwrap(), Ok(u64::from(key) + 1000));
    }
    assert_eq!(
        world.backend_calls.load(SeqCst),
        10,
        "one backend call per key, not one per process"
    );
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.granted + sb.granted, 10, "{sa:?} {sb:?}");
    assert_eq!(sa.failed_open + sb.failed_open, 0);
}

pub(crate) async fn killing_redis_mid_fill_fails_open_and_nothing_hangs(mut server: RedisServer) {
    let world = World::default();
    let (a, b) = (process(lease(&server.url())), process(lease(&server.url())));

    // A leads key 1 and key 2 and is filling both (gated); B waits on key 2's lease.
    let (gate1, gate2) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let a1 = tokio::spawn({
        let (world, a, gate) = (world.clone(), a.clone(), gate1.clone());
        async move { world.call(&a, 1, Some(gate)).await }
    });
    let a2 = tokio::spawn({
        let (world, a, gate) = (world.clone(), a.clone(), gate2.clone());
        async move { world.call(&a, 2, Some(gate)).await }
    });
    tokio::time::timeout(HANG_GUARD, async {
        while world.backend_calls.load(SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("A started both fills");
    assert_eq!(a.stats().granted, 2);
    let b2 = tokio::spawn({
        let (world, b) = (world.clone(), b.clone());
        async move { world.call(&b, 2, None).await }
    });
    tokio::time::timeout(HANG_GUARD, async {
        while b.stats().held_elsewhere < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("B found key 2's lease held by A");

    server.kill();

    // B's next poll finds the lease service gone and fills at once, while A's fill of key 2 is
    // still blocked: B is not waiting on A any more.
    let b2 = tokio::time::timeout(HANG_GUARD, b2)
        .await
        .expect("B hung after Redis died")
        .unwrap();
    assert_eq!(b2, Ok(1002));
    assert!(!a2.is_finished());
    assert_eq!(b.stats().failed_open, 1);

    // A's fill of key 1 completes; its release fails in the background, harmlessly.
    gate1.notify_one();
    let a1 = tokio::time::timeout(HANG_GUARD, a1)
        .await
        .expect("A hung")
        .unwrap();
    assert_eq!(a1, Ok(1001));
    gate2.notify_one();
    assert_eq!(
        tokio::time::timeout(HANG_GUARD, a2)
            .await
            .expect("A hung")
            .unwrap(),
        Ok(1002)
    );

    // New cold keys on both processes, Redis still down: every call fills and returns.
    let mut tasks = Vec::new();
    for key in 10..30u32 {
        for proc in [&a, &b] {
            let (world, proc) = (world.clone(), proc.clone());
            tasks.push(tokio::spawn(
                async move { world.call(&proc, key, None).await },
            ));
        }
    }
    for task in tasks {
        let out = tokio::time::timeout(HANG_GUARD, task)
            .await
            .expect("a caller hung")
            .unwrap();
        assert!(out.is_ok(), "{out:?}");
    }
    tokio::time::timeout(HANG_GUARD, async {
        while a.pending_releases() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("background releases finished");
    assert_eq!(a.stats().release_failures, 2, "{:?}", a.stats());
    assert!(a.stats().failed_open + b.stats().failed_open >= 2);
}

pub(crate) async fn the_lease_reconnects_when_redis_comes_back(mut server: RedisServer) {
    let lease = lease(&server.url());
    let ttl = Duration::from_secs(10);
    assert!(matches!(
        lease.try_acquire("k", ttl).await,
        Ok(Acquire::Acquired(_))
    ));
    server.kill();
    let down = tokio::time::timeout(HANG_GUARD, lease.try_acquire("k", ttl))
        .await
        .unwrap();
    assert!(down.is_err(), "{down:?}");
    server
        .restart()
        .expect("restart redis-server on the same port");
    // The back-off is short; within a few attempts the lease reconnects to the (empty) server.
    let mut answer = Err(LeaseError::unavailable("not tried"));
    for _ in 0..100 {
        answer = tokio::time::timeout(HANG_GUARD, lease.try_acquire("k", ttl))
            .await
            .unwrap();
        if answer.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(matches!(answer, Ok(Acquire::Acquired(_))), "{answer:?}");
}

/// A "Redis" that accepts connections and never says a word: every call must end in an error
/// within the configured timeouts. Needs no redis-server.
pub(crate) async fn a_redis_that_never_answers_costs_a_timeout_not_a_hang() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", silent.local_addr().unwrap());
    let lease = lease(&url);
    for _ in 0..3 {
        let answer =
            tokio::time::timeout(HANG_GUARD, lease.try_acquire("k", Duration::from_secs(1)))
                .await
                .expect("the lease call hung");
        assert!(
            matches!(
                answer,
                Err(LeaseError::TimedOut(_) | LeaseError::Unavailable(_))
            ),
            "{answer:?}"
        );
    }
    // And a group over it fills anyway.
    let world = World::default();
    let proc = process(lease);
    let out = tokio::time::timeout(HANG_GUARD, world.call(&proc, 1, None))
        .await
        .unwrap();
    assert_eq!(out, Ok(1001));
    assert_eq!(proc.stats().failed_open, 1);
    drop(silent);
}

/// A connect slower than the callers' own limit (here each call gives up after 50 ms, the
/// connect takes about 150 ms: a Redis across a region, or TLS) still completes on its own
/// task, and the calls after it use the connection. Before, each call's connect was dropped
/// with the call and the next started over: no call ever got a connection, and no back-off
/// started either (every call paid its full limit).
pub(crate) async fn a_connect_slower_than_the_callers_limit_still_completes(server: RedisServer) {
    let target = server.port();
    let delaying = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}/", delaying.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut client, _)) = delaying.accept().await {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(150)).await;
                let Ok(mut redis) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut client, &mut redis).await;
            });
        }
    });
    let lease = Arc::new(
        RedisLease::builder(&url)
            .connect_timeout(Duration::from_secs(5))
            .command_timeout(Duration::from_secs(5))
            .build()
            .unwrap(),
    );
    let mut granted = false;
    for _ in 0..100 {
        let answer = tokio::time::timeout(
            Duration::from_millis(50),
            lease.try_acquire("k", HANG_GUARD),
        )
        .await;
        if let Ok(Ok(Acquire::Acquired(_))) = answer {
            granted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(granted, "no call within 50 ms ever got a connection");
}

/// Redis answers later than the lease waits (replies held back until the call has timed out,
/// `command_timeout` 100 ms): the `SET` took the lease, but the call timed out. The lease is
/// released in the background under the token the call made. Before, it stayed held by nobody
/// for its ttl: every process, this one's next leader included, waited that long on the key.
pub(crate) async fn an_acquisition_that_times_out_does_not_leave_the_lease_held(
    server: RedisServer,
) {
    let address = Forwarder::start(server.port()).await;
    let url = address.url();
    let lease = impatient_lease(&url);
    // Connected while Redis answers promptly (connection 1); then its answers stop.
    let warm = lease.try_acquire("warm", Duration::from_secs(60)).await;
    assert!(matches!(warm, Ok(Acquire::Acquired(_))), "{warm:?}");
    address.hold(1, true);
    let answer = lease.try_acquire("k", Duration::from_secs(60)).await;
    // The connection's own response timeout, or the lease's: either way, no answer.
    assert!(answer.is_err(), "{answer:?}");
    address.hold(1, false);
    assert!(
        exists_within(&server, &lease.redis_key("k"), false).await,
        "the lease the timed-out call took is still held"
    );
    // The same for a call dropped (its caller gave up first) after its `SET` was sent.
    let patient = RedisLease::builder(&url)
        .connect_timeout(Duration::from_secs(5))
        .command_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let warm = patient.try_acquire("warm2", Duration::from_secs(60)).await;
    assert!(matches!(warm, Ok(Acquire::Acquired(_))), "{warm:?}");
    let connection = address.accepted();
    address.hold(connection, true);
    let gave_up = tokio::time::timeout(
        Duration::from_millis(50),
        patient.try_acquire("d", Duration::from_secs(60)),
    )
    .await;
    assert!(gave_up.is_err(), "the call was dropped before its answer");
    address.hold(connection, false);
    assert!(
        exists_within(&server, &patient.redis_key("d"), false).await,
        "the lease the dropped call took is still held"
    );
}

/// An acquisition whose `SET` arrives late (a lost packet, retransmitted after the call timed
/// out and its background release already ran, on a new connection, finding nothing): the
/// release is sent again, so the lease is not left held by a token nobody has for its ttl.
/// Found by review: the one release could overtake its own `SET`.
pub(crate) async fn a_set_that_lands_after_its_release_is_released_again(server: RedisServer) {
    let address = Forwarder::start(server.port()).await;
    let lease = impatient_lease(&address.url());
    let warm = lease.try_acquire("warm", Duration::from_secs(60)).await;
    assert!(matches!(warm, Ok(Acquire::Acquired(_))), "{warm:?}");
    // The `SET` of "k" waits in the network while the call times out and the background
    // release runs on connection 2.
    address.hold_requests(1, true);
    let answer = lease.try_acquire("k", Duration::from_secs(60)).await;
    assert!(answer.is_err(), "{answer:?}");
    tokio::time::timeout(HANG_GUARD, async {
        while address.accepted() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the background release connects");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Then the `SET` lands: the lease is held, by a token nobody has.
    address.hold_requests(1, false);
    let key = lease.redis_key("k");
    assert!(
        exists_within(&server, &key, true).await,
        "the late SET landed"
    );
    let released = exists_within(&server, &key, false).await;
    assert!(released, "the late SET's lease is still held");
}

/// A lease at `url` that connects patiently (5 s) but waits 100 ms for a command's answer.
fn impatient_lease(url: &str) -> RedisLease {
    RedisLease::builder(url)
        .connect_timeout(Duration::from_secs(5))
        .command_timeout(Duration::from_millis(100))
        .reconnect_backoff(Duration::from_millis(10))
        .build()
        .unwrap()
}

/// Whether `key` comes to exist (`exists`), or to be gone, on `server` within `HANG_GUARD`.
async fn exists_within(server: &RedisServer, key: &str, exists: bool) -> bool {
    let mut admin = crate::forwarder::admin(server).await;
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let found: i64 = redis::cmd("EXISTS")
                .arg(key)
                .query_async(&mut admin)
                .await
                .unwrap();
            if (found == 1) == exists {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok()
}

/// A failover behind one address (a DNS name or virtual IP that moves to the new primary): the
/// old primary is demoted to a replica, so the lease's connection to it answers `-READONLY` to
/// every write (a script's too). The call that gets that answer fails open; the lease drops the connection, and
/// the next call reconnects and reaches the new primary. Before, redis-rs's "not retryable"
/// kept the connection: every acquisition failed open until the socket died.
pub(crate) async fn a_failover_behind_one_address_is_followed(old_primary: RedisServer) {
    let new_primary = RedisServer::start().expect("a second redis-server");
    let address = Forwarder::start(old_primary.port()).await;
    let lease = RedisLease::builder(address.url())
        .connect_timeout(Duration::from_secs(5))
        .command_timeout(Duration::from_secs(5))
        .reconnect_backoff(Duration::from_millis(10))
        .build()
        .unwrap();
    let before = lease.try_acquire("before", HANG_GUARD).await;
    let Ok(Acquire::Acquired(token)) = before else {
        panic!("{before:?}")
    };
    // The failover: the old primary follows the new one, the address moves.
    crate::forwarder::fail_over(&old_primary, &new_primary, &address).await;
    // A script's write (the release's compare-and-delete) on the demoted primary: refused
    // (`SET` is refused the same way: the connector's unit test reads both replies).
    let during = lease.release("before", &token).await;
    assert!(
        matches!(&during, Err(LeaseError::Unavailable(_))),
        "a write to the demoted primary: {during:?}"
    );
    let after = lease.try_acquire("k", HANG_GUARD).await;
    assert!(
        matches!(after, Ok(Acquire::Acquired(_))),
        "the next call reaches the new primary: {after:?}"
    );
    assert_eq!(address.accepted(), 2, "one reconnect");
    let new = redis::Client::open(new_primary.url().as_str()).unwrap();
    let mut new = new.get_multiplexed_async_connection().await.unwrap();
    let held: i64 = redis::cmd("EXISTS")
        .arg(lease.redis_key("k"))
        .query_async(&mut new)
        .await
        .unwrap();
    assert_eq!(held, 1, "the lease is held on the new primary");
}

/// A command that fails late on a connection the lease has already replaced forgets only that
/// connection: two acquisitions are in flight on connection 1 when its replies stop; the first
/// times out (connection 1 is dropped), a call reconnects (connection 2), then the second
/// times out. Before, that late failure dropped connection 2 as well, and the next call paid a
/// reconnect (a third connection) for nothing.
pub(crate) async fn a_late_failure_on_an_old_connection_leaves_the_new_one(server: RedisServer) {
    let address = Forwarder::start(server.port()).await;
    let command_timeout = Duration::from_secs(1);
    let lease = Arc::new(
        RedisLease::builder(address.url())
            .connect_timeout(Duration::from_secs(5))
            .command_timeout(command_timeout)
            .reconnect_backoff(Duration::from_millis(10))
            .build()
            .unwrap(),
    );
    let warm = lease.try_acquire("warm", HANG_GUARD).await;
    assert!(matches!(warm, Ok(Acquire::Acquired(_))), "{warm:?}");
    address.hold(1, true);
    let first = tokio::spawn({
        let lease = Arc::clone(&lease);
        async move { lease.try_acquire("a", HANG_GUARD).await }
    });
    // Half a command timeout later (the ordering margin, not an assertion), the second.
    tokio::time::sleep(command_timeout / 2).await;
    let second = tokio::spawn({
        let lease = Arc::clone(&lease);
        async move { lease.try_acquire("b", HANG_GUARD).await }
    });
    // The connection's own response timeout, or the lease's: either way, no answer.
    let first = first.await.unwrap();
    assert!(first.is_err(), "{first:?}");
    let fresh = lease.try_acquire("c", HANG_GUARD).await;
    assert!(matches!(fresh, Ok(Acquire::Acquired(_))), "{fresh:?}");
    assert_eq!(address.accepted(), 2, "the first timeout's reconnect");
    let second = second.await.unwrap();
    assert!(second.is_err(), "{second:?}");
    let later = lease.try_acquire("d", HANG_GUARD).await;
    assert!(matches!(later, Ok(Acquire::Acquired(_))), "{later:?}");
    assert_eq!(
        address.accepted(),
        2,
        "the late failure on connection 1 dropped connection 2"
    );
    address.hold(1, false);
}
