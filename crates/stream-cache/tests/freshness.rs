//! Freshness (issue 15): an object whose `ObjectMeta::expires_at` has passed is a miss in both
//! backends, and the front stores the expiry its fill declares. Expiries are an hour away or
//! already past: no test waits on the wall clock.

mod common;

use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use stream_cache::{ObjectMeta, Storage, StreamCache, Upstream};

async fn store(storage: &dyn Storage, key: &str, meta: ObjectMeta) {
    let mut writer = storage.begin_write(&key.into(), meta).await.unwrap();
    writer.write(Bytes::from_static(b"body")).await.unwrap();
    writer.finish().await.unwrap();
}

async fn expired_is_a_miss(storage: Arc<dyn Storage>) {
    assert!(storage.capabilities().expiry);
    let hour = Duration::from_secs(3600);
    store(&*storage, "fresh", ObjectMeta::default().with_ttl(hour)).await;
    store(
        &*storage,
        "stale",
        ObjectMeta::default().with_expiry(SystemTime::now() - hour),
    )
    .await;
    let fresh = storage.lookup(&"fresh".into()).await.unwrap().unwrap();
    assert!(fresh.meta.expires_at.unwrap() > SystemTime::now());
    assert!(storage.lookup(&"stale".into()).await.unwrap().is_none());
    // A second lookup too (the object is gone, not just hidden once).
    assert!(storage.lookup(&"stale".into()).await.unwrap().is_none());
}
both_backends!(expired_is_a_miss, None, expired_is_a_miss);

async fn the_front_stores_the_fills_expiry(storage: Arc<dyn Storage>) {
    let cache = StreamCache::new(Arc::clone(&storage));
    let past = SystemTime::now() - Duration::from_secs(1);
    let fill = || async move {
        let body = futures::stream::iter([Ok(Bytes::from_static(b"x"))]).boxed();
        Ok::<_, io::Error>(Upstream::new(ObjectMeta::default().with_expiry(past), body))
    };
    let mut hit = cache.get_or_fill("k", fill).await.unwrap();
    // The caller that filled still gets its body ...
    assert_eq!(
        stream_cache::read_to_end(&mut *hit.body).await.unwrap(),
        b"x"
    );
    // ... but an expired object is never a hit.
    assert!(cache.lookup("k").await.unwrap().is_none());
}
both_backends!(
    the_front_stores_the_fills_expiry,
    None,
    the_front_stores_the_fills_expiry
);
