//! The `tracing` events of a flight: what an operator sees for a lead, a join, a hand-off, an
//! abandon, a takeover, a wait timeout and a finish, and that with no subscriber listening no
//! key is ever formatted.
//!
//! A minimal capturing subscriber is written here (the crate depends on `tracing` only).

use std::fmt::{self, Write as _};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coalesce::{FlightError, Group, Joined};
use futures::FutureExt;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Each event as `LEVEL message field=value ...` (fields in their declared order).
#[derive(Clone, Default)]
struct Capture {
    lines: Arc<Mutex<Vec<String>>>,
    next_span: Arc<AtomicU64>,
}

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

impl Subscriber for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "coalesce" && *metadata.level() <= Level::DEBUG
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

fn leads(
    joined: Option<Joined<'_, u32, u32, std::convert::Infallible>>,
) -> coalesce::Leader<'_, u32, u32, std::convert::Infallible> {
    match joined {
        Some(Joined::Leader(leader)) => leader,
        _ => panic!("expected to lead"),
    }
}

#[test]
fn a_hand_off_and_a_finish_are_traced_with_labelled_keys() {
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let group: Group<u32, u32> = Group::builder().trace_keys().build();

    let first = leads(group.join(7).now_or_never());
    let mut follower = pin!(group.join(7));
    assert!(follower.as_mut().now_or_never().is_none());
    drop(first);
    let promoted = leads(follower.as_mut().now_or_never());
    let generation = promoted.generation();
    assert_eq!(promoted.finish(Ok(1)), Ok(1));

    let lines = capture.take();
    assert!(
        lines[0].starts_with("DEBUG leads the fill generation="),
        "{lines:?}"
    );
    assert!(lines[0].ends_with("key=7"), "{lines:?}");
    assert_eq!(lines[1], "DEBUG joined a fill in progress key=7");
    assert!(
        lines[2].starts_with("DEBUG leader dropped before finishing"),
        "{lines:?}"
    );
    assert_eq!(
        lines[3],
        format!("DEBUG was handed the lead of a fill generation={generation} key=7")
    );
    assert_eq!(
        lines[4],
        format!("DEBUG fill finished generation={generation} key=7 outcome=\"ok\"")
    );
    assert_eq!(lines.len(), 5, "{lines:?}");
}

#[test]
fn keys_are_left_out_unless_the_group_labels_them() {
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let group: Group<u32, u32> = Group::new();
    let leader = leads(group.join(7).now_or_never());
    let generation = leader.generation();
    assert_eq!(leader.finish(Ok(1)), Ok(1));
    assert_eq!(
        capture.take(),
        [
            format!("DEBUG leads the fill generation={generation}"),
            format!("DEBUG fill finished generation={generation} outcome=\"ok\""),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn run_times_its_fill_and_a_takeover_is_a_warning() {
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let group: Group<u32, u32> = Group::builder()
        .takeover_after(Duration::from_secs(1))
        .trace_keys()
        .build();
    let stuck = leads(group.join(1).now_or_never());
    tokio::time::advance(Duration::from_secs(2)).await;
    let value = group.run(1, || async { Ok(5) }).await;
    assert_eq!(value, Ok(5));
    drop(stuck);
    let lines = capture.take();
    assert!(
        lines[1].starts_with("WARN took over a fill older than takeover_after"),
        "{lines:?}"
    );
    assert!(lines[2].starts_with("DEBUG fill finished"), "{lines:?}");
    assert!(lines[2].contains(" outcome=\"ok\" elapsed="), "{lines:?}");
    assert_eq!(group.stats().taken_over, 1);
}

#[tokio::test(start_paused = true)]
async fn a_wait_timeout_is_traced() {
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let group: Group<u32, u32> = Group::builder()
        .wait_timeout(Duration::from_millis(10))
        .trace_keys()
        .build();
    let leader = leads(group.join(3).now_or_never());
    let waited = group.run(3, || async { Ok(0) }).await;
    assert_eq!(waited, Err(FlightError::WaitTimedOut));
    assert_eq!(leader.finish(Ok(3)), Ok(3));
    let lines = capture.take();
    assert_eq!(lines[1], "DEBUG joined a fill in progress key=3");
    assert_eq!(
        lines[2],
        "DEBUG wait for another caller's fill timed out key=3"
    );
}

static FORMATTED: AtomicUsize = AtomicUsize::new(0);

fn counting_label(key: &u32, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    FORMATTED.fetch_add(1, Ordering::Relaxed);
    write!(f, "{key}")
}

#[test]
fn with_no_subscriber_no_key_is_formatted() {
    let group: Group<u32, u32> = Group::builder().trace_keys_with(counting_label).build();
    for key in 0..3 {
        let leader = leads(group.join(key).now_or_never());
        let mut follower = pin!(group.join(key));
        assert!(follower.as_mut().now_or_never().is_none());
        drop(leader);
        let promoted = leads(follower.as_mut().now_or_never());
        assert_eq!(promoted.finish(Ok(key)), Ok(key));
        let run = group.run(key, || async move { Ok(key) }).now_or_never();
        assert_eq!(run, Some(Ok(key)));
    }
    assert_eq!(FORMATTED.load(Ordering::Relaxed), 0);
    // The same steps with a subscriber do format it.
    let _default = tracing::subscriber::set_default(Capture::default());
    let run = group.run(9, || async { Ok(9) }).now_or_never();
    assert_eq!(run, Some(Ok(9)));
    assert!(FORMATTED.load(Ordering::Relaxed) > 0);
}
