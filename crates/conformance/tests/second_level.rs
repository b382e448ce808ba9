//! The second-level suite passes `MemorySecondLevel` (on a paused clock and on a real one) and
//! fails each of a set of deliberately broken stores, naming the case that catches the bug:
//! proof the suite has teeth. (`coalesce-redis` runs the same suite against a real Redis.)

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use conformance::second_level::{CASES, L2Service, MemoryL2Service, Settings, Suite};
use ttl_lru::second_level::{
    Invalidated, L1Sink, L2Entry, L2Error, MemorySecondLevel, SecondLevel, Version,
};

#[tokio::test(start_paused = true)]
async fn memory_store_passes_on_a_paused_clock() {
    let report = Suite::new(|| async { MemoryL2Service::new() }).run().await;
    report.assert_passed();
    assert!(report.skipped().is_empty(), "{report}");
    assert_eq!(report.passed().len(), CASES.len());
}

#[tokio::test]
async fn memory_store_passes_on_the_real_clock() {
    let mut settings = Settings::default();
    settings.short_ttl = Duration::from_millis(20);
    Suite::new(|| async { MemoryL2Service::new() })
        .settings(settings)
        .run()
        .await
        .assert_passed();
}

/// One realistic bug at a time.
#[derive(Debug, Clone, Copy, Default)]
struct Bugs {
    /// `set_if_version` is a plain SET: no fence.
    unfenced_write: bool,
    /// `invalidate` deletes but does not change the version.
    invalidate_keeps_version: bool,
    /// `get` reports the stored ttl, not the remaining one, plus a second.
    ttl_too_long: bool,
    /// `invalidate` never tells the sinks.
    silent_backplane: bool,
    /// While down, calls wait forever.
    hangs_when_down: bool,
    /// A ttl of zero is stored without expiry.
    accepts_zero_ttl: bool,
    /// Keys are truncated at the first NUL byte (C strings).
    truncates_keys: bool,
    /// `invalidate_all` only tells the sinks: values and versions survive it.
    shallow_invalidate_all: bool,
    /// `set_if_version` reads the version, yields, then stores: not atomic with `invalidate`.
    check_then_set: bool,
    /// `set_if_version_absent` is the default (`set_if_version`): a cached error replaces a
    /// value stored at the same version.
    error_replaces_value: bool,
}

struct Broken {
    bugs: Bugs,
    inner: MemorySecondLevel,
    down: Arc<std::sync::atomic::AtomicBool>,
}

impl Broken {
    fn key<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        if self.bugs.truncates_keys {
            let end = key.iter().position(|&b| b == 0).unwrap_or(key.len());
            return &key[..end];
        }
        key
    }

    async fn gate(&self) -> Result<(), L2Error> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            if self.bugs.hangs_when_down {
                std::future::pending::<()>().await;
            }
            return Err(L2Error::TimedOut(Duration::from_millis(1)));
        }
        Ok(())
    }

    fn ttl(&self, ttl: Duration) -> Duration {
        if self.bugs.accepts_zero_ttl && ttl < Duration::from_millis(1) {
            return Duration::from_secs(3600);
        }
        ttl
    }
}

#[async_trait]
impl SecondLevel for Broken {
    async fn get(&self, key: &[u8]) -> Result<Option<L2Entry>, L2Error> {
        self.gate().await?;
        let mut got = self.inner.get(self.key(key)).await?;
        if self.bugs.ttl_too_long
            && let Some(entry) = got.as_mut()
        {
            entry.ttl = entry.ttl.map(|t| t + Duration::from_secs(1));
        }
        Ok(got)
    }
    async fn set(&self, key: &[u8], value: &[u8], ttl: Duration) -> Result<(), L2Error> {
        self.gate().await?;
        self.inner.set(self.key(key), value, self.ttl(ttl)).await
    }
    async fn delete(&self, key: &[u8]) -> Result<(), L2Error> {
        self.gate().await?;
        self.inner.delete(self.key(key)).await
    }
    async fn version(&self, key: &[u8]) -> Result<Version, L2Error> {
        self.gate().await?;
        if self.bugs.invalidate_keeps_version {
            return Ok(Version(0));
        }
        self.inner.version(self.key(key)).await
    }
    async fn set_if_version(
        &self,
        key: &[u8],
        version: Version,
        value: &[u8],
        ttl: Duration,
    ) -> Result<bool, L2Error> {
        self.gate().await?;
        if self.bugs.check_then_set {
            let current = self.inner.version(self.key(key)).await?;
            tokio::task::yield_now().await;
            if current != version {
                return Ok(false);
            }
            self.inner.set(self.key(key), value, self.ttl(ttl)).await?;
            return Ok(true);
        }
        if self.bugs.unfenced_write || self.bugs.invalidate_keeps_version {
            self.inner.set(self.key(key), value, self.ttl(ttl)).await?;
            return Ok(true);
        }
        self.inner
            .set_if_version(self.key(key), version, value, self.ttl(ttl))
            .await
    }
    async fn set_if_version_absent(
        &self,
        key: &[u8],
        version: Version,
        value: &[u8],
        ttl: Duration,
    ) -> Result<bool, L2Error> {
        if self.bugs.error_replaces_value
            || self.bugs.check_then_set
            || self.bugs.unfenced_write
            || self.bugs.invalidate_keeps_version
        {
            return self.set_if_version(key, version, value, ttl).await;
        }
        self.gate().await?;
        self.inner
            .set_if_version_absent(self.key(key), version, value, self.ttl(ttl))
            .await
    }
    async fn invalidate(&self, key: &[u8]) -> Result<Invalidated, L2Error> {
        self.gate().await?;
        self.inner.invalidate(self.key(key)).await
    }
    async fn invalidate_all(&self) -> Result<Invalidated, L2Error> {
        self.gate().await?;
        if self.bugs.shallow_invalidate_all {
            return Ok(Invalidated::new(Version(0), 0, 0));
        }
        self.inner.invalidate_all().await
    }
    fn attach(&self, sink: Weak<dyn L1Sink>) {
        if !self.bugs.silent_backplane {
            self.inner.attach(sink);
        }
    }
}

struct BrokenService {
    bugs: Bugs,
    inner: MemorySecondLevel,
    down: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait]
impl L2Service for BrokenService {
    fn handle(&self) -> Arc<dyn SecondLevel> {
        Arc::new(Broken {
            bugs: self.bugs,
            inner: self.inner.clone(),
            down: self.down.clone(),
        })
    }
    fn has_backplane(&self) -> bool {
        true
    }
    async fn take_down(&self) -> bool {
        self.down.store(true, std::sync::atomic::Ordering::SeqCst);
        true
    }
}

async fn failed_cases(bugs: Bugs) -> Vec<&'static str> {
    let mut settings = Settings::default();
    settings.step_timeout = Duration::from_secs(1);
    Suite::new(move || async move {
        BrokenService {
            bugs,
            inner: MemorySecondLevel::new(),
            down: Arc::default(),
        }
    })
    .settings(settings)
    .run()
    .await
    .failed()
}

#[tokio::test(start_paused = true)]
async fn each_broken_store_fails_the_case_that_catches_it() {
    assert_eq!(
        failed_cases(Bugs::default()).await,
        Vec::<&str>::new(),
        "the control (no bug) passes"
    );
    let cases: [(Bugs, &[&str]); 10] = [
        (
            Bugs {
                error_replaces_value: true,
                ..Bugs::default()
            },
            &["a_write_if_absent_never_replaces_a_value"],
        ),
        (
            Bugs {
                shallow_invalidate_all: true,
                ..Bugs::default()
            },
            &["invalidate_all_drops_every_value_and_fences_every_version"],
        ),
        (
            Bugs {
                check_then_set: true,
                ..Bugs::default()
            },
            &["fenced_writes_racing_an_invalidation_never_outlive_it"],
        ),
        (
            Bugs {
                unfenced_write: true,
                ..Bugs::default()
            },
            &[
                "write_fenced_by_an_invalidation_is_refused",
                "concurrent_fenced_writes_after_an_invalidation_all_fail",
            ],
        ),
        (
            Bugs {
                invalidate_keeps_version: true,
                ..Bugs::default()
            },
            &[
                "invalidate_changes_the_version_and_deletes",
                "write_fenced_by_an_invalidation_is_refused",
                "concurrent_fenced_writes_after_an_invalidation_all_fail",
                "versions_never_repeat",
            ],
        ),
        (
            Bugs {
                ttl_too_long: true,
                ..Bugs::default()
            },
            &["remaining_ttl_is_never_longer_than_stored"],
        ),
        (
            Bugs {
                silent_backplane: true,
                ..Bugs::default()
            },
            &[
                "invalidation_reaches_the_other_handles_sinks",
                "invalidate_all_reaches_the_other_handles_sinks",
            ],
        ),
        (
            Bugs {
                hangs_when_down: true,
                ..Bugs::default()
            },
            &["store_down_answers_errors_promptly"],
        ),
        (
            Bugs {
                accepts_zero_ttl: true,
                ..Bugs::default()
            },
            &["invalid_ttl_is_a_typed_error"],
        ),
        (
            Bugs {
                truncates_keys: true,
                ..Bugs::default()
            },
            &["values_of_any_bytes_round_trip"],
        ),
    ];
    for (bugs, expected) in cases {
        let failed = failed_cases(bugs).await;
        for case in expected {
            assert!(
                failed.contains(case),
                "{bugs:?}: {case} should fail; failed: {failed:?}"
            );
        }
    }
}
