//! `herd-proxy`: a caching HTTP reverse proxy built on `stream-cache`'s public API, whose point
//! is that a client can trust it: a body the origin did not finish is never delivered as a
//! complete one.
//!
//! What it does (clients: HTTP/1.0, 1.1 and HTTP/2 with prior knowledge (h2c; TLS is not
//! terminated here); origin: HTTP/1.1, one origin):
//! - `GET`/`HEAD` responses are stored under method + authority (`Host`, `h:80` as `h`; one
//!   with userinfo is refused) + path + query + coding class (see below), for the freshness their `Cache-Control` (`s-maxage`, `max-age`), `Expires` and
//!   `Age` give them. Not stored: `no-store`, `private`, `no-cache`, `Set-Cookie`, `Vary` on
//!   anything but `Accept-Encoding`, statuses outside RFC 9110's cacheable set, responses with
//!   no explicit freshness (no heuristic freshness), bodies whose `Content-Length` exceeds the
//!   object size limit, and bodies that end only when the origin closes its connection (neither
//!   `Content-Length` nor chunked encoding: the origin's death would read as the body's end).
//!   Delta-seconds past 2^31 (`max-age` of `i64::MAX`) count as 2^31 (RFC 9111 section
//!   1.2.2). Status and end-to-end headers live in `ObjectMeta::user`.
//! - Concurrent misses of one key share one origin fetch (`StreamCache::get_or_fill`); every
//!   waiting client, and every client that arrives while the body downloads, streams it as it
//!   arrives. The download runs on its own task: a client that hangs up does not stop it.
//! - A response that may not be shared (decided from its head) goes to the client that fetched
//!   it; the clients coalesced on it each fetch their own (Varnish's hit-for-pass).
//! - Truncation is always visible: a body whose write aborts ends in a body error, which hyper
//!   turns into a missing terminating chunk or a short `Content-Length` (curl: exit 18), or on
//!   HTTP/2 into `RST_STREAM` (curl: exit 92). An
//!   HTTP/1.0 client cannot see a missing chunk, so a body of unknown length is sent to it only
//!   once complete, with a `Content-Length` (or a 502 if it failed before). The one exception
//!   is the origin's own: a body it ends by closing its connection (HTTP/1 with neither a
//!   length nor chunking) looks the same whole or cut short, to this proxy as to nginx and
//!   Varnish. Such a body is never stored; passed, it is relayed as it came, its end included.
//! - `Range` (one range) is served as 206 from stored and still-arriving bodies whose length is
//!   known (`Content-Length` from the origin, or complete), ending at the range's last byte
//!   (a range's bytes are final once they arrived); 416 past the end (a suffix range of an
//!   empty body is satisfiable: the whole, empty body); an unparsable or
//!   multi-range header, a range on a body of still-unknown length, or an `If-Range` that does
//!   not match the stored `ETag` (strong) / `Last-Modified` gets the whole body (RFC 9110 lets a
//!   server ignore `Range`; a resumed download never splices two versions).
//! - A client's `If-None-Match` (weak comparison) or `If-Modified-Since` is evaluated against
//!   the stored 200: 304 when it matches; its `If-Match` (strong comparison) or, without one,
//!   `If-Unmodified-Since`, as nginx: 412 when false. Fills never forward conditionals.
//! - A request with an unsafe method (`PUT`, `POST`, `DELETE`...) that the origin answers
//!   2xx or 3xx invalidates every stored variant of its URL (RFC 9111 4.4): later requests
//!   miss, but a body still being written goes on, complete, for the clients already reading
//!   it (and is not stored), unlike `PURGE`; `Location` and `Content-Location` targets are
//!   left alone.
//! - `PURGE` removes every stored variant of a URL (both methods, all coding classes) and aborts
//!   a body still being written (clients already streaming it see an error); it needs the
//!   configured token in `X-Purge-Token` (403 otherwise, and always when no token is
//!   configured). Requests still waiting for the origin's head when it comes get one fetch made
//!   after the purge, shared; a body found already failed is a 502, never a 200 that breaks.
//! - Origin unreachable, refusing, or broken before its head: 502 at once; so is an answer with
//!   a transfer coding other than chunked (`gzip, chunked`), which the proxy cannot undo (as
//!   nginx's "unknown Transfer-Encoding"). No head within the
//!   response timeout: 504. A body that stalls beyond the idle timeout aborts (clients see an
//!   error), stored or passed through.
//! - `/metrics` (path configurable) in Prometheus text format: hits, misses, coalesced waits,
//!   origin fetches, fills started/completed/failed, fill aborts by cause (each fill once, from
//!   the cache's stats) and client bodies aborted by cause, bytes, fills in flight, a TTFB
//!   histogram; `tracing` events for each failure.
//!
//! Choices where the RFCs leave room:
//! - `Accept-Encoding` is normalised to a class (`br`, else `gzip`, else `identity`) that is
//!   sent to the origin instead of the client's header and joins the key, so `Vary:
//!   Accept-Encoding` needs no second lookup (Varnish's recommended normalisation).
//! - Hit-for-pass, as Varnish: once a URL's response may not be stored (or its chunked body
//!   outgrew `max_object_size`), its misses pass straight to the origin, each on its own fetch,
//!   for `hit_for_pass` (120 s; `PURGE` clears it), rather than queue behind one fetch to learn
//!   it again. A response that became storable meanwhile is stored after the mark ends. An
//!   origin error (5xx, 429) marks nothing: it is relayed, and the next miss fills as usual.
//! - Requests with `Authorization` or `Upgrade`, a `GET`/`HEAD` with a body (a search API's
//!   query: its URL does not say what it asks), and methods other than `GET`/`HEAD`, pass to the
//!   origin uncached, with their bodies. Request `Cache-Control` is not honoured (as nginx by default): a client
//!   cannot force origin traffic.
//! - A stale object is replaced by a new fetch, one per key (the refresh is coalesced); it stays
//!   visible until the origin's new head arrives, and the new body then streams to whoever comes
//!   next. `stale-while-revalidate` (RFC 5861) serves the stale object at once and refreshes in
//!   the background; `stale-if-error` serves it when the refresh gets no answer or a 500, 502,
//!   503 or 504 (RFC 5861 section 4), and such a failure leaves the stale object in place (a
//!   client that may not have it gets the origin's error answer). A refresh answered with a
//!   response that may not be stored removes the object and goes to the client that led it.
//!   `must-revalidate` and `proxy-revalidate` close both windows (never served stale).
//!   `s-maxage` implies `proxy-revalidate` for a shared cache (RFC 9111 5.2.2.10), but an
//!   explicit `stale-while-revalidate`/`stale-if-error` beside it is honoured, as CDNs do
//!   (`s-maxage=1, stale-while-revalidate=59` is how frameworks ask for background refresh):
//!   a choice, since RFC 9111 4.2.4 lets the implied directive forbid it.
//!   Responses served stale say `X-Cache: STALE`. There is no revalidation with
//!   `If-None-Match`/`If-Modified-Since` (a refresh is a full fetch).
//! - Conditional request headers and `Range` are not forwarded on fills (the stored object is
//!   the whole 200).

mod clock;
mod hit_for_pass;
mod meta;
mod metrics;
mod policy;
mod range;
mod server;
mod upstream;

use std::sync::Arc;
use std::time::Duration;

pub use clock::Clock;
pub use metrics::Metrics;
pub use server::Proxy;

/// Proxy settings. [`Config::new`] gives the defaults for one origin.
#[derive(Debug, Clone)]
pub struct Config {
    /// The origin, `host:port` (plain HTTP).
    pub upstream: String,
    /// The token `PURGE` requests must carry in `X-Purge-Token`; `None` refuses every purge.
    pub purge_token: Option<String>,
    /// Largest request head accepted (hyper's read buffer; at least 8192). Larger heads get 431.
    pub max_header_bytes: usize,
    /// Connecting to the origin (502 when it fails).
    pub connect_timeout: Duration,
    /// Waiting for the origin's response head (504 when it passes), counted from the request
    /// body's last move: an upload that keeps moving is not timed out, one that stalls is.
    pub response_timeout: Duration,
    /// Longest gap between two origin body chunks before the body is aborted (stored bodies
    /// and passed-through ones alike).
    pub body_idle_timeout: Duration,
    /// How long a client may take to send its request head.
    pub client_header_timeout: Duration,
    /// Largest body stored; larger declared bodies are passed through uncached, larger
    /// chunked bodies abort (`TooLarge`).
    pub max_object_size: u64,
    /// The path that serves metrics.
    pub metrics_path: String,
    /// How long a URL whose response may not be stored (or outgrew `max_object_size`) is
    /// passed straight to the origin, each request on its own fetch, instead of queueing behind
    /// another request's fetch to learn that again (Varnish's hit-for-pass, 120 s by default
    /// there too). Zero turns it off. `PURGE` clears it. An origin error (5xx, 429) does not
    /// mark the URL: it is a moment of the origin's, not a property of the resource.
    pub hit_for_pass: Duration,
    /// The clock for freshness ([`Clock::system`] unless testing).
    pub clock: Clock,
}

/// Why a [`Config`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// hyper needs a read buffer of at least 8192 bytes.
    #[error("max_header_bytes must be at least 8192, got {0}")]
    HeaderLimitTooSmall(usize),
    /// The upstream is not `host:port`.
    #[error("upstream must be host:port, got {0:?}")]
    BadUpstream(String),
    /// A timeout of zero would fail every request.
    #[error("{0} must be greater than zero")]
    ZeroTimeout(&'static str),
}

impl Config {
    /// Defaults: 64 KiB heads, 2 s connect, 30 s response, 30 s body idle, 10 s client head,
    /// 64 MiB objects, `/metrics`, 120 s hit-for-pass, no purge token.
    pub fn new(upstream: impl Into<String>) -> Self {
        Config {
            upstream: upstream.into(),
            purge_token: None,
            max_header_bytes: 64 * 1024,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(30),
            body_idle_timeout: Duration::from_secs(30),
            client_header_timeout: Duration::from_secs(10),
            max_object_size: 64 << 20,
            metrics_path: "/metrics".to_owned(),
            hit_for_pass: Duration::from_secs(120),
            clock: Clock::system(),
        }
    }

    /// Check the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_header_bytes < 8192 {
            return Err(ConfigError::HeaderLimitTooSmall(self.max_header_bytes));
        }
        let valid_upstream = self
            .upstream
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
            && format!("http://{}/", self.upstream)
                .parse::<http::Uri>()
                .is_ok();
        if !valid_upstream {
            return Err(ConfigError::BadUpstream(self.upstream.clone()));
        }
        for (name, value) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
            ("body_idle_timeout", self.body_idle_timeout),
            ("client_header_timeout", self.client_header_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::ZeroTimeout(name));
            }
        }
        Ok(())
    }
}

/// The storage a proxy caches in (any `stream_cache::Storage`).
pub type SharedStorage = Arc<dyn stream_cache::Storage>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_validation() {
        assert_eq!(Config::new("127.0.0.1:80").validate(), Ok(()));
        assert!(matches!(
            Config::new("nope").validate(),
            Err(ConfigError::BadUpstream(_))
        ));
        assert!(matches!(
            Config::new("a b:80").validate(),
            Err(ConfigError::BadUpstream(_))
        ));
        let mut c = Config::new("127.0.0.1:80");
        c.max_header_bytes = 100;
        assert_eq!(c.validate(), Err(ConfigError::HeaderLimitTooSmall(100)));
        let mut c = Config::new("127.0.0.1:80");
        c.response_timeout = Duration::ZERO;
        assert_eq!(
            c.validate(),
            Err(ConfigError::ZeroTimeout("response_timeout"))
        );
    }
}
