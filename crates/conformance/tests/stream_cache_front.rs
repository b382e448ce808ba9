//! `stream_cache::StreamCache` held to the read-through contract through a small adapter: the
//! value is stored as a streamed body, read back whole. This is the "any other implementation"
//! use of the read-through suite, on the shipped front and both shipped backends.

use async_trait::async_trait;
use bytes::Bytes;
use conformance::read_through::{Fill, FillError, ReadError, ReadThrough, Suite};
use conformance::{Guarded, TempDir};
use futures::StreamExt;
use stream_cache::{
    DiskStorage, MemStorage, ObjectMeta, Storage, StreamCache, Upstream, read_to_end,
};

struct Front<S: Storage>(StreamCache<S>);

fn to_read_error(error: stream_cache::FillError) -> ReadError {
    match &error {
        stream_cache::FillError::Upstream(cause) => match cause.downcast_ref::<FillError>() {
            Some(fill) => ReadError::Failed(fill.clone()),
            None => ReadError::Other(error.to_string()),
        },
        _ => ReadError::Other(error.to_string()),
    }
}

#[async_trait]
impl<S: Storage> ReadThrough for Front<S> {
    async fn get_or_fill(&self, key: String, fill: Fill) -> Result<String, ReadError> {
        let upstream = || async move {
            let value = fill().await?;
            let meta = ObjectMeta::default().with_len(value.len() as u64);
            let body = futures::stream::iter([Ok::<_, FillError>(Bytes::from(value))]).boxed();
            Ok(Upstream::new(meta, body))
        };
        let mut hit = self
            .0
            .get_or_fill(key, upstream)
            .await
            .map_err(to_read_error)?;
        let body = read_to_end(&mut *hit.body)
            .await
            .map_err(|error| ReadError::Other(error.to_string()))?;
        String::from_utf8(body).map_err(|error| ReadError::Other(error.to_string()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_cache_over_mem_storage_keeps_the_read_through_contract() {
    let report = Suite::new(|| async { Front(StreamCache::new(MemStorage::new(1 << 20))) })
        .run()
        .await;
    println!("{report}");
    report.assert_passed();
}

// Paused clock: the blocking-pool I/O of DiskStorage's lookup holds the clock, so "this caller
// is now waiting on the fill" is exact rather than a real-time guess.
#[tokio::test(start_paused = true)]
async fn stream_cache_over_disk_storage_keeps_the_read_through_contract() {
    let report = Suite::new(|| async {
        let dir = TempDir::new();
        let disk = DiskStorage::open(dir.path(), 1 << 30)
            .await
            .expect("open disk storage");
        Front(StreamCache::new(Guarded::new(disk, dir)))
    })
    .run()
    .await;
    println!("{report}");
    report.assert_passed();
}
