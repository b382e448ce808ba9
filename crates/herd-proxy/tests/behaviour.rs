//! End-to-end behaviour on real sockets: coalescing (200 clients, one fetch), client hang-ups,
//! purge, caching rules, ranges, 502/504 and bad input. Bounded waits are hang guards only.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Empty};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn whole(len: usize, extra: &'static str) -> impl Fn(usize, &str) -> Vec<Step> {
    move |_, _| vec![Step::Send(head_len(len, extra)), Step::Send(body_of(len))]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clients_on_a_cold_url_make_one_origin_fetch() {
    let gate = Gate::new();
    let origin = Origin::start({
        let gate = gate.clone();
        move |_, _| {
            let body = body_of(64 * 1024);
            vec![
                Step::Wait(gate.clone()),
                Step::Send(head_len(body.len(), "")),
                Step::Send(body.slice(..10_000)),
                Step::Sleep(Duration::from_millis(10)),
                Step::Send(body.slice(10_000..)),
            ]
        }
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let clients: Vec<_> = (0..200)
        .map(|_| {
            tokio::spawn(async move {
                let response = get_simple(proxy, "/cold").await;
                assert_eq!(response.status(), 200);
                read_body(response).await.expect("complete body")
            })
        })
        .collect();
    until("the fill reached the origin", || origin.requests() == 1).await;
    gate.open();
    for client in clients {
        assert_eq!(client.await.unwrap(), body_of(64 * 1024));
    }
    assert_eq!(origin.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_body_does_not_stop_the_fill() {
    let gate = Gate::new();
    let origin = Origin::start({
        let gate = gate.clone();
        move |_, _| {
            let body = body_of(50_000);
            vec![
                Step::Send(head_len(body.len(), "")),
                Step::Send(body.slice(..20_000)),
                Step::Wait(gate.clone()),
                Step::Send(body.slice(20_000..)),
            ]
        }
    })
    .await;
    let (proxy_addr, proxy) = proxy(origin.addr, |_| {}).await;
    let response = get_simple(proxy_addr, "/big").await;
    let mut body = response.into_body();
    read_prefix(&mut body, 20_000).await;
    drop(body); // the client hangs up mid-body
    gate.open();
    let metrics = proxy.metrics();
    // The next client gets the whole body from the same fill (a hit, partial or complete).
    let next = get_simple(proxy_addr, "/big").await;
    assert_eq!(next.headers()["x-cache"], "HIT");
    assert_eq!(read_body(next).await.unwrap(), body_of(50_000));
    assert_eq!(origin.requests(), 1);
    assert_eq!(metrics.upstream_fetches(), 1);
}

/// Seed-000: the client that started the fill hangs up while the origin is slow to answer, with
/// others waiting: the fill is handed on (exactly one more origin fetch) and nobody hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed000_first_client_hangs_up_while_origin_is_slow() {
    let gate = Gate::new();
    let origin = Origin::start({
        let gate = gate.clone();
        move |_, _| {
            vec![
                Step::Wait(gate.clone()),
                Step::Send(head_len(1000, "")),
                Step::Send(body_of(1000)),
            ]
        }
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    // The first client, on a raw socket so it can vanish.
    let mut first = TcpStream::connect(proxy).await.unwrap();
    first
        .write_all(b"GET /slow HTTP/1.1\r\nHost: test.local\r\n\r\n")
        .await
        .unwrap();
    until("the first client's fill reached the origin", || {
        origin.requests() == 1
    })
    .await;
    let waiters: Vec<_> = (0..10)
        .map(|_| tokio::spawn(async move { read_body(get_simple(proxy, "/slow").await).await }))
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await; // let them queue (not an assertion)
    drop(first);
    // hyper drops the hung-up client's handler, whose lead passes to one waiter: a second fetch.
    until("the lead passed to a waiter", || origin.requests() == 2).await;
    gate.open();
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap().unwrap(), body_of(1000));
    }
    assert_eq!(origin.requests(), 2, "exactly one more origin fetch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_needs_the_token_and_removes_the_object() {
    let origin = Origin::start(whole(100, "")).await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    read_body(get_simple(proxy, "/p").await).await.unwrap();
    assert_eq!(get_simple(proxy, "/p").await.headers()["x-cache"], "HIT");

    let purge = |token: Option<&str>| {
        let mut request = Request::builder()
            .method("PURGE")
            .uri("/p")
            .header("host", "test.local");
        if let Some(token) = token {
            request = request.header("x-purge-token", token);
        }
        request.body(Empty::<Bytes>::new()).unwrap()
    };
    assert_eq!(send(proxy, purge(None)).await.status(), 403);
    assert_eq!(send(proxy, purge(Some("wrong"))).await.status(), 403);
    assert_eq!(origin.requests(), 1);
    assert_eq!(send(proxy, purge(Some("sesame"))).await.status(), 200);
    let after = get_simple(proxy, "/p").await;
    assert_eq!(after.headers()["x-cache"], "MISS");
    read_body(after).await.unwrap();
    assert_eq!(origin.requests(), 2);
    assert_eq!(send(proxy, purge(Some("sesame"))).await.status(), 200);
    assert_eq!(send(proxy, purge(Some("sesame"))).await.status(), 404);
}

/// `Host: test.local:80` and `Host: test.local` name one origin (the default port of
/// `http`): one cached object, and a PURGE with either form removes it. They were two keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_the_default_port_shares_the_object_and_its_purge() {
    let origin = Origin::start(whole(100, "")).await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let with_port = |method: &str| {
        Request::builder()
            .method(method)
            .uri("/p")
            .header("host", "Test.Local:80")
            .header("x-purge-token", "sesame")
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    read_body(get_simple(proxy, "/p").await).await.unwrap();
    let hit = send(proxy, with_port("GET")).await;
    assert_eq!(hit.headers()["x-cache"], "HIT", "one object for both forms");
    read_body(hit).await.unwrap();
    assert_eq!(origin.requests(), 1);
    assert_eq!(send(proxy, with_port("PURGE")).await.status(), 200);
    let after = get_simple(proxy, "/p").await;
    assert_eq!(
        after.headers()["x-cache"],
        "MISS",
        "purged under the other form"
    );
    read_body(after).await.unwrap();
    assert_eq!(origin.requests(), 2);
}

/// A `Host` with userinfo (`x@test.local:80`) is refused: keyed by its host alone, a request
/// the origin may route to another virtual host (it gets the whole header) would fill
/// `test.local`'s objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_userinfo_is_refused() {
    let origin = Origin::start(whole(100, "")).await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let request = Request::builder()
        .uri("/p")
        .header("host", "x@test.local:80")
        .body(Empty::<Bytes>::new())
        .unwrap();
    assert_eq!(send(proxy, request).await.status(), 400);
    assert_eq!(origin.requests(), 0);
}

/// A request naming `Host` in `Connection` still reaches the origin with the `Host` it is keyed
/// by. Found by review: stripping the hop-by-hop headers deleted it, the origin got the
/// upstream's address as `Host` (its default site answered), and that answer was cached
/// under the client's site for everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_named_in_connection_still_reaches_the_origin() {
    let origin = Origin::start(whole(100, "")).await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let request = Request::builder()
        .uri("/p")
        .header("host", "test.local")
        .header("connection", "keep-alive, host")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = send(proxy, request).await;
    assert_eq!(response.status(), 200);
    read_body(response).await.unwrap();
    let heads = origin.heads();
    assert!(
        heads[0]
            .to_ascii_lowercase()
            .contains("\r\nhost: test.local\r\n"),
        "{}",
        heads[0]
    );
}

/// Two `Host` headers are refused (RFC 9112 3.2: a server MUST answer 400): keyed by the
/// first, the request could reach an origin that routes by the last and fill the first
/// site's objects with the other's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_host_headers_are_refused() {
    let origin = Origin::start(whole(100, "")).await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let request = Request::builder()
        .uri("/p")
        .header("host", "test.local")
        .header("host", "other.local")
        .body(Empty::<Bytes>::new())
        .unwrap();
    assert_eq!(send(proxy, request).await.status(), 400);
    assert_eq!(origin.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_while_the_body_streams_fails_its_readers_and_is_final() {
    let gate = Gate::new();
    let origin = Origin::start({
        let gate = gate.clone();
        move |index, _| {
            let body = body_of(30_000);
            if index == 0 {
                vec![
                    Step::Send(head_len(body.len(), "")),
                    Step::Send(body.slice(..10_000)),
                    Step::Wait(gate.clone()),
                    Step::Send(body.slice(10_000..)),
                ]
            } else {
                vec![Step::Send(head_len(body.len(), "")), Step::Send(body)]
            }
        }
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let streaming = get_simple(proxy, "/live").await;
    let mut body = streaming.into_body();
    read_prefix(&mut body, 10_000).await;
    let purge = purge_request("/live");
    assert_eq!(send(proxy, purge).await.status(), 200);
    gate.open(); // the old fill's origin finishes; it must not bring the body back
    let rest = tokio::time::timeout(GUARD, body.collect())
        .await
        .expect("hang guard");
    assert!(
        rest.is_err(),
        "a reader of a purged in-flight body sees an error"
    );
    let next = get_simple(proxy, "/live").await;
    assert_eq!(next.headers()["x-cache"], "MISS");
    assert_eq!(read_body(next).await.unwrap(), body_of(30_000));
    assert_eq!(origin.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caching_rules() {
    let origin = Origin::start(|_, head| {
        let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
        let extra = match path.as_str() {
            "/no-store" => "Cache-Control: no-store\r\n",
            "/private" => "Cache-Control: private, max-age=60\r\n",
            "/no-cache" => "Cache-Control: no-cache\r\n",
            "/cookie" => "Set-Cookie: a=b\r\n",
            "/vary-cookie" => "Vary: Cookie\r\n",
            "/vary-ae" => "Vary: Accept-Encoding\r\n",
            _ => "",
        };
        // head_len adds `max-age=60`; a second Cache-Control field joins the list.
        vec![Step::Send(head_len(10, extra)), Step::Send(body_of(10))]
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let mut expected = 0;
    for (path, stored) in [
        ("/plain", true),
        ("/no-store", false),
        ("/private", false),
        ("/no-cache", false),
        ("/cookie", false),
        ("/vary-cookie", false),
        ("/vary-ae", true),
    ] {
        for _ in 0..2 {
            assert_eq!(
                read_body(get_simple(proxy, path).await).await.unwrap(),
                body_of(10)
            );
        }
        expected += if stored { 1 } else { 2 };
        assert_eq!(origin.requests(), expected, "{path}");
    }
    // Vary: Accept-Encoding: another coding class is another object, and the origin sees the
    // class, not the client's header.
    let gzip = send(
        proxy,
        get("/vary-ae")
            .header("accept-encoding", "gzip, deflate")
            .body(Empty::new())
            .unwrap(),
    )
    .await;
    assert_eq!(gzip.headers()["x-cache"], "MISS");
    read_body(gzip).await.unwrap();
    assert!(
        origin
            .heads()
            .last()
            .unwrap()
            .to_ascii_lowercase()
            .contains("accept-encoding: gzip\r\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_object_is_refetched_once() {
    let origin = Origin::start(|_, _| {
        vec![
            Step::Send(Bytes::from_static(
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nCache-Control: max-age=10\r\nConnection: close\r\n\r\nabc",
            )),
        ]
    })
    .await;
    let clock = herd_proxy::Clock::manual(std::time::SystemTime::now());
    let (proxy, _handle) = proxy(origin.addr, |c| c.clock = clock.clone()).await;
    read_body(get_simple(proxy, "/t").await).await.unwrap();
    clock.advance(Duration::from_secs(9));
    let hit = get_simple(proxy, "/t").await;
    assert_eq!(hit.headers()["x-cache"], "HIT");
    assert_eq!(hit.headers()["age"], "9");
    read_body(hit).await.unwrap();
    assert_eq!(origin.requests(), 1);
    clock.advance(Duration::from_secs(2));
    let clients: Vec<_> = (0..20)
        .map(|_| tokio::spawn(async move { read_body(get_simple(proxy, "/t").await).await }))
        .collect();
    for client in clients {
        assert_eq!(client.await.unwrap().unwrap(), "abc");
    }
    assert_eq!(origin.requests(), 2, "one refresh for twenty clients");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_from_complete_and_partial_bodies() {
    let gate = Gate::new();
    let origin = Origin::start({
        let gate = gate.clone();
        move |_, _| {
            let body = body_of(1000);
            vec![
                Step::Send(head_len(
                    1000,
                    "ETag: \"v1\"\r\nLast-Modified: Tue, 01 Dec 2026 10:00:00 GMT\r\n",
                )),
                Step::Send(body.slice(..600)),
                Step::Wait(gate.clone()),
                Step::Send(body.slice(600..)),
            ]
        }
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let range = |value: &str| get("/r").header("range", value).body(Empty::new()).unwrap();
    let holder = get_simple(proxy, "/r").await;
    let mut holder_body = holder.into_body();
    read_prefix(&mut holder_body, 600).await;
    // From the partial body: the range is already written.
    let partial = send(proxy, range("bytes=100-199")).await;
    assert_eq!(partial.status(), 206);
    assert_eq!(partial.headers()["content-range"], "bytes 100-199/1000");
    assert_eq!(
        read_body(partial).await.unwrap(),
        body_of(1000).slice(100..200)
    );
    // A range not yet written waits for it.
    let pending =
        tokio::spawn(async move { read_body(send(proxy, range("bytes=-50")).await).await });
    gate.open();
    assert_eq!(pending.await.unwrap().unwrap(), body_of(1000).slice(950..));
    let beyond = send(proxy, range("bytes=5000-")).await;
    assert_eq!(beyond.status(), 416);
    assert_eq!(beyond.headers()["content-range"], "bytes */1000");
    for ignored in [
        "bytes=9-2",
        "bytes=0-1,3-4",
        "bytes=99999999999999999999999-",
        "lines=1-2",
    ] {
        let response = send(proxy, range(ignored)).await;
        assert_eq!(response.status(), 200, "{ignored}");
        assert_eq!(read_body(response).await.unwrap(), body_of(1000));
    }
    // If-Range: the range applies only to the same representation.
    let if_range = |validator: &str| {
        get("/r")
            .header("range", "bytes=0-9")
            .header("if-range", validator)
            .body(Empty::new())
            .unwrap()
    };
    for (validator, status) in [
        ("\"v1\"", 206),
        ("Tue, 01 Dec 2026 10:00:00 GMT", 206),
        ("\"v0\"", 200),
        ("W/\"v1\"", 200),
        ("Mon, 30 Nov 2026 10:00:00 GMT", 200),
    ] {
        let response = send(proxy, if_range(validator)).await;
        assert_eq!(response.status(), status, "If-Range: {validator}");
        let len = if status == 206 { 10 } else { 1000 };
        assert_eq!(read_body(response).await.unwrap().len(), len);
    }
    assert_eq!(origin.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_requests() {
    let origin = Origin::start(whole(500, "")).await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    read_body(get_simple(proxy, "/h").await).await.unwrap();
    let head = send(
        proxy,
        Request::head("/h")
            .header("host", "test.local")
            .body(Empty::new())
            .unwrap(),
    )
    .await;
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-length"], "500");
    assert_eq!(
        head.headers()["x-cache"],
        "HIT",
        "answered from the GET object"
    );
    assert!(read_body(head).await.unwrap().is_empty());
    assert_eq!(origin.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_down_is_502_and_slow_origin_is_504() {
    // A port with nothing listening.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let (down, _handle) = proxy(closed, |_| {}).await;
    assert_eq!(get_simple(down, "/x").await.status(), 502);

    let origin = Origin::start(|_, _| vec![Step::Hang]).await;
    let (proxy, _handle) = proxy(origin.addr, |c| {
        c.response_timeout = Duration::from_millis(200)
    })
    .await;
    let clients: Vec<_> = (0..5)
        .map(|_| tokio::spawn(async move { get_simple(proxy, "/slow").await.status() }))
        .collect();
    for client in clients {
        assert_eq!(client.await.unwrap(), 504);
    }
}

/// A response that is passed, not stored (here `no-store`), is relayed under the same body
/// idle timeout as a fill: an origin that sends its head and a few bytes and then stalls with
/// the connection open ends the client's body with an error once the timeout passes, instead
/// of holding the client, the proxy's task and the origin's socket forever. Streamed to HTTP/1.1
/// and HTTP/1.0 clients (a short `Content-Length`), and collected first for an HTTP/1.0
/// client of a chunked body (which then gets a 502).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_body_that_stalls_ends_at_the_idle_timeout() {
    let origin = Origin::start(|_, head| {
        let framing = if head.starts_with("GET /chunked") {
            "Transfer-Encoding: chunked"
        } else {
            "Content-Length: 1000"
        };
        let head = format!("HTTP/1.1 200 OK\r\n{framing}\r\nCache-Control: no-store\r\n\r\n");
        let first = if framing.starts_with("Transfer") {
            chunk(&body_of(10))
        } else {
            body_of(10)
        };
        vec![Step::Send(Bytes::from(head)), Step::Send(first), Step::Hang]
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |c| {
        c.body_idle_timeout = Duration::from_millis(200)
    })
    .await;
    for (path, request) in [
        ("/len", get("/len").body(Empty::new()).unwrap()),
        ("/chunked", get("/chunked").body(Empty::new()).unwrap()),
        ("/len", get_10("/len")),
    ] {
        let response = tokio::time::timeout(GUARD, send(proxy, request))
            .await
            .expect("the head hung");
        assert_eq!(response.status(), 200, "{path}");
        let ended = tokio::time::timeout(GUARD, response.into_body().collect())
            .await
            .unwrap_or_else(|_| panic!("{path}: the relayed body hung past the idle timeout"));
        assert!(
            ended.is_err(),
            "{path}: a stalled body must end in an error"
        );
    }
    let old = tokio::time::timeout(GUARD, send(proxy, get_10("/chunked")))
        .await
        .expect("the HTTP/1.0 relay hung past the idle timeout");
    assert_eq!(old.status(), 502);
}

/// A body the storage refuses (larger than it can ever hold, though under the proxy's own
/// object limit: `--capacity 16M` with the default `--max-object 64M`) is passed to the client,
/// as a body over the object limit is, not answered with a 502 on every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_the_storage_refuses_is_passed_not_502() {
    let origin =
        Origin::start(|_, _| vec![Step::Send(head_len(5000, "")), Step::Send(body_of(5000))]).await;
    let storage = std::sync::Arc::new(stream_cache::MemStorage::new(1000));
    let (proxy, _handle) = proxy_over(origin.addr, storage, |_| {}).await;
    let clients: Vec<_> = (0..3)
        .map(|_| tokio::spawn(async move { get_simple(proxy, "/huge").await }))
        .collect();
    for client in clients {
        let response = client.await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(read_body(response).await.unwrap(), body_of(5000));
    }
}

/// ... and it is fetched once per request: the storage's own object limit (below the proxy's)
/// decides before the fetch's body is handed to the storage, and marks the URL hit-for-pass as
/// a body over the object limit does. Before, each request fetched twice (the refused fill,
/// then the pass), for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_storages_limit_is_fetched_once_per_request() {
    let origin =
        Origin::start(|_, _| vec![Step::Send(head_len(5000, "")), Step::Send(body_of(5000))]).await;
    let storage = std::sync::Arc::new(stream_cache::MemStorage::new(1000));
    let (proxy, _handle) = proxy_over(origin.addr, storage, |_| {}).await;
    for _ in 0..3 {
        let response = get_simple(proxy, "/huge").await;
        assert_eq!(response.status(), 200);
        assert_eq!(read_body(response).await.unwrap(), body_of(5000));
    }
    assert_eq!(origin.requests(), 3);
}

/// Clients that start large fills and hang up (the fills go on: `KeepFilling`) cannot take a
/// memory storage past its capacity: once the writes in progress hold it, the next chunk that
/// would go over is refused (its fill ends in an error). Before, each abandoned fill added a
/// whole object: ten 400 KiB bodies into a 1 MiB storage held 4 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_fills_cannot_take_a_memory_storage_past_its_capacity() {
    const KIB: usize = 1024;
    let origin = Origin::start(|_, _| {
        let mut steps = vec![Step::Send(head_len(400 * KIB, ""))];
        for piece in body_of(400 * KIB).chunks(16 * KIB) {
            steps.push(Step::Send(Bytes::copy_from_slice(piece)));
            steps.push(Step::Sleep(Duration::from_millis(2)));
        }
        steps
    })
    .await;
    let storage = std::sync::Arc::new(stream_cache::MemStorage::new(1 << 20));
    let (proxy, _handle) = proxy_over(origin.addr, storage.clone(), |_| {}).await;
    for i in 0..10 {
        // The head arrives, then the client is gone.
        drop(get_simple(proxy, &format!("/big/{i}")).await);
    }
    let mut most = 0;
    for _ in 0..200 {
        most = most.max(storage.used_bytes());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        most <= 1 << 20,
        "{} KiB held by a 1 MiB storage",
        most / 1024
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_from_the_origin_is_502_and_poisons_nothing() {
    let origin = Origin::start(|index, _| {
        if index == 0 {
            vec![Step::Send(Bytes::from_static(
                b"\x00\x01 this is not HTTP\r\n\r\n",
            ))]
        } else {
            vec![Step::Send(head_len(10, "")), Step::Send(body_of(10))]
        }
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    assert_eq!(get_simple(proxy, "/g").await.status(), 502);
    let good = get_simple(proxy, "/g").await;
    assert_eq!(good.status(), 200);
    assert_eq!(read_body(good).await.unwrap(), body_of(10));
}

/// Raw bytes in, the status line out (or nothing when the proxy just closes).
async fn raw_exchange(proxy: std::net::SocketAddr, bytes: &[u8]) -> String {
    raw_response(proxy, bytes)
        .await
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

/// Raw bytes in, everything the proxy sends until it closes the connection out.
async fn raw_response(proxy: std::net::SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let _ = stream.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(GUARD, stream.read_to_end(&mut out))
        .await
        .expect("hang guard");
    String::from_utf8_lossy(&out).into_owned()
}

/// A HEAD answered from a stored GET body that came chunked carries the body's length, as the
/// GET does (RFC 9110 9.3.2). Found by review: it had no `Content-Length` at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_from_a_stored_chunked_body_carries_its_length() {
    let origin = Origin::start(|_, _| {
        vec![
            Step::Send(head_chunked("")),
            Step::Send(chunk(&body_of(500))),
            Step::Send(Bytes::from_static(LAST_CHUNK)),
        ]
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    read_body(get_simple(proxy, "/c").await).await.unwrap();
    let get = get_simple(proxy, "/c").await;
    assert_eq!(get.headers()["x-cache"], "HIT");
    assert_eq!(get.headers()["content-length"], "500");
    let head = send(
        proxy,
        Request::head("/c")
            .header("host", "test.local")
            .body(Empty::<Bytes>::new())
            .unwrap(),
    )
    .await;
    assert_eq!(head.status(), 200);
    assert_eq!(
        head.headers().get("content-length").map(|v| v.as_bytes()),
        Some(&b"500"[..])
    );
    assert_eq!(origin.requests(), 1);
}

/// A response stored without `Date` gets one, the time it was received (RFC 9110 6.6.1), which
/// every hit carries beside its `Age`. Found by review: each hit was stamped with the time it
/// was served, so a cache below counted the time it had spent here twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_stored_without_date_keeps_the_date_it_was_received() {
    let origin = Origin::start(whole(10, "")).await;
    let received = std::time::SystemTime::now() - Duration::from_secs(3600);
    let clock = herd_proxy::Clock::manual(received);
    let (proxy, _handle) = proxy(origin.addr, |c| c.clock = clock.clone()).await;
    read_body(get_simple(proxy, "/d").await).await.unwrap();
    clock.advance(Duration::from_secs(30));
    let hit = get_simple(proxy, "/d").await;
    assert_eq!(hit.headers()["x-cache"], "HIT");
    assert_eq!(hit.headers()["age"], "30");
    let date = hit.headers()["date"].to_str().unwrap().to_owned();
    assert_eq!(date, httpdate::fmt_http_date(received));
}

/// A response with a transfer coding other than chunked (`gzip, chunked`) is a 502, never
/// stored: the proxy undoes only the chunking and drops `Transfer-Encoding`, so the client got
/// gzip bytes as the identity body, a clean 200, cached. Found by review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_transfer_coding_is_a_502_never_stored() {
    let coded = Bytes::from_static(b"\x1f\x8b\x08\x00fake-gzip");
    let origin = Origin::start(move |_, _| {
        vec![
            Step::Send(Bytes::from_static(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nCache-Control: max-age=60\r\nConnection: close\r\n\r\n",
            )),
            Step::Send(chunk(&coded)),
            Step::Send(Bytes::from_static(LAST_CHUNK)),
        ]
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    for path in ["/te", "/te"] {
        let response = get_simple(proxy, path).await;
        assert_eq!(response.status(), 502);
    }
    let passed = send(
        proxy,
        Request::builder()
            .method("POST")
            .uri("/te")
            .header("host", "test.local")
            .body(Empty::<Bytes>::new())
            .unwrap(),
    )
    .await;
    assert_eq!(passed.status(), 502, "nor is it relayed uncached");
    assert_eq!(origin.requests(), 3);
}

/// A request whose `Host` is present but invalid is a 400, even when its target is in absolute
/// form (as every HTTP/2 request's is): found by review, the key then fell back to the target's
/// authority while the invalid Host went to the origin, so one site's answer was stored and
/// served as another's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_host_is_a_400_and_poisons_no_other_host() {
    let origin = Origin::start(|_, head| {
        let body = match head.to_ascii_lowercase().contains("other.local") {
            true => "evil",
            false => "good",
        };
        vec![Step::Send(Bytes::from(format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nCache-Control: max-age=60\r\nConnection: close\r\n\r\n{body}"
        )))]
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let line = raw_exchange(
        proxy,
        b"GET http://test.local/p HTTP/1.1\r\nHost: other.local:\"\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(line.starts_with("HTTP/1.1 400"), "{line}");
    assert_eq!(
        read_body(get_simple(proxy, "/p").await).await.unwrap(),
        "good"
    );
}

/// A connection that never sends a byte is closed after the client header timeout, counted
/// from the accept. Found by review: hyper's header timer starts only once it has read enough
/// to tell HTTP/1 from HTTP/2, so such a connection (and its descriptor) was held for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_sends_is_closed_after_the_header_timeout() {
    let origin = Origin::start(whole(10, "")).await;
    let (proxy, _handle) = proxy(origin.addr, |c| {
        c.client_header_timeout = Duration::from_millis(300);
    })
    .await;
    let mut silent = TcpStream::connect(proxy).await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(GUARD, silent.read(&mut buf))
        .await
        .expect("the silent connection was held past the hang guard");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // A client that does send is served as before.
    assert_eq!(
        read_body(get_simple(proxy, "/").await).await.unwrap(),
        body_of(10)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_statuses() {
    let origin = Origin::start(whole(10, "")).await;
    let (proxy, handle) = proxy(origin.addr, |c| {
        c.max_header_bytes = 8192;
        c.client_header_timeout = Duration::from_millis(500);
    })
    .await;
    assert!(
        raw_exchange(proxy, b"GARBAGE\r\n\r\n")
            .await
            .starts_with("HTTP/1.1 400")
    );
    assert!(
        raw_exchange(
            proxy,
            &[
                0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03
            ]
        )
        .await
        .starts_with("HTTP/1.1 400")
    );
    let mut huge = b"GET / HTTP/1.1\r\nHost: test.local\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 100_000));
    huge.extend_from_slice(b"\r\n\r\n");
    assert!(raw_exchange(proxy, &huge).await.starts_with("HTTP/1.1 431"));
    assert!(
        raw_exchange(proxy, b"GET / HTTP/1.1\r\n\r\n")
            .await
            .starts_with("HTTP/1.1 400"),
        "no Host"
    );
    // None of it reached the origin or the cache; a good request still works.
    assert_eq!(origin.requests(), 0);
    let good = get_simple(proxy, "/").await;
    assert_eq!(read_body(good).await.unwrap(), body_of(10));
    assert!(
        handle
            .render_metrics()
            .contains("herd_proxy_bad_requests_total 1\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_prometheus_text() {
    let origin = Origin::start(whole(10, "")).await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    read_body(get_simple(proxy, "/m").await).await.unwrap();
    read_body(get_simple(proxy, "/m").await).await.unwrap();
    let metrics = get_simple(proxy, "/metrics").await;
    assert!(
        metrics.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = String::from_utf8(read_body(metrics).await.unwrap().to_vec()).unwrap();
    for line in [
        "herd_proxy_cache_hits_total 1",
        "herd_proxy_cache_misses_total 1",
        "herd_proxy_upstream_fetches_total 1",
        "herd_proxy_upstream_bytes_total 10",
        "herd_proxy_fills_in_flight 0",
        "# TYPE herd_proxy_time_to_first_byte_seconds histogram",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_storage_streams_caches_and_fails_dead_bodies() {
    let dir = TempDir::new("disk");
    let storage = std::sync::Arc::new(
        stream_cache::DiskStorage::open(&dir.0, 64 << 20)
            .await
            .unwrap(),
    );
    let gate = Gate::new();
    let origin = Origin::start({
        let gate = gate.clone();
        move |index, head| {
            let body = body_of(20_000);
            if head.starts_with("GET /dies ") && index == 0 {
                vec![
                    Step::Send(head_chunked("")),
                    Step::Send(chunk(&body[..5_000])),
                    Step::Wait(gate.clone()),
                    Step::Reset,
                ]
            } else {
                vec![Step::Send(head_len(body.len(), "")), Step::Send(body)]
            }
        }
    })
    .await;
    let (proxy, _handle) = proxy_over(origin.addr, storage, |_| {}).await;
    let first = get_simple(proxy, "/dies").await;
    let mut first_body = first.into_body();
    read_prefix(&mut first_body, 5_000).await;
    let second = get_simple(proxy, "/dies").await;
    assert_eq!(second.headers()["x-cache"], "HIT");
    gate.open();
    assert!(
        tokio::time::timeout(GUARD, first_body.collect())
            .await
            .unwrap()
            .is_err()
    );
    assert!(read_body(second).await.is_err());
    assert_eq!(
        read_body(get_simple(proxy, "/dies").await).await.unwrap(),
        body_of(20_000)
    );
    let hit = get_simple(proxy, "/dies").await;
    assert_eq!(hit.headers()["x-cache"], "HIT");
    assert_eq!(read_body(hit).await.unwrap(), body_of(20_000));
    assert_eq!(origin.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_methods_and_credentials_pass_uncached() {
    let origin = Origin::start(whole(10, "")).await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let stream = TcpStream::connect(proxy).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let post = Request::post("/form")
        .header("host", "test.local")
        .body(http_body_util::Full::new(Bytes::from_static(
            b"field=value",
        )))
        .unwrap();
    let response = sender.send_request(post).await.unwrap();
    assert_eq!(read_body(response).await.unwrap(), body_of(10));
    let authorized = get("/form")
        .header("authorization", "Bearer x")
        .body(Empty::new())
        .unwrap();
    read_body(send(proxy, authorized).await).await.unwrap();
    let authorized = get("/form")
        .header("authorization", "Bearer x")
        .body(Empty::new())
        .unwrap();
    read_body(send(proxy, authorized).await).await.unwrap();
    assert_eq!(origin.requests(), 3);
    let heads = origin.heads();
    assert!(heads[0].starts_with("POST /form HTTP/1.1"));
    assert!(heads[0].ends_with("field=value") || heads[0].contains("content-length: 11"));
}

/// Origin for the stale tests: the first answer is "v1", later ones "v2" (after `gate` opens),
/// or, with `fail_later`, a reset with no answer.
fn versioned_origin(
    cache_control: &'static str,
    gate: Gate,
    fail_later: bool,
) -> impl Fn(usize, &str) -> Vec<Step> {
    move |index, _| {
        let head = |body: &str| {
            Bytes::from(format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nCache-Control: {cache_control}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ))
        };
        match index {
            0 => vec![Step::Send(head("v1"))],
            _ if fail_later => vec![Step::Reset],
            _ => vec![Step::Wait(gate.clone()), Step::Send(head("v2"))],
        }
    }
}

/// A proxy on a manual clock whose `/s` (v1, `max-age=10, stale-while-revalidate=60`) was
/// fetched and is now stale; the origin answers v2 to the next fetch once `gate` opens.
async fn stale_object() -> (Gate, Origin, std::net::SocketAddr, herd_proxy::Proxy) {
    let gate = Gate::new();
    let origin = Origin::start(versioned_origin(
        "max-age=10, stale-while-revalidate=60",
        gate.clone(),
        false,
    ))
    .await;
    let clock = herd_proxy::Clock::manual(std::time::SystemTime::now());
    let (proxy, handle) = proxy(origin.addr, |c| c.clock = clock.clone()).await;
    assert_eq!(
        read_body(get_simple(proxy, "/s").await).await.unwrap(),
        "v1"
    );
    clock.advance(Duration::from_secs(11));
    (gate, origin, proxy, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_while_revalidate_serves_stale_at_once_and_refreshes_once() {
    let (gate, origin, proxy, _handle) = stale_object().await;
    // The origin holds its answer (gate closed), yet every client gets v1 at once.
    for _ in 0..5 {
        let stale = get_simple(proxy, "/s").await;
        assert_eq!(stale.headers()["x-cache"], "STALE");
        assert_eq!(read_body(stale).await.unwrap(), "v1");
    }
    until("the background refresh reached the origin", || {
        origin.requests() == 2
    })
    .await;
    gate.open();
    let refreshed = tokio::time::timeout(GUARD, async {
        loop {
            let response = get_simple(proxy, "/s").await;
            let cache = response.headers()["x-cache"].clone();
            if read_body(response).await.unwrap() == "v2" {
                return cache;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("hang guard: the refreshed object replaces the stale one");
    assert_eq!(refreshed, "HIT");
    assert_eq!(origin.requests(), 2, "five stale hits, one refresh");
}

/// While one refresh of a stale object runs, further stale hits start nothing: before, each
/// spawned a task that joined the running refresh and waited for it, so against a slow
/// origin parked tasks (each holding a copy of its request head) piled up at the stale-hit
/// rate for as long as the origin took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_hits_during_a_refresh_start_no_tasks() {
    let (gate, origin, proxy, _handle) = stale_object().await;
    let stale = get_simple(proxy, "/s").await;
    assert_eq!(read_body(stale).await.unwrap(), "v1");
    until("the background refresh reached the origin", || {
        origin.requests() == 2
    })
    .await;
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = tasks();
    for _ in 0..200 {
        let stale = get_simple(proxy, "/s").await;
        assert_eq!(stale.headers()["x-cache"], "STALE");
        assert_eq!(read_body(stale).await.unwrap(), "v1");
    }
    // Let finished connections' tasks end; parked refresh waiters would not.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = tasks();
    assert!(
        after < before + 50,
        "{} tasks alive after 200 stale hits, {before} before",
        after
    );
    gate.open();
    assert_eq!(origin.requests(), 2, "one refresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_if_error_serves_stale_when_the_origin_fails() {
    for (cache_control, expect_stale) in [
        ("max-age=10, stale-if-error=60", true),
        ("max-age=10", false),
    ] {
        let origin = Origin::start(versioned_origin(cache_control, Gate::new(), true)).await;
        let clock = herd_proxy::Clock::manual(std::time::SystemTime::now());
        let (proxy, _handle) = proxy(origin.addr, |c| c.clock = clock.clone()).await;
        assert_eq!(
            read_body(get_simple(proxy, "/e").await).await.unwrap(),
            "v1"
        );
        clock.advance(Duration::from_secs(11));
        let response = get_simple(proxy, "/e").await;
        if expect_stale {
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers()["x-cache"], "STALE");
            assert_eq!(read_body(response).await.unwrap(), "v1");
        } else {
            assert_eq!(response.status(), 502, "{cache_control}");
        }
        assert_eq!(origin.requests(), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_requests_get_304_from_the_cache() {
    let origin = Origin::start(whole(
        100,
        "ETag: \"abc\"\r\nLast-Modified: Tue, 01 Dec 2026 10:00:00 GMT\r\n",
    ))
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let conditional =
        |name: &str, value: &str| get("/c").header(name, value).body(Empty::new()).unwrap();
    // On a miss too: the fill fetches the whole object (the condition is not forwarded).
    let first = send(proxy, conditional("if-none-match", "\"abc\"")).await;
    assert_eq!(first.status(), 304);
    assert_eq!(first.headers()["etag"], "\"abc\"");
    assert!(read_body(first).await.unwrap().is_empty());
    assert!(
        !origin.heads()[0]
            .to_ascii_lowercase()
            .contains("if-none-match")
    );
    for (name, value, status) in [
        ("if-none-match", "W/\"abc\"", 304),
        ("if-none-match", "\"x\", \"abc\"", 304),
        ("if-none-match", "*", 304),
        ("if-none-match", "\"other\"", 200),
        ("if-modified-since", "Tue, 01 Dec 2026 10:00:00 GMT", 304),
        ("if-modified-since", "Mon, 30 Nov 2026 10:00:00 GMT", 200),
        ("if-modified-since", "not a date", 200),
    ] {
        let response = send(proxy, conditional(name, value)).await;
        assert_eq!(response.status(), status, "{name}: {value}");
        let len = if status == 200 { 100 } else { 0 };
        assert_eq!(read_body(response).await.unwrap().len(), len);
    }
    assert_eq!(origin.requests(), 1);
}

/// A GET with a body (a search API's query in its body) is passed with that body, never
/// stored under its URL: before, it was filled and cached by URL, so a second search with
/// another body got the first one's answer, and the fill sent the origin the client's
/// `Content-Length` with no body behind it (an origin that waits for it times out; one that
/// reads it later eats the next request on that pooled connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_with_a_body_is_passed_with_it_and_never_stored() {
    let origin = Origin::start(whole(2, "")).await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    for (n, query) in ["{\"q\":1}", "{\"q\":2}"].into_iter().enumerate() {
        let response = raw_response(
            proxy,
            format!(
                "GET /search HTTP/1.1\r\nHost: test.local\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{query}",
                query.len()
            )
            .as_bytes(),
        )
        .await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(
            !response.to_ascii_lowercase().contains("x-cache"),
            "{response}"
        );
        assert_eq!(origin.requests(), n + 1, "every search reaches the origin");
    }
    // A GET saying `Content-Length: 0` has no body: it is cached as usual, and its fill
    // describes no body to the origin.
    for _ in 0..2 {
        let response = raw_response(
            proxy,
            b"GET /page HTTP/1.1\r\nHost: test.local\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    }
    assert_eq!(origin.requests(), 3, "the second /page was a hit");
    let fill = origin.heads()[2].to_ascii_lowercase();
    assert!(!fill.contains("content-length"), "{fill}");
}

/// An HTTP/2 client names the host only in `:authority`: the fill must still send it as
/// `Host`. Before, hyper's client filled in the upstream's address, so a virtual-hosting
/// origin answered for the wrong site, stored under this host's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_clients_host_reaches_the_origin() {
    let origin = Origin::start(whole(2, "")).await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let mut sender = h2_sender(proxy).await;
    for path in ["/h2", "/h2-pass"] {
        let mut request =
            Request::get(format!("http://test.local{path}")).version(http::Version::HTTP_2);
        if path == "/h2-pass" {
            request = request.header("authorization", "Bearer x"); // passed, not filled
        }
        let response = sender
            .send_request(request.body(Empty::<Bytes>::new()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(read_body(response).await.unwrap().len(), 2);
    }
    for head in origin.heads() {
        assert!(
            head.to_ascii_lowercase()
                .contains("\r\nhost: test.local\r\n"),
            "{head}"
        );
    }
}

/// An origin answering v1 (with `Cache-Control: first`) to its first fetch and `status`
/// (with `Cache-Control: later`) to every fetch after it.
fn origin_that_later_answers(
    first: &'static str,
    status: &'static str,
    later: &'static str,
) -> impl Fn(usize, &str) -> Vec<Step> {
    move |index, _| {
        let (status, cache_control, body) = match index {
            0 => ("200 OK", first, "v1"),
            _ => (status, later, "later"),
        };
        vec![Step::Send(Bytes::from(format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nCache-Control: {cache_control}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )))]
    }
}

/// A proxy on a manual clock in front of `origin`, whose `path` was fetched once and is now
/// 11 s old.
async fn fetched_and_aged(
    origin: &Origin,
    path: &str,
) -> (std::net::SocketAddr, herd_proxy::Proxy) {
    let clock = herd_proxy::Clock::manual(std::time::SystemTime::now());
    let (proxy, handle) = proxy(origin.addr, |c| c.clock = clock.clone()).await;
    assert_eq!(
        read_body(get_simple(proxy, path).await).await.unwrap(),
        "v1"
    );
    clock.advance(Duration::from_secs(11));
    (proxy, handle)
}

/// A 500/502/503/504 is an error for `stale-if-error` (RFC 5861 section 4), like no answer:
/// the stale copy is served and kept. Before, the 503 counted as an answer that may not be
/// stored: the copy was purged and the 503 relayed, to this client and every later one. A
/// client that may not get the stale copy gets the origin's answer, from one fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_if_error_covers_an_origin_5xx_and_keeps_the_stale_copy() {
    for (cache_control, expect_stale) in [
        ("max-age=10, stale-if-error=60", true),
        ("max-age=10", false),
    ] {
        let origin = Origin::start(origin_that_later_answers(
            cache_control,
            "503 Service Unavailable",
            cache_control,
        ))
        .await;
        let (proxy, _handle) = fetched_and_aged(&origin, "/e").await;
        for round in 1..=2 {
            let response = get_simple(proxy, "/e").await;
            if expect_stale {
                assert_eq!(response.status(), 200, "round {round}");
                assert_eq!(response.headers()["x-cache"], "STALE");
                assert_eq!(read_body(response).await.unwrap(), "v1");
            } else {
                assert_eq!(response.status(), 503, "round {round}");
                assert_eq!(read_body(response).await.unwrap(), "later");
            }
            assert_eq!(
                origin.requests(),
                1 + round,
                "{cache_control}: one fetch a request"
            );
        }
    }
}

/// A background refresh (stale-while-revalidate) that gets a 503 leaves the stale copy for
/// the rest of its window; before, it purged it, so the next client missed and got the 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_refresh_answered_503_keeps_the_stale_copy() {
    let swr = "max-age=10, stale-while-revalidate=60";
    let origin = Origin::start(origin_that_later_answers(
        swr,
        "503 Service Unavailable",
        swr,
    ))
    .await;
    let (proxy, _handle) = fetched_and_aged(&origin, "/w").await;
    // Every stale hit starts a refresh when none runs: once a second one has reached the
    // origin, the first had ended, and every answer until then must have been the copy.
    let served = tokio::time::timeout(GUARD, async {
        while origin.requests() < 3 {
            let response = get_simple(proxy, "/w").await;
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers()["x-cache"], "STALE");
            assert_eq!(read_body(response).await.unwrap(), "v1");
        }
    })
    .await;
    assert!(served.is_ok(), "hang guard: a second refresh never started");
}

/// A stale object refreshed with an answer that may not be stored (`private`): the client
/// that led the refresh gets that answer, and the object is gone. Before, the proxy purged
/// the object and fetched again for it: two origin fetches for one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_answered_private_is_relayed_from_its_one_fetch() {
    let origin = Origin::start(origin_that_later_answers("max-age=10", "200 OK", "private")).await;
    let (proxy, _handle) = fetched_and_aged(&origin, "/p").await;
    let response = get_simple(proxy, "/p").await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("x-cache").is_none());
    assert_eq!(read_body(response).await.unwrap(), "later");
    assert_eq!(
        origin.requests(),
        2,
        "one fetch for the refresh and its answer"
    );
    let next = get_simple(proxy, "/p").await;
    assert_eq!(read_body(next).await.unwrap(), "later");
    assert_eq!(origin.requests(), 3, "the old copy was removed");
}

/// A purge that comes while a fill waits for the origin's head fences that fill out (purge is
/// final), but the requests already waiting on it get a whole response, from one fetch made
/// after the purge. Before, their bodies were created aborted: a 200 whose body failed at its
/// first byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_while_a_fill_waits_for_its_head_still_answers_the_waiting_clients() {
    let gate = Gate::new();
    let origin = Origin::start({
        let gate = gate.clone();
        move |index, _| {
            let body = Bytes::from(format!("version {index}"));
            vec![
                Step::Wait(gate.clone()),
                Step::Send(head_len(body.len(), "")),
                Step::Send(body),
            ]
        }
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let clients: Vec<_> = (0..3)
        .map(|_| tokio::spawn(async move { get_simple(proxy, "/news").await }))
        .collect();
    until("the fill reached the origin", || origin.requests() == 1).await;
    let purge = purge_request("/news");
    send(proxy, purge).await;
    gate.open();
    for client in clients {
        let response = client.await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(read_body(response).await.unwrap(), "version 1");
    }
    assert_eq!(origin.requests(), 2, "one fetch after the purge, shared");
}

/// Purged again while its one retry waits: the client gets a 502 (a status it can act on), not
/// a 200 whose body fails at its first byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_already_failed_when_found_is_a_502_not_a_broken_200() {
    let gates = [Gate::new(), Gate::new()];
    let origin = Origin::start({
        let gates = gates.clone();
        move |index, _| {
            vec![
                Step::Wait(gates[index.min(1)].clone()),
                Step::Send(head_len(2, "")),
                Step::Send(Bytes::from_static(b"ok")),
            ]
        }
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let client = tokio::spawn(async move { get_simple(proxy, "/twice").await });
    for (fetches, gate) in [1, 2].into_iter().zip(&gates) {
        until("the fill reached the origin", || {
            origin.requests() == fetches
        })
        .await;
        send(proxy, purge_request("/twice")).await;
        gate.open();
    }
    let response = client.await.unwrap();
    assert_eq!(response.status(), 502);
}

/// `PURGE path` with the test proxies' token.
fn purge_request(path: &str) -> Request<Empty<Bytes>> {
    Request::builder()
        .method("PURGE")
        .uri(path)
        .header("host", "test.local")
        .header("x-purge-token", "sesame")
        .body(Empty::<Bytes>::new())
        .unwrap()
}

/// An origin answering `Cache-Control: private` to its first fetch and `max-age=60` to every
/// later one, each later answer held until `gate` opens.
fn private_then_public(gate: Gate) -> impl Fn(usize, &str) -> Vec<Step> {
    move |index, _| {
        let cache_control = if index == 0 { "private" } else { "max-age=60" };
        let head = Bytes::from(format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nCache-Control: {cache_control}\r\nConnection: close\r\n\r\nok"
        ));
        match index {
            0 => vec![Step::Send(head)],
            _ => vec![Step::Wait(gate.clone()), Step::Send(head)],
        }
    }
}

/// After a response that may not be stored, the URL's next requests go to the origin at once,
/// each on its own fetch (hit-for-pass). Before, each burst queued behind one fetch only to
/// learn it could not share it, then fetched again: two origin round trips per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_answered_private_is_passed_without_queueing() {
    let gate = Gate::new();
    let origin = Origin::start(private_then_public(gate.clone())).await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    assert_eq!(
        read_body(get_simple(proxy, "/me").await).await.unwrap(),
        "ok"
    );
    let burst: Vec<_> = (0..5)
        .map(|_| tokio::spawn(async move { read_body(get_simple(proxy, "/me").await).await }))
        .collect();
    until("all five reached the origin at once", || {
        origin.requests() == 6
    })
    .await;
    gate.open();
    for request in burst {
        assert_eq!(request.await.unwrap().unwrap(), "ok");
    }
}

/// A hit-for-pass mark ends after `Config::hit_for_pass` (the URL is filled and stored again
/// once its answers may be stored), and a purge ends it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hit_for_pass_ends_after_its_time_or_with_a_purge() {
    for end_by_purge in [false, true] {
        let gate = Gate::new();
        gate.open();
        let origin = Origin::start(private_then_public(gate)).await;
        let clock = herd_proxy::Clock::manual(std::time::SystemTime::now());
        let (proxy, _handle) = proxy(origin.addr, |c| c.clock = clock.clone()).await;
        assert_eq!(
            read_body(get_simple(proxy, "/me").await).await.unwrap(),
            "ok"
        );
        // Marked: passed, so the (now storable) answer is not stored.
        for _ in 0..2 {
            let passed = get_simple(proxy, "/me").await;
            assert!(passed.headers().get("x-cache").is_none());
        }
        if end_by_purge {
            assert_eq!(send(proxy, purge_request("/me")).await.status(), 404);
        } else {
            clock.advance(Duration::from_secs(121));
        }
        let filled = get_simple(proxy, "/me").await;
        assert_eq!(filled.headers()["x-cache"], "MISS", "purge: {end_by_purge}");
        let hit = get_simple(proxy, "/me").await;
        assert_eq!(hit.headers()["x-cache"], "HIT");
        assert_eq!(origin.requests(), 4);
    }
}

/// An origin error (5xx) on a miss is relayed but does not mark the URL hit-for-pass: an
/// error is a blip of the origin, not a property of the resource, and the next answer that may
/// be stored is stored. Found by review: one 503 on a cold URL passed it for 120 s, every
/// request going to the origin uncoalesced and nothing stored, when the origin was weakest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_error_does_not_mark_the_url_hit_for_pass() {
    let origin = Origin::start(|index, _| {
        let head = if index == 0 {
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno"
        } else {
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nCache-Control: max-age=60\r\nConnection: close\r\n\r\nok"
        };
        vec![Step::Send(Bytes::from(head))]
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let failed = get_simple(proxy, "/blip").await;
    assert_eq!(failed.status(), 503);
    read_body(failed).await.unwrap();
    let filled = get_simple(proxy, "/blip").await;
    assert_eq!(filled.headers()["x-cache"], "MISS");
    assert_eq!(read_body(filled).await.unwrap(), "ok");
    let hit = get_simple(proxy, "/blip").await;
    assert_eq!(hit.headers()["x-cache"], "HIT");
    assert_eq!(origin.requests(), 2);
}

/// The same for a stale object's refresh answered 429 (or a 5xx outside 500/502/503/504): the
/// client gets the 429, and the URL stays cached. Found by review: the refresh path treated it
/// as an answer that may not be shared, purged the object and passed the URL for 120 s, just
/// while the origin was rate-limiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_answered_429_does_not_mark_the_url_hit_for_pass() {
    let origin = Origin::start(|index, _| {
        let (status, cache_control, body) = match index {
            0 => ("200 OK", "max-age=10", "v1"),
            1 => ("429 Too Many Requests", "max-age=10", "no"),
            _ => ("200 OK", "max-age=60", "v2"),
        };
        vec![Step::Send(Bytes::from(format!(
            "HTTP/1.1 {status}\r\nContent-Length: 2\r\nCache-Control: {cache_control}\r\nConnection: close\r\n\r\n{body}"
        )))]
    })
    .await;
    let (proxy, _handle) = fetched_and_aged(&origin, "/r").await;
    assert_eq!(get_simple(proxy, "/r").await.status(), 429);
    let filled = get_simple(proxy, "/r").await;
    assert_eq!(read_body(filled).await.unwrap(), "v2");
    let hit = get_simple(proxy, "/r").await;
    assert_eq!(hit.headers()["x-cache"], "HIT");
    assert_eq!(read_body(hit).await.unwrap(), "v2");
    assert_eq!(origin.requests(), 3, "fill, refresh, refresh");
}

/// A chunked body larger than the object limit fails for the clients of the fill that found
/// out (their 200 was already sent), but the URL's next requests pass and get all of it.
/// Before, every request filled again and failed at the limit: the resource could never be
/// downloaded through the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_over_the_limit_is_passed_after_the_first_failure() {
    let origin = Origin::start(|_, _| {
        vec![
            Step::Send(head_chunked("")),
            Step::Send(chunk(&body_of(5000))),
            Step::Send(Bytes::from_static(LAST_CHUNK)),
        ]
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |c| c.max_object_size = 1000).await;
    let first = get_simple(proxy, "/export").await;
    assert!(
        read_body(first).await.is_err(),
        "the fill that found out fails"
    );
    // The mark is made as that fill ends, just after its readers saw the error: a request
    // racing it may fill (and fail) once more.
    let mut attempts = 0;
    while read_body(get_simple(proxy, "/export").await).await.is_err() {
        attempts += 1;
        assert!(attempts < 20, "the URL is never passed");
    }
    for _ in 0..2 {
        let next = get_simple(proxy, "/export").await;
        assert_eq!(next.status(), 200);
        assert_eq!(read_body(next).await.unwrap(), body_of(5000));
    }
}

/// A chunked body that fails only because other writes in progress held the storage (a
/// capacity squeeze, `NoRoom`) does not mark its URL hit-for-pass: once the room is back, the
/// URL is cached again. Before, the squeeze aborted with the same `TooLarge` as a body over
/// the object limit, and the URL passed to the origin on every request for 120 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_squeezed_out_by_writes_in_progress_is_cached_again_later() {
    const KIB: usize = 1024;
    let hold = Gate::new();
    let origin = Origin::start({
        let hold = hold.clone();
        move |_, head| {
            let mut steps = vec![Step::Send(head_chunked(""))];
            if head.starts_with("GET /holder ") {
                // 700 KiB in flight until the gate opens, then the end of the body.
                steps.push(Step::Send(chunk(&body_of(700 * KIB))));
                steps.push(Step::Wait(hold.clone()));
            } else {
                for piece in body_of(600 * KIB).chunks(50 * KIB) {
                    steps.push(Step::Send(chunk(piece)));
                }
            }
            steps.push(Step::Send(Bytes::from_static(LAST_CHUNK)));
            steps
        }
    })
    .await;
    let storage = std::sync::Arc::new(stream_cache::MemStorage::new(1 << 20));
    let (proxy, _handle) = proxy_over(origin.addr, storage.clone(), |_| {}).await;
    let mut holder = get_simple(proxy, "/holder").await.into_body();
    assert_eq!(read_prefix(&mut holder, 700 * KIB).await.len(), 700 * KIB);
    // 600 KiB fits the storage alone, not beside the 700 KiB still being written.
    assert!(
        read_body(get_simple(proxy, "/squeezed").await)
            .await
            .is_err(),
        "the squeezed fill fails"
    );
    // The holder's body ends: its write is complete (an object eviction can take), no longer
    // a write in progress.
    hold.open();
    assert!(holder.collect().await.is_ok());
    let fetched = origin.requests();
    for _ in 0..3 {
        let response = get_simple(proxy, "/squeezed").await;
        assert_eq!(response.status(), 200);
        assert_eq!(read_body(response).await.unwrap(), body_of(600 * KIB));
    }
    assert_eq!(
        origin.requests(),
        fetched + 1,
        "after the squeeze the URL is filled once and cached, not passed"
    );
}

/// `If-Match` and `If-Unmodified-Since` are evaluated against the stored 200, as nginx does
/// (RFC 9110 13.2.2): 412 when false. Before, they were dropped from the fill and never
/// checked, so a resume sending `If-Match` with `Range` could splice two versions of a body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preconditions_on_a_cached_response_answer_412_when_false() {
    let origin = Origin::start(whole(
        100,
        "ETag: \"abc\"\r\nLast-Modified: Tue, 01 Dec 2026 10:00:00 GMT\r\n",
    ))
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let old = "Mon, 30 Nov 2026 10:00:00 GMT";
    let exact = "Tue, 01 Dec 2026 10:00:00 GMT";
    for (headers, status) in [
        (vec![("if-match", "\"abc\"")], 200),
        (vec![("if-match", "\"x\", \"abc\"")], 200),
        (vec![("if-match", "*")], 200),
        (vec![("if-match", "\"x\"")], 412),
        (vec![("if-match", "W/\"abc\"")], 412),
        (vec![("if-unmodified-since", exact)], 200),
        (vec![("if-unmodified-since", old)], 412),
        (vec![("if-unmodified-since", "not a date")], 200),
        (
            vec![("if-match", "\"abc\""), ("if-unmodified-since", old)],
            200,
        ),
        (vec![("if-match", "\"x\""), ("range", "bytes=0-9")], 412),
    ] {
        let mut request = get("/pre");
        for (name, value) in &headers {
            request = request.header(*name, *value);
        }
        let response = send(proxy, request.body(Empty::new()).unwrap()).await;
        assert_eq!(response.status(), status, "{headers:?}");
        let len = if status == 200 { 100 } else { 0 };
        assert_eq!(read_body(response).await.unwrap().len(), len, "{headers:?}");
    }
    assert_eq!(origin.requests(), 1);
    assert!(!origin.heads()[0].to_ascii_lowercase().contains("if-match"));
}

/// An origin response with both `Content-Length` and chunked `Transfer-Encoding` is framed by
/// the chunking (RFC 9112 6.3): the length is dropped before it is relayed or stored. Before,
/// a relayed body was cut at the stated length and looked complete, and every fill of a
/// cacheable one failed its length check (the URL could never be cached or read whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_length_beside_chunking_is_dropped_not_obeyed() {
    let origin = Origin::start(|_, _| {
        vec![
            Step::Send(Bytes::from_static(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\nCache-Control: max-age=60\r\nConnection: close\r\n\r\n",
            )),
            Step::Send(chunk(b"0123456789")),
            Step::Send(Bytes::from_static(LAST_CHUNK)),
        ]
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let posted = send(
        proxy,
        Request::post("/u")
            .header("host", "test.local")
            .body(Empty::new())
            .unwrap(),
    )
    .await;
    assert_eq!(
        read_body(posted).await.unwrap(),
        "0123456789",
        "relayed whole"
    );
    for expected in ["MISS", "HIT"] {
        let got = get_simple(proxy, "/c").await;
        assert_eq!(got.headers()["x-cache"], expected);
        assert_eq!(read_body(got).await.unwrap(), "0123456789", "{expected}");
    }
    assert_eq!(origin.requests(), 2, "one relay, one fill");
}

/// A PUT/POST/DELETE the origin accepts invalidates what is stored for its URL (RFC 9111 4.4):
/// the next GET fetches again. One the origin refuses changes nothing. Before, a client
/// reading back its own write got the old copy until it expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_unsafe_method_invalidates_the_stored_url() {
    let origin = Origin::start(|_, head| {
        let status = match head.starts_with("DELETE") {
            true => "403 Forbidden",
            false => "200 OK",
        };
        vec![Step::Send(Bytes::from(format!(
            "HTTP/1.1 {status}\r\nContent-Length: 2\r\nCache-Control: max-age=600\r\nConnection: close\r\n\r\nok"
        )))]
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    read_body(get_simple(proxy, "/doc").await).await.unwrap();
    let unsafe_request = |method: &str| {
        Request::builder()
            .method(method)
            .uri("/doc")
            .header("host", "test.local")
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    // Refused by the origin: the stored copy stays.
    assert_eq!(send(proxy, unsafe_request("DELETE")).await.status(), 403);
    assert_eq!(get_simple(proxy, "/doc").await.headers()["x-cache"], "HIT");
    // Accepted: gone.
    assert_eq!(send(proxy, unsafe_request("PUT")).await.status(), 200);
    assert_eq!(get_simple(proxy, "/doc").await.headers()["x-cache"], "MISS");
    assert_eq!(origin.requests(), 4, "GET, DELETE, PUT, GET again");
}

/// The invalidation after an accepted unsafe method does not cut off a body still streaming
/// to another client: that client gets all of it (it asked before the write), the next GET
/// fetches again, and the old body is not stored. Before, the invalidation purged, so any
/// client whose POST the origin answered 2xx/3xx aborted everyone's download of the URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_unsafe_method_lets_a_body_in_flight_finish() {
    let rest = Gate::new();
    let origin = Origin::start({
        let rest = rest.clone();
        move |index, head| {
            if head.starts_with("POST") {
                return vec![Step::Send(Bytes::from_static(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                ))];
            }
            let body = body_of(20_000 + index);
            let mut steps = vec![Step::Send(head_len(body.len(), ""))];
            if index == 0 {
                steps.push(Step::Send(body.slice(..10_000)));
                steps.push(Step::Wait(rest.clone()));
                steps.push(Step::Send(body.slice(10_000..)));
            } else {
                steps.push(Step::Send(body));
            }
            steps
        }
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |_| {}).await;
    let mut reading = get_simple(proxy, "/video").await.into_body();
    assert_eq!(read_prefix(&mut reading, 10_000).await.len(), 10_000);
    let post = Request::builder()
        .method("POST")
        .uri("/video")
        .header("host", "test.local")
        .body(Empty::<Bytes>::new())
        .unwrap();
    assert_eq!(send(proxy, post).await.status(), 200);
    rest.open();
    let tail = reading.collect().await.map(|c| c.to_bytes());
    let tail = tail.expect("the body in flight completes for its reader");
    assert_eq!(tail, body_of(20_000).slice(10_000..));
    let next = get_simple(proxy, "/video").await;
    assert_eq!(next.headers()["x-cache"], "MISS");
    assert_eq!(read_body(next).await.unwrap(), body_of(20_002));
    assert_eq!(origin.requests(), 3, "GET, POST, GET again");
}

/// An upload longer than `response_timeout` whose body keeps moving is not a timeout: the
/// response timeout counts from the request body's last move (as nginx's read timeout starts
/// once the request is sent). Before, it counted from the start, so a slow or large upload got
/// a 504 mid-way. A client that stops sending mid-body still ends after the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_longer_than_the_response_timeout_is_not_a_timeout() {
    // The origin answers once the test says the upload is over (as an origin that reads the
    // whole body before answering).
    let uploaded = Gate::new();
    let origin = Origin::start({
        let uploaded = uploaded.clone();
        move |_, _| {
            vec![
                Step::Wait(uploaded.clone()),
                Step::Send(head_len(2, "")),
                Step::Send(body_of(2)),
            ]
        }
    })
    .await;
    let (proxy, _handle) = proxy(origin.addr, |c| {
        c.response_timeout = Duration::from_secs(1);
    })
    .await;
    let mut client = TcpStream::connect(proxy).await.unwrap();
    client
        .write_all(b"POST /upload HTTP/1.1\r\nHost: test.local\r\nContent-Length: 6\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    // Six bytes over ~1.8 s, a gap of 300 ms each: every gap well inside the timeout.
    for byte in b"abcdef" {
        let _ = client.write_all(&[*byte]).await; // a 504 closes the connection early
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    uploaded.open();
    let mut response = Vec::new();
    tokio::time::timeout(GUARD, client.read_to_end(&mut response))
        .await
        .expect("hang guard")
        .unwrap();
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    // A client that stops mid-body (before an origin that waits for all of it): 504 once the
    // timeout passes.
    let waiting = Origin::start(|_, _| vec![Step::Hang]).await;
    let (patient, _patient_handle) = common::proxy(waiting.addr, |c| {
        c.response_timeout = Duration::from_secs(1);
    })
    .await;
    let mut stalled = TcpStream::connect(patient).await.unwrap();
    stalled
        .write_all(b"POST /upload HTTP/1.1\r\nHost: test.local\r\nContent-Length: 6\r\nConnection: close\r\n\r\nabc")
        .await
        .unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(GUARD, stalled.read_to_end(&mut response))
        .await
        .expect("a stalled upload ends")
        .unwrap();
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 504"), "{response}");
}
