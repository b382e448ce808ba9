//! A throwaway `redis-server` on loopback for tests, examples and benchmarks: started on a free
//! port with persistence off, killed when dropped.
//!
//! Tests call [`redis_or_skip`]: without a `redis-server` binary it prints a loud `SKIPPED` line
//! and returns `None`, except under CI (the `CI` environment variable set), where a missing
//! binary fails the test: in CI these tests must run.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a fresh server may take to accept connections before the start is retried.
const READY_WITHIN: Duration = Duration::from_secs(10);
/// Start attempts (a free port can be taken by someone else between the probe and the bind).
const ATTEMPTS: usize = 3;

/// A `redis-server` child process on `127.0.0.1`, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// The server's working directory (`--dir`), removed on drop: a server that becomes a
    /// replica writes the primary's snapshot there, persistence off or not.
    dir: PathBuf,
}

/// Why no server could be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// No `redis-server` binary (on `PATH`, or at `$REDIS_SERVER`).
    #[error("no redis-server binary found (install it: apt-get install -y redis-server)")]
    NotInstalled,
    /// It was found but did not come up.
    #[error("redis-server did not start: {0}")]
    Failed(String),
}

/// The binary to run: `$REDIS_SERVER`, or `redis-server` on `PATH`.
fn binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it accepts connections.
    pub fn start() -> Result<Self, StartError> {
        Self::start_with(&binary())
    }

    /// Starts the server binary at `binary` (a path, or a name looked up on `PATH`).
    pub fn start_with(binary: &str) -> Result<Self, StartError> {
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            match Self::try_start(binary) {
                Ok(server) => return Ok(server),
                Err(StartError::NotInstalled) => return Err(StartError::NotInstalled),
                Err(StartError::Failed(why)) => last = why,
            }
        }
        Err(StartError::Failed(last))
    }

    fn try_start(binary: &str) -> Result<Self, StartError> {
        let port = free_port().map_err(|e| StartError::Failed(format!("no free port: {e}")))?;
        Self::spawn(binary, port)
    }

    fn spawn(binary: &str, port: u16) -> Result<Self, StartError> {
        // One per start (a restart's old value is dropped after its new one exists).
        static STARTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let start = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("herd-redis-{}-{port}-{start}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| StartError::Failed(format!("working directory {dir:?}: {e}")))?;
        let child = Command::new(binary)
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                match e.kind() {
                    io::ErrorKind::NotFound => StartError::NotInstalled,
                    _ => StartError::Failed(format!("spawn: {e}")),
                }
            })?;
        let mut server = Self {
            child: Some(child),
            port,
            dir,
        };
        let deadline = Instant::now() + READY_WITHIN;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        loop {
            if let Some(child) = server.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(StartError::Failed(format!("exited at start: {status}")));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return Ok(server);
            }
            if Instant::now() >= deadline {
                return Err(StartError::Failed(format!(
                    "not accepting connections on port {port} after {READY_WITHIN:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (SIGKILL, no shutdown) and waits for it to exit: clients see their
    /// connections drop and new connections refused.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh, empty server on the same port after [`kill`](RedisServer::kill) (a Redis
    /// that restarts): clients that reconnect find it there.
    pub fn restart(&mut self) -> Result<(), StartError> {
        self.kill();
        *self = Self::spawn(&binary(), self.port)?;
        Ok(())
    }

    /// Whether it has been killed.
    pub fn is_killed(&self) -> bool {
        self.child.is_none()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh server for test `test`, or `None` (after printing a loud `SKIPPED` line) when there
/// is no `redis-server` binary. Under CI (`CI` set) a missing binary panics instead: CI must run
/// these tests. A binary that fails to start always panics.
pub fn redis_or_skip(test: &str) -> Option<RedisServer> {
    skip_unless_ci(test, RedisServer::start(), std::env::var_os("CI").is_some())
}

/// [`redis_or_skip`]'s decision, with the start's result and whether CI is set passed in.
pub fn skip_unless_ci(
    test: &str,
    started: Result<RedisServer, StartError>,
    ci: bool,
) -> Option<RedisServer> {
    match started {
        Ok(server) => Some(server),
        Err(StartError::NotInstalled) if !ci => {
            eprintln!(
                "\n*** SKIPPED {test}: no redis-server binary (apt-get install -y redis-server, \
                 or set REDIS_SERVER). Under CI this is a failure. ***\n"
            );
            None
        }
        Err(error @ StartError::NotInstalled) => {
            panic!("{test}: CI is set, so this test must run, but: {error}")
        }
        Err(error) => panic!("{test}: cannot start redis-server: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_is_not_installed() {
        let missing = RedisServer::start_with("/nonexistent/redis-server-for-herd-tests");
        assert!(
            matches!(missing, Err(StartError::NotInstalled)),
            "{missing:?}"
        );
    }

    #[test]
    fn without_ci_a_missing_binary_skips() {
        assert!(skip_unless_ci("t", Err(StartError::NotInstalled), false).is_none());
    }

    #[test]
    #[should_panic(expected = "CI is set, so this test must run")]
    fn under_ci_a_missing_binary_fails() {
        skip_unless_ci("t", Err(StartError::NotInstalled), true);
    }

    #[test]
    #[should_panic(expected = "cannot start redis-server")]
    fn a_server_that_will_not_start_fails_even_outside_ci() {
        skip_unless_ci("t", Err(StartError::Failed("boom".into())), false);
    }
}
