//! Cases for waits and ends that only some readers take (issue 15): a seek that waits for its
//! start is woken by the write; a reader with a byte range, or one opened through
//! `BodyWriter::source` (the kind `StreamCache` hands to followers), sees an abort as an error;
//! a range ending one byte past what a partial body finally holds is not satisfiable.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::FutureExt;
use futures::task::ArcWake;
use stream_cache::{AbortKind, AbortReason, BodyError, ByteRange, CacheKey, ObjectMeta};

use super::check::{self, pattern};
use super::{Ctx, Need};
use crate::report::CaseResult;

/// A waker that records that it was woken.
#[derive(Default)]
struct WokenFlag(AtomicBool);

impl ArcWake for WokenFlag {
    fn wake_by_ref(flag: &Arc<Self>) {
        flag.0.store(true, Ordering::SeqCst);
    }
}

/// A seek past what is written waits, and the write that reaches its start wakes it (a seek
/// that never registers its waker hangs here).
pub async fn seek_waiting_is_woken(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    ctx.require(Need::RangeReads)?;
    let body = pattern(20, 3);
    let key = CacheKey::from("seek-wait");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    check::write(
        &ctx,
        "bytes 0..5",
        &mut *writer,
        Bytes::copy_from_slice(&body[..5]),
    )
    .await?;
    let mut reader = check::expect_hit(&ctx, "lookup", &key).await?.body;
    let mut seek = reader.seek(ByteRange::from(10..20));
    // Poll the seek once with a waker that records being woken: a timeout or a runtime that
    // re-polls would hide a seek that never registers its waker.
    let woken = Arc::new(WokenFlag::default());
    let waker = futures::task::waker(Arc::clone(&woken));
    if let Poll::Ready(result) = seek.poll_unpin(&mut Context::from_waker(&waker)) {
        return Err(ctx.failure(
            "seek(10..20) with 5 bytes written to wait",
            format!("{result:?}"),
        ));
    }
    check::write(
        &ctx,
        "bytes 5..20",
        &mut *writer,
        Bytes::copy_from_slice(&body[5..]),
    )
    .await?;
    ctx.ensure(
        woken.0.load(Ordering::SeqCst),
        "the write that reaches the seek's start to wake the waiting seek",
        "the seek's waker was never woken (was it registered?)",
    )?;
    let sought = ctx.step("seek(10..20) after the write", seek).await?;
    ctx.ensure(
        sought.is_ok(),
        "the woken seek to succeed",
        format!("{sought:?}"),
    )?;
    check::finish(&ctx, "finish", writer, 20).await?;
    check::expect_body(&ctx, "range 10..20", &mut *reader, &body[10..20]).await
}

/// A reader restricted to a range that the write never finishes (it aborts) gets the written
/// bytes of the range, then the abort: never a clean end.
pub async fn range_reader_sees_abort(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    ctx.require(Need::RangeReads)?;
    let key = CacheKey::from("range-abort");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    check::write(&ctx, "6 bytes", &mut *writer, Bytes::from_static(b"abcdef")).await?;
    let mut bounded = check::expect_hit(&ctx, "lookup", &key).await?.body;
    ctx.step("seek(2..10)", bounded.seek(ByteRange::from(2..10)))
        .await?
        .map_err(|error| ctx.failure("seek(2..10) to succeed", format!("{error:?}")))?;
    let mut open_ended = check::expect_hit(&ctx, "lookup", &key).await?.body;
    ctx.step("seek(2..)", open_ended.seek(ByteRange::from(2..)))
        .await?
        .map_err(|error| ctx.failure("seek(2..) to succeed", format!("{error:?}")))?;
    writer.abort(AbortReason::upstream(std::io::Error::other("origin reset")));
    check::expect_aborted(
        &ctx,
        "reader of range 2..10 when the write aborts at 6 bytes",
        &mut *bounded,
        b"cdef",
        AbortKind::Upstream,
    )
    .await?;
    check::expect_aborted(
        &ctx,
        "reader of range 2.. when the write aborts at 6 bytes",
        &mut *open_ended,
        b"cdef",
        AbortKind::Upstream,
    )
    .await
}

/// A range `0..6` accepted on a partial body that then completes at 5 bytes: the 5 bytes, then
/// `RangeNotSatisfiable` (the end is one past the length), never a clean end.
pub async fn range_end_one_past_length(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    ctx.require(Need::RangeReads)?;
    let key = CacheKey::from("one-past");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    check::write(&ctx, "3 bytes", &mut *writer, Bytes::from_static(b"abc")).await?;
    let mut reader = check::expect_hit(&ctx, "lookup", &key).await?.body;
    ctx.step(
        "seek(0..6) on a partial body",
        reader.seek(ByteRange::from(0..6)),
    )
    .await?
    .map_err(|error| ctx.failure("seek(0..6) to succeed", format!("{error:?}")))?;
    check::write(
        &ctx,
        "2 more bytes",
        &mut *writer,
        Bytes::from_static(b"de"),
    )
    .await?;
    check::finish(&ctx, "finish at 5 bytes", writer, 5).await?;
    let drained = check::drain(&ctx, "range 0..6 of a 5-byte body", &mut *reader).await?;
    ctx.ensure(
        drained.bytes == b"abcde"
            && matches!(
                drained.end,
                Err(BodyError::RangeNotSatisfiable { len: 5, .. })
            ),
        "bytes 0..5, then Err(RangeNotSatisfiable { len: 5 })",
        format!(
            "{}, then {}",
            check::describe_bytes(&drained.bytes, b"abcde"),
            check::describe_end(&drained.end)
        ),
    )
}

/// A reader opened through `BodyWriter::source` (how `StreamCache` attaches followers) sees an
/// abort as an error after the written bytes, like a reader from `lookup`.
pub async fn source_reader_sees_abort(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    let key = CacheKey::from("source-abort");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    let Some(source) = writer.source() else {
        return Err(ctx.failure(
            "BodyWriter::source to be Some with the partial_reads capability",
            "None",
        ));
    };
    let mut early = source.open();
    check::write(&ctx, "4 bytes", &mut *writer, Bytes::from_static(b"wxyz")).await?;
    let mut late = source.open();
    writer.abort(AbortReason::Cancelled);
    check::expect_aborted(
        &ctx,
        "a source reader opened before the bytes",
        &mut *early,
        b"wxyz",
        AbortKind::Cancelled,
    )
    .await?;
    check::expect_aborted(
        &ctx,
        "a source reader opened after the bytes",
        &mut *late,
        b"wxyz",
        AbortKind::Cancelled,
    )
    .await?;
    let mut after = source.open();
    check::expect_aborted(
        &ctx,
        "a source reader opened after the abort",
        &mut *after,
        b"wxyz",
        AbortKind::Cancelled,
    )
    .await
}

/// With partial reads, for a backend that counts readers (`BodySource::reader_count` is
/// `Some`): the count is every open reader of the write, from its source and from `lookup`, and
/// falls as each is dropped. `StreamCache` aborts a write nobody reads (`NoReaderPolicy::Abort`)
/// when the count reads 0: a count that misses readers aborts bodies clients are reading.
pub async fn reader_count_counts_open_readers(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    let key = CacheKey::from("counted");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    check::write(&ctx, "3 bytes", &mut *writer, Bytes::from_static(b"abc")).await?;
    let Some(source) = writer.source() else {
        return Err(ctx.failure(
            "BodyWriter::source to be Some with the partial_reads capability",
            "None",
        ));
    };
    let Some(before) = source.reader_count() else {
        return Err(ctx.skip("the backend does not count readers (reader_count is None)"));
    };
    let counted = |what: &str, expected: usize| {
        let seen = source.reader_count();
        ctx.ensure(
            seen == Some(expected),
            format!("reader_count {expected} {what}"),
            format!("{seen:?}"),
        )
    };
    let from_source = source.open();
    counted("with a reader from the source", before + 1)?;
    let Some(from_lookup) = check::lookup(&ctx, "lookup of the write in progress", &key).await?
    else {
        return Err(ctx.failure(
            "lookup to find a write in progress (partial_reads)",
            "a miss",
        ));
    };
    counted("with one more from lookup", before + 2)?;
    drop(from_source);
    counted("once the source's reader is dropped", before + 1)?;
    drop(from_lookup);
    counted("once both are dropped", before)?;
    writer.abort(AbortReason::Cancelled);
    Ok(())
}
