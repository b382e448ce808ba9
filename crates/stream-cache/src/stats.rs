//! `StreamCache` counters: what a proxy operator graphs (hits, partial hits, misses, fills,
//! aborts by cause, bytes served, purges) plus the backend's used/capacity bytes.
//!
//! Why striped: hits and bytes served are counted on the hit path, which must not write one
//! global cache line per hit. They live in per-thread stripes (a thread picks its stripe once);
//! a reader holds its stripe, not the whole counter set, so even the reference count it takes
//! stays on that stripe's line. The rare events (misses, fills, aborts, purges) share one padded
//! block. A snapshot sums the stripes with relaxed loads: each counter is exact, the set is not
//! one atomic cut.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::state::AbortKind;
use crate::traits::StorageUsage;

const STRIPES: usize = 16;

/// Every abort cause, in the order of [`AbortCounts`].
pub(crate) const KINDS: [AbortKind; 11] = [
    AbortKind::WriterDropped,
    AbortKind::Upstream,
    AbortKind::TooLarge,
    AbortKind::NoRoom,
    AbortKind::LengthMismatch,
    AbortKind::FillTimedOut,
    AbortKind::Purged,
    AbortKind::Storage,
    AbortKind::Cancelled,
    AbortKind::NoReaders,
    AbortKind::Corrupt,
];

fn kind_index(kind: AbortKind) -> usize {
    KINDS
        .iter()
        .position(|k| *k == kind)
        .expect("every AbortKind is listed in KINDS")
}

/// The hit-path counters of one stripe, alone on their cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Stripe {
    hits: AtomicU64,
    partial_hits: AtomicU64,
    bytes_served: AtomicU64,
}

impl Stripe {
    pub(crate) fn served(&self, bytes: u64) {
        if bytes > 0 {
            self.bytes_served.fetch_add(bytes, Ordering::Relaxed);
        }
    }
}

#[derive(Debug, Default)]
#[repr(align(128))]
struct Rare {
    misses: AtomicU64,
    fills_started: AtomicU64,
    fills_completed: AtomicU64,
    fills_failed: AtomicU64,
    purges: AtomicU64,
    /// Fills started and not yet ended (a gauge: `FillTracker` adds and removes one).
    in_flight: AtomicU64,
    aborts: [AtomicU64; KINDS.len()],
}

/// The live counters of one cache (shared by its clones).
#[derive(Debug)]
pub(crate) struct Counters {
    stripes: Box<[Arc<Stripe>]>,
    rare: Rare,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            stripes: (0..STRIPES).map(|_| Arc::new(Stripe::default())).collect(),
            rare: Rare::default(),
        }
    }
}

fn stripe_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    INDEX.with(|index| *index)
}

impl Counters {
    /// This thread's stripe.
    pub(crate) fn stripe(&self) -> &Arc<Stripe> {
        &self.stripes[stripe_index()]
    }

    pub(crate) fn hit(&self, stripe: &Stripe, partial: bool) {
        let counter = if partial {
            &stripe.partial_hits
        } else {
            &stripe.hits
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn miss(&self) {
        self.rare.misses.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn fill_started(&self) {
        self.rare.fills_started.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn fill_failed(&self) {
        self.rare.fills_failed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn fill_ended(&self, outcome: Result<(), AbortKind>) {
        match outcome {
            Ok(()) => self.rare.fills_completed.fetch_add(1, Ordering::Relaxed),
            Err(kind) => self.rare.aborts[kind_index(kind)].fetch_add(1, Ordering::Relaxed),
        };
    }

    /// A fill started (`in_flight(false)` when it ends, however it ends).
    pub(crate) fn in_flight(&self, started: bool) {
        match started {
            true => self.rare.in_flight.fetch_add(1, Ordering::Relaxed),
            false => self.rare.in_flight.fetch_sub(1, Ordering::Relaxed),
        };
    }

    pub(crate) fn purge(&self) {
        self.rare.purges.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, storage: Option<StorageUsage>) -> StreamCacheStats {
        let sum = |pick: fn(&Stripe) -> &AtomicU64| {
            self.stripes
                .iter()
                .map(|stripe| pick(stripe).load(Ordering::Relaxed))
                .sum()
        };
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        StreamCacheStats {
            hits: sum(|s| &s.hits),
            partial_hits: sum(|s| &s.partial_hits),
            misses: load(&self.rare.misses),
            fills_started: load(&self.rare.fills_started),
            fills_completed: load(&self.rare.fills_completed),
            fills_failed: load(&self.rare.fills_failed),
            aborts: AbortCounts(std::array::from_fn(|i| load(&self.rare.aborts[i]))),
            bytes_served: sum(|s| &s.bytes_served),
            purges: load(&self.rare.purges),
            fills_in_flight: load(&self.rare.in_flight),
            storage,
        }
    }
}

/// Fill aborts counted by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AbortCounts([u64; KINDS.len()]);

impl AbortCounts {
    /// Aborts with this cause.
    pub fn get(&self, kind: AbortKind) -> u64 {
        self.0[kind_index(kind)]
    }

    /// Aborts of every cause.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// `(cause, count)` for every cause, zeros included.
    pub fn iter(&self) -> impl Iterator<Item = (AbortKind, u64)> + '_ {
        KINDS.iter().copied().zip(self.0.iter().copied())
    }
}

/// A snapshot of a [`StreamCache`](crate::StreamCache)'s counters ([`stats`]). Each counter is
/// read on its own (relaxed): exact, but not one atomic cut across all of them.
///
/// [`stats`]: crate::StreamCache::stats
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamCacheStats {
    /// `lookup` / `get_or_fill` calls that found a complete object.
    pub hits: u64,
    /// ... that found an object still being written (and attached to it).
    pub partial_hits: u64,
    /// ... that found nothing (a `get_or_fill` miss then fills or joins a fill; counted once).
    pub misses: u64,
    /// Fills this cache ran (`fill()` called).
    pub fills_started: u64,
    /// Fills whose body was completely written.
    pub fills_completed: u64,
    /// Fills that failed before their body started (upstream error, fill timeout, storage
    /// error, declared length too large).
    pub fills_failed: u64,
    /// Fills whose body write was aborted, by cause.
    pub aborts: AbortCounts,
    /// Body bytes handed to callers through readers this cache returned (counted as the
    /// reader ends or is dropped).
    pub bytes_served: u64,
    /// `purge` calls.
    pub purges: u64,
    /// Fills running now: from `fill()` being called until the body is completely written,
    /// aborted, or the fill failed or was cancelled before its body started (a gauge).
    pub fills_in_flight: u64,
    /// The backend's used and capacity bytes, if it reports them ([`crate::Storage::usage`]).
    pub storage: Option<StorageUsage>,
}
