//! A second level (L2) under a [`Cache`](crate::Cache): one cache for a fleet of processes
//! (issue 18). The tier is a type that wraps a cache and uses only its public API; the store
//! under it is any [`SecondLevel`] (Redis in `coalesce-redis`, [`MemorySecondLevel`] here), so
//! `ttl-lru` holds no Redis code.
//!
//! - [`SecondLevel`]: async get / set / delete of encoded values with ttl, plus the fence:
//!   per-key [`Version`]s, [`SecondLevel::set_if_version`] and [`SecondLevel::invalidate`].
//! - [`Codec`]: keys and values to bytes, with typed [`CodecError`]s that never poison a key;
//!   `CborCodec` (feature `serde`) for any `serde` type.
//! - [`TieredCache`]: the read-through L1 → L2 → fleet lease → fill, fail-open and counted
//!   ([`TierStats`]); [`TieredCache::invalidate`] makes an invalidation final across the fleet.
//! - [`L1Sink`]: where a backplane delivers invalidations made by other processes.
//!
//! Cached fill errors go through L2 for one error type with a codec
//! ([`TierBuilder::negative_caching`]). A stale-while-revalidate refresh goes through L2 and the
//! lease like a fill (it takes another process's value from L2 instead of filling), but does not
//! stand down at once while another process holds the lease.

mod backend;
mod codec;
mod memory;
#[cfg(feature = "serde")]
mod serde_codec;
mod stats;
mod tier;

pub use backend::{Invalidated, L1Sink, L2Entry, L2Error, SecondLevel, Version};
pub use codec::{BytesCodec, Codec, CodecError, StringCodec, U64Codec};
pub use memory::MemorySecondLevel;
#[cfg(feature = "serde")]
pub use serde_codec::CborCodec;
pub use stats::TierStats;
pub use tier::{
    InvalidateError, TierBuilder, TierConfigError, TierFetched, TierSource, TieredCache,
};
