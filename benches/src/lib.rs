//! Shared code for herd's benchmarks: trace reading, workload generators and cache-policy
//! simulators, kept in a library so the criterion benches, the `hitratio` binary and the
//! reproduction tests all measure through the same code.
//!
//! The core pieces:
//! - [`trace::ArcTrace`]: an ARC block trace (`*.lis.zst`), decoded and expanded block by block.
//! - [`policy::Policy`]: one cache policy driven request by request; [`policy::ExactLru`] is the
//!   reference the published figures are checked against, the other policies are compared to it.
//! - [`zipf::Zipf`] over [`rng::Rng`]: seeded synthetic skewed workloads.
//!
//! ```
//! use benches::policy::{simulate, ExactLru};
//!
//! // A cache of 2 entries over A B A C A B: hits on the 2nd A, the 3rd A (B was evicted by C).
//! let mut lru = ExactLru::new(2);
//! let result = simulate(&mut lru, [1u64, 2, 1, 3, 1, 2]);
//! assert_eq!(result.hits, 2);
//! assert_eq!(result.requests, 6);
//! ```

pub mod adaptive;
pub mod fanout;
pub mod policy;
pub mod rng;
pub mod stores;
pub mod trace;
pub mod workload;
pub mod zipf;
