//! Fault cases: the backend under test wrapped in `Faulty`, with a write, a `finish` or the
//! stream failing part-way. Whatever fails, readers get the bytes that were stored and then an
//! error, and lookups miss: no fault may make a truncated body look complete.

use std::sync::Arc;

use stream_cache::{AbortKind, CacheKey, ObjectMeta};
use tokio::task::JoinSet;

use super::check::{self, pattern};
use super::{Ctx, Need};
use crate::faulty::{FaultPlan, Faulty};
use crate::report::CaseResult;

/// Write five 100-byte chunks through `Faulty(plan)`, with a reader attached before the first
/// byte (partial reads) and, for the checks, the failing step's expected abort `kind` and the
/// number of bytes that reach readers.
async fn faulted_write(ctx: &Ctx, plan: FaultPlan, kind: AbortKind, stored: usize) -> CaseResult {
    let faulty = ctx.with_storage(Arc::new(Faulty::new(Arc::clone(ctx.storage()), plan)));
    let body = pattern(500, 15);
    let key = CacheKey::from("faulted");
    let mut writer = check::begin(
        &faulty,
        "begin_write",
        &key,
        ObjectMeta::default().with_len(500),
    )
    .await?;
    let mut readers = JoinSet::new();
    if faulty.has(Need::PartialReads) {
        let mut early = check::expect_hit(&faulty, "lookup before the first byte", &key)
            .await?
            .body;
        let reader_ctx = faulty.clone();
        readers.spawn(async move {
            check::drain(&reader_ctx, "a reader of the faulted write", &mut *early).await
        });
    }
    let mut failed = None;
    for (i, piece) in check::chunks(&body, 100).into_iter().enumerate() {
        let result = faulty.step("writing", writer.write(piece)).await?;
        if let Err(error) = result {
            failed = Some((i, error));
            break;
        }
        tokio::task::yield_now().await;
    }
    match failed {
        Some((_, error)) => {
            ctx.ensure(
                error.reason().kind() == kind,
                format!("the faulted write to fail with Aborted({kind:?})"),
                format!("{error:?}"),
            )?;
            check::expect_finish_aborted(&faulty, "finish after the fault", writer, kind).await?;
        }
        None => {
            check::expect_finish_aborted(&faulty, "the faulted finish", writer, kind).await?;
        }
    }
    while let Some(joined) = ctx.step("the reader task", readers.join_next()).await? {
        let drained = joined
            .map_err(|error| ctx.failure("the reader task to finish", format!("{error}")))??;
        let ended_right = matches!(&drained.end, Err(stream_cache::BodyError::Aborted(reason)) if reason.kind() == kind);
        ctx.ensure(
            drained.bytes == body[..stored] && ended_right,
            format!("a reader of the faulted write: the {stored} stored bytes, then Err(Aborted({kind:?})), never a clean end"),
            format!(
                "{}, then {}",
                check::describe_bytes(&drained.bytes, &body[..stored]),
                check::describe_end(&drained.end)
            ),
        )?;
    }
    check::expect_miss(ctx, "lookup after the fault", &key).await?;
    if faulty.has(Need::PartialReads) {
        // A reader attached after the fault must not find the object either (checked above),
        // and rewriting the key works.
        check::store(ctx, &key, ObjectMeta::default(), &body).await?;
        check::expect_stored(ctx, "rewriting the key after the fault", &key, &body).await?;
    }
    Ok(())
}

/// The third write fails (`AbortReason::Storage`): readers get the first 200 bytes, then that
/// error; `finish` fails; lookups miss.
pub async fn fault_failed_write(ctx: Ctx) -> CaseResult {
    faulted_write(
        &ctx,
        FaultPlan::new().fail_write(3),
        AbortKind::Storage,
        200,
    )
    .await
}

/// Every byte is written but `finish` fails (`AbortReason::Storage`): readers get all 500 bytes
/// and then the error, not a clean end; lookups miss.
pub async fn fault_failed_finish(ctx: Ctx) -> CaseResult {
    faulted_write(
        &ctx,
        FaultPlan::new().fail_finish(1),
        AbortKind::Storage,
        500,
    )
    .await
}

/// The stream is aborted after 250 bytes (`AbortReason::Upstream`), in the middle of a chunk:
/// readers get exactly 250 bytes, then the error; lookups miss.
pub async fn fault_stream_aborted_partway(ctx: Ctx) -> CaseResult {
    faulted_write(
        &ctx,
        FaultPlan::new().abort_after_bytes(250),
        AbortKind::Upstream,
        250,
    )
    .await
}
