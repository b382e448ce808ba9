//! Cases for write fences (issue 15): a purge is final against a write whose fence predates it,
//! and of two writes the one with the newer fence wins, whichever became visible first; an
//! invalidation is as final as a purge for later lookups and earlier writes, and never truncates
//! a body for the readers it leaves reading.

use bytes::Bytes;
use stream_cache::{AbortKind, CacheKey, ObjectMeta, WriteState};

use super::check;
use super::{Ctx, Need};
use crate::report::CaseResult;

/// A fill takes its fence, the key is purged (nothing to remove yet), then the fill begins its
/// write with that fence: the write is born `Aborted(Purged)`, its readers see `Purged`, and the
/// key stays empty. A write fenced after the purge is stored normally.
pub async fn purge_is_final_for_a_fenced_write(ctx: Ctx) -> CaseResult {
    let storage = ctx.storage();
    let key = CacheKey::from("fenced");
    let fence = storage.fence(&key);
    ctx.step("purge of a key with no object", storage.purge(&key))
        .await?
        .map_err(|error| ctx.failure("purge to succeed", format!("{error:?}")))?;
    let begun = ctx
        .step(
            "begin_write_fenced with a fence older than the purge",
            storage.begin_write_fenced(&key, ObjectMeta::default(), fence),
        )
        .await?;
    let mut writer = match begun {
        // Refusing the write outright also keeps the purge final.
        Err(_) => return check::expect_miss(&ctx, "lookup after the fenced write", &key).await,
        Ok(writer) => writer,
    };
    ctx.ensure(
        matches!(writer.state(), WriteState::Aborted(ref r) if r.kind() == AbortKind::Purged),
        "a write fenced out by a purge to be born Aborted(Purged)",
        format!("{:?}", writer.state()),
    )?;
    if let Some(source) = writer.source() {
        let mut reader = source.open();
        check::expect_aborted(
            &ctx,
            "a reader of the fenced-out write",
            &mut *reader,
            b"",
            AbortKind::Purged,
        )
        .await?;
    }
    let _ = ctx
        .step(
            "write to the fenced-out writer",
            writer.write(Bytes::from_static(b"old")),
        )
        .await?;
    let finished = ctx
        .step("finish of the fenced-out writer", writer.finish())
        .await?;
    ctx.ensure(
        finished.is_err(),
        "finish of a fenced-out write to fail",
        format!("{finished:?}"),
    )?;
    check::expect_miss(&ctx, "lookup after the fenced-out write finished", &key).await?;
    check::store(&ctx, &key, ObjectMeta::default(), b"new").await?;
    check::expect_stored(&ctx, "a write started after the purge", &key, b"new").await
}

/// Two fences are taken in order; the newer write becomes visible and completes first, then the
/// older one begins, writes and finishes: the key's object stays the newer body.
pub async fn newer_write_wins(ctx: Ctx) -> CaseResult {
    let storage = ctx.storage();
    let key = CacheKey::from("ordered");
    let older = storage.fence(&key);
    let newer = storage.fence(&key);
    let mut writer = ctx
        .step(
            "begin_write_fenced (newer fence)",
            storage.begin_write_fenced(&key, ObjectMeta::default(), newer),
        )
        .await?
        .map_err(|error| ctx.failure("begin_write_fenced to succeed", format!("{error:?}")))?;
    check::write(
        &ctx,
        "newer body",
        &mut *writer,
        Bytes::from_static(b"newer"),
    )
    .await?;
    check::finish(&ctx, "finish (newer)", writer, 5).await?;
    let begun = ctx
        .step(
            "begin_write_fenced (older fence, after the newer write finished)",
            storage.begin_write_fenced(&key, ObjectMeta::default(), older),
        )
        .await?;
    if let Ok(mut stale) = begun {
        let _ = ctx
            .step("older body", stale.write(Bytes::from_static(b"older")))
            .await?;
        let _ = ctx.step("finish (older)", stale.finish()).await?;
    }
    check::expect_stored(&ctx, "the key after both writes", &key, b"newer").await
}

/// `invalidate` of a key while its write is in progress, with a reader part-way and a fill's
/// fence taken before it: lookups miss at once and after the write ends; the reader gets the
/// whole body and a clean end, or an error, never a clean end short of the body; the write
/// fenced before the invalidation never becomes visible; a write begun after it is stored.
/// (Detaching the write in progress, as `MemStorage` and `DiskStorage` do, and aborting it, as
/// the trait's default `invalidate` does by purging, are both correct.)
///
/// Without partial reads there is no reader to check: the rest holds for every backend.
pub async fn invalidate_is_final_for_earlier_writes(ctx: Ctx) -> CaseResult {
    let storage = ctx.storage();
    let key = CacheKey::from("invalidated");
    let body = check::pattern(3 * 1000, 21);
    let pieces = check::chunks(&body, 1000);
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    check::write(&ctx, "the first piece", &mut *writer, pieces[0].clone()).await?;
    let mut hit = check::lookup(&ctx, "lookup of the write in progress", &key).await?;
    if hit.is_none() && ctx.has(Need::PartialReads) {
        return Err(ctx.failure(
            "a write in progress to be found (partial_reads)",
            "a miss".to_owned(),
        ));
    }
    let fence = storage.fence(&key);
    let invalidated = ctx
        .step(
            "invalidate of the in-progress object",
            storage.invalidate(&key),
        )
        .await?;
    ctx.ensure(
        matches!(invalidated, Ok(true)),
        "invalidate of an in-progress object to return Ok(true)",
        format!("{invalidated:?}"),
    )?;
    check::expect_miss(&ctx, "lookup after the invalidation", &key).await?;
    // The rest of the body: taken (a detached write) or refused (an aborted one).
    for piece in &pieces[1..] {
        let wrote = ctx
            .step(
                "writing after the invalidation",
                writer.write(piece.clone()),
            )
            .await?;
        if wrote.is_err() {
            break;
        }
    }
    let _ = ctx
        .step("finish after the invalidation", writer.finish())
        .await?;
    if let Some(hit) = &mut hit {
        let drained =
            check::drain(&ctx, "the reader of the invalidated write", &mut *hit.body).await?;
        check::check_never_truncated(&ctx, "the reader of the invalidated write", &drained, &body)?;
    }
    check::expect_miss(&ctx, "lookup once the invalidated write ended", &key).await?;
    let begun = ctx
        .step(
            "begin_write_fenced with a fence older than the invalidation",
            storage.begin_write_fenced(&key, ObjectMeta::default(), fence),
        )
        .await?;
    if let Ok(mut old) = begun {
        let _ = ctx
            .step(
                "write to the fenced-out writer",
                old.write(Bytes::from_static(b"old")),
            )
            .await?;
        let _ = ctx
            .step("finish of the fenced-out writer", old.finish())
            .await?;
    }
    check::expect_miss(
        &ctx,
        "lookup after a write fenced before the invalidation",
        &key,
    )
    .await?;
    let fresh = check::pattern(100, 22);
    check::store(&ctx, &key, ObjectMeta::default(), &fresh).await?;
    check::expect_stored(&ctx, "a write begun after the invalidation", &key, &fresh).await
}
