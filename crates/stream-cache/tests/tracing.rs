//! The fill pump's `tracing` events: a subscriber sees each fill start and end with its key,
//! outcome, abort cause and bytes, inside a `stream_cache.fill` span.

mod common;

use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::drain;
use futures::StreamExt;
use stream_cache::{MemStorage, ObjectMeta, StreamCache, Upstream};

/// Everything the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn fill_events_carry_key_outcome_cause_and_bytes() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let cache = StreamCache::new(MemStorage::new(1 << 20));
        let dies = || async {
            Ok::<_, io::Error>(Upstream::new(
                ObjectMeta::new("m"),
                futures::stream::iter([
                    Ok(Bytes::from_static(b"abc")),
                    Err(io::Error::other("reset")),
                ])
                .boxed(),
            ))
        };
        let mut hit = cache.get_or_fill("video/7", dies).await.unwrap();
        assert!(drain(&mut *hit.body).await.1.is_err());
        let ok = || async {
            Ok::<_, io::Error>(Upstream::new(
                ObjectMeta::new("m"),
                futures::stream::iter([Ok(Bytes::from_static(b"hello"))]).boxed(),
            ))
        };
        let mut hit = cache.get_or_fill("video/8", ok).await.unwrap();
        assert!(drain(&mut *hit.body).await.1.is_ok());
    });
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in\n{text}"))
            .to_owned()
    };
    assert!(line("fill started").contains("video/7"), "{text}");
    let aborted = line("outcome=\"aborted\"");
    for field in [
        "WARN",
        "video/7",
        "cause=Upstream",
        "bytes=3",
        "elapsed_ms=",
        "stream_cache.fill",
    ] {
        assert!(aborted.contains(field), "{field} missing in {aborted}");
    }
    let completed = line("outcome=\"completed\"");
    for field in ["DEBUG", "video/8", "bytes=5"] {
        assert!(completed.contains(field), "{field} missing in {completed}");
    }
}
