//! The request handler and the accept loop: routes each request to metrics, purge, the cache or
//! a pass to the origin, and turns a stored object into a response whose framing makes any
//! truncation visible.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body as _, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use stream_cache::{
    AbortKind, AbortReason, BodyError, BodyReader, BodyStream, ByteRange, CacheKey, FillError,
    FillOutcome, HttpBody, ObjectMeta, Obtained, StorageError, StreamCache, Upstream, WriteState,
};
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::hit_for_pass::HitForPass;
use crate::meta::StoredHead;
use crate::metrics::Metrics;
use crate::policy::{self, Coding};
use crate::range::{self, Resolved};
use crate::upstream::{FetchError, Origin, UpBody};
use crate::{Config, ConfigError, SharedStorage};

/// A response body the proxy sends (errors end the response visibly).
pub(crate) type RespBody = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

const PURGE_TOKEN_HEADER: &str = "x-purge-token";
/// How often an HTTP/2 client connection is pinged, and how long its answer may take before the
/// connection is closed.
const H2_KEEP_ALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
const H2_KEEP_ALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// How a URL's stored variants go.
#[derive(Debug, Clone, Copy)]
enum Removal {
    /// `PURGE`: "stop serving this": a body still being written aborts for its readers.
    Purge,
    /// After an accepted unsafe method (RFC 9111 4.4): "the stored copies are out of date":
    /// later requests miss, but a body still being written completes for its readers.
    Invalidate,
}
const CACHE_STATUS_HEADER: &str = "x-cache";

/// Headers that describe one connection, never forwarded or stored (RFC 9110 section 7.6.1).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

/// Request headers not forwarded on a fill: the stored object is the whole, unconditional 200,
/// and a fill sends no body (so nothing that describes one).
const FILL_DROPPED: [HeaderName; 8] = [
    header::CONTENT_LENGTH,
    header::EXPECT,
    header::RANGE,
    header::IF_RANGE,
    header::IF_MATCH,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_UNMODIFIED_SINCE,
];

/// A response with both `Transfer-Encoding` and `Content-Length` is framed by the former
/// (hyper decoded it so): the length must go before the message is passed on or stored (RFC
/// 9112 section 6.3, rule 3). Kept, it made hyper's server cut a relayed body at that length
/// as a complete-looking response, and made every fill of the URL fail its length check.
fn drop_length_under_chunking(headers: &mut HeaderMap) {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
    }
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
}

fn full(status: StatusCode, text: &'static str) -> Response<RespBody> {
    let mut response = Response::new(
        Full::new(Bytes::from_static(text.as_bytes()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

fn empty_body() -> RespBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// How a stored response was found, for the `X-Cache` header.
#[derive(Clone, Copy)]
enum Found {
    Hit,
    Miss,
    Coalesced,
    Stale,
}

impl Found {
    fn header(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Found::Hit => "HIT",
            Found::Miss => "MISS",
            Found::Coalesced => "MISS-COALESCED",
            Found::Stale => "STALE",
        })
    }
}

/// A caching reverse proxy over one origin. Cheap to clone (shared state).
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    cache: StreamCache<SharedStorage>,
    /// One refresh of a stale object per key at a time: concurrent requests that all saw it
    /// stale share one origin fetch.
    refresh: coalesce::Group<CacheKey, (), FetchError>,
    /// URLs passed without queueing for a while (`Config::hit_for_pass`).
    hit_for_pass: HitForPass,
    origin: Origin,
    metrics: Arc<Metrics>,
}

impl Proxy {
    /// A proxy caching in `storage`.
    pub fn new(config: Config, storage: SharedStorage) -> Result<Self, ConfigError> {
        config.validate()?;
        let metrics = Arc::new(Metrics::default());
        let origin = Origin::new(
            config.connect_timeout,
            config.response_timeout,
            config.body_idle_timeout,
            Arc::clone(&metrics),
        );
        let hit_for_pass = HitForPass::new(config.hit_for_pass, config.clock.clone());
        let cache = stream_cache::StreamCacheBuilder::new()
            .max_body_size(config.max_object_size)
            .on_fill_end({
                let hit_for_pass = hit_for_pass.clone();
                move |end| {
                    // A chunked body that outgrew the object limit: every client of that fill
                    // got an error at the limit. The next requests pass (and get all of it).
                    if let FillOutcome::Aborted {
                        kind: AbortKind::TooLarge,
                        ..
                    } = end.outcome
                    {
                        hit_for_pass.mark(end.key);
                    }
                }
            })
            .build(storage);
        Ok(Proxy {
            inner: Arc::new(Inner {
                config,
                cache,
                refresh: coalesce::Group::new(),
                hit_for_pass,
                origin,
                metrics,
            }),
        })
    }

    /// The proxy's counters.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.inner.metrics)
    }

    /// The cache's counters: fills started, completed, failed, aborted by cause (each fill
    /// once), in flight, bytes served, storage usage.
    pub fn cache_stats(&self) -> stream_cache::StreamCacheStats {
        self.inner.cache.stats()
    }

    /// What `/metrics` serves: the proxy's counters and the cache's, in the Prometheus text
    /// format.
    pub fn render_metrics(&self) -> String {
        self.inner.metrics.render(&self.inner.cache.stats())
    }

    /// Accept connections on `listener` until the returned future is dropped. Each connection
    /// runs on its own task (and keeps running if this future is dropped).
    ///
    /// Cancel safety: dropping the future stops accepting; nothing else changes.
    pub async fn serve(self, listener: TcpListener) {
        self.inner.config.clock.start();
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let inner = Arc::clone(&self.inner);
            tokio::spawn(async move {
                let config = &inner.config;
                // The header timeout counts from the accept: hyper's starts only once it has
                // told HTTP/1 from HTTP/2, for which it waits for bytes with no timer, so a
                // connection that never sent one was held for good (found by review: idle
                // sockets could use up the descriptors). As nginx's `client_header_timeout`.
                let mut first = [0u8; 1];
                match tokio::time::timeout(config.client_header_timeout, stream.peek(&mut first))
                    .await
                {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => return,
                }
                // HTTP/1.x, or HTTP/2 with prior knowledge (h2c); an aborted body then ends its
                // stream with RST_STREAM instead of a missing chunk.
                let mut builder = auto::Builder::new(TokioExecutor::new());
                // Why each stored chunk is its own write (7 `writev`s per 1 MiB hit, where Varnish
                // makes one): one `writev` per response, by gathering the ready chunks into one
                // frame or by a 2 MiB write buffer, was measured (compare/hit1m.sh, interleaved)
                // at ~170 µs of CPU per 1 MiB response against ~140 µs, and fewer requests/s;
                // 64 KiB frames (15 writes) cost ~195 µs. The kernel's copy into the socket is
                // the cost, not the syscall count (docs/benchmarks.md, "HTTP caching proxy").
                builder
                    .http1()
                    .max_buf_size(config.max_header_bytes)
                    .timer(TokioTimer::new())
                    .header_read_timeout(config.client_header_timeout);
                // HTTP/2 keep-alive pings: a client that vanished without a FIN (a NAT or a
                // mobile network dropping it) is found and its connection closed, where it was
                // held for good.
                builder
                    .http2()
                    .max_header_list_size(
                        u32::try_from(config.max_header_bytes).unwrap_or(u32::MAX),
                    )
                    .timer(TokioTimer::new())
                    .keep_alive_interval(Some(H2_KEEP_ALIVE_INTERVAL))
                    .keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT);
                let service = service_fn({
                    let inner = Arc::clone(&inner);
                    move |request| {
                        let inner = Arc::clone(&inner);
                        async move { Ok::<_, Infallible>(inner.handle(request).await) }
                    }
                });
                if let Err(error) = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!(%peer, %error, "client connection ended with an error");
                }
            });
        }
    }
}

impl Inner {
    /// Answer one request. hyper drops this future when the client goes away; at each await:
    /// - storage lookups: nothing changes;
    /// - a stale refresh (`refresh`): a waiting request leaves the queue; the leading one hands
    ///   the lead to the next waiter (coalesce's guard) and its origin request is dropped;
    /// - `get_or_fill`: as documented there (the lead passes on before the write begins; once
    ///   the body streams it is pumped by its own task and keeps filling for everyone else);
    /// - a pass to the origin: the origin request is dropped;
    /// - waiting for a range start or for a whole body (HTTP/1.0): only this client's reader is
    ///   dropped.
    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<RespBody> {
        let start = Instant::now();
        let response = self.route(request).await;
        self.metrics.ttfb.observe(start.elapsed());
        response
    }

    async fn route(self: &Arc<Self>, request: Request<Incoming>) -> Response<RespBody> {
        if request.uri().path() == self.config.metrics_path && request.method() == Method::GET {
            let mut response = Response::new(
                Full::new(Bytes::from(self.metrics.render(&self.cache.stats())))
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            );
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            return response;
        }
        let (parts, body) = request.into_parts();
        let Some(authority) = authority(&parts) else {
            self.metrics.bad_requests.inc();
            return full(StatusCode::BAD_REQUEST, "missing or invalid Host\n");
        };
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |pq| pq.as_str())
            .to_owned();
        if parts.method.as_str() == "PURGE" {
            return self.purge(&parts, &authority, &path).await;
        }
        // A GET with a body (a search API's query) asks something its URL does not say: it is
        // passed with its body, never answered from or stored under the URL. (Filled without
        // it, the origin would also get a `Content-Length` with no body behind it.)
        if !policy::request_is_cacheable(&parts.method, &parts.headers) || !body.is_end_stream() {
            self.metrics.passes.inc();
            let changes = !parts.method.is_safe();
            let response = self.pass(parts, body.boxed()).await;
            // A PUT, POST, DELETE... the origin accepted changed the URL: what is stored for
            // it must go (RFC 9111 4.4; a client reading its own write got the old copy).
            let accepted = response.status().is_success() || response.status().is_redirection();
            // Invalidated, not purged: a body still streaming to other clients completes
            // for them (they asked before this write; cutting them off would let any client
            // whose POST is answered 2xx/3xx break others' downloads), and is not stored.
            if changes
                && accepted
                && let Err(error) = self
                    .remove_url(&authority, &path, Removal::Invalidate)
                    .await
            {
                tracing::warn!(%error, path, "invalidation after an unsafe method failed");
            }
            return response;
        }
        self.cached(parts, &authority, &path).await
    }

    /// `PURGE`: every stored variant of the URL.
    async fn purge(&self, parts: &Parts, authority: &str, path: &str) -> Response<RespBody> {
        let allowed = match (
            &self.config.purge_token,
            parts.headers.get(PURGE_TOKEN_HEADER),
        ) {
            (Some(token), Some(given)) => token.as_bytes() == given.as_bytes(),
            _ => false,
        };
        if !allowed {
            self.metrics.purges_refused.inc();
            return full(StatusCode::FORBIDDEN, "purge refused\n");
        }
        self.metrics.purges.inc();
        let removed = match self.remove_url(authority, path, Removal::Purge).await {
            Ok(removed) => removed,
            Err(error) => {
                tracing::warn!(%error, path, "purge failed");
                return full(StatusCode::INTERNAL_SERVER_ERROR, "purge failed\n");
            }
        };
        tracing::info!(authority, path, removed, "purged");
        if removed > 0 {
            full(StatusCode::OK, "purged\n")
        } else {
            full(StatusCode::NOT_FOUND, "not cached\n")
        }
    }

    /// Removes every stored variant of the URL (both methods, all coding classes) and its
    /// hit-for-pass marks; returns how many objects went.
    async fn remove_url(
        &self,
        authority: &str,
        path: &str,
        how: Removal,
    ) -> Result<usize, StorageError> {
        let mut removed = 0usize;
        for method in [Method::GET, Method::HEAD] {
            for coding in Coding::ALL {
                let key = CacheKey::from(policy::cache_key(&method, authority, path, coding));
                self.hit_for_pass.clear(&key);
                let gone = match how {
                    Removal::Purge => self.cache.purge(key).await?,
                    Removal::Invalidate => self.cache.invalidate(key).await?,
                };
                removed += usize::from(gone);
            }
        }
        Ok(removed)
    }

    /// A cacheable `GET`/`HEAD`.
    async fn cached(
        self: &Arc<Self>,
        parts: Parts,
        authority: &str,
        path: &str,
    ) -> Response<RespBody> {
        let coding = Coding::of(&parts.headers);
        let key: CacheKey = policy::cache_key(&parts.method, authority, path, coding).into();
        let now = self.config.clock.now();
        if parts.method == Method::HEAD {
            // A fresh GET object answers a HEAD too.
            let get_key = policy::cache_key(&Method::GET, authority, path, coding);
            if let Ok(Some(hit)) = self.cache.lookup(get_key).await
                && let Ok(head) = StoredHead::decode(&hit.meta.user)
                && head.freshness.is_fresh(head.received, now)
            {
                self.metrics.hits.inc();
                return self
                    .respond(&parts, head, hit.meta, hit.body, Found::Hit)
                    .await;
            }
        }
        match self.cache.lookup(key.clone()).await {
            Ok(Some(hit)) => match StoredHead::decode(&hit.meta.user) {
                Ok(head) if head.freshness.is_fresh(head.received, now) => {
                    self.metrics.hits.inc();
                    return self
                        .respond(&parts, head, hit.meta, hit.body, Found::Hit)
                        .await;
                }
                Ok(head) => {
                    if head
                        .freshness
                        .may_serve_while_revalidating(head.received, now)
                    {
                        // stale-while-revalidate: this client gets the stale object now; one
                        // background refresh (per key) replaces it.
                        self.start_refresh(&parts, &key, coding);
                        self.metrics.stale_served.inc();
                        return self
                            .respond(&parts, head, hit.meta, hit.body, Found::Stale)
                            .await;
                    }
                    // The refresh's answer when it was not stored and this request led.
                    let failed = parking_lot::Mutex::new(None::<Response<Incoming>>);
                    if let Err(error) = self.refresh(&parts, &key, coding, &failed).await {
                        if head
                            .freshness
                            .may_serve_on_error(head.received, self.config.clock.now())
                        {
                            tracing::warn!(%error, ?key, "origin failed; serving stale (stale-if-error)");
                            self.metrics.stale_served.inc();
                            return self
                                .respond(&parts, head, hit.meta, hit.body, Found::Stale)
                                .await;
                        }
                        // Not allowed to serve it stale: the client gets the origin's answer.
                        let answered = failed.lock().take();
                        if let Some(response) = answered {
                            self.metrics.passes.inc();
                            return self.relay(&parts, response).await;
                        }
                        if let Some(FetchError::ServerError(_)) = error.fill_error().map(|e| &**e) {
                            // Another request led the refresh and has that answer: fetch ours.
                            self.metrics.passes.inc();
                            return self.pass(parts, empty_up_body()).await;
                        }
                        return flight_error_response(&error);
                    }
                    // Refreshed with an answer that may not be stored (the object is gone now):
                    // this request led, and relays it rather than fetch again.
                    let answered = failed.lock().take();
                    if let Some(response) = answered {
                        self.metrics.passes.inc();
                        return self.relay(&parts, response).await;
                    }
                    // Refreshed: the lookup in the fill path finds the new object.
                    drop(hit);
                }
                Err(error) => {
                    tracing::warn!(%error, ?key, "passing a request whose stored meta is unreadable");
                    self.metrics.passes.inc();
                    return self.pass(parts, empty_up_body()).await;
                }
            },
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, ?key, "storage lookup failed; passing");
                self.metrics.passes.inc();
                return self.pass(parts, empty_up_body()).await;
            }
        }
        if self.hit_for_pass.is_marked(&key) {
            self.metrics.passes.inc();
            return self.pass(parts, empty_up_body()).await;
        }
        self.fill(parts, key, coding).await
    }

    /// Replace the stale object of `key` with a new fetch, one refresh per key at a time (so a
    /// request that saw the old object late does not fetch again). The stale object stays
    /// visible until the origin's new head arrives; then the new body is written in its place
    /// (readers already attached to the old one finish it) and streams to whoever comes next.
    /// An origin failure leaves the stale object in place (for `stale-if-error`) and is
    /// returned: no answer, or a 500/502/503/504 (RFC 5861 section 4 counts those as errors),
    /// which is put in `failed` for the caller to relay when it may not serve stale. A new
    /// answer that may not be stored removes the object.
    ///
    /// Cancel safety: dropped while waiting for another request's refresh, nothing changes;
    /// dropped while leading it, the lead passes to a waiting request (coalesce's guard), and
    /// the origin request is dropped. Once the write has begun the body is pumped by its own
    /// task, before the next await.
    async fn refresh(
        &self,
        parts: &Parts,
        key: &CacheKey,
        coding: Coding,
        failed: &parking_lot::Mutex<Option<Response<Incoming>>>,
    ) -> Result<(), coalesce::FlightError<FetchError>> {
        self.refresh
            .run(key.clone(), || {
                self.refresh_once(parts, key, coding, Some(failed))
            })
            .await
    }

    /// Starts a background refresh of `key`'s stale object (stale-while-revalidate) unless
    /// one is already running, on a task that leads the key's refresh flight. While one runs,
    /// a stale hit starts nothing: each used to spawn a task that joined the running refresh
    /// and waited, so against a slow origin parked tasks piled up at the stale-hit rate.
    fn start_refresh(self: &Arc<Self>, parts: &Parts, key: &CacheKey, coding: Coding) {
        // Answered at once: the lead if no refresh of the key runs; otherwise the pending join
        // is dropped here, which leaves the running flight's queue as it was.
        let Some(coalesce::Joined::Leader(leader)) = self.refresh.join(key.clone()).now_or_never()
        else {
            return;
        };
        let leader = leader.into_owned();
        let (this, parts, key) = (Arc::clone(self), clone_parts(parts), key.clone());
        // Dropped (runtime shutdown) before it finishes, the leader guard hands the lead on.
        tokio::spawn(async move {
            let result = this.refresh_once(&parts, &key, coding, None).await;
            if let Err(error) = &result {
                tracing::warn!(%error, ?key, "background refresh failed");
            }
            let _ = leader.finish(result);
        });
    }

    /// One refresh of `key` (the body of a refresh flight): see [`refresh`](Self::refresh).
    /// An answer not stored (an error, or one that may not be shared) goes to `answer`, when
    /// given, for the request that led to relay. Dropped before the new head arrives, nothing
    /// changed; after, the body is pumped by the cache's own task.
    async fn refresh_once(
        &self,
        parts: &Parts,
        key: &CacheKey,
        coding: Coding,
        answer: Option<&parking_lot::Mutex<Option<Response<Incoming>>>>,
    ) -> Result<(), FetchError> {
        if let Ok(Some(hit)) = self.cache.lookup(key.clone()).await
            && let Ok(head) = StoredHead::decode(&hit.meta.user)
            && head
                .freshness
                .is_fresh(head.received, self.config.clock.now())
        {
            return Ok(()); // refreshed by an earlier flight
        }
        let request = self.fill_request(parts, coding);
        let replaced = self
            .cache
            .replace(key.clone(), || async {
                let response = self.origin.fetch(request).await?;
                let status = response.status();
                // Never stored (no storable status is one), so checked first.
                let failed = matches!(status.as_u16(), 500 | 502 | 503 | 504);
                let verdict = match failed {
                    true => Err((response, policy::NotStored::Status)),
                    false => self.to_upstream(&parts.method, response),
                };
                match verdict {
                    Ok(upstream) => Ok(upstream),
                    Err((response, why)) => {
                        tracing::debug!(?why, %status, ?key, "refreshed response not stored");
                        if let Some(answer) = answer {
                            *answer.lock() = Some(response);
                        }
                        // An origin error (any 5xx, 429) is a moment of the origin, as on a
                        // miss (`policy::marks_hit_for_pass`): the stale object stays, and the
                        // URL is not passed. (Found by review: a refresh answered 429 purged it
                        // and marked the URL hit-for-pass for `hit_for_pass`.)
                        match failed || !policy::marks_hit_for_pass(why, status) {
                            true => Err(FetchError::ServerError(status)),
                            false => Err(FetchError::Uncacheable),
                        }
                    }
                }
            })
            .await;
        match replaced {
            // The new body streams on the cache's own task; nobody here reads it.
            Ok(_) => {
                self.metrics.stale_refreshes.inc();
                Ok(())
            }
            Err(FillError::Upstream(error)) => match error.downcast_ref::<FetchError>() {
                Some(FetchError::Uncacheable) => {
                    // The origin's new answer may not be shared: neither may the old one.
                    self.hit_for_pass.mark(key);
                    let _ = self.cache.purge(key.clone()).await;
                    Ok(())
                }
                Some(FetchError::Timeout(timeout)) => Err(FetchError::Timeout(*timeout)),
                // An error answer: the stale object stays (for `stale-if-error`).
                Some(FetchError::ServerError(status)) => Err(FetchError::ServerError(*status)),
                _ => Err(FetchError::Refresh(error.to_string())),
            },
            Err(FillError::WaitTimedOut) => Err(FetchError::Refresh(
                "waited too long for another refresh".to_owned(),
            )),
            Err(error) => {
                tracing::warn!(%error, ?key, "storing a refreshed response failed");
                let _ = self.cache.purge(key.clone()).await;
                Ok(())
            }
        }
    }

    /// The largest body the proxy stores: its own object limit, or the storage's if smaller
    /// (`--capacity` below `--max-object`). A declared length over it is passed and marked
    /// hit-for-pass on the response that told it, as one over the object limit: found by
    /// review, one between the two limits was refused by the storage after the fetch, fetched
    /// again to pass, and never marked (two origin fetches per request, for good).
    fn storable_size(&self) -> u64 {
        let storage = self.cache.storage().capabilities().max_object_size;
        storage.map_or(self.config.max_object_size, |s| {
            s.min(self.config.max_object_size)
        })
    }

    /// An origin response as what to store, or back with the reason it may not be stored.
    #[allow(clippy::result_large_err)] // the error hands the response back, by design
    fn to_upstream(
        &self,
        method: &Method,
        mut response: Response<Incoming>,
    ) -> Result<Upstream<FetchError>, (Response<Incoming>, policy::NotStored)> {
        drop_length_under_chunking(response.headers_mut());
        let received = self.config.clock.now();
        let declared = content_length(response.headers());
        let has_body = method != Method::HEAD && !matches!(response.status().as_u16(), 204 | 304);
        let verdict = policy::storable(response.status(), response.headers(), received).and_then(
            |freshness| match declared {
                Some(len) if len > self.storable_size() => Err(policy::NotStored::TooLarge),
                // Its end and the origin's death look alike: passed, never stored.
                None if has_body
                    && policy::close_delimited(response.version(), response.headers()) =>
                {
                    Err(policy::NotStored::CloseDelimited)
                }
                _ => Ok(freshness),
            },
        );
        let freshness = match verdict {
            Ok(freshness) => freshness,
            Err(why) => return Err((response, why)),
        };
        let (head, body) = response.into_parts();
        let mut headers = head.headers;
        strip_hop_by_hop(&mut headers);
        // RFC 9110 6.6.1: a cache that stores a response without `Date` records when it came
        // and adds one. Without it every hit was stamped with the time it was served beside a
        // growing `Age`, and a cache below counted the time twice (found by review).
        if !headers.contains_key(header::DATE)
            && let Ok(date) = HeaderValue::from_str(&httpdate::fmt_http_date(received))
        {
            headers.insert(header::DATE, date);
        }
        let stored = StoredHead {
            status: head.status,
            headers,
            received,
            freshness,
        };
        let mut meta = ObjectMeta::new(stored.encode());
        let body = if has_body {
            if let Some(len) = declared {
                meta = meta.with_len(len);
            }
            self.origin.body_stream(body)
        } else {
            drop(body);
            futures::stream::empty().boxed()
        };
        Ok(Upstream::new(meta, body))
    }

    /// A miss: join (or lead) the fill of `key`.
    async fn fill(
        self: &Arc<Self>,
        parts: Parts,
        key: CacheKey,
        coding: Coding,
    ) -> Response<RespBody> {
        // The response the leader got when it may not be shared, and whether that makes the
        // URL hit-for-pass; only the leader reads it.
        let unshared = parking_lot::Mutex::new(None::<(Response<Incoming>, bool)>);
        let mut fetched_again = false;
        let result = loop {
            let request = self.fill_request(&parts, coding);
            let result = self
                .cache
                .get_or_fill_with(key.clone(), || async {
                    let response = self.origin.fetch(request).await?;
                    match self.to_upstream(&parts.method, response) {
                        Ok(upstream) => Ok(upstream),
                        Err((response, why)) => {
                            tracing::debug!(?why, status = %response.status(), "response not stored");
                            let mark = policy::marks_hit_for_pass(why, response.status());
                            *unshared.lock() = Some((response, mark));
                            Err(FetchError::Uncacheable)
                        }
                    }
                })
                .await;
            // A purge that came while this request waited for the origin's head fenced that
            // fill out: its body is aborted, and none of it has gone to this client yet. The
            // purge was meant for what was cached before it, not for requests already waiting:
            // they get a fetch made after it (current content), once.
            if let Ok((hit, _)) = &result
                && matches!(hit.body.state(), WriteState::Aborted(AbortReason::Purged))
                && !fetched_again
            {
                fetched_again = true;
                continue;
            }
            break result;
        };
        match result {
            Ok((hit, obtained)) => {
                let found = match obtained {
                    Obtained::Led => {
                        self.metrics.misses.inc();
                        Found::Miss
                    }
                    // Published (or still arriving) between our lookup and get_or_fill.
                    Obtained::Hit => {
                        self.metrics.hits.inc();
                        Found::Hit
                    }
                    // Coalesced on another fill, or found its object just published.
                    _ => {
                        self.metrics.coalesced.inc();
                        Found::Coalesced
                    }
                };
                match StoredHead::decode(&hit.meta.user) {
                    Ok(head) => self.respond(&parts, head, hit.meta, hit.body, found).await,
                    Err(_) => full(StatusCode::BAD_GATEWAY, "stored response unreadable\n"),
                }
            }
            Err(FillError::Upstream(error)) => match error.downcast_ref::<FetchError>() {
                Some(FetchError::Uncacheable) => {
                    self.metrics.passes.inc();
                    let taken = unshared.lock().take();
                    match taken {
                        Some((response, mark)) => {
                            // This request led: the next ones pass without queueing (unless
                            // the answer was an origin error, a blip of the origin's).
                            if mark {
                                self.hit_for_pass.mark(&key);
                            }
                            self.relay(&parts, response).await
                        }
                        // A coalesced caller: the response was not shareable, fetch our own.
                        None => self.pass(parts, empty_up_body()).await,
                    }
                }
                Some(FetchError::Timeout(_)) => {
                    full(StatusCode::GATEWAY_TIMEOUT, "origin timed out\n")
                }
                _ => {
                    tracing::warn!(%error, "origin fetch failed");
                    full(StatusCode::BAD_GATEWAY, "origin unreachable\n")
                }
            },
            Err(FillError::WaitTimedOut) => full(StatusCode::GATEWAY_TIMEOUT, "origin timed out\n"),
            // Declared larger than the storage can ever hold (under the proxy's own object
            // limit, which passes larger ones before they reach the cache): pass, as for those.
            // The leader's origin response went to the refused write, so this is a second
            // fetch; every coalesced caller fetches its own.
            // Or no room now (writes in progress hold a disk storage's capacity): passed too,
            // rather than a body that fails at its first byte.
            Err(
                FillError::TooLarge { .. }
                | FillError::Storage(StorageError::TooLarge { .. } | StorageError::NoRoom { .. }),
            ) => {
                self.metrics.passes.inc();
                self.pass(parts, empty_up_body()).await
            }
            Err(error) => {
                tracing::warn!(%error, "fill failed");
                full(StatusCode::BAD_GATEWAY, "fill failed\n")
            }
        }
    }

    /// The request a fill sends: the client's end-to-end headers minus conditionals and
    /// `Range`, with the coding class as `Accept-Encoding`.
    fn fill_request(&self, parts: &Parts, coding: Coding) -> Request<UpBody> {
        let mut request = self.upstream_request(parts, empty_up_body());
        for name in &FILL_DROPPED {
            request.headers_mut().remove(name);
        }
        request.headers_mut().insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static(coding.header_value()),
        );
        request
    }

    fn upstream_request(&self, parts: &Parts, body: UpBody) -> Request<UpBody> {
        let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        // Validated at startup (host:port) and path comes from a parsed URI.
        let uri: Uri = format!("http://{}{}", self.config.upstream, path)
            .parse()
            .unwrap_or_else(|_| Uri::from_static("/"));
        let mut request = Request::new(body);
        *request.method_mut() = parts.method.clone();
        *request.uri_mut() = uri;
        *request.headers_mut() = parts.headers.clone();
        strip_hop_by_hop(request.headers_mut());
        // The origin gets the `Host` the request is keyed by (`authority`): the client's, or
        // for HTTP/2 clients, which name the host in `:authority` only, that. Without it the
        // origin would get the upstream's address as `Host` (hyper's client fills it in) and
        // answer, or build its redirects, for the wrong site, under the client's cache key; a
        // client could get there by naming `Host` in `Connection`, which strips it above.
        let host = parts.headers.get(header::HOST).cloned().or_else(|| {
            parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        if let Some(host) = host {
            request.headers_mut().insert(header::HOST, host);
        }
        request
    }

    /// Send the request to the origin uncached and relay the answer.
    async fn pass(&self, parts: Parts, body: UpBody) -> Response<RespBody> {
        let request = self.upstream_request(&parts, body);
        match self.origin.fetch(request).await {
            Ok(response) => self.relay(&parts, response).await,
            Err(FetchError::Timeout(_)) => full(StatusCode::GATEWAY_TIMEOUT, "origin timed out\n"),
            Err(error) => {
                tracing::warn!(%error, "origin request failed");
                full(StatusCode::BAD_GATEWAY, "origin unreachable\n")
            }
        }
    }

    /// Relay an origin response without storing it. Its body errors end the client's response
    /// visibly; for an HTTP/1.0 client a body of unknown length is buffered (up to the object
    /// size limit) so a truncation is a 502, not a short body.
    async fn relay(&self, parts: &Parts, response: Response<Incoming>) -> Response<RespBody> {
        let (mut head, body) = response.into_parts();
        drop_length_under_chunking(&mut head.headers);
        let body = self.origin.relayed(body);
        strip_hop_by_hop(&mut head.headers);
        let length_known = head.headers.contains_key(header::CONTENT_LENGTH);
        if parts.version <= Version::HTTP_10 && !length_known && parts.method != Method::HEAD {
            let limit = usize::try_from(self.config.max_object_size).unwrap_or(usize::MAX);
            let collected = http_body_util::Limited::new(body, limit).collect().await;
            return match collected {
                Ok(collected) => {
                    let bytes = collected.to_bytes();
                    head.headers
                        .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
                    Response::from_parts(
                        head,
                        Full::new(bytes)
                            .map_err(|never| match never {})
                            .boxed_unsync(),
                    )
                }
                Err(error) => {
                    tracing::warn!(%error, "origin body failed before an HTTP/1.0 client got it");
                    full(StatusCode::BAD_GATEWAY, "origin body failed\n")
                }
            };
        }
        let metrics = Arc::clone(&self.metrics);
        let body = body
            .map_frame(move |frame| {
                if let Some(data) = frame.data_ref() {
                    metrics.client_bytes.add(data.len() as u64);
                }
                frame
            })
            .map_err(|error| Box::new(error) as Box<dyn std::error::Error + Send + Sync>)
            .boxed_unsync();
        Response::from_parts(head, body)
    }

    /// Build the response for a stored (or arriving) object.
    async fn respond(
        &self,
        parts: &Parts,
        head: StoredHead,
        meta: ObjectMeta,
        mut reader: Box<dyn BodyReader>,
        found: Found,
    ) -> Response<RespBody> {
        let now = self.config.clock.now();
        let mut headers = head.headers;
        let age = head.freshness.current_age(head.received, now).as_secs();
        headers.insert(header::AGE, HeaderValue::from(age));
        headers.insert(CACHE_STATUS_HEADER, found.header());
        let mut response = Response::new(empty_body());
        *response.status_mut() = head.status;
        if head.status == StatusCode::OK && precondition_failed(&parts.headers, &headers) {
            // The client's precondition on the stored 200 is false (RFC 9110 13.2.2 steps 1-2,
            // as nginx evaluates it on cached responses): a resume with `If-Match` must not
            // get bytes of another version.
            let mut failed = Response::new(empty_body());
            *failed.status_mut() = StatusCode::PRECONDITION_FAILED;
            failed
                .headers_mut()
                .insert(CACHE_STATUS_HEADER, found.header());
            return failed;
        }
        if head.status == StatusCode::OK && not_modified(&parts.headers, &headers) {
            // The client has this representation (RFC 9110 13.1.1/13.1.3, evaluated against the
            // stored response as a cache may): 304 with the validator and caching headers.
            let mut kept = HeaderMap::new();
            for name in [
                header::CACHE_CONTROL,
                header::CONTENT_LOCATION,
                header::DATE,
                header::ETAG,
                header::EXPIRES,
                header::VARY,
                header::LAST_MODIFIED,
                header::AGE,
            ] {
                for value in headers.get_all(&name) {
                    kept.append(name.clone(), value.clone());
                }
            }
            kept.insert(CACHE_STATUS_HEADER, found.header());
            *response.headers_mut() = kept;
            *response.status_mut() = StatusCode::NOT_MODIFIED;
            return response;
        }
        if parts.method == Method::HEAD || matches!(head.status.as_u16(), 204 | 304) {
            // A HEAD gets the length its GET would (RFC 9110 9.3.2): a body stored from a
            // chunked answer has no `Content-Length` of its own, only its final length (found
            // by review: `curl -I` saw no size where GET said 500).
            let length = meta.expected_len.or(match reader.state() {
                WriteState::Complete(len) => Some(len),
                _ => None,
            });
            if parts.method == Method::HEAD
                && !matches!(head.status.as_u16(), 204 | 304)
                && !headers.contains_key(header::CONTENT_LENGTH)
                && let Some(len) = length
            {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            }
            *response.headers_mut() = headers;
            return response;
        }
        // A body that failed before anything was sent: a status, not a 200 that breaks.
        if let WriteState::Aborted(reason) = reader.state() {
            return self.failed_before_head(BodyError::Aborted(reason));
        }
        let known_len = meta.expected_len.or(match reader.state() {
            WriteState::Complete(len) => Some(len),
            _ => None,
        });
        // If-Range (RFC 9110 13.1.5): the range only applies to the representation the client
        // has, so a resumed download never splices two versions of a body.
        let same_representation = match parts.headers.get(header::IF_RANGE) {
            None => true,
            Some(wanted) if wanted.as_bytes().starts_with(b"\"") => headers
                .get(header::ETAG)
                .is_some_and(|etag| etag.as_bytes() == wanted.as_bytes()),
            // A date (or a weak tag, which never matches): exact Last-Modified only.
            Some(wanted) => headers
                .get(header::LAST_MODIFIED)
                .is_some_and(|modified| modified.as_bytes() == wanted.as_bytes()),
        };
        if head.status == StatusCode::OK
            && same_representation
            && let Some(spec) = parts
                .headers
                .get(header::RANGE)
                .and_then(|v| range::parse(v.as_bytes()))
            && let Some(len) = known_len
        {
            match spec.resolve(len) {
                Resolved::NotSatisfiable => {
                    headers.remove(header::CONTENT_LENGTH);
                    headers.insert(
                        header::CONTENT_RANGE,
                        HeaderValue::from_str(&format!("bytes */{len}"))
                            .unwrap_or(HeaderValue::from_static("bytes */*")),
                    );
                    *response.headers_mut() = headers;
                    *response.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
                    return response;
                }
                Resolved::Partial { start, end } => {
                    if let Err(error) = reader.seek(ByteRange::new(start, Some(end))).await {
                        return self.failed_before_head(error);
                    }
                    let content_range = format!("bytes {start}-{}/{len}", end - 1);
                    if let Ok(value) = HeaderValue::from_str(&content_range) {
                        headers.insert(header::CONTENT_RANGE, value);
                    }
                    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
                    *response.headers_mut() = headers;
                    *response.status_mut() = StatusCode::PARTIAL_CONTENT;
                    // Ends at its last byte: a range does not wait for the rest of the body.
                    let body = HttpBody::new(reader)
                        .with_exact_len(end - start)
                        .ending_at_len();
                    *response.body_mut() = self.client_body(body);
                    return response;
                }
                // The whole body, as without a `Range`.
                Resolved::Whole => {}
            }
        }
        match known_len {
            Some(len) => {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
                *response.body_mut() = self.client_body(HttpBody::new(reader).with_exact_len(len));
            }
            None if parts.version <= Version::HTTP_10
                && self.cache.storage().capabilities().range_reads =>
            {
                // HTTP/1.0 has no chunked framing: a connection close is its only end of body,
                // so a truncation would look complete. Send the body only once complete. A seek
                // past any length waits for the write's end without reading (a copy of the body
                // per client, up to the object limit each, is what collecting it cost) and
                // answers the final length; then the body is read from its start.
                let len = match reader.seek(ByteRange::from(u64::MAX..)).await {
                    Err(BodyError::RangeNotSatisfiable { len, .. }) => len,
                    Err(error) => return self.failed_before_head(error),
                    // 2^64 - 1 bytes written: no storage gets there.
                    Ok(()) => return full(StatusCode::BAD_GATEWAY, "stored body too long\n"),
                };
                if let Err(error) = reader.seek(ByteRange::from(0..)).await {
                    return self.failed_before_head(error);
                }
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
                *response.body_mut() = self.client_body(HttpBody::new(reader).with_exact_len(len));
            }
            None if parts.version <= Version::HTTP_10 => {
                // As above, for a storage that cannot read a body again: one copy per client.
                let mut body = Vec::new();
                let mut stream = BodyStream::new(reader);
                while let Some(chunk) = stream.next().await {
                    match chunk {
                        Ok(chunk) => body.extend_from_slice(&chunk),
                        Err(error) => return self.failed_before_head(error),
                    }
                }
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
                self.metrics.client_bytes.add(body.len() as u64);
                *response.body_mut() = Full::new(Bytes::from(body))
                    .map_err(|never| match never {})
                    .boxed_unsync();
            }
            None => {
                headers.remove(header::CONTENT_LENGTH);
                *response.body_mut() = self.client_body(HttpBody::new(reader));
            }
        }
        *response.headers_mut() = headers;
        response
    }

    /// A stored body failed before any of it was sent: the client gets a status, not a body.
    fn failed_before_head(&self, error: BodyError) -> Response<RespBody> {
        match error {
            BodyError::Aborted(reason) => {
                self.metrics.abort(reason.kind());
                tracing::debug!(%reason, "body aborted before the response head");
                full(StatusCode::BAD_GATEWAY, "origin body failed\n")
            }
            BodyError::RangeNotSatisfiable { .. } | BodyError::InvalidRange { .. } => {
                full(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable\n")
            }
            other => {
                self.metrics.body_errors.inc();
                tracing::warn!(error = %other, "body failed before the response head");
                full(StatusCode::BAD_GATEWAY, "body failed\n")
            }
        }
    }

    /// A stored body as the client's response body, counting bytes and aborts.
    fn client_body(&self, body: HttpBody) -> RespBody {
        let bytes = Arc::clone(&self.metrics);
        let errors = Arc::clone(&self.metrics);
        body.map_frame(move |frame| {
            if let Some(data) = frame.data_ref() {
                bytes.client_bytes.add(data.len() as u64);
            }
            frame
        })
        .map_err(move |error| {
            match &error {
                BodyError::Aborted(reason) => {
                    errors.abort(reason.kind());
                    tracing::debug!(%reason, "client body ends in an error: the write was aborted");
                }
                other => {
                    errors.body_errors.inc();
                    tracing::warn!(error = %other, "client body ends in an error");
                }
            }
            Box::new(error) as Box<dyn std::error::Error + Send + Sync>
        })
        .boxed_unsync()
    }
}

/// Whether a `GET`/`HEAD` with these request headers is answered 304 by a stored 200 with
/// `stored` headers: `If-None-Match` (weak comparison, `*` matches) when present, else
/// `If-Modified-Since` against `Last-Modified`.
/// Whether the request's `If-Match` (strong comparison), or else its `If-Unmodified-Since`,
/// is false for the stored response (RFC 9110 13.1.1, 13.1.4). An invalid date, or a stored
/// response without `Last-Modified`, leaves `If-Unmodified-Since` unevaluated (true).
fn precondition_failed(request: &HeaderMap, stored: &HeaderMap) -> bool {
    if request.contains_key(header::IF_MATCH) {
        let strong = stored
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|tag| !tag.starts_with("W/"));
        let matched = entity_tags(request, header::IF_MATCH)
            .any(|tag| tag == "*" || (!tag.starts_with("W/") && Some(tag) == strong));
        return !matched;
    }
    match (
        policy::http_date(request, header::IF_UNMODIFIED_SINCE),
        policy::http_date(stored, header::LAST_MODIFIED),
    ) {
        (Some(since), Some(modified)) => modified > since,
        _ => false,
    }
}

/// Whether the request's `If-None-Match` (weak comparison), or else its `If-Modified-Since`,
/// says the client has the stored response (RFC 9110 13.1.2, 13.1.3).
fn not_modified(request: &HeaderMap, stored: &HeaderMap) -> bool {
    let opaque = |tag: &str| tag.trim_start_matches("W/").to_owned();
    if request.contains_key(header::IF_NONE_MATCH) {
        let Some(etag) = stored.get(header::ETAG).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let etag = opaque(etag.trim());
        return entity_tags(request, header::IF_NONE_MATCH)
            .any(|tag| tag == "*" || opaque(tag) == etag);
    }
    match (
        policy::http_date(request, header::IF_MODIFIED_SINCE),
        policy::http_date(stored, header::LAST_MODIFIED),
    ) {
        (Some(since), Some(modified)) => modified <= since,
        _ => false,
    }
}

/// The entity tags (or `*`) listed in every `name` field, trimmed.
fn entity_tags(headers: &HeaderMap, name: HeaderName) -> impl Iterator<Item = &str> {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

/// The status for a refresh that failed.
fn flight_error_response(error: &coalesce::FlightError<FetchError>) -> Response<RespBody> {
    match error.fill_error().map(|e| &**e) {
        Some(FetchError::Timeout(_)) | None => {
            full(StatusCode::GATEWAY_TIMEOUT, "origin timed out\n")
        }
        Some(_) => full(StatusCode::BAD_GATEWAY, "origin unreachable\n"),
    }
}

/// A copy of a request head (`Parts` is not `Clone` because of its extensions, unused here).
fn clone_parts(parts: &Parts) -> Parts {
    let mut request = Request::new(());
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = parts.uri.clone();
    *request.version_mut() = parts.version;
    *request.headers_mut() = parts.headers.clone();
    request.into_parts().0
}

fn empty_up_body() -> UpBody {
    Empty::new().map_err(|never| match never {}).boxed()
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The request's authority for cache keys: `Host`, else the absolute URI's, with the `http`
/// scheme's default port dropped (`h:80` and `h` name one origin, RFC 9110 4.2.3: they were two
/// keys, and a PURGE with one form missed the other's copy); `None` when missing (HTTP/1.1
/// requires one) or not a valid authority. An authority with userinfo (`x@h`) is not valid:
/// `Host` has none (RFC 9110 7.2), and keying it as `h` would let a request the origin may
/// route elsewhere fill `h`'s objects. Two `Host` headers are not valid either (RFC 9112 3.2:
/// a server MUST answer 400): an origin that routes by the last would fill the first's keys.
fn authority(parts: &Parts) -> Option<String> {
    if parts.headers.get_all(header::HOST).iter().nth(1).is_some() {
        return None;
    }
    let key = |a: &http::uri::Authority| -> Option<String> {
        if a.as_str().contains('@') {
            return None;
        }
        Some(match a.port_u16() {
            Some(80) => a.host().to_owned(),
            _ => a.as_str().to_owned(),
        })
    };
    // A Host that is present but invalid is a 400 (RFC 9112 3.2), not a fall back to the
    // request target's authority: the raw Host still goes to the origin, which could then
    // answer for another site than the key names (found by review: `GET http://a/` with
    // `Host: b:"` was stored as a's page with b's answer).
    let from_host = match parts.headers.get(header::HOST) {
        None => None,
        Some(h) => match h
            .to_str()
            .ok()
            .and_then(|h| h.parse::<http::uri::Authority>().ok())
        {
            Some(a) => Some(key(&a)),
            None => return None,
        },
    };
    let from_uri = || parts.uri.authority().map(key);
    match from_host.or_else(from_uri) {
        Some(None) => None,
        Some(Some(authority)) => Some(authority),
        // HTTP/1.0 predates Host: such clients share one keyspace.
        None if parts.version <= Version::HTTP_10 => Some(String::new()),
        None => None,
    }
}
