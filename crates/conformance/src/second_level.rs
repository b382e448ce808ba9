//! The second-level suite: hold any [`ttl_lru::SecondLevel`] (the shipped
//! `ttl_lru::second_level::MemorySecondLevel` and `coalesce_redis::RedisSecondLevel`, or your
//! own on Memcached, DynamoDB...) to the contract `ttl_lru::TieredCache` relies on: values of
//! any bytes round-trip, ttls are honoured and reported never longer than stored, and above all
//! the fence (a write that read a version before an invalidation never lands after it), the
//! backplane (attached sinks hear invalidations), typed errors and prompt failure when down.
//!
//! ```
//! use conformance::second_level::{MemoryL2Service, Suite};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
//! Suite::new(|| async { MemoryL2Service::new() })
//!     .run()
//!     .await
//!     .assert_passed(); // panics once, listing every failed case
//! # });
//! ```
//!
//! Each case runs on a fresh service from the factory, under a case timeout, with keys of its
//! own. Expiry cases sleep on tokio's clock (at once on a paused runtime for the memory store;
//! a real Redis really waits a few short ttls).
//!
//! # Cancel safety of the cases and helpers
//! Every case is a sequence of calls, each bounded by `step` (which drops the call's future
//! when the step timeout runs out); a dropped call may or may not have taken effect, as the
//! trait documents. Nothing else is held across an await.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures::future::join_all;
use ttl_lru::second_level::{L1Sink, L2Error, MemorySecondLevel, SecondLevel, Version};

use crate::report::{CaseError, CaseResult, Outcome, Report};
use crate::runner::{self, CaseLimits, case_table};

/// A second level under test: handles on one shared store (each as if from its own process),
/// and a way to take the store down.
#[async_trait]
pub trait L2Service: Send + Sync + 'static {
    /// A handle on the store. Each call may return a new handle with its own connections (two
    /// "processes"); all see the same data.
    fn handle(&self) -> Arc<dyn SecondLevel>;

    /// Whether invalidations reach the sinks attached to (other) handles. Without it, the
    /// backplane case is skipped.
    fn has_backplane(&self) -> bool;

    /// Waits until every handle's backplane is ready to receive (a subscription is live).
    async fn settle(&self) {}

    /// Makes the store unreachable for the rest of the case. Returns `false` if it cannot be
    /// taken down; the case that needs it is then skipped.
    async fn take_down(&self) -> bool;
}

/// [`MemorySecondLevel`] as an [`L2Service`] (taken down with `set_down(true)`).
#[derive(Debug, Clone, Default)]
pub struct MemoryL2Service {
    store: MemorySecondLevel,
}

impl MemoryL2Service {
    /// A fresh store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wraps `store`.
    pub fn with(store: MemorySecondLevel) -> Self {
        MemoryL2Service { store }
    }
}

#[async_trait]
impl L2Service for MemoryL2Service {
    fn handle(&self) -> Arc<dyn SecondLevel> {
        Arc::new(self.store.clone())
    }

    fn has_backplane(&self) -> bool {
        true
    }

    async fn take_down(&self) -> bool {
        self.store.set_down(true);
        true
    }
}

/// Knobs of a second-level run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// A case running longer than this fails as hung (default 30 s).
    pub case_timeout: Duration,
    /// One call taking longer than this fails, naming the step (default 5 s).
    pub step_timeout: Duration,
    /// The ttl of values a case lets expire (default 200 ms).
    pub short_ttl: Duration,
    /// The ttl of values that must not expire during a case (default 60 s).
    pub long_ttl: Duration,
    /// Concurrent fenced writers, sent after an invalidation and together with one (default
    /// 16).
    pub writers: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            case_timeout: Duration::from_secs(30),
            step_timeout: Duration::from_secs(5),
            short_ttl: Duration::from_millis(200),
            long_ttl: Duration::from_secs(60),
            writers: 16,
        }
    }
}

/// What a case works with: the service, two handles on it, the settings and a key namespace
/// of the case's own.
#[derive(Clone)]
pub struct Ctx {
    case: &'static str,
    service: Arc<dyn L2Service>,
    a: Arc<dyn SecondLevel>,
    b: Arc<dyn SecondLevel>,
    settings: Settings,
    namespace: Vec<u8>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("case", &self.case)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn run_nonce() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{nanos:x}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Relaxed)
    )
}

/// A sink that records what it was told.
#[derive(Default)]
struct Recorder {
    keys: parking_lot::Mutex<Vec<Vec<u8>>>,
    /// `invalidate_all` calls heard.
    all: std::sync::atomic::AtomicUsize,
}

impl L1Sink for Recorder {
    fn invalidate_encoded(&self, key: &[u8]) {
        self.keys.lock().push(key.to_vec());
    }
    fn invalidate_all(&self) {
        self.all.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Ctx {
    /// A recording sink attached to handle `b` once the backplane is settled, and the `Arc`
    /// that keeps it attached (handles hold sinks weakly); a skip without a backplane.
    async fn recorder_on_b(&self) -> Result<(Arc<Recorder>, Arc<dyn L1Sink>), CaseError> {
        if !self.service.has_backplane() {
            return Err(runner::skip(self.case, "this store has no backplane"));
        }
        let recorder = Arc::new(Recorder::default());
        let sink: Arc<dyn L1Sink> = recorder.clone();
        self.b.attach(Arc::downgrade(&sink));
        self.answer("settle", self.service.settle()).await?;
        Ok((recorder, sink))
    }

    /// A context for running `case` against `service` directly.
    pub fn new(case: &'static str, service: Arc<dyn L2Service>, settings: Settings) -> Self {
        Ctx {
            case,
            a: service.handle(),
            b: service.handle(),
            service,
            settings,
            namespace: format!("conformance:{case}:{}:", run_nonce()).into_bytes(),
        }
    }

    /// A key of this case's own (`name` may be any bytes).
    pub fn key(&self, name: &[u8]) -> Vec<u8> {
        [self.namespace.as_slice(), name].concat()
    }

    /// The run's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A failure of this case.
    pub fn failure(&self, expected: impl Into<String>, seen: impl Into<String>) -> CaseError {
        runner::failure(self.case, expected, seen)
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

    /// Await `future` within the step timeout, and require an `Ok` answer.
    ///
    /// # Cancellation
    /// Dropping it drops `future` wherever it was (what that leaves behind is the backend
    /// call's own cancellation contract); nothing of the case's is changed.
    pub async fn ok<T>(
        &self,
        what: &str,
        future: impl Future<Output = Result<T, L2Error>>,
    ) -> Result<T, CaseError> {
        match self.answer(what, future).await? {
            Ok(value) => Ok(value),
            Err(error) => Err(self.failure(format!("{what} to answer"), format!("error: {error}"))),
        }
    }

    /// Await `future` within the step timeout (any answer).
    ///
    /// # Cancellation
    /// As [`ok`](Self::ok): `future` is dropped where it was.
    pub async fn answer<T>(
        &self,
        what: &str,
        future: impl Future<Output = T>,
    ) -> Result<T, CaseError> {
        let pending = "still pending: an L2 call that hangs stalls every miss of the key";
        runner::step(
            self.case,
            self.settings.step_timeout,
            what,
            "answer",
            pending,
            future,
        )
        .await
    }
}

/// One case of the second-level suite.
pub type CaseDef = runner::CaseDef<Ctx>;

case_table!(
    /// Every case of the second-level suite, in run order.
    Ctx;
    missing_key_reads_none,
    values_of_any_bytes_round_trip,
    remaining_ttl_is_never_longer_than_stored,
    value_expires_after_its_ttl,
    delete_removes_the_value,
    write_at_the_current_version_lands,
    a_write_if_absent_never_replaces_a_value,
    invalidate_changes_the_version_and_deletes,
    write_fenced_by_an_invalidation_is_refused,
    concurrent_fenced_writes_after_an_invalidation_all_fail,
    fenced_writes_racing_an_invalidation_never_outlive_it,
    versions_never_repeat,
    keys_are_independent,
    invalidation_reaches_the_other_handles_sinks,
    invalidate_all_reaches_the_other_handles_sinks,
    a_value_without_expiry_reports_none,
    invalidate_all_drops_every_value_and_fences_every_version,
    invalid_ttl_is_a_typed_error,
    store_down_answers_errors_promptly,
);

/// A key never written reads `None`, at version 0 or any version.
pub async fn missing_key_reads_none(ctx: Ctx) -> CaseResult {
    let key = ctx.key(b"missing");
    let got = ctx.ok("get(missing)", ctx.a.get(&key)).await?;
    ctx.ensure(
        got.is_none(),
        "get of a missing key to be None",
        format!("{got:?}"),
    )
}

/// Keys and values of any bytes (empty, NUL, invalid UTF-8, newlines) round-trip, across
/// handles.
pub async fn values_of_any_bytes_round_trip(ctx: Ctx) -> CaseResult {
    let long = ctx.settings.long_ttl;
    let samples: [(&[u8], Vec<u8>); 4] = [
        (b"", b"".to_vec()),
        (b"\0\xff\n ", vec![0, 0xFF, b'\r', b'\n']),
        (b"\xc3\x28", (0..=255).collect()),
        (b"d:v:{x}", vec![7; 64 * 1024]),
    ];
    // All written first, then all read: distinct keys (even ones equal up to a NUL) must not
    // overwrite each other.
    for (name, value) in &samples {
        ctx.ok("set", ctx.a.set(&ctx.key(name), value, long))
            .await?;
    }
    for (name, value) in &samples {
        let got = ctx.ok("get", ctx.b.get(&ctx.key(name))).await?;
        ctx.ensure(
            got.as_ref().map(|e| &e.value) == Some(value),
            format!(
                "the other handle to read the {} bytes written under {name:?}",
                value.len()
            ),
            format!("{:?}", got.map(|e| e.value.len())),
        )?;
    }
    Ok(())
}

/// `get` reports a remaining ttl in (0, stored ttl].
pub async fn remaining_ttl_is_never_longer_than_stored(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key(b"k"), ctx.settings.long_ttl);
    ctx.ok("set", ctx.a.set(&key, b"v", long)).await?;
    let got = ctx.ok("get", ctx.b.get(&key)).await?;
    let ttl = got.and_then(|e| e.ttl);
    ctx.ensure(
        ttl.is_some_and(|t| !t.is_zero() && t <= long),
        format!("a remaining ttl in (0, {long:?}]"),
        format!("{ttl:?}"),
    )
}

/// A value is gone once its ttl has passed.
pub async fn value_expires_after_its_ttl(ctx: Ctx) -> CaseResult {
    let key = ctx.key(b"k");
    ctx.ok("set", ctx.a.set(&key, b"v", ctx.settings.short_ttl))
        .await?;
    tokio::time::sleep(ctx.settings.short_ttl * 2).await;
    let got = ctx.ok("get", ctx.b.get(&key)).await?;
    ctx.ensure(
        got.is_none(),
        "None after twice its ttl",
        format!("{got:?}"),
    )
}

/// `delete` removes the value (and, not being an invalidation, leaves the version alone).
pub async fn delete_removes_the_value(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key(b"k"), ctx.settings.long_ttl);
    let before = ctx.ok("version", ctx.a.version(&key)).await?;
    ctx.ok("set", ctx.a.set(&key, b"v", long)).await?;
    ctx.ok("delete", ctx.b.delete(&key)).await?;
    let got = ctx.ok("get", ctx.a.get(&key)).await?;
    ctx.ensure(got.is_none(), "None after delete", format!("{got:?}"))?;
    let after = ctx.ok("version", ctx.a.version(&key)).await?;
    ctx.ensure(
        before == after,
        "delete to leave the version",
        format!("{before:?} -> {after:?}"),
    )
}

/// `set_if_version` at the current version stores and returns true.
pub async fn write_at_the_current_version_lands(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key(b"k"), ctx.settings.long_ttl);
    let version = ctx.ok("version", ctx.a.version(&key)).await?;
    let stored = ctx
        .ok(
            "set_if_version",
            ctx.a.set_if_version(&key, version, b"v", long),
        )
        .await?;
    ctx.ensure(
        stored,
        "set_if_version at the current version to store",
        "false",
    )?;
    let got = ctx.ok("get", ctx.b.get(&key)).await?;
    ctx.ensure(
        got.as_ref().is_some_and(|e| e.value == b"v"),
        "the other handle to read it",
        format!("{got:?}"),
    )
}

/// `set_if_version_absent` stores as `set_if_version` does where the key holds no value, and
/// never replaces one (the tier writes cached errors this way: an error must not replace a
/// value another process stored at the same version); it is fenced by the version as well.
pub async fn a_write_if_absent_never_replaces_a_value(ctx: Ctx) -> CaseResult {
    let (key, empty, long) = (ctx.key(b"k"), ctx.key(b"empty"), ctx.settings.long_ttl);
    let version = ctx.ok("version", ctx.a.version(&key)).await?;
    let stored = ctx
        .ok(
            "set_if_version",
            ctx.a.set_if_version(&key, version, b"value", long),
        )
        .await?;
    ctx.ensure(
        stored,
        "set_if_version at the current version to store",
        "false",
    )?;
    let replaced = ctx
        .ok(
            "set_if_version_absent",
            ctx.b.set_if_version_absent(&key, version, b"error", long),
        )
        .await?;
    ctx.ensure(
        !replaced,
        "set_if_version_absent to leave a stored value alone",
        "it stored",
    )?;
    let got = ctx.ok("get", ctx.a.get(&key)).await?;
    ctx.ensure(
        got.as_ref().is_some_and(|e| e.value == b"value"),
        "the value stored first to stay",
        format!("{got:?}"),
    )?;
    let before = ctx.ok("version", ctx.a.version(&empty)).await?;
    let landed = ctx
        .ok(
            "set_if_version_absent",
            ctx.a.set_if_version_absent(&empty, before, b"error", long),
        )
        .await?;
    ctx.ensure(
        landed,
        "set_if_version_absent to store where nothing is",
        "false",
    )?;
    ctx.ok("invalidate", ctx.b.invalidate(&empty)).await?;
    let fenced = ctx
        .ok(
            "set_if_version_absent",
            ctx.a.set_if_version_absent(&empty, before, b"late", long),
        )
        .await?;
    ctx.ensure(
        !fenced,
        "set_if_version_absent at a version read before an invalidation to be refused",
        "it stored",
    )
}

/// `invalidate` changes the version and deletes the value.
pub async fn invalidate_changes_the_version_and_deletes(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key(b"k"), ctx.settings.long_ttl);
    ctx.ok("set", ctx.a.set(&key, b"v", long)).await?;
    let before = ctx.ok("version", ctx.a.version(&key)).await?;
    let done = ctx.ok("invalidate", ctx.b.invalidate(&key)).await?;
    let after = ctx.ok("version", ctx.a.version(&key)).await?;
    ctx.ensure(
        before != after && done.version == after,
        "invalidate to change the version (and report the new one)",
        format!("{before:?} -> {after:?}, reported {:?}", done.version),
    )?;
    let got = ctx.ok("get", ctx.a.get(&key)).await?;
    ctx.ensure(got.is_none(), "None after invalidate", format!("{got:?}"))
}

/// The fence: a write made with a version read before an invalidation does not land.
pub async fn write_fenced_by_an_invalidation_is_refused(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key(b"k"), ctx.settings.long_ttl);
    let version = ctx.ok("version", ctx.a.version(&key)).await?;
    ctx.ok("invalidate", ctx.b.invalidate(&key)).await?;
    let stored = ctx
        .ok(
            "set_if_version",
            ctx.a.set_if_version(&key, version, b"old", long),
        )
        .await?;
    ctx.ensure(
        !stored,
        "a write fenced by an invalidation to be refused",
        "stored",
    )?;
    let got = ctx.ok("get", ctx.b.get(&key)).await?;
    ctx.ensure(
        got.is_none(),
        "the fenced value never to be readable",
        format!("{got:?}"),
    )
}

/// Many fenced writes at a pre-invalidation version, sent at once after it: none lands.
pub async fn concurrent_fenced_writes_after_an_invalidation_all_fail(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key(b"k"), ctx.settings.long_ttl);
    let version = ctx.ok("version", ctx.a.version(&key)).await?;
    ctx.ok("invalidate", ctx.a.invalidate(&key)).await?;
    let writes = (0..ctx.settings.writers).map(|i| {
        let handle = if i % 2 == 0 { &ctx.a } else { &ctx.b };
        ctx.ok(
            "set_if_version",
            handle.set_if_version(&key, version, b"old", long),
        )
    });
    let mut landed = 0;
    for stored in join_all(writes).await {
        landed += usize::from(stored?);
    }
    ctx.ensure(
        landed == 0,
        "no fenced write to land",
        format!("{landed} landed"),
    )?;
    let got = ctx.ok("get", ctx.b.get(&key)).await?;
    ctx.ensure(got.is_none(), "nothing readable", format!("{got:?}"))
}

/// Fenced writes at the pre-invalidation version sent together with the invalidation: each
/// either landed before it (and the invalidation deleted it) or is refused after it, so nothing
/// is readable once all are done. A `set_if_version` that checks the version and then stores in
/// a second step lets a write checked before the invalidation store after it.
pub async fn fenced_writes_racing_an_invalidation_never_outlive_it(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key(b"k"), ctx.settings.long_ttl);
    let version = ctx.ok("version", ctx.a.version(&key)).await?;
    let writes = (0..ctx.settings.writers).map(|i| {
        let handle = if i % 2 == 0 { &ctx.a } else { &ctx.b };
        ctx.ok(
            "set_if_version",
            handle.set_if_version(&key, version, b"old", long),
        )
    });
    // The writes are polled first: a two-step write has checked the version when the
    // invalidation runs.
    let (stored, invalidated) = futures::future::join(
        join_all(writes),
        ctx.ok("invalidate", ctx.b.invalidate(&key)),
    )
    .await;
    invalidated?;
    for result in stored {
        result?;
    }
    let got = ctx.ok("get", ctx.a.get(&key)).await?;
    ctx.ensure(
        got.is_none(),
        "no write fenced at the old version readable after the invalidation",
        format!("{got:?}"),
    )
}

/// Each invalidation gives a version never seen before for the key.
pub async fn versions_never_repeat(ctx: Ctx) -> CaseResult {
    let key = ctx.key(b"k");
    let mut seen: Vec<Version> = vec![ctx.ok("version", ctx.a.version(&key)).await?];
    for _ in 0..4 {
        ctx.ok("invalidate", ctx.b.invalidate(&key)).await?;
        let v = ctx.ok("version", ctx.a.version(&key)).await?;
        ctx.ensure(
            !seen.contains(&v),
            "a new version per invalidation",
            format!("{v:?} after {seen:?}"),
        )?;
        seen.push(v);
    }
    Ok(())
}

/// An invalidation of one key leaves another's value and version alone.
pub async fn keys_are_independent(ctx: Ctx) -> CaseResult {
    let long = ctx.settings.long_ttl;
    let (a, b) = (ctx.key(b"a"), ctx.key(b"b"));
    ctx.ok("set b", ctx.a.set(&b, b"v", long)).await?;
    let version = ctx.ok("version b", ctx.a.version(&b)).await?;
    ctx.ok("invalidate a", ctx.a.invalidate(&a)).await?;
    let got = ctx.ok("get b", ctx.b.get(&b)).await?;
    ctx.ensure(
        got.is_some(),
        "b's value to survive a's invalidation",
        "None",
    )?;
    let stored = ctx
        .ok(
            "set_if_version b",
            ctx.b.set_if_version(&b, version, b"w", long),
        )
        .await?;
    ctx.ensure(stored, "b's version to survive a's invalidation", "refused")
}

/// With a backplane, a sink attached to one handle hears an invalidation made through another,
/// by the time `invalidate` returns if it counted the sink's acknowledgement, else soon after.
pub async fn invalidation_reaches_the_other_handles_sinks(ctx: Ctx) -> CaseResult {
    let (recorder, _sink) = ctx.recorder_on_b().await?;
    let key = ctx.key(b"\0k");
    let done = ctx.ok("invalidate", ctx.a.invalidate(&key)).await?;
    let heard = || recorder.keys.lock().contains(&key);
    if done.acked == 0 {
        let wait = async {
            while !heard() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let _ = ctx.answer("the sink to hear the invalidation", wait).await;
    }
    ctx.ensure(
        heard(),
        "the other handle's sink to hear the invalidated key",
        format!("heard {:?} ({done:?})", recorder.keys.lock()),
    )?;
    ctx.ensure(
        done.receivers >= 1 && done.acked <= done.receivers,
        "invalidate to report at least the one receiver, and no more acks than receivers",
        format!("{done:?}"),
    )
}

/// `invalidate_all` tells every attached sink in the fleet to drop everything: the other
/// handle's sink hears it (after the subscription's first `invalidate_all`, which a sink hears
/// as it subscribes, since anything cached before then may have missed a message).
pub async fn invalidate_all_reaches_the_other_handles_sinks(ctx: Ctx) -> CaseResult {
    let (recorder, _sink) = ctx.recorder_on_b().await?;
    let heard = || recorder.all.load(std::sync::atomic::Ordering::SeqCst);
    let before = heard();
    match ctx.answer("invalidate_all", ctx.a.invalidate_all()).await? {
        Err(L2Error::Unsupported(_)) => {
            return Err(runner::skip(ctx.case, "this store has no invalidate_all"));
        }
        Err(error) => {
            return Err(ctx.failure("invalidate_all to answer", format!("error: {error}")));
        }
        Ok(_) => {}
    }
    let wait = async {
        while heard() == before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let _ = ctx.answer("the sink to hear invalidate_all", wait).await;
    ctx.ensure(
        heard() > before,
        "the other handle's sink to hear invalidate_all",
        "nothing heard",
    )
}

/// A value stored with `Duration::MAX` does not expire: `get` reports no time left (`None`),
/// not a huge or wrapped one.
pub async fn a_value_without_expiry_reports_none(ctx: Ctx) -> CaseResult {
    let key = ctx.key(b"k");
    ctx.ok("set", ctx.a.set(&key, b"forever", Duration::MAX))
        .await?;
    let got = ctx.ok("get", ctx.b.get(&key)).await?;
    ctx.ensure(
        got.as_ref()
            .is_some_and(|e| e.value == b"forever" && e.ttl.is_none()),
        "the value, with no expiry (ttl None)",
        format!("{got:?}"),
    )
}

/// A ttl under 1 ms is a typed error, for plain and fenced writes, and stores nothing.
pub async fn invalid_ttl_is_a_typed_error(ctx: Ctx) -> CaseResult {
    let key = ctx.key(b"k");
    for ttl in [Duration::ZERO, Duration::from_micros(999)] {
        let answer = ctx
            .answer("set with a bad ttl", ctx.a.set(&key, b"v", ttl))
            .await?;
        ctx.ensure(
            matches!(answer, Err(L2Error::InvalidTtl(_))),
            format!("set with ttl {ttl:?} to be L2Error::InvalidTtl"),
            format!("{answer:?}"),
        )?;
        let answer = ctx
            .answer(
                "set_if_version with a bad ttl",
                ctx.a.set_if_version(&key, Version(0), b"v", ttl),
            )
            .await?;
        ctx.ensure(
            matches!(answer, Err(L2Error::InvalidTtl(_))),
            format!("set_if_version with ttl {ttl:?} to be L2Error::InvalidTtl"),
            format!("{answer:?}"),
        )?;
    }
    let got = ctx.ok("get", ctx.a.get(&key)).await?;
    ctx.ensure(
        got.is_none(),
        "nothing stored by refused writes",
        format!("{got:?}"),
    )
}

/// With the store down, every call answers an error within the step timeout: never a hang,
/// never a pretend success.
pub async fn store_down_answers_errors_promptly(ctx: Ctx) -> CaseResult {
    let (key, long) = (ctx.key(b"k"), ctx.settings.long_ttl);
    let version = ctx.ok("version", ctx.a.version(&key)).await?;
    if !ctx.answer("take_down", ctx.service.take_down()).await? {
        return Err(runner::skip(ctx.case, "this store cannot be taken down"));
    }
    let answers = [
        (
            "get",
            ctx.answer("get while down", ctx.a.get(&key))
                .await?
                .map(drop),
        ),
        (
            "set",
            ctx.answer("set while down", ctx.a.set(&key, b"v", long))
                .await?,
        ),
        (
            "version",
            ctx.answer("version while down", ctx.a.version(&key))
                .await?
                .map(drop),
        ),
        (
            "set_if_version",
            ctx.answer(
                "set_if_version while down",
                ctx.a.set_if_version(&key, version, b"v", long),
            )
            .await?
            .map(drop),
        ),
        (
            "invalidate",
            ctx.answer("invalidate while down", ctx.b.invalidate(&key))
                .await?
                .map(drop),
        ),
        (
            "delete",
            ctx.answer("delete while down", ctx.b.delete(&key)).await?,
        ),
    ];
    for (what, answer) in answers {
        ctx.ensure(
            answer.is_err(),
            format!("{what} while the store is down to be an error"),
            format!("{answer:?}"),
        )?;
    }
    Ok(())
}

/// The fleet-wide invalidation: every value stored before is gone and every version read before
/// (of a key never invalidated, and of one invalidated on its own) is refused afterwards; a
/// version read afterwards writes again. A store that does not support it fails this case.
pub async fn invalidate_all_drops_every_value_and_fences_every_version(ctx: Ctx) -> CaseResult {
    let (plain, own, long) = (ctx.key(b"plain"), ctx.key(b"own"), ctx.settings.long_ttl);
    let before = ctx.ok("version", ctx.a.version(&plain)).await?;
    let stored = ctx
        .ok(
            "set_if_version",
            ctx.a.set_if_version(&plain, before, b"a", long),
        )
        .await?;
    ctx.ensure(stored, "a write at the current version to land", "refused")?;
    ctx.ok("invalidate", ctx.a.invalidate(&own)).await?;
    let own_before = ctx.ok("version", ctx.a.version(&own)).await?;
    ctx.ok("invalidate_all", ctx.b.invalidate_all()).await?;
    let got = ctx.ok("get", ctx.a.get(&plain)).await?;
    ctx.ensure(
        got.is_none(),
        "no value stored before invalidate_all to be readable",
        format!("{got:?}"),
    )?;
    for (key, version) in [(&plain, before), (&own, own_before)] {
        let landed = ctx
            .ok(
                "set_if_version",
                ctx.a.set_if_version(key, version, b"old", long),
            )
            .await?;
        ctx.ensure(
            !landed,
            "a write at a version read before invalidate_all to be refused",
            "stored",
        )?;
    }
    let after = ctx.ok("version", ctx.a.version(&plain)).await?;
    let landed = ctx
        .ok(
            "set_if_version",
            ctx.a.set_if_version(&plain, after, b"new", long),
        )
        .await?;
    ctx.ensure(
        landed,
        "a write at a version read after invalidate_all to land",
        "refused",
    )?;
    let got = ctx.ok("get", ctx.b.get(&plain)).await?;
    ctx.ensure(
        got.as_ref().is_some_and(|e| e.value == b"new"),
        "the new value",
        format!("{got:?}"),
    )
}

/// The second-level suite over a factory of fresh services.
pub type Suite<F> = runner::Suite<F, Settings>;

impl<F, Fut, S> Suite<F>
where
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
    S: L2Service,
{
    /// A suite that calls `factory` once per case for a fresh service.
    pub fn new(factory: F) -> Self {
        Suite::with_factory(factory)
    }

    /// Run every selected case, each on a fresh service under the case timeout, and report
    /// them all.
    ///
    /// Cancel safety: dropping the run drops the running case; nothing is reported.
    pub async fn run(&self) -> Report {
        self.run_cases("second_level", CASES, async |case| {
            self.run_case(case).await
        })
        .await
    }

    /// Run one case on a fresh service.
    ///
    /// Cancel safety: as [`Suite::run`].
    pub async fn run_case(&self, case: &CaseDef) -> Outcome {
        let settings = self.current_settings();
        let limits = CaseLimits {
            case_timeout: settings.case_timeout,
            factory_timeout: false,
            subject: "a store",
            hung: "it hung",
        };
        self.run_one(case, limits, |service| {
            Ctx::new(case.name, Arc::new(service), settings.clone())
        })
        .await
    }
}
