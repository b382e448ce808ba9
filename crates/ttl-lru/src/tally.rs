//! Counting the frequent events (hits, misses, inserts, evictions, expirations) without a
//! locked instruction and without a cache line that every thread writes.
//!
//! A hit used to `fetch_add` a per-shard counter: a locked read-modify-write, which on x86 is
//! also a full barrier (measured ~4 ns of a ~60 ns get at 100K entries, and a cache line that
//! every thread hitting the shard writes). Misses, inserts and evictions did the same until
//! session 4: with two threads on a zipf 95/5 workload the per-shard counter line moved between
//! the cores on every miss and insert (measured 72 -> 56 ns per operation by dropping the miss
//! counter alone). Here each thread owns a stripe (its own cache line) of a cache's counters and
//! bumps it with a plain relaxed load and store.
//!
//! A stripe also holds its thread's reader mark for the cache's shard locks (`shard_lock.rs`),
//! so a hit finds its lock mark and its counters with one thread-local lookup, in one line.
//!
//! The sums stay exact: a stripe has one writer at a time. A thread's stripe index is handed
//! back only by its thread-local destructor, through a mutex, so the next thread to take the
//! index sees every increment of the previous one. Threads beyond the cache's stripe count, and
//! calls from thread-local destructors that run after the index was handed back, share one
//! overflow stripe with `fetch_add`.

use crate::sync::Ordering;
use crate::sync::plain::AtomicU64;
use std::sync::Arc;

use crate::stats::CachePadded;

/// Which counter to bump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// A fresh hit.
    Fresh,
    /// A hit on a stale entry (inside the stale-while-revalidate window).
    Stale,
    Miss,
    Insert,
    /// A live entry removed to make room.
    Eviction,
    /// An entry removed past its TTL (as a victim or by a purge).
    Expiration,
    /// A hit on a cached error (negative caching).
    NegativeHit,
    /// A read-through call that led a fill (a miss of the read-through path).
    Fill,
    /// A read-through call that waited for another caller's fill.
    Wait,
}

/// One thread's line of a cache: its shard-lock mark and its counters.
#[derive(Debug)]
pub(crate) struct Stripe {
    /// This thread's reader mark for the cache's shard locks (`shard_lock.rs`): the tag of the
    /// shard lock it is reading, or 0. In the same line as the counters, so a hit writes one
    /// line of its own, found with one thread-local lookup.
    pub(crate) mark: crate::sync::AtomicU64,
    fresh: AtomicU64,
    stale: AtomicU64,
    misses: AtomicU64,
    inserts: AtomicU64,
    evictions: AtomicU64,
    expirations: AtomicU64,
    negative_hits: AtomicU64,
    fills: AtomicU64,
    waits: AtomicU64,
    /// Lookups this thread recorded in the cache's admission sketches since it last added them
    /// to a shard's shared record count (`admission.rs`).
    sketch_records: AtomicU64,
    /// This stripe's place in the tally (0: the shared overflow stripe): a shard's per-thread
    /// hit buffers (`adaptive.rs`) use the same index.
    pub(crate) index: usize,
}

impl Stripe {
    fn new(index: usize) -> Self {
        Self {
            index,
            mark: crate::sync::sc_zero(),
            fresh: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            inserts: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            expirations: AtomicU64::new(0),
            negative_hits: AtomicU64::new(0),
            fills: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            sketch_records: AtomicU64::new(0),
        }
    }

    /// Counts one lookup recorded in an admission sketch; returns this thread's count so far.
    /// A plain load and store: the stripe has one writer.
    #[inline]
    pub(crate) fn count_sketch_record(&self) -> u64 {
        let n = self.sketch_records.load(Ordering::Relaxed).wrapping_add(1);
        self.sketch_records.store(n, Ordering::Relaxed);
        n
    }

    /// Adds `n` to this thread's own counter: it is the stripe's only writer, so no
    /// read-modify-write is needed.
    #[inline]
    fn bump(&self, event: Event, n: u64) {
        let c = self.counter(event);
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    #[inline]
    fn counter(&self, event: Event) -> &AtomicU64 {
        match event {
            Event::Fresh => &self.fresh,
            Event::Stale => &self.stale,
            Event::Miss => &self.misses,
            Event::Insert => &self.inserts,
            Event::Eviction => &self.evictions,
            Event::Expiration => &self.expirations,
            Event::NegativeHit => &self.negative_hits,
            Event::Fill => &self.fills,
            Event::Wait => &self.waits,
        }
    }
}

/// A cache's counters of frequent events: the shared overflow stripe first, then one stripe per
/// thread index (thread `i` owns `stripes[i + 1]`). Clones share the stripes: the cache and
/// each of its shards hold one, so a shard reaches its stripe in one pointer hop from its own
/// cache line (an `Arc<Tally>` made hits ~2% slower).
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    stripes: Arc<[CachePadded<Stripe>]>,
}

impl Tally {
    /// Two stripes per available core (threads usually outnumber cores a little), at most 256.
    /// Under loom, one: in a model with two reading threads, whichever reads first owns the
    /// stripe (and its shard-lock mark) and the other uses the shared paths, so the models cover
    /// both kinds of reader.
    pub(crate) fn new() -> Self {
        // Unit tests check which lines a hit writes from their own stripe: enough stripes that
        // a test thread has one even while other tests' threads hold indices.
        #[cfg(all(test, not(herd_loom)))]
        let owned = 256;
        #[cfg(all(not(test), not(herd_loom)))]
        let owned = std::thread::available_parallelism()
            .map_or(4, |n| n.get())
            .saturating_mul(2)
            .clamp(1, 256);
        #[cfg(herd_loom)]
        let owned = 1;
        Self::with_stripes(owned)
    }

    /// `owned` thread stripes after the overflow one.
    pub(crate) fn with_stripes(owned: usize) -> Self {
        Self {
            stripes: (0..=owned).map(|i| CachePadded(Stripe::new(i))).collect(),
        }
    }

    /// The calling thread's own stripe, if it has one.
    #[inline]
    pub(crate) fn mine(&self) -> Option<&Stripe> {
        // `thread_index` is `usize::MAX` for a thread without an index, so this wraps to 0: the
        // overflow stripe, which no thread owns.
        match crate::sync::thread_index().wrapping_add(1) {
            0 => None,
            i => self.stripes.get(i).map(|s| &s.0),
        }
    }

    /// Stripes, the overflow one included (the size of a per-stripe array).
    pub(crate) fn len(&self) -> usize {
        self.stripes.len()
    }

    /// The marks of every owned stripe (a shard-lock writer waits on them).
    pub(crate) fn marks(&self) -> impl Iterator<Item = &crate::sync::AtomicU64> {
        self.stripes[1..].iter().map(|s| &s.0.mark)
    }

    #[inline]
    pub(crate) fn record(&self, event: Event) {
        self.add(event, 1);
    }

    #[inline]
    pub(crate) fn add(&self, event: Event, n: u64) {
        self.add_as(self.mine(), event, n);
    }

    /// Counts one `event` for the thread whose stripe is `me` (from [`mine`](Self::mine), taken
    /// once per operation).
    #[inline]
    pub(crate) fn record_as(&self, me: Option<&Stripe>, event: Event) {
        self.add_as(me, event, 1);
    }

    #[inline]
    fn add_as(&self, me: Option<&Stripe>, event: Event, n: u64) {
        match me {
            Some(own) => own.bump(event, n),
            None => {
                self.stripes[0]
                    .counter(event)
                    .fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// The sum over every stripe.
    pub(crate) fn get(&self, event: Event) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.counter(event).load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

/// Thread indices (outside loom; loom's threads share one OS thread, so `sync.rs` numbers them
/// itself).
#[cfg(not(herd_loom))]
mod index {
    use crate::sync::Ordering;
    use crate::sync::plain::AtomicUsize;
    use std::cell::Cell;
    use std::sync::{Mutex, PoisonError};

    /// Stripe indices handed back by exited threads; the smallest is reused first, so long-lived
    /// threads keep low indices (which every cache has a stripe for).
    static FREE: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    /// The next never-used index.
    static NEXT: AtomicUsize = AtomicUsize::new(0);

    /// `INDEX` before this thread has taken a stripe index.
    const UNASSIGNED: usize = usize::MAX - 1;
    /// `INDEX` once the index is handed back (thread-local destructors running late): overflow.
    const RELEASED: usize = usize::MAX;

    thread_local! {
        /// This thread's stripe index. A plain `Cell` with a constant initialiser, so reading it on
        /// the hit path is one thread-local load (no lazy-initialisation or destructor state).
        static INDEX: Cell<usize> = const { Cell::new(UNASSIGNED) };
        /// Hands the index back when the thread exits; touched once, when the index is taken.
        static RELEASE: Release = const { Release };
    }

    /// Returns this thread's index to `FREE` on thread exit.
    struct Release;

    impl Drop for Release {
        fn drop(&mut self) {
            let index = INDEX.try_with(|i| i.replace(RELEASED)).unwrap_or(RELEASED);
            if index < UNASSIGNED {
                FREE.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(index);
            }
        }
    }

    /// This thread's stripe index; `usize::MAX` (no stripe: use the overflow) if the thread's
    /// thread-locals are being destroyed.
    #[inline]
    pub(crate) fn thread_index() -> usize {
        match INDEX.try_with(Cell::get) {
            Ok(UNASSIGNED) => assign(),
            Ok(RELEASED) | Err(_) => usize::MAX,
            Ok(index) => index,
        }
    }

    #[cold]
    fn assign() -> usize {
        // Register the destructor first: if that is no longer possible, take no index.
        if RELEASE.try_with(|_| ()).is_err() {
            return usize::MAX;
        }
        let index = {
            let mut free = FREE.lock().unwrap_or_else(PoisonError::into_inner);
            match (0..free.len()).min_by_key(|&i| free[i]) {
                Some(i) => free.swap_remove(i),
                None => NEXT.fetch_add(1, Ordering::Relaxed),
            }
        };
        INDEX.with(|i| i.set(index));
        index
    }
}
#[cfg(not(herd_loom))]
pub(crate) use index::thread_index;

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use super::*;

    #[test]
    fn concurrent_hits_are_counted_exactly() {
        // Fewer stripes than threads: some threads share the overflow stripe.
        let counters = Arc::new(Tally::with_stripes(3));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let c = Arc::clone(&counters);
                std::thread::spawn(move || {
                    for i in 0..20_000 {
                        c.record(if (i + t) % 5 == 0 {
                            Event::Stale
                        } else {
                            Event::Fresh
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            counters.get(Event::Fresh) + counters.get(Event::Stale),
            160_000
        );
        assert_eq!(counters.get(Event::Stale), 32_000);
    }

    #[test]
    fn a_reused_stripe_keeps_earlier_counts() {
        let counters = Arc::new(Tally::with_stripes(2));
        for _ in 0..10 {
            let c = Arc::clone(&counters);
            std::thread::spawn(move || {
                for _ in 0..1_000 {
                    c.record(Event::Fresh);
                }
            })
            .join()
            .unwrap();
        }
        assert_eq!(counters.get(Event::Fresh), 10_000);
    }
}
