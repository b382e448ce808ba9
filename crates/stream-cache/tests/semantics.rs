//! The storage semantics of issue 4, each run against `MemStorage` and `DiskStorage`: aborts are
//! never a clean end, readers see identical bytes whenever they attach, a cancelled reader
//! disturbs nobody, two writers for one key never mix, and range reads on partial bodies.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::drain;
use stream_cache::{
    AbortKind, AbortReason, BodyError, ByteRange, CacheKey, ObjectMeta, Storage, WriteError,
    WriteState,
};

fn key(name: &str) -> CacheKey {
    CacheKey::from(name)
}

fn aborted_kind(result: &Result<(), BodyError>) -> Option<AbortKind> {
    match result {
        Err(BodyError::Aborted(reason)) => Some(reason.kind()),
        _ => None,
    }
}

/// Write a prefix, attach a reader, read the prefix, then fail the write with `fail`; the reader
/// must get `Err(Aborted(expected))` (twice), never `Ok(None)`, and a new lookup must miss.
async fn prefix_then_failure(
    storage: Arc<dyn Storage>,
    meta: ObjectMeta,
    expected: AbortKind,
    fail: impl AsyncFnOnce(Box<dyn stream_cache::BodyWriter>, &Arc<dyn Storage>),
) {
    let k = key("object");
    let mut writer = storage.begin_write(&k, meta).await.unwrap();
    writer.write(Bytes::from_static(b"hello ")).await.unwrap();
    let mut hit = storage
        .lookup(&k)
        .await
        .unwrap()
        .expect("partial body visible");
    assert_eq!(
        hit.body.read().await.unwrap(),
        Some(Bytes::from_static(b"hello "))
    );

    fail(writer, &storage).await;

    assert!(
        storage.lookup(&k).await.unwrap().is_none(),
        "aborted object must not be found"
    );
    for _ in 0..2 {
        match hit.body.read().await {
            Err(BodyError::Aborted(reason)) => assert_eq!(reason.kind(), expected),
            other => panic!("expected Err(Aborted({expected:?})), got {other:?}"),
        }
    }
    assert!(matches!(hit.body.state(), WriteState::Aborted(r) if r.kind() == expected));
}

both_backends!(exact_bug_writer_dropped, None, |storage: Arc<
    dyn Storage,
>| async move {
    prefix_then_failure(
        storage,
        ObjectMeta::default(),
        AbortKind::WriterDropped,
        async |w, _| drop(w),
    )
    .await;
});

both_backends!(explicit_upstream_abort, None, |storage: Arc<
    dyn Storage,
>| async move {
    prefix_then_failure(
        storage,
        ObjectMeta::default(),
        AbortKind::Upstream,
        async |w, _| {
            w.abort(AbortReason::upstream(std::io::Error::other(
                "connection reset",
            )))
        },
    )
    .await;
});

both_backends!(length_mismatch_at_finish, None, |storage: Arc<
    dyn Storage,
>| async move {
    prefix_then_failure(
        storage,
        ObjectMeta::default().with_len(100),
        AbortKind::LengthMismatch,
        async |w, _| match w.finish().await {
            Err(WriteError::Aborted(AbortReason::LengthMismatch {
                expected: 100,
                written: 6,
            })) => {}
            other => panic!("finish must fail with the mismatch, got {other:?}"),
        },
    )
    .await;
});

both_backends!(length_overrun_on_write, None, |storage: Arc<
    dyn Storage,
>| async move {
    prefix_then_failure(
        storage,
        ObjectMeta::default().with_len(8),
        AbortKind::LengthMismatch,
        async |mut w, _| match w.write(Bytes::from_static(b"world")).await {
            Err(WriteError::Aborted(AbortReason::LengthMismatch {
                expected: 8,
                written: 11,
            })) => {}
            other => panic!("overrun must abort, got {other:?}"),
        },
    )
    .await;
});

both_backends!(
    too_large,
    Some(10),
    |storage: Arc<dyn Storage>| async move {
        prefix_then_failure(
            storage,
            ObjectMeta::default(),
            AbortKind::TooLarge,
            async |mut w, _| {
                match w.write(Bytes::from_static(b"world")).await {
                    Err(WriteError::Aborted(AbortReason::TooLarge { limit: 10 })) => {}
                    other => panic!("expected TooLarge, got {other:?}"),
                }
                // The writer stays failed.
                assert!(w.write(Bytes::from_static(b"x")).await.is_err());
                assert!(w.finish().await.is_err());
            },
        )
        .await;
    }
);

both_backends!(declared_too_large_is_refused, Some(10), |storage: Arc<
    dyn Storage,
>| async move {
    let result = storage
        .begin_write(&key("big"), ObjectMeta::default().with_len(11))
        .await;
    assert!(matches!(
        result,
        Err(stream_cache::StorageError::TooLarge {
            limit: 10,
            declared: 11
        })
    ));
    assert!(storage.lookup(&key("big")).await.unwrap().is_none());
});

both_backends!(
    purge_mid_stream,
    None,
    |storage: Arc<dyn Storage>| async move {
        prefix_then_failure(
            storage,
            ObjectMeta::default(),
            AbortKind::Purged,
            async |mut w, s| {
                assert!(s.purge(&key("object")).await.unwrap());
                assert!(matches!(
                    w.write(Bytes::from_static(b"more")).await,
                    Err(WriteError::Aborted(AbortReason::Purged))
                ));
                assert!(w.finish().await.is_err());
            },
        )
        .await;
    }
);

both_backends!(
    readers_before_during_after_see_identical_bytes,
    None,
    |storage: Arc<dyn Storage>| async move {
        let k = key("shared");
        let mut writer = storage.begin_write(&k, ObjectMeta::new("m")).await.unwrap();
        let source = writer.source().expect("partial reads supported");
        let mut expected = Vec::new();
        let mut readers = Vec::new();
        let spawn_reader = |mut body: Box<dyn stream_cache::BodyReader>| {
            tokio::spawn(async move { drain(&mut *body).await })
        };
        readers.push(spawn_reader(source.open())); // before the first byte
        for i in 0..200u32 {
            let chunk = Bytes::from(format!("chunk-{i};").repeat(1 + (i as usize % 7)));
            expected.extend_from_slice(&chunk);
            writer.write(chunk).await.unwrap();
            if i % 40 == 0 {
                readers.push(spawn_reader(
                    storage.lookup(&k).await.unwrap().unwrap().body,
                ));
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(writer.finish().await.unwrap(), expected.len() as u64);
        readers.push(spawn_reader(
            storage.lookup(&k).await.unwrap().unwrap().body,
        )); // after the end
        readers.push(spawn_reader(source.open())); // after the end, through the write's source
        for reader in readers {
            let (body, end) = reader.await.unwrap();
            assert!(end.is_ok(), "{end:?}");
            assert_eq!(body, expected);
        }
    }
);

both_backends!(
    many_concurrent_readers_no_lost_wakeup,
    None,
    |storage: Arc<dyn Storage>| async move {
        let k = key("fanout");
        let mut writer = storage
            .begin_write(&k, ObjectMeta::default())
            .await
            .unwrap();
        let source = writer.source().unwrap();
        let readers: Vec<_> = (0..32)
            .map(|_| {
                let mut body = source.open();
                tokio::spawn(async move { drain(&mut *body).await })
            })
            .collect();
        let mut expected = Vec::new();
        for i in 0..300u32 {
            let chunk = Bytes::from(i.to_le_bytes().to_vec());
            expected.extend_from_slice(&chunk);
            writer.write(chunk).await.unwrap();
            if i % 3 == 0 {
                tokio::task::yield_now().await;
            }
        }
        writer.finish().await.unwrap();
        for reader in readers {
            let (body, end) = reader.await.unwrap();
            assert!(end.is_ok());
            assert_eq!(body, expected);
        }
    }
);

both_backends!(
    cancelled_reader_leaves_others_untouched,
    None,
    |storage: Arc<dyn Storage>| async move {
        let k = key("cancel");
        let mut writer = storage
            .begin_write(&k, ObjectMeta::default())
            .await
            .unwrap();
        let source = writer.source().unwrap();
        let mut survivor = source.open();
        let mut victim = source.open();
        assert_eq!(source.reader_count(), Some(2));
        writer.write(Bytes::from_static(b"abc")).await.unwrap();
        assert_eq!(victim.read().await.unwrap().as_deref(), Some(&b"abc"[..]));
        // The victim waits for more, then is cancelled mid-read, then dropped.
        {
            let pending = victim.read();
            tokio::pin!(pending);
            assert!(futures::poll!(pending.as_mut()).is_pending());
        }
        drop(victim);
        assert_eq!(source.reader_count(), Some(1));
        writer.write(Bytes::from_static(b"def")).await.unwrap();
        writer.finish().await.unwrap();
        let (body, end) = drain(&mut *survivor).await;
        assert!(end.is_ok());
        assert_eq!(body, b"abcdef");
    }
);

both_backends!(cancelled_read_does_not_lose_bytes, None, |storage: Arc<
    dyn Storage,
>| async move {
    let k = key("cancel-read");
    let mut writer = storage
        .begin_write(&k, ObjectMeta::default())
        .await
        .unwrap();
    let mut reader = writer.source().unwrap().open();
    {
        let pending = reader.read();
        tokio::pin!(pending);
        assert!(futures::poll!(pending.as_mut()).is_pending());
    }
    writer.write(Bytes::from_static(b"xyz")).await.unwrap();
    writer.finish().await.unwrap();
    let (body, end) = drain(&mut *reader).await;
    assert!(end.is_ok());
    assert_eq!(body, b"xyz");
});

both_backends!(
    two_writers_never_mix,
    None,
    |storage: Arc<dyn Storage>| async move {
        let k = key("contended");
        let mut first = storage
            .begin_write(&k, ObjectMeta::new("first"))
            .await
            .unwrap();
        first.write(Bytes::from_static(b"AAAA")).await.unwrap();
        let mut first_reader = storage.lookup(&k).await.unwrap().unwrap();
        assert_eq!(first_reader.meta.user, "first");

        let mut second = storage
            .begin_write(&k, ObjectMeta::new("second"))
            .await
            .unwrap();
        second.write(Bytes::from_static(b"BBBB")).await.unwrap();
        let mut second_reader = storage.lookup(&k).await.unwrap().unwrap();
        assert_eq!(second_reader.meta.user, "second");

        second.write(Bytes::from_static(b"BB")).await.unwrap();
        second.finish().await.unwrap();
        // The superseded writer finishes last; it must not replace the newer object.
        first.write(Bytes::from_static(b"AA")).await.unwrap();
        first.finish().await.unwrap();

        assert_eq!(drain(&mut *first_reader.body).await.0, b"AAAAAA");
        assert_eq!(drain(&mut *second_reader.body).await.0, b"BBBBBB");
        let mut latest = storage.lookup(&k).await.unwrap().unwrap();
        assert_eq!(latest.meta.user, "second");
        let (body, end) = drain(&mut *latest.body).await;
        assert!(end.is_ok());
        assert_eq!(body, b"BBBBBB");
    }
);

both_backends!(
    superseded_write_outlives_aborted_successor,
    None,
    |storage: Arc<dyn Storage>| async move {
        let k = key("contended");
        let mut first = storage
            .begin_write(&k, ObjectMeta::default())
            .await
            .unwrap();
        let mut first_reader = first.source().unwrap().open();
        first.write(Bytes::from_static(b"one")).await.unwrap();
        let second = storage
            .begin_write(&k, ObjectMeta::default())
            .await
            .unwrap();
        drop(second); // the newer write fails
        assert!(storage.lookup(&k).await.unwrap().is_none());
        first.finish().await.unwrap();
        let (body, end) = drain(&mut *first_reader).await;
        assert!(end.is_ok());
        assert_eq!(body, b"one");
    }
);

both_backends!(
    replacing_an_object,
    None,
    |storage: Arc<dyn Storage>| async move {
        let k = key("replace");
        for version in ["v1", "version-two"] {
            let mut w = storage
                .begin_write(&k, ObjectMeta::new(version))
                .await
                .unwrap();
            w.write(Bytes::copy_from_slice(version.as_bytes()))
                .await
                .unwrap();
            w.finish().await.unwrap();
        }
        let mut hit = storage.lookup(&k).await.unwrap().unwrap();
        assert_eq!(hit.meta.user, "version-two");
        assert_eq!(drain(&mut *hit.body).await.0, b"version-two");
    }
);

both_backends!(empty_body_and_meta_round_trip, None, |storage: Arc<
    dyn Storage,
>| async move {
    let k = key("empty");
    let meta = ObjectMeta::new(Bytes::from_static(b"\x00binary meta\xff")).with_len(0);
    let w = storage.begin_write(&k, meta.clone()).await.unwrap();
    assert_eq!(w.finish().await.unwrap(), 0);
    let mut hit = storage.lookup(&k).await.unwrap().unwrap();
    assert_eq!(hit.meta, meta);
    assert_eq!(hit.body.read().await.unwrap(), None);
    assert_eq!(hit.body.read().await.unwrap(), None);
    assert!(matches!(hit.body.state(), WriteState::Complete(0)));
});

both_backends!(large_body_in_many_chunks, None, |storage: Arc<
    dyn Storage,
>| async move {
    let k = key("large");
    let mut w = storage
        .begin_write(&k, ObjectMeta::default().with_len(3 << 20))
        .await
        .unwrap();
    let mut expected = Vec::with_capacity(3 << 20);
    for i in 0..192u32 {
        let chunk: Vec<u8> = (0..16 * 1024)
            .map(|j| (i as usize * 31 + j) as u8)
            .collect();
        expected.extend_from_slice(&chunk);
        w.write(Bytes::from(chunk)).await.unwrap();
    }
    w.finish().await.unwrap();
    let mut hit = storage.lookup(&k).await.unwrap().unwrap();
    let (body, end) = drain(&mut *hit.body).await;
    assert!(end.is_ok());
    assert!(body == expected, "large body differs");
});

/// A write of `k` in progress with `hello ` written, and a reader attached to it.
async fn hello_in_progress(
    storage: &Arc<dyn Storage>,
    k: &CacheKey,
) -> (Box<dyn stream_cache::BodyWriter>, stream_cache::Hit) {
    let mut w = storage.begin_write(k, ObjectMeta::default()).await.unwrap();
    w.write(Bytes::from_static(b"hello ")).await.unwrap();
    let hit = storage
        .lookup(k)
        .await
        .unwrap()
        .expect("partial body visible");
    (w, hit)
}

/// Writes `world` and finishes; the reader gets `hello world` and a clean end.
async fn world_then_the_whole_body(
    mut w: Box<dyn stream_cache::BodyWriter>,
    mut hit: stream_cache::Hit,
) {
    w.write(Bytes::from_static(b"world")).await.unwrap();
    assert_eq!(w.finish().await.unwrap(), 11);
    let (body, end) = drain(&mut *hit.body).await;
    assert!(end.is_ok(), "the attached reader ends cleanly: {end:?}");
    assert_eq!(body, b"hello world".to_vec());
}

// An invalidation (not a purge) detaches a write in progress: the reader attached before it
// gets the whole body and a clean end, the writer finishes, later lookups miss, the write never
// becomes the key's object, and its bytes are given back when it ends. A complete object goes
// for lookups while its open reader finishes. A write fenced before the invalidation never
// becomes visible (as after a purge).
both_backends!(
    invalidate_mid_stream_lets_readers_finish,
    None,
    |storage: Arc<dyn Storage>| async move {
        let k = key("object");
        let baseline = storage.usage().map(|u| u.used_bytes);
        let (w, hit) = hello_in_progress(&storage, &k).await;
        let fenced = storage.fence(&k);
        assert!(storage.invalidate(&k).await.unwrap());
        assert!(storage.lookup(&k).await.unwrap().is_none());
        world_then_the_whole_body(w, hit).await;
        assert!(
            storage.lookup(&k).await.unwrap().is_none(),
            "a detached write never becomes the key's object"
        );
        assert_eq!(storage.usage().map(|u| u.used_bytes), baseline);
        let late = storage
            .begin_write_fenced(&k, ObjectMeta::default(), fenced)
            .await
            .unwrap();
        assert!(matches!(
            late.state(),
            WriteState::Aborted(AbortReason::Purged)
        ));
        drop(late);

        let mut w = storage
            .begin_write(&k, ObjectMeta::default())
            .await
            .unwrap();
        w.write(Bytes::from_static(b"complete")).await.unwrap();
        w.finish().await.unwrap();
        let mut hit = storage.lookup(&k).await.unwrap().expect("stored");
        assert!(storage.invalidate(&k).await.unwrap());
        assert!(storage.lookup(&k).await.unwrap().is_none());
        let (body, end) = drain(&mut *hit.body).await;
        assert!(end.is_ok(), "{end:?}");
        assert_eq!(body, b"complete".to_vec());
        assert!(!storage.invalidate(&k).await.unwrap());
    }
);

// `invalidate` dropped after its first poll (`DiskStorage`: at its directory sync, when it has
// one to do) has already taken the key out of lookups, and detached rather than aborted its
// write; a second `invalidate` completes it. The detached write still completes for its
// reader.
both_backends!(
    invalidate_dropped_after_its_first_poll,
    None,
    |storage: Arc<dyn Storage>| async move {
        let k = key("object");
        let (w, hit) = hello_in_progress(&storage, &k).await;
        {
            let mut first = std::pin::pin!(storage.invalidate(&k));
            let _ = futures::poll!(first.as_mut());
        }
        assert!(storage.lookup(&k).await.unwrap().is_none());
        storage.invalidate(&k).await.unwrap();
        world_then_the_whole_body(w, hit).await;
        assert!(storage.lookup(&k).await.unwrap().is_none());
    }
);

both_backends!(lookup_after_abort_misses, None, |storage: Arc<
    dyn Storage,
>| async move {
    let k = key("gone");
    let mut w = storage
        .begin_write(&k, ObjectMeta::default())
        .await
        .unwrap();
    w.write(Bytes::from_static(b"partial")).await.unwrap();
    w.abort(AbortReason::FillTimedOut);
    assert!(storage.lookup(&k).await.unwrap().is_none());
    assert!(!storage.purge(&k).await.unwrap());
});

both_backends!(
    range_on_partial_body_waits_for_offset,
    None,
    |storage: Arc<dyn Storage>| async move {
        let k = key("range");
        let mut w = storage
            .begin_write(&k, ObjectMeta::default())
            .await
            .unwrap();
        w.write(Bytes::from_static(b"0123456789")).await.unwrap();
        let mut reader = w.source().unwrap().open();
        let seek =
            tokio::spawn(
                async move { reader.seek(ByteRange::from(15..25)).await.map(|()| reader) },
            );
        tokio::task::yield_now().await;
        w.write(Bytes::from_static(b"abcdefghij")).await.unwrap();
        w.write(Bytes::from_static(b"ABCDEFGHIJ")).await.unwrap();
        let mut reader = seek.await.unwrap().unwrap();
        let mut got = Vec::new();
        while got.len() < 10 {
            got.extend_from_slice(&reader.read().await.unwrap().unwrap());
        }
        assert_eq!(got, b"fghijABCDE");
        // The range is read, but the write is not finished: no clean end yet.
        {
            let next = reader.read();
            tokio::pin!(next);
            assert!(futures::poll!(next.as_mut()).is_pending());
        }
        w.finish().await.unwrap();
        assert_eq!(reader.read().await.unwrap(), None);
    }
);

both_backends!(
    range_end_of_aborted_write_is_an_error,
    None,
    |storage: Arc<dyn Storage>| async move {
        let k = key("range-abort");
        let mut w = storage
            .begin_write(&k, ObjectMeta::default())
            .await
            .unwrap();
        w.write(Bytes::from_static(b"0123456789")).await.unwrap();
        let mut reader = w.source().unwrap().open();
        reader.seek(ByteRange::from(2..5)).await.unwrap();
        assert_eq!(reader.read().await.unwrap().as_deref(), Some(&b"234"[..]));
        drop(w);
        let (_, end) = drain(&mut *reader).await;
        assert_eq!(aborted_kind(&end), Some(AbortKind::WriterDropped));
    }
);

both_backends!(
    seek_past_partial_then_abort_or_short_finish,
    None,
    |storage: Arc<dyn Storage>| async move {
        let mut w = storage
            .begin_write(&key("a"), ObjectMeta::default())
            .await
            .unwrap();
        let mut reader = w.source().unwrap().open();
        let seek = tokio::spawn(async move { reader.seek(ByteRange::from(50..)).await });
        w.write(Bytes::from_static(b"short")).await.unwrap();
        drop(w);
        assert!(matches!(
            seek.await.unwrap(),
            Err(BodyError::Aborted(AbortReason::WriterDropped))
        ));

        let mut w = storage
            .begin_write(&key("b"), ObjectMeta::default())
            .await
            .unwrap();
        let mut reader = w.source().unwrap().open();
        let seek = tokio::spawn(async move { reader.seek(ByteRange::from(50..)).await });
        w.write(Bytes::from_static(b"short")).await.unwrap();
        w.finish().await.unwrap();
        assert!(matches!(
            seek.await.unwrap(),
            Err(BodyError::RangeNotSatisfiable {
                start: 50,
                end: None,
                len: 5
            })
        ));
    }
);

both_backends!(bad_ranges_on_complete_body, None, |storage: Arc<
    dyn Storage,
>| async move {
    let k = key("ranges");
    let mut w = storage
        .begin_write(&k, ObjectMeta::default())
        .await
        .unwrap();
    w.write(Bytes::from_static(b"01234")).await.unwrap();
    w.write(Bytes::from_static(b"56789")).await.unwrap();
    w.finish().await.unwrap();
    let mut body = storage.lookup(&k).await.unwrap().unwrap().body;
    assert!(matches!(
        body.seek(ByteRange::from(11..)).await,
        Err(BodyError::RangeNotSatisfiable {
            start: 11,
            len: 10,
            ..
        })
    ));
    assert!(matches!(
        body.seek(ByteRange::from(5..11)).await,
        Err(BodyError::RangeNotSatisfiable {
            start: 5,
            end: Some(11),
            len: 10
        })
    ));
    assert!(matches!(
        body.seek(ByteRange::new(7, Some(3))).await,
        Err(BodyError::InvalidRange { start: 7, end: 3 })
    ));
    // A failed seek leaves the position alone.
    assert_eq!(body.position(), 0);
    body.seek(ByteRange::from(3..7)).await.unwrap();
    let (got, end) = drain(&mut *body).await;
    assert!(end.is_ok());
    assert_eq!(got, b"3456");
    body.seek(ByteRange::from(10..)).await.unwrap();
    assert_eq!(body.read().await.unwrap(), None);
    body.seek(ByteRange::from(..)).await.unwrap();
    assert_eq!(drain(&mut *body).await.0, b"0123456789");
});
