//! The building blocks the storage cases are written with, public so backend authors can write
//! extra cases in the same style: every storage call bounded by the step timeout (a hang becomes
//! a failure naming the step), bodies drained and compared with a message that says where they
//! differ, and the one judgement that matters most: how a body ended.
//!
//! # Cancel safety
//! Each async helper is one or a few storage calls, each under `ctx.step`. Dropping a helper drops
//! the call in flight, with the backend's documented cancel safety; a dropped `drain` or
//! `expect_body` loses the bytes read so far; a writer that `begin`/`store` created and that is
//! dropped with the helper is aborted with `WriterDropped`, as the `BodyWriter` contract requires.

use std::fmt::Write as _;

use bytes::Bytes;
use stream_cache::{
    AbortKind, BodyError, BodyReader, BodyWriter, CacheKey, Hit, ObjectMeta, WriteError,
};

use super::Ctx;
use crate::report::{CaseError, CaseResult};

/// A deterministic body of `len` bytes. Different seeds give different bodies, and no short
/// period repeats, so a reordered, duplicated or shifted chunk is always visible.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(seed).wrapping_mul(0x1000_0000_01b3);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// Split `body` into chunks of at most `size` bytes (at least one byte each).
pub fn chunks(body: &[u8], size: usize) -> Vec<Bytes> {
    body.chunks(size.max(1))
        .map(Bytes::copy_from_slice)
        .collect()
}

/// Everything a reader returned until it ended, and how it ended.
#[derive(Debug)]
pub struct Drained {
    /// The bytes, concatenated.
    pub bytes: Vec<u8>,
    /// `Ok(())` for `Ok(None)` (a clean end), or the error that ended the body.
    pub end: Result<(), BodyError>,
}

/// "a clean end (Ok(None))" or the error, for messages.
pub fn describe_end(end: &Result<(), BodyError>) -> String {
    match end {
        Ok(()) => "a clean end (Ok(None))".to_string(),
        Err(error) => format!("Err({error:?})"),
    }
}

/// Where `seen` departs from `expected`, for messages.
pub fn describe_bytes(seen: &[u8], expected: &[u8]) -> String {
    if seen == expected {
        return format!("the expected {} bytes", seen.len());
    }
    let common = seen
        .iter()
        .zip(expected)
        .take_while(|(a, b)| a == b)
        .count();
    let mut text = format!("{} bytes", seen.len());
    if common == seen.len() {
        let _ = write!(text, " (a prefix: the first {common} bytes are right)");
    } else if common == expected.len() {
        let _ = write!(
            text,
            " (the {common} expected bytes, then {} bytes too many)",
            seen.len() - common
        );
    } else {
        let _ = write!(
            text,
            " differing at offset {common} (expected {:#04x}, got {:#04x})",
            expected.get(common).copied().unwrap_or_default(),
            seen[common]
        );
    }
    text
}

/// Read `reader` to its end, each read bounded by the step timeout.
pub async fn drain(
    ctx: &Ctx,
    what: &str,
    reader: &mut dyn BodyReader,
) -> Result<Drained, CaseError> {
    let mut bytes = Vec::new();
    loop {
        let read = ctx
            .step(
                &format!("{what}: read at offset {}", bytes.len()),
                reader.read(),
            )
            .await?;
        match read {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) => return Ok(Drained { bytes, end: Ok(()) }),
            Err(error) => {
                return Ok(Drained {
                    bytes,
                    end: Err(error),
                });
            }
        }
    }
}

/// The reader must return exactly `expected`, then `Ok(None)`.
pub async fn expect_body(
    ctx: &Ctx,
    what: &str,
    reader: &mut dyn BodyReader,
    expected: &[u8],
) -> CaseResult {
    let drained = drain(ctx, what, reader).await?;
    check_body(ctx, what, &drained, expected)
}

/// `drained` must be exactly `expected`, then a clean end.
pub fn check_body(ctx: &Ctx, what: &str, drained: &Drained, expected: &[u8]) -> CaseResult {
    if drained.bytes == expected && drained.end.is_ok() {
        return Ok(());
    }
    Err(ctx.failure(
        format!(
            "{what}: {} bytes, then a clean end (Ok(None))",
            expected.len()
        ),
        format!(
            "{}, then {}",
            describe_bytes(&drained.bytes, expected),
            describe_end(&drained.end)
        ),
    ))
}

/// The reader must return exactly `prefix`, then `Err(Aborted(kind))`, and the same error again
/// on the next read (aborts are sticky).
pub async fn expect_aborted(
    ctx: &Ctx,
    what: &str,
    reader: &mut dyn BodyReader,
    prefix: &[u8],
    kind: AbortKind,
) -> CaseResult {
    let drained = drain(ctx, what, reader).await?;
    let ended_right =
        matches!(&drained.end, Err(BodyError::Aborted(reason)) if reason.kind() == kind);
    if drained.bytes != prefix || !ended_right {
        return Err(ctx.failure(
            format!(
                "{what}: the {} bytes written, then Err(Aborted({kind:?})), never a clean end",
                prefix.len()
            ),
            format!(
                "{}, then {}",
                describe_bytes(&drained.bytes, prefix),
                describe_end(&drained.end)
            ),
        ));
    }
    let again = ctx
        .step(&format!("{what}: read after the abort"), reader.read())
        .await?;
    match again {
        Err(BodyError::Aborted(reason)) if reason.kind() == kind => Ok(()),
        other => Err(ctx.failure(
            format!("{what}: Err(Aborted({kind:?})) again on the next read (aborts are sticky)"),
            format!("{other:?}"),
        )),
    }
}

/// The reader must end with an error after a prefix of `full`, or return all of `full` and end
/// cleanly; a clean end after fewer bytes (a truncated body that looks complete) fails.
pub fn check_never_truncated(ctx: &Ctx, what: &str, drained: &Drained, full: &[u8]) -> CaseResult {
    let is_prefix = full.starts_with(&drained.bytes);
    let ok = match &drained.end {
        Ok(()) => drained.bytes == full,
        Err(_) => is_prefix,
    };
    if ok {
        return Ok(());
    }
    Err(ctx.failure(
        format!(
            "{what}: either all {} bytes and a clean end, or a prefix and an error; never a truncated body that ends cleanly",
            full.len()
        ),
        format!(
            "{}, then {}",
            describe_bytes(&drained.bytes, full),
            describe_end(&drained.end)
        ),
    ))
}

/// A read must not complete yet: the writer is still open and the reader is at the end of what
/// was written. The read is driven until it stays pending, unwoken, for the settle window
/// (`Settings::settle`), then dropped (reads are cancel-safe).
pub async fn expect_read_pending(ctx: &Ctx, what: &str, reader: &mut dyn BodyReader) -> CaseResult {
    let mut read = reader.read();
    match crate::sweep::settle(&mut read, ctx.settings().settle).await {
        None => Ok(()),
        Some(result) => Err(ctx.failure(
            format!("{what}: the read to wait (the writer is still open and every written byte was read)"),
            match result {
                Ok(None) => "a clean end (Ok(None)) while the write was still in progress".to_string(),
                Ok(Some(chunk)) => format!("{} bytes that were never written", chunk.len()),
                Err(error) => format!("Err({error:?})"),
            },
        )),
    }
}

/// `lookup`, bounded by the step timeout; a storage error fails the case.
pub async fn lookup(ctx: &Ctx, what: &str, key: &CacheKey) -> Result<Option<Hit>, CaseError> {
    ctx.step(what, ctx.storage().lookup(key))
        .await?
        .map_err(|error| {
            ctx.failure(
                format!("{what}: lookup to succeed"),
                format!("Err({error:?})"),
            )
        })
}

/// `lookup` must find an object.
pub async fn expect_hit(ctx: &Ctx, what: &str, key: &CacheKey) -> Result<Hit, CaseError> {
    lookup(ctx, what, key)
        .await?
        .ok_or_else(|| ctx.failure(format!("{what}: lookup to find {key:?}"), "None"))
}

/// `lookup` must find nothing.
pub async fn expect_miss(ctx: &Ctx, what: &str, key: &CacheKey) -> CaseResult {
    match lookup(ctx, what, key).await? {
        None => Ok(()),
        Some(hit) => Err(ctx.failure(
            format!("{what}: lookup of {key:?} to miss"),
            format!("a hit in state {:?}", hit.body.state()),
        )),
    }
}

/// `begin_write`, bounded by the step timeout; an error fails the case.
pub async fn begin(
    ctx: &Ctx,
    what: &str,
    key: &CacheKey,
    meta: ObjectMeta,
) -> Result<Box<dyn BodyWriter>, CaseError> {
    ctx.step(what, ctx.storage().begin_write(key, meta))
        .await?
        .map_err(|error| {
            ctx.failure(
                format!("{what}: begin_write to succeed"),
                format!("Err({error:?})"),
            )
        })
}

/// `write`, bounded by the step timeout; an error fails the case.
pub async fn write(ctx: &Ctx, what: &str, writer: &mut dyn BodyWriter, chunk: Bytes) -> CaseResult {
    let len = chunk.len();
    ctx.step(what, writer.write(chunk)).await?.map_err(|error| {
        ctx.failure(
            format!("{what}: writing {len} bytes to succeed"),
            format!("Err({error:?})"),
        )
    })
}

/// `finish`, which must succeed and report `len`.
pub async fn finish(ctx: &Ctx, what: &str, writer: Box<dyn BodyWriter>, len: u64) -> CaseResult {
    match ctx.step(what, writer.finish()).await? {
        Ok(n) if n == len => Ok(()),
        other => Err(ctx.failure(
            format!("{what}: finish to return Ok({len})"),
            format!("{other:?}"),
        )),
    }
}

/// `finish` must fail with an abort of `kind`.
pub async fn expect_finish_aborted(
    ctx: &Ctx,
    what: &str,
    writer: Box<dyn BodyWriter>,
    kind: AbortKind,
) -> Result<WriteError, CaseError> {
    match ctx.step(what, writer.finish()).await? {
        Err(error) if error.reason().kind() == kind => Ok(error),
        other => Err(ctx.failure(
            format!("{what}: finish to fail with Aborted({kind:?})"),
            format!("{other:?}"),
        )),
    }
}

/// Write a whole object: begin, every chunk, finish.
pub async fn store(ctx: &Ctx, key: &CacheKey, meta: ObjectMeta, body: &[u8]) -> CaseResult {
    let mut writer = begin(ctx, "storing an object", key, meta).await?;
    for chunk in chunks(body, ctx.settings().chunk_size) {
        write(ctx, "storing an object", &mut *writer, chunk).await?;
    }
    finish(ctx, "storing an object", writer, body.len() as u64).await
}

/// Look `key` up and read it: it must be exactly `expected`, ending cleanly.
pub async fn expect_stored(ctx: &Ctx, what: &str, key: &CacheKey, expected: &[u8]) -> CaseResult {
    let mut hit = expect_hit(ctx, what, key).await?;
    expect_body(ctx, what, &mut *hit.body, expected).await
}
