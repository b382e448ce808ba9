//! Infallible read-through (`get_with`, `get_with_ttl`): the common case of a fill that cannot
//! fail (a computation, a lookup that has its own fallback) needs no error type, no `Result` and
//! no `FetchError` match at every call site.
//!
//! Built on [`Cache::get_or_try_insert`] with `E = Infallible` (an error cached by a call site
//! with another error type reads as a miss there). The only ways that call can end without a
//! value are the ones where this caller did not run a fill: it waited past `wait_timeout`, the
//! fill it joined was abandoned, or that fill failed with another call site's error type. In each
//! of them this caller still holds its own fill, runs it, and stores the result fenced (an
//! invalidation during that fill wins), so `get_with` always returns a value.

use std::convert::Infallible;
use std::future::Future;
use std::hash::Hash;
use std::time::Duration;

use futures::FutureExt;

use crate::cache::Cache;

impl<K, V> Cache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// [`get_with_ttl`](Self::get_with_ttl) with the builder's `default_ttl`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let cache: ttl_lru::Cache<u32, String> = ttl_lru::Cache::new(1_000);
    /// let name = cache.get_with(7, || async { format!("user-{}", 7) }).await;
    /// assert_eq!(name, "user-7");
    /// assert_eq!(cache.get(&7).as_deref(), Some("user-7"));
    /// # }
    /// ```
    ///
    /// # Cancellation
    /// As [`get_with_ttl`](Self::get_with_ttl).
    pub async fn get_with<F, Fut>(&self, key: K, fill: F) -> V
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V> + Send + 'static,
    {
        let ttl = self.default_ttl();
        self.get_with_ttl(key, ttl, fill).await
    }

    /// Returns the cached value, or runs `fill` once for all concurrent callers of `key` and
    /// caches its value for `ttl`. Never fails: see the module docs for the paths where this
    /// caller runs its own fill instead of waiting (a stale value inside the
    /// stale-while-revalidate window is returned at once, as with `get_or_try_insert`).
    ///
    /// # Cancellation
    /// - Dropped while waiting for another caller's fill: it leaves the queue; the fill goes on.
    /// - Dropped while its fill runs (as the leader): the lead passes to the oldest waiting
    ///   caller, which runs its own fill; nothing was stored.
    /// - Dropped while running its own fill after a wait that ended without a value: nothing is
    ///   stored; nobody else depends on that fill.
    pub async fn get_with_ttl<F, Fut>(&self, key: K, ttl: Duration, fill: F) -> V
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V> + Send + 'static,
    {
        let mut own_fill = Some(fill);
        let shared = self
            .get_or_try_insert(
                key.clone(),
                move |_| ttl,
                || {
                    let fill = own_fill
                        .take()
                        .expect("make_fut is FnOnce: called at most once");
                    fill().map(Ok::<V, Infallible>)
                },
            )
            .await;
        match (shared, own_fill) {
            (Ok(fetched), _) => fetched.value,
            // No value, and this caller's fill never ran: run it here. The fence is taken before
            // the fill starts, so an invalidation during it keeps the result out of the store.
            (Err(_), Some(fill)) => {
                let fence = self.fence(&key);
                let value = fill().await;
                // Too heavy to store, declined by the policy, or fenced out: the value is still
                // this caller's answer.
                let _ = self.insert_fenced(fence, key, value.clone(), ttl);
                value
            }
            // This caller led, so `get_or_try_insert` returned its own fill's value: a leader's
            // `Ok` result is always returned to it (even when the flight was superseded).
            (Err(_), None) => unreachable!("a leader's infallible fill always yields its value"),
        }
    }
}
