//! Cases for range reads (`BodyReader::seek`): on complete bodies, on partial bodies (waiting for
//! the start to be written), and bad ranges (a clear error, never a silently short body).

use bytes::Bytes;
use futures::FutureExt;
use stream_cache::{BodyError, ByteRange, CacheKey, ObjectMeta};

use super::check::{self, pattern};
use super::{Ctx, Need};
use crate::report::CaseResult;

/// Seek, bounded by the step timeout; it must succeed.
async fn seek(
    ctx: &Ctx,
    what: &str,
    reader: &mut dyn stream_cache::BodyReader,
    range: ByteRange,
) -> CaseResult {
    match ctx.step(what, reader.seek(range)).await? {
        Ok(()) => Ok(()),
        Err(error) => Err(ctx.failure(
            format!("{what}: seek({range:?}) to succeed"),
            format!("Err({error:?})"),
        )),
    }
}

/// On a complete 20-byte body: `3..7` reads exactly those bytes; `0..0` is empty; `19..` is the
/// last byte; `20..` (start at the length) is empty; `..` after a seek reads everything.
pub async fn range_read_complete(ctx: Ctx) -> CaseResult {
    ctx.require(Need::RangeReads)?;
    let body = pattern(20, 9);
    let key = CacheKey::from("ranges");
    check::store(&ctx, &key, ObjectMeta::default(), &body).await?;
    for (range, expected) in [
        (ByteRange::from(3..7), &body[3..7]),
        (ByteRange::from(0..0), &body[0..0]),
        (ByteRange::from(19..), &body[19..]),
        (ByteRange::from(20..), &body[20..]),
        (ByteRange::from(0..20), &body[..]),
        (ByteRange::from(..), &body[..]),
    ] {
        let mut hit = check::expect_hit(&ctx, "lookup", &key).await?;
        let what = format!("range {range:?} of a complete 20-byte body");
        seek(&ctx, &what, &mut *hit.body, range).await?;
        ctx.ensure(
            hit.body.position() == range.start,
            format!("{what}: the position to be {} after the seek", range.start),
            format!("{}", hit.body.position()),
        )?;
        check::expect_body(&ctx, &what, &mut *hit.body, expected).await?;
    }
    Ok(())
}

/// On a partial body: a seek to a written offset returns at once; reads stop at the range's end
/// and end cleanly only once the write completed; a seek past what is written waits until that
/// offset is written; a range ending past what is finally written is `RangeNotSatisfiable` when
/// the write completes, not a clean end.
pub async fn range_read_partial(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    ctx.require(Need::RangeReads)?;
    let body = pattern(30, 10);
    let key = CacheKey::from("partial-ranges");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    check::write(
        &ctx,
        "first 10 bytes",
        &mut *writer,
        Bytes::copy_from_slice(&body[..10]),
    )
    .await?;

    let mut inside = check::expect_hit(&ctx, "lookup", &key).await?.body;
    seek(
        &ctx,
        "seek(5..15) with 10 bytes written",
        &mut *inside,
        ByteRange::from(5..15),
    )
    .await?;
    let first = ctx.step("read in range 5..15", inside.read()).await?;
    ctx.ensure(
        matches!(&first, Ok(Some(chunk)) if chunk.as_ref() == &body[5..10]),
        "the written part of the range (bytes 5..10)",
        format!("{first:?}"),
    )?;

    let mut ahead = check::expect_hit(&ctx, "lookup", &key).await?.body;
    let mut pending_seek = ahead.seek(ByteRange::from(20..25));
    if let Some(result) = (&mut pending_seek).now_or_never() {
        return Err(ctx.failure(
            "seek(20..25) with 10 bytes written to wait until byte 20 is written",
            format!("{result:?}"),
        ));
    }
    drop(pending_seek);
    let mut too_long = check::expect_hit(&ctx, "lookup", &key).await?.body;
    seek(
        &ctx,
        "seek(0..100) on a partial body",
        &mut *too_long,
        ByteRange::from(0..100),
    )
    .await?;

    check::write(
        &ctx,
        "bytes 10..30",
        &mut *writer,
        Bytes::copy_from_slice(&body[10..]),
    )
    .await?;
    seek(
        &ctx,
        "seek(20..25) once byte 20 is written",
        &mut *ahead,
        ByteRange::from(20..25),
    )
    .await?;
    let upto_end = ctx
        .step("read in range 5..15 after more bytes", inside.read())
        .await?;
    ctx.ensure(
        matches!(&upto_end, Ok(Some(chunk)) if chunk.as_ref() == &body[10..15]),
        "the rest of the range (bytes 10..15), stopping at its end",
        format!("{upto_end:?}"),
    )?;
    check::expect_read_pending(
        &ctx,
        "a read at the end of the range while the write is open",
        &mut *inside,
    )
    .await?;
    check::finish(&ctx, "finish", writer, 30).await?;
    check::expect_body(&ctx, "range 5..15 after finish", &mut *inside, b"").await?;
    check::expect_body(&ctx, "range 20..25", &mut *ahead, &body[20..25]).await?;
    let drained = check::drain(
        &ctx,
        "range 0..100 of a body that ended at 30 bytes",
        &mut *too_long,
    )
    .await?;
    ctx.ensure(
        drained.bytes == body && matches!(drained.end, Err(BodyError::RangeNotSatisfiable { .. })),
        "range 0..100 of a 30-byte body: the 30 bytes, then Err(RangeNotSatisfiable), not a clean end",
        format!("{}, then {}", check::describe_bytes(&drained.bytes, &body), check::describe_end(&drained.end)),
    )
}

/// A bad range, a test of the error it must produce, and that error's description.
type BadRange = (ByteRange, fn(&BodyError) -> bool, &'static str);

/// Bad ranges are clear errors: end before start is `InvalidRange` (at once, also on a partial
/// body); a start or end past a complete body's length is `RangeNotSatisfiable`.
pub async fn bad_ranges(ctx: Ctx) -> CaseResult {
    ctx.require(Need::RangeReads)?;
    let body = pattern(20, 11);
    let key = CacheKey::from("bad-ranges");
    check::store(&ctx, &key, ObjectMeta::default(), &body).await?;
    let mut hit = check::expect_hit(&ctx, "lookup", &key).await?;
    let cases: [BadRange; 4] = [
        (
            ByteRange::new(7, Some(3)),
            |e| matches!(e, BodyError::InvalidRange { start: 7, end: 3 }),
            "InvalidRange { start: 7, end: 3 }",
        ),
        (
            ByteRange::from(21..),
            |e| matches!(e, BodyError::RangeNotSatisfiable { len: 20, .. }),
            "RangeNotSatisfiable { len: 20, .. }",
        ),
        (
            ByteRange::from(5..21),
            |e| matches!(e, BodyError::RangeNotSatisfiable { len: 20, .. }),
            "RangeNotSatisfiable { len: 20, .. }",
        ),
        (
            ByteRange::from(25..30),
            |e| matches!(e, BodyError::RangeNotSatisfiable { len: 20, .. }),
            "RangeNotSatisfiable { len: 20, .. }",
        ),
    ];
    for (range, is_expected, expected) in cases {
        let result = ctx.step("a bad seek", hit.body.seek(range)).await?;
        match result {
            Err(error) if is_expected(&error) => {}
            other => {
                return Err(ctx.failure(
                    format!("seek({range:?}) on a complete 20-byte body to fail with {expected}"),
                    format!("{other:?}"),
                ));
            }
        }
    }
    if ctx.has(Need::PartialReads) {
        let open = CacheKey::from("bad-ranges-partial");
        let _writer = check::begin(&ctx, "begin_write", &open, ObjectMeta::default()).await?;
        let mut reader = check::expect_hit(&ctx, "lookup of an in-progress object", &open)
            .await?
            .body;
        let result = ctx
            .step(
                "seek(7..3) on a partial body (must not wait)",
                reader.seek(ByteRange::new(7, Some(3))),
            )
            .await?;
        ctx.ensure(
            matches!(result, Err(BodyError::InvalidRange { start: 7, end: 3 })),
            "seek(7..3) on a partial body to fail at once with InvalidRange { start: 7, end: 3 }",
            format!("{result:?}"),
        )?;
    }
    Ok(())
}
