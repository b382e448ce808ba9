//! The proxy's counters and their Prometheus text rendering (`/metrics`).
//!
//! Counters are striped over cache-line-padded cells picked per thread, so a cache hit on one
//! core never writes a line another core is writing (no shared write per hit); a scrape sums the
//! stripes. Rendering is hand-written text exposition format 0.0.4: a dependency for a dozen
//! lines of text would cost more than it saves.

use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use stream_cache::{AbortKind, StreamCacheStats};

const STRIPES: usize = 16;

#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

/// A monotonically increasing counter, striped per thread.
pub(crate) struct Counter {
    stripes: [Padded; STRIPES],
}

impl Default for Counter {
    fn default() -> Self {
        Counter {
            stripes: std::array::from_fn(|_| Padded::default()),
        }
    }
}

fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|s| {
        if s.get() == usize::MAX {
            s.set(NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES);
        }
        s.get()
    })
}

impl Counter {
    pub(crate) fn add(&self, n: u64) {
        self.stripes[stripe()].0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn inc(&self) {
        self.add(1);
    }

    pub(crate) fn get(&self) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

/// Upper bounds (seconds) of the time-to-first-byte histogram.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// A cumulative histogram of durations.
#[derive(Default)]
pub(crate) struct Histogram {
    buckets: [Counter; BUCKETS.len()],
    count: Counter,
    sum_micros: Counter,
}

impl Histogram {
    pub(crate) fn observe(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i].inc();
        }
        self.count.inc();
        self.sum_micros
            .add(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }
}

/// Abort causes, as metric labels (from [`AbortKind`]'s names, so a new kind needs no change).
fn abort_label(kind: AbortKind) -> String {
    let name = format!("{kind:?}");
    let mut label = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            label.push('_');
        }
        label.push(c.to_ascii_lowercase());
    }
    label
}

/// Everything `/metrics` reports.
#[derive(Default)]
pub struct Metrics {
    pub(crate) hits: Counter,
    pub(crate) misses: Counter,
    pub(crate) coalesced: Counter,
    pub(crate) passes: Counter,
    pub(crate) stale_refreshes: Counter,
    pub(crate) stale_served: Counter,
    pub(crate) upstream_fetches: Counter,
    pub(crate) upstream_errors: Counter,
    pub(crate) upstream_timeouts: Counter,
    pub(crate) purges: Counter,
    pub(crate) purges_refused: Counter,
    pub(crate) bad_requests: Counter,
    pub(crate) upstream_bytes: Counter,
    pub(crate) client_bytes: Counter,
    /// Client responses whose body ended in an error because its write was aborted, by cause
    /// (one aborted fill read by ten clients counts ten here, once in the cache's fill aborts).
    aborts: parking_lot::Mutex<Vec<(AbortKind, u64)>>,
    /// Other body errors seen by clients (reader timeouts, I/O).
    pub(crate) body_errors: Counter,
    pub(crate) ttfb: Histogram,
}

impl Metrics {
    /// Count a client body that ended with `kind` (rare; a lock is fine here).
    pub(crate) fn abort(&self, kind: AbortKind) {
        let mut aborts = self.aborts.lock();
        match aborts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => aborts.push((kind, 1)),
        }
    }

    /// Client bodies ended by an aborted write with `kind` so far (fills aborted are in the
    /// cache's stats: [`Proxy::cache_stats`](crate::Proxy::cache_stats)).
    pub fn aborts(&self, kind: AbortKind) -> u64 {
        self.aborts
            .lock()
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, n)| *n)
    }

    /// Origin requests made so far (fills and passes).
    pub fn upstream_fetches(&self) -> u64 {
        self.upstream_fetches.get()
    }

    /// Requests answered from a stored (complete or still arriving) object.
    pub fn hits(&self) -> u64 {
        self.hits.get()
    }

    /// Requests that waited for another request's fill.
    pub fn coalesced(&self) -> u64 {
        self.coalesced.get()
    }

    /// Render in the Prometheus text exposition format, with the cache's fill counters from
    /// `cache` (see [`Proxy::render_metrics`](crate::Proxy::render_metrics)).
    pub fn render(&self, cache: &StreamCacheStats) -> String {
        let mut out = String::with_capacity(4096);
        let mut counter = |name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        counter(
            "herd_proxy_cache_hits_total",
            "Requests answered from a stored or arriving object without waiting for a fill.",
            self.hits.get(),
        );
        counter(
            "herd_proxy_cache_misses_total",
            "Requests that started a fill.",
            self.misses.get(),
        );
        counter(
            "herd_proxy_coalesced_waits_total",
            "Requests that waited for another request's fill instead of fetching.",
            self.coalesced.get(),
        );
        counter(
            "herd_proxy_passes_total",
            "Requests passed to the origin without the cache.",
            self.passes.get(),
        );
        counter(
            "herd_proxy_stale_refreshes_total",
            "Stale objects replaced by a new fill.",
            self.stale_refreshes.get(),
        );
        counter(
            "herd_proxy_upstream_fetches_total",
            "Requests sent to the origin.",
            self.upstream_fetches.get(),
        );
        counter(
            "herd_proxy_upstream_errors_total",
            "Origin requests that failed before a response (502).",
            self.upstream_errors.get(),
        );
        counter(
            "herd_proxy_upstream_timeouts_total",
            "Origin requests that timed out before a response (504).",
            self.upstream_timeouts.get(),
        );
        counter(
            "herd_proxy_purges_total",
            "Accepted PURGE requests.",
            self.purges.get(),
        );
        counter(
            "herd_proxy_purges_refused_total",
            "PURGE requests refused (403).",
            self.purges_refused.get(),
        );
        counter(
            "herd_proxy_bad_requests_total",
            "Requests refused as malformed.",
            self.bad_requests.get(),
        );
        counter(
            "herd_proxy_upstream_bytes_total",
            "Body bytes received from the origin.",
            self.upstream_bytes.get(),
        );
        counter(
            "herd_proxy_client_bytes_total",
            "Body bytes sent to clients.",
            self.client_bytes.get(),
        );
        counter(
            "herd_proxy_body_errors_total",
            "Client bodies ended by a non-abort error.",
            self.body_errors.get(),
        );
        counter(
            "herd_proxy_fills_started_total",
            "Fills the cache ran (origin fetches meant to be stored, refreshes included).",
            cache.fills_started,
        );
        counter(
            "herd_proxy_fills_completed_total",
            "Fills whose body was completely stored.",
            cache.fills_completed,
        );
        counter(
            "herd_proxy_fills_failed_total",
            "Fills that failed before their body started (origin error, timeout, not storable).",
            cache.fills_failed,
        );
        let _ = writeln!(
            out,
            "# HELP herd_proxy_fill_aborts_total Fills whose body write was aborted, by cause (each fill once, however many clients read it).\n# TYPE herd_proxy_fill_aborts_total counter"
        );
        for (kind, n) in cache.aborts.iter() {
            let _ = writeln!(
                out,
                "herd_proxy_fill_aborts_total{{cause=\"{}\"}} {n}",
                abort_label(kind)
            );
        }
        let _ = writeln!(
            out,
            "# HELP herd_proxy_client_aborts_total Client bodies ended by an aborted write, by cause.\n# TYPE herd_proxy_client_aborts_total counter"
        );
        for (kind, n) in self.aborts.lock().iter() {
            let _ = writeln!(
                out,
                "herd_proxy_client_aborts_total{{cause=\"{}\"}} {n}",
                abort_label(*kind)
            );
        }
        let _ = writeln!(
            out,
            "# HELP herd_proxy_fills_in_flight Fills running: from the origin request until the body is stored or aborted.\n# TYPE herd_proxy_fills_in_flight gauge\nherd_proxy_fills_in_flight {}",
            cache.fills_in_flight
        );
        let name = "herd_proxy_time_to_first_byte_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from request to response head.\n# TYPE {name} histogram"
        );
        let mut cumulative = 0;
        for (bound, bucket) in BUCKETS.iter().zip(&self.ttfb.buckets) {
            cumulative += bucket.get();
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.ttfb.count.get();
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.ttfb.sum_micros.get() as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count {count}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn striped_counter_sums_across_threads() {
        let counter = std::sync::Arc::new(Counter::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let counter = counter.clone();
                std::thread::spawn(move || (0..1000).for_each(|_| counter.inc()))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(counter.get(), 4000);
    }

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.hits.inc();
        m.abort(AbortKind::WriterDropped);
        m.ttfb.observe(Duration::from_millis(3));
        let text = m.render(&StreamCacheStats::default());
        assert!(text.contains("herd_proxy_cache_hits_total 1\n"), "{text}");
        assert!(
            text.contains("herd_proxy_client_aborts_total{cause=\"writer_dropped\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("herd_proxy_time_to_first_byte_seconds_bucket{le=\"0.005\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("herd_proxy_time_to_first_byte_seconds_bucket{le=\"0.0025\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("herd_proxy_time_to_first_byte_seconds_count 1\n"),
            "{text}"
        );
    }
}
