//! Configuration of a [`Group`].

use std::marker::PhantomData;
use std::time::Duration;

use crate::ErrorPolicy;
use crate::group::Group;

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
    _types: PhantomData<Types<K, V, E>>,
}

impl<K, V, E> Default for GroupBuilder<K, V, E> {
    fn default() -> Self {
        Self {
            config: Config::default(),
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

    /// Builds the group.
    pub fn build(self) -> Group<K, V, E> {
        Group::with_config(self.config)
    }
}
