//! A Redis [`FillLease`](coalesce::FillLease) for `coalesce`: a fleet of processes fills each
//! cold key about once, instead of once per process, and keeps filling when Redis is gone.
//!
//! The core types:
//! - [`RedisLease`]: the lease (`SET key token NX PX ttl`; compare-and-delete and
//!   compare-and-extend Lua scripts), every call bounded by a timeout, reconnecting on its own.
//! - [`coalesce::DistributedGroup`]: the group that uses it (in `coalesce`).
//! - [`RedisSecondLevel`]: `ttl-lru`'s second level (L2 under a `TieredCache`) in Redis: the
//!   fleet-wide fence (per-key versions, a version floor for `invalidate_all`), and the
//!   backplane (pub/sub: invalidations with acknowledgements, and announcements of landed
//!   fills that wake other processes' waiting leaders before their next poll).
//! - [`test_server::RedisServer`]: a throwaway `redis-server` for tests and examples.
//!
//! The example is compiled, not run, by the doc tests (a skipped doc test would read as passed);
//! the same flow runs against a real server in `tests/redis`, whose harness names every test it
//! skips when there is no `redis-server` binary.
//!
//! ```no_run
//! use std::sync::Arc;
//! use coalesce::{DistributedGroup, Group};
//! use coalesce_redis::{test_server, RedisLease};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let Some(server) = test_server::redis_or_skip("doc example") else { return };
//! let lease = Arc::new(RedisLease::new(&server.url()).unwrap());
//! let group: DistributedGroup<String, String> = DistributedGroup::new(Group::new(), lease);
//!
//! let shared_cache = std::sync::Mutex::new(None::<String>);
//! let name = group
//!     .run(
//!         "user:42".to_string(),
//!         || async { shared_cache.lock().unwrap().clone() }, // "stored yet?"
//!         || async {
//!             let name = "Ada".to_string(); // ask the backend, then store for the fleet
//!             *shared_cache.lock().unwrap() = Some(name.clone());
//!             Ok(name)
//!         },
//!     )
//!     .await;
//! assert_eq!(name.unwrap(), "Ada");
//! assert_eq!(group.stats().granted, 1);
//! # }
//! ```

mod backplane;
mod connection;
mod lease;
mod second_level;
pub mod test_server;

pub use backplane::BackplaneStats;
pub use lease::{ConfigError, MAX_SETTING, RedisLease, RedisLeaseBuilder};
pub use second_level::{REDIS_MAX_VALUE_LEN, RedisSecondLevel, RedisSecondLevelBuilder};

/// The user guide's fleet recipe (`docs/guide/fleet.md`), compiled and run as a doc test so that
/// it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/fleet.md")]
pub struct FleetRecipe;
