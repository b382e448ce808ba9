//! Loom models of the partial-body cell (run with `cargo xtask loom`, or
//! `RUSTFLAGS="--cfg herd_loom" cargo test --release -p stream-cache --test loom --target-dir target/loom`).
//!
//! Each model checks, over every interleaving, that a reader never mistakes an aborted write for
//! a clean end, never misses a wake-up (a missed one shows up as a loom deadlock), and that a
//! terminal state never changes.
#![cfg(herd_loom)]

use bytes::Bytes;
use loom::future::block_on;
use loom::thread;
use stream_cache::loom_support::Cell;
use stream_cache::{AbortReason, BodyError, WriteState};

fn chunk(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

/// The writer appends then aborts while a reader waits: the reader gets every byte, then the
/// abort, never `Ok(None)`.
#[test]
fn abort_racing_read() {
    loom::model(|| {
        let cell = Cell::new(None);
        let mut reader = cell.reader();
        let writer = cell.clone();
        let write = thread::spawn(move || {
            writer.append(chunk("ab")).unwrap();
            assert!(writer.abort(AbortReason::WriterDropped));
        });
        let (body, end) = block_on(reader.read_all());
        write.join().unwrap();
        assert_eq!(body, b"ab");
        assert!(matches!(
            end,
            Err(BodyError::Aborted(AbortReason::WriterDropped))
        ));
        // Forever.
        assert!(matches!(
            block_on(reader.read()),
            Err(BodyError::Aborted(_))
        ));
    });
}

/// A reader attaches while the writer finishes: whenever it attaches, it reads the whole body
/// and a clean end.
#[test]
fn finish_racing_reader_attaching() {
    loom::model(|| {
        let cell = Cell::new(Some(4));
        let attaching = cell.clone();
        let read = thread::spawn(move || {
            let mut reader = attaching.reader();
            block_on(reader.read_all())
        });
        cell.append(chunk("xy")).unwrap();
        cell.append(chunk("zw")).unwrap();
        assert!(matches!(cell.complete(), Ok(4)));
        let (body, end) = read.join().unwrap();
        assert_eq!(body, b"xyzw");
        assert!(end.is_ok());
    });
}

/// Two readers wait while the writer appends and finishes: both see identical bytes and wake
/// up for every step (a lost wake-up deadlocks the model).
#[test]
fn several_readers_waiting_while_writer_appends() {
    loom::model(|| {
        let cell = Cell::new(None);
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let mut reader = cell.reader();
                thread::spawn(move || block_on(reader.read_all()))
            })
            .collect();
        cell.append(chunk("a")).unwrap();
        cell.append(chunk("b")).unwrap();
        cell.complete().unwrap();
        for reader in readers {
            let (body, end) = reader.join().unwrap();
            assert_eq!(body, b"ab");
            assert!(end.is_ok());
        }
    });
}

/// Readers waiting for the first byte are woken by the append itself: nothing terminal follows
/// to rescue a lost wake-up, so one shows up as a deadlock.
#[test]
fn append_wakes_every_waiting_reader() {
    loom::model(|| {
        let cell = Cell::new(None);
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let mut reader = cell.reader();
                thread::spawn(move || block_on(reader.read()))
            })
            .collect();
        cell.append(chunk("a")).unwrap();
        for reader in readers {
            assert_eq!(reader.join().unwrap().unwrap(), Some(chunk("a")));
        }
    });
}

/// Finish and abort race: exactly one wins, and the state never changes afterwards.
#[test]
fn complete_racing_abort_is_decided_once() {
    loom::model(|| {
        let cell = Cell::new(None);
        cell.append(chunk("data")).unwrap();
        let aborter = cell.clone();
        let abort = thread::spawn(move || aborter.abort(AbortReason::Purged));
        let completed = cell.complete();
        let aborted = abort.join().unwrap();
        assert!(
            completed.is_ok() != aborted,
            "exactly one terminal transition wins"
        );
        let mut reader = cell.reader();
        let (body, end) = block_on(reader.read_all());
        assert_eq!(body, b"data");
        match cell.state() {
            WriteState::Complete(4) => assert!(completed.is_ok() && end.is_ok()),
            WriteState::Aborted(AbortReason::Purged) => {
                assert!(aborted && matches!(end, Err(BodyError::Aborted(AbortReason::Purged))))
            }
            other => panic!("unexpected state {other:?}"),
        }
    });
}

/// A seek past the written length waits; an abort wakes it with the abort, never a success.
#[test]
fn seek_waiting_past_end_sees_abort() {
    loom::model(|| {
        let cell = Cell::new(None);
        let mut reader = cell.reader();
        let writer = cell.clone();
        let write = thread::spawn(move || {
            writer.append(chunk("ab")).unwrap();
            writer.abort(AbortReason::FillTimedOut);
        });
        let result = block_on(reader.seek(3, None));
        write.join().unwrap();
        assert!(matches!(
            result,
            Err(BodyError::Aborted(AbortReason::FillTimedOut))
        ));
    });
}

/// The write fence (issue 15), on `MemStorage` itself (its index lock, the fence table and the
/// cell all go through the loom shim).
mod fence {
    use super::*;
    use std::sync::Arc;
    use stream_cache::{MemStorage, ObjectMeta, Storage};

    fn write_body(
        storage: &MemStorage,
        fence: stream_cache::WriteFence,
        body: &'static str,
    ) -> bool {
        block_on(async {
            let key = "k".into();
            let Ok(mut writer) = storage
                .begin_write_fenced(&key, ObjectMeta::default(), fence)
                .await
            else {
                return false;
            };
            if writer.write(chunk(body)).await.is_err() {
                return false;
            }
            writer.finish().await.is_ok()
        })
    }

    fn current_body(storage: &MemStorage) -> Option<(Vec<u8>, Result<(), BodyError>)> {
        block_on(async {
            let mut hit = storage.lookup(&"k".into()).await.unwrap()?;
            let mut body = Vec::new();
            loop {
                match hit.body.read().await {
                    Ok(Some(bytes)) => body.extend_from_slice(&bytes),
                    Ok(None) => return Some((body, Ok(()))),
                    Err(error) => return Some((body, Err(error))),
                }
            }
        })
    }

    /// A fill that started before the purge races it through `begin_write`, `write` and
    /// `finish`: once `purge` returns, the key never shows that fill's body again.
    #[test]
    fn purge_is_final_against_a_fill_that_started_before_it() {
        loom::model(|| {
            let storage = Arc::new(MemStorage::new(1024));
            let fence = storage.fence(&"k".into());
            let filler = {
                let storage = Arc::clone(&storage);
                thread::spawn(move || write_body(&storage, fence, "old"))
            };
            block_on(storage.purge(&"k".into())).unwrap();
            // Right after the purge (the fill may still be running) ...
            if let Some((body, end)) = current_body(&storage) {
                panic!("purged key served {body:?} ending {end:?}");
            }
            // ... and after it ended, however it ended (it may have finished before the purge,
            // which then removed it).
            filler.join().unwrap();
            assert!(current_body(&storage).is_none());
        });
    }

    /// Two fills race with fences taken in order: the newer one is the key's object at the end,
    /// whichever reached `begin_write` first.
    #[test]
    fn newer_fence_wins_the_race() {
        loom::model(|| {
            let storage = Arc::new(MemStorage::new(1024));
            let older = storage.fence(&"k".into());
            let newer = storage.fence(&"k".into());
            let old = {
                let storage = Arc::clone(&storage);
                thread::spawn(move || write_body(&storage, older, "old"))
            };
            assert!(write_body(&storage, newer, "new"));
            old.join().unwrap();
            let (body, end) = current_body(&storage).expect("the newer write is stored");
            assert_eq!(body, b"new");
            assert!(end.is_ok());
        });
    }

    /// A fill takes its fence while a purge runs: whatever is visible at the end is that fill's
    /// complete body (it counted as started after the purge), never a visible body that fails.
    #[test]
    fn fence_taken_while_purging_is_decided_once() {
        loom::model(|| {
            let storage = Arc::new(MemStorage::new(1024));
            let filler = {
                let storage = Arc::clone(&storage);
                thread::spawn(move || {
                    let fence = storage.fence(&"k".into());
                    write_body(&storage, fence, "body")
                })
            };
            block_on(storage.purge(&"k".into())).unwrap();
            let finished = filler.join().unwrap();
            // Otherwise: fenced out, or finished before the purge removed it.
            if let Some((body, end)) = current_body(&storage) {
                assert!(finished);
                assert_eq!(body, b"body");
                assert!(end.is_ok());
            }
        });
    }
}

/// A fill whose readers all left aborts only if none is attached, in one step with readers
/// attaching, and a lookup attaches before it reads the state: a reader that attached first
/// keeps its body (the abort does not happen), and one that attaches after finds the write
/// aborted and is a miss. Never a hit that then reads `NoReaders`.
#[test]
fn abort_if_unread_racing_a_lookup_attaching() {
    loom::model(|| {
        let cell = Cell::new(None);
        cell.append(chunk("ab")).unwrap();
        let attaching = cell.clone();
        let lookup = thread::spawn(move || {
            let mut reader = attaching.reader();
            if matches!(attaching.state(), WriteState::Aborted(_)) {
                return None;
            }
            Some(block_on(reader.read_all()))
        });
        let aborted = cell.abort_if_unread(AbortReason::NoReaders);
        if !aborted {
            cell.append(chunk("cd")).unwrap();
            cell.complete().unwrap();
        }
        match lookup.join().unwrap() {
            None => assert!(aborted),
            Some((body, end)) => {
                assert!(!aborted, "a hit under an abort");
                assert_eq!(body, b"abcd");
                assert!(end.is_ok(), "{end:?}");
            }
        }
    });
}
