//! The partial-body cell: one per write, shared by its writer and every reader bound to it.
//!
//! Why it exists: a body readable while it is written needs three things read *together* under one
//! lock: how many bytes exist, whether the write is still open, finished or aborted, and who is
//! waiting for more. Pingora keeps the length in a watch channel and infers "finished" from the
//! sender vanishing, which turns an aborted write into a clean end (pingora-cache's `PartialHit`,
//! cloudflare/pingora issue 932). Here the state is explicit and terminal states never change.
//!
//! Design:
//! - Chunks are kept as `Bytes` (when the backend retains them in memory); readers hold only an
//!   index and a position, so N readers never copy the body and finishing never concatenates.
//!   Backends that keep bytes elsewhere (disk) use the same cell for length/state/waiters only.
//! - The waiter list is our own (`Vec<Option<Waker>>` under the shim mutex) so loom can check it.
//!   Wakers are always woken after the lock is released. A waiting cursor remembers the slot it
//!   registered in and the list's epoch; re-polling replaces its waker in place, so a reader that
//!   is polled many times does not grow the list, and a dropped cursor frees its slot for the next
//!   waiter, so the list is O(readers waiting at once) even while a stalled write sees readers
//!   come and go.
//! - A cursor changes its position only when a poll returns `Ready`, which is what makes every
//!   read future cancel-safe.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::error::BodyError;
use crate::state::{AbortReason, WriteState};
use crate::sync::Mutex;

/// Limits a cell enforces on appends and at completion.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CellLimits {
    /// The declared body length: more bytes, or fewer at completion, abort the write.
    pub(crate) expected_len: Option<u64>,
    /// The maximum body size: more bytes abort with `TooLarge`.
    pub(crate) max_len: Option<u64>,
}

/// The partial-body cell. Always used behind an `Arc`.
#[derive(Debug)]
pub(crate) struct BodyCell {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Retained chunks (empty when the backend keeps bytes elsewhere). Never empty chunks.
    chunks: Vec<Bytes>,
    /// `starts[i]` is the body offset of `chunks[i]`.
    starts: Vec<u64>,
    retain_chunks: bool,
    len: u64,
    terminal: Option<Terminal>,
    limits: CellLimits,
    waiters: Vec<Option<Waker>>,
    /// Indices of empty slots in `waiters`, reused before the list grows: the list stays as long
    /// as the most readers that waited at once, however many come and go while a write stalls.
    free: Vec<usize>,
    /// Bumped whenever `waiters` is drained, so stale slot indices are recognised.
    epoch: u64,
    readers: usize,
}

#[derive(Debug, Clone)]
enum Terminal {
    Complete,
    Aborted(AbortReason),
}

/// A cursor's registration in the waiter list.
#[derive(Debug, Default)]
struct WaitSlot {
    registered: Option<(u64, usize)>,
}

/// What a cursor may do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ready {
    /// Bytes `[pos, upto)` are readable now.
    Data { upto: u64 },
    /// The write completed and every requested byte was read.
    End,
}

impl Inner {
    fn state(&self) -> WriteState {
        match &self.terminal {
            None => WriteState::Partial(self.len),
            Some(Terminal::Complete) => WriteState::Complete(self.len),
            Some(Terminal::Aborted(reason)) => WriteState::Aborted(reason.clone()),
        }
    }

    fn register(&mut self, slot: &mut WaitSlot, waker: &Waker) {
        if let Some((epoch, index)) = slot.registered
            && epoch == self.epoch
        {
            match &mut self.waiters[index] {
                Some(existing) if existing.will_wake(waker) => {}
                entry => *entry = Some(waker.clone()),
            }
            return;
        }
        let index = match self.free.pop() {
            Some(index) => {
                self.waiters[index] = Some(waker.clone());
                index
            }
            None => {
                self.waiters.push(Some(waker.clone()));
                self.waiters.len() - 1
            }
        };
        slot.registered = Some((self.epoch, index));
    }

    fn deregister(&mut self, slot: &mut WaitSlot) {
        if let Some((epoch, index)) = slot.registered.take()
            && epoch == self.epoch
        {
            self.waiters[index] = None;
            self.free.push(index);
        }
    }

    /// Take every waiter out; the caller wakes them after releasing the lock.
    fn take_waiters(&mut self) -> Vec<Waker> {
        if self.waiters.is_empty() {
            return Vec::new();
        }
        self.epoch += 1;
        self.free.clear();
        std::mem::take(&mut self.waiters)
            .into_iter()
            .flatten()
            .collect()
    }

    /// Abort if open. Returns the wakers to wake, or `None` if already terminal.
    fn abort(&mut self, reason: AbortReason) -> Option<Vec<Waker>> {
        if self.terminal.is_some() {
            return None;
        }
        self.terminal = Some(Terminal::Aborted(reason));
        Some(self.take_waiters())
    }

    /// The abort an append to `new_len` bytes must cause, if any.
    fn limit_violation(&self, new_len: u64) -> Option<AbortReason> {
        if let Some(limit) = self.limits.max_len
            && new_len > limit
        {
            return Some(AbortReason::TooLarge { limit });
        }
        if let Some(expected) = self.limits.expected_len
            && new_len > expected
        {
            return Some(AbortReason::LengthMismatch {
                expected,
                written: new_len,
            });
        }
        None
    }

    fn terminal_error(&self) -> Option<AbortReason> {
        match &self.terminal {
            None => None,
            Some(Terminal::Aborted(reason)) => Some(reason.clone()),
            // Appending after completion cannot happen through the writer API (finish consumes
            // it); report it as the writer having gone away rather than mutating a terminal state.
            Some(Terminal::Complete) => Some(AbortReason::WriterDropped),
        }
    }
}

fn wake_all(wakers: Vec<Waker>) {
    for waker in wakers {
        waker.wake();
    }
}

impl BodyCell {
    /// A new open cell. `retain_chunks` keeps appended chunks for in-memory readers.
    pub(crate) fn new(retain_chunks: bool, limits: CellLimits) -> Arc<Self> {
        Arc::new(BodyCell {
            inner: Mutex::new(Inner {
                chunks: Vec::new(),
                starts: Vec::new(),
                retain_chunks,
                len: 0,
                terminal: None,
                limits,
                waiters: Vec::new(),
                free: Vec::new(),
                epoch: 0,
                readers: 0,
            }),
        })
    }

    /// A cell for a body already complete elsewhere (a finished file), `len` bytes long.
    pub(crate) fn completed(len: u64) -> Arc<Self> {
        let cell = Self::new(false, CellLimits::default());
        {
            let mut inner = cell.inner.lock();
            inner.len = len;
            inner.terminal = Some(Terminal::Complete);
        }
        cell
    }

    /// The current state, length included.
    pub(crate) fn state(&self) -> WriteState {
        self.inner.lock().state()
    }

    /// Readers currently bound to this cell.
    pub(crate) fn reader_count(&self) -> usize {
        self.inner.lock().readers
    }

    /// Append a chunk (kept only if the cell retains chunks). Enforces the limits: a violation
    /// aborts the write. Empty chunks are ignored. Returns the new length.
    pub(crate) fn append(&self, chunk: Bytes) -> Result<u64, AbortReason> {
        let (result, wakers) = {
            let mut inner = self.inner.lock();
            if let Some(reason) = inner.terminal_error() {
                return Err(reason);
            }
            if chunk.is_empty() {
                return Ok(inner.len);
            }
            let new_len = inner.len + chunk.len() as u64;
            if let Some(reason) = inner.limit_violation(new_len) {
                let wakers = inner.abort(reason.clone()).unwrap_or_default();
                (Err(reason), wakers)
            } else {
                if inner.retain_chunks {
                    let start = inner.len;
                    inner.starts.push(start);
                    inner.chunks.push(chunk);
                }
                inner.len = new_len;
                (Ok(new_len), inner.take_waiters())
            }
        };
        wake_all(wakers);
        result
    }

    /// Check that `n` more bytes would be accepted, before storing them elsewhere. A violation
    /// aborts the write. Does not change the length; call [`BodyCell::advance`] once stored.
    pub(crate) fn admit(&self, n: u64) -> Result<(), AbortReason> {
        let (result, wakers) = {
            let mut inner = self.inner.lock();
            if let Some(reason) = inner.terminal_error() {
                return Err(reason);
            }
            match inner.limit_violation(inner.len + n) {
                None => return Ok(()),
                Some(reason) => {
                    let wakers = inner.abort(reason.clone()).unwrap_or_default();
                    (Err(reason), wakers)
                }
            }
        };
        wake_all(wakers);
        result
    }

    /// Publish `n` more bytes stored outside the cell (after [`BodyCell::admit`]).
    pub(crate) fn advance(&self, n: u64) -> Result<u64, AbortReason> {
        let (len, wakers) = {
            let mut inner = self.inner.lock();
            if let Some(reason) = inner.terminal_error() {
                return Err(reason);
            }
            inner.len += n;
            (inner.len, inner.take_waiters())
        };
        wake_all(wakers);
        Ok(len)
    }

    /// Finish the write: checks the declared length (a mismatch aborts) and moves to
    /// `Complete(len)`. Fails with the abort reason if the write is (or becomes) aborted.
    pub(crate) fn complete(&self) -> Result<u64, AbortReason> {
        let (result, wakers) = {
            let mut inner = self.inner.lock();
            match &inner.terminal {
                Some(Terminal::Complete) => return Ok(inner.len),
                Some(Terminal::Aborted(reason)) => return Err(reason.clone()),
                None => {}
            }
            match inner.limits.expected_len {
                Some(expected) if expected != inner.len => {
                    let reason = AbortReason::LengthMismatch {
                        expected,
                        written: inner.len,
                    };
                    let wakers = inner.abort(reason.clone()).unwrap_or_default();
                    (Err(reason), wakers)
                }
                _ => {
                    inner.terminal = Some(Terminal::Complete);
                    (Ok(inner.len), inner.take_waiters())
                }
            }
        };
        wake_all(wakers);
        result
    }

    /// The declared-length check `complete` would make, without changing state.
    pub(crate) fn check_complete(&self) -> Result<u64, AbortReason> {
        let inner = self.inner.lock();
        if let Some(reason) = inner.terminal_error() {
            return Err(reason);
        }
        match inner.limits.expected_len {
            Some(expected) if expected != inner.len => Err(AbortReason::LengthMismatch {
                expected,
                written: inner.len,
            }),
            _ => Ok(inner.len),
        }
    }

    /// Abort the write if it is still open. Returns false (and changes nothing) if it was already
    /// terminal: terminal states never change.
    pub(crate) fn abort(&self, reason: AbortReason) -> bool {
        let wakers = self.inner.lock().abort(reason);
        match wakers {
            Some(wakers) => {
                wake_all(wakers);
                true
            }
            None => false,
        }
    }

    /// Aborts with `reason` only if no reader is attached, in one step with readers attaching
    /// (a reader attaches under the same lock): an attach either comes first, and nothing is
    /// aborted, or after, and finds the write aborted. Returns whether it aborted.
    pub(crate) fn abort_if_unread(&self, reason: AbortReason) -> bool {
        let wakers = {
            let mut inner = self.inner.lock();
            if inner.readers > 0 {
                return false;
            }
            inner.abort(reason)
        };
        match wakers {
            Some(wakers) => {
                wake_all(wakers);
                true
            }
            None => false,
        }
    }

    /// A new reader positioned at offset 0.
    pub(crate) fn cursor(self: &Arc<Self>) -> Cursor {
        self.inner.lock().readers += 1;
        Cursor {
            cell: Arc::clone(self),
            pos: 0,
            chunk: 0,
            end: None,
            wait: WaitSlot::default(),
        }
    }
}

/// One reader's position in one cell. Holds no bytes of its own.
#[derive(Debug)]
pub(crate) struct Cursor {
    cell: Arc<BodyCell>,
    pos: u64,
    /// Index of the retained chunk containing `pos` (retaining cells only).
    chunk: usize,
    end: Option<u64>,
    wait: WaitSlot,
}

impl Cursor {
    /// The body offset of the next byte this cursor returns.
    pub(crate) fn position(&self) -> u64 {
        self.pos
    }

    /// The state of the write this cursor is bound to.
    pub(crate) fn state(&self) -> WriteState {
        self.cell.state()
    }

    /// Decide under the lock what this cursor may do; registers the waker when it must wait.
    fn poll_decide(
        &mut self,
        inner: &mut Inner,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Ready, BodyError>> {
        let limit = self.end.unwrap_or(u64::MAX);
        if self.pos < inner.len && self.pos < limit {
            inner.deregister(&mut self.wait);
            return Poll::Ready(Ok(Ready::Data {
                upto: inner.len.min(limit),
            }));
        }
        let outcome = match &inner.terminal {
            None => {
                inner.register(&mut self.wait, cx.waker());
                return Poll::Pending;
            }
            Some(Terminal::Aborted(reason)) => Err(BodyError::Aborted(reason.clone())),
            Some(Terminal::Complete) => match self.end {
                Some(end) if end > inner.len => Err(BodyError::RangeNotSatisfiable {
                    start: self.pos,
                    end: self.end,
                    len: inner.len,
                }),
                _ => Ok(Ready::End),
            },
        };
        inner.deregister(&mut self.wait);
        Poll::Ready(outcome)
    }

    /// Wait until bytes past the position are readable, or the write is terminal.
    /// `Ok(Ready::End)` only after a successful completion with every requested byte read.
    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<Ready, BodyError>> {
        let cell = Arc::clone(&self.cell);
        let mut inner = cell.inner.lock();
        self.poll_decide(&mut inner, cx)
    }

    /// Move the position forward by `n` bytes the caller read from elsewhere (non-retaining cells).
    pub(crate) fn consume(&mut self, n: u64) {
        self.pos += n;
    }

    /// The next retained chunk (a shared slice, never a copy), `Ok(None)` at a successful end,
    /// `Err(Aborted)` once every written byte was returned from an aborted write.
    pub(crate) fn poll_next_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, BodyError>> {
        let cell = Arc::clone(&self.cell);
        let mut inner = cell.inner.lock();
        match self.poll_decide(&mut inner, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Ready(Ok(Ready::End)) => Poll::Ready(Ok(None)),
            Poll::Ready(Ok(Ready::Data { upto })) => {
                debug_assert!(
                    inner.retain_chunks,
                    "poll_next_chunk on a non-retaining cell"
                );
                while inner.starts[self.chunk] + inner.chunks[self.chunk].len() as u64 <= self.pos {
                    self.chunk += 1;
                }
                let chunk = &inner.chunks[self.chunk];
                let chunk_start = inner.starts[self.chunk];
                let from = (self.pos - chunk_start) as usize;
                let to = ((upto - chunk_start) as usize).min(chunk.len());
                let bytes = chunk.slice(from..to);
                self.pos += bytes.len() as u64;
                Poll::Ready(Ok(Some(bytes)))
            }
        }
    }

    /// Restrict reads to `start..end` (end exclusive, `None` = to the end of the body). Waits
    /// until `start` is written or the write is terminal. A start past a completed length, or an
    /// end past it, is `RangeNotSatisfiable`; `start > end` is `InvalidRange` (no wait).
    pub(crate) fn poll_seek(
        &mut self,
        start: u64,
        end: Option<u64>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), BodyError>> {
        if let Some(end) = end
            && end < start
        {
            return Poll::Ready(Err(BodyError::InvalidRange { start, end }));
        }
        let cell = Arc::clone(&self.cell);
        let mut inner = cell.inner.lock();
        let outcome = if inner.len >= start {
            match (&inner.terminal, end) {
                (Some(Terminal::Complete), Some(end)) if end > inner.len => {
                    Err(BodyError::RangeNotSatisfiable {
                        start,
                        end: Some(end),
                        len: inner.len,
                    })
                }
                _ => Ok(()),
            }
        } else {
            match &inner.terminal {
                None => {
                    inner.register(&mut self.wait, cx.waker());
                    return Poll::Pending;
                }
                Some(Terminal::Aborted(reason)) => Err(BodyError::Aborted(reason.clone())),
                Some(Terminal::Complete) => Err(BodyError::RangeNotSatisfiable {
                    start,
                    end,
                    len: inner.len,
                }),
            }
        };
        inner.deregister(&mut self.wait);
        if outcome.is_ok() {
            self.pos = start;
            self.end = end;
            self.chunk = inner
                .starts
                .partition_point(|&s| s <= start)
                .saturating_sub(1);
        }
        Poll::Ready(outcome)
    }
}

impl Drop for Cursor {
    fn drop(&mut self) {
        let mut inner = self.cell.inner.lock();
        inner.deregister(&mut self.wait);
        inner.readers -= 1;
    }
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use super::*;

    /// Issue 15: readers that wait on a stalled write and go away must not grow the waiter list.
    #[test]
    fn waiter_list_stays_bounded_by_live_readers() {
        let cell = BodyCell::new(true, CellLimits::default());
        let mut cx = Context::from_waker(Waker::noop());
        let mut kept = cell.cursor();
        assert!(kept.poll_ready(&mut cx).is_pending());
        for _ in 0..1_000 {
            let mut churn = cell.cursor();
            assert!(churn.poll_ready(&mut cx).is_pending());
            drop(churn);
        }
        assert!(
            cell.inner.lock().waiters.len() <= 2,
            "{} waiter slots for 1 live reader",
            cell.inner.lock().waiters.len()
        );
        // The surviving waiter is still woken and served.
        cell.append(Bytes::from_static(b"x")).unwrap();
        assert!(matches!(
            kept.poll_ready(&mut cx),
            Poll::Ready(Ok(Ready::Data { upto: 1 }))
        ));
        assert!(cell.inner.lock().waiters.is_empty());
    }
}
