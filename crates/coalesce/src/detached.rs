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
        let leader = match self.join(key).await {
            Joined::Leader(leader) => leader,
            Joined::Done(result) => return result,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let result = make_fut().await;
            return leader.finish(result);
        };
        // The lead moves to the task, so it must own its group.
        let leader = leader.into_owned();
        // Subscribe before spawning, so the result cannot be published before we listen.
        let Some(wait) = leader.subscribe(self) else {
            // Taken over already: our fill would publish nothing, so run it here
            // and return its result to this caller alone.
            let result = make_fut().await;
            return leader.finish(result);
        };
        let fill = make_fut();
        runtime.spawn(async move {
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
