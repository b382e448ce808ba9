//! Seed-001 end to end: an origin that dies mid-body must never give any client (the one that
//! started the fill, one that attached mid-stream, an HTTP/1.0 one) a short body that looks
//! complete, and the next request must refetch. Real sockets, hyper clients and `curl`.

mod common;

use std::process::Stdio;

use common::*;
use http_body_util::BodyExt;

const FULL: usize = 100_000;
const PREFIX: usize = 40_000;

#[derive(Clone, Copy, Debug)]
enum Framing {
    Length,
    Chunked,
}

#[derive(Clone, Copy, Debug)]
enum Death {
    Reset,
    Close,
}

/// Connection 0: the head and a prefix, then (once `gate` opens) death. Later connections get
/// the whole body.
fn dying_origin(framing: Framing, death: Death, gate: Gate) -> impl Fn(usize, &str) -> Vec<Step> {
    move |index, _head| {
        let body = body_of(FULL);
        let mut steps = Vec::new();
        match framing {
            Framing::Length => {
                steps.push(Step::Send(head_len(FULL, "")));
                if index == 0 {
                    steps.push(Step::Send(body.slice(..PREFIX)));
                } else {
                    steps.push(Step::Send(body));
                }
            }
            Framing::Chunked => {
                steps.push(Step::Send(head_chunked("")));
                if index == 0 {
                    steps.push(Step::Send(chunk(&body[..PREFIX])));
                } else {
                    steps.push(Step::Send(chunk(&body)));
                    steps.push(Step::Send(bytes::Bytes::from_static(LAST_CHUNK)));
                }
            }
        }
        if index == 0 {
            steps.push(Step::Wait(gate.clone()));
            steps.push(match death {
                Death::Reset => Step::Reset,
                Death::Close => Step::Close,
            });
        }
        steps
    }
}

async fn hyper_clients_see_the_error(framing: Framing, death: Death) {
    let gate = Gate::new();
    let origin = Origin::start(dying_origin(framing, death, gate.clone())).await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;

    let first = get_simple(proxy, "/obj").await;
    assert_eq!(first.status(), 200);
    let mut first_body = first.into_body();
    let first_prefix = read_prefix(&mut first_body, PREFIX).await;

    // A second client attaches while the body is still arriving.
    let second = get_simple(proxy, "/obj").await;
    assert_eq!(
        second.headers()["x-cache"],
        "HIT",
        "attached to the partial body"
    );
    let mut second_body = second.into_body();
    let second_prefix = read_prefix(&mut second_body, PREFIX).await;
    assert_eq!(first_prefix, &body_of(FULL)[..PREFIX]);
    assert_eq!(second_prefix, first_prefix);

    gate.open();
    for (who, mut body) in [("first", first_body), ("mid-stream", second_body)] {
        let rest = tokio::time::timeout(GUARD, async {
            loop {
                match body.frame().await {
                    None => return Ok(()),
                    Some(Err(error)) => return Err(error),
                    Some(Ok(_)) => {}
                }
            }
        })
        .await
        .expect("hang guard");
        assert!(
            rest.is_err(),
            "{framing:?}/{death:?}: the {who} client saw a clean end of a truncated body"
        );
    }

    // The aborted object is gone: the next request refetches and gets the whole body.
    let next = get_simple(proxy, "/obj").await;
    assert_eq!(next.status(), 200);
    assert_eq!(read_body(next).await.unwrap(), body_of(FULL));
    assert_eq!(origin.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed001_content_length_origin_reset() {
    hyper_clients_see_the_error(Framing::Length, Death::Reset).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed001_content_length_origin_closes_cleanly() {
    hyper_clients_see_the_error(Framing::Length, Death::Close).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed001_chunked_origin_reset() {
    hyper_clients_see_the_error(Framing::Chunked, Death::Reset).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed001_chunked_origin_closes_cleanly() {
    hyper_clients_see_the_error(Framing::Chunked, Death::Close).await;
}

/// An origin whose body has no framing (HTTP/1.1 with neither `Content-Length` nor chunked
/// encoding: it ends when the origin closes the connection) cannot tell its death from its
/// end: a FIN after 40,000 of 100,000 bytes reads as a clean, complete body. Such a body must
/// not be stored (served to later clients as a complete `HIT`); it is passed through, and the
/// next request goes to the origin again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_delimited_body_is_passed_not_stored() {
    let origin = Origin::start(|index, _head| {
        let body = body_of(FULL);
        let head = "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nConnection: close\r\n\r\n";
        let sent = if index == 0 {
            body.slice(..PREFIX)
        } else {
            body
        };
        vec![
            Step::Send(bytes::Bytes::from_static(head.as_bytes())),
            Step::Send(sent),
            Step::Close,
        ]
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let first = get_simple(proxy, "/unframed").await;
    assert_eq!(first.status(), 200);
    assert_ne!(
        first.headers().get("x-cache").map(|v| v.as_bytes()),
        Some(&b"HIT"[..])
    );
    // What the origin sent, ended as the origin ended it (the proxy cannot know better).
    assert_eq!(read_body(first).await.unwrap().len(), PREFIX);
    let second = get_simple(proxy, "/unframed").await;
    assert_ne!(
        second.headers().get("x-cache").map(|v| v.as_bytes()),
        Some(&b"HIT"[..]),
        "a body that ended with the origin's connection was stored"
    );
    assert_eq!(read_body(second).await.unwrap(), body_of(FULL));
    assert_eq!(origin.requests(), 2);
}

/// Over HTTP/2 a range of a body still arriving ends at its last byte: before, hyper's h2
/// sender kept polling the body until the whole download finished, so a 10-byte range waited
/// for the rest of the body and, when the origin then died, was reset after every byte it
/// asked for had arrived. (HTTP/1.1 stops at the `Content-Length` by itself.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_range_of_a_body_still_arriving_ends_at_its_last_byte() {
    let gate = Gate::new();
    let origin = Origin::start(dying_origin(Framing::Length, Death::Reset, gate.clone())).await;
    let (proxy_addr, _proxy) = proxy(origin.addr, |_| {}).await;
    // A first client starts the fill and reads what has arrived.
    let first = get_simple(proxy_addr, "/obj").await;
    let mut first_body = first.into_body();
    read_prefix(&mut first_body, PREFIX).await;
    let mut sender = h2_sender(proxy_addr).await;
    let request = http::Request::get("http://test.local/obj")
        .version(http::Version::HTTP_2)
        .header("range", "bytes=0-9")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 206);
    let range = tokio::time::timeout(GUARD, response.into_body().collect())
        .await
        .expect("the range waited for the rest of the download")
        .expect("a range whose bytes all arrived ends cleanly");
    assert_eq!(range.to_bytes(), body_of(FULL).slice(..10));
    // The origin dies: the full-body client sees it, as before.
    gate.open();
    let rest = tokio::time::timeout(GUARD, first_body.collect())
        .await
        .expect("hang guard");
    assert!(rest.is_err());
}

struct Curl {
    child: tokio::process::Child,
    out: std::path::PathBuf,
}

fn curl(proxy: std::net::SocketAddr, path: &str, extra: &[&str], out_name: &str) -> Curl {
    let out = std::env::temp_dir().join(format!("herd-proxy-{}-{out_name}", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let child = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "-H", "Host: test.local", "-o"])
        .arg(&out)
        .args(extra)
        .arg(format!("http://{proxy}{path}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn curl");
    Curl { child, out }
}

impl Curl {
    /// Exit code and the number of body bytes written.
    async fn finish(self) -> (i32, usize) {
        let output = self.child.wait_with_output().await.expect("curl ran");
        let len = std::fs::read(&self.out).map_or(0, |b| b.len());
        let _ = std::fs::remove_file(&self.out);
        eprintln!(
            "curl: {:?} {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.code().unwrap_or(-1), len)
    }
}

async fn curl_clients_see_the_error(framing: Framing, name: &str) {
    if !curl_or_skip(name) {
        return;
    }
    let gate = Gate::new();
    let origin = Origin::start(dying_origin(framing, Death::Reset, gate.clone())).await;
    let (proxy_addr, proxy) = proxy(origin.addr, |_| {}).await;
    let metrics = proxy.metrics();

    let first = curl(proxy_addr, "/obj", &[], &format!("{name}-first"));
    until("the first curl started the fill", || origin.requests() == 1).await;
    let second = curl(proxy_addr, "/obj", &[], &format!("{name}-second"));
    until("the second curl attached to the partial body", || {
        metrics.hits() == 1
    })
    .await;
    gate.open();
    let (first_code, first_len) = first.finish().await;
    let (second_code, second_len) = second.finish().await;
    for (who, code, len) in [
        ("first", first_code, first_len),
        ("mid-stream", second_code, second_len),
    ] {
        assert!(
            len < FULL,
            "{who}: got {len} bytes of a body that died at {PREFIX}"
        );
        match framing {
            // curl: "transfer closed with N bytes remaining to read".
            Framing::Length => assert_eq!(code, 18, "{who}: curl must report a partial file"),
            Framing::Chunked => assert_ne!(
                code, 0,
                "{who}: curl must not accept an unterminated chunked body"
            ),
        }
    }
    let again = curl(proxy_addr, "/obj", &[], &format!("{name}-again"));
    assert_eq!(
        again.finish().await,
        (0, FULL),
        "the next request refetches"
    );
    assert_eq!(origin.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed001_curl_content_length_exit_18() {
    curl_clients_see_the_error(Framing::Length, "seed001_curl_content_length_exit_18").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed001_curl_chunked_nonzero_exit() {
    curl_clients_see_the_error(Framing::Chunked, "seed001_curl_chunked_nonzero_exit").await;
}

/// nginx 1.22 and Varnish 7.1 give a 1.0 client 40,000 of 100,000 bytes and exit 0 here: a
/// 1.0 body of unknown length ends at connection close, so a truncation looks complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_client_chunked_origin_dies_never_gets_a_short_body() {
    let name = "http10_client_chunked_origin_dies_never_gets_a_short_body";
    let gate = Gate::new();
    let origin = Origin::start(dying_origin(Framing::Chunked, Death::Reset, gate.clone())).await;
    let (proxy_addr, proxy) = proxy(origin.addr, |_| {}).await;
    let metrics = proxy.metrics();

    // A 1.1 client holds the fill open and proves the prefix is stored.
    let holder = get_simple(proxy_addr, "/obj").await;
    let mut holder_body = holder.into_body();
    read_prefix(&mut holder_body, PREFIX).await;

    // A hyper HTTP/1.0 client and (if installed) curl --http1.0 attach mid-body.
    let hyper10 = tokio::spawn(async move {
        let response = send(proxy_addr, get_10("/obj")).await;
        let status = response.status();
        (status, read_body(response).await)
    });
    let with_curl = curl_or_skip(name);
    let curl10 = with_curl.then(|| curl(proxy_addr, "/obj", &["--http1.0", "--fail"], "http10"));
    let attached = if with_curl { 2 } else { 1 };
    until("the 1.0 clients attached", || metrics.hits() == attached).await;
    gate.open();

    let (status, body) = hyper10.await.unwrap();
    // An error is fine; a short body with a clean end is not.
    if let Ok(bytes) = body {
        assert_ne!(
            status,
            200,
            "a 1.0 client got a 200 with {} bytes",
            bytes.len()
        );
        assert!(
            bytes.len() < PREFIX,
            "no part of the truncated body as a success"
        );
    }
    if let Some(curl10) = curl10 {
        let (code, len) = curl10.finish().await;
        assert_ne!(code, 0, "curl --http1.0 exited 0 with {len} bytes");
        assert!(len < PREFIX);
    }
    // The next 1.0 request refetches and gets the whole body with its length.
    let next = send(proxy_addr, get_10("/obj")).await;
    assert_eq!(next.status(), 200);
    assert_eq!(next.headers()["content-length"], FULL.to_string().as_str());
    assert_eq!(read_body(next).await.unwrap(), body_of(FULL));
}

/// A complete chunked body reaches a 1.0 client with a Content-Length (the body is held until
/// complete).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_client_gets_complete_chunked_body_with_length() {
    let origin = Origin::start(|_, _| {
        vec![
            Step::Send(head_chunked("")),
            Step::Send(chunk(&body_of(5000)[..2000])),
            Step::Sleep(std::time::Duration::from_millis(20)),
            Step::Send(chunk(&body_of(5000)[2000..])),
            Step::Send(bytes::Bytes::from_static(LAST_CHUNK)),
        ]
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let response = send(proxy, get_10("/c")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-length"], "5000");
    assert_eq!(read_body(response).await.unwrap(), body_of(5000));
    // Once complete, the stored body's length is known to every client.
    let response = get_simple(proxy, "/c").await;
    assert_eq!(response.headers()["content-length"], "5000");
    assert_eq!(read_body(response).await.unwrap(), body_of(5000));
    assert_eq!(origin.requests(), 1);
}

/// HTTP/2 (h2c, prior knowledge): an aborted body ends its stream with RST_STREAM, which the
/// client sees as an error (curl: non-zero exit), and the connection's other streams go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_client_sees_a_stream_error_when_the_origin_dies() {
    let gate = Gate::new();
    let origin = Origin::start(dying_origin(Framing::Length, Death::Reset, gate.clone())).await;
    let (proxy_addr, proxy) = proxy(origin.addr, |_| {}).await;
    let mut sender = h2_sender(proxy_addr).await;
    let request = || {
        http::Request::get("http://test.local/obj")
            .version(http::Version::HTTP_2)
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap()
    };
    let response = sender.send_request(request()).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    let mut body = response.into_body();
    read_prefix(&mut body, PREFIX).await;

    let name = "http2_client_sees_a_stream_error_when_the_origin_dies";
    let curl2 =
        curl_or_skip(name).then(|| curl(proxy_addr, "/obj", &["--http2-prior-knowledge"], "h2"));
    if curl2.is_some() {
        until("curl attached", || proxy.metrics().hits() == 1).await;
    }
    gate.open();
    let rest = tokio::time::timeout(GUARD, body.collect())
        .await
        .expect("hang guard");
    assert!(rest.is_err(), "the HTTP/2 stream must end in an error");
    if let Some(curl2) = curl2 {
        let (code, len) = curl2.finish().await;
        assert_ne!(
            code, 0,
            "curl --http2-prior-knowledge exited 0 with {len} bytes"
        );
        assert!(len < FULL);
    }
    // The same connection carries the next request, which refetches the whole body.
    sender.ready().await.unwrap();
    let next = sender.send_request(request()).await.unwrap();
    assert_eq!(read_body(next).await.unwrap(), body_of(FULL));
    assert_eq!(origin.requests(), 2);
}

/// `/metrics` counts an origin death mid-body once as a fill abort (by cause), once per client
/// as a client abort, and shows the fill in flight while it streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_dead_fill_once_and_each_client_body() {
    let gate = Gate::new();
    let origin = Origin::start(dying_origin(Framing::Length, Death::Reset, gate.clone())).await;
    let (proxy_addr, proxy) = proxy(origin.addr, |_| {}).await;
    let first = get_simple(proxy_addr, "/obj").await;
    let mut first_body = first.into_body();
    read_prefix(&mut first_body, PREFIX).await;
    let second = get_simple(proxy_addr, "/obj").await;
    let mut second_body = second.into_body();
    read_prefix(&mut second_body, PREFIX).await;
    assert!(
        proxy
            .render_metrics()
            .lines()
            .any(|l| l == "herd_proxy_fills_in_flight 1")
    );
    gate.open();
    for body in [first_body, second_body] {
        let rest = http_body_util::BodyExt::collect(body).await;
        assert!(rest.is_err(), "a dead origin's body must end in an error");
    }
    until("the fill has ended", || {
        proxy.cache_stats().fills_in_flight == 0
    })
    .await;
    let text = proxy.render_metrics();
    for line in [
        "herd_proxy_fill_aborts_total{cause=\"upstream\"} 1",
        "herd_proxy_fill_aborts_total{cause=\"no_readers\"} 0",
        "herd_proxy_client_aborts_total{cause=\"upstream\"} 2",
        "herd_proxy_fills_in_flight 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}
