//! Cancellation sweeps over the storage API: the write path, the read path and purge, each future
//! dropped after every possible number of polls (see [`crate::sweep`]). After each drop: nothing
//! is stuck (the key can be written and read again), and any body the dropped future left behind
//! is terminal and never looks complete unless it is.
//!
//! The storage is wrapped in `Faulty` with one pending poll per operation, so every storage call
//! is an await point to drop at, even on backends whose calls complete in one poll.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use stream_cache::{AbortKind, BodySource, BodyWriter, CacheKey, ObjectMeta, Storage, WriteState};

use super::check::{self, pattern};
use super::{Ctx, Need};
use crate::faulty::{FaultPlan, Faulty};
use crate::report::{CaseError, CaseResult};
use crate::sweep::{SweepError, SweepLimits, cancel_sweep};

type Slot<T> = Arc<Mutex<Option<T>>>;

fn stalled(ctx: &Ctx) -> Arc<dyn Storage> {
    Arc::new(Faulty::new(
        Arc::clone(ctx.storage()),
        FaultPlan::new().pending(1),
    ))
}

fn limits(ctx: &Ctx) -> SweepLimits {
    SweepLimits {
        max_polls: ctx.settings().max_sweep_polls,
        wake_timeout: ctx.settings().step_timeout,
    }
}

/// Turn a sweep error into this case's failure, saying where the future was dropped.
fn sweep_failure(ctx: &Ctx, what: &str, error: SweepError<CaseError>) -> CaseError {
    let finish = format!("{what} to complete under the sweep");
    crate::runner::sweep_failure(ctx.case(), what, &finish, error)
}

/// Whatever a dropped write left behind must be terminal: a `Partial` body nobody can finish
/// would leave its readers waiting forever.
async fn check_left_behind(
    ctx: &Ctx,
    source: Option<Arc<dyn BodySource>>,
    key: &CacheKey,
    body: &[u8],
) -> CaseResult {
    if let Some(source) = source {
        let state = source.state();
        ctx.ensure(
            state.is_terminal(),
            "the dropped write's body to be terminal (aborted, or complete if finish was applied)",
            format!("{state:?}"),
        )?;
        let mut reader = source.open();
        let drained = check::drain(ctx, "a reader of the dropped write", &mut *reader).await?;
        check::check_never_truncated(ctx, "a reader of the dropped write", &drained, body)?;
        if matches!(state, WriteState::Complete(_)) {
            check::check_body(
                ctx,
                "a reader of the dropped but completed write",
                &drained,
                body,
            )?;
        }
    }
    if let Some(mut hit) = check::lookup(ctx, "lookup after the drop", key).await? {
        let state = hit.body.state();
        ctx.ensure(
            matches!(state, WriteState::Complete(_)),
            "lookup after a dropped write to miss, or find the write complete",
            format!("a hit in state {state:?}"),
        )?;
        check::expect_body(ctx, "the object found after the drop", &mut *hit.body, body).await?;
    }
    // Nothing stuck: the key can be written and read again.
    let fresh = pattern(100, 13);
    check::store(ctx, key, ObjectMeta::default(), &fresh).await?;
    check::expect_stored(ctx, "rewriting the key after the drop", key, &fresh).await
}

/// Sweep `begin_write` + 3 writes + `finish`: dropped anywhere, the write ends aborted (or
/// complete, if the completion was applied) and lookups never see a partial body.
pub async fn cancel_sweep_write(ctx: Ctx) -> CaseResult {
    let storage = stalled(&ctx);
    let body = pattern(3000, 12);
    let pieces = check::chunks(&body, 1000);
    let source: Slot<Arc<dyn BodySource>> = Arc::default();
    let make = |n: usize| {
        let storage = Arc::clone(&storage);
        let source = Arc::clone(&source);
        let pieces = pieces.clone();
        *source.lock().expect("not poisoned") = None;
        async move {
            let key = CacheKey::from(format!("sweep-write-{n}"));
            let mut writer = storage
                .begin_write(&key, ObjectMeta::default().with_len(3000))
                .await
                .map_err(|e| format!("begin_write: {e:?}"))?;
            *source.lock().expect("not poisoned") = writer.source();
            for piece in pieces {
                writer
                    .write(piece)
                    .await
                    .map_err(|e| format!("write: {e:?}"))?;
            }
            writer.finish().await.map_err(|e| format!("finish: {e:?}"))
        }
    };
    let check = |n: usize, output: Option<Result<u64, String>>| {
        let ctx = ctx.clone();
        let body = body.clone();
        let left = source.lock().expect("not poisoned").take();
        async move {
            let key = CacheKey::from(format!("sweep-write-{n}"));
            if let Some(output) = output {
                ctx.ensure(
                    output == Ok(3000),
                    "the undisturbed write to finish with Ok(3000)",
                    format!("{output:?}"),
                )?;
                return check::expect_stored(&ctx, "the written object", &key, &body).await;
            }
            check_left_behind(&ctx, left, &key, &body).await
        }
    };
    cancel_sweep(limits(&ctx), make, check)
        .await
        .map(drop)
        .map_err(|error| sweep_failure(&ctx, "the write future", error))
}

/// Sweep a lookup plus a read to the end of a complete object (and, with partial reads, of an
/// in-progress one): dropped anywhere, the next reader reads everything and the writer is not
/// disturbed.
pub async fn cancel_sweep_read(ctx: Ctx) -> CaseResult {
    let storage = stalled(&ctx);
    let body = pattern(4000, 14);
    let key = CacheKey::from("sweep-read");
    check::store(&ctx, &key, ObjectMeta::default(), &body).await?;
    let make = |_| {
        let storage = Arc::clone(&storage);
        let key = key.clone();
        async move {
            let mut hit = storage
                .lookup(&key)
                .await
                .map_err(|e| format!("{e:?}"))?
                .ok_or("miss")?;
            stream_cache::read_to_end(&mut *hit.body)
                .await
                .map_err(|e| format!("{e:?}"))
        }
    };
    let check = |_, output: Option<Result<Vec<u8>, String>>| {
        let ctx = ctx.clone();
        let (key, body) = (key.clone(), body.clone());
        async move {
            if let Some(output) = output {
                ctx.ensure(
                    output.as_deref() == Ok(&body[..]),
                    "the undisturbed read to return the whole body",
                    format!("{:?}", output.map(|bytes| bytes.len())),
                )?;
            }
            check::expect_stored(&ctx, "a fresh reader after the dropped one", &key, &body).await
        }
    };
    cancel_sweep(limits(&ctx), make, check)
        .await
        .map_err(|error| sweep_failure(&ctx, "the read future", error))?;

    if !ctx.has(Need::PartialReads) {
        return Ok(());
    }
    let open = CacheKey::from("sweep-read-partial");
    let mut writer = check::begin(&ctx, "begin_write", &open, ObjectMeta::default()).await?;
    check::write(
        &ctx,
        "writing",
        &mut *writer,
        Bytes::copy_from_slice(&body[..2000]),
    )
    .await?;
    let witness = check::expect_hit(&ctx, "lookup for a witness reader", &open)
        .await?
        .body;
    let writer: Slot<Box<dyn BodyWriter>> = Arc::new(Mutex::new(Some(writer)));
    let make = |_| {
        let storage = Arc::clone(&storage);
        let open = open.clone();
        async move {
            let mut hit = storage
                .lookup(&open)
                .await
                .map_err(|e| format!("{e:?}"))?
                .ok_or("miss")?;
            let mut got = 0;
            while got < 2000 {
                got += hit
                    .body
                    .read()
                    .await
                    .map_err(|e| format!("{e:?}"))?
                    .ok_or("early end")?
                    .len();
            }
            Ok::<usize, String>(got)
        }
    };
    let check = |_, output: Option<Result<usize, String>>| {
        let ctx = ctx.clone();
        let alive = writer
            .lock()
            .expect("not poisoned")
            .as_ref()
            .map(|w| w.state());
        async move {
            if let Some(output) = output {
                ctx.ensure(
                    output == Ok(2000),
                    "the undisturbed read to get the 2000 written bytes",
                    format!("{output:?}"),
                )?;
            }
            ctx.ensure(
                matches!(alive, Some(WriteState::Partial(2000))),
                "the writer to be undisturbed by a dropped reader (Partial(2000))",
                format!("{alive:?}"),
            )
        }
    };
    cancel_sweep(limits(&ctx), make, check)
        .await
        .map_err(|error| sweep_failure(&ctx, "the partial read future", error))?;
    let mut writer = writer
        .lock()
        .expect("not poisoned")
        .take()
        .expect("still there");
    check::write(
        &ctx,
        "writing after the sweep",
        &mut *writer,
        Bytes::copy_from_slice(&body[2000..]),
    )
    .await?;
    check::finish(&ctx, "finish after the sweep", writer, body.len() as u64).await?;
    let mut witness = witness;
    check::expect_body(&ctx, "the witness reader", &mut *witness, &body).await
}

/// Sweep a future that begins a write, writes a prefix, hands the writer out, then purges the
/// key. Dropped anywhere, a second `purge` completes the job: lookups miss, the write is aborted
/// (`Purged`, or `WriterDropped` if the writer never got out), its readers end with that error
/// after the prefix, and the writer's next write fails.
pub async fn cancel_sweep_purge(ctx: Ctx) -> CaseResult {
    let storage = stalled(&ctx);
    let writer: Slot<Box<dyn BodyWriter>> = Arc::default();
    let source: Slot<Arc<dyn BodySource>> = Arc::default();
    let make = |n: usize| {
        let (storage, writer, source) = (
            Arc::clone(&storage),
            Arc::clone(&writer),
            Arc::clone(&source),
        );
        *writer.lock().expect("not poisoned") = None;
        *source.lock().expect("not poisoned") = None;
        async move {
            let key = CacheKey::from(format!("sweep-purge-{n}"));
            let mut w = storage
                .begin_write(&key, ObjectMeta::default())
                .await
                .map_err(|e| format!("{e:?}"))?;
            w.write(Bytes::from_static(b"prefix"))
                .await
                .map_err(|e| format!("{e:?}"))?;
            *source.lock().expect("not poisoned") = w.source();
            *writer.lock().expect("not poisoned") = Some(w);
            storage.purge(&key).await.map_err(|e| format!("{e:?}"))
        }
    };
    let check = |n: usize, output: Option<Result<bool, String>>| {
        let ctx = ctx.clone();
        let w = writer.lock().expect("not poisoned").take();
        let s = source.lock().expect("not poisoned").take();
        async move {
            let key = CacheKey::from(format!("sweep-purge-{n}"));
            if let Some(output) = output {
                ctx.ensure(
                    output == Ok(true),
                    "the undisturbed purge to return Ok(true)",
                    format!("{output:?}"),
                )?;
            }
            let again = ctx.step("purging again", ctx.storage().purge(&key)).await?;
            ctx.ensure(
                again.is_ok(),
                "a second purge to succeed",
                format!("{again:?}"),
            )?;
            check::expect_miss(&ctx, "lookup after the purge", &key).await?;
            let expected = if w.is_some() {
                AbortKind::Purged
            } else {
                AbortKind::WriterDropped
            };
            if let Some(source) = s {
                let mut reader = source.open();
                check::expect_aborted(
                    &ctx,
                    "a reader of the purged write",
                    &mut *reader,
                    b"prefix",
                    expected,
                )
                .await?;
            }
            if let Some(mut w) = w {
                let write = ctx
                    .step("writing after the purge", w.write(Bytes::from_static(b"x")))
                    .await?;
                ctx.ensure(
                    write.is_err(),
                    "a write after the purge to fail",
                    format!("{write:?}"),
                )?;
            }
            Ok(())
        }
    };
    cancel_sweep(limits(&ctx), make, check)
        .await
        .map(drop)
        .map_err(|error| sweep_failure(&ctx, "the purge future", error))
}
