//! A lazily (re)connecting Redis connection where every call is bounded in time: the lease must
//! answer "unavailable" quickly when Redis is gone, never hang, and come back by itself once
//! Redis does.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use coalesce::LeaseError;
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, timeout};

/// One multiplexed connection shared by every call, replaced after a failure.
///
/// - No connection yet, or the last one failed: the next call connects (one connect at a time;
///   concurrent callers wait for it, bounded by `connect_timeout`).
/// - A connect that failed starts a back-off of `reconnect_backoff`, during which calls fail at
///   once instead of each waiting on a dead address.
/// - A command that fails with an I/O error or times out drops the connection.
pub(crate) struct Connector {
    client: redis::Client,
    connect_timeout: Duration,
    command_timeout: Duration,
    reconnect_backoff: Duration,
    state: Mutex<State>,
    /// Serialises connect attempts (held across the connect's await: a tokio mutex).
    connecting: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    connection: Option<MultiplexedConnection>,
    /// After a failed connect: fail fast until then.
    down_until: Option<Instant>,
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
            state: Mutex::new(State::default()),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding this lock; recover anyway rather than poison the lease.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `command` on the shared connection, connecting first if needed. Takes at most
    /// `connect_timeout` (plus the wait for a concurrent connect) plus `command_timeout`.
    ///
    /// # Cancellation
    /// Dropped while connecting: the connect is abandoned (another caller will retry). Dropped
    /// while the command is in flight: the command may still reach Redis.
    pub(crate) async fn run<T, F, Fut>(&self, command: F) -> Result<T, LeaseError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let connection = self.connection().await?;
        match timeout(self.command_timeout, command(connection)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                if error.is_io_error()
                    || error.is_connection_dropped()
                    || error.is_timeout()
                    || error.is_unrecoverable_error()
                {
                    self.forget_connection();
                }
                Err(LeaseError::unavailable(error))
            }
            Err(_elapsed) => {
                self.forget_connection();
                Err(LeaseError::TimedOut(self.command_timeout))
            }
        }
    }

    fn forget_connection(&self) {
        self.state().connection = None;
    }

    async fn connection(&self) -> Result<MultiplexedConnection, LeaseError> {
        if let Some(connection) = self.ready()? {
            return Ok(connection);
        }
        let Ok(_connecting) = timeout(self.connect_timeout, self.connecting.lock()).await else {
            return Err(LeaseError::TimedOut(self.connect_timeout));
        };
        // Someone else may have connected (or failed) while we waited.
        if let Some(connection) = self.ready()? {
            return Ok(connection);
        }
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.command_timeout));
        let attempt = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let failure = match timeout(self.connect_timeout, attempt).await {
            Ok(Ok(connection)) => {
                let mut state = self.state();
                state.connection = Some(connection.clone());
                state.down_until = None;
                return Ok(connection);
            }
            Ok(Err(error)) => LeaseError::unavailable(error),
            Err(_elapsed) => LeaseError::TimedOut(self.connect_timeout),
        };
        tracing::debug!(error = %failure, backoff = ?self.reconnect_backoff, "redis connect failed");
        // A back-off too large to represent means: stay down (never a panic on a setting).
        let now = Instant::now();
        self.state().down_until = Some(
            now.checked_add(self.reconnect_backoff)
                .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 24 * 3600)),
        );
        Err(failure)
    }

    /// The live connection, `None` when a connect should be tried, or the back-off error.
    fn ready(&self) -> Result<Option<MultiplexedConnection>, LeaseError> {
        let state = self.state();
        if let Some(connection) = &state.connection {
            return Ok(Some(connection.clone()));
        }
        match state.down_until {
            Some(until) if Instant::now() < until => Err(LeaseError::unavailable(Backoff {
                backoff: self.reconnect_backoff,
            })),
            _ => Ok(None),
        }
    }
}
