//! A coarse wall clock for freshness checks: one atomic load per request instead of a clock
//! read, and a manual mode so tests can expire objects without sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often the system clock mode refreshes its reading.
const TICK: Duration = Duration::from_millis(100);

/// Milliseconds since the Unix epoch, shared.
#[derive(Clone, Debug)]
pub struct Clock {
    millis: Arc<AtomicU64>,
    manual: bool,
}

fn system_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Clock {
    /// The system clock, refreshed every 100 ms by a task the proxy spawns when it serves (so a
    /// freshness decision may be up to 100 ms late).
    pub fn system() -> Self {
        Clock {
            millis: Arc::new(AtomicU64::new(system_millis())),
            manual: false,
        }
    }

    /// A clock that only moves when [`Clock::advance`] is called (for tests).
    pub fn manual(start: SystemTime) -> Self {
        let millis = start
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        Clock {
            millis: Arc::new(AtomicU64::new(u64::try_from(millis).unwrap_or(u64::MAX))),
            manual: true,
        }
    }

    /// Move a manual clock forward.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.millis.fetch_add(by, Ordering::Relaxed);
    }

    /// The current reading.
    pub fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.millis.load(Ordering::Relaxed))
    }

    /// Spawn the refresh task of a system clock (nothing for a manual one). The task ends when
    /// every `Clock` handle is dropped.
    pub(crate) fn start(&self) {
        if self.manual {
            return;
        }
        let weak = Arc::downgrade(&self.millis);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(millis) = weak.upgrade() else { return };
                millis.store(system_millis(), Ordering::Relaxed);
            }
        });
    }
}
