//! `tracing` events for read-through fills and refreshes (issue 14 item 2), and what they and
//! the `metrics` feature's fill histograms need: a fill's start time, taken only when someone
//! will use it.
//!
//! Every event has target `ttl_lru`, level `DEBUG` (a fill that timed out: `WARN`), and is
//! emitted with no lock held. Fields: `cache` (the cache's name, if any), `key` (only in caches
//! built with [`CacheBuilder::trace_keys`](crate::CacheBuilder::trace_keys), formatted only
//! when a subscriber records the event), and per event:
//!
//! | message | fields |
//! |---|---|
//! | `leads the fill` | |
//! | `joined a fill` | `outcome` = `value` / `error` |
//! | `fill finished` | `outcome` = `stored` / `not_stored` (fenced, declined, or too heavy) / `failed`, `elapsed_ms` |
//! | `fill timed out` (WARN) | `elapsed_ms` |
//! | `refresh started` | `follows` = whether another fill of the key was open |
//! | `batch fill` | `keys` (how many this call leads) |
//!
//! A hand-off (a leader went away and a waiter fills instead), an abandon or a wait timeout is
//! the coalescing group's business: `coalesce` emits those under its own target.
//!
//! Hits emit nothing and read nothing of this. A miss looks at the subscriber once when it
//! takes a lead (tracing's level filter: one relaxed load and a branch with no subscriber);
//! only then, or with the `metrics` feature, is the clock read at the start and end of a fill.

use std::fmt;
use std::time::Instant;

use tracing::field::{DisplayValue, display};

/// How a cache labels its keys in events: `None` for no `key` field.
pub(crate) type KeyLabel<K> = Option<fn(&K, &mut fmt::Formatter<'_>) -> fmt::Result>;

/// A key formatted by its cache's label function, only when a subscriber records it.
pub(crate) struct Labelled<'a, K> {
    key: &'a K,
    label: fn(&K, &mut fmt::Formatter<'_>) -> fmt::Result,
}

impl<K> fmt::Display for Labelled<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.label)(self.key, f)
    }
}

/// The `key` field of an event: empty unless the cache labels its keys.
pub(crate) fn key<K>(label: KeyLabel<K>, key: &K) -> Option<DisplayValue<Labelled<'_, K>>> {
    Some(display(Labelled { key, label: label? }))
}

/// `Debug` as a key label (what `trace_keys` installs).
pub(crate) fn debug_label<K: fmt::Debug>(key: &K, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    fmt::Debug::fmt(key, f)
}

/// Whether anyone listens to this crate's `DEBUG` events.
#[inline]
pub(crate) fn enabled() -> bool {
    tracing::enabled!(target: "ttl_lru", tracing::Level::DEBUG)
}

/// A fill's fence (the key's write sequence when its lookup missed), its shard's store count
/// then (a store of the key since means the value found at its publish is not the one it
/// started from: `Shard::write_error`) and, when events or metrics will report its duration,
/// when its lead was taken.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started {
    pub(crate) fence: u64,
    pub(crate) stores: u64,
    pub(crate) at: Option<Instant>,
}

impl Started {
    /// A lead taken now, fenced at `fence`, the shard's store count `stores` when it was read.
    #[inline]
    pub(crate) fn lead(fence: u64, stores: u64) -> Self {
        let timed = cfg!(feature = "metrics") || enabled();
        Self {
            fence,
            stores,
            at: timed.then(Instant::now),
        }
    }

    /// Milliseconds since the lead was taken (0 when untimed).
    pub(crate) fn elapsed_ms(&self) -> u64 {
        self.at.map_or(0, |t| {
            u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
        })
    }
}
