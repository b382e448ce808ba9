//! Cases for readers of a body that is still being written: attaching early, late and after the
//! end; many at once (no lost wake-up); one cancelled mid-read; and purges under readers.

use bytes::Bytes;
use futures::FutureExt;
use stream_cache::{
    AbortKind, AbortReason, BodyReader, CacheKey, ObjectMeta, WriteError, WriteState,
};
use tokio::task::JoinSet;

use std::task::Poll;

use crate::sweep::WakeProbe;

use super::check::{self, Drained, pattern};
use super::{Ctx, Need};
use crate::report::{CaseError, CaseResult};

/// Drain `reader` on a spawned task (so readers run in parallel on a multi-thread runtime).
fn spawn_drain(
    set: &mut JoinSet<(String, Result<Drained, CaseError>)>,
    ctx: &Ctx,
    what: String,
    mut reader: Box<dyn BodyReader>,
) {
    let ctx = ctx.clone();
    set.spawn(async move {
        let drained = check::drain(&ctx, &what, &mut *reader).await;
        (what, drained)
    });
}

/// Wait for every reader task and check each got exactly `body` and a clean end.
async fn expect_all_bodies(
    ctx: &Ctx,
    mut set: JoinSet<(String, Result<Drained, CaseError>)>,
    body: &[u8],
) -> CaseResult {
    while let Some(joined) = ctx
        .step("waiting for the reader tasks", set.join_next())
        .await?
    {
        let (what, drained) = joined
            .map_err(|error| ctx.failure("every reader task to finish", format!("{error}")))?;
        check::check_body(ctx, &what, &drained?, body)?;
    }
    Ok(())
}

/// With partial reads: an in-progress object is visible to `lookup` (state `Partial(n)`), and its
/// reader gets the bytes written so far, then waits (it does not end) until more arrive; the
/// writer's `source()` opens readers of the same write; after `finish` both end cleanly.
pub async fn partial_read_while_writing(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    let key = CacheKey::from("partial");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    check::write(
        &ctx,
        "first chunk",
        &mut *writer,
        Bytes::from_static(b"abc"),
    )
    .await?;
    let mut hit = check::expect_hit(&ctx, "lookup while the body is written", &key).await?;
    let state = hit.body.state();
    ctx.ensure(
        matches!(state, WriteState::Partial(3)),
        "the in-progress object to be Partial(3)",
        format!("{state:?}"),
    )?;
    let source = writer
        .source()
        .ok_or_else(|| ctx.failure("BodyWriter::source() to be Some with partial_reads", "None"))?;
    let mut from_source = source.open();
    let first = ctx.step("first read", hit.body.read()).await?;
    ctx.ensure(
        matches!(&first, Ok(Some(chunk)) if chunk.as_ref() == b"abc"),
        "the first read to return the 3 bytes written",
        format!("{first:?}"),
    )?;
    check::expect_read_pending(
        &ctx,
        "a read at the end of the written bytes",
        &mut *hit.body,
    )
    .await?;
    check::write(
        &ctx,
        "second chunk",
        &mut *writer,
        Bytes::from_static(b"def"),
    )
    .await?;
    let second = ctx
        .step("read after the second chunk", hit.body.read())
        .await?;
    ctx.ensure(
        matches!(&second, Ok(Some(chunk)) if chunk.as_ref() == b"def"),
        "the next read to return the 3 new bytes",
        format!("{second:?}"),
    )?;
    check::finish(&ctx, "finish", writer, 6).await?;
    check::expect_body(&ctx, "the lookup reader after finish", &mut *hit.body, b"").await?;
    check::expect_body(&ctx, "the source reader", &mut *from_source, b"abcdef").await
}

/// Readers attached before the first byte, in the middle, and after `finish` all receive the
/// identical byte sequence and a clean end, while the writer writes in bursts.
pub async fn readers_before_during_after_identical(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    let body = pattern(48 * 1024 + 123, 3);
    let pieces = check::chunks(&body, 1000);
    let key = CacheKey::from("shared-body");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    let mut set = JoinSet::new();
    let before = check::expect_hit(&ctx, "lookup before the first byte", &key).await?;
    spawn_drain(
        &mut set,
        &ctx,
        "the reader attached before the first byte".into(),
        before.body,
    );
    for (i, piece) in pieces.iter().enumerate() {
        check::write(&ctx, "writing", &mut *writer, piece.clone()).await?;
        if i == pieces.len() / 2 {
            let during = check::expect_hit(&ctx, "lookup in the middle of the body", &key).await?;
            spawn_drain(
                &mut set,
                &ctx,
                "the reader attached in the middle".into(),
                during.body,
            );
        }
        if i % 5 == 4 {
            tokio::task::yield_now().await;
        }
    }
    check::finish(&ctx, "finish", writer, body.len() as u64).await?;
    let after = check::expect_hit(&ctx, "lookup after finish", &key).await?;
    spawn_drain(
        &mut set,
        &ctx,
        "the reader attached after finish".into(),
        after.body,
    );
    expect_all_bodies(&ctx, set, &body).await
}

/// `Settings::readers` readers wait on one body while the writer appends in bursts of 1..=4
/// chunks; each must be woken for every burst and for the end (no lost wake-up: a reader left
/// waiting fails the step timeout) and receive the identical bytes in order.
pub async fn many_concurrent_readers(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    let body = pattern(64 * 1024, 4);
    let pieces = check::chunks(&body, 512);
    let key = CacheKey::from("many-readers");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    let mut set = JoinSet::new();
    for i in 0..ctx.settings().readers {
        let hit = check::expect_hit(&ctx, "lookup for a reader", &key).await?;
        spawn_drain(&mut set, &ctx, format!("concurrent reader {i}"), hit.body);
    }
    // Let the readers reach their first wait before any byte exists.
    tokio::task::yield_now().await;
    let mut burst = 0;
    for (i, piece) in pieces.iter().enumerate() {
        check::write(&ctx, "writing", &mut *writer, piece.clone()).await?;
        burst += 1;
        if burst == 1 + i % 4 {
            burst = 0;
            tokio::task::yield_now().await;
        }
    }
    check::finish(&ctx, "finish", writer, body.len() as u64).await?;
    expect_all_bodies(&ctx, set, &body).await
}

/// A read dropped in the middle of a complete body, after any number of polls (the backend's
/// own I/O in flight: a file read), loses nothing: the same reader's next reads return the
/// rest, byte for byte, and end cleanly only at the body's end. `StreamCache` drops reads so
/// (its reader wait timeout); a backend that moves its position before its I/O completes
/// would leave a hole in the body and still end it cleanly.
pub async fn read_cancelled_mid_body(ctx: Ctx) -> CaseResult {
    let body = pattern(3 * 4096 + 100, 15);
    let key = CacheKey::from("read-cancelled-mid-body");
    check::store(&ctx, &key, ObjectMeta::default(), &body).await?;
    for polls in 1..=8usize {
        let mut reader = check::expect_hit(&ctx, "lookup", &key).await?.body;
        let mut got = Vec::new();
        // At most one dropped and one whole read per byte: a bound, not an expectation.
        for _ in 0..=2 * body.len() {
            // A read polled `polls` times (yielding between polls, so that I/O may progress),
            // then dropped if it has not returned.
            let early = {
                let mut read = std::pin::pin!(reader.read());
                let mut early = None;
                for _ in 0..polls {
                    if let Poll::Ready(outcome) = futures::poll!(read.as_mut()) {
                        early = Some(outcome);
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                early
            };
            let outcome = match early {
                Some(outcome) => outcome,
                None => {
                    ctx.step("a read after a dropped read", reader.read())
                        .await?
                }
            };
            match outcome {
                Ok(Some(chunk)) => got.extend_from_slice(&chunk),
                Ok(None) => break,
                Err(error) => {
                    return Err(ctx.failure(
                        "reads to go on after a dropped read",
                        format!("{error:?} after {} bytes ({polls} polls)", got.len()),
                    ));
                }
            }
        }
        ctx.ensure(
            got == body,
            "the same reader to return the whole body after reads dropped mid-way",
            format!(
                "{} bytes of {} (reads dropped after {polls} polls), first difference at {:?}",
                got.len(),
                body.len(),
                got.iter().zip(&body).position(|(a, b)| a != b)
            ),
        )?;
    }
    Ok(())
}

/// A reader whose read is dropped while waiting loses nothing (its next read returns the next
/// bytes), and a reader dropped mid-body disturbs neither the writer nor the other readers.
pub async fn reader_cancelled_mid_read(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    let body = pattern(8 * 1024, 5);
    let pieces = check::chunks(&body, 1024);
    let key = CacheKey::from("cancelled-reader");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    let mut patient = check::expect_hit(&ctx, "lookup for the patient reader", &key)
        .await?
        .body;
    let mut dropped = check::expect_hit(&ctx, "lookup for the reader to drop", &key)
        .await?
        .body;
    let mut other = check::expect_hit(&ctx, "lookup for another reader", &key)
        .await?
        .body;
    let mut set = JoinSet::new();
    // Poll a read of an empty body once and drop it: a waiting read cancelled.
    check::expect_read_pending(&ctx, "a read before any byte", &mut *patient).await?;
    check::write(&ctx, "first chunk", &mut *writer, pieces[0].clone()).await?;
    let mut got = Vec::new();
    let first = ctx
        .step(
            "the patient reader's read after its cancelled read",
            patient.read(),
        )
        .await?;
    match first {
        Ok(Some(chunk)) => got.extend_from_slice(&chunk),
        other => {
            return Err(ctx.failure(
                "the first chunk after a cancelled read",
                format!("{other:?}"),
            ));
        }
    }
    // Cancel the patient reader once more, in the middle of the body.
    if got.len() == pieces[0].len() {
        check::expect_read_pending(
            &ctx,
            "a read at the end of the written bytes",
            &mut *patient,
        )
        .await?;
    }
    // The reader to drop reads a little and goes away while a read is pending.
    let partial = ctx
        .step("the dropped reader's first read", dropped.read())
        .await?;
    ctx.ensure(
        matches!(&partial, Ok(Some(_))),
        "the reader to drop to get the first chunk",
        format!("{partial:?}"),
    )?;
    let _ = dropped.read().now_or_never();
    drop(dropped);
    spawn_drain(
        &mut set,
        &ctx,
        "a reader beside the cancelled ones".into(),
        other,
    );
    other = check::expect_hit(&ctx, "lookup after a reader was dropped", &key)
        .await?
        .body;
    spawn_drain(
        &mut set,
        &ctx,
        "a reader attached after a reader was dropped".into(),
        other,
    );
    for piece in &pieces[1..] {
        check::write(
            &ctx,
            "writing after readers were cancelled",
            &mut *writer,
            piece.clone(),
        )
        .await?;
        tokio::task::yield_now().await;
    }
    check::finish(
        &ctx,
        "finish after readers were cancelled",
        writer,
        body.len() as u64,
    )
    .await?;
    let rest = check::drain(&ctx, "the patient reader's remaining bytes", &mut *patient).await?;
    got.extend_from_slice(&rest.bytes);
    check::check_body(
        &ctx,
        "the reader whose reads were cancelled",
        &Drained {
            bytes: got,
            end: rest.end,
        },
        &body,
    )?;
    expect_all_bodies(&ctx, set, &body).await
}

/// `purge` of an in-progress object: returns `Ok(true)`; its reader (and one waiting) gets the
/// prefix then `Err(Aborted(Purged))` without any further writer action; the writer's next write
/// and `finish` fail with `Purged`; lookups miss.
pub async fn purge_during_read(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    let key = CacheKey::from("purged-in-progress");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    check::write(
        &ctx,
        "writing a prefix",
        &mut *writer,
        Bytes::from_static(b"prefix"),
    )
    .await?;
    let mut reader = check::expect_hit(&ctx, "lookup of the in-progress object", &key)
        .await?
        .body;
    let waiting = check::expect_hit(&ctx, "second lookup", &key).await?.body;
    let mut set = JoinSet::new();
    spawn_drain(
        &mut set,
        &ctx,
        "a reader waiting when the purge came".into(),
        waiting,
    );
    let first = ctx.step("reading the prefix", reader.read()).await?;
    ctx.ensure(
        matches!(&first, Ok(Some(chunk)) if chunk.as_ref() == b"prefix"),
        "the reader to get the prefix",
        format!("{first:?}"),
    )?;
    tokio::task::yield_now().await;
    let purged = ctx
        .step("purge of the in-progress object", ctx.storage().purge(&key))
        .await?;
    ctx.ensure(
        matches!(purged, Ok(true)),
        "purge of an in-progress object to return Ok(true)",
        format!("{purged:?}"),
    )?;
    check::expect_aborted(
        &ctx,
        "the reader after the purge",
        &mut *reader,
        b"",
        AbortKind::Purged,
    )
    .await?;
    while let Some(joined) = ctx
        .step("the waiting reader's task", set.join_next())
        .await?
    {
        let (what, drained) =
            joined.map_err(|error| ctx.failure("the reader task to finish", format!("{error}")))?;
        let drained = drained?;
        let ended_right = matches!(&drained.end, Err(stream_cache::BodyError::Aborted(reason)) if reason.kind() == AbortKind::Purged);
        ctx.ensure(
            drained.bytes == b"prefix" && ended_right,
            format!("{what}: the prefix, then Err(Aborted(Purged))"),
            format!(
                "{}, then {}",
                check::describe_bytes(&drained.bytes, b"prefix"),
                check::describe_end(&drained.end)
            ),
        )?;
    }
    let write = ctx
        .step(
            "writing after the purge",
            writer.write(Bytes::from_static(b"more")),
        )
        .await?;
    ctx.ensure(
        matches!(write, Err(WriteError::Aborted(AbortReason::Purged))),
        "a write after the purge to fail with Aborted(Purged)",
        format!("{write:?}"),
    )?;
    check::expect_finish_aborted(&ctx, "finish after the purge", writer, AbortKind::Purged).await?;
    check::expect_miss(&ctx, "lookup after the purge", &key).await
}

/// `purge` of a complete object while a reader is part-way: lookups miss at once, and the reader
/// either reads the whole body and ends cleanly or ends with an error, never a clean end after a
/// truncated body.
pub async fn purge_complete_object(ctx: Ctx) -> CaseResult {
    let body = pattern(16 * 1024, 6);
    let key = CacheKey::from("purged-complete");
    check::store(&ctx, &key, ObjectMeta::default(), &body).await?;
    let mut hit = check::expect_hit(&ctx, "lookup of the complete object", &key).await?;
    let first = ctx.step("reading the first chunk", hit.body.read()).await?;
    let mut got = match first {
        Ok(Some(chunk)) => chunk.to_vec(),
        other => {
            return Err(ctx.failure("the first chunk of a complete object", format!("{other:?}")));
        }
    };
    let purged = ctx
        .step("purge of the complete object", ctx.storage().purge(&key))
        .await?;
    ctx.ensure(
        matches!(purged, Ok(true)),
        "purge of a complete object to return Ok(true)",
        format!("{purged:?}"),
    )?;
    check::expect_miss(&ctx, "lookup after the purge", &key).await?;
    let state = hit.body.state();
    ctx.ensure(
        matches!(state, WriteState::Complete(n) if n == body.len() as u64),
        format!("the purged object's reader to still report Complete({}) (terminal states never change)", body.len()),
        format!("{state:?}"),
    )?;
    let rest = check::drain(&ctx, "the reader after the purge", &mut *hit.body).await?;
    got.extend_from_slice(&rest.bytes);
    check::check_never_truncated(
        &ctx,
        "the reader of the purged complete object",
        &Drained {
            bytes: got,
            end: rest.end,
        },
        &body,
    )
}

/// Three readers wait at the end of the written bytes, each with a read in progress; every append
/// must wake every one of them (not only some, and not only a later event), and so must the end:
/// `finish` (then `Ok(None)`) and, on another write, the writer's drop (then
/// `Err(Aborted(WriterDropped))`). Checked with wakers that record their wake-up, so a reader
/// woken late (by the next append) fails as surely as one never woken.
pub async fn waiting_readers_woken_by_every_event(ctx: Ctx) -> CaseResult {
    ctx.require(Need::PartialReads)?;
    let limit = ctx.settings().step_timeout;
    let body = pattern(5 * 300, 16);
    let pieces = check::chunks(&body, 300);
    let key = CacheKey::from("woken");
    let mut writer = check::begin(&ctx, "begin_write", &key, ObjectMeta::default()).await?;
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(
            check::expect_hit(&ctx, "lookup for a waiting reader", &key)
                .await?
                .body,
        );
    }
    let mut got = vec![Vec::new(); readers.len()];
    for (round, piece) in pieces.iter().enumerate() {
        let probes: Vec<WakeProbe> = readers.iter().map(|_| WakeProbe::new()).collect();
        let mut reads: Vec<_> = readers.iter_mut().map(|reader| reader.read()).collect();
        for (i, (read, probe)) in reads.iter_mut().zip(&probes).enumerate() {
            if let Poll::Ready(result) = probe.settle(read, ctx.settings().settle).await {
                return Err(ctx.failure(
                    format!("reader {i}: a read at the end of the written bytes to wait"),
                    format!("{result:?}"),
                ));
            }
        }
        check::write(&ctx, "appending", &mut *writer, piece.clone()).await?;
        for (i, probe) in probes.iter().enumerate() {
            ctx.ensure(
                probe.wait(limit).await,
                format!(
                    "reader {i}, waiting at offset {}, to be woken by the append of chunk {round}",
                    round * 300
                ),
                "not woken: a lost (or late) wake-up",
            )?;
        }
        for (i, read) in reads.into_iter().enumerate() {
            match ctx.step("the woken read", read).await? {
                Ok(Some(chunk)) => got[i].extend_from_slice(&chunk),
                other => {
                    return Err(ctx.failure(
                        format!("reader {i}: the appended bytes after its wake-up"),
                        format!("{other:?}"),
                    ));
                }
            }
        }
        // A backend may return an append in several pieces: catch up to the writer.
        for (i, reader) in readers.iter_mut().enumerate() {
            while got[i].len() < (round + 1) * 300 {
                match ctx.step("catching up", reader.read()).await? {
                    Ok(Some(chunk)) => got[i].extend_from_slice(&chunk),
                    other => {
                        return Err(ctx.failure(
                            format!("reader {i}: the rest of chunk {round}"),
                            format!("{other:?}"),
                        ));
                    }
                }
            }
        }
    }
    let probes: Vec<WakeProbe> = readers.iter().map(|_| WakeProbe::new()).collect();
    let mut reads: Vec<_> = readers.iter_mut().map(|reader| reader.read()).collect();
    for (i, (read, probe)) in reads.iter_mut().zip(&probes).enumerate() {
        if let Poll::Ready(result) = probe.settle(read, ctx.settings().settle).await {
            return Err(ctx.failure(
                format!("reader {i}: a read at the end of the written bytes to wait"),
                format!("{result:?}"),
            ));
        }
    }
    check::finish(&ctx, "finish", writer, body.len() as u64).await?;
    for (i, (read, probe)) in reads.into_iter().zip(&probes).enumerate() {
        ctx.ensure(
            probe.wait(limit).await,
            format!("reader {i}, waiting at the end, to be woken by finish"),
            "not woken: a lost wake-up",
        )?;
        let end = ctx.step("the read after finish", read).await?;
        ctx.ensure(
            matches!(end, Ok(None)),
            format!("reader {i}: Ok(None) after finish"),
            format!("{end:?}"),
        )?;
        check::check_body(
            &ctx,
            &format!("reader {i}"),
            &Drained {
                bytes: std::mem::take(&mut got[i]),
                end: Ok(()),
            },
            &body,
        )?;
    }

    let dropped = CacheKey::from("woken-by-drop");
    let mut writer = check::begin(&ctx, "begin_write", &dropped, ObjectMeta::default()).await?;
    check::write(&ctx, "writing a prefix", &mut *writer, pieces[0].clone()).await?;
    let mut readers = Vec::new();
    for _ in 0..2 {
        let mut reader = check::expect_hit(&ctx, "lookup for a waiting reader", &dropped)
            .await?
            .body;
        let first = ctx.step("reading the prefix", reader.read()).await?;
        ctx.ensure(
            matches!(&first, Ok(Some(chunk)) if chunk.len() == 300),
            "the 300-byte prefix",
            format!("{first:?}"),
        )?;
        readers.push(reader);
    }
    let probes: Vec<WakeProbe> = readers.iter().map(|_| WakeProbe::new()).collect();
    let mut reads: Vec<_> = readers.iter_mut().map(|reader| reader.read()).collect();
    for (i, (read, probe)) in reads.iter_mut().zip(&probes).enumerate() {
        if let Poll::Ready(result) = probe.settle(read, ctx.settings().settle).await {
            return Err(ctx.failure(
                format!("reader {i}: a read at the end of the written bytes to wait"),
                format!("{result:?}"),
            ));
        }
    }
    drop(writer);
    for (i, (read, probe)) in reads.into_iter().zip(&probes).enumerate() {
        ctx.ensure(
            probe.wait(limit).await,
            format!("reader {i}, waiting at the end, to be woken by the writer's drop"),
            "not woken: a lost wake-up",
        )?;
        let end = ctx.step("the read after the drop", read).await?;
        ctx.ensure(
            matches!(&end, Err(stream_cache::BodyError::Aborted(reason)) if reason.kind() == AbortKind::WriterDropped),
            format!("reader {i}: Err(Aborted(WriterDropped)) after the writer's drop"),
            format!("{end:?}"),
        )?;
    }
    Ok(())
}
