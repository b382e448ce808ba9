//! Memory-pressure control for every registered cache: a watcher that reads how much memory the
//! process may use and uses, and scales the capacity of all registered caches down while it is
//! short of headroom and back up once it has room again.
//!
//! Why not purge (KumoMTA's `lruttl` clears every cache when the process runs out of headroom):
//! a purge throws away the hot entries with the cold ones and lets every cache refill to the
//! same size, so the pressure comes straight back, now with a miss storm on top. Here every cache
//! keeps the same share of its configured ("nominal") capacity, `scale x nominal`: above the high
//! watermark the scale drops by `shrink_step` per check (each cache evicts its coldest entries by
//! its own policy, down to the new capacity), below the low watermark it grows back by
//! `grow_step`, and between the two it holds, so the caches do not oscillate around one line.
//!
//! The probe is pluggable ([`MemoryProbe`]): [`CgroupProbe`] reads the process's cgroup (v2, or
//! v1), and tests or other platforms supply their own. What it costs when idle: one probe read
//! per `interval` (for [`CgroupProbe`], three small file reads: a few microseconds), and nothing
//! else; the caches are touched only when the scale changes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error::RegistryError;
use crate::registry::{Managed, live};

/// How much memory the process may use and uses, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorySample {
    /// Bytes in use (for a cgroup: its working set, page cache that can be dropped excluded).
    pub used: u64,
    /// Bytes the process may use before it is killed or starts swapping.
    pub limit: u64,
}

impl MemorySample {
    /// `used / limit` (a limit of 0 reads as fully used).
    pub fn ratio(&self) -> f64 {
        if self.limit == 0 {
            1.0
        } else {
            self.used as f64 / self.limit as f64
        }
    }
}

/// Where the watcher reads memory use from.
pub trait MemoryProbe: Send + Sync + 'static {
    /// The current use and limit, or `None` when there is no limit to measure against (an
    /// unlimited cgroup) or the reading failed; the watcher then leaves every cache as it is.
    fn sample(&self) -> Option<MemorySample>;
}

impl<F> MemoryProbe for F
where
    F: Fn() -> Option<MemorySample> + Send + Sync + 'static,
{
    fn sample(&self) -> Option<MemorySample> {
        self()
    }
}

/// Reads the memory limit and working set of a Linux cgroup: v2 (`memory.max`,
/// `memory.current`, `memory.stat`'s `inactive_file`) or v1 (`memory.limit_in_bytes`,
/// `memory.usage_in_bytes`, `memory.stat`'s `total_inactive_file`).
///
/// Used memory is the working set, as the kubelet computes it: usage minus inactive file cache,
/// which the kernel reclaims before it runs out. Counting that cache as used would shrink the
/// caches of a process that merely read a large file.
#[derive(Debug, Clone)]
pub struct CgroupProbe {
    dir: PathBuf,
    version: CgroupVersion,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CgroupVersion {
    V1,
    V2,
}

impl CgroupProbe {
    /// The cgroup of this process, as mounted at `/sys/fs/cgroup` (v2: the unified hierarchy,
    /// which inside a container is the container's own group; v1: the `memory` controller), or
    /// `None` when neither is there.
    pub fn detect() -> Option<Self> {
        Self::at(Path::new("/sys/fs/cgroup"))
            .or_else(|| Self::at(Path::new("/sys/fs/cgroup/memory")))
    }

    /// The cgroup whose files are in `dir` (v2 if it has `memory.max`, v1 if it has
    /// `memory.limit_in_bytes`).
    pub fn at(dir: &Path) -> Option<Self> {
        let version = if dir.join("memory.max").is_file() {
            CgroupVersion::V2
        } else if dir.join("memory.limit_in_bytes").is_file() {
            CgroupVersion::V1
        } else {
            return None;
        };
        Some(CgroupProbe {
            dir: dir.to_owned(),
            version,
        })
    }

    fn read(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(file)).ok()
    }

    fn stat(&self, field: &str) -> u64 {
        self.read("memory.stat")
            .and_then(|stat| {
                stat.lines().find_map(|line| {
                    let (name, value) = line.split_once(' ')?;
                    (name == field).then(|| value.trim().parse().ok())?
                })
            })
            .unwrap_or(0)
    }
}

/// v1 reports "no limit" as a huge page-aligned number near `i64::MAX`.
const V1_UNLIMITED: u64 = 1 << 62;

impl MemoryProbe for CgroupProbe {
    fn sample(&self) -> Option<MemorySample> {
        let (limit_file, usage_file, inactive) = match self.version {
            CgroupVersion::V2 => ("memory.max", "memory.current", "inactive_file"),
            CgroupVersion::V1 => (
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "total_inactive_file",
            ),
        };
        let limit = self.read(limit_file)?;
        let limit: u64 = limit.trim().parse().ok()?; // "max" (v2): no limit
        if limit >= V1_UNLIMITED {
            return None;
        }
        let usage: u64 = self.read(usage_file)?.trim().parse().ok()?;
        Some(MemorySample {
            used: usage.saturating_sub(self.stat(inactive)),
            limit,
        })
    }
}

/// The watcher's thresholds and steps.
#[derive(Debug, Clone, PartialEq)]
pub struct PressureConfig {
    /// How often [`spawn_pressure_watcher`] checks (default 1 s).
    pub interval: Duration,
    /// Above this fraction of the limit the caches shrink (default 0.90).
    pub high_watermark: f64,
    /// Below this fraction they grow back towards their nominal capacity (default 0.75).
    pub low_watermark: f64,
    /// The scale drops by this fraction of itself per check above the high watermark
    /// (default 0.10: to 90 %, 81 %, ...).
    pub shrink_step: f64,
    /// The scale grows by this fraction of the nominal capacity per check below the low
    /// watermark (default 0.05), up to 1.
    pub grow_step: f64,
    /// The scale never drops below this (default 0.10): caches keep a tenth of their nominal
    /// capacity however tight memory is, so they still absorb the hottest keys.
    pub min_scale: f64,
}

impl Default for PressureConfig {
    fn default() -> Self {
        PressureConfig {
            interval: Duration::from_secs(1),
            high_watermark: 0.90,
            low_watermark: 0.75,
            shrink_step: 0.10,
            grow_step: 0.05,
            min_scale: 0.10,
        }
    }
}

impl PressureConfig {
    fn validate(&self) -> Result<(), RegistryError> {
        let fraction = |x: f64| (0.0..=1.0).contains(&x);
        let ok = self.low_watermark > 0.0
            && self.low_watermark < self.high_watermark
            && fraction(self.high_watermark)
            && self.shrink_step > 0.0
            && self.shrink_step < 1.0
            && self.grow_step > 0.0
            && fraction(self.grow_step)
            && self.min_scale > 0.0
            && fraction(self.min_scale);
        if !ok {
            return Err(RegistryError::BadPressureConfig(format!("{self:?}")));
        }
        if self.interval.is_zero() {
            return Err(RegistryError::ZeroInterval);
        }
        Ok(())
    }
}

/// What one [`PressureWatcher::check`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PressureAction {
    /// No reading (no limit, or the probe failed): nothing changed.
    NoReading,
    /// Between the watermarks, or already at the bound: nothing changed.
    Held {
        /// The current scale.
        scale: f64,
    },
    /// Capacities were lowered to `scale x nominal`; `evicted` entries went.
    Shrunk {
        /// The new scale.
        scale: f64,
        /// Entries evicted to fit the lower capacities.
        evicted: usize,
    },
    /// Capacities were raised towards nominal.
    Grew {
        /// The new scale.
        scale: f64,
    },
}

/// A registered cache as the watcher knows it: the capacity it would have without pressure, and
/// the capacity the watcher last gave it (to notice when somebody else resized it).
struct Tracked {
    cache: Weak<dyn Managed>,
    nominal: u64,
    last_set: u64,
}

/// The control loop, one [`check`](Self::check) at a time (what the spawned task runs every
/// `interval`; call it yourself to drive it from your own scheduler or a test).
pub struct PressureWatcher {
    probe: Box<dyn MemoryProbe>,
    config: PressureConfig,
    scale: f64,
    tracked: HashMap<usize, Tracked>,
}

impl std::fmt::Debug for PressureWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PressureWatcher")
            .field("config", &self.config)
            .field("scale", &self.scale)
            .field("tracked", &self.tracked.len())
            .finish_non_exhaustive()
    }
}

impl PressureWatcher {
    /// A watcher reading `probe`, at scale 1 (every cache at its nominal capacity).
    ///
    /// # Errors
    /// [`RegistryError::BadPressureConfig`] unless `0 < low < high <= 1`, both steps and
    /// `min_scale` are within `(0, 1]` (the shrink step below 1); [`RegistryError::ZeroInterval`].
    pub fn new(probe: impl MemoryProbe, config: PressureConfig) -> Result<Self, RegistryError> {
        config.validate()?;
        Ok(PressureWatcher {
            probe: Box::new(probe),
            config,
            scale: 1.0,
            tracked: HashMap::new(),
        })
    }

    /// The current scale: every registered cache's capacity is this times its nominal one.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Reads the probe once and moves the scale (at most one step) as the watermarks say.
    /// Caches registered since the last check join at the current scale; a cache whose capacity
    /// was changed by someone else since takes that capacity as its new nominal one.
    pub fn check(&mut self) -> PressureAction {
        let Some(sample) = self.probe.sample() else {
            return PressureAction::NoReading;
        };
        let ratio = sample.ratio();
        let c = &self.config;
        let target = if ratio > c.high_watermark {
            (self.scale * (1.0 - c.shrink_step)).max(c.min_scale)
        } else if ratio < c.low_watermark {
            (self.scale + c.grow_step).min(1.0)
        } else {
            self.scale
        };
        let changed = target != self.scale;
        let shrinking = target < self.scale;
        self.scale = target;
        let evicted = self.apply();
        match (changed, shrinking) {
            (false, _) => PressureAction::Held { scale: self.scale },
            (true, true) => PressureAction::Shrunk {
                scale: self.scale,
                evicted,
            },
            (true, false) => PressureAction::Grew { scale: self.scale },
        }
    }

    /// Gives every live registered cache `scale x nominal` (at least 1 where the nominal
    /// capacity is positive). Returns the entries evicted.
    fn apply(&mut self) -> usize {
        self.tracked.retain(|_, t| t.cache.strong_count() > 0);
        let mut evicted = 0;
        for cache in live() {
            // Identity by address: the registry holds each cache's `Arc` once.
            let id = Arc::as_ptr(&cache).cast::<()>() as usize;
            let current = cache.capacity();
            let tracked = self.tracked.entry(id).or_insert_with(|| Tracked {
                cache: Arc::downgrade(&cache),
                nominal: current,
                last_set: current,
            });
            if current != tracked.last_set {
                // Resized by someone else (registry::set_capacity, Cache::set_capacity): that
                // is the new nominal capacity.
                tracked.nominal = current;
            }
            let want = scaled(tracked.nominal, self.scale);
            if want != current {
                evicted += cache.set_capacity(want);
            }
            tracked.last_set = want;
        }
        evicted
    }
}

fn scaled(nominal: u64, scale: f64) -> u64 {
    if nominal == 0 {
        return 0;
    }
    if scale >= 1.0 {
        return nominal;
    }
    ((nominal as f64 * scale).round() as u64).clamp(1, nominal)
}

/// Spawns a tokio task that runs a [`PressureWatcher`] every `config.interval` until the handle
/// is aborted (opt-in, like [`spawn_maintenance`](crate::registry::spawn_maintenance)). Aborting
/// it leaves the caches at the scale they had; call
/// [`PressureWatcher::check`] with a probe that reports room, or resize them, to restore.
///
/// # Errors
/// As [`PressureWatcher::new`], and [`RegistryError::NoRuntime`] outside a tokio runtime.
pub fn spawn_pressure_watcher(
    probe: impl MemoryProbe,
    config: PressureConfig,
) -> Result<tokio::task::JoinHandle<()>, RegistryError> {
    let interval = config.interval;
    let mut watcher = PressureWatcher::new(probe, config)?;
    let handle = tokio::runtime::Handle::try_current().map_err(|_| RegistryError::NoRuntime)?;
    Ok(handle.spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match watcher.check() {
                PressureAction::Shrunk { scale, evicted } => {
                    tracing::warn!(scale, evicted, "memory pressure: caches shrunk");
                }
                PressureAction::Grew { scale } => {
                    tracing::info!(scale, "memory pressure eased: caches growing back");
                }
                PressureAction::NoReading | PressureAction::Held { .. } => {}
            }
        }
    }))
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> PathBuf {
        static NEXT: crate::sync::plain::AtomicUsize = crate::sync::plain::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ttl-lru-cgroup-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, crate::sync::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, body) in files {
            std::fs::write(dir.join(name), body).unwrap();
        }
        dir
    }

    #[test]
    fn cgroup_v2_reads_the_working_set() {
        let dir = dir_with(&[
            ("memory.max", "1000000\n"),
            ("memory.current", "700000\n"),
            (
                "memory.stat",
                "anon 500000\nfile 200000\ninactive_file 150000\n",
            ),
        ]);
        let probe = CgroupProbe::at(&dir).unwrap();
        assert_eq!(
            probe.sample(),
            Some(MemorySample {
                used: 550_000,
                limit: 1_000_000
            })
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn cgroup_v2_without_a_limit_gives_no_reading() {
        let dir = dir_with(&[("memory.max", "max\n"), ("memory.current", "7\n")]);
        assert_eq!(CgroupProbe::at(&dir).unwrap().sample(), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn cgroup_v1_reads_limit_and_usage_and_ignores_unlimited() {
        let dir = dir_with(&[
            ("memory.limit_in_bytes", "2000\n"),
            ("memory.usage_in_bytes", "1500\n"),
            ("memory.stat", "cache 10\ntotal_inactive_file 500\n"),
        ]);
        let probe = CgroupProbe::at(&dir).unwrap();
        assert_eq!(
            probe.sample(),
            Some(MemorySample {
                used: 1000,
                limit: 2000
            })
        );
        std::fs::write(dir.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        assert_eq!(probe.sample(), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_directory_without_cgroup_files_is_not_a_probe() {
        let dir = dir_with(&[]);
        assert!(CgroupProbe::at(&dir).is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bad_configs_are_typed_errors() {
        let probe = || None;
        for config in [
            PressureConfig {
                low_watermark: 0.9,
                high_watermark: 0.8,
                ..PressureConfig::default()
            },
            PressureConfig {
                shrink_step: 1.0,
                ..PressureConfig::default()
            },
            PressureConfig {
                min_scale: 0.0,
                ..PressureConfig::default()
            },
            PressureConfig {
                high_watermark: f64::NAN,
                ..PressureConfig::default()
            },
        ] {
            assert!(matches!(
                PressureWatcher::new(probe, config),
                Err(RegistryError::BadPressureConfig(_))
            ));
        }
        let zero = PressureConfig {
            interval: Duration::ZERO,
            ..PressureConfig::default()
        };
        assert_eq!(
            PressureWatcher::new(probe, zero).unwrap_err(),
            RegistryError::ZeroInterval
        );
    }

    #[test]
    fn scaling_keeps_at_least_one_entry_and_never_exceeds_nominal() {
        assert_eq!(scaled(0, 0.5), 0);
        assert_eq!(scaled(3, 0.1), 1);
        assert_eq!(scaled(1000, 0.5), 500);
        assert_eq!(scaled(1000, 1.0), 1000);
    }
}
