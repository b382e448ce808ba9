//! The storage suite: every rule of `stream_cache::Storage`, `BodyWriter` and `BodyReader` as a
//! case a backend author runs against their own backend.
//!
//! ```no_run
//! # async fn demo() {
//! use stream_cache::MemStorage;
//! conformance::storage::Suite::new(|| async { MemStorage::new(8 << 20) })
//!     .run()
//!     .await
//!     .assert_passed();
//! # }
//! ```
//!
//! How a run works: for each case the factory builds a fresh storage; the case runs under the
//! per-case timeout (a hang is a failure, never a hung test) with panics caught; every storage
//! call inside a case is bounded by the step timeout, so a hang names the step that hung. Cases
//! that need a capability the backend does not declare report *skipped*. The run never stops at
//! a failure.
//!
//! Cancel safety of the cases (every `pub async fn(Ctx) -> CaseResult` here): dropping a case at
//! any await drops what it holds: writers (which abort their writes), readers, and the `JoinSet`s
//! of its reader tasks (which aborts them). The storage itself is left to whoever owns it; the
//! suite drops it with the case.

pub mod check;

mod aborts;
mod basics;
mod faults;
mod fences;
mod persistent;
mod ranges;
mod readers;
mod sweeps;
mod waits;
mod writers;

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use stream_cache::{Capabilities, Storage};

pub use aborts::{
    explicit_abort_with_cause, length_mismatch_at_finish, length_overrun_at_write,
    lookup_after_abort, size_limit_declared, size_limit_streamed, writer_dropped_lookup_misses,
    writer_dropped_reader_sees_abort,
};
pub use basics::{empty_body, large_body_many_chunks, meta_round_trip, missing_key, round_trip};
pub use faults::{fault_failed_finish, fault_failed_write, fault_stream_aborted_partway};
pub use fences::{
    invalidate_is_final_for_earlier_writes, newer_write_wins, purge_is_final_for_a_fenced_write,
};
pub use persistent::{
    corrupted_body_is_not_served, expired_object_is_a_miss, persistent_capacity_holds,
    persistent_complete_objects_survive, persistent_expired_objects_are_misses,
    persistent_purge_is_final,
};
pub use ranges::{bad_ranges, range_read_complete, range_read_partial};
pub use readers::{
    many_concurrent_readers, partial_read_while_writing, purge_complete_object, purge_during_read,
    read_cancelled_mid_body, reader_cancelled_mid_read, readers_before_during_after_identical,
    waiting_readers_woken_by_every_event,
};
pub use sweeps::{cancel_sweep_purge, cancel_sweep_read, cancel_sweep_write};
pub use waits::{
    range_end_one_past_length, range_reader_sees_abort, reader_count_counts_open_readers,
    seek_waiting_is_woken, source_reader_sees_abort,
};
pub use writers::{concurrent_writers_one_key, replacing_an_object};

use crate::report::{CaseError, CaseResult, Outcome, Report};
use crate::runner::{self, CaseLimits, case_table};

/// Knobs of a run. The defaults suit in-memory and local-disk backends on a small CI machine.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// A case that runs longer than this fails as hung (default 30 s).
    pub case_timeout: Duration,
    /// One storage call or read that takes longer than this fails, naming the step (default 5 s).
    /// Use `#[tokio::test(start_paused = true)]` to make hang cases instant.
    pub step_timeout: Duration,
    /// Size of the body in `large_body_many_chunks` (default 256 KiB, capped at the backend's
    /// `max_object_size`).
    pub large_body: usize,
    /// Chunk size for multi-chunk bodies (default 4 KiB).
    pub chunk_size: usize,
    /// Readers in `many_concurrent_readers` (default 16).
    pub readers: usize,
    /// `size_limit_streamed` writes `max_object_size + 1` bytes; above this limit it is skipped
    /// rather than writing that much (default 8 MiB).
    pub max_streamed_limit: u64,
    /// Bound on the polls of one cancellation sweep (default 500).
    pub max_sweep_polls: usize,
    /// How long a read that must wait is driven without being woken before it counts as
    /// waiting (default 20 ms; instant on tokio's paused clock). A read that awaits anything
    /// (I/O, an async lock) before deciding answers `Pending` to its first poll whatever it
    /// then decides: a single poll proved nothing for such a backend.
    pub settle: Duration,
    /// How to open a second instance of a storage on the same place (see
    /// [`Settings::reopen`]); needed by the cases of backends that declare `persistent`.
    pub reopen: Option<Reopen>,
    /// How to damage the stored bodies behind the backend's back (see [`Settings::damage`]);
    /// needed by `corrupted_body_is_not_served`.
    pub damage: Option<Damage>,
}

/// A type-erased damage hook (see [`Settings::damage`]).
#[derive(Clone)]
pub struct Damage(Arc<ErasedDamage>);

type ErasedDamage =
    dyn Fn(&(dyn Any + Send + Sync)) -> Option<BoxFuture<'static, ()>> + Send + Sync;

impl std::fmt::Debug for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Damage(..)")
    }
}

/// A type-erased reopen hook (see [`Settings::reopen`]).
#[derive(Clone)]
pub struct Reopen(Arc<ErasedReopen>);

type ErasedReopen =
    dyn Fn(&(dyn Any + Send + Sync)) -> Option<BoxFuture<'static, Arc<dyn Storage>>> + Send + Sync;

impl std::fmt::Debug for Reopen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reopen(..)")
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            case_timeout: Duration::from_secs(30),
            step_timeout: Duration::from_secs(5),
            large_body: 256 * 1024,
            chunk_size: 4 * 1024,
            readers: 16,
            max_streamed_limit: 8 << 20,
            max_sweep_polls: 500,
            settle: Duration::from_millis(20),
            reopen: None,
            damage: None,
        }
    }
}

impl Settings {
    /// Set the settle window (see [`Settings::settle`](struct.Settings.html#structfield.settle)).
    pub fn settle(mut self, quiet: Duration) -> Self {
        self.settle = quiet;
        self
    }

    /// Set the per-case timeout.
    pub fn case_timeout(mut self, timeout: Duration) -> Self {
        self.case_timeout = timeout;
        self
    }

    /// Set the per-step timeout.
    pub fn step_timeout(mut self, timeout: Duration) -> Self {
        self.step_timeout = timeout;
        self
    }

    /// Set the large body's size.
    pub fn large_body(mut self, bytes: usize) -> Self {
        self.large_body = bytes;
        self
    }

    /// Set the chunk size.
    pub fn chunk_size(mut self, bytes: usize) -> Self {
        self.chunk_size = bytes.max(1);
        self
    }

    /// Set the number of concurrent readers.
    pub fn readers(mut self, readers: usize) -> Self {
        self.readers = readers.max(2);
        self
    }

    /// How to damage what the backend stored, as bit rot or a torn write would: flip at least
    /// one byte in the middle of every stored body (not its metadata). The
    /// `corrupted_body_is_not_served` case then requires that the body is served byte-exact or
    /// not at all (a miss, or a prefix of the real body and an error: never a damaged byte);
    /// without a hook it is skipped.
    pub fn damage<S, Fut>(mut self, damage: impl Fn(&S) -> Fut + Send + Sync + 'static) -> Self
    where
        S: Storage,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.damage = Some(Damage(Arc::new(
            move |storage: &(dyn Any + Send + Sync)| {
                let storage = storage.downcast_ref::<S>()?;
                Some(damage(storage).boxed())
            },
        )));
        self
    }

    /// How to open the backend again on the same place (directory, database...), as a restart
    /// would: `reopen(&old)` returns a new instance; the case stops using the old one (it is
    /// dropped after the new one). A backend that declares `persistent` must be given this: its
    /// persistent cases fail without it (a claim of persistence is checked, not trusted).
    pub fn reopen<S, Fut>(mut self, reopen: impl Fn(&S) -> Fut + Send + Sync + 'static) -> Self
    where
        S: Storage,
        Fut: Future<Output = S> + Send + 'static,
    {
        self.reopen = Some(Reopen(Arc::new(move |old: &(dyn Any + Send + Sync)| {
            let old = old.downcast_ref::<S>()?;
            let reopened = reopen(old);
            Some(async move { Arc::new(reopened.await) as Arc<dyn Storage> }.boxed())
        })));
        self
    }
}

/// A capability a case needs (see [`Capabilities`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Readers attach before `finish` (`partial_reads`).
    PartialReads,
    /// `BodyReader::seek` works (`range_reads`).
    RangeReads,
    /// The backend declares a `max_object_size`.
    SizeLimit,
    /// Complete objects survive a restart (`persistent`).
    Persistent,
    /// `ObjectMeta::expires_at` is honoured (`expiry`).
    Expiry,
}

/// What a case works with: a fresh storage, its capabilities, the settings, and its own name
/// (which every failure carries).
#[derive(Clone)]
pub struct Ctx {
    case: &'static str,
    storage: Arc<dyn Storage>,
    capabilities: Capabilities,
    settings: Settings,
    /// The storage as the concrete type the reopen hook takes.
    typed: Option<Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("case", &self.case)
            .field("capabilities", &self.capabilities)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    /// A context for running `case` against `storage` directly (the suite builds these itself).
    pub fn new(case: &'static str, storage: Arc<dyn Storage>, settings: Settings) -> Self {
        Ctx {
            case,
            capabilities: storage.capabilities(),
            storage,
            settings,
            typed: None,
        }
    }

    /// A context whose storage can be reopened with [`Settings::reopen`].
    pub fn reopenable<S: Storage>(case: &'static str, storage: S, settings: Settings) -> Self {
        let storage = Arc::new(storage);
        let mut ctx = Ctx::new(case, Arc::clone(&storage) as Arc<dyn Storage>, settings);
        ctx.typed = Some(storage as Arc<dyn Any + Send + Sync>);
        ctx
    }

    /// Open the storage again on the same place (see [`Settings::reopen`]): the same case with
    /// the new instance, and the old instance, which the caller drops after the new one. Fails
    /// the case if no hook was given or it does not take this storage's type.
    ///
    /// Cancel safety: dropping it drops the half-opened instance.
    pub async fn reopen(&self) -> Result<(Ctx, Arc<dyn Storage>), CaseError> {
        let (Some(hook), Some(typed)) = (&self.settings.reopen, &self.typed) else {
            return Err(self.failure(
                "a reopen hook (Settings::reopen) for a backend that declares `persistent`",
                "none given: persistence cannot be checked",
            ));
        };
        let Some(reopening) = (hook.0)(&**typed) else {
            return Err(self.failure(
                "the reopen hook to take this storage's type",
                "it takes another type",
            ));
        };
        let reopened = self.step("reopen the storage", reopening).await?;
        let mut ctx = Ctx::new(self.case, reopened, self.settings.clone());
        ctx.typed = None;
        Ok((ctx, Arc::clone(&self.storage)))
    }

    /// The same case, against another storage (the fault cases wrap the given one).
    pub fn with_storage(&self, storage: Arc<dyn Storage>) -> Self {
        Ctx::new(self.case, storage, self.settings.clone())
    }

    /// The case's name.
    pub fn case(&self) -> &'static str {
        self.case
    }

    /// The storage under test.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// What it declares.
    pub fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// The run's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Damage the stored bodies with the [`Settings::damage`] hook; `Err(Skipped)` without one.
    ///
    /// Cancel safety: as the hook's future.
    pub async fn damage(&self) -> CaseResult {
        let (Some(hook), Some(typed)) = (&self.settings.damage, &self.typed) else {
            return Err(self.skip("no damage hook given (Settings::damage)"));
        };
        let Some(damaging) = (hook.0)(&**typed) else {
            return Err(self.failure(
                "the damage hook to take this storage's type",
                "it takes another type",
            ));
        };
        self.step("damage the stored bodies", damaging).await
    }

    /// Whether the storage declares `need`.
    pub fn has(&self, need: Need) -> bool {
        match need {
            Need::PartialReads => self.capabilities.partial_reads,
            Need::RangeReads => self.capabilities.range_reads,
            Need::SizeLimit => self.capabilities.max_object_size.is_some(),
            Need::Persistent => self.capabilities.persistent,
            Need::Expiry => self.capabilities.expiry,
        }
    }

    /// `Err(Skipped)` unless the storage declares `need`.
    pub fn require(&self, need: Need) -> CaseResult {
        if self.has(need) {
            return Ok(());
        }
        let capability = match need {
            Need::PartialReads => "partial_reads",
            Need::RangeReads => "range_reads",
            Need::SizeLimit => "max_object_size",
            Need::Persistent => "persistent",
            Need::Expiry => "expiry",
        };
        Err(self.skip(format!("needs the {capability} capability")))
    }

    /// A skip of this case.
    pub fn skip(&self, reason: impl Into<String>) -> CaseError {
        runner::skip(self.case, reason)
    }

    /// A failure of this case.
    pub fn failure(&self, expected: impl Into<String>, seen: impl Into<String>) -> CaseError {
        runner::failure(self.case, expected, seen)
    }

    /// Await `future` within the step timeout; past it, fail naming `what`.
    ///
    /// Cancel safety: dropping it drops `future`.
    pub async fn step<T>(
        &self,
        what: &str,
        future: impl Future<Output = T>,
    ) -> Result<T, CaseError> {
        let pending = "still pending: a hang or a lost wake-up";
        let limit = self.settings.step_timeout;
        runner::step(self.case, limit, what, "complete", pending, future).await
    }

    /// Fail unless `condition`.
    pub fn ensure(
        &self,
        condition: bool,
        expected: impl Into<String>,
        seen: impl Into<String>,
    ) -> CaseResult {
        runner::ensure(self.case, condition, expected, seen)
    }
}

/// One case of the storage suite.
pub type CaseDef = runner::CaseDef<Ctx>;

case_table!(
    /// Every case of the storage suite, in the order a run executes them.
    Ctx;
    round_trip,
    empty_body,
    large_body_many_chunks,
    meta_round_trip,
    missing_key,
    partial_read_while_writing,
    writer_dropped_lookup_misses,
    writer_dropped_reader_sees_abort,
    explicit_abort_with_cause,
    length_mismatch_at_finish,
    length_overrun_at_write,
    size_limit_declared,
    size_limit_streamed,
    readers_before_during_after_identical,
    many_concurrent_readers,
    waiting_readers_woken_by_every_event,
    reader_cancelled_mid_read,
    read_cancelled_mid_body,
    concurrent_writers_one_key,
    purge_during_read,
    purge_complete_object,
    range_read_partial,
    range_read_complete,
    bad_ranges,
    lookup_after_abort,
    replacing_an_object,
    cancel_sweep_write,
    cancel_sweep_read,
    cancel_sweep_purge,
    fault_failed_write,
    fault_failed_finish,
    fault_stream_aborted_partway,
    purge_is_final_for_a_fenced_write,
    newer_write_wins,
    invalidate_is_final_for_earlier_writes,
    seek_waiting_is_woken,
    range_reader_sees_abort,
    range_end_one_past_length,
    source_reader_sees_abort,
    reader_count_counts_open_readers,
    expired_object_is_a_miss,
    persistent_complete_objects_survive,
    persistent_purge_is_final,
    persistent_capacity_holds,
    persistent_expired_objects_are_misses,
    corrupted_body_is_not_served,
);

/// The storage suite over a factory of fresh storages.
pub type Suite<F> = runner::Suite<F, Settings>;

impl<F, Fut, S> Suite<F>
where
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
    S: Storage,
{
    /// A suite that calls `factory` once per case for a fresh, empty storage.
    pub fn new(factory: F) -> Self {
        Suite::with_factory(factory)
    }

    /// Shorthand for the per-case timeout.
    pub fn case_timeout(mut self, timeout: Duration) -> Self {
        self.settings_mut().case_timeout = timeout;
        self
    }

    /// Shorthand for the per-step timeout.
    pub fn step_timeout(mut self, timeout: Duration) -> Self {
        self.settings_mut().step_timeout = timeout;
        self
    }

    /// Run every selected case, each on a fresh storage, and report them all.
    ///
    /// Cancel safety: dropping the run drops the running case (and its storage); nothing is
    /// reported.
    pub async fn run(&self) -> Report {
        self.run_cases("storage", CASES, async |case| self.run_case(case).await)
            .await
    }

    /// Run one case on a fresh storage.
    ///
    /// Cancel safety: as [`Suite::run`].
    pub async fn run_case(&self, case: &CaseDef) -> Outcome {
        let settings = self.current_settings();
        let limits = CaseLimits {
            case_timeout: settings.case_timeout,
            factory_timeout: true,
            subject: "a storage",
            hung: "it hung (a storage call, a read or a wake-up never completed)",
        };
        self.run_one(case, limits, |storage| {
            Ctx::reopenable(case.name, storage, settings.clone())
        })
        .await
    }
}
