//! Cache bodies that readers stream while they are still being written, with an explicit
//! aborted state so a truncated body can never look complete.
//!
//! Core types:
//! - [`StreamCache`]: the front. `get_or_fill` coalesces concurrent misses into one fill and
//!   hands every caller a reader attached to the body while it streams.
//! - [`Storage`] (with [`BodyWriter`] and [`BodyReader`]): the backend contract. Two backends
//!   ship: [`MemStorage`] and [`DiskStorage`].
//! - [`WriteState`] / [`AbortReason`]: a write is `Partial(n)` until it is `Complete(n)` or
//!   `Aborted(reason)`; terminal states never change. A reader's `Ok(None)` means one thing
//!   only: the write finished successfully and every byte was read.
//! - [`BodyStream`] (and, with the `http-body` feature, `HttpBody`): a reader as a `Stream` /
//!   an `http_body::Body` whose abort is an error item / body error, never a clean end.
//!
//! ```
//! use bytes::Bytes;
//! use stream_cache::{BodyError, MemStorage, ObjectMeta, Storage, AbortReason, WriteState};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let storage = MemStorage::new(1 << 20);
//! let key = "video/1".into();
//! let mut writer = storage.begin_write(&key, ObjectMeta::new("type=mp4")).await?;
//! writer.write(Bytes::from_static(b"hello ")).await?;
//!
//! // A reader attaches while the body is still being written.
//! let mut hit = storage.lookup(&key).await?.expect("partial body is visible");
//! assert_eq!(hit.body.read().await?, Some(Bytes::from_static(b"hello ")));
//!
//! // The writer goes away without `finish`: the reader sees an error, never a clean end.
//! drop(writer);
//! assert!(matches!(hit.body.read().await, Err(BodyError::Aborted(AbortReason::WriterDropped))));
//! assert!(storage.lookup(&key).await?.is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! The front, with a fill whose body arrives as a stream:
//!
//! ```
//! use bytes::Bytes;
//! use futures::StreamExt;
//! use stream_cache::{MemStorage, ObjectMeta, StreamCache, Upstream, read_to_end};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let cache = StreamCache::new(MemStorage::new(64 << 20));
//! let fill = || async {
//!     let chunks = ["<html>", "...", "</html>"].map(|c| Ok(Bytes::from_static(c.as_bytes())));
//!     Ok::<_, std::io::Error>(Upstream::new(
//!         ObjectMeta::new("text/html").with_len(16),
//!         futures::stream::iter(chunks).boxed(),
//!     ))
//! };
//! let mut hit = cache.get_or_fill("/index.html", fill).await?;
//! assert_eq!(read_to_end(&mut *hit.body).await?, b"<html>...</html>");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod body;
mod cell;
mod disk;
mod error;
mod fence;
mod front;
mod mem;
#[cfg(feature = "metrics")]
mod meter;
mod observe;
mod state;
mod stats;
mod sync;
mod traits;

#[cfg(herd_loom)]
#[doc(hidden)]
pub mod loom_support;

pub use body::BodyStream;
#[cfg(feature = "http-body")]
pub use body::HttpBody;
pub use disk::{DiskStorage, DiskStorageBuilder, Durability};
pub use error::{BodyError, FillError, StorageError, WriteError};
pub use fence::{Admission, FenceTable, WriteFence};
pub use front::{NoReaderPolicy, Obtained, StreamCache, StreamCacheBuilder, Upstream};
pub use mem::MemStorage;
pub use observe::{FillEnd, FillOutcome};
pub use state::{AbortKind, AbortReason, WriteState};
pub use stats::{AbortCounts, StreamCacheStats};
pub use traits::{
    BodyReader, BodySource, BodyWriter, ByteRange, CacheKey, Capabilities, Hit, ObjectMeta,
    Storage, StorageUsage, read_to_end,
};
