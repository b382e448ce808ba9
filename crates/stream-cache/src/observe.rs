//! How a fill ended, for whoever watches: the `fills_in_flight` gauge, the user's
//! [`on_fill_end`](crate::StreamCacheBuilder::on_fill_end) hook, `tracing` events and (with the
//! `metrics` feature) the fill-duration histogram.
//!
//! Why one tracker per fill: a fill can end in many places (its `fill()` fails, the storage
//! refuses the write, the pump completes or aborts, the leading caller is dropped before the
//! body starts, the runtime drops the pump task). A `FillTracker` is created when `fill()` is
//! called and moved along with the fill (into the pump once the body streams); whoever ends the
//! fill calls [`FillTracker::end`], and its `Drop` reports `Cancelled` otherwise, so every
//! started fill is reported exactly once and the gauge never leaks.
//!
//! Events (target `stream_cache`, level `DEBUG`, `WARN` for an abort): `fill started` and `fill
//! ended`, fields `key` (the key's `Debug` form, formatted only when a subscriber records the
//! event), `outcome`, `cause` (an abort's [`AbortKind`]), `bytes` and `elapsed_ms`. The pump runs
//! inside a `stream_cache.fill` span with the same `key`. With no subscriber each is one
//! relaxed load and a branch; the clock is read only when someone listens (a hook, a
//! subscriber, or the `metrics` feature). None of this is on the hit path.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::state::AbortKind;
use crate::stats::Counters;
use crate::traits::CacheKey;

/// How a fill ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FillOutcome {
    /// The body was completely written (`bytes` long).
    Completed {
        /// Body length.
        bytes: u64,
    },
    /// The body write was aborted after `bytes` bytes: its readers saw this cause as an error.
    Aborted {
        /// Why (the `AbortReason`'s kind).
        kind: AbortKind,
        /// Bytes written before the abort.
        bytes: u64,
    },
    /// The fill failed before its body started (upstream error, fill timeout, storage error,
    /// declared length over the limit): no object was stored, waiting callers got the error.
    Failed,
    /// The leading caller was dropped before the body started; the lead passed to another
    /// waiting caller, which runs its own fill (reported on its own).
    Cancelled,
}

impl FillOutcome {
    fn name(self) -> &'static str {
        match self {
            FillOutcome::Completed { .. } => "completed",
            FillOutcome::Aborted { .. } => "aborted",
            FillOutcome::Failed => "failed",
            FillOutcome::Cancelled => "cancelled",
        }
    }
}

/// What the [`on_fill_end`](crate::StreamCacheBuilder::on_fill_end) hook is called with.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct FillEnd<'a> {
    /// The key filled.
    pub key: &'a CacheKey,
    /// How the fill ended.
    pub outcome: FillOutcome,
    /// From `fill()` being called to the end.
    pub elapsed: Duration,
}

/// The user's hook (see `StreamCacheBuilder::on_fill_end`).
pub(crate) type Hook = Arc<dyn Fn(&FillEnd<'_>) + Send + Sync>;

/// Wraps a hook so `StreamCacheBuilder` stays `Debug`.
#[derive(Clone)]
pub(crate) struct HookSlot(pub(crate) Hook);

impl fmt::Debug for HookSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Fn(&FillEnd)")
    }
}

/// Whether anyone listens to this crate's fill events (one relaxed load when nobody does).
#[inline]
pub(crate) fn traced() -> bool {
    tracing::enabled!(target: "stream_cache", tracing::Level::WARN)
}

/// One fill's end, reported once (see the module doc).
pub(crate) struct FillTracker {
    counters: Arc<Counters>,
    key: CacheKey,
    hook: Option<Hook>,
    #[cfg(feature = "metrics")]
    metrics: Option<Arc<crate::meter::Metrics>>,
    /// When the fill started, if anyone wants its duration.
    started: Option<Instant>,
    ended: bool,
}

impl FillTracker {
    pub(crate) fn start(
        counters: Arc<Counters>,
        key: CacheKey,
        hook: Option<Hook>,
        #[cfg(feature = "metrics")] metrics: Option<Arc<crate::meter::Metrics>>,
    ) -> Self {
        counters.in_flight(true);
        let traced = traced();
        #[cfg(feature = "metrics")]
        let timed = traced || hook.is_some() || metrics.is_some();
        #[cfg(not(feature = "metrics"))]
        let timed = traced || hook.is_some();
        if traced {
            tracing::debug!(target: "stream_cache", key = ?key, "fill started");
        }
        FillTracker {
            counters,
            key,
            hook,
            #[cfg(feature = "metrics")]
            metrics,
            started: timed.then(Instant::now),
            ended: false,
        }
    }

    /// The span the pump runs in (disabled, and free, when nobody listens).
    pub(crate) fn span(&self) -> tracing::Span {
        tracing::debug_span!(target: "stream_cache", "stream_cache.fill", key = ?self.key)
    }

    pub(crate) fn end(mut self, outcome: FillOutcome) {
        self.report(outcome);
    }

    fn report(&mut self, outcome: FillOutcome) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        self.counters.in_flight(false);
        let Some(started) = self.started else {
            return;
        };
        let elapsed = started.elapsed();
        #[cfg(feature = "metrics")]
        if let Some(metrics) = &self.metrics {
            metrics.record_fill(outcome, elapsed);
        }
        if traced() {
            let elapsed_ms = elapsed.as_secs_f64() * 1e3;
            match outcome {
                FillOutcome::Aborted { kind, bytes } => tracing::warn!(
                    target: "stream_cache", key = ?self.key, outcome = outcome.name(),
                    cause = ?kind, bytes, elapsed_ms, "fill ended"
                ),
                FillOutcome::Completed { bytes } => tracing::debug!(
                    target: "stream_cache", key = ?self.key, outcome = outcome.name(),
                    bytes, elapsed_ms, "fill ended"
                ),
                _ => tracing::debug!(
                    target: "stream_cache", key = ?self.key, outcome = outcome.name(),
                    elapsed_ms, "fill ended"
                ),
            }
        }
        if let Some(hook) = &self.hook {
            hook(&FillEnd {
                key: &self.key,
                outcome,
                elapsed,
            });
        }
    }
}

impl Drop for FillTracker {
    fn drop(&mut self) {
        self.report(FillOutcome::Cancelled);
    }
}
