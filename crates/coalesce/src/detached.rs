//! [`Group::run_detached`]: fills that survive the caller that started them.
//!
//! A proxy whose client disconnects should still finish filling the cache for the next client.
//! Here the fill runs on a spawned tokio task that owns the lead (an
//! [`OwnedLeader`](crate::OwnedLeader), made from the borrowed [`Leader`](crate::Leader)), and
//! the caller waits for the result like any follower.

use std::future::Future;
use std::hash::Hash;

use crate::{FlightError, Group, Joined};

impl<K, V, E> Group<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Send + Sync + 'static,
{
    /// Like [`run`](Group::run), but if this caller leads, the future made by `make_fut` runs on
    /// a spawned tokio task: the fill completes and publishes even if this caller is dropped.
    ///
    /// Outside a tokio runtime there is nothing to spawn onto: the fill then runs inline, as
    /// with `run`.
    ///
    /// # Cancellation
    /// - Dropped while waiting for another caller's fill: as with `run`, this caller leaves the
    ///   queue, and a lead handed to it passes on.
    /// - Dropped after its fill was spawned: the fill goes on and publishes to every follower;
    ///   only this caller's wait ends. If the spawned fill itself dies (panics, or the runtime
    ///   shuts down) the lead passes to a waiting follower; this caller, whose fill is spent,
    ///   receives [`FlightError::Abandoned`] only if no follower can take over.
    pub async fn run_detached<F, Fut>(&self, key: K, make_fut: F) -> Result<V, FlightError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        let on_runtime = || tokio::runtime::Handle::try_current().ok().map(OnRuntime);
        self.run_detached_on(key, make_fut, on_runtime).await
    }

    /// [`run_detached`](Group::run_detached) with the spawner as an input: `spawner` is asked
    /// once this caller leads (`None`: nowhere to spawn, fill inline). The loom models pass
    /// one that runs the fill on a loom thread, or drops it unpolled as a runtime shutting
    /// down would.
    pub(crate) async fn run_detached_on<F, Fut, S>(
        &self,
        key: K,
        make_fut: F,
        spawner: impl FnOnce() -> Option<S>,
    ) -> Result<V, FlightError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        S: Spawn,
    {
        let leader = match self.join(key).await {
            Joined::Leader(leader) => leader,
            Joined::Done(result) => return result,
        };
        let Some(spawner) = spawner() else {
            let result = make_fut().await;
            return leader.finish(result);
        };
        // The lead moves to the task, so it must own its group.
        let leader = leader.into_owned();
        // Subscribe before spawning, so the result cannot be published before we listen.
        let Some(wait) = leader.subscribe(self) else {
            // Taken over already: our fill would publish nothing, so run it here and return
            // its result to this caller alone.
            let result = make_fut().await;
            return leader.finish(result);
        };
        let fill = make_fut();
        spawner.spawn(async move {
            let result = fill.await;
            // The outcome reaches this caller through `wait`.
            let _ = leader.finish(result);
        });
        match self.wait_with_timeout(wait).await {
            Joined::Done(result) => result,
            Joined::Leader(_) => {
                unreachable!("a follower that cannot lead is never handed the lead")
            }
        }
    }
}

/// Where a detached fill runs: a seam between [`Group::run_detached`] and tokio, so that the
/// loom models (which cannot see tokio's tasks) run the same code with loom threads.
#[cfg_attr(not(herd_loom), allow(unreachable_pub))]
pub trait Spawn {
    /// Runs `task` to completion somewhere else, or drops it (a runtime shutting down).
    fn spawn<T: Future<Output = ()> + Send + 'static>(self, task: T);
}

/// The tokio runtime the caller runs on.
struct OnRuntime(tokio::runtime::Handle);

impl Spawn for OnRuntime {
    fn spawn<T: Future<Output = ()> + Send + 'static>(self, task: T) {
        // Detached: the outcome travels through the flight, not the join handle.
        drop(self.0.spawn(task));
    }
}
