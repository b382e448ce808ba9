//! The shard lock: a reader-writer lock whose readers take it with one atomic instruction on a
//! cache line of their own, instead of two on a line every reader of the shard shares.
//!
//! Why not `parking_lot::RwLock`: its read lock is a compare-and-swap on the lock word and its
//! unlock a fetch-sub on the same word. Each is a locked instruction (on x86 also a full
//! barrier), and together they were most of a cache hit: an uncontended `read()` plus unlock
//! costs 21.3 ns on the 2-core VM, the scheme here 11.9 ns (`--bin lockcost`, docs/benchmarks.md
//! "Session 5"). With several threads, every hit on a shard also moved the lock word between
//! cores.
//!
//! How: each thread has, per cache, a *mark*: a word in its own stripe of the cache's [`Tally`]
//! (the cache line that also holds its hit counters), which only that thread writes. A reader
//! stores the lock's tag (its address) in its mark with a sequentially consistent swap, then
//! checks the lock's writer flag; releasing is a plain release store of 0. A writer queues on a
//! mutex, sets the writer flag (sequentially consistent), and waits until no mark holds its tag
//! and no shared reader is counted. The two sides are Dekker's handshake: with both orders
//! sequentially consistent, a reader that a writer's scan missed is certain to see the writer
//! flag, and backs off. A reader that meets a writer clears its mark, watches the flag briefly,
//! then waits on the writers' mutex, so it sleeps rather than spins through a long write.
//!
//! The price is on writes: a writer reads every mark of the cache (two per core, at most 256;
//! one cache line each), and costs three locked instructions (mutex lock, flag swap, mutex
//! unlock; the flag is cleared with a plain store) against `parking_lot`'s two. A writer waiting
//! for a reader spins, then yields in a loop; it does not park (reads are short: a probe and a
//! clone). Threads without a mark (more threads than marks, or a thread already
//! inside another read of the same cache) count themselves in a shared counter instead, the way
//! `parking_lot` does.
//!
//! Like `parking_lot`'s, a thread must not take a shard's read lock while it holds one on the
//! same cache and a writer may be waiting (the cache never does; a `Clone` of a value that
//! reads the same cache could).
//!
//! This module and the cell in `sync.rs` are the only `unsafe` code in the workspace (the
//! workspace denies it elsewhere): a lock cannot hand out references to its content without it.
//! Every `unsafe` block rests on the handshake above, which the loom models in `tests/loom.rs`
//! check with loom's own tracked cell (a read that overlaps a write fails the model).
#![allow(unsafe_code)]

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use crate::sync::{
    AtomicU64, Cell, CellMut, CellRef, Mutex, MutexGuard, Ordering, sc_zero, wait_round,
};
use crate::tally::{Stripe, Tally};

/// The ordering of the stores that leave the lock: a reader clearing its mark or its count, a
/// writer clearing its flag. `Release` is what the handshake needs: under the language's
/// sequentially consistent order a writer's `SeqCst` load of a mark cannot return a clear that
/// happened before the reader's `SeqCst` swap, since the load would then precede the swap, and
/// the swap the reader's load of the writer flag, in the total order (likewise for the flag and
/// the shared count). Loom's model of `SeqCst` is weaker: it lets a `SeqCst` load return any
/// older non-`SeqCst` store, so under loom these stores are `SeqCst` too (in production each
/// would become a locked instruction, which is why it keeps `Release`).
const LEAVE: Ordering = if cfg!(herd_loom) {
    Ordering::SeqCst
} else {
    Ordering::Release
};

/// How many rounds of [`wait_round`] a reader watches the writer flag before it sleeps on the
/// writers' mutex (all pause instructions, no yields; under loom, one yield).
const READER_SPINS: u32 = if cfg!(herd_loom) { 1 } else { 32 };

/// A reader-writer lock around one shard's table (see the module docs).
pub(crate) struct ShardLock<T> {
    /// 1 while a writer holds or drains the lock, else 0. Only the holder of `writers` writes it,
    /// so it is cleared with a plain release store (a word shared with the reader count would
    /// need a locked read-modify-write).
    writer: AtomicU64,
    /// How many markless readers are inside.
    shared: AtomicU64,
    /// Writers queue here; readers that meet a writer wait here until it is done.
    writers: Mutex,
    /// The cache's per-thread stripes: each holds its thread's mark.
    tally: Tally,
    data: Cell<T>,
}

// SAFETY: the lock hands out `&T` to many threads at once only through read guards, and `&mut T`
// to one thread at a time through the write guard, like `std::sync::RwLock`.
unsafe impl<T: Send> Send for ShardLock<T> {}
// SAFETY: as above; shared readers need `T: Sync`, moving `&mut T` across threads `T: Send`.
unsafe impl<T: Send + Sync> Sync for ShardLock<T> {}

impl<T> ShardLock<T> {
    pub(crate) fn new(value: T, tally: Tally) -> Self {
        Self {
            writer: sc_zero(),
            shared: sc_zero(),
            writers: Mutex::new(),
            tally,
            data: Cell::new(value),
        }
    }

    /// What this lock's readers write into their marks: its address (non-zero, and distinct
    /// from every other live lock sharing the marks; the lock cannot move while borrowed).
    #[inline]
    fn tag(&self) -> u64 {
        self as *const Self as usize as u64
    }

    /// Shared access. One sequentially consistent swap on the thread's own mark; a release store
    /// when the guard drops.
    #[inline]
    pub(crate) fn read(&self) -> ReadGuard<'_, T> {
        let me = self.tally.mine();
        if let Some(line) = me
            // A thread already reading another shard of this cache keeps that mark.
            && line.mark.load(Ordering::Relaxed) == 0
        {
            let (mark, tag) = (&line.mark, self.tag());
            loop {
                mark.swap(tag, Ordering::SeqCst);
                if self.writer.load(Ordering::SeqCst) == 0 {
                    return ReadGuard {
                        lock: self,
                        me,
                        mark: Some(mark),
                        data: ManuallyDrop::new(self.data.get()),
                    };
                }
                mark.store(0, LEAVE);
                self.wait_for_writer();
            }
        }
        self.read_shared(me)
    }

    /// Shared access for a thread without a free mark: counted in `shared`.
    #[cold]
    fn read_shared<'a>(&'a self, me: Option<&'a Stripe>) -> ReadGuard<'a, T> {
        loop {
            self.shared.fetch_add(1, Ordering::SeqCst);
            if self.writer.load(Ordering::SeqCst) == 0 {
                return ReadGuard {
                    lock: self,
                    me,
                    mark: None,
                    data: ManuallyDrop::new(self.data.get()),
                };
            }
            self.shared.fetch_sub(1, LEAVE);
            self.wait_for_writer();
        }
    }

    /// Waits until the writer that holds (or drains) the lock is done. A write is short (an
    /// insert, a few hundred ns), so first watch the writer flag for a little while; then sleep
    /// on the queue mutex, which writers hold throughout. (Going to the mutex at once made the
    /// two-thread mixed benchmark's readers queue and yield behind every write to a hot shard.)
    #[cold]
    fn wait_for_writer(&self) {
        for round in 0..READER_SPINS {
            if self.writer.load(Ordering::Relaxed) == 0 {
                return;
            }
            wait_round(round);
        }
        drop(self.writers.lock());
    }

    /// Exclusive access: queue behind other writers, raise the writer flag, wait for the readers
    /// inside to leave. O(marks of the cache).
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        self.write_queued(self.writers.lock())
    }

    /// [`write`](Self::write) if no other writer holds or waits for the lock; `None` instead
    /// of queueing (readers inside are still waited for: they are short).
    pub(crate) fn try_write(&self) -> Option<WriteGuard<'_, T>> {
        self.writers
            .try_lock()
            .map(|queue| self.write_queued(queue))
    }

    fn write_queued<'a>(&'a self, queue: MutexGuard<'a>) -> WriteGuard<'a, T> {
        self.writer.swap(1, Ordering::SeqCst);
        let mut round = 0;
        while self.shared.load(Ordering::SeqCst) != 0 {
            wait_round(round);
            round = round.saturating_add(1);
        }
        let tag = self.tag();
        for mark in self.tally.marks() {
            let mut round = 0;
            while mark.load(Ordering::SeqCst) == tag {
                wait_round(round);
                round = round.saturating_add(1);
            }
        }
        WriteGuard {
            lock: self,
            data: ManuallyDrop::new(self.data.get_mut()),
            _queue: queue,
        }
    }
}

/// Shared access to a shard's table; dropping it leaves the lock.
pub(crate) struct ReadGuard<'a, T> {
    lock: &'a ShardLock<T>,
    /// The reading thread's stripe, if it owns one (for counting the read's outcome).
    me: Option<&'a Stripe>,
    /// The mark this reader set, or `None` for a shared reader counted in `shared`.
    mark: Option<&'a AtomicU64>,
    data: ManuallyDrop<CellRef<T>>,
}

impl<'a, T> ReadGuard<'a, T> {
    /// The reading thread's stripe (see [`Tally::record_as`]); outlives the guard.
    #[inline]
    pub(crate) fn me(&self) -> Option<&'a Stripe> {
        self.me
    }
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: a read guard exists only while no writer is past its drain (module docs).
        unsafe { self.data.get() }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // End the (loom-tracked) access before a writer may start.
        // SAFETY: dropped once, here, and not used afterwards.
        unsafe { ManuallyDrop::drop(&mut self.data) };
        match self.mark {
            Some(mark) => mark.store(0, LEAVE),
            None => {
                self.lock.shared.fetch_sub(1, LEAVE);
            }
        }
    }
}

/// Exclusive access to a shard's table; dropping it lets readers and the next writer in.
pub(crate) struct WriteGuard<'a, T> {
    lock: &'a ShardLock<T>,
    data: ManuallyDrop<CellMut<T>>,
    /// Held until after the writer flag is cleared (field drops run after `Drop::drop`).
    _queue: MutexGuard<'a>,
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the write guard is the only access while it lives.
        unsafe { self.data.get() }
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`, and `&mut self` makes this reference unique.
        unsafe { self.data.get() }
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: dropped once, here, and not used afterwards.
        unsafe { ManuallyDrop::drop(&mut self.data) };
        self.lock.writer.store(0, LEAVE);
    }
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn readers_and_writers_exclude_each_other() {
        // Writers keep two fields equal under the lock; readers must never see them differ.
        let lock = Arc::new(ShardLock::new((0u64, 0u64), Tally::with_stripes(2)));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        if (i + t) % 4 == 0 {
                            let mut g = lock.write();
                            g.0 += 1;
                            std::hint::black_box(&mut *g);
                            g.1 += 1;
                        } else {
                            let g = lock.read();
                            assert_eq!(g.0, g.1, "a reader saw a write in progress");
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let g = lock.read();
        assert_eq!(g.0, 6 * 5_000);
        assert_eq!(g.0, g.1);
    }

    #[test]
    fn a_nested_read_is_counted_as_shared_and_both_release() {
        let tally = Tally::with_stripes(64);
        let a = ShardLock::new(1u8, tally.clone());
        let b = ShardLock::new(2u8, tally);
        {
            let ga = a.read();
            assert!(ga.mark.is_some(), "the first read takes the thread's mark");
            let gb = b.read();
            assert!(
                gb.mark.is_none(),
                "a second read of the same cache is counted instead"
            );
            assert_eq!(b.shared.load(Ordering::Relaxed), 1);
            assert_eq!(*ga + *gb, 3);
        }
        assert_eq!(b.shared.load(Ordering::Relaxed), 0);
        // Both released: a writer gets in at once.
        *a.write() += 1;
        *b.write() += 1;
        assert_eq!((*a.read(), *b.read()), (2, 3));
    }

    #[test]
    fn a_thread_without_a_mark_reads_as_a_counted_shared_reader() {
        let lock = ShardLock::new(5u8, Tally::with_stripes(0));
        let g = lock.read();
        assert!(g.mark.is_none());
        assert_eq!(lock.shared.load(Ordering::Relaxed), 1);
        drop(g);
        *lock.write() = 6;
        assert_eq!(*lock.read(), 6);
    }

    #[test]
    #[allow(clippy::disallowed_types)] // a test flag, not the crate's state
    fn a_writer_waits_for_a_marked_reader() {
        use std::sync::atomic::AtomicBool;
        let lock = Arc::new(ShardLock::new(0u64, Tally::with_stripes(64)));
        let wrote = Arc::new(AtomicBool::new(false));
        let g = lock.read();
        assert!(g.mark.is_some());
        let writer = {
            let (lock, wrote) = (Arc::clone(&lock), Arc::clone(&wrote));
            std::thread::spawn(move || {
                *lock.write() = 1;
                wrote.store(true, Ordering::SeqCst);
            })
        };
        // Once the writer has raised its bit, it must stay stuck behind this read however many
        // turns it gets (without the mark scan it would finish within the first few).
        while lock.writer.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        for _ in 0..1_000 {
            std::thread::yield_now();
        }
        assert!(
            !wrote.load(Ordering::SeqCst),
            "the writer ran during a read"
        );
        assert_eq!(*g, 0);
        drop(g);
        writer.join().unwrap();
        assert!(wrote.load(Ordering::SeqCst));
        assert_eq!(*lock.read(), 1);
    }
}
