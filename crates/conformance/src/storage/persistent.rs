//! Cases for freshness and persistence (issue 15): an expired object is a miss; a backend that
//! declares `persistent` is reopened on the same place (`Settings::reopen`) and must keep
//! complete objects byte-exact, drop partial ones, keep purges, keep its capacity and keep
//! expired objects out. This is what reads `Capabilities::persistent`. With a damage hook
//! (`Settings::damage`), a body damaged behind the backend's back is never served as another
//! complete body (the checksum is verified).

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use stream_cache::{CacheKey, ObjectMeta, StorageUsage};

use super::check::{self, pattern};
use super::{Ctx, Need};
use crate::report::CaseResult;

const HOUR: Duration = Duration::from_secs(3600);

/// An object whose expiry has passed is a miss; one an hour from expiring is a hit that carries
/// its expiry.
pub async fn expired_object_is_a_miss(ctx: Ctx) -> CaseResult {
    ctx.require(Need::Expiry)?;
    let past = SystemTime::now() - HOUR;
    let stale = CacheKey::from("expired");
    check::store(
        &ctx,
        &stale,
        ObjectMeta::default().with_expiry(past),
        b"old",
    )
    .await?;
    check::expect_miss(&ctx, "lookup of an expired object", &stale).await?;
    check::expect_miss(&ctx, "a second lookup of an expired object", &stale).await?;
    let fresh = CacheKey::from("fresh");
    let meta = ObjectMeta::default().with_ttl(HOUR);
    check::store(&ctx, &fresh, meta.clone(), b"new").await?;
    let hit = check::expect_hit(&ctx, "lookup of a fresh object", &fresh).await?;
    ctx.ensure(
        hit.meta
            .expires_at
            .zip(meta.expires_at)
            .is_some_and(|(got, set)| {
                got.duration_since(set)
                    .unwrap_or_else(|e| e.duration())
                    .as_millis()
                    < 1000
            }),
        "the stored expiry back from lookup (to the second)",
        format!("{:?}", hit.meta.expires_at),
    )?;
    check::expect_stored(&ctx, "the fresh object", &fresh, b"new").await
}

/// Complete objects survive a reopen byte-exact, with their meta; a write still in progress at
/// the "restart" does not (neither partial nor complete).
pub async fn persistent_complete_objects_survive(ctx: Ctx) -> CaseResult {
    ctx.require(Need::Persistent)?;
    let big = pattern(ctx.settings().large_body.min(200 * 1024), 21);
    let objects = [
        (
            CacheKey::from("small"),
            ObjectMeta::new("text/plain"),
            b"hello".to_vec(),
        ),
        (CacheKey::from("empty"), ObjectMeta::new("e"), Vec::new()),
        (
            CacheKey::from("big"),
            ObjectMeta::new("b").with_len(big.len() as u64),
            big,
        ),
    ];
    for (key, meta, body) in &objects {
        check::store(&ctx, key, meta.clone(), body).await?;
    }
    let partial = CacheKey::from("partial");
    let mut writer = check::begin(&ctx, "begin_write", &partial, ObjectMeta::default()).await?;
    check::write(
        &ctx,
        "half a body",
        &mut *writer,
        Bytes::from_static(b"half"),
    )
    .await?;

    let (reopened, old) = ctx.reopen().await?;
    for (key, meta, body) in &objects {
        let hit = check::expect_hit(&reopened, "lookup after the reopen", key).await?;
        reopened.ensure(
            hit.meta.user == meta.user && hit.meta.expected_len == meta.expected_len,
            format!("{key:?}: its meta after the reopen"),
            format!("{:?}", hit.meta),
        )?;
        check::expect_stored(&reopened, "a complete object after the reopen", key, body).await?;
    }
    check::expect_miss(&reopened, "a write in progress at the reopen", &partial).await?;
    drop(writer);
    drop(old);
    check::expect_miss(
        &reopened,
        "the partial write after its writer went",
        &partial,
    )
    .await
}

/// A purge is final across a reopen.
pub async fn persistent_purge_is_final(ctx: Ctx) -> CaseResult {
    ctx.require(Need::Persistent)?;
    let key = CacheKey::from("purged");
    check::store(&ctx, &key, ObjectMeta::default(), b"gone").await?;
    let removed = ctx.step("purge", ctx.storage().purge(&key)).await?;
    ctx.ensure(
        matches!(removed, Ok(true)),
        "purge of a stored object to return Ok(true)",
        format!("{removed:?}"),
    )?;
    let (reopened, old) = ctx.reopen().await?;
    drop(old);
    check::expect_miss(&reopened, "a purged object after the reopen", &key).await
}

/// The used bytes a backend reports stay within its capacity before and after a reopen (for
/// backends that report a capacity through `Storage::usage`).
pub async fn persistent_capacity_holds(ctx: Ctx) -> CaseResult {
    ctx.require(Need::Persistent)?;
    let Some(StorageUsage {
        capacity_bytes: Some(capacity),
        ..
    }) = ctx.storage().usage()
    else {
        return Err(ctx.skip("the backend reports no capacity (Storage::usage)"));
    };
    // Enough objects to pass the capacity twice, if that is affordable.
    let size = (capacity / 8).clamp(1, 256 * 1024) as usize;
    let count = ((2 * capacity) / size as u64).min(64);
    let within = |ctx: &Ctx, what: &str| {
        let used = ctx.storage().usage().map(|usage| usage.used_bytes);
        ctx.ensure(
            used.is_some_and(|used| used <= capacity),
            format!("{what}: used bytes within the capacity of {capacity}"),
            format!("{used:?}"),
        )
    };
    for i in 0..count {
        let key = CacheKey::from(format!("fill-{i}"));
        check::store(&ctx, &key, ObjectMeta::default(), &pattern(size, i as u8)).await?;
        within(&ctx, "after each store")?;
    }
    let (reopened, old) = ctx.reopen().await?;
    drop(old);
    within(&reopened, "after the reopen")?;
    let last = CacheKey::from(format!("fill-{}", count - 1));
    check::expect_stored(
        &reopened,
        "the newest object after the reopen",
        &last,
        &pattern(size, (count - 1) as u8),
    )
    .await
}

/// Objects that expired are misses after a reopen; fresh ones are hits.
pub async fn persistent_expired_objects_are_misses(ctx: Ctx) -> CaseResult {
    ctx.require(Need::Persistent)?;
    ctx.require(Need::Expiry)?;
    let stale = CacheKey::from("stale");
    let fresh = CacheKey::from("fresh");
    let past = SystemTime::now() - HOUR;
    check::store(
        &ctx,
        &stale,
        ObjectMeta::default().with_expiry(past),
        b"old",
    )
    .await?;
    check::store(&ctx, &fresh, ObjectMeta::default().with_ttl(HOUR), b"new").await?;
    let (reopened, old) = ctx.reopen().await?;
    drop(old);
    check::expect_miss(&reopened, "an expired object after the reopen", &stale).await?;
    check::expect_stored(&reopened, "a fresh object after the reopen", &fresh, b"new").await
}

/// A body damaged behind the backend's back (`Settings::damage`) is served byte-exact or not at
/// all: a miss, or an error after a prefix of the real body, never other bytes. A backend that
/// stores checksums but does not verify them fails here, and so does one that verifies only at
/// the end, after serving damaged bytes (a client resuming a download from the bytes it got,
/// as HTTP ranges do, would keep them).
pub async fn corrupted_body_is_not_served(ctx: Ctx) -> CaseResult {
    let body = pattern(200 * 1024, 17);
    let key = CacheKey::from("damaged");
    check::store(&ctx, &key, ObjectMeta::default(), &body).await?;
    ctx.damage().await?;
    let Some(mut hit) = check::lookup(&ctx, "lookup of a damaged object", &key).await? else {
        return Ok(());
    };
    let drained = check::drain(&ctx, "the damaged object", &mut *hit.body).await?;
    check::check_never_truncated(&ctx, "the damaged object", &drained, &body)
}
