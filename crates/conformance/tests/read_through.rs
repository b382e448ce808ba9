//! The read-through suite against `ttl_lru::Cache` (inline and detached fills), and its teeth:
//! a cache that does not coalesce, and a naive single-flight whose dropped leader strands its
//! followers, must fail the cases named for those bugs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use conformance::Outcome;
use conformance::read_through::{
    CASES, Fill, ReadError, ReadThrough, Suite, TtlLruAdapter, TtlLruMode,
};
use tokio::sync::Notify;
use ttl_lru::Cache;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_lru_inline_fills_pass() {
    let report = Suite::new(|| async { TtlLruAdapter::new(Cache::new(1_000)) })
        .run()
        .await;
    println!("{report}");
    report.assert_passed();
    assert_eq!(report.passed().len(), CASES.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_lru_detached_fills_pass() {
    let report = Suite::new(|| async {
        TtlLruAdapter::new(Cache::new(1_000)).mode(TtlLruMode::Detached(Duration::from_secs(30)))
    })
    .run()
    .await;
    println!("{report}");
    report.assert_passed();
    assert_eq!(report.passed().len(), CASES.len());
}

#[tokio::test(start_paused = true)]
async fn ttl_lru_passes_on_a_paused_current_thread_runtime() {
    Suite::new(|| async { TtlLruAdapter::new(Cache::new(1_000)) })
        .run()
        .await
        .assert_passed();
}

/// A cache with a bug (or none) in how concurrent misses share a fill.
#[derive(Default)]
struct Naive {
    bug: Option<NaiveBug>,
    entries: Mutex<HashMap<String, Entry>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum NaiveBug {
    /// Every miss runs its own fill.
    NoCoalescing,
    /// The leader marks the key as filling and clears the mark after its fill: a leader dropped
    /// in between leaves the mark forever, and every later caller waits on it.
    NoLeaderGuard,
}

enum Entry {
    Value(String),
    Filling(Arc<Notify>),
}

#[async_trait]
impl ReadThrough for Naive {
    async fn get_or_fill(&self, key: String, fill: Fill) -> Result<String, ReadError> {
        let notify = loop {
            let wait = {
                let mut entries = self.entries.lock().unwrap();
                match entries.get(&key) {
                    Some(Entry::Value(value)) => return Ok(value.clone()),
                    Some(Entry::Filling(notify)) if self.bug != Some(NaiveBug::NoCoalescing) => {
                        // Created under the lock so the leader's wake-up is not missed.
                        Arc::clone(notify).notified_owned()
                    }
                    _ => {
                        let notify = Arc::new(Notify::new());
                        entries.insert(key.clone(), Entry::Filling(Arc::clone(&notify)));
                        break notify;
                    }
                }
            };
            wait.await;
        };
        let result = fill().await.map_err(ReadError::Failed);
        {
            let mut entries = self.entries.lock().unwrap();
            match &result {
                Ok(value) => entries.insert(key.clone(), Entry::Value(value.clone())),
                Err(_) => entries.remove(&key),
            };
        }
        notify.notify_waiters();
        result
    }
}

async fn catches(bug: NaiveBug, case: &str) {
    let report = Suite::new(move || async move {
        Naive {
            bug: Some(bug),
            ..Naive::default()
        }
    })
    .run()
    .await;
    println!("{report}");
    match report.outcome(case) {
        Some(Outcome::Failed(failure)) => assert_eq!(failure.case, case),
        other => panic!("expected `{case}` to fail, got {other:?}\n{report}"),
    }
    assert!(report.to_string().contains(&format!("FAILED  {case}")));
}

#[tokio::test(start_paused = true)]
async fn a_cache_that_does_not_coalesce_fails() {
    catches(NaiveBug::NoCoalescing, "coalesces_concurrent_misses").await;
}

#[tokio::test(start_paused = true)]
async fn a_dropped_leader_that_strands_followers_fails() {
    catches(NaiveBug::NoLeaderGuard, "leader_cancelled_hands_over").await;
    catches(
        NaiveBug::NoLeaderGuard,
        "leader_cancelled_alone_releases_key",
    )
    .await;
    catches(NaiveBug::NoLeaderGuard, "cancel_sweep").await;
}

#[tokio::test(start_paused = true)]
async fn a_follower_that_retries_on_error_fails() {
    // Failed fills are not kept, so a follower woken by a failure finds no entry and runs its
    // own fill: the error is not shared.
    catches(NaiveBug::NoLeaderGuard, "error_shared_with_followers").await;
}
