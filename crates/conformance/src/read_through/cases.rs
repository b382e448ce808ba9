//! The read-through cases. Fills are gated (they wait until the case opens a gate), so a case
//! knows every caller has joined before the fill ends; each caller's future is polled a few times
//! by hand, which is how a caller "arrives" without a spawned task racing the case.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::join_all;
use tokio::sync::watch;

use super::{Ctx, Fill, FillError, ReadError};
use crate::report::CaseResult;
use crate::sweep::SweepLimits;

type Call<'a> = Pin<Box<dyn Future<Output = Result<String, ReadError>> + Send + 'a>>;

/// Counts a key's fill calls and holds the gate its gated fills wait on.
#[derive(Clone)]
struct Probe {
    calls: Arc<AtomicUsize>,
    gate: Arc<watch::Sender<bool>>,
}

impl Probe {
    fn new() -> Self {
        Probe {
            calls: Arc::default(),
            gate: Arc::new(watch::channel(false).0),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn open(&self) {
        self.gate.send_replace(true);
    }

    /// A fill that counts its call, waits for the gate, then returns `outcome`.
    fn gated(&self, outcome: Result<&str, &str>) -> Fill {
        let calls = Arc::clone(&self.calls);
        let mut gate = self.gate.subscribe();
        let outcome = outcome
            .map(str::to_owned)
            .map_err(|error| FillError(error.to_owned()));
        Box::new(move || {
            calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let _ = gate.wait_for(|open| *open).await;
                outcome
            })
        })
    }

    /// A fill that counts its call and returns `value` at once.
    fn immediate(&self, value: &str) -> Fill {
        let calls = Arc::clone(&self.calls);
        let value = value.to_owned();
        Box::new(move || {
            calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move { Ok(value) })
        })
    }

    /// A fill that counts its call, waits for the gate, then panics.
    fn panicking(&self) -> Fill {
        let calls = Arc::clone(&self.calls);
        let mut gate = self.gate.subscribe();
        Box::new(move || {
            calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let _ = gate.wait_for(|open| *open).await;
                panic!("conformance: a fill that panics");
            })
        })
    }
}

/// Poll `call` until it waits on something only another caller can end (see
/// [`crate::sweep::settle`]): it has joined the key's flight. A call that completes here is
/// returned.
async fn arrive(ctx: &Ctx, call: &mut Call<'_>) -> Option<Result<String, ReadError>> {
    crate::sweep::settle(call, ctx.settings().settle).await
}

/// `arrive`, failing if the call completed while its key's fill is still gated.
async fn arrive_pending(ctx: &Ctx, who: &str, call: &mut Call<'_>) -> CaseResult {
    match arrive(ctx, call).await {
        None => Ok(()),
        Some(result) => Err(ctx.failure(
            format!("{who} to wait while the fill is still running"),
            format!("it returned {result:?}"),
        )),
    }
}

fn ok(value: &str) -> Result<String, ReadError> {
    Ok(value.to_owned())
}

/// Concurrent misses of one key run one fill, and every caller gets its value.
pub async fn coalesces_concurrent_misses(ctx: Ctx) -> CaseResult {
    let cache = Arc::clone(ctx.cache());
    let probe = Probe::new();
    let mut calls: Vec<Call<'_>> = (0..ctx.settings().callers)
        .map(|_| cache.get_or_fill("k".into(), probe.gated(Ok("v"))))
        .collect();
    for (i, call) in calls.iter_mut().enumerate() {
        arrive_pending(&ctx, &format!("caller {i}"), call).await?;
    }
    probe.open();
    let results = ctx.step("every caller", join_all(calls)).await?;
    for (i, result) in results.iter().enumerate() {
        ctx.ensure(
            *result == ok("v"),
            format!("caller {i} to get the fill's value \"v\""),
            format!("{result:?}"),
        )?;
    }
    ctx.ensure(
        probe.calls() == 1,
        format!("one fill for {} concurrent callers", results.len()),
        format!("{} fills", probe.calls()),
    )
}

/// After a fill, the next call is a hit: its fill is not called.
pub async fn hit_after_fill(ctx: Ctx) -> CaseResult {
    let (first, second) = (Probe::new(), Probe::new());
    let value = ctx
        .step(
            "the first call",
            ctx.cache().get_or_fill("k".into(), first.immediate("v1")),
        )
        .await?;
    ctx.ensure(
        value == ok("v1"),
        "the first call to return its fill's value",
        format!("{value:?}"),
    )?;
    let again = ctx
        .step(
            "the second call",
            ctx.cache().get_or_fill("k".into(), second.immediate("v2")),
        )
        .await?;
    ctx.ensure(
        again == ok("v1"),
        "the second call to return the cached \"v1\"",
        format!("{again:?}"),
    )?;
    ctx.ensure(
        second.calls() == 0,
        "no fill for a hit",
        format!("{} fills", second.calls()),
    )
}

/// A failed fill's error reaches every caller that waited on it, unchanged; the fill ran once.
pub async fn error_shared_with_followers(ctx: Ctx) -> CaseResult {
    let cache = Arc::clone(ctx.cache());
    let probe = Probe::new();
    let mut calls: Vec<Call<'_>> = (0..ctx.settings().callers)
        .map(|_| cache.get_or_fill("k".into(), probe.gated(Err("boom"))))
        .collect();
    for (i, call) in calls.iter_mut().enumerate() {
        arrive_pending(&ctx, &format!("caller {i}"), call).await?;
    }
    probe.open();
    let results = ctx.step("every caller", join_all(calls)).await?;
    let expected = Err(ReadError::Failed(FillError("boom".into())));
    for (i, result) in results.iter().enumerate() {
        ctx.ensure(
            *result == expected,
            format!("caller {i} to get the fill's error Failed(\"boom\")"),
            format!("{result:?}"),
        )?;
    }
    ctx.ensure(
        probe.calls() == 1,
        "one fill",
        format!("{} fills", probe.calls()),
    )
}

/// The leading caller is dropped while its fill runs and another caller waits: the waiting caller
/// gets a value without hanging: its own fill's (the fill died with its caller) or, for caches
/// whose fills survive their caller, the original fill's once it ends.
pub async fn leader_cancelled_hands_over(ctx: Ctx) -> CaseResult {
    let cache = Arc::clone(ctx.cache());
    let survives = cache.capabilities().fills_survive_caller;
    let (lead, follow) = (Probe::new(), Probe::new());
    let mut leader = cache.get_or_fill("k".into(), lead.gated(Ok("a")));
    arrive_pending(&ctx, "the leading caller", &mut leader).await?;
    let mut follower = cache.get_or_fill("k".into(), follow.immediate("b"));
    arrive_pending(&ctx, "the waiting caller", &mut follower).await?;
    drop(leader);
    if survives {
        lead.open();
    }
    let got = ctx
        .step("the waiting caller after the leader was dropped", follower)
        .await?;
    let expected = if survives { "a" } else { "b" };
    ctx.ensure(
        got == ok(expected),
        format!("the waiting caller to get \"{expected}\" after the leading caller was dropped"),
        format!("{got:?}"),
    )?;
    let fills = if survives {
        lead.calls()
    } else {
        follow.calls()
    };
    ctx.ensure(
        fills == 1,
        "the value to come from exactly one fill",
        format!("{fills} fills"),
    )
}

/// A leading caller dropped with nobody waiting leaves nothing behind: the next caller gets a
/// value (its own fill's, or the surviving fill's once it ends).
pub async fn leader_cancelled_alone_releases_key(ctx: Ctx) -> CaseResult {
    let cache = Arc::clone(ctx.cache());
    let survives = cache.capabilities().fills_survive_caller;
    let (lead, next) = (Probe::new(), Probe::new());
    let mut leader = cache.get_or_fill("k".into(), lead.gated(Ok("a")));
    arrive_pending(&ctx, "the leading caller", &mut leader).await?;
    drop(leader);
    if survives {
        lead.open();
    }
    let got = ctx
        .step(
            "a later caller",
            cache.get_or_fill("k".into(), next.immediate("c")),
        )
        .await?;
    let expected = if survives { "a" } else { "c" };
    ctx.ensure(
        got == ok(expected),
        format!("a later caller to get \"{expected}\" after the lone leader was dropped"),
        format!("{got:?}"),
    )
}

/// The leading caller's fill panics while another caller waits: the waiting caller returns (a
/// value or an error) instead of hanging, and the key stays usable.
pub async fn leader_panic_does_not_hang(ctx: Ctx) -> CaseResult {
    let cache = Arc::clone(ctx.cache());
    let (lead, follow, later) = (Probe::new(), Probe::new(), Probe::new());
    let leader_cache = Arc::clone(&cache);
    let panicking = lead.panicking();
    let leader = tokio::spawn(async move { leader_cache.get_or_fill("k".into(), panicking).await });
    ctx.step("the leading caller's fill to start", async {
        while lead.calls() == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await?;
    let mut follower = cache.get_or_fill("k".into(), follow.immediate("b"));
    arrive_pending(&ctx, "the waiting caller", &mut follower).await?;
    lead.open();
    // A value or an error (the fill was abandoned) are both acceptable; hanging is not.
    let _ = ctx
        .step(
            "the waiting caller after the leader's fill panicked",
            follower,
        )
        .await?;
    let _ = ctx.step("the leading caller's task", leader).await?;
    let next = ctx
        .step(
            "a later caller",
            cache.get_or_fill("k".into(), later.immediate("c")),
        )
        .await?;
    ctx.ensure(
        next.is_ok(),
        "a caller after the panic to get a value",
        format!("{next:?}"),
    )
}

/// A waiting caller dropped mid-wait disturbs nobody: the fill runs once and the other callers get
/// its value.
pub async fn follower_cancelled(ctx: Ctx) -> CaseResult {
    let cache = Arc::clone(ctx.cache());
    let probe = Probe::new();
    let mut leader = cache.get_or_fill("k".into(), probe.gated(Ok("a")));
    arrive_pending(&ctx, "the leading caller", &mut leader).await?;
    let mut dropped = cache.get_or_fill("k".into(), probe.gated(Ok("x")));
    arrive_pending(&ctx, "the caller to drop", &mut dropped).await?;
    let mut kept = cache.get_or_fill("k".into(), probe.gated(Ok("y")));
    arrive_pending(&ctx, "the caller that stays", &mut kept).await?;
    drop(dropped);
    probe.open();
    let (a, c) = ctx
        .step("the remaining callers", futures::future::join(leader, kept))
        .await?;
    ctx.ensure(
        a == ok("a") && c == ok("a"),
        "both remaining callers to get the fill's value \"a\"",
        format!("{a:?} and {c:?}"),
    )?;
    ctx.ensure(
        probe.calls() == 1,
        "one fill",
        format!("{} fills", probe.calls()),
    )
}

/// A fill in progress for one key does not hold up another key.
pub async fn keys_are_independent(ctx: Ctx) -> CaseResult {
    let cache = Arc::clone(ctx.cache());
    let (slow, fast) = (Probe::new(), Probe::new());
    let mut blocked = cache.get_or_fill("slow".into(), slow.gated(Ok("s")));
    arrive_pending(&ctx, "the caller of the slow key", &mut blocked).await?;
    let other = ctx
        .step(
            "a caller of another key while the first key's fill runs",
            cache.get_or_fill("fast".into(), fast.immediate("f")),
        )
        .await?;
    ctx.ensure(
        other == ok("f"),
        "the other key's value",
        format!("{other:?}"),
    )?;
    slow.open();
    let got = ctx.step("the slow key's caller", blocked).await?;
    ctx.ensure(got == ok("s"), "the slow key's value", format!("{got:?}"))
}

/// Sweep one call (a fill that yields a few times) dropped after every number of polls: after
/// each drop, a new call of the key returns a value without hanging.
pub async fn cancel_sweep(ctx: Ctx) -> CaseResult {
    let cache = Arc::clone(ctx.cache());
    let limits = SweepLimits {
        max_polls: ctx.settings().max_sweep_polls,
        wake_timeout: ctx.settings().step_timeout,
    };
    let make = |n: usize| {
        let cache = Arc::clone(&cache);
        async move {
            let fill: Fill = Box::new(move || {
                Box::pin(async move {
                    for _ in 0..3 {
                        tokio::task::yield_now().await;
                    }
                    Ok(format!("v{n}"))
                })
            });
            cache.get_or_fill(format!("sweep-{n}"), fill).await
        }
    };
    let check = |n: usize, output: Option<Result<String, ReadError>>| {
        let ctx = ctx.clone();
        async move {
            if let Some(output) = output {
                return ctx.ensure(
                    output == Ok(format!("v{n}")),
                    format!("the undisturbed call to return \"v{n}\""),
                    format!("{output:?}"),
                );
            }
            let probe = Probe::new();
            let next = ctx
                .step(
                    "a call after the dropped one",
                    ctx.cache()
                        .get_or_fill(format!("sweep-{n}"), probe.immediate("fresh")),
                )
                .await?;
            ctx.ensure(
                next.is_ok(),
                "a call after a dropped call to get a value",
                format!("{next:?}"),
            )
        }
    };
    crate::sweep::cancel_sweep(limits, make, check)
        .await
        .map(drop)
        .map_err(|error| {
            let finish = "the call to complete under the sweep";
            crate::runner::sweep_failure(ctx.case, "a call", finish, error)
        })
}
