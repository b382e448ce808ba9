//! `Faulty` itself: each fault fires on the call it names and only there, failed writes abort the
//! inner write (readers of the inner backend see the error), and stalls return `Pending` exactly
//! the configured number of times, waking themselves.

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use conformance::{FaultPlan, Faulty, InjectedFault};
use stream_cache::{
    AbortKind, AbortReason, BodyError, CacheKey, MemStorage, ObjectMeta, Storage, StorageError,
    WriteError, WriteState, read_to_end,
};

fn key(name: &str) -> CacheKey {
    CacheKey::from(name)
}

fn is_injected(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(error) = source {
        if error.downcast_ref::<InjectedFault>().is_some()
            || error.to_string().starts_with("injected fault")
        {
            return true;
        }
        source = error.source();
    }
    false
}

#[tokio::test]
async fn the_nth_lookup_fails_once_with_a_typed_error() {
    let storage = Faulty::new(MemStorage::new(1 << 20), FaultPlan::new().fail_lookup(2));
    let mut w = storage
        .begin_write(&key("k"), ObjectMeta::default())
        .await
        .unwrap();
    w.write(Bytes::from_static(b"body")).await.unwrap();
    w.finish().await.unwrap();
    assert!(storage.lookup(&key("k")).await.unwrap().is_some());
    match storage.lookup(&key("k")).await {
        Err(StorageError::Io(error)) => assert!(is_injected(&*error), "{error}"),
        other => panic!("the second lookup must fail, got {other:?}"),
    }
    assert!(storage.lookup(&key("k")).await.unwrap().is_some());
}

#[tokio::test]
async fn the_nth_begin_write_fails_and_stores_nothing() {
    let storage = Faulty::new(
        MemStorage::new(1 << 20),
        FaultPlan::new().fail_begin_write(1),
    );
    assert!(matches!(
        storage.begin_write(&key("k"), ObjectMeta::default()).await,
        Err(StorageError::Io(_))
    ));
    assert!(storage.inner().is_empty());
    assert!(
        storage
            .begin_write(&key("k"), ObjectMeta::default())
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_failed_write_aborts_the_inner_write_and_counts_across_writers() {
    let inner = MemStorage::new(1 << 20);
    let storage = Faulty::new(inner.clone(), FaultPlan::new().fail_write(3));
    let mut first = storage
        .begin_write(&key("a"), ObjectMeta::default())
        .await
        .unwrap();
    first.write(Bytes::from_static(b"1")).await.unwrap();
    first.write(Bytes::from_static(b"2")).await.unwrap();
    first.finish().await.unwrap();
    let mut second = storage
        .begin_write(&key("b"), ObjectMeta::default())
        .await
        .unwrap();
    let mut reader = inner.lookup(&key("b")).await.unwrap().unwrap().body;
    match second.write(Bytes::from_static(b"3")).await {
        Err(WriteError::Aborted(AbortReason::Storage(error))) => assert!(is_injected(&*error)),
        other => panic!("the third write must fail, got {other:?}"),
    }
    assert!(matches!(
        second.state(),
        WriteState::Aborted(AbortReason::Storage(_))
    ));
    assert!(matches!(
        second.write(Bytes::from_static(b"4")).await,
        Err(WriteError::Aborted(AbortReason::Storage(_)))
    ));
    assert!(second.finish().await.is_err());
    assert!(
        matches!(reader.read().await, Err(BodyError::Aborted(r)) if r.kind() == AbortKind::Storage)
    );
    assert!(inner.lookup(&key("b")).await.unwrap().is_none());
    assert!(inner.lookup(&key("a")).await.unwrap().is_some());
}

#[tokio::test]
async fn a_failed_finish_aborts_a_fully_written_body() {
    let inner = MemStorage::new(1 << 20);
    let storage = Faulty::new(inner.clone(), FaultPlan::new().fail_finish(1));
    let mut w = storage
        .begin_write(&key("k"), ObjectMeta::default())
        .await
        .unwrap();
    w.write(Bytes::from_static(b"every byte")).await.unwrap();
    let mut reader = inner.lookup(&key("k")).await.unwrap().unwrap().body;
    assert!(matches!(
        w.finish().await,
        Err(WriteError::Aborted(AbortReason::Storage(_)))
    ));
    assert_eq!(reader.read().await.unwrap().unwrap(), "every byte");
    assert!(
        matches!(reader.read().await, Err(BodyError::Aborted(r)) if r.kind() == AbortKind::Storage)
    );
}

#[tokio::test]
async fn abort_after_bytes_keeps_exactly_that_prefix() {
    let inner = MemStorage::new(1 << 20);
    let storage = Faulty::new(inner.clone(), FaultPlan::new().abort_after_bytes(5));
    let mut w = storage
        .begin_write(&key("k"), ObjectMeta::default())
        .await
        .unwrap();
    let mut reader = inner.lookup(&key("k")).await.unwrap().unwrap().body;
    w.write(Bytes::from_static(b"abc")).await.unwrap();
    assert!(matches!(
        w.write(Bytes::from_static(b"defg")).await,
        Err(WriteError::Aborted(AbortReason::Upstream(_)))
    ));
    let mut got = Vec::new();
    let end = loop {
        match reader.read().await {
            Ok(Some(chunk)) => got.extend_from_slice(&chunk),
            other => break other,
        }
    };
    assert_eq!(got, b"abcde");
    assert!(matches!(end, Err(BodyError::Aborted(r)) if r.kind() == AbortKind::Upstream));
}

#[tokio::test]
async fn a_failed_read_is_an_error_and_the_reader_resumes_where_it_was() {
    let storage = Faulty::new(MemStorage::new(1 << 20), FaultPlan::new().fail_read(1));
    let mut w = storage
        .begin_write(&key("k"), ObjectMeta::default())
        .await
        .unwrap();
    w.write(Bytes::from_static(b"body")).await.unwrap();
    w.finish().await.unwrap();
    let mut hit = storage.lookup(&key("k")).await.unwrap().unwrap();
    assert!(matches!(hit.body.read().await, Err(BodyError::Io(_))));
    assert_eq!(read_to_end(&mut *hit.body).await.unwrap(), b"body");
}

#[test]
fn stalls_return_pending_k_times_and_wake_themselves() {
    let storage = Faulty::new(MemStorage::new(1 << 20), FaultPlan::new().pending(3));
    let wakes = Arc::new(WakeCounter::default());
    let waker = futures::task::waker(Arc::clone(&wakes));
    let mut cx = Context::from_waker(&waker);
    let k = key("k");
    let mut lookup = pin!(storage.lookup(&k));
    for _ in 0..3 {
        assert!(lookup.as_mut().poll(&mut cx).is_pending());
    }
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        3,
        "each Pending woke the task"
    );
    assert!(matches!(
        lookup.as_mut().poll(&mut cx),
        Poll::Ready(Ok(None))
    ));
}

#[derive(Default)]
struct WakeCounter(AtomicUsize);

impl futures::task::ArcWake for WakeCounter {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.0.fetch_add(1, Ordering::SeqCst);
    }
}
