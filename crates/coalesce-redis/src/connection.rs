//! A lazily (re)connecting Redis connection where every call is bounded in time: the lease must
//! answer "unavailable" quickly when Redis is gone, never hang, and come back by itself once
//! Redis does.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coalesce::LeaseError;
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, timeout};

/// One multiplexed connection shared by every call, replaced after a failure.
///
/// - No connection yet, or the last one failed: a call starts a connect on a task of its own
///   (one at a time) and waits for it, bounded by `connect_timeout`; concurrent callers wait
///   for the same one. The connect runs to its end even if every caller gave up: a connect
///   slower than the callers' own limits (a lease's 200 ms, a second level's 100 ms) used to
///   be dropped with each caller and started again by the next, never finishing and never
///   starting the back-off.
/// - A connect that failed starts a back-off of `reconnect_backoff`, during which calls fail at
///   once instead of each waiting on a dead address.
/// - A command that fails with an I/O error or times out drops the connection, and so does a
///   `-READONLY` or `-MASTERDOWN` reply: behind a stable name or virtual IP, a failover leaves
///   the old connection on a node that is now a replica, and only a new connection reaches the
///   new primary. (redis-rs calls `READONLY` not retryable, so it used to keep the connection:
///   every write failed until the socket died, the lease and second level stayed failed open.)
/// - A failure drops only the connection its command ran on: a late failure of a command sent
///   on an older connection leaves the newer one alone.
/// - A command its caller dropped before any answer (a limit above this one, shorter than
///   `command_timeout`: a tier's `l2_timeout` or soft timeout) is remembered: if the connection
///   then answers nothing for `command_timeout` from that command's start, the next call drops
///   it. Without this, callers that always gave up first never let a command time out here, and
///   a connection that stopped answering (a half-open socket) was kept until the kernel closed
///   it, every call failing meanwhile. Such a drop also sends one `PING` on the connection, on
///   a task of its own: Redis answers a connection's commands in order, so its answer says every
///   command before it was answered (the connection is alive, only slower than that caller),
///   and no answer within `command_timeout` drops the connection at once. (Found by review:
///   with every caller giving up before a slow but healthy Redis answered, nothing counted as
///   answered, and each process reconnected every `command_timeout`.)
///
/// Cheap to clone: clones share the connection and its state.
#[derive(Clone)]
pub(crate) struct Connector {
    client: redis::Client,
    connect_timeout: Duration,
    command_timeout: Duration,
    reconnect_backoff: Duration,
    state: Arc<Mutex<State>>,
    /// Bumped as each connect attempt ends (connected or failed): its waiters look again.
    attempts: Arc<tokio::sync::watch::Sender<u64>>,
}

#[derive(Default)]
struct State {
    connection: Option<MultiplexedConnection>,
    /// Counts the connections made: which one [`connection`](Self::connection) is, so that a
    /// failure forgets the connection its command used and no later one.
    generation: u64,
    /// After a failed connect: fail fast until then.
    down_until: Option<Instant>,
    /// A connect attempt is running on its task.
    connecting: bool,
    /// When the oldest command its caller dropped unanswered on the current connection
    /// started, if no command has been answered on it since.
    unanswered_since: Option<Instant>,
    /// A liveness `PING` is in flight on the current connection ([`Connector::probe`]).
    probing: bool,
}

/// Why a connect produced no connection, shared with callers that arrive during the back-off.
#[derive(Debug, thiserror::Error)]
#[error("redis is unreachable (retrying after a back-off of {backoff:?})")]
struct Backoff {
    backoff: Duration,
}

impl Connector {
    pub(crate) fn new(
        client: redis::Client,
        connect_timeout: Duration,
        command_timeout: Duration,
        reconnect_backoff: Duration,
    ) -> Self {
        Self {
            client,
            connect_timeout,
            command_timeout,
            reconnect_backoff,
            state: Arc::new(Mutex::new(State::default())),
            attempts: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Runs `command` on the shared connection, connecting first if needed. Takes at most
    /// `connect_timeout` (plus the wait for a concurrent connect) plus `command_timeout`.
    ///
    /// # Cancellation
    /// Dropped while waiting for a connect: the connect goes on, on its own task, for the next
    /// call. Dropped while the command is in flight: the command may still reach Redis.
    pub(crate) async fn run<T, F, Fut>(&self, command: F) -> Result<T, LeaseError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let (connection, generation) = self.connection().await?;
        let mut in_flight = InFlight {
            connector: self,
            generation,
            started: Instant::now(),
            ended: false,
        };
        let outcome = timeout(self.command_timeout, command(connection)).await;
        in_flight.ended = true;
        match outcome {
            Ok(Ok(value)) => {
                self.answered(generation);
                Ok(value)
            }
            Ok(Err(error)) => {
                if connection_is_done(&error) {
                    self.forget_connection(generation);
                } else {
                    // A reply (an error reply is one): the connection answers.
                    self.answered(generation);
                }
                Err(LeaseError::unavailable(error))
            }
            Err(_elapsed) => {
                self.forget_connection(generation);
                Err(LeaseError::TimedOut(self.command_timeout))
            }
        }
    }

    /// Connection number `generation` answered a command: it is alive.
    fn answered(&self, generation: u64) {
        let mut state = self.state();
        if state.generation == generation {
            state.unanswered_since = None;
        }
    }

    /// Drops the current connection, whichever it is: the next call reconnects (the backplane
    /// found its node demoted, which no reply on this connection may have said: reads and
    /// `PUBLISH` work on a replica).
    pub(crate) fn reset(&self) {
        let mut state = self.state();
        state.connection = None;
        state.unanswered_since = None;
    }

    /// Sends `PING`s on connection number `generation` (on its own task) until no command
    /// dropped unanswered before the last one sent is left: each answered one clears those
    /// marks; one unanswered within `command_timeout` drops the connection.
    async fn probe(self, mut connection: MultiplexedConnection, generation: u64) {
        loop {
            let sent = Instant::now();
            let ping = redis::cmd("PING");
            let answered = match timeout(
                self.command_timeout,
                ping.query_async::<()>(&mut connection),
            )
            .await
            {
                Ok(Ok(())) => true,
                Ok(Err(error)) => !connection_is_done(&error),
                Err(_elapsed) => false,
            };
            let mut state = self.state();
            if state.generation != generation || state.connection.is_none() {
                state.probing = false;
                return;
            }
            if !answered {
                state.connection = None;
                state.unanswered_since = None;
                state.probing = false;
                return;
            }
            if state.unanswered_since.is_some_and(|since| since <= sent) {
                state.unanswered_since = None;
            }
            if state.unanswered_since.is_none() {
                state.probing = false;
                return;
            }
            // A command dropped after this PING was sent: ask again.
        }
    }

    /// Drops connection number `generation` if it is still the current one.
    fn forget_connection(&self, generation: u64) {
        let mut state = self.state();
        if state.generation == generation {
            state.connection = None;
            state.unanswered_since = None;
        }
    }

    /// The live connection and its generation, connecting first if needed.
    async fn connection(&self) -> Result<(MultiplexedConnection, u64), LeaseError> {
        // Subscribed before looking: an attempt that ends after the look wakes the wait below.
        let mut ended = self.attempts.subscribe();
        let deadline = Instant::now().checked_add(self.connect_timeout);
        loop {
            if let Some(connection) = self.ready()? {
                return Ok(connection);
            }
            self.start_connect();
            let wait = ended.changed();
            let waited = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, wait).await,
                None => Ok(wait.await),
            };
            // An attempt ended (look again: a connection, or the back-off's error), or the
            // wait ran out (the attempt goes on for the next call).
            if waited.is_err() {
                return Err(LeaseError::TimedOut(self.connect_timeout));
            }
        }
    }

    /// Starts a connect attempt on its own task unless one is running.
    fn start_connect(&self) {
        {
            let mut state = self.state();
            if state.connecting {
                return;
            }
            state.connecting = true;
        }
        let (client, state, attempts) = (
            self.client.clone(),
            Arc::clone(&self.state),
            Arc::clone(&self.attempts),
        );
        let (connect_timeout, backoff) = (self.connect_timeout, self.reconnect_backoff);
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.command_timeout));
        tokio::spawn(async move {
            // Ends the attempt however the task ends: dropped with its runtime mid-connect, it
            // used to leave `connecting` set, and every later call waited out its connect
            // timeout for an attempt that no longer ran.
            let _ended = AttemptEnded {
                state: Arc::clone(&state),
                attempts,
            };
            let attempt = client.get_multiplexed_async_connection_with_config(&config);
            let outcome = match timeout(connect_timeout, attempt).await {
                Ok(Ok(connection)) => Ok(connection),
                Ok(Err(error)) => Err(LeaseError::unavailable(error)),
                Err(_elapsed) => Err(LeaseError::TimedOut(connect_timeout)),
            };
            {
                let mut state = lock(&state);
                match outcome {
                    Ok(connection) => {
                        state.connection = Some(connection);
                        state.generation += 1;
                        state.down_until = None;
                        state.unanswered_since = None;
                    }
                    Err(failure) => {
                        tracing::debug!(error = %failure, ?backoff, "redis connect failed");
                        // A back-off too large to represent means: stay down (never a panic on
                        // a setting).
                        let now = Instant::now();
                        state.down_until =
                            Some(now.checked_add(backoff).unwrap_or_else(|| {
                                now + Duration::from_secs(30 * 365 * 24 * 3600)
                            }));
                    }
                }
            }
        });
    }

    /// The live connection and its generation, `None` when a connect should be tried, or the
    /// back-off error.
    fn ready(&self) -> Result<Option<(MultiplexedConnection, u64)>, LeaseError> {
        let mut state = self.state();
        // A command dropped unanswered a whole command timeout ago, nothing answered since:
        // the connection is dead (see the type's docs).
        if state
            .unanswered_since
            .is_some_and(|since| since.elapsed() >= self.command_timeout)
        {
            state.connection = None;
            state.unanswered_since = None;
        }
        if let Some(connection) = &state.connection {
            return Ok(Some((connection.clone(), state.generation)));
        }
        match state.down_until {
            Some(until) if Instant::now() < until => Err(LeaseError::unavailable(Backoff {
                backoff: self.reconnect_backoff,
            })),
            _ => Ok(None),
        }
    }
}

/// Whether a command's failure means its connection should not be used again: it broke or
/// timed out, or it reaches a node that no longer takes writes (a failover behind the same
/// address: `READONLY` from a demoted primary, `MASTERDOWN` from a replica cut off from it).
/// Before Redis 7 a script's write on a replica failed as `ERR Error running script ...
/// -READONLY ...`, which parses as a generic error: its detail is read too.
fn connection_is_done(error: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    let wrapped = |code: &str| {
        error
            .detail()
            .is_some_and(|detail| detail.contains(&format!("-{code} ")))
    };
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_timeout()
        || error.is_unrecoverable_error()
        || matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
        || wrapped("READONLY")
        || wrapped("MASTERDOWN")
}

/// Ends a connect attempt when its task ends (or is dropped): another may start, and callers
/// waiting for this one look again.
struct AttemptEnded {
    state: Arc<Mutex<State>>,
    attempts: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Drop for AttemptEnded {
    fn drop(&mut self) {
        lock(&self.state).connecting = false;
        self.attempts.send_modify(|n| *n += 1);
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // Nothing panics while holding this lock; recover anyway rather than poison the lease.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A command in flight on connection number `generation`; dropped before it ended (its caller
/// gave up first), it marks the connection as owing an answer since `started`.
struct InFlight<'a> {
    connector: &'a Connector,
    generation: u64,
    started: Instant,
    ended: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let mut state = self.connector.state();
        let Some(connection) = state.connection.clone() else {
            return;
        };
        if state.generation != self.generation {
            return;
        }
        let since = state.unanswered_since.get_or_insert(self.started);
        *since = (*since).min(self.started);
        // One liveness probe at a time (see the type's docs); without a runtime (dropped
        // outside one), the next call's check still applies.
        if !state.probing
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            state.probing = true;
            let connector = self.connector.clone();
            runtime.spawn(connector.probe(connection, self.generation));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A demoted node's refusal ends the connection, as Redis 7 sends it and as Redis 6 wraps
    /// it in a script's error; an ordinary error (a wrong type, a script's own `ERR`) does not.
    #[test]
    fn a_write_refused_by_a_replica_ends_the_connection() {
        let server = |code: &str, detail: &str| {
            redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
        };
        let parsed = |reply: &[u8]| {
            redis::parse_redis_value(reply)
                .expect("a reply")
                .extract_error()
                .expect_err("an error reply")
        };
        let redis7 = parsed(b"-READONLY You can't write against a read only replica.\r\n");
        assert!(connection_is_done(&redis7), "{redis7:?}");
        let masterdown = parsed(b"-MASTERDOWN Link with MASTER is down\r\n");
        assert!(connection_is_done(&masterdown), "{masterdown:?}");
        let redis6 = parsed(
            b"-ERR Error running script (call to f_0123): @user_script:3: @user_script: 3: \
              -READONLY You can't write against a read only replica.\r\n",
        );
        assert!(connection_is_done(&redis6), "{redis6:?}");
        for ordinary in [
            parsed(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            parsed(b"-ERR Error running script (call to f_0123): @user_script:1: boom\r\n"),
            server("NOSCRIPT", "No matching script."),
        ] {
            assert!(!connection_is_done(&ordinary), "{ordinary:?}");
        }
    }

    /// A connect attempt whose task is dropped with its runtime (mid-connect, to a server that
    /// accepts and never answers) ends: the next caller starts its own attempt instead of
    /// waiting out its connect timeout for one that no longer runs.
    #[test]
    fn a_connect_dropped_with_its_runtime_ends_its_attempt() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://{}", silent.local_addr().unwrap());
        let connector = Connector::new(
            redis::Client::open(url).unwrap(),
            Duration::from_secs(3600),
            Duration::from_secs(1),
            Duration::from_millis(1),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            connector.start_connect();
            tokio::task::yield_now().await; // the attempt is under way
        });
        assert!(connector.state().connecting);
        let before = *connector.attempts.borrow();
        drop(runtime);
        assert!(
            !connector.state().connecting,
            "the dead attempt still blocks"
        );
        assert_eq!(
            *connector.attempts.borrow(),
            before + 1,
            "its waiters look again"
        );
        drop(silent);
    }
}
