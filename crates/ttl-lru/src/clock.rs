//! Time for the cache: a cheap, injectable millisecond clock.
//!
//! Hits must not call `Instant::now()` (about 23 ns here), so the default [`CoarseClock`] reads a
//! process-wide atomic millisecond tick that one background thread (`ttl-lru-clock`, started on
//! first use) refreshes every millisecond: a hit pays one relaxed load. TTLs therefore resolve to
//! about a millisecond. Tests inject [`ManualClock`] (moved by hand) or [`TokioClock`] (follows
//! tokio's clock, so `#[tokio::test(start_paused = true)]` and `tokio::time::advance` drive TTLs).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A monotonic millisecond clock. `now_ms` is called on every cache operation, hits included, so it
/// must be cheap (no syscall); it may be coarse. Values only need to be comparable with each other.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since an arbitrary, fixed origin. Must never go backwards.
    fn now_ms(&self) -> u64;
}

/// Converts a duration to whole milliseconds, rounding up (so a 1 µs TTL is not 0) and saturating.
pub(crate) fn duration_to_ms(d: Duration) -> u64 {
    let ms = d.as_millis();
    let ms = if !d.subsec_nanos().is_multiple_of(1_000_000) {
        ms + 1
    } else {
        ms
    };
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// The default clock: a shared millisecond tick refreshed by one background thread.
///
/// Reading it is a single relaxed atomic load. The first `CoarseClock` created in the process
/// (by [`new`](Self::new) or [`default`](Default::default)) starts the thread (about 1000 short
/// wake-ups a second); the thread lives as long as the process.
#[derive(Debug, Clone, Copy)]
pub struct CoarseClock {
    _private: (),
}

/// The same as [`CoarseClock::new`]: it starts the ticker. (Until issue 14 a derived `Default`
/// built the clock without starting it, so a cache given `CoarseClock::default()` never saw time
/// pass and never expired anything.)
impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(herd_loom))]
mod ticker {
    use crate::sync::Ordering;
    use crate::sync::plain::AtomicU64;
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// Milliseconds since `ORIGIN`, plus one so that 0 never means "not started".
    static TICK: AtomicU64 = AtomicU64::new(1);
    static STARTED: OnceLock<Instant> = OnceLock::new();

    pub(super) fn start() {
        STARTED.get_or_init(|| {
            let origin = Instant::now();
            let spawned = std::thread::Builder::new()
                .name("ttl-lru-clock".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(Duration::from_millis(1));
                        let ms = u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX);
                        TICK.store(ms + 1, Ordering::Relaxed);
                    }
                });
            if let Err(e) = spawned {
                // Without the thread the tick stands still and entries never expire by time;
                // say so loudly rather than fail every cache construction.
                tracing::error!("ttl-lru: could not start the clock thread: {e}");
            }
            origin
        });
    }

    #[inline]
    pub(super) fn now_ms() -> u64 {
        TICK.load(Ordering::Relaxed)
    }
}

impl CoarseClock {
    /// Returns the shared coarse clock, starting its ticker thread if this is the first use.
    pub fn new() -> Self {
        #[cfg(not(herd_loom))]
        ticker::start();
        Self { _private: () }
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now_ms(&self) -> u64 {
        #[cfg(not(herd_loom))]
        {
            ticker::now_ms()
        }
        #[cfg(herd_loom)]
        {
            1
        }
    }
}

/// A precise clock on `tokio::time::Instant`: follows a paused test runtime (`start_paused`,
/// `tokio::time::advance`). It calls `Instant::now()` on every operation, so prefer it for tests.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose origin is now (in tokio's notion of time for the current runtime, if any).
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        duration_to_ms_floor(self.origin.elapsed())
    }
}

fn duration_to_ms_floor(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A clock moved by hand, for deterministic tests and trace-driven simulators. Clones share time.
///
/// Hit-ratio simulators should advance it once per request: recency is recorded in clock
/// milliseconds, so requests that share a millisecond are indistinguishable to the eviction policy.
#[derive(Clone, Default)]
pub struct ManualClock {
    now: Arc<crate::sync::plain::AtomicU64>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now_ms", &self.now_ms())
            .finish()
    }
}

impl ManualClock {
    /// A clock at millisecond 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves time forward by `d` (rounded up to whole milliseconds), saturating: time never
    /// wraps around and goes backwards.
    pub fn advance(&self, d: Duration) {
        self.advance_ms(duration_to_ms(d));
    }

    /// Moves time forward by `ms` milliseconds, saturating.
    pub fn advance_ms(&self, ms: u64) {
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        // `fetch_update` with a closure that always returns `Some` cannot fail.
        let _ = self
            .now
            .fetch_update(relaxed, relaxed, |now| Some(now.saturating_add(ms)));
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_ms(&self) -> u64 {
        self.now.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The clock a cache holds: the coarse clock without dynamic dispatch, or any injected clock.
#[derive(Clone)]
pub(crate) enum ClockSource {
    Coarse(CoarseClock),
    Custom(Arc<dyn Clock>),
}

impl ClockSource {
    #[inline]
    pub(crate) fn now_ms(&self) -> u64 {
        match self {
            ClockSource::Coarse(c) => c.now_ms(),
            ClockSource::Custom(c) => c.now_ms(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_rounds_up_to_whole_milliseconds() {
        assert_eq!(duration_to_ms(Duration::ZERO), 0);
        assert_eq!(duration_to_ms(Duration::from_micros(1)), 1);
        assert_eq!(duration_to_ms(Duration::from_millis(5)), 5);
        assert_eq!(duration_to_ms(Duration::MAX), u64::MAX);
    }

    #[test]
    fn manual_clock_clones_share_time() {
        let a = ManualClock::new();
        let b = a.clone();
        a.advance(Duration::from_millis(7));
        assert_eq!(b.now_ms(), 7);
    }
}
