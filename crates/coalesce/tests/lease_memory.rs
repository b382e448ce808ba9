//! `MemoryLease` keeps the `FillLease` contract: mutual exclusion, owner-only release and
//! renew, expiry on tokio's (paused) clock, typed errors for bad input and for a service that
//! is down. (The same contract is checked generically by `conformance::lease`.)

use std::sync::Arc;
use std::time::Duration;

use coalesce::{Acquire, FillLease, LeaseError, LeaseToken, MemoryLease};

const TTL: Duration = Duration::from_secs(5);

async fn acquire(lease: &dyn FillLease, key: &str, ttl: Duration) -> LeaseToken {
    match lease.try_acquire(key, ttl).await.unwrap() {
        Acquire::Acquired(token) => token,
        Acquire::HeldElsewhere => panic!("expected to acquire {key}"),
    }
}

#[tokio::test(start_paused = true)]
async fn one_owner_at_a_time_per_key() {
    let lease = MemoryLease::new();
    let token = acquire(&lease, "a", TTL).await;
    assert_eq!(
        lease.try_acquire("a", TTL).await.unwrap(),
        Acquire::HeldElsewhere
    );
    // Other keys are independent.
    let other = acquire(&lease, "b", TTL).await;
    assert_ne!(token, other);
    assert_eq!(lease.held(), 2);
}

#[tokio::test(start_paused = true)]
async fn only_the_owner_releases() {
    let lease = MemoryLease::new();
    let token = acquire(&lease, "a", TTL).await;
    let stranger = LeaseToken::new("not-the-owner");
    assert!(!lease.release("a", &stranger).await.unwrap());
    assert_eq!(
        lease.try_acquire("a", TTL).await.unwrap(),
        Acquire::HeldElsewhere
    );
    assert!(lease.release("a", &token).await.unwrap());
    // Releasing twice is a no-op.
    assert!(!lease.release("a", &token).await.unwrap());
    acquire(&lease, "a", TTL).await;
}

#[tokio::test(start_paused = true)]
async fn an_expired_owner_cannot_release_its_successor() {
    let lease = MemoryLease::new();
    let old = acquire(&lease, "a", TTL).await;
    tokio::time::advance(TTL).await;
    let new = acquire(&lease, "a", TTL).await;
    assert!(!lease.release("a", &old).await.unwrap());
    assert!(!lease.renew("a", &old, TTL).await.unwrap());
    assert_eq!(
        lease.try_acquire("a", TTL).await.unwrap(),
        Acquire::HeldElsewhere
    );
    assert!(lease.release("a", &new).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_lease_expires_after_its_ttl_and_not_before() {
    let lease = MemoryLease::new();
    acquire(&lease, "a", TTL).await;
    tokio::time::advance(TTL - Duration::from_millis(1)).await;
    assert_eq!(
        lease.try_acquire("a", TTL).await.unwrap(),
        Acquire::HeldElsewhere
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    acquire(&lease, "a", TTL).await;
}

#[tokio::test(start_paused = true)]
async fn renew_extends_only_the_owners_lease() {
    let lease = MemoryLease::new();
    let token = acquire(&lease, "a", TTL).await;
    tokio::time::advance(TTL - Duration::from_secs(1)).await;
    assert!(lease.renew("a", &token, TTL).await.unwrap());
    assert!(!lease.renew("a", &LeaseToken::new("x"), TTL).await.unwrap());
    // Past the original expiry, still held thanks to the renewal.
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(
        lease.try_acquire("a", TTL).await.unwrap(),
        Acquire::HeldElsewhere
    );
    tokio::time::advance(TTL).await;
    acquire(&lease, "a", TTL).await;
}

#[tokio::test(start_paused = true)]
async fn bad_ttls_are_typed_errors() {
    let lease = MemoryLease::new();
    assert!(matches!(
        lease.try_acquire("a", Duration::ZERO).await,
        Err(LeaseError::InvalidTtl(_))
    ));
    assert!(matches!(
        lease.try_acquire("a", Duration::from_micros(999)).await,
        Err(LeaseError::InvalidTtl(_))
    ));
    assert!(matches!(
        lease.try_acquire("a", Duration::MAX).await,
        Err(LeaseError::InvalidTtl(_))
    ));
    let token = acquire(&lease, "a", TTL).await;
    assert!(matches!(
        lease.renew("a", &token, Duration::ZERO).await,
        Err(LeaseError::InvalidTtl(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_service_that_is_down_errs_and_changes_nothing() {
    let lease = MemoryLease::new();
    let token = acquire(&lease, "a", TTL).await;
    lease.set_available(false);
    assert!(matches!(
        lease.try_acquire("b", TTL).await,
        Err(LeaseError::Unavailable(_))
    ));
    assert!(matches!(
        lease.release("a", &token).await,
        Err(LeaseError::Unavailable(_))
    ));
    lease.set_available(true);
    assert_eq!(
        lease.try_acquire("a", TTL).await.unwrap(),
        Acquire::HeldElsewhere
    );
    acquire(&lease, "b", TTL).await;
}

#[tokio::test]
async fn usable_as_a_shared_trait_object() {
    let lease: Arc<dyn FillLease> = Arc::new(MemoryLease::new());
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let lease = Arc::clone(&lease);
            tokio::spawn(async move { lease.try_acquire("contended", TTL).await.unwrap() })
        })
        .collect();
    let mut granted = 0;
    for task in tasks {
        if matches!(task.await.unwrap(), Acquire::Acquired(_)) {
            granted += 1;
        }
    }
    assert_eq!(granted, 1);
}
