//! The read-through `tracing` events: a lead, a join, a finish with its outcome and duration,
//! a batch, keys labelled only when the cache asks for it, and nothing at all for a hit.
//!
//! A minimal capturing subscriber is written here (the crate depends on `tracing` only).

// The crate's `clippy.toml` keeps std's atomics out of the crate's own modules (its hit-path
// tests log writes through its wrappers); this test's counters are not one of them.
#![allow(clippy::disallowed_types)]

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};
use ttl_lru::{Cache, ManualClock};

/// Each event as `LEVEL message field=value ...`.
#[derive(Clone, Default)]
struct Capture {
    lines: Arc<Mutex<Vec<String>>>,
    next_span: Arc<AtomicU64>,
}

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => {
                let _ = write!(self.0, " {value:?}");
            }
            // Durations vary: only their presence is checked.
            "elapsed_ms" => self.0.push_str(" elapsed_ms"),
            name => {
                let _ = write!(self.0, " {name}={value:?}");
            }
        }
    }
}

impl Subscriber for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "ttl_lru" && *metadata.level() <= Level::DEBUG
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut line = Line(event.metadata().level().to_string());
        event.record(&mut line);
        self.lines.lock().unwrap().push(line.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Capture {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.lines.lock().unwrap())
    }
}

fn forever(_: &u32) -> Duration {
    Duration::MAX
}

#[tokio::test(flavor = "current_thread")]
async fn a_fill_its_join_and_its_outcome_are_traced_and_a_hit_is_not() {
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let c: Cache<u32, u32> = Cache::builder(10)
        .name("traced-fills")
        .clock(ManualClock::new())
        .trace_keys()
        .build();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let lead = c.get_or_try_insert(7, forever, || async move {
        released.await.unwrap();
        Ok::<u32, ()>(70)
    });
    let join = c.get_or_try_insert(7, forever, || async { Ok::<u32, ()>(0) });
    let (a, b) = tokio::join!(lead, async {
        tokio::task::yield_now().await;
        release.send(()).unwrap();
        join.await
    });
    assert_eq!((a.unwrap().value, b.unwrap().value), (70, 70));
    assert_eq!(
        capture.take(),
        vec![
            "DEBUG leads the fill cache=\"traced-fills\" key=7".to_string(),
            "DEBUG fill finished cache=\"traced-fills\" key=7 outcome=\"stored\" elapsed_ms"
                .to_string(),
            "DEBUG joined a fill cache=\"traced-fills\" outcome=\"value\"".to_string(),
        ]
    );
    assert_eq!(c.get(&7), Some(70));
    let hit = c
        .get_or_try_insert(7, forever, || async { Ok::<u32, ()>(0) })
        .await;
    assert_eq!(hit.unwrap().value, 70);
    assert_eq!(capture.take(), Vec::<String>::new(), "hits emit nothing");

    let failed = c
        .get_or_try_insert(8, forever, || async { Err::<u32, _>(()) })
        .await;
    assert!(failed.is_err());
    let lines = capture.take();
    assert_eq!(
        lines[1],
        "DEBUG fill finished cache=\"traced-fills\" key=8 outcome=\"failed\" elapsed_ms"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn keys_are_left_out_unless_asked_for_and_batches_are_traced() {
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let c: Cache<u32, u32> = Cache::builder(10).clock(ManualClock::new()).build();
    let got = c
        .get_or_try_insert_many([1, 2], forever, |keys| async move {
            Ok::<_, ()>(keys.into_iter().map(|k| (k, k)).collect::<Vec<_>>())
        })
        .await;
    assert_eq!(got.len(), 2);
    let mut lines = capture.take();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "DEBUG batch fill keys=2".to_string(),
            "DEBUG fill finished outcome=\"stored\" elapsed_ms".to_string(),
            "DEBUG fill finished outcome=\"stored\" elapsed_ms".to_string(),
            "DEBUG leads the fill".to_string(),
            "DEBUG leads the fill".to_string(),
        ]
    );
}
