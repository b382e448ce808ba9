//! The process-wide registry of named caches, held weakly: list them, resize one by name, and
//! react to memory pressure across all of them (`clear_all`, `shrink_all`), plus an optional tokio
//! task that purges expired entries on an interval.
//!
//! Unlike lruttl's purge-everything, [`shrink_all`] trims every cache by the same fraction, so a
//! memory budget shared across caches is given back proportionally; and
//! [`crate::pressure::spawn_pressure_watcher`] does it on its own, scaling every registered
//! cache's capacity down under memory pressure and back up once it passes.

use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::cache::Inner;
use crate::error::RegistryError;

/// What the registry needs from a cache, independent of its key and value types.
pub(crate) trait Managed: Send + Sync {
    fn name(&self) -> &str;
    fn capacity(&self) -> u64;
    fn len(&self) -> usize;
    fn weight(&self) -> u64;
    fn set_capacity(&self, capacity: u64) -> usize;
    fn clear(&self) -> usize;
    fn purge_expired(&self) -> usize;
    fn shrink(&self, fraction: f64) -> usize;
}

impl<K, V> Managed for Inner<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }
    fn capacity(&self) -> u64 {
        *self.capacity.lock()
    }
    fn len(&self) -> usize {
        Inner::len(self)
    }
    fn weight(&self) -> u64 {
        Inner::weight(self)
    }
    fn set_capacity(&self, capacity: u64) -> usize {
        Inner::set_capacity(self, capacity)
    }
    fn clear(&self) -> usize {
        Inner::clear(self)
    }
    fn purge_expired(&self) -> usize {
        Inner::purge_expired(self)
    }
    fn shrink(&self, fraction: f64) -> usize {
        Inner::shrink(self, fraction)
    }
}

static REGISTRY: Mutex<Vec<Weak<dyn Managed>>> = Mutex::new(Vec::new());

pub(crate) fn register<K, V>(inner: &Arc<Inner<K, V>>)
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    let arc: Arc<dyn Managed> = inner.clone();
    let weak = Arc::downgrade(&arc);
    let mut list = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|w| w.strong_count() > 0);
    list.push(weak);
}

/// The live registered caches (dead ones are pruned). The lock is released before the caller
/// touches any cache, so cache operations never run under the registry lock.
pub(crate) fn live() -> Vec<Arc<dyn Managed>> {
    let mut list = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|w| w.strong_count() > 0);
    list.iter().filter_map(Weak::upgrade).collect()
}

/// One registered cache, as listed by [`caches`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheInfo {
    /// Its name.
    pub name: String,
    /// Its capacity (entries, or weight with a weigher).
    pub capacity: u64,
    /// Entries stored.
    pub len: usize,
    /// Weight stored.
    pub weight: u64,
}

/// Every live named cache. Several caches may share a name; each is listed.
pub fn caches() -> Vec<CacheInfo> {
    live()
        .iter()
        .map(|c| CacheInfo {
            name: c.name().to_owned(),
            capacity: c.capacity(),
            len: c.len(),
            weight: c.weight(),
        })
        .collect()
}

/// Sets the capacity of every live cache named `name` (shrinking before it returns). Returns the
/// number of entries evicted.
///
/// # Errors
/// [`RegistryError::NotFound`] when no live cache has that name.
pub fn set_capacity(name: &str, capacity: u64) -> Result<usize, RegistryError> {
    let matching: Vec<_> = live().into_iter().filter(|c| c.name() == name).collect();
    if matching.is_empty() {
        return Err(RegistryError::NotFound(name.to_owned()));
    }
    Ok(matching.iter().map(|c| c.set_capacity(capacity)).sum())
}

/// Clears every registered cache (entries removed, in-flight fills detached, their waiters still
/// answered). Returns the number of entries removed. (Named `purge_all` until issue 14: it
/// clears every entry, where [`purge_expired_all`] drops only expired ones.)
pub fn clear_all() -> usize {
    live().iter().map(|c| c.clear()).sum()
}

/// Removes expired entries from every registered cache. Returns how many.
pub fn purge_expired_all() -> usize {
    live().iter().map(|c| c.purge_expired()).sum()
}

/// Evicts `fraction` of the entries of every registered cache (capacities unchanged), by each
/// cache's eviction policy. Returns how many entries were evicted.
///
/// # Errors
/// [`RegistryError::BadFraction`] unless `0 <= fraction <= 1`.
pub fn shrink_all(fraction: f64) -> Result<usize, RegistryError> {
    if !(0.0..=1.0).contains(&fraction) {
        return Err(RegistryError::BadFraction(fraction));
    }
    Ok(live().iter().map(|c| c.shrink(fraction)).sum())
}

/// Spawns a tokio task that calls [`purge_expired_all`] every `interval` until the handle is
/// aborted. Needs a tokio runtime with time enabled.
///
/// # Errors
/// [`RegistryError::ZeroInterval`] for a zero interval, [`RegistryError::NoRuntime`] outside a
/// tokio runtime.
pub fn spawn_maintenance(interval: Duration) -> Result<tokio::task::JoinHandle<()>, RegistryError> {
    if interval.is_zero() {
        return Err(RegistryError::ZeroInterval);
    }
    let handle = tokio::runtime::Handle::try_current().map_err(|_| RegistryError::NoRuntime)?;
    Ok(handle.spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            purge_expired_all();
        }
    }))
}
