//! Test harness for the end-to-end tests: a scripted origin on a raw TCP socket (so a test says
//! exactly which bytes go out and whether the connection ends with FIN or RST), a proxy on a
//! loopback port, a one-connection hyper client, and `curl` discovery.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Version};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use stream_cache::MemStorage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use herd_proxy::{Config, Proxy};

/// Hang guard for every wait in these tests (never an assertion on time).
pub const GUARD: Duration = Duration::from_secs(20);

/// What the scripted origin does on one connection.
#[derive(Clone)]
pub enum Step {
    Send(Bytes),
    /// Wait until the gate opens.
    Wait(Gate),
    Sleep(Duration),
    /// End with RST (zero linger).
    Reset,
    /// End with FIN.
    Close,
    /// Keep the connection open without answering (until the peer leaves).
    Hang,
}

/// A one-shot latch the test opens.
#[derive(Clone)]
pub struct Gate(watch::Sender<bool>);

impl Gate {
    pub fn new() -> Self {
        Gate(watch::channel(false).0)
    }

    pub fn open(&self) {
        self.0.send_replace(true);
    }

    async fn wait(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|open| *open).await;
    }
}

type Script = Arc<dyn Fn(usize, &str) -> Vec<Step> + Send + Sync>;

/// The scripted origin: `script(request_index, request_head)` gives the steps per request (one
/// request per connection; every response should carry `Connection: close`).
pub struct Origin {
    pub addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    heads: Arc<parking_lot::Mutex<Vec<String>>>,
}

impl Origin {
    pub async fn start(script: impl Fn(usize, &str) -> Vec<Step> + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let script: Script = Arc::new(script);
        let (counter, seen) = (Arc::clone(&requests), Arc::clone(&heads));
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let (script, counter, seen) =
                    (Arc::clone(&script), Arc::clone(&counter), Arc::clone(&seen));
                tokio::spawn(async move {
                    let Some(head) = read_head(&mut stream).await else {
                        return;
                    };
                    let index = counter.fetch_add(1, Ordering::SeqCst);
                    seen.lock().push(head.clone());
                    for step in script(index, &head) {
                        match step {
                            Step::Send(bytes) => {
                                if stream.write_all(&bytes).await.is_err() {
                                    return;
                                }
                            }
                            Step::Wait(gate) => gate.wait().await,
                            Step::Sleep(d) => tokio::time::sleep(d).await,
                            Step::Reset => {
                                let _ = stream.set_zero_linger();
                                return;
                            }
                            Step::Close => {
                                let _ = stream.shutdown().await;
                                return;
                            }
                            Step::Hang => {
                                let mut sink = [0u8; 1024];
                                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                                return;
                            }
                        }
                    }
                    let _ = stream.shutdown().await;
                });
            }
        });
        Origin {
            addr,
            requests,
            heads,
        }
    }

    /// Requests the origin has received so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// The request heads received so far.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().clone()
    }
}

async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > 1 << 20 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// The deterministic body of `len` bytes every test origin serves.
pub fn body_of(len: usize) -> Bytes {
    (0..len)
        .map(|i| b'a' + (i % 26) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// A response head with `Content-Length`.
pub fn head_len(len: usize, extra: &str) -> Bytes {
    Bytes::from(format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nCache-Control: max-age=60\r\nConnection: close\r\n{extra}\r\n"
    ))
}

/// A chunked response head.
pub fn head_chunked(extra: &str) -> Bytes {
    Bytes::from(format!(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nCache-Control: max-age=60\r\nConnection: close\r\n{extra}\r\n"
    ))
}

/// `data` as one chunk of chunked encoding.
pub fn chunk(data: &[u8]) -> Bytes {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out.into()
}

pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// A proxy in front of `origin` on a loopback port, memory storage.
pub async fn proxy(origin: SocketAddr, tweak: impl FnOnce(&mut Config)) -> (SocketAddr, Proxy) {
    proxy_over(origin, Arc::new(MemStorage::new(256 << 20)), tweak).await
}

/// A proxy in front of `origin` on a loopback port over `storage`.
pub async fn proxy_over(
    origin: SocketAddr,
    storage: herd_proxy::SharedStorage,
    tweak: impl FnOnce(&mut Config),
) -> (SocketAddr, Proxy) {
    let mut config = Config::new(origin.to_string());
    config.purge_token = Some("sesame".to_owned());
    tweak(&mut config);
    let proxy = Proxy::new(config, storage).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(proxy.clone().serve(listener));
    (addr, proxy)
}

/// Send one request on a fresh connection and return the response head (body streaming).
pub async fn send(addr: SocketAddr, request: Request<Empty<Bytes>>) -> Response<Incoming> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    tokio::time::timeout(GUARD, sender.send_request(request))
        .await
        .expect("response head within the hang guard")
        .expect("response head")
}

/// An HTTP/2 (h2c, prior knowledge) connection to the proxy, its driver spawned.
pub async fn h2_sender(
    proxy: std::net::SocketAddr,
) -> hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>> {
    let stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    sender
}

pub fn get(path: &str) -> http::request::Builder {
    Request::get(path).header("host", "test.local")
}

pub async fn get_simple(addr: SocketAddr, path: &str) -> Response<Incoming> {
    send(addr, get(path).body(Empty::new()).unwrap()).await
}

pub fn get_10(path: &str) -> Request<Empty<Bytes>> {
    get(path)
        .version(Version::HTTP_10)
        .body(Empty::new())
        .unwrap()
}

/// The whole body, or the error that ended it.
pub async fn read_body(response: Response<Incoming>) -> Result<Bytes, hyper::Error> {
    tokio::time::timeout(GUARD, response.into_body().collect())
        .await
        .expect("body ends within the hang guard")
        .map(|c| c.to_bytes())
}

/// Read at least `n` body bytes; returns them and the rest of the body.
pub async fn read_prefix(body: &mut Incoming, n: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < n {
        let frame = tokio::time::timeout(GUARD, body.frame())
            .await
            .expect("prefix within the hang guard")
            .expect("body did not end before the prefix")
            .expect("no error before the prefix");
        if let Ok(data) = frame.into_data() {
            got.extend_from_slice(&data);
        }
    }
    got
}

/// Poll `condition` until true (bounded by the hang guard).
pub async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(GUARD, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "hang guard: {what}");
}

/// A temp directory removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("herd-proxy-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether `curl` can be used; prints a loud skip when not, and fails under `CI=true`.
pub fn curl_or_skip(test: &str) -> bool {
    let found = std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: curl is required under CI=true"
        );
        eprintln!("\n*** SKIPPED {test}: curl is not installed (apt-get install -y curl) ***\n");
    }
    found
}
