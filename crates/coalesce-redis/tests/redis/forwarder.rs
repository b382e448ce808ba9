//! A TCP forwarder between the crate's clients and `redis-server`, for what a test must do to
//! the path between them: point one address at another server (a failover behind a stable DNS
//! name or virtual IP), hold one connection's replies back (a slow or stalled server), or
//! hold its requests back (a lost packet the client's kernel retransmits later).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coalesce_redis::test_server::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Forwards every connection made to [`url`](Forwarder::url) to the current target's port on
/// loopback (the target as of the accept: a connection stays where it was opened).
pub(crate) struct Forwarder {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    target: AtomicU16,
    /// Connections accepted so far.
    accepted: AtomicUsize,
    /// Connections (numbered from 1, in accept order) whose replies are held back.
    held: Mutex<HashSet<usize>>,
    /// Connections whose requests are held back (delivered once let through, even if the
    /// client closed meanwhile, as a kernel delivers what it had sent).
    requests_held: Mutex<HashSet<usize>>,
}

impl Forwarder {
    /// A forwarder to `127.0.0.1:target`, listening on a free loopback port.
    pub(crate) async fn start(target: u16) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            target: AtomicU16::new(target),
            accepted: AtomicUsize::new(0),
            held: Mutex::new(HashSet::new()),
            requests_held: Mutex::new(HashSet::new()),
        });
        let state = Arc::clone(&shared);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let number = state.accepted.fetch_add(1, SeqCst) + 1;
                let port = state.target.load(SeqCst);
                let Ok(redis) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                    continue;
                };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_redis, mut to_redis) = redis.into_split();
                let requests = Arc::clone(&state);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n) = from_client.read(&mut buf).await {
                        while requests.requests_held.lock().unwrap().contains(&number) {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        if n == 0 || to_redis.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
                let state = Arc::clone(&state);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n) = from_redis.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                        while state.held.lock().unwrap().contains(&number) {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        if to_client.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self { addr, shared }
    }

    /// `redis://` URL of the forwarder.
    pub(crate) fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// New connections go to `127.0.0.1:port` from now on.
    pub(crate) fn retarget(&self, port: u16) {
        self.shared.target.store(port, SeqCst);
    }

    /// Connections accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.shared.accepted.load(SeqCst)
    }

    /// Holds back (`true`) or lets through the replies of connection `number` (from 1, in
    /// accept order).
    pub(crate) fn hold(&self, number: usize, held: bool) {
        let mut set = self.shared.held.lock().unwrap();
        if held {
            set.insert(number);
        } else {
            set.remove(&number);
        }
    }

    /// Holds back (`true`) or lets through the requests of connection `number`.
    pub(crate) fn hold_requests(&self, number: usize, held: bool) {
        let mut set = self.shared.requests_held.lock().unwrap();
        if held {
            set.insert(number);
        } else {
            set.remove(&number);
        }
    }
}

/// A failover behind `address`: `old` becomes a replica of `new` (its connections stay open
/// and answer `-READONLY` to writes), and new connections to `address` reach `new`.
pub(crate) async fn fail_over(old: &RedisServer, new: &RedisServer, address: &Forwarder) {
    replicate(old, new).await;
    address.retarget(new.port());
}

/// A failover behind `address` whose tooling first moves the address, then closes the old
/// primary's normal clients (`CLIENT KILL TYPE normal`, as Sentinel does; pub/sub clients
/// stay), then makes it a replica of `new`.
pub(crate) async fn fail_over_killing_clients(
    old: &RedisServer,
    new: &RedisServer,
    address: &Forwarder,
) {
    address.retarget(new.port());
    kill_clients(old, "normal").await;
    // Let every client see its connection close (the backplane's role probe among them)
    // before the node changes role.
    tokio::time::sleep(Duration::from_millis(300)).await;
    replicate(old, new).await;
}

/// A connection to `server` for the test's own commands.
pub(crate) async fn admin(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(server.url().as_str()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// `replica` replicates `primary` from now on (`REPLICAOF`).
pub(crate) async fn replicate(replica: &RedisServer, primary: &RedisServer) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query_async(&mut admin(replica).await)
        .await
        .unwrap();
}

/// Closes `server`'s clients of type `kind` (`normal`, `pubsub`): `CLIENT KILL TYPE`.
pub(crate) async fn kill_clients(server: &RedisServer, kind: &str) {
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg(kind)
        .query_async(&mut admin(server).await)
        .await
        .unwrap();
}
