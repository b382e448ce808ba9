//! Cases for the plain path: a body written and read back whole, empty, large, with its meta, and
//! a key that was never written. No capability needed.

use bytes::Bytes;
use stream_cache::{CacheKey, ObjectMeta, WriteState};

use super::Ctx;
use super::check::{self, pattern};
use crate::report::CaseResult;

/// Write two chunks, finish, look up: the body is the bytes written, then `Ok(None)`; the state
/// is `Complete(len)`; a second lookup starts again at offset 0.
pub async fn round_trip(ctx: Ctx) -> CaseResult {
    let key = CacheKey::from("round-trip");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::new("m")).await?;
    check::write(
        &ctx,
        "first chunk",
        &mut *writer,
        Bytes::from_static(b"hello "),
    )
    .await?;
    check::write(
        &ctx,
        "second chunk",
        &mut *writer,
        Bytes::from_static(b"world"),
    )
    .await?;
    check::finish(&ctx, "finish", writer, 11).await?;

    let mut hit = check::expect_hit(&ctx, "lookup after finish", &key).await?;
    let state = hit.body.state();
    ctx.ensure(
        matches!(state, WriteState::Complete(11)),
        "a finished object's reader to report Complete(11)",
        format!("{state:?}"),
    )?;
    check::expect_body(
        &ctx,
        "reading the finished object",
        &mut *hit.body,
        b"hello world",
    )
    .await?;
    let mut again = check::expect_hit(&ctx, "second lookup", &key).await?;
    ctx.ensure(
        again.body.position() == 0,
        "a new reader to start at offset 0",
        format!("position {}", again.body.position()),
    )?;
    check::expect_body(&ctx, "reading it again", &mut *again.body, b"hello world").await
}

/// Finish with no bytes (and an empty chunk written, which must change nothing): the object
/// exists and reads as `Ok(None)` at once. Also with a declared length of 0.
pub async fn empty_body(ctx: Ctx) -> CaseResult {
    let key = CacheKey::from("empty");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    check::write(&ctx, "an empty chunk", &mut *writer, Bytes::new()).await?;
    check::finish(&ctx, "finishing an empty body", writer, 0).await?;
    check::expect_stored(&ctx, "reading the empty object", &key, b"").await?;

    let declared = CacheKey::from("empty-declared");
    let writer = check::begin(
        &ctx,
        "begin_write",
        &declared,
        ObjectMeta::default().with_len(0),
    )
    .await?;
    check::finish(&ctx, "finishing a declared empty body", writer, 0).await?;
    check::expect_stored(&ctx, "reading the declared empty object", &declared, b"").await
}

/// A body of `Settings::large_body` bytes (capped at the size limit) in `chunk_size` chunks reads
/// back byte for byte, ending at exactly its length.
pub async fn large_body_many_chunks(ctx: Ctx) -> CaseResult {
    let mut len = ctx.settings().large_body;
    if let Some(limit) = ctx.capabilities().max_object_size {
        len = len.min(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    let body = pattern(len, 1);
    let key = CacheKey::from("large");
    check::store(
        &ctx,
        &key,
        ObjectMeta::default().with_len(len as u64),
        &body,
    )
    .await?;
    let mut hit = check::expect_hit(&ctx, "lookup of the large object", &key).await?;
    check::expect_body(&ctx, "reading the large object", &mut *hit.body, &body).await?;
    ctx.ensure(
        hit.body.position() == len as u64,
        format!("the reader's position to be {len} at the end"),
        format!("{}", hit.body.position()),
    )
}

/// The meta given to `begin_write` (binary user bytes, a declared length) comes back unchanged
/// from `lookup`, also while the body is in progress when partial reads are supported.
pub async fn meta_round_trip(ctx: Ctx) -> CaseResult {
    let key = CacheKey::from(&b"meta\x00key\xff"[..]);
    let meta = ObjectMeta::new(Bytes::from_static(b"content-type: x\x00\xff\x01")).with_len(4);
    let mut writer = check::begin(&ctx, "begin_write", &key, meta.clone()).await?;
    check::write(&ctx, "writing", &mut *writer, Bytes::from_static(b"ab")).await?;
    if ctx.capabilities().partial_reads {
        let hit = check::expect_hit(&ctx, "lookup while writing", &key).await?;
        ctx.ensure(
            hit.meta == meta,
            format!("the in-progress object's meta to be {meta:?}"),
            format!("{:?}", hit.meta),
        )?;
    }
    check::write(&ctx, "writing", &mut *writer, Bytes::from_static(b"cd")).await?;
    check::finish(&ctx, "finish", writer, 4).await?;
    let hit = check::expect_hit(&ctx, "lookup after finish", &key).await?;
    ctx.ensure(
        hit.meta == meta,
        format!("the meta to be {meta:?}"),
        format!("{:?}", hit.meta),
    )
}

/// A key never written: `lookup` is `Ok(None)` and `purge` is `Ok(false)`.
pub async fn missing_key(ctx: Ctx) -> CaseResult {
    let key = CacheKey::from("never-written");
    check::expect_miss(&ctx, "lookup of a key never written", &key).await?;
    let purged = ctx
        .step("purge of a missing key", ctx.storage().purge(&key))
        .await?;
    ctx.ensure(
        matches!(purged, Ok(false)),
        "purge of a key never written to return Ok(false)",
        format!("{purged:?}"),
    )
}
