//! Per-key single-flight for async Rust that stays correct when futures are cancelled.
//!
//! When many requests miss a cache for the same key at once, only one of them should call the
//! backend. [`Group`] makes the first caller the *leader* of a flight for that key; callers
//! arriving while it runs become *followers* and receive a clone of its result.
//!
//! The classic bug this crate exists to prevent: the leader publishes "a fill is in progress",
//! then awaits the backend, and its future is dropped at that await (a timeout, a losing
//! `select!` branch, an aborted task, a client that went away). Code that would clear the marker
//! after the await never runs, and every later request for the key hangs. Here the lead is a
//! guard, [`Leader`], whose `Drop` hands the flight to exactly one waiting follower (oldest
//! first), which runs its own fill. The flight state machine is model-checked with loom; see
//! [what is model-checked](#what-is-model-checked) for which parts, and what is not.
//!
//! The core types:
//! - [`Group`]: the sharded map of flights; [`Group::run`] is the one-call API.
//! - [`Leader`]: the guard of a lead, from [`Group::join`], finished with [`Leader::finish`];
//!   it borrows the group, and [`Leader::into_owned`] makes the `'static` [`OwnedLeader`].
//! - [`FlightError`]: why no value came back (the fill failed, a wait timed out, ...).
//!
//! ```
//! use coalesce::Group;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let group: Group<&str, String, std::io::Error> = Group::new();
//! let slow_lookup = || async {
//!     tokio::task::yield_now().await; // the backend takes a while...
//!     Ok("Ada".to_string())
//! };
//! let (a, b) = tokio::join!(
//!     group.run("user:42", slow_lookup),
//!     group.run("user:42", || async { unreachable!("the first caller is already filling") }),
//! );
//! assert_eq!(a.unwrap(), "Ada");
//! assert_eq!(b.unwrap(), "Ada");
//! assert_eq!(group.in_flight(), 0);
//! # }
//! ```
//!
//! The lower-level [`Group::join`] lets the leader do its own work (insert into a store) before
//! it publishes, so followers never wake to a store that has not been written yet:
//!
//! ```
//! use coalesce::{Group, Joined};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let group: Group<u32, u64> = Group::new();
//! let value = match group.join(7).await {
//!     Joined::Leader(leader) => {
//!         let v = 49; // fetch, then store it somewhere before finishing
//!         leader.finish(Ok(v))
//!     }
//!     Joined::Done(result) => result,
//! };
//! assert_eq!(value.unwrap(), 49);
//! # }
//! ```
//!
//! # Across processes
//! [`DistributedGroup`] adds a cross-process fill lease ([`FillLease`]; [`MemoryLease`] here,
//! Redis in `coalesce-redis`) so a fleet fills a key about once, not once per process. It fails
//! open: a lease service that errs or is slow never stops a fill.
//!
//! # What is model-checked
//! The loom models (`tests/loom.rs`, run with `cargo xtask loom coalesce`, preemption bound 2)
//! cover the in-process flight: a leader finishing or dropped with followers waiting; a
//! follower joining, cancelled, or handed the lead and cancelled before taking it; a lone
//! entry upgraded to a shared flight while its leader finishes or is dropped; removal by
//! identity after `forget`; takeover of a leader older than `takeover_after` racing its late
//! finish or its drop; [`ErrorPolicy::HandOff`]; a wait timeout racing a hand-off or a finish;
//! a detached fill's subscriber when the fill publishes, fails or dies; and a distributed
//! refresh standing down. Each checks that one caller leads a flight at a time, that no waiter
//! is left unwoken, that a stale lead never ends a newer flight, and that the [`Stats`]
//! counters agree with what the callers saw.
//!
//! Loom cannot see tokio's timers, tasks or clock, so where the code waits on them the models
//! drive the same transitions through seams that exist only in the loom build: a manual clock
//! for lead ages, a racing "give up" in place of the wait timeout's timer (the timeout's effect
//! is dropping the follower's wait, which is what runs), a loom thread in place of the spawned
//! task, and the refresh's stand-down called directly. Not model-checked: tokio's timers and
//! scheduling themselves, and the [`DistributedGroup`] lease protocol (acquire, re-check,
//! renew, background release), which is tested on tokio's paused clock in
//! `tests/lease_distributed.rs`.
//!
//! # Observability
//! [`Group::stats`] snapshots the outcome counters. Every step of a flight is also a `tracing`
//! event (target `coalesce`: lead, join, hand-off, takeover, abandon, stand-down, wait timeout,
//! finish with its outcome), emitted outside every lock; keys appear in them only in groups
//! built with [`GroupBuilder::trace_keys`]. Whether a fill is traced is decided once, when its
//! lead is taken: with no subscriber that is one relaxed load and a branch per fill, and no key
//! is cloned or formatted. The `metrics` feature adds counters and histograms.
//!
//! # Features
//! - `metrics`: a counter for every [`Stats`] field and histograms of fill duration and
//!   follower wait, through the `metrics` facade (names and labels in the notes of
//!   `GroupBuilder::metrics_name`; `examples/prometheus.rs` renders them). Off by default.
//! - `tokio` (default): [`Group::run_detached`], a fill on a spawned task that survives its
//!   caller, and [`DistributedGroup`], whose lease releases run on spawned tasks. Wait timeouts
//!   and takeover ages always use tokio's clock, so tests can pause it.

mod builder;
#[cfg(feature = "tokio")]
mod detached;
#[cfg(feature = "tokio")]
mod distributed;
mod error;
mod flight;
mod group;
mod join;
mod lead;
mod leader;
pub mod lease;
#[cfg(herd_loom)]
mod loom_seams;
#[cfg(feature = "metrics")]
mod meter;
mod shard;
mod stats;
mod sync;
mod trace;
mod wait;
mod waiters;

use std::hash::Hash;

pub use builder::GroupBuilder;
#[cfg(all(herd_loom, feature = "tokio"))]
#[doc(hidden)]
pub use detached::Spawn;
#[cfg(feature = "tokio")]
pub use distributed::{DistributedBuilder, DistributedGroup, LeaseStats, Refresh, SettingsError};
pub use error::{ErrorPolicy, FlightError};
pub use group::Group;
pub use leader::{Leader, OwnedLeader};
pub use lease::{Acquire, FillLease, LeaseError, LeaseToken, MemoryLease};
#[cfg(herd_loom)]
#[doc(hidden)]
pub use loom_seams::ManualClock;
pub use stats::Stats;

/// What [`Group::join`] produced: the lead, or the outcome of another caller's flight.
#[derive(Debug)]
#[must_use = "a Joined::Leader must be finished, or the fill is handed on when it drops"]
pub enum Joined<'g, K: Hash + Eq, V, E> {
    /// This caller leads: produce the value and call [`Leader::finish`]. The leader borrows
    /// the group; [`Leader::into_owned`] makes one that does not.
    Leader(Leader<'g, K, V, E>),
    /// Another caller's flight ended; this is its outcome.
    Done(Result<V, FlightError<E>>),
}

/// The user guide's hyper-handler recipe (`docs/guide/http-handler.md`), compiled and run as a
/// doc test so that it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/http-handler.md")]
pub struct HttpHandlerRecipe;
