//! Configuration of a [`Group`].

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use crate::ErrorPolicy;
use crate::group::Group;
use crate::trace::KeyLabel;

/// The settings a group runs with; see [`GroupBuilder`] for what each one means.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) wait_timeout: Option<Duration>,
    pub(crate) takeover_after: Option<Duration>,
    pub(crate) shards: usize,
    pub(crate) on_error: ErrorPolicy,
    /// The clock of lead ages in the loom build (see `loom_seams.rs`).
    #[cfg(herd_loom)]
    pub(crate) clock: crate::loom_seams::ManualClock,
    /// The `group` label of this group's metrics.
    #[cfg(feature = "metrics")]
    pub(crate) metrics_name: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            wait_timeout: None,
            takeover_after: None,
            shards: default_shards(),
            on_error: ErrorPolicy::Share,
            #[cfg(herd_loom)]
            clock: Default::default(),
            #[cfg(feature = "metrics")]
            metrics_name: None,
        }
    }
}

/// More shards than this buy nothing but memory.
const MAX_SHARDS: usize = 1 << 16;

/// Four shards per core, as a power of two between 4 and 256: enough that unrelated keys rarely
/// share a lock, few enough that `in_flight()` stays cheap.
fn default_shards() -> usize {
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    (cores * 4).next_power_of_two().clamp(4, 256)
}

/// The group's type parameters, held without owning any `K`, `V` or `E` (so the builder is
/// `Send + Sync` whatever they are).
type Types<K, V, E> = fn() -> (K, V, E);

/// Builds a [`Group`] with non-default settings.
///
/// ```
/// use std::time::Duration;
/// use coalesce::{ErrorPolicy, Group};
///
/// let group: Group<String, u64, std::io::Error> = Group::builder()
///     .wait_timeout(Duration::from_secs(2))
///     .takeover_after(Duration::from_secs(30))
///     .on_error(ErrorPolicy::HandOff)
///     .shards(16)
///     .build();
/// # let _ = group;
/// ```
#[derive(Debug)]
pub struct GroupBuilder<K, V, E> {
    pub(crate) config: Config,
    key_label: KeyLabel<K>,
    _types: PhantomData<Types<K, V, E>>,
}

impl<K, V, E> Default for GroupBuilder<K, V, E> {
    fn default() -> Self {
        Self {
            config: Config::default(),
            key_label: None,
            _types: PhantomData,
        }
    }
}

impl<K, V, E> GroupBuilder<K, V, E> {
    /// A follower gives up with [`FlightError::WaitTimedOut`](crate::FlightError::WaitTimedOut) after
    /// waiting this long; the flight itself goes on. Default: wait as long as the flight lasts.
    /// Uses tokio's timer: waits then need a tokio runtime with time enabled.
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.config.wait_timeout = Some(timeout);
        self
    }

    /// A caller arriving when the current leader has held the lead longer than this becomes the
    /// new leader (with a new generation). The old leader's late `finish` is then ignored, so a
    /// fill stuck on a dead connection cannot block a key forever, and the key is still cached
    /// once the new leader finishes. Default: never.
    pub fn takeover_after(mut self, age: Duration) -> Self {
        self.config.takeover_after = Some(age);
        self
    }

    /// Number of independently locked shards (rounded up to a power of two, between 1 and
    /// 65,536).
    pub fn shards(mut self, shards: usize) -> Self {
        self.config.shards = shards.clamp(1, MAX_SHARDS).next_power_of_two();
        self
    }

    /// What happens to waiting followers when the leader's fill fails. Default: share the error.
    pub fn on_error(mut self, policy: ErrorPolicy) -> Self {
        self.config.on_error = policy;
        self
    }

    /// Labels keys in this group's `tracing` events (a `key` field) with `K`'s `Debug`. The
    /// key is formatted only when a subscriber records the event. Default: events carry the
    /// lead's `generation` but no key (keys may be personal data, or costly to format).
    pub fn trace_keys(mut self) -> Self
    where
        K: fmt::Debug,
    {
        self.key_label = Some(<K as fmt::Debug>::fmt);
        self
    }

    /// Labels keys in this group's `tracing` events with `label` (to redact or shorten them),
    /// as [`trace_keys`](GroupBuilder::trace_keys) does with `Debug`.
    pub fn trace_keys_with(
        mut self,
        label: fn(&K, &mut fmt::Formatter<'_>) -> fmt::Result,
    ) -> Self {
        self.key_label = Some(label);
        self
    }

    /// Names the group in its metrics (the label `group`; unnamed groups' metrics have no
    /// such label and add up together). The metrics are:
    ///
    /// | metric | kind | what |
    /// |---|---|---|
    /// | `coalesce_led_total` | counter | [`Stats::led`](crate::Stats::led) |
    /// | `coalesce_joined_total` | counter | [`Stats::joined`](crate::Stats::joined) |
    /// | `coalesce_handed_off_total` | counter | [`Stats::handed_off`](crate::Stats::handed_off) |
    /// | `coalesce_taken_over_total` | counter | [`Stats::taken_over`](crate::Stats::taken_over) |
    /// | `coalesce_abandoned_total` | counter | [`Stats::abandoned`](crate::Stats::abandoned) |
    /// | `coalesce_wait_timeouts_total` | counter | [`Stats::wait_timeouts`](crate::Stats::wait_timeouts) |
    /// | `coalesce_failed_total` | counter | [`Stats::failed`](crate::Stats::failed) |
    /// | `coalesce_fill_duration_seconds` | histogram, `outcome` = `ok` / `failed` | from taking a lead to finishing it |
    /// | `coalesce_follower_wait_seconds` | histogram | a follower's wait, until it got a result, was handed the lead, gave up or was dropped |
    ///
    /// Handles are registered by [`build`](GroupBuilder::build) with the recorder installed
    /// then: install the recorder before building groups.
    #[cfg(feature = "metrics")]
    pub fn metrics_name(mut self, name: impl Into<String>) -> Self {
        self.config.metrics_name = Some(name.into());
        self
    }

    /// Builds the group.
    pub fn build(self) -> Group<K, V, E> {
        Group::with_config(self.config, self.key_label)
    }
}
