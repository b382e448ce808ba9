//! Bulk read-through, `get_or_try_insert_many`: many keys, one call of the user's batch function
//! for the misses (Caffeine's `getAll`, a DataLoader's batch), each missing key still coalesced
//! with every other caller of that key through the cache's `coalesce::Group`.
//!
//! Per key the protocol is the single-key one (`read_through.rs`): a store lookup, the key's
//! fence taken before joining its flight, then either the flight's outcome (a follower) or the
//! lead (re-checked against the store). What is new is that one call holds several leads and
//! follows several flights at once, and must never wait for a followed key while it holds a lead
//! nobody fills: two bulk callers with overlapping keys, each following the other's keys, would
//! deadlock. So the call runs in rounds: it polls every open join once (all with the same
//! context), takes every lead that came back, and fills those keys with one batch call before it
//! waits for anything else; then it waits until a followed flight ends (an answer) or hands its
//! lead to this call (a new round, with a batch call of its own). A lead handed to this call
//! while its batch runs waits for that batch to end: latency, never a cycle, since a batch waits
//! on no flight of this cache.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use coalesce::Joined;
use futures::future::poll_fn;

use crate::Fetched;
use crate::cache::Cache;
use crate::error::FetchError;
use crate::observe::Started;
use crate::read_through::{FillLeader, Front, GroupLeader, Source};
use crate::shard::{ErasedError, WriteMode};
use crate::tally::Event;

/// The erased error a key's flight ends with when the batch returned no value for it.
pub(crate) struct MissingFromBatch;

/// Per-key answers of a bulk call.
pub type ManyFetched<K, V, E> = HashMap<K, Result<Fetched<V>, FetchError<E>>>;

/// A lead this call holds, with what its publish needs.
struct Led<'g, K: Hash + Eq, V> {
    leader: GroupLeader<'g, K, V>,
    hash: u64,
    started: Started,
}

impl<K, V> Cache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Returns a value (or why there is none) for every distinct key of `keys`: fresh hits at
    /// once, and the misses filled by one call of `fill_many` with the keys this call leads,
    /// each key coalesced with every other caller of it (single-key and bulk alike). A key another
    /// caller is already filling is not asked for again: this call waits for that flight, but
    /// only after its own batch has run, so overlapping bulk calls never wait for each other in
    /// a cycle. Each value is stored for `ttl_fn(&value)`, fenced per key (a `remove`, `insert`,
    /// `invalidate` or `clear` of the key after this call looked it up keeps this call's value
    /// out of the store, as with [`get_or_try_insert`](Self::get_or_try_insert)).
    ///
    /// `fill_many` returns the values it found, as any `(K, V)` collection; keys it was not asked
    /// for are ignored. A key it was asked for but did not return gets
    /// [`FetchError::MissingFromBatch`] (so do that key's followers; not cached). If it fails,
    /// its one error is shared ([`FetchError::Failed`], the same `Arc`) by all the keys of that
    /// batch and their followers, and cached per key for `negative_ttl` as a single fill's error
    /// is. `fill_many` is called again only if a flight this call followed hands its lead here
    /// (its leader went away): then with just those keys. It is never called with no keys.
    ///
    /// A stale value (inside the stale-while-revalidate window) whose refresh is free is not
    /// served: the key is filled in the batch like a miss (a bulk call waits for its batch
    /// anyway, and a background batch per call would have to be `'static`); one whose refresh
    /// another caller already runs is answered at once as [`Source::Stale`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// let cache: ttl_lru::Cache<u32, String> = ttl_lru::Cache::new(1_000);
    /// cache.insert(1, "one".into(), Duration::from_secs(60)).unwrap();
    /// let got = cache
    ///     .get_or_try_insert_many(
    ///         [1, 2, 3],
    ///         |_| Duration::from_secs(60),
    ///         |keys| async move {
    ///             assert_eq!(keys.len(), 2, "only the misses are asked for");
    ///             Ok::<_, std::io::Error>(keys.into_iter().map(|k| (k, k.to_string())))
    ///         },
    ///     )
    ///     .await;
    /// assert_eq!(got[&1].as_ref().unwrap().value, "one");
    /// assert_eq!(got[&3].as_ref().unwrap().value, "3");
    /// # }
    /// ```
    ///
    /// # Cancellation
    /// - Dropped while waiting for other callers' flights: it leaves their queues; the flights go
    ///   on.
    /// - Dropped while its batch runs: the batch is dropped and the lead of every key it was
    ///   filling passes to that key's oldest waiting caller (which fills it), or the key is
    ///   released. Nothing was stored before that await, and values already published (earlier
    ///   rounds) stay.
    ///
    /// # Errors
    /// Per key, as [`get_or_try_insert`](Self::get_or_try_insert), plus
    /// [`FetchError::MissingFromBatch`].
    pub async fn get_or_try_insert_many<E, I, T, F, Fut, R>(
        &self,
        keys: I,
        ttl_fn: T,
        mut fill_many: F,
    ) -> ManyFetched<K, V, E>
    where
        E: Send + Sync + 'static,
        I: IntoIterator<Item = K>,
        T: Fn(&V) -> Duration,
        F: FnMut(Vec<K>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
        R: IntoIterator<Item = (K, V)>,
    {
        let mut answers: ManyFetched<K, V, E> = HashMap::new();
        // The open joins: a key's store count as its lookup saw it, its fence (taken before
        // joining) and its join, not yet polled.
        let mut joins = Vec::new();
        // Each key once (a duplicate would follow this call's own flight).
        let keys: HashSet<K> = keys.into_iter().collect();
        for key in keys {
            let hash = self.hash(&key);
            let seen = match self.front::<E>(hash, &key) {
                Front::Answer(a) => {
                    answers.insert(key, a);
                    continue;
                }
                // See the docs: filled in the batch, so the claim is released at once.
                Front::StaleRefresh(..) => {
                    self.shard(hash).release_refresh(hash, &key, self.now());
                    None
                }
                Front::Miss(seen) => seen,
            };
            let fence = (self.shard(hash).fence(hash), self.shard(hash).stores());
            let join = Box::pin(self.inner.group.join(key.clone()));
            joins.push((key, hash, seen, fence, Some(join)));
        }
        loop {
            // Poll every open join once; stop at the first poll that yields a lead (fill it
            // before waiting for anything) or when nothing is left open.
            let mut led = Vec::new();
            poll_fn(|cx| {
                for (key, hash, seen, fence, slot) in &mut joins {
                    let Some(join) = slot.as_mut() else { continue };
                    let Poll::Ready(joined) = join.as_mut().poll(cx) else {
                        continue;
                    };
                    *slot = None;
                    match joined {
                        Joined::Done(r) => {
                            answers.insert(key.clone(), self.followed(r));
                        }
                        Joined::Leader(leader) => match self.recheck::<E>(leader, *hash, *seen) {
                            Ok(hit) => {
                                answers.insert(key.clone(), hit);
                            }
                            Err(leader) => led.push(Led {
                                leader,
                                hash: *hash,
                                started: Started {
                                    fence: fence.0,
                                    stores: fence.1,
                                    at: None,
                                },
                            }),
                        },
                    }
                }
                let open = joins.iter().any(|(.., slot)| slot.is_some());
                match led.is_empty() && open {
                    true => Poll::Pending,
                    false => Poll::Ready(()),
                }
            })
            .await;
            joins.retain(|(.., slot)| slot.is_some());
            if !led.is_empty() {
                let wanted = led.iter().map(|l| l.leader.key().clone()).collect();
                let started = crate::observe::Started::lead(0, 0);
                for l in &mut led {
                    self.inner.tally.record(Event::Fill);
                    l.started = crate::observe::Started {
                        at: started.at,
                        ..l.started
                    };
                    if started.at.is_some() {
                        self.trace_lead(l.leader.key());
                    }
                }
                if crate::observe::enabled() {
                    tracing::debug!(
                        target: "ttl_lru",
                        cache = self.inner.name.as_deref(),
                        keys = led.len(),
                        "batch fill"
                    );
                }
                // The batch's await: dropped here, `led` drops and hands each flight on.
                let result = fill_many(wanted).await;
                self.publish_batch(led, &ttl_fn, result, &mut answers);
            }
            if joins.is_empty() {
                return answers;
            }
        }
    }

    /// Stores and publishes one batch's outcome for the keys it was asked for. Synchronous.
    fn publish_batch<E, T, R>(
        &self,
        led: Vec<Led<'_, K, V>>,
        ttl_fn: &T,
        result: Result<R, E>,
        answers: &mut ManyFetched<K, V, E>,
    ) where
        E: Send + Sync + 'static,
        T: Fn(&V) -> Duration,
        R: IntoIterator<Item = (K, V)>,
    {
        match result {
            Ok(found) => {
                let mut found: HashMap<K, V> = found.into_iter().collect();
                for Led {
                    leader,
                    hash,
                    started,
                } in led
                {
                    let key = leader.key().clone();
                    let answer = match found.remove(&key) {
                        Some(value) => self
                            .publish(leader, hash, started, |v| ttl_fn(v), Ok::<V, E>(value))
                            .map(|value| Fetched {
                                value,
                                source: Source::Filled,
                            }),
                        None => {
                            let missing: ErasedError = Arc::new(MissingFromBatch);
                            let _ = FillLeader::finish(leader, Err(missing));
                            Err(FetchError::MissingFromBatch)
                        }
                    };
                    answers.insert(key, answer);
                }
            }
            Err(error) => {
                let shared = Arc::new(error);
                for Led {
                    leader,
                    hash,
                    started,
                } in led
                {
                    let key = leader.key().clone();
                    self.store_error(&leader, hash, started, Arc::clone(&shared) as ErasedError);
                    let _ = FillLeader::finish(leader, Err(Arc::clone(&shared) as ErasedError));
                    answers.insert(key, Err(FetchError::Failed(Arc::clone(&shared))));
                }
            }
        }
    }

    /// Caches a batch's error for one key for `negative_ttl` (fenced), as a single fill does.
    fn store_error(
        &self,
        leader: &GroupLeader<'_, K, V>,
        hash: u64,
        started: Started,
        e: ErasedError,
    ) {
        self.inner.fills.fill_errors.incr();
        let fence = started.fence;
        if started.at.is_some() {
            self.trace_finished(leader.key(), "failed", &started);
        }
        let now = self.now();
        let neg = self.inner.negative_ttl_ms;
        let cached_until = (neg > 0).then(|| now.saturating_add(neg));
        let first = self.shard(hash).write_error(
            hash,
            leader.key().clone(),
            e,
            cached_until,
            now.saturating_add(neg),
            now,
            &self.inner.cfg,
            WriteMode::Fenced(fence),
            started.stores,
        );
        let until = cached_until.unwrap_or(now);
        let _ = self.settle_write(hash, first, until, None, 1, now, WriteMode::Fenced(fence));
    }
}
