//! [`MemorySecondLevel`]: the [`SecondLevel`] contract in one process's memory, with an
//! in-process backplane. Clones share one store, so two `TieredCache`s over clones of it behave
//! like two processes over one Redis. For tests and single-node use; it can be told to fail or
//! to stall, to exercise the tier's fail-open paths.

// Its switches (`down`, `stalled`, `mute_fills`) are set by tests and read on L2 calls,
// never on a cache hit: the crate's rule that every atomic goes through `crate::sync` (so that
// hit-path writes are logged) does not concern them.
#![allow(clippy::disallowed_types)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::backend::{Invalidated, L1Sink, L2Entry, L2Error, SecondLevel, Version};

/// A shared in-memory second level. Expiry follows tokio's clock (so paused-clock tests can
/// step through it).
#[derive(Clone, Default)]
pub struct MemorySecondLevel {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    keys: parking_lot::Mutex<Keys>,
    sinks: parking_lot::Mutex<Vec<Weak<dyn L1Sink>>>,
    max_value_len: parking_lot::Mutex<Option<usize>>,
    down: AtomicBool,
    stalled: AtomicBool,
    /// Fill announcements are dropped (a lossy backplane), for tests of the polling fallback.
    mute_fills: AtomicBool,
}

/// The slots, and the generation `invalidate_all` bumps: a key's version is
/// `generation << 32 | its own count`, so a fleet-wide invalidation changes every version.
#[derive(Default)]
struct Keys {
    slots: HashMap<Vec<u8>, Slot>,
    generation: u64,
}

impl Keys {
    fn version(&self, key: &[u8]) -> u64 {
        (self.generation << 32) | self.slots.get(key).map_or(0, |slot| slot.version)
    }

    fn get(&self, key: &[u8]) -> Option<&Slot> {
        self.slots.get(key)
    }

    fn entry(&mut self, key: Vec<u8>) -> &mut Slot {
        self.slots.entry(key).or_default()
    }
}

#[derive(Default)]
struct Slot {
    value: Option<(Vec<u8>, Option<Instant>)>,
    version: u64,
}

impl std::fmt::Debug for MemorySecondLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySecondLevel")
            .field("keys", &self.shared.keys.lock().slots.len())
            .finish_non_exhaustive()
    }
}

/// The error a store told to fail answers with.
#[derive(Debug, thiserror::Error)]
#[error("the in-memory second level was told to fail")]
struct Down;

impl MemorySecondLevel {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Values longer than `limit` bytes are refused with [`L2Error::TooLarge`].
    pub fn with_max_value_len(self, limit: usize) -> Self {
        *self.shared.max_value_len.lock() = Some(limit);
        self
    }

    /// While `down`, every call fails with [`L2Error::Unavailable`].
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Relaxed);
    }

    /// While `stalled`, every call waits forever (a store that stopped answering).
    pub fn set_stalled(&self, stalled: bool) {
        self.shared.stalled.store(stalled, Relaxed);
    }

    /// While `lost`, fill announcements are not delivered (as if every backplane message about
    /// a landed fill were lost): waiting processes fall back to polling.
    pub fn set_fill_announcements_lost(&self, lost: bool) {
        self.shared.mute_fills.store(lost, Relaxed);
    }

    fn sinks(&self) -> Vec<Arc<dyn L1Sink>> {
        let mut sinks = self.shared.sinks.lock();
        sinks.retain(|s| s.strong_count() > 0);
        sinks.iter().filter_map(Weak::upgrade).collect()
    }

    /// Whether a live (unexpired) value is stored under `key`: for tests.
    pub fn contains(&self, key: &[u8]) -> bool {
        let now = Instant::now();
        self.shared
            .keys
            .lock()
            .get(key)
            .and_then(|slot| slot.value.as_ref())
            .is_some_and(|(_, expires)| expires.is_none_or(|at| at > now))
    }

    async fn gate(&self) -> Result<(), L2Error> {
        if self.shared.stalled.load(Relaxed) {
            std::future::pending::<()>().await;
        }
        if self.shared.down.load(Relaxed) {
            return Err(L2Error::unavailable(Down));
        }
        Ok(())
    }

    /// `set_if_version`, and with `only_absent` the `set_if_version_absent` rule.
    async fn store_if_version(
        &self,
        key: &[u8],
        version: Version,
        value: &[u8],
        ttl: Duration,
        only_absent: bool,
    ) -> Result<bool, L2Error> {
        self.gate().await?;
        let expires = self.check(value, ttl)?;
        let now = Instant::now();
        let mut keys = self.shared.keys.lock();
        if keys.version(key) != version.0 {
            return Ok(false);
        }
        let live = keys
            .get(key)
            .and_then(|slot| slot.value.as_ref())
            .is_some_and(|(_, expires)| expires.is_none_or(|at| at > now));
        if only_absent && live {
            return Ok(false);
        }
        keys.entry(key.to_vec()).value = Some((value.to_vec(), expires));
        drop(keys);
        // The backplane's fill announcement (after the value is readable).
        if !self.shared.mute_fills.load(Relaxed) {
            for sink in self.sinks() {
                sink.filled_encoded(key);
            }
        }
        Ok(true)
    }

    fn check(&self, value: &[u8], ttl: Duration) -> Result<Option<Instant>, L2Error> {
        if let Some(limit) = *self.shared.max_value_len.lock()
            && value.len() > limit
        {
            return Err(L2Error::TooLarge {
                len: value.len(),
                limit,
            });
        }
        if ttl < Duration::from_millis(1) {
            return Err(L2Error::InvalidTtl(ttl));
        }
        Ok(Instant::now().checked_add(ttl))
    }
}

#[async_trait]
impl SecondLevel for MemorySecondLevel {
    async fn get(&self, key: &[u8]) -> Result<Option<L2Entry>, L2Error> {
        self.gate().await?;
        let now = Instant::now();
        let keys = self.shared.keys.lock();
        let Some((value, expires)) = keys.get(key).and_then(|slot| slot.value.as_ref()) else {
            return Ok(None);
        };
        let ttl = match expires {
            None => None,
            Some(at) if *at > now => Some(*at - now),
            Some(_) => return Ok(None),
        };
        Ok(Some(L2Entry {
            value: value.clone(),
            ttl,
        }))
    }

    async fn set(&self, key: &[u8], value: &[u8], ttl: Duration) -> Result<(), L2Error> {
        self.gate().await?;
        let expires = self.check(value, ttl)?;
        let mut keys = self.shared.keys.lock();
        keys.entry(key.to_vec()).value = Some((value.to_vec(), expires));
        Ok(())
    }

    async fn delete(&self, key: &[u8]) -> Result<(), L2Error> {
        self.gate().await?;
        if let Some(slot) = self.shared.keys.lock().slots.get_mut(key) {
            slot.value = None;
        }
        Ok(())
    }

    async fn version(&self, key: &[u8]) -> Result<Version, L2Error> {
        self.gate().await?;
        Ok(Version(self.shared.keys.lock().version(key)))
    }

    async fn set_if_version(
        &self,
        key: &[u8],
        version: Version,
        value: &[u8],
        ttl: Duration,
    ) -> Result<bool, L2Error> {
        self.store_if_version(key, version, value, ttl, false).await
    }

    async fn set_if_version_absent(
        &self,
        key: &[u8],
        version: Version,
        value: &[u8],
        ttl: Duration,
    ) -> Result<bool, L2Error> {
        self.store_if_version(key, version, value, ttl, true).await
    }

    async fn invalidate(&self, key: &[u8]) -> Result<Invalidated, L2Error> {
        self.gate().await?;
        let version = {
            let mut keys = self.shared.keys.lock();
            let slot = keys.entry(key.to_vec());
            slot.version += 1;
            slot.value = None;
            keys.version(key)
        };
        // The backplane: every live sink drops its copy before this returns (all "ack").
        let sinks = self.sinks();
        for sink in &sinks {
            sink.invalidate_encoded(key);
        }
        let n = sinks.len() as u64;
        Ok(Invalidated::new(Version(version), n, n))
    }

    async fn invalidate_all(&self) -> Result<Invalidated, L2Error> {
        self.gate().await?;
        let version = {
            let mut keys = self.shared.keys.lock();
            keys.generation += 1;
            keys.slots.clear();
            keys.generation << 32
        };
        let sinks = self.sinks();
        for sink in &sinks {
            sink.invalidate_all();
        }
        let n = sinks.len() as u64;
        Ok(Invalidated::new(Version(version), n, n))
    }

    fn attach(&self, sink: Weak<dyn L1Sink>) {
        self.shared.sinks.lock().push(sink);
    }
}
