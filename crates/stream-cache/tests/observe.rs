//! What a caller and an operator can observe about fills: how `get_or_fill_with` obtained its
//! body (hit / led / joined), how each fill ended (`on_fill_end`, the `fills_in_flight` gauge),
//! `replace` keeping the old object until the new head, and the `metrics` feature.

mod common;

use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use common::drain;
use futures::StreamExt;
use parking_lot::Mutex;
use stream_cache::{
    AbortKind, FillError, FillOutcome, MemStorage, ObjectMeta, Obtained, Storage, StreamCache,
    StreamCacheBuilder, Upstream,
};
use tokio::sync::mpsc;

type Chunks = mpsc::UnboundedSender<Result<Bytes, io::Error>>;

fn channel_upstream(meta: &str) -> (Upstream<io::Error>, Chunks) {
    let (tx, rx) = mpsc::unbounded_channel();
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed();
    (Upstream::new(ObjectMeta::new(meta.to_owned()), body), tx)
}

fn ready_upstream(meta: &str, body: &'static str) -> Upstream<io::Error> {
    Upstream::new(
        ObjectMeta::new(meta.to_owned()),
        futures::stream::iter([Ok(Bytes::from_static(body.as_bytes()))]).boxed(),
    )
}

/// A cache whose `on_fill_end` hook records every outcome.
fn recording_cache() -> (StreamCache<MemStorage>, Arc<Mutex<Vec<FillOutcome>>>) {
    let ends = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&ends);
    let cache = StreamCacheBuilder::new()
        .on_fill_end(move |end| seen.lock().push(end.outcome))
        .build(MemStorage::new(1 << 20));
    (cache, ends)
}

#[tokio::test]
async fn get_or_fill_with_says_hit_led_or_joined() {
    let cache = StreamCache::new(MemStorage::new(1 << 20));
    let (upstream, tx) = channel_upstream("m");
    let (mut led, how) = cache
        .get_or_fill_with("k", || async { Ok(upstream) })
        .await
        .unwrap();
    assert_eq!(how, Obtained::Led);
    // The body is still streaming: a concurrent caller attaches to it through storage (a
    // partial hit), not by running its own fill.
    let (_partial, how) = cache
        .get_or_fill_with("k", || async {
            Err::<Upstream<io::Error>, _>(io::Error::other("no"))
        })
        .await
        .unwrap();
    assert_eq!(how, Obtained::Hit);
    tx.send(Ok(Bytes::from_static(b"body"))).unwrap();
    drop(tx);
    assert_eq!(drain(&mut *led.body).await.0, b"body");
    let (_, how) = cache
        .get_or_fill_with("k", || async {
            Err::<Upstream<io::Error>, _>(io::Error::other("no"))
        })
        .await
        .unwrap();
    assert_eq!(how, Obtained::Hit);
}

#[tokio::test]
async fn a_caller_waiting_on_a_fill_is_told_it_joined() {
    let cache = StreamCache::new(MemStorage::new(1 << 20));
    let (release, wait) = tokio::sync::oneshot::channel::<()>();
    let leader = cache.get_or_fill_with("k", || async move {
        let _ = wait.await;
        Ok(ready_upstream("m", "body"))
    });
    let mut leader = pin!(leader);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(leader.as_mut().poll(&mut cx).is_pending());
    let follower = cache.get_or_fill_with("k", || async {
        Err::<Upstream<io::Error>, _>(io::Error::other("the follower must not fill"))
    });
    let mut follower = pin!(follower);
    assert!(follower.as_mut().poll(&mut cx).is_pending());
    release.send(()).unwrap();
    let (mut a, how_a) = leader.await.unwrap();
    let (mut b, how_b) = follower.await.unwrap();
    assert_eq!((how_a, how_b), (Obtained::Led, Obtained::Joined));
    assert_eq!(drain(&mut *a.body).await.0, b"body");
    assert_eq!(drain(&mut *b.body).await.0, b"body");
}

#[tokio::test]
async fn every_fill_end_is_reported_once_with_its_cause() {
    let (cache, ends) = recording_cache();
    // Completed.
    let mut hit = cache
        .get_or_fill("done", || async { Ok(ready_upstream("m", "12345")) })
        .await
        .unwrap();
    assert!(drain(&mut *hit.body).await.1.is_ok());
    // Aborted by the upstream mid-body: reported as a fill once, however many readers saw it.
    let (upstream, tx) = channel_upstream("m");
    let mut a = cache
        .get_or_fill("dies", || async { Ok(upstream) })
        .await
        .unwrap();
    let mut b = cache.lookup("dies").await.unwrap().unwrap();
    tx.send(Ok(Bytes::from_static(b"abc"))).unwrap();
    tx.send(Err(io::Error::other("reset"))).unwrap();
    assert!(drain(&mut *a.body).await.1.is_err());
    assert!(drain(&mut *b.body).await.1.is_err());
    // Failed before the body.
    let failed = cache
        .get_or_fill("fails", || async {
            Err::<Upstream<io::Error>, _>(io::Error::other("refused"))
        })
        .await;
    assert!(matches!(failed, Err(FillError::Upstream(_))));
    // The pump reports from its task; it has ended once the readers saw the end.
    tokio::task::yield_now().await;
    assert_eq!(
        *ends.lock(),
        vec![
            FillOutcome::Completed { bytes: 5 },
            FillOutcome::Aborted {
                kind: AbortKind::Upstream,
                bytes: 3
            },
            FillOutcome::Failed,
        ]
    );
    let stats = cache.stats();
    assert_eq!(stats.aborts.get(AbortKind::Upstream), 1);
    assert_eq!(stats.fills_in_flight, 0);
}

#[tokio::test]
async fn in_flight_counts_streaming_fills_and_a_cancelled_lead() {
    let (cache, ends) = recording_cache();
    let (upstream, tx) = channel_upstream("m");
    let _hit = cache
        .get_or_fill("streaming", || async { Ok(upstream) })
        .await
        .unwrap();
    assert_eq!(cache.stats().fills_in_flight, 1);
    // A leader dropped while its fill has not produced meta yet.
    {
        let lead = cache.get_or_fill("slow", || {
            futures::future::pending::<Result<Upstream<io::Error>, io::Error>>()
        });
        let mut lead = pin!(lead);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(matches!(lead.as_mut().poll(&mut cx), Poll::Pending));
        assert_eq!(cache.stats().fills_in_flight, 2);
    }
    assert_eq!(cache.stats().fills_in_flight, 1);
    assert_eq!(*ends.lock(), vec![FillOutcome::Cancelled]);
    drop(tx);
    while cache.stats().fills_in_flight > 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(ends.lock()[1], FillOutcome::Completed { bytes: 0 });
}

#[tokio::test]
async fn replace_keeps_the_old_object_until_the_new_head() {
    let cache = StreamCache::new(MemStorage::new(1 << 20));
    let mut old = cache
        .get_or_fill("k", || async { Ok(ready_upstream("old", "old body")) })
        .await
        .unwrap();
    assert!(drain(&mut *old.body).await.1.is_ok());

    // The refill's head has not arrived: lookups still find the old object.
    let (release, wait) = tokio::sync::oneshot::channel::<()>();
    let replace = cache.replace("k", || async move {
        let _ = wait.await;
        Ok(ready_upstream("new", "new body"))
    });
    let mut replace = pin!(replace);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(replace.as_mut().poll(&mut cx).is_pending());
    let during = cache.lookup("k").await.unwrap().unwrap();
    assert_eq!(during.meta.user, "old");
    release.send(()).unwrap();
    let (mut new, how) = replace.await.unwrap();
    assert_eq!(how, Obtained::Led);
    assert_eq!(new.meta.user, "new");
    assert_eq!(drain(&mut *new.body).await.0, b"new body");
    let mut after = cache.lookup("k").await.unwrap().unwrap();
    assert_eq!(after.meta.user, "new");
    assert_eq!(drain(&mut *after.body).await.0, b"new body");

    // A failed replace leaves what is stored (serve-stale-on-error).
    let failed = cache
        .replace("k", || async {
            Err::<Upstream<io::Error>, _>(io::Error::other("origin down"))
        })
        .await;
    assert!(matches!(failed, Err(FillError::Upstream(_))));
    let kept = cache.lookup("k").await.unwrap().unwrap();
    assert_eq!(kept.meta.user, "new");
    assert!(cache.storage().lookup(&"k".into()).await.unwrap().is_some());
}

/// Under `NoReaderPolicy::Abort` a replace whose caller drops its reader (as a background
/// refresh does) keeps filling: its abort would leave the key with neither body (the old
/// object stops being visible when the new head is published), so every refresh done that way
/// destroyed the entry.
#[tokio::test]
async fn a_replace_without_readers_keeps_filling_under_the_abort_policy() {
    let cache = StreamCacheBuilder::default()
        .no_reader_policy(stream_cache::NoReaderPolicy::Abort)
        .build(MemStorage::new(1 << 20));
    let mut old = cache
        .get_or_fill("k", || async { Ok(ready_upstream("old", "old body")) })
        .await
        .unwrap();
    assert!(drain(&mut *old.body).await.1.is_ok());
    let (upstream, chunks) = channel_upstream("new");
    let (reader, how) = cache.replace("k", || async { Ok(upstream) }).await.unwrap();
    assert_eq!(how, Obtained::Led);
    drop(reader);
    chunks.send(Ok(Bytes::from_static(b"new "))).unwrap();
    chunks.send(Ok(Bytes::from_static(b"body"))).unwrap();
    drop(chunks);
    let mut found = None;
    for _ in 0..1000 {
        tokio::task::yield_now().await;
        if let Some(mut hit) = cache.lookup("k").await.unwrap()
            && hit.meta.user == "new"
            && let (body, Ok(())) = drain(&mut *hit.body).await
        {
            found = Some(body);
            break;
        }
    }
    assert_eq!(
        found.as_deref(),
        Some(&b"new body"[..]),
        "the key lost its object"
    );
}

/// `replace` dropped at every await: the key is never left without an object (the old one
/// until the new head, then the new one), no fill is left counted in flight, and every fill
/// that started is reported once.
#[tokio::test]
async fn replace_dropped_at_every_await_leaves_old_or_new_never_nothing() {
    for polls in 0..12 {
        let (cache, ends) = recording_cache();
        let mut old = cache
            .get_or_fill("k", || async { Ok(ready_upstream("old", "old body")) })
            .await
            .unwrap();
        assert!(drain(&mut *old.body).await.1.is_ok());
        {
            let replace = cache.replace("k", || async {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                Ok(ready_upstream("new", "new body"))
            });
            let mut replace = pin!(replace);
            let mut cx = Context::from_waker(Waker::noop());
            for _ in 0..polls {
                if replace.as_mut().poll(&mut cx).is_ready() {
                    break;
                }
            }
        }
        let found = cache.lookup("k").await.unwrap().expect("an object stays");
        assert!(
            found.meta.user == "old" || found.meta.user == "new",
            "{polls} polls"
        );
        while cache.stats().fills_in_flight > 0 {
            tokio::task::yield_now().await;
        }
        let ends = ends.lock().clone();
        assert_eq!(
            ends.len(),
            cache.stats().fills_started as usize,
            "{polls} polls: {ends:?}"
        );
    }
}
