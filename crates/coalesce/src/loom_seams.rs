//! Seams for the loom models in `tests/loom.rs`, compiled only under `--cfg herd_loom`.
//!
//! Loom cannot see tokio's timers or tasks, and a model can only call public items. So the
//! pieces of the state machine that normally wait on tokio get a loom-visible input here,
//! while the transitions themselves stay the crate's own code:
//! - lead ages: a [`ManualClock`] the model advances, instead of tokio's clock;
//! - a wait timeout: [`Group::loom_join_or_give_up`], the group's own timeout path with the
//!   timer replaced by any future (a racing thread's "give up");
//! - detached fills: [`Group::loom_run_detached_on`], `run_detached` with the spawner given
//!   (a loom thread, or a runtime that drops the task);
//! - a distributed refresh standing down: [`Leader::loom_stand_down`].
//!
//! None of this exists in a normal build.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc as StdArc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use tokio::time::Instant;

#[cfg(feature = "tokio")]
use crate::detached::Spawn;
use crate::group::Entered;
#[cfg(feature = "tokio")]
use crate::{FlightError, Leader};
use crate::{Group, GroupBuilder, Joined};

/// A clock that only moves when told to. Its reading is a std atomic, not a loom one: models
/// advance it at fixed points between steps, so it adds no interleavings of its own.
#[derive(Debug, Clone)]
pub struct ManualClock {
    base: Instant,
    nanos: StdArc<AtomicU64>,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            nanos: StdArc::new(AtomicU64::new(0)),
        }
    }
}

impl ManualClock {
    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).expect("a model's step fits in u64 nanoseconds");
        self.nanos.fetch_add(nanos, SeqCst);
    }

    pub(crate) fn now(&self) -> Instant {
        self.base + Duration::from_nanos(self.nanos.load(SeqCst))
    }
}

impl<K, V, E> GroupBuilder<K, V, E> {
    /// Lead ages (for `takeover_after`) are read from `clock`.
    pub fn loom_clock(mut self, clock: ManualClock) -> Self {
        self.config.clock = clock;
        self
    }
}

impl<K, V, E> Group<K, V, E>
where
    K: Hash + Eq + Clone,
    V: Clone,
{
    /// [`Group::join`] whose follower gives up when `give_up` resolves, through the same code
    /// as a `wait_timeout` expiring (the timer is the only difference).
    pub async fn loom_join_or_give_up(
        &self,
        key: K,
        give_up: impl Future<Output = ()>,
    ) -> Joined<'_, K, V, E> {
        match self.enter_join(key) {
            Entered::Lead(joined) => joined,
            Entered::Follow(wait) => self.wait_or_give_up(wait, give_up).await,
        }
    }
}

#[cfg(feature = "tokio")]
impl<K, V, E> Group<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Send + Sync + 'static,
{
    /// [`Group::run_detached`] with the spawner given.
    pub async fn loom_run_detached_on<F, Fut, S>(
        &self,
        key: K,
        make_fut: F,
        spawner: S,
    ) -> Result<V, FlightError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        S: Spawn,
    {
        self.run_detached_on(key, make_fut, || Some(spawner)).await
    }
}

#[cfg(feature = "tokio")]
impl<K: Hash + Eq, V, E> Leader<'_, K, V, E> {
    /// The stand-down of a distributed refresh that found the fill lease held elsewhere.
    pub fn loom_stand_down(self) {
        self.stand_down();
    }
}
