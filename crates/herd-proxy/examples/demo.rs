//! The herd-proxy demo: `cargo run --release -p herd-proxy --example demo`, no arguments.
//!
//! Starts on loopback ports an origin (slow endpoints, endpoints whose body dies mid-way on their
//! first fetch, large endpoints), then, one after the other, two caching proxies in front of
//! their own copy of it, and sends each the same few hundred concurrent HTTP/1.1 requests from
//! real clients on real sockets, some of which hang up mid-response:
//! - **herd**: `herd_proxy::Proxy` over `stream_cache::MemStorage`;
//! - **naive**: the same proxy over a storage adapter configured the way pingora's memory cache
//!   behaves (upstream issue 932): a reader of a write whose writer died sees a clean end of
//!   body. The bug is shown, not described: its clients count truncated bodies that arrived as
//!   complete, properly terminated 200 responses.
//!
//! Every body is checked byte for byte against what the origin meant to send.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use stream_cache::{
    BodyError, BodyReader, BodySource, BodyWriter, ByteRange, CacheKey, Capabilities, Hit,
    MemStorage, ObjectMeta, Storage, StorageError, WriteError, WriteFence, WriteState,
};
use tokio::net::{TcpListener, TcpStream};

const DIE_LEN: usize = 100_000;
const DIE_AT: usize = 40_000;
const SLOW_LEN: usize = 16 * 1024;
const LARGE_LEN: usize = 2 << 20;
const REQUESTS: usize = 400;

// ---------------------------------------------------------------- the origin

fn body_of(len: usize, seed: usize) -> Bytes {
    (0..len)
        .map(|i| b'a' + ((i + seed) % 26) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// What a path should deliver.
fn expected(path: &str) -> Bytes {
    let (kind, n) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or(("", "0"));
    let n: usize = n.parse().unwrap_or(0);
    match kind {
        "die" => body_of(DIE_LEN, n),
        "slow" => body_of(SLOW_LEN, n),
        _ => body_of(LARGE_LEN, n),
    }
}

type OriginBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

struct Origin {
    fetches: AtomicUsize,
    /// Fetches per `/die/N`: the first one of each dies mid-body.
    die_fetches: parking_lot::Mutex<std::collections::HashMap<String, usize>>,
}

impl Origin {
    async fn serve(
        self: Arc<Self>,
        request: Request<hyper::body::Incoming>,
    ) -> Response<OriginBody> {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let path = request.uri().path().to_owned();
        let body = expected(&path);
        let cache = ("cache-control", "max-age=300");
        if path.starts_with("/die/") {
            let first = {
                let mut fetches = self.die_fetches.lock();
                let n = fetches.entry(path.clone()).or_insert(0);
                *n += 1;
                *n == 1
            };
            // Chunked (no Content-Length): a body of unknown length, as streamed video or
            // generated pages are.
            let chunks: Vec<Result<Frame<Bytes>, std::io::Error>> = if first {
                vec![
                    Ok(Frame::data(body.slice(..DIE_AT / 2))),
                    Ok(Frame::data(body.slice(DIE_AT / 2..DIE_AT))),
                    Err(std::io::Error::other("origin process crashed")),
                ]
            } else {
                body.chunks(16 * 1024)
                    .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                    .collect()
            };
            let stream = futures::stream::iter(chunks).then(|chunk| async move {
                tokio::time::sleep(Duration::from_millis(15)).await;
                chunk
            });
            return Response::builder()
                .header(cache.0, cache.1)
                .body(BodyExt::boxed(StreamBody::new(stream)))
                .unwrap_or_default();
        }
        if path.starts_with("/slow/") {
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        let len = body.len();
        let chunks: Vec<Result<Frame<Bytes>, std::io::Error>> = body
            .chunks(64 * 1024)
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        Response::builder()
            .header(cache.0, cache.1)
            .header("content-length", len)
            .body(BodyExt::boxed(StreamBody::new(futures::stream::iter(
                chunks,
            ))))
            .unwrap_or_default()
    }
}

async fn start_origin() -> (SocketAddr, Arc<Origin>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
    let addr = listener.local_addr().expect("origin addr");
    let origin = Arc::new(Origin {
        fetches: AtomicUsize::new(0),
        die_fetches: parking_lot::Mutex::new(Default::default()),
    });
    let served = Arc::clone(&origin);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let origin = Arc::clone(&served);
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let origin = Arc::clone(&origin);
                    async move { Ok::<_, Infallible>(origin.serve(request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, origin)
}

// ---------------------------------------------------------------- the naive storage

/// `MemStorage` as pingora's memory storage behaves: a reader whose writer died gets `Ok(None)`,
/// the value that means "end of body".
struct NaiveStorage(MemStorage);
struct NaiveReader(Box<dyn BodyReader>);
struct NaiveWriter(Box<dyn BodyWriter>);
struct NaiveSource(Arc<dyn BodySource>);

#[async_trait]
impl BodyReader for NaiveReader {
    async fn read(&mut self) -> Result<Option<Bytes>, BodyError> {
        match self.0.read().await {
            Err(BodyError::Aborted(_)) => Ok(None), // the bug
            other => other,
        }
    }
    async fn seek(&mut self, range: ByteRange) -> Result<(), BodyError> {
        self.0.seek(range).await
    }
    fn state(&self) -> WriteState {
        self.0.state()
    }
    fn position(&self) -> u64 {
        self.0.position()
    }
}

impl BodySource for NaiveSource {
    fn open(&self) -> Box<dyn BodyReader> {
        Box::new(NaiveReader(self.0.open()))
    }
    fn state(&self) -> WriteState {
        self.0.state()
    }
    fn reader_count(&self) -> Option<usize> {
        self.0.reader_count()
    }
}

#[async_trait]
impl BodyWriter for NaiveWriter {
    async fn write(&mut self, chunk: Bytes) -> Result<(), WriteError> {
        self.0.write(chunk).await
    }
    async fn finish(self: Box<Self>) -> Result<u64, WriteError> {
        self.0.finish().await
    }
    fn abort(self: Box<Self>, reason: stream_cache::AbortReason) {
        self.0.abort(reason);
    }
    fn state(&self) -> WriteState {
        self.0.state()
    }
    fn source(&self) -> Option<Arc<dyn BodySource>> {
        self.0
            .source()
            .map(|s| Arc::new(NaiveSource(s)) as Arc<dyn BodySource>)
    }
}

#[async_trait]
impl Storage for NaiveStorage {
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn lookup(&self, key: &CacheKey) -> Result<Option<Hit>, StorageError> {
        Ok(self.0.lookup(key).await?.map(|hit| Hit {
            meta: hit.meta,
            body: Box::new(NaiveReader(hit.body)),
        }))
    }
    fn fence(&self, key: &CacheKey) -> WriteFence {
        self.0.fence(key)
    }
    async fn begin_write_fenced(
        &self,
        key: &CacheKey,
        meta: ObjectMeta,
        fence: WriteFence,
    ) -> Result<Box<dyn BodyWriter>, StorageError> {
        Ok(Box::new(NaiveWriter(
            self.0.begin_write_fenced(key, meta, fence).await?,
        )))
    }
    async fn purge(&self, key: &CacheKey) -> Result<bool, StorageError> {
        self.0.purge(key).await
    }
}

// ---------------------------------------------------------------- the clients

#[derive(Debug)]
enum Outcome {
    Correct,
    TruncatedAsComplete,
    Error,
    HungUp,
}

async fn client(proxy: SocketAddr, path: String, hang_up: bool) -> (Outcome, Option<Duration>) {
    let started = Instant::now();
    let Ok(stream) = TcpStream::connect(proxy).await else {
        return (Outcome::Error, None);
    };
    let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    else {
        return (Outcome::Error, None);
    };
    tokio::spawn(conn);
    let request = Request::get(path.as_str())
        .header("host", "demo.local")
        .body(Empty::<Bytes>::new())
        .unwrap_or_default();
    let Ok(response) = sender.send_request(request).await else {
        return (Outcome::Error, None);
    };
    let ttfb = started.elapsed();
    if response.status() != 200 {
        return (Outcome::Error, Some(ttfb));
    }
    let mut body = response.into_body();
    if hang_up {
        let _ = body.frame().await;
        return (Outcome::HungUp, Some(ttfb));
    }
    let outcome = match body.collect().await.map(|c| c.to_bytes()) {
        Err(_) => Outcome::Error,
        Ok(bytes) if bytes == expected(&path) => Outcome::Correct,
        // A 200 whose framing said "complete" but whose bytes are short.
        Ok(_) => Outcome::TruncatedAsComplete,
    };
    (outcome, Some(ttfb))
}

struct Row {
    name: &'static str,
    requests: usize,
    fetches: usize,
    correct: usize,
    truncated: usize,
    errors: usize,
    hung_up: usize,
    p50: Duration,
    p99: Duration,
}

async fn run(name: &'static str, storage: herd_proxy::SharedStorage) -> Row {
    let (origin_addr, origin) = start_origin().await;
    let mut config = herd_proxy::Config::new(origin_addr.to_string());
    config.max_object_size = 8 << 20;
    let proxy = herd_proxy::Proxy::new(config, storage).expect("valid config");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let proxy_addr = listener.local_addr().expect("proxy addr");
    let server = tokio::spawn(proxy.serve(listener));

    // 20 dying URLs, 12 slow ones, 4 large ones; each client picks one by index so both proxies
    // see the same requests. Every tenth client hangs up after its first chunk.
    let paths: Vec<String> = (0..REQUESTS)
        .map(|i| match i % 9 {
            0..=4 => format!("/die/{}", i % 20),
            5..=7 => format!("/slow/{}", i % 12),
            _ => format!("/large/{}", i % 4),
        })
        .collect();
    let tasks: Vec<_> = paths
        .into_iter()
        .enumerate()
        .map(|(i, path)| {
            tokio::spawn(async move {
                // Arrivals spread over ~0.4 s: some start fills, some attach mid-body.
                tokio::time::sleep(Duration::from_millis((i as u64 * 7919) % 400)).await;
                client(proxy_addr, path, i % 10 == 3).await
            })
        })
        .collect();
    let mut row = Row {
        name,
        requests: REQUESTS,
        fetches: 0,
        correct: 0,
        truncated: 0,
        errors: 0,
        hung_up: 0,
        p50: Duration::ZERO,
        p99: Duration::ZERO,
    };
    let mut ttfbs = Vec::with_capacity(REQUESTS);
    for task in tasks {
        let (outcome, ttfb) = task.await.unwrap_or((Outcome::Error, None));
        ttfbs.extend(ttfb);
        match outcome {
            Outcome::Correct => row.correct += 1,
            Outcome::TruncatedAsComplete => row.truncated += 1,
            Outcome::Error => row.errors += 1,
            Outcome::HungUp => row.hung_up += 1,
        }
    }
    server.abort();
    row.fetches = origin.fetches.load(Ordering::Relaxed);
    ttfbs.sort();
    let pick = |q: f64| {
        ttfbs
            .get(((ttfbs.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or_default()
    };
    row.p50 = pick(0.50);
    row.p99 = pick(0.99);
    row
}

fn print_table(row: &Row) {
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    println!("\n{} proxy", row.name);
    println!(
        "| requests | origin fetches | complete correct bodies | truncated bodies delivered as complete | client-visible errors | client hung up | p50 TTFB | p99 TTFB |"
    );
    println!(
        "|---------:|---------------:|------------------------:|---------------------------------------:|----------------------:|---------------:|---------:|---------:|"
    );
    println!(
        "| {:>8} | {:>14} | {:>23} | {:>38} | {:>21} | {:>14} | {:>8} | {:>8} |",
        row.requests,
        row.fetches,
        row.correct,
        row.truncated,
        row.errors,
        row.hung_up,
        ms(row.p50),
        ms(row.p99)
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        println!(
            "{REQUESTS} concurrent HTTP/1.1 clients per proxy over loopback; origin: 20 chunked \
             URLs of 100 KB whose first fetch dies at 40 KB, 12 slow URLs (150 ms), 4 URLs of 2 MiB; \
             every tenth client hangs up after its first chunk."
        );
        // A discarded round first: the first round in a fresh process pays its cold start
        // (thread and allocator warm-up, page faults) in its TTFB, whichever proxy it runs.
        let _ = run("warm-up", Arc::new(MemStorage::new(256 << 20))).await;
        let herd = run("herd", Arc::new(MemStorage::new(256 << 20))).await;
        print_table(&herd);
        let naive = run("naive (pingora-style storage: a dead writer reads as end of body)", Arc::new(NaiveStorage(MemStorage::new(256 << 20)))).await;
        print_table(&naive);
        println!(
            "\nherd: every client attached to a dying body sees an error (a missing last chunk: curl exit 18); \
             naive: {} clients got a short body in a well-formed 200 and cannot tell.",
            naive.truncated
        );
    });
}
