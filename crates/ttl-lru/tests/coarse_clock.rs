//! Issue 14: `CoarseClock::default()` starts the ticker, like `CoarseClock::new()`. A test file
//! of its own, so that it runs in a process where nothing else has started the ticker (the
//! ticker is process-wide: any cache built with the default clock starts it).
//!
//! No assertion on elapsed time: the test waits, in 1 ms sleeps, for the clock to move at all
//! and for a 1 ms entry to expire, and fails only if neither happens within a minute (the old
//! `default()` never started the ticker, so its time never moved).

use std::time::Duration;

use ttl_lru::{Cache, Clock, CoarseClock};

/// Sleeps 1 ms at a time until `done` holds; false if it never does within a minute.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    (0..60_000).any(|_| {
        std::thread::sleep(Duration::from_millis(1));
        done()
    })
}

#[test]
fn a_default_coarse_clock_ticks_and_its_cache_expires_entries() {
    let clock = CoarseClock::default();
    let start = clock.now_ms();
    assert!(
        eventually(|| clock.now_ms() > start),
        "the clock never moved"
    );
    let cache: Cache<u32, u32> = Cache::builder(10).clock(CoarseClock::default()).build();
    cache.insert(1, 1, Duration::from_millis(1)).unwrap();
    assert!(
        eventually(|| cache.get(&1).is_none()),
        "the entry never expired"
    );
}
