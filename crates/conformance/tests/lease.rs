//! The lease suite passes `MemoryLease` (on a paused clock and on a real one) and fails each of a
//! set of deliberately broken leases, naming the case that catches the bug: proof the suite has
//! teeth. (`coalesce-redis` runs the same suite against a real Redis.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use coalesce::lease::check_ttl;
use coalesce::{Acquire, FillLease, LeaseError, LeaseToken, MemoryLease};
use conformance::lease::{LeaseService, MemoryService, Settings, Suite};
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn memory_lease_passes_on_a_paused_clock() {
    let report = Suite::new(|| async { MemoryService::new(Arc::new(MemoryLease::new())) })
        .run()
        .await;
    report.assert_passed();
    assert!(report.skipped().is_empty(), "{report}");
    assert_eq!(report.passed().len(), conformance::lease::CASES.len());
}

#[tokio::test]
async fn memory_lease_passes_on_the_real_clock() {
    let mut settings = Settings::default();
    settings.short_ttl = Duration::from_millis(20);
    Suite::new(|| async { MemoryService::new(Arc::new(MemoryLease::new())) })
        .settings(settings)
        .run()
        .await
        .assert_passed();
}

/// One realistic bug at a time.
#[derive(Debug, Clone, Copy, Default)]
struct Bugs {
    /// `release` is a plain `DEL`: anyone's token frees the key.
    release_ignores_owner: bool,
    /// `renew` extends whoever holds the key.
    renew_ignores_owner: bool,
    /// Leases never expire.
    no_expiry: bool,
    /// `try_acquire` is GET, then (after a round trip) SET: not atomic.
    check_then_set: bool,
    /// While down, calls wait forever instead of failing.
    hangs_when_down: bool,
    /// While down, `try_acquire` pretends to grant.
    grants_when_down: bool,
    /// A ttl of zero is accepted (and the lease expires at once).
    accepts_zero_ttl: bool,
    /// Tokens are the key's name: not unique per acquisition.
    token_is_key: bool,
}

#[derive(Default)]
struct Toy {
    bugs: Bugs,
    held: Mutex<HashMap<String, (LeaseToken, Option<Instant>)>>,
    next: AtomicU64,
    down: AtomicBool,
}

impl Toy {
    fn live(&self, key: &str) -> Option<LeaseToken> {
        let held = self.held.lock().unwrap();
        let (token, expires) = held.get(key)?;
        match expires {
            Some(at) if Instant::now() >= *at && !self.bugs.no_expiry => None,
            _ => Some(token.clone()),
        }
    }

    async fn when_down(&self) -> Result<(), LeaseError> {
        if self.down.load(SeqCst) {
            if self.bugs.hangs_when_down {
                std::future::pending::<()>().await;
            }
            return Err(LeaseError::unavailable("down"));
        }
        Ok(())
    }
}

#[async_trait]
impl FillLease for Toy {
    async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Acquire, LeaseError> {
        if !self.bugs.accepts_zero_ttl {
            check_ttl(ttl)?;
        }
        if self.down.load(SeqCst) && self.bugs.grants_when_down {
            return Ok(Acquire::Acquired(LeaseToken::new("pretend")));
        }
        self.when_down().await?;
        if self.live(key).is_some() {
            return Ok(Acquire::HeldElsewhere);
        }
        if self.bugs.check_then_set {
            tokio::task::yield_now().await; // the round trip between GET and SET
        }
        let token = if self.bugs.token_is_key {
            LeaseToken::new(key)
        } else {
            LeaseToken::new(format!("toy-{}", self.next.fetch_add(1, SeqCst)))
        };
        self.held
            .lock()
            .unwrap()
            .insert(key.to_owned(), (token.clone(), Some(Instant::now() + ttl)));
        Ok(Acquire::Acquired(token))
    }

    async fn release(&self, key: &str, token: &LeaseToken) -> Result<bool, LeaseError> {
        self.when_down().await?;
        let Some(live) = self.live(key) else {
            return Ok(false);
        };
        if live != *token && !self.bugs.release_ignores_owner {
            return Ok(false);
        }
        Ok(self.held.lock().unwrap().remove(key).is_some())
    }

    async fn renew(
        &self,
        key: &str,
        token: &LeaseToken,
        ttl: Duration,
    ) -> Result<bool, LeaseError> {
        check_ttl(ttl)?;
        self.when_down().await?;
        let Some(live) = self.live(key) else {
            return Ok(false);
        };
        if live != *token && !self.bugs.renew_ignores_owner {
            return Ok(false);
        }
        let mut held = self.held.lock().unwrap();
        if let Some(entry) = held.get_mut(key) {
            entry.1 = Some(Instant::now() + ttl);
        }
        Ok(true)
    }
}

struct ToyService(Arc<Toy>);

#[async_trait]
impl LeaseService for ToyService {
    fn lease(&self) -> Arc<dyn FillLease> {
        self.0.clone()
    }
    async fn take_down(&self) -> bool {
        self.0.down.store(true, SeqCst);
        true
    }
}

async fn run_with(bugs: Bugs) -> conformance::Report {
    let mut settings = Settings::default();
    settings.step_timeout = Duration::from_secs(1);
    Suite::new(move || async move {
        ToyService(Arc::new(Toy {
            bugs,
            ..Toy::default()
        }))
    })
    .settings(settings)
    .run()
    .await
}

#[tokio::test(start_paused = true)]
async fn the_toy_lease_without_bugs_passes() {
    // So every failure below is the bug's doing.
    run_with(Bugs::default()).await.assert_passed();
}

async fn assert_caught(bugs: Bugs, by: &[&str]) {
    let report = run_with(bugs).await;
    let failed = report.failed();
    for case in by {
        assert!(
            failed.contains(case),
            "{bugs:?} should fail {case}; the report:\n{report}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_release_that_ignores_the_owner_is_caught() {
    let bugs = Bugs {
        release_ignores_owner: true,
        ..Bugs::default()
    };
    assert_caught(
        bugs,
        &[
            "stranger_release_is_a_noop",
            "expired_owner_cannot_release_the_successor",
        ],
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_renew_that_ignores_the_owner_is_caught() {
    let bugs = Bugs {
        renew_ignores_owner: true,
        ..Bugs::default()
    };
    assert_caught(
        bugs,
        &[
            "stranger_renew_is_a_noop",
            "expired_owner_cannot_renew_the_successor",
        ],
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn leases_that_never_expire_are_caught() {
    let bugs = Bugs {
        no_expiry: true,
        ..Bugs::default()
    };
    assert_caught(
        bugs,
        &[
            "lease_expires_after_its_ttl",
            "expired_owner_cannot_release_the_successor",
            "renew_after_expiry_is_refused",
        ],
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_check_then_set_acquire_is_caught() {
    let bugs = Bugs {
        check_then_set: true,
        ..Bugs::default()
    };
    assert_caught(bugs, &["concurrent_acquires_grant_exactly_one"]).await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_that_hangs_when_down_is_caught() {
    let bugs = Bugs {
        hangs_when_down: true,
        ..Bugs::default()
    };
    assert_caught(bugs, &["service_down_answers_errors_promptly"]).await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_that_pretends_to_grant_when_down_is_caught() {
    let bugs = Bugs {
        grants_when_down: true,
        ..Bugs::default()
    };
    assert_caught(bugs, &["service_down_answers_errors_promptly"]).await;
}

#[tokio::test(start_paused = true)]
async fn a_zero_ttl_accepted_is_caught() {
    let bugs = Bugs {
        accepts_zero_ttl: true,
        ..Bugs::default()
    };
    assert_caught(bugs, &["invalid_ttl_is_a_typed_error"]).await;
}

#[tokio::test(start_paused = true)]
async fn tokens_reused_across_acquisitions_are_caught() {
    let bugs = Bugs {
        token_is_key: true,
        ..Bugs::default()
    };
    assert_caught(bugs, &["tokens_are_unique"]).await;
}

/// A lease without renew: the renew cases are skipped, never counted as passed.
struct NoRenew(MemoryLease);

#[async_trait]
impl FillLease for NoRenew {
    async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Acquire, LeaseError> {
        self.0.try_acquire(key, ttl).await
    }
    async fn release(&self, key: &str, token: &LeaseToken) -> Result<bool, LeaseError> {
        self.0.release(key, token).await
    }
}

struct NoRenewService(Arc<NoRenew>);

#[async_trait]
impl LeaseService for NoRenewService {
    fn lease(&self) -> Arc<dyn FillLease> {
        self.0.clone()
    }
    async fn take_down(&self) -> bool {
        false
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_without_renew_or_outage_switch_skips_those_cases() {
    let report = Suite::new(|| async { NoRenewService(Arc::new(NoRenew(MemoryLease::new()))) })
        .run()
        .await;
    report.assert_passed();
    let mut skipped = report.skipped();
    skipped.sort_unstable();
    assert_eq!(
        skipped,
        [
            "expired_owner_cannot_renew_the_successor",
            "renew_after_expiry_is_refused",
            "renew_extends_the_lease",
            "service_down_answers_errors_promptly",
            "stranger_renew_is_a_noop",
        ]
    );
}
