//! Cases for more than one write of a key: two writers at once never mix their bodies and a
//! reader stays bound to the write it attached to; replacing a complete object.

use bytes::Bytes;
use stream_cache::{CacheKey, ObjectMeta};

use super::check::{self, Drained, pattern};
use super::{Ctx, Need};
use crate::report::CaseResult;

/// Two writers for one key, interleaved; the second (newer) finishes first, the first finishes
/// last. Lookups see the newer write from the moment it began and keep seeing it; a reader of the
/// older write gets exactly the older bytes (all of them and a clean end if its `finish`
/// succeeded, else a prefix and an error); a reader of the newer one gets the newer bytes.
pub async fn concurrent_writers_one_key(ctx: Ctx) -> CaseResult {
    let partial = ctx.has(Need::PartialReads);
    let key = CacheKey::from("two-writers");
    let old_body = b"one-1|one-2|".to_vec();
    let new_body = b"two-1|two-2|".to_vec();

    let mut old = check::begin(&ctx, "begin_write (older)", &key, ObjectMeta::new("one")).await?;
    check::write(
        &ctx,
        "older writer, chunk 1",
        &mut *old,
        Bytes::from_static(b"one-1|"),
    )
    .await?;
    let old_reader = if partial {
        Some(
            check::expect_hit(&ctx, "lookup during the older write", &key)
                .await?
                .body,
        )
    } else {
        None
    };
    let mut new = check::begin(&ctx, "begin_write (newer)", &key, ObjectMeta::new("two")).await?;
    check::write(
        &ctx,
        "newer writer, chunk 1",
        &mut *new,
        Bytes::from_static(b"two-1|"),
    )
    .await?;
    let new_reader = if partial {
        let hit = check::expect_hit(&ctx, "lookup after the newer write began", &key).await?;
        ctx.ensure(
            hit.meta.user == "two",
            "lookup after a second begin_write to return the newer write (meta \"two\")",
            format!("meta {:?}", hit.meta.user),
        )?;
        Some(hit.body)
    } else {
        check::expect_miss(
            &ctx,
            "lookup while only superseded or in-progress writes exist",
            &key,
        )
        .await?;
        None
    };
    let old_write = ctx
        .step(
            "older writer, chunk 2",
            old.write(Bytes::from_static(b"one-2|")),
        )
        .await?;
    check::write(
        &ctx,
        "newer writer, chunk 2",
        &mut *new,
        Bytes::from_static(b"two-2|"),
    )
    .await?;
    check::finish(&ctx, "newer writer's finish", new, new_body.len() as u64).await?;
    let old_finished = match old_write {
        Ok(()) => ctx
            .step("older writer's finish (after the newer one)", old.finish())
            .await?
            .is_ok(),
        Err(_) => false,
    };

    let mut hit = check::expect_hit(&ctx, "lookup after both writers finished", &key).await?;
    ctx.ensure(
        hit.meta.user == "two",
        "the key's object to be the newer write (meta \"two\") even though the older one finished last",
        format!("meta {:?}", hit.meta.user),
    )?;
    check::expect_body(&ctx, "reading the key's object", &mut *hit.body, &new_body).await?;

    if let Some(mut reader) = old_reader {
        let drained =
            check::drain(&ctx, "the reader bound to the older write", &mut *reader).await?;
        if old_finished {
            check::check_body(
                &ctx,
                "the reader bound to the older (finished) write",
                &drained,
                &old_body,
            )?;
        } else {
            ctx.ensure(
                drained.end.is_err(),
                "the reader bound to the older (failed) write to end with an error",
                check::describe_end(&drained.end),
            )?;
            check::check_never_truncated(
                &ctx,
                "the reader bound to the older write",
                &drained,
                &old_body,
            )?;
        }
    }
    if let Some(mut reader) = new_reader {
        check::expect_body(
            &ctx,
            "the reader bound to the newer write",
            &mut *reader,
            &new_body,
        )
        .await?;
    }
    Ok(())
}

/// Replace a complete object while a reader is part-way through it: lookups see the replacement
/// (in progress with partial reads, otherwise nothing until it finishes) and then its bytes and
/// meta; the old reader still reads the whole old body and ends cleanly.
pub async fn replacing_an_object(ctx: Ctx) -> CaseResult {
    let key = CacheKey::from("replaced");
    let old_body = pattern(10 * 1024, 7);
    let new_body = pattern(12 * 1024, 8);
    check::store(&ctx, &key, ObjectMeta::new("old"), &old_body).await?;
    let mut old_hit = check::expect_hit(&ctx, "lookup of the old object", &key).await?;
    let first = ctx
        .step("reading the old object's first chunk", old_hit.body.read())
        .await?;
    let mut got = match first {
        Ok(Some(chunk)) => chunk.to_vec(),
        other => return Err(ctx.failure("the old object's first chunk", format!("{other:?}"))),
    };

    let mut writer = check::begin(
        &ctx,
        "begin_write of the replacement",
        &key,
        ObjectMeta::new("new"),
    )
    .await?;
    let pieces = check::chunks(&new_body, ctx.settings().chunk_size);
    check::write(
        &ctx,
        "writing the replacement",
        &mut *writer,
        pieces[0].clone(),
    )
    .await?;
    match check::lookup(&ctx, "lookup during the replacement", &key).await? {
        Some(hit) if hit.meta.user == "new" && ctx.has(Need::PartialReads) => {}
        None if !ctx.has(Need::PartialReads) => {}
        Some(hit) => {
            return Err(ctx.failure(
                "lookup during the replacement to return the replacement in progress (or nothing without partial reads), never the replaced object",
                format!("a hit with meta {:?}", hit.meta.user),
            ));
        }
        None => {
            return Err(ctx.failure(
                "lookup during the replacement to return the replacement in progress (partial_reads is declared)",
                "None",
            ));
        }
    }
    for piece in &pieces[1..] {
        check::write(&ctx, "writing the replacement", &mut *writer, piece.clone()).await?;
    }
    check::finish(
        &ctx,
        "finishing the replacement",
        writer,
        new_body.len() as u64,
    )
    .await?;
    let mut new_hit = check::expect_hit(&ctx, "lookup after the replacement", &key).await?;
    ctx.ensure(
        new_hit.meta.user == "new",
        "the replacement's meta (\"new\")",
        format!("{:?}", new_hit.meta.user),
    )?;
    check::expect_body(
        &ctx,
        "reading the replacement",
        &mut *new_hit.body,
        &new_body,
    )
    .await?;

    let rest = check::drain(
        &ctx,
        "the reader of the replaced object",
        &mut *old_hit.body,
    )
    .await?;
    got.extend_from_slice(&rest.bytes);
    check::check_body(
        &ctx,
        "the reader of the replaced object",
        &Drained {
            bytes: got,
            end: rest.end,
        },
        &old_body,
    )
}
