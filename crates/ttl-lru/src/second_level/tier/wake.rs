//! The early wake of a leader waiting for another process's fill: a per-key [`Signal`] that
//! the backplane's "filled" announcement fires, so the waiter re-checks L2 at once instead of
//! at its next poll (polling stays the fallback when an announcement is lost).
//!
//! A tiny notifier of our own (a generation count and the wakers of pending waits) because
//! `ttl-lru` does not enable tokio's `sync` feature. Touched only on the L2-miss path with a
//! fleet lease, and by announcements; never on an L1 hit.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// A one-to-many wake-up: [`armed`](Signal::armed) futures created before a
/// [`notify`](Signal::notify) complete; later ones wait for the next.
#[derive(Default)]
pub(super) struct Signal {
    state: parking_lot::Mutex<State>,
}

#[derive(Default)]
struct State {
    generation: u64,
    wakers: Vec<Waker>,
}

impl Signal {
    /// Completes every wait armed before now.
    pub(super) fn notify(&self) {
        let wakers = {
            let mut state = self.state.lock();
            state.generation = state.generation.wrapping_add(1);
            std::mem::take(&mut state.wakers)
        };
        for waker in wakers {
            waker.wake();
        }
    }

    /// A future that completes at the first `notify` after this call (armed at once, not at
    /// its first poll, so a notification in between is not lost).
    pub(super) fn armed(self: &Arc<Self>) -> Armed {
        Armed {
            signal: Arc::clone(self),
            seen: self.state.lock().generation,
        }
    }
}

/// See [`Signal::armed`]. Dropping it is always safe (a stale waker is dropped at the next
/// `notify`).
pub(super) struct Armed {
    signal: Arc<Signal>,
    seen: u64,
}

impl Future for Armed {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.signal.state.lock();
        if state.generation != self.seen {
            return Poll::Ready(());
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// The signals of the keys some leader of this process is waiting on, by encoded key.
#[derive(Default)]
pub(super) struct Waiters {
    keys: parking_lot::Mutex<HashMap<Vec<u8>, Registered>>,
}

/// A key's signal and how many waits hold it.
type Registered = (Arc<Signal>, usize);

impl Waiters {
    /// Registers a wait for `key`'s announcement until the returned guard is dropped.
    pub(super) fn register(&self, key: &[u8]) -> Waiting<'_> {
        let mut keys = self.keys.lock();
        let (signal, count) = keys.entry(key.to_vec()).or_default();
        *count += 1;
        Waiting {
            waiters: self,
            key: key.to_vec(),
            signal: Arc::clone(signal),
        }
    }

    /// Wakes the waits registered for `key`; returns whether there were any.
    pub(super) fn announce(&self, key: &[u8]) -> bool {
        let signal = self.keys.lock().get(key).map(|(s, _)| Arc::clone(s));
        match signal {
            Some(signal) => {
                signal.notify();
                true
            }
            None => false,
        }
    }
}

/// One registered wait; unregisters on drop (the key's entry goes with its last wait).
pub(super) struct Waiting<'a> {
    waiters: &'a Waiters,
    key: Vec<u8>,
    pub(super) signal: Arc<Signal>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut keys = self.waiters.keys.lock();
        if let Some((_, count)) = keys.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                keys.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn a_wait_armed_before_a_notify_completes_even_if_first_polled_after() {
        let waiters = Waiters::default();
        let waiting = waiters.register(b"k");
        let mut armed = waiting.signal.armed();
        assert!((&mut armed).now_or_never().is_none());
        assert!(waiters.announce(b"k"));
        assert!(armed.now_or_never().is_some());
        let later = waiting.signal.armed();
        assert!(
            later.now_or_never().is_none(),
            "armed after: waits for the next"
        );
        drop(waiting);
        assert!(!waiters.announce(b"k"), "unregistered with its last wait");
        assert!(waiters.keys.lock().is_empty());
    }
}
