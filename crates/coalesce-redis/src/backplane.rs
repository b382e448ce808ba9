//! The backplane: a Redis pub/sub subscriber that tells this process's tiers to drop their L1
//! copy of a key invalidated anywhere in the fleet, and acknowledges each message so the
//! invalidating process can wait until every subscriber has dropped its copy.
//!
//! Messages on the invalidation channel are `origin (8 bytes) | nonce (8 bytes) | key bytes`
//! (on `{channel}:all`, a fleet-wide invalidation, `origin | nonce` alone: drop every entry);
//! after applying one, the subscriber publishes the nonce on the origin's own ack channel
//! (`{channel}:ack:{origin in hex}`), to which only the origin subscribes.
//!
//! Fill announcements: the fenced write's script publishes the key's bytes on
//! `{channel}:filled` when it stored; the subscriber tells its tiers
//! ([`L1Sink::filled_encoded`]), whose leaders waiting for another process's fill re-check L2
//! at once. Not acknowledged: a lost one costs the waiter one poll interval.
//!
//! **Losing the subscription.** Redis pub/sub is fire-and-forget: a message published while a
//! subscriber is disconnected is lost for it. The subscriber task notices a loss when its
//! connection closes or a `PING` on it (every `ping_interval`) fails or times out, or when its
//! node, a primary when last asked, answers `ROLE` as a replica (a failover behind the same
//! address: asked with each ping on a plain connection opened with the subscription, which
//! also checks that it reaches the subscription's node), then reconnects on its own (after
//! `reconnect_backoff`, forever). After any loss of a live subscription the acknowledgement
//! and second-level connections start over too: the address may lead elsewhere now. An
//! address that keeps leading to a replica (5 subscriptions in a row ended so, backing off)
//! is accepted: the next subscription stays there, as on a replica from the start, and the
//! primary's invalidations reach it through replication. Once `SUBSCRIBE` is confirmed
//! again it calls [`L1Sink::invalidate_all`] on every attached tier: every L1 entry stored
//! before that moment is dropped and every fill that started before it is fenced. This is a
//! superset of "entries written before the loss": an entry written during the gap may also have
//! missed an invalidation, so it goes too. Safe because every invalidation published after the
//! confirmed subscription reaches this process, and everything that could have missed one is
//! gone; the cost is a cold L1 (L2 still answers). The first subscription clears L1 the same
//! way (anything cached before it may have missed messages). While disconnected, L1 entries are
//! served until their ttl (fail open); the invalidating process sees this process missing from
//! `Invalidated::receivers`.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::time::timeout;
use ttl_lru::second_level::L1Sink;

use crate::connection::Connector;

/// Counts of what the backplane did, since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackplaneStats {
    /// Whether the subscriber task runs (from the first attach of a tier on a tokio runtime).
    pub running: bool,
    /// Whether the subscription is live now.
    pub subscribed: bool,
    /// Confirmed subscriptions (the first and every re-subscription).
    pub subscriptions: u64,
    /// Subscriptions lost (connection closed, ping failed or timed out, or its node went from
    /// primary to replica: a failover behind the same address).
    pub losses: u64,
    /// Invalidation messages received and applied to the attached tiers.
    pub received: u64,
    /// Messages that did not parse (ignored after dropping every L1 entry).
    pub malformed: u64,
    /// Acknowledgements sent and received by the invalidating process's subscription.
    pub acks_sent: u64,
    /// Acknowledgements that could not be published, or that nobody received (the
    /// invalidating process gone, or the acknowledgement connection on another node than its
    /// subscription).
    pub ack_failures: u64,
    /// Fill announcements received (another process's fenced write landed in L2).
    pub fills_received: u64,
}

#[derive(Default)]
struct Counters {
    subscriptions: AtomicU64,
    losses: AtomicU64,
    received: AtomicU64,
    malformed: AtomicU64,
    acks_sent: AtomicU64,
    ack_failures: AtomicU64,
    fills_received: AtomicU64,
}

/// Settings of the subscriber.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) channel: String,
    /// `{channel}:filled`, derived by [`Backplane::new`].
    pub(crate) fill_channel: String,
    /// `{channel}:all` (fleet-wide invalidations), derived by [`Backplane::new`].
    pub(crate) all_channel: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) reconnect_backoff: Duration,
    pub(crate) ping_interval: Duration,
}

/// What the subscriber task and the invalidating calls share.
pub(crate) struct Shared {
    client: redis::Client,
    settings: Settings,
    origin: u64,
    /// Publishes acknowledgements (a connection of its own: the subscriber's is in pub/sub mode).
    acks: Connector,
    /// The second level's connector: reset with `acks` when the subscription's node turns out
    /// to be a replica (a failover behind the same address), since its reads never fail there.
    l2: Connector,
    /// A role probe of this backplane has seen a primary (a replica then means a failover).
    seen_primary: AtomicBool,
    /// Subscriptions ended in a row because their node was a replica (the re-subscribe
    /// back-off doubles with each, up to a minute: each re-subscription empties L1).
    demotions: AtomicU64,
    sinks: parking_lot::Mutex<Vec<Weak<dyn L1Sink>>>,
    waiters: parking_lot::Mutex<HashMap<u64, mpsc::UnboundedSender<()>>>,
    next_nonce: AtomicU64,
    subscribed: watch::Sender<bool>,
    live: AtomicBool,
    counters: Counters,
}

/// The backplane of one `RedisSecondLevel`: its subscriber task runs from the first
/// [`attach`](Backplane::attach) until this is dropped.
pub(crate) struct Backplane {
    shared: Arc<Shared>,
    task: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Backplane {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
    }
}

/// A registered wait for acknowledgements of one message; unregisters on drop.
pub(crate) struct AckWait<'a> {
    shared: &'a Shared,
    nonce: u64,
    rx: mpsc::UnboundedReceiver<()>,
}

impl Drop for AckWait<'_> {
    fn drop(&mut self) {
        self.shared.waiters.lock().remove(&self.nonce);
    }
}

impl AckWait<'_> {
    /// The message to publish: origin, nonce, key.
    pub(crate) fn message(&self, key: &[u8]) -> Vec<u8> {
        let mut message = Vec::with_capacity(16 + key.len());
        message.extend_from_slice(&self.shared.origin.to_be_bytes());
        message.extend_from_slice(&self.nonce.to_be_bytes());
        message.extend_from_slice(key);
        message
    }

    /// Waits for `expected` acknowledgements, at most `limit`, and only while this process's
    /// subscription is live (acknowledgements arrive through it: while it is down none can
    /// come, though the other processes still apply the invalidation, and waiting would stall
    /// every `invalidate` for the whole `limit`: found by review); returns how many came.
    ///
    /// # Cancellation
    /// Dropped, it unregisters; late acknowledgements are discarded.
    pub(crate) async fn wait(&mut self, expected: u64, limit: Duration) -> u64 {
        let mut acked = 0;
        let deadline = tokio::time::Instant::now() + limit;
        let mut live = self.shared.subscribed.subscribe();
        if !*live.borrow_and_update() {
            return 0;
        }
        while acked < expected {
            tokio::select! {
                got = tokio::time::timeout_at(deadline, self.rx.recv()) => match got {
                    Ok(Some(())) => acked += 1,
                    Ok(None) | Err(_) => break,
                },
                _ = live.wait_for(|live| !*live) => break,
            }
        }
        acked
    }
}

impl Backplane {
    pub(crate) fn new(client: redis::Client, mut settings: Settings, l2: Connector) -> Self {
        settings.fill_channel = format!("{}:filled", settings.channel);
        settings.all_channel = format!("{}:all", settings.channel);
        let acks = Connector::new(
            client.clone(),
            settings.connect_timeout,
            settings.command_timeout,
            settings.reconnect_backoff,
        );
        Backplane {
            shared: Arc::new(Shared {
                client,
                settings,
                origin: origin_id(),
                acks,
                l2,
                seen_primary: AtomicBool::new(false),
                demotions: AtomicU64::new(0),
                sinks: parking_lot::Mutex::new(Vec::new()),
                waiters: parking_lot::Mutex::new(HashMap::new()),
                next_nonce: AtomicU64::new(0),
                subscribed: watch::Sender::new(false),
                live: AtomicBool::new(false),
                counters: Counters::default(),
            }),
            task: parking_lot::Mutex::new(None),
        }
    }

    /// Registers `sink` and starts the subscriber task if it is not running (needs a tokio
    /// runtime; without one, the sink is kept and the task starts at the next attach that has one).
    pub(crate) fn attach(&self, sink: Weak<dyn L1Sink>) {
        {
            let mut sinks = self.shared.sinks.lock();
            sinks.retain(|s| s.strong_count() > 0);
            sinks.push(sink);
        }
        self.ensure_running();
    }

    /// Starts the subscriber task unless it runs already (on the current tokio runtime;
    /// without one it cannot run, and says so). Returns whether it runs. A task that ended
    /// (the runtime it ran on shut down: an init runtime, a restarted worker's) is started
    /// again; its end already emptied every attached L1 (see `Ended`).
    pub(crate) fn ensure_running(&self) -> bool {
        let mut task = self.task.lock();
        if task.as_ref().is_none_or(|t| t.is_finished()) {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => *task = Some(rt.spawn(subscribe_forever(Arc::clone(&self.shared)))),
                Err(_) => {
                    tracing::warn!("no tokio runtime: the backplane subscriber is not running")
                }
            }
        }
        task.is_some()
    }

    /// Registers a wait for the acknowledgements of a message about to be published.
    pub(crate) fn expect_acks(&self) -> AckWait<'_> {
        let nonce = self.shared.next_nonce.fetch_add(1, Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        self.shared.waiters.lock().insert(nonce, tx);
        AckWait {
            shared: &self.shared,
            nonce,
            rx,
        }
    }

    pub(crate) fn channel(&self) -> &str {
        &self.shared.settings.channel
    }

    pub(crate) fn fill_channel(&self) -> &str {
        &self.shared.settings.fill_channel
    }

    pub(crate) fn all_channel(&self) -> &str {
        &self.shared.settings.all_channel
    }

    /// Waits until the subscription is live.
    ///
    /// # Cancellation
    /// Safe to drop at any point.
    /// Waits until the subscription is live, starting the subscriber if no tier attached yet
    /// (waiting for a subscriber nobody started would never end). Outside a tokio runtime
    /// nothing can subscribe, so it returns at once.
    pub(crate) async fn wait_subscribed(&self) {
        let mut rx = self.shared.subscribed.subscribe();
        if !self.ensure_running() {
            return;
        }
        let _ = rx.wait_for(|live| *live).await;
    }

    pub(crate) fn stats(&self) -> BackplaneStats {
        let c = &self.shared.counters;
        BackplaneStats {
            running: self.task.lock().as_ref().is_some_and(|t| !t.is_finished()),
            subscribed: self.shared.live.load(Relaxed),
            subscriptions: c.subscriptions.load(Relaxed),
            losses: c.losses.load(Relaxed),
            received: c.received.load(Relaxed),
            malformed: c.malformed.load(Relaxed),
            acks_sent: c.acks_sent.load(Relaxed),
            ack_failures: c.ack_failures.load(Relaxed),
            fills_received: c.fills_received.load(Relaxed),
        }
    }
}

fn ack_channel(channel: &str, origin: u64) -> String {
    format!("{channel}:ack:{origin:016x}")
}

/// A per-instance random number naming this backplane's ack channel (seeded by std's
/// `RandomState`, the process id and the time).
fn origin_id() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    hasher.write_u128(now.as_nanos());
    hasher.finish()
}

impl Shared {
    fn sinks(&self) -> Vec<Arc<dyn L1Sink>> {
        self.sinks.lock().iter().filter_map(Weak::upgrade).collect()
    }

    fn set_live(&self, live: bool) {
        self.live.store(live, Relaxed);
        self.subscribed.send_replace(live);
    }
}

/// The subscriber task: subscribe, apply messages until the subscription is lost, back off,
/// repeat. Ends only when dropped: aborted (its `Backplane` dropped) or with its runtime.
async fn subscribe_forever(shared: Arc<Shared>) {
    let _ended = Ended(Arc::clone(&shared));
    loop {
        if let Err(error) = subscribe_once(&shared).await {
            tracing::warn!(%error, "backplane subscription lost or refused; re-subscribing");
        }
        if shared.live.load(Relaxed) {
            shared.set_live(false);
            shared.counters.losses.fetch_add(1, Relaxed);
            // The address may lead elsewhere now (a failover or a move behind it): the
            // acknowledgement and second-level connections made through it start over with
            // the next subscription, whatever ended this one. (Only a demotion did this
            // before; a loss by timeout or a closed connection in the same failover left the
            // acks published on the old node, where the origin no longer listens.)
            shared.acks.reset();
            shared.l2.reset();
        }
        // The address may point at the demoted node for a while (a DNS ttl): each
        // re-subscription there ends again and empties L1, so those back off further.
        let demotions = shared.demotions.load(Relaxed).min(16) as u32;
        let backoff = shared
            .settings
            .reconnect_backoff
            .saturating_mul(1 << demotions.saturating_sub(1).min(15))
            .min(MAX_DEMOTED_BACKOFF.max(shared.settings.reconnect_backoff));
        tokio::time::sleep(backoff).await;
    }
}

/// The longest wait before re-subscribing after subscriptions that kept landing on a replica.
const MAX_DEMOTED_BACKOFF: Duration = Duration::from_secs(60);

/// Subscriptions ended in a row because their node was a replica, after which the next one
/// that lands on a replica stays there (the address is not coming back to a primary).
const ACCEPTED_DEMOTIONS: u64 = 5;

/// Dropped with the subscriber task. From then on no invalidation reaches the attached L1s
/// until a new task subscribes (`ensure_running`, at the next attach, wait or L2 read), so
/// they cannot keep what they hold: it is dropped now (the resync a new subscription would
/// do), and the subscription reads as lost. Before, a task that died with its runtime left
/// every L1 served unchecked for ever, and the stats said it was subscribed.
struct Ended(Arc<Shared>);

impl Drop for Ended {
    fn drop(&mut self) {
        let shared = &self.0;
        if shared.live.load(Relaxed) {
            shared.set_live(false);
            shared.counters.losses.fetch_add(1, Relaxed);
        }
        for tier in shared.sinks() {
            tier.invalidate_all();
        }
    }
}

/// Why one subscription ended.
#[derive(Debug, thiserror::Error)]
enum Lost {
    #[error("{0}")]
    Redis(#[from] redis::RedisError),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    #[error("the connection closed")]
    Closed,
    #[error("the subscription's node became a replica (a failover behind the same address)")]
    Demoted,
    #[error("the role probe reached another node than the subscription's (the address moved)")]
    Unpaired,
}

async fn bounded<T>(
    limit: Duration,
    fut: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, Lost> {
    match timeout(limit, fut).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(Lost::TimedOut(limit)),
    }
}

async fn subscribe_once(shared: &Arc<Shared>) -> Result<(), Lost> {
    let s = &shared.settings;
    let pubsub = bounded(s.connect_timeout, shared.client.get_async_pubsub()).await?;
    // Opened right after the subscriber's connection, through the same address, so to the
    // same node as a rule: it asks that node's role as the subscriber pings (see the ping arm).
    let mut probe = Probe::open(shared).await;
    let (mut sink, mut stream) = pubsub.split();
    let acks = ack_channel(&s.channel, shared.origin);
    bounded(
        s.command_timeout,
        sink.subscribe(&[
            s.channel.as_str(),
            acks.as_str(),
            s.fill_channel.as_str(),
            s.all_channel.as_str(),
        ]),
    )
    .await?;
    // Subscribed: every message published from now on reaches us. Anything cached or being
    // filled before now may have missed one: drop it all (see the module docs).
    shared.counters.subscriptions.fetch_add(1, Relaxed);
    for tier in shared.sinks() {
        tier.invalidate_all();
    }
    shared.set_live(true);
    let mut ping = tokio::time::interval(s.ping_interval);
    ping.tick().await;
    loop {
        tokio::select! {
            message = stream.next() => {
                let Some(message) = message else { return Err(Lost::Closed) };
                handle(shared, &acks, &message);
            }
            _ = ping.tick() => {
                // Side by side: the messages wait for the longer of the two, not their sum.
                let (pinged, role) = tokio::join!(
                    bounded(s.command_timeout, sink.ping::<redis::Value>()),
                    probe.role(shared, &acks),
                );
                // A failover behind the same address leaves this subscription on the old
                // primary, where PING, PUBLISH and reads go on working, so nothing else ends
                // it: a full resync there drops messages, and a replica cut off from the new
                // primary delivers none. A replica counts only once this backplane has seen a
                // primary (on any subscription: Sentinel kills the old primary's clients, and
                // the next subscription may land on it again while the address still points
                // there); one pointed at a replica from the start never re-subscribes for it.
                // The role is read before the ping's outcome: a demoted node loading the new
                // primary's data may fail the ping in the same tick (`-LOADING`).
                match role {
                    Role::Primary => {
                        shared.seen_primary.store(true, Relaxed);
                        shared.demotions.store(0, Relaxed);
                    }
                    Role::Replica if shared.seen_primary.load(Relaxed) => {
                        let demotions = shared.demotions.fetch_add(1, Relaxed) + 1;
                        if demotions >= ACCEPTED_DEMOTIONS {
                            // The address keeps leading to this replica (it was pointed at a
                            // node's own address, since demoted for good): stay subscribed
                            // here, as on a replica from the start. Its primary's invalidations
                            // reach it through replication; re-subscribing for ever emptied
                            // L1 once a minute and left it unchecked in between.
                            shared.seen_primary.store(false, Relaxed);
                            shared.demotions.store(0, Relaxed);
                            tracing::warn!(
                                demotions,
                                "the backplane's address keeps leading to a replica; staying subscribed there"
                            );
                        } else {
                            return Err(Lost::Demoted);
                        }
                    }
                    // Counted as a demotion for the back-off: an address that keeps sending the
                    // two connections to different nodes (round-robin DNS) re-subscribes less
                    // and less often instead of once per ping.
                    Role::Unpaired => {
                        shared.demotions.fetch_add(1, Relaxed);
                        return Err(Lost::Unpaired);
                    }
                    Role::Replica | Role::Unknown => {}
                }
                pinged?;
            }
        }
    }
}

/// A plain connection to the subscription's node, asking its `ROLE` (the subscriber's own
/// connection takes no command but PING in RESP2's pub/sub mode). Optional: without it (a
/// connect refused, `ROLE` not allowed) the subscription works as before, blind to a failover
/// behind its address.
///
/// Opened through the same address as the subscription, it usually reaches the same node,
/// but not always: reopened after a break (Sentinel closes a node's normal clients, not its
/// pub/sub ones) it follows the address, which may lead to the new primary by then, and would
/// answer "primary" for a subscription left on the demoted node. So each ask also checks the
/// pairing: `PUBSUB NUMSUB` of this backplane's own ack channel, which only its subscription
/// subscribes to and which a node counts for its own clients only, must be at least 1.
struct Probe {
    connection: Option<redis::aio::MultiplexedConnection>,
    /// Said once per subscription: `ROLE` was refused.
    warned: bool,
}

impl Probe {
    async fn open(shared: &Shared) -> Self {
        Probe {
            connection: Self::connect(shared).await,
            warned: false,
        }
    }

    async fn connect(shared: &Shared) -> Option<redis::aio::MultiplexedConnection> {
        let s = &shared.settings;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(s.connect_timeout))
            .set_response_timeout(Some(s.command_timeout));
        let attempt = shared
            .client
            .get_multiplexed_async_connection_with_config(&config);
        match timeout(s.connect_timeout, attempt).await {
            Ok(Ok(connection)) => Some(connection),
            Ok(Err(error)) => {
                tracing::debug!(%error, "backplane role probe not connected");
                None
            }
            Err(_elapsed) => None,
        }
    }

    /// The role of the node this probe reaches, or [`Role::Unpaired`] if that node does not
    /// hold this backplane's subscription (its `acks` channel). A connection that broke is
    /// opened again at the next ask (a network blip, an idle cut, Sentinel killing normal
    /// clients).
    async fn role(&mut self, shared: &Shared, acks: &str) -> Role {
        if self.connection.is_none() {
            self.connection = Self::connect(shared).await;
        }
        let Some(connection) = self.connection.as_mut() else {
            return Role::Unknown;
        };
        let limit = shared.settings.command_timeout;
        let mut pipe = redis::pipe();
        pipe.cmd("ROLE").cmd("PUBSUB").arg("NUMSUB").arg(acks);
        let asked = pipe.query_async::<(redis::Value, redis::Value)>(connection);
        match timeout(limit, asked).await {
            Ok(Ok((role, numsub))) => {
                if subscribers(&numsub) == Some(0) {
                    return Role::Unpaired;
                }
                parse_role(&role)
            }
            Ok(Err(error))
                if error.is_connection_dropped()
                    || error.is_io_error()
                    || error.is_unrecoverable_error() =>
            {
                self.connection = None;
                Role::Unknown
            }
            Ok(Err(error)) => {
                if !self.warned {
                    self.warned = true;
                    tracing::warn!(%error, "ROLE or PUBSUB NUMSUB refused: a failover behind the backplane's address goes unnoticed");
                }
                Role::Unknown
            }
            Err(_) => Role::Unknown,
        }
    }
}

/// What the role probe learned of the subscription's node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Primary,
    Replica,
    /// The probe reached a node that does not hold this backplane's subscription.
    Unpaired,
    /// No answer in time, a refusal, an unknown role.
    Unknown,
}

fn parse_role(role: &redis::Value) -> Role {
    match role {
        redis::Value::Array(parts) => match parts.first() {
            Some(redis::Value::BulkString(r)) if r.as_slice() == b"master" => Role::Primary,
            Some(redis::Value::BulkString(r))
                if r.as_slice() == b"slave" || r.as_slice() == b"replica" =>
            {
                Role::Replica
            }
            _ => Role::Unknown,
        },
        _ => Role::Unknown,
    }
}

/// The subscriber count of a `PUBSUB NUMSUB` reply for one channel (`[name, count]`, a map
/// in RESP3), if it has that shape.
fn subscribers(reply: &redis::Value) -> Option<i64> {
    match reply {
        redis::Value::Array(parts) => match parts.as_slice() {
            [_, redis::Value::Int(n)] => Some(*n),
            _ => None,
        },
        redis::Value::Map(pairs) => match pairs.as_slice() {
            [(_, redis::Value::Int(n))] => Some(*n),
            _ => None,
        },
        _ => None,
    }
}

fn handle(shared: &Arc<Shared>, acks: &str, message: &redis::Msg) {
    let payload = message.get_payload_bytes();
    if message.get_channel_name() == acks {
        if let Ok(nonce) = <[u8; 8]>::try_from(payload)
            && let Some(waiter) = shared.waiters.lock().get(&u64::from_be_bytes(nonce))
        {
            let _ = waiter.send(());
        }
        return;
    }
    if message.get_channel_name() == shared.settings.fill_channel {
        shared.counters.fills_received.fetch_add(1, Relaxed);
        for tier in shared.sinks() {
            tier.filled_encoded(payload);
        }
        return;
    }
    if payload.len() < 16 {
        shared.counters.malformed.fetch_add(1, Relaxed);
        tracing::warn!(
            len = payload.len(),
            "malformed backplane message; invalidating all of L1"
        );
        for tier in shared.sinks() {
            tier.invalidate_all();
        }
        return;
    }
    let (origin, rest) = payload.split_at(8);
    let (nonce, key) = rest.split_at(8);
    let everything = message.get_channel_name() == shared.settings.all_channel;
    for tier in shared.sinks() {
        if everything {
            tier.invalidate_all();
        } else {
            tier.invalidate_encoded(key);
        }
    }
    shared.counters.received.fetch_add(1, Relaxed);
    // Acknowledge after applying: the origin's invalidate returns once it has every ack. On a
    // task of its own, so a slow ack never delays the next message.
    let mut origin_bytes = [0; 8];
    origin_bytes.copy_from_slice(origin);
    let channel = ack_channel(&shared.settings.channel, u64::from_be_bytes(origin_bytes));
    let nonce = nonce.to_vec();
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let sent: Result<i64, _> = shared
            .acks
            .run(|mut connection| async move {
                redis::cmd("PUBLISH")
                    .arg(&channel)
                    .arg(nonce)
                    .query_async(&mut connection)
                    .await
            })
            .await;
        match sent {
            Ok(receivers) if receivers > 0 => shared.counters.acks_sent.fetch_add(1, Relaxed),
            Ok(_) => {
                tracing::debug!("backplane acknowledgement reached no subscriber");
                shared.counters.ack_failures.fetch_add(1, Relaxed)
            }
            Err(error) => {
                tracing::warn!(%error, "backplane acknowledgement not sent");
                shared.counters.ack_failures.fetch_add(1, Relaxed)
            }
        };
    });
}
