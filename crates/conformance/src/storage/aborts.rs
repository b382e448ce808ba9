//! Cases for the rule the whole crate exists for: a write that did not finish successfully is
//! never a clean end. Writer dropped, explicit abort, length mismatch (short and long), size limit
//! (declared and streamed), and what `lookup` returns afterwards.

use bytes::Bytes;
use stream_cache::{
    AbortKind, AbortReason, BodyError, BodyReader, BodyWriter, CacheKey, ObjectMeta, StorageError,
    WriteError, WriteState,
};

use super::check::{self, pattern};
use super::{Ctx, Need};
use crate::report::{CaseError, CaseResult};

const PREFIX: &[u8] = b"hello ";

/// `begin_write(key, meta)`, then write [`PREFIX`] as the step `what`.
async fn begin_with_prefix(
    ctx: &Ctx,
    key: &CacheKey,
    meta: ObjectMeta,
    what: &str,
) -> Result<Box<dyn BodyWriter>, CaseError> {
    let mut writer = check::begin(ctx, "begin_write", key, meta).await?;
    check::write(ctx, what, &mut *writer, Bytes::from_static(PREFIX)).await?;
    Ok(writer)
}

/// Attach a reader (partial reads only) and read the prefix written so far.
async fn attach_and_read_prefix(
    ctx: &Ctx,
    key: &CacheKey,
) -> Result<Option<Box<dyn BodyReader>>, CaseError> {
    if !ctx.has(Need::PartialReads) {
        return Ok(None);
    }
    let mut hit = check::expect_hit(ctx, "lookup of the in-progress object", key).await?;
    let first = ctx
        .step("reading the written prefix", hit.body.read())
        .await?;
    ctx.ensure(
        matches!(&first, Ok(Some(chunk)) if chunk.as_ref() == PREFIX),
        format!(
            "the first read to return the {} bytes written",
            PREFIX.len()
        ),
        format!("{first:?}"),
    )?;
    Ok(Some(hit.body))
}

/// Drop the writer without `finish`: at once (synchronously, in `Drop`), a new lookup misses.
pub async fn writer_dropped_lookup_misses(ctx: Ctx) -> CaseResult {
    let key = CacheKey::from("dropped");
    let writer = begin_with_prefix(&ctx, &key, ObjectMeta::default(), "writing a prefix").await?;
    drop(writer);
    check::expect_miss(&ctx, "lookup right after the writer was dropped", &key).await
}

/// The exact Pingora bug: write a prefix, attach a reader, read the prefix, drop the writer
/// without `finish`. The reader (and one already waiting for more bytes) gets
/// `Err(Aborted(WriterDropped))`, never `Ok(None)`.
pub async fn writer_dropped_reader_sees_abort(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    let key = CacheKey::from("dropped-with-readers");
    let writer = begin_with_prefix(&ctx, &key, ObjectMeta::default(), "writing a prefix").await?;
    let mut reader = attach_and_read_prefix(&ctx, &key)
        .await?
        .expect("partial reads are required above");
    let mut waiting = check::expect_hit(&ctx, "second lookup", &key).await?.body;
    let waiter_ctx = ctx.clone();
    let waiter = tokio::spawn(async move {
        let drained =
            check::drain(&waiter_ctx, "a reader waiting at the tail", &mut *waiting).await;
        drained.map(|drained| (drained, waiting))
    });
    tokio::task::yield_now().await;
    drop(writer);
    check::expect_aborted(
        &ctx,
        "the reader after the writer was dropped",
        &mut *reader,
        b"",
        AbortKind::WriterDropped,
    )
    .await?;
    let (drained, _reader) = ctx
        .step("the waiting reader's task", waiter)
        .await?
        .map_err(|error| {
            ctx.failure("the waiting reader's task to finish", format!("{error}"))
        })??;
    let ended_right = matches!(&drained.end, Err(BodyError::Aborted(reason)) if reason.kind() == AbortKind::WriterDropped);
    ctx.ensure(
        drained.bytes == PREFIX && ended_right,
        "a reader waiting when the writer was dropped: the prefix, then Err(Aborted(WriterDropped))",
        format!(
            "{}, then {}",
            check::describe_bytes(&drained.bytes, PREFIX),
            check::describe_end(&drained.end)
        ),
    )?;
    check::expect_miss(&ctx, "lookup after the writer was dropped", &key).await
}

/// `abort(Upstream(cause))`: the reader gets the prefix, then `Aborted(Upstream)` carrying the
/// cause; lookups miss.
pub async fn explicit_abort_with_cause(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    let key = CacheKey::from("aborted");
    let writer = begin_with_prefix(&ctx, &key, ObjectMeta::default(), "writing a prefix").await?;
    let mut reader = attach_and_read_prefix(&ctx, &key)
        .await?
        .expect("partial reads are required above");
    writer.abort(AbortReason::upstream(std::io::Error::other(
        "upstream reset by conformance",
    )));
    let end = ctx.step("reading after the abort", reader.read()).await?;
    match &end {
        Err(BodyError::Aborted(reason @ AbortReason::Upstream(_)))
            if reason.to_string().contains("upstream reset by conformance") => {}
        other => {
            return Err(ctx.failure(
                "Err(Aborted(Upstream)) carrying the cause \"upstream reset by conformance\"",
                format!("{other:?}"),
            ));
        }
    }
    let state = reader.state();
    ctx.ensure(
        matches!(state, WriteState::Aborted(AbortReason::Upstream(_))),
        "the reader's state to be Aborted(Upstream)",
        format!("{state:?}"),
    )?;
    check::expect_miss(&ctx, "lookup after the abort", &key).await
}

/// Declared 100 bytes, wrote 6, `finish`: fails with `LengthMismatch { expected: 100, written: 6 }`;
/// readers get the prefix then that error; lookups miss.
pub async fn length_mismatch_at_finish(ctx: Ctx) -> CaseResult {
    let key = CacheKey::from("short");
    let writer = begin_with_prefix(
        &ctx,
        &key,
        ObjectMeta::default().with_len(100),
        "writing 6 of 100 declared bytes",
    )
    .await?;
    let reader = attach_and_read_prefix(&ctx, &key).await?;
    let error = check::expect_finish_aborted(
        &ctx,
        "finish short of the declared length",
        writer,
        AbortKind::LengthMismatch,
    )
    .await?;
    ctx.ensure(
        matches!(
            error,
            WriteError::Aborted(AbortReason::LengthMismatch {
                expected: 100,
                written: 6
            })
        ),
        "LengthMismatch { expected: 100, written: 6 }",
        format!("{error:?}"),
    )?;
    if let Some(mut reader) = reader {
        check::expect_aborted(
            &ctx,
            "the reader after the mismatch",
            &mut *reader,
            b"",
            AbortKind::LengthMismatch,
        )
        .await?;
    }
    check::expect_miss(&ctx, "lookup after the mismatch", &key).await
}

/// Declared 8 bytes, wrote 6, then 5 more: the write fails with
/// `LengthMismatch { expected: 8, written: 11 }`, `finish` fails, readers end with that error,
/// lookups miss.
pub async fn length_overrun_at_write(ctx: Ctx) -> CaseResult {
    let key = CacheKey::from("long");
    let mut writer = begin_with_prefix(
        &ctx,
        &key,
        ObjectMeta::default().with_len(8),
        "writing 6 of 8 declared bytes",
    )
    .await?;
    let reader = attach_and_read_prefix(&ctx, &key).await?;
    let overrun = ctx
        .step(
            "writing past the declared length",
            writer.write(Bytes::from_static(b"world")),
        )
        .await?;
    ctx.ensure(
        matches!(
            overrun,
            Err(WriteError::Aborted(AbortReason::LengthMismatch {
                expected: 8,
                written: 11
            }))
        ),
        "the overrunning write to fail with LengthMismatch { expected: 8, written: 11 }",
        format!("{overrun:?}"),
    )?;
    check::expect_finish_aborted(
        &ctx,
        "finish after the overrun",
        writer,
        AbortKind::LengthMismatch,
    )
    .await?;
    if let Some(mut reader) = reader {
        let drained = check::drain(&ctx, "the reader after the overrun", &mut *reader).await?;
        let ended_right = matches!(&drained.end, Err(BodyError::Aborted(reason)) if reason.kind() == AbortKind::LengthMismatch);
        ctx.ensure(
            ended_right && b"world"[..].starts_with(&drained.bytes) && drained.bytes.len() <= 2,
            "the reader: at most the 2 bytes still within the declared length, then Err(Aborted(LengthMismatch))",
            format!("{} more bytes, then {}", drained.bytes.len(), check::describe_end(&drained.end)),
        )?;
    }
    check::expect_miss(&ctx, "lookup after the overrun", &key).await
}

/// A declared length over `max_object_size` is refused by `begin_write` with
/// `StorageError::TooLarge`, and nothing becomes visible; exactly the limit is accepted.
pub async fn size_limit_declared(ctx: Ctx) -> CaseResult {
    ctx.require(Need::SizeLimit)?;
    let limit = ctx.capabilities().max_object_size.expect("required above");
    let key = CacheKey::from("declared-too-large");
    let refused = ctx
        .step(
            "begin_write over the limit",
            ctx.storage()
                .begin_write(&key, ObjectMeta::default().with_len(limit + 1)),
        )
        .await?;
    match refused {
        Err(StorageError::TooLarge { limit: l, declared })
            if l == limit && declared == limit + 1 => {}
        other => {
            return Err(ctx.failure(
                format!("begin_write with a declared length of {} to fail with TooLarge {{ limit: {limit}, declared: {} }}", limit + 1, limit + 1),
                match other {
                    Ok(_) => "Ok(writer)".to_string(),
                    Err(error) => format!("Err({error:?})"),
                },
            ));
        }
    }
    check::expect_miss(&ctx, "lookup after the refusal", &key).await?;
    let at_limit = check::begin(
        &ctx,
        "begin_write at exactly the limit",
        &key,
        ObjectMeta::default().with_len(limit),
    )
    .await?;
    drop(at_limit);
    check::expect_miss(&ctx, "lookup after dropping that writer", &key).await
}

/// Streaming exactly `max_object_size` bytes succeeds; one byte more aborts the write with
/// `TooLarge { limit }`: the write fails, readers get the accepted bytes then that error, `finish`
/// fails, lookups miss. Skipped above `Settings::max_streamed_limit`.
pub async fn size_limit_streamed(ctx: Ctx) -> CaseResult {
    ctx.require(Need::SizeLimit)?;
    let limit = ctx.capabilities().max_object_size.expect("required above");
    if limit > ctx.settings().max_streamed_limit {
        return Err(ctx.skip(format!(
            "max_object_size {limit} is above Settings::max_streamed_limit ({})",
            ctx.settings().max_streamed_limit
        )));
    }
    let body = pattern(limit as usize, 2);
    let chunk = 64 * 1024;
    let fits = CacheKey::from("at-the-limit");
    let mut writer = check::begin(&ctx, "begin_write", &fits, ObjectMeta::default()).await?;
    for piece in check::chunks(&body, chunk) {
        check::write(&ctx, "writing up to the limit", &mut *writer, piece).await?;
    }
    check::finish(&ctx, "finishing at exactly the limit", writer, limit).await?;
    check::expect_stored(&ctx, "reading the object at the limit", &fits, &body).await?;

    let over = CacheKey::from("over-the-limit");
    let mut writer = check::begin(&ctx, "begin_write", &over, ObjectMeta::default()).await?;
    let mut reader = if ctx.has(Need::PartialReads) {
        Some(
            check::expect_hit(&ctx, "lookup of the growing object", &over)
                .await?
                .body,
        )
    } else {
        None
    };
    for piece in check::chunks(&body, chunk) {
        check::write(&ctx, "writing up to the limit", &mut *writer, piece).await?;
    }
    let past = ctx
        .step(
            "writing one byte past the limit",
            writer.write(Bytes::from_static(b"!")),
        )
        .await?;
    ctx.ensure(
        matches!(&past, Err(WriteError::Aborted(AbortReason::TooLarge { limit: l })) if *l == limit),
        format!("the write past the limit to fail with TooLarge {{ limit: {limit} }}"),
        format!("{past:?}"),
    )?;
    check::expect_finish_aborted(&ctx, "finish after the limit", writer, AbortKind::TooLarge)
        .await?;
    if let Some(reader) = reader.as_mut() {
        check::expect_aborted(
            &ctx,
            "the reader of the too-large object",
            &mut **reader,
            &body,
            AbortKind::TooLarge,
        )
        .await?;
    }
    check::expect_miss(&ctx, "lookup of the too-large object", &over).await
}

/// After an abort, `lookup` misses: neither the aborted write nor the complete object it
/// replaced comes back. Also for a write aborted before any byte.
pub async fn lookup_after_abort(ctx: Ctx) -> CaseResult {
    let key = CacheKey::from("replaced-then-aborted");
    check::store(&ctx, &key, ObjectMeta::new("old"), b"old body").await?;
    let mut writer = check::begin(
        &ctx,
        "begin_write replacing the object",
        &key,
        ObjectMeta::new("new"),
    )
    .await?;
    check::write(
        &ctx,
        "writing the replacement",
        &mut *writer,
        Bytes::from_static(b"new"),
    )
    .await?;
    writer.abort(AbortReason::upstream(std::io::Error::other(
        "replacement failed",
    )));
    check::expect_miss(
        &ctx,
        "lookup after the replacement was aborted (the old object was superseded)",
        &key,
    )
    .await?;

    let empty = CacheKey::from("aborted-empty");
    let writer = check::begin(&ctx, "begin_write", &empty, ObjectMeta::default()).await?;
    writer.abort(AbortReason::FillTimedOut);
    check::expect_miss(&ctx, "lookup after aborting a write with no bytes", &empty).await
}
