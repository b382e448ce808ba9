//! [`MemoryLease`]: the in-process [`FillLease`], for tests and for single-node deployments
//! that share one lease between several groups.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{Acquire, FillLease, LeaseError, LeaseToken, check_ttl};

/// Leases in a map in this process, timed on tokio's clock (so tests can pause and advance it).
///
/// It can also play a service that is down ([`set_available`](MemoryLease::set_available)),
/// which is how tests show that callers fail open.
///
/// ```
/// use std::time::Duration;
/// use coalesce::{Acquire, FillLease, MemoryLease};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let lease = MemoryLease::new();
/// let ttl = Duration::from_secs(5);
/// let Acquire::Acquired(token) = lease.try_acquire("user:42", ttl).await.unwrap() else {
///     panic!("nobody holds it yet");
/// };
/// assert_eq!(lease.try_acquire("user:42", ttl).await.unwrap(), Acquire::HeldElsewhere);
/// assert!(lease.release("user:42", &token).await.unwrap());
/// assert!(matches!(lease.try_acquire("user:42", ttl).await.unwrap(), Acquire::Acquired(_)));
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemoryLease {
    // Not the loom shim: no model covers leases, and this lock is never held across an await.
    leases: parking_lot::Mutex<Leases>,
    next_token: AtomicU64,
    down: AtomicBool,
}

#[derive(Debug, Default)]
struct Leases {
    held: HashMap<String, Held>,
    /// Sweep expired entries once the map grows past this, so keys acquired once and never
    /// touched again do not accumulate.
    sweep_above: usize,
}

#[derive(Debug)]
struct Held {
    token: LeaseToken,
    expires: Instant,
}

impl Held {
    fn live(&self, now: Instant) -> bool {
        now < self.expires
    }
}

impl MemoryLease {
    /// An empty lease table, available.
    pub fn new() -> Self {
        Self::default()
    }

    /// Plays a service that is up (`true`, the default) or down: while down every call fails
    /// with [`LeaseError::Unavailable`] and changes nothing. Leases held when it went down
    /// survive (like a network partition, not a restart).
    pub fn set_available(&self, available: bool) {
        self.down.store(!available, Relaxed);
    }

    /// Number of leases held and not expired.
    pub fn held(&self) -> usize {
        let now = Instant::now();
        self.leases
            .lock()
            .held
            .values()
            .filter(|h| h.live(now))
            .count()
    }

    fn check_up(&self) -> Result<(), LeaseError> {
        if self.down.load(Relaxed) {
            return Err(LeaseError::unavailable("MemoryLease is set unavailable"));
        }
        Ok(())
    }

    fn token(&self) -> LeaseToken {
        LeaseToken::new(format!("mem-{}", self.next_token.fetch_add(1, Relaxed)))
    }
}

impl Leases {
    fn sweep_if_large(&mut self, now: Instant) {
        if self.held.len() <= self.sweep_above {
            return;
        }
        self.held.retain(|_, h| h.live(now));
        self.sweep_above = (self.held.len() * 2).max(64);
    }
}

fn deadline(now: Instant, ttl: Duration) -> Result<Instant, LeaseError> {
    now.checked_add(ttl).ok_or(LeaseError::InvalidTtl(ttl))
}

#[async_trait]
impl FillLease for MemoryLease {
    async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Acquire, LeaseError> {
        check_ttl(ttl)?;
        self.check_up()?;
        let now = Instant::now();
        let expires = deadline(now, ttl)?;
        let mut leases = self.leases.lock();
        leases.sweep_if_large(now);
        if leases.held.get(key).is_some_and(|h| h.live(now)) {
            return Ok(Acquire::HeldElsewhere);
        }
        let token = self.token();
        leases.held.insert(
            key.to_owned(),
            Held {
                token: token.clone(),
                expires,
            },
        );
        Ok(Acquire::Acquired(token))
    }

    async fn release(&self, key: &str, token: &LeaseToken) -> Result<bool, LeaseError> {
        self.check_up()?;
        let now = Instant::now();
        let mut leases = self.leases.lock();
        let owned = leases
            .held
            .get(key)
            .is_some_and(|h| h.live(now) && h.token == *token);
        if owned {
            leases.held.remove(key);
        }
        Ok(owned)
    }

    async fn renew(
        &self,
        key: &str,
        token: &LeaseToken,
        ttl: Duration,
    ) -> Result<bool, LeaseError> {
        check_ttl(ttl)?;
        self.check_up()?;
        let now = Instant::now();
        let expires = deadline(now, ttl)?;
        let mut leases = self.leases.lock();
        match leases.held.get_mut(key) {
            Some(held) if held.live(now) && held.token == *token => {
                held.expires = expires;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
