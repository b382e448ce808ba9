//! Tools for the side-by-side measurement against nginx and Varnish (driven by
//! `crates/herd-proxy/compare/run.sh`): the origin every proxy sits in front of, and the clients
//! for the stampede and origin-death measurements.
//!
//! ```text
//! compare origin ADDR                      serve the origin
//! compare stampede PROXY ORIGIN N          N concurrent GETs of one cold URL
//! compare die PROXY N [--http10]           N clients over 1 s on a URL whose origin body dies
//! compare fill PROXY COUNT                 cache COUNT distinct 1 KiB objects
//! ```
//! Origin endpoints: `/size/N[?anything]` (N bytes, `Content-Length`, `max-age=300`),
//! `/cold/ID` (answers after 1 s, 1 KiB; the time it answered is at `/answered/ID`),
//! `/die/ID` (chunked, 100,000 bytes promised, dies after 40,000 sent over 0.6 s),
//! `/stats` (origin fetches per endpoint kind).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response, Version};
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

const DIE_LEN: usize = 100_000;
const DIE_AT: usize = 40_000;

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn body_of(len: usize) -> Bytes {
    (0..len)
        .map(|i| b'a' + (i % 26) as u8)
        .collect::<Vec<u8>>()
        .into()
}

type OriginBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

#[derive(Default)]
struct OriginState {
    fetches: parking_lot::Mutex<HashMap<String, u64>>,
    answered: parking_lot::Mutex<HashMap<String, u64>>,
}

fn respond(status: u16, headers: &[(&str, String)], body: OriginBody) -> Response<OriginBody> {
    let mut builder = Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(*name, value);
    }
    builder.body(body).unwrap_or_default()
}

fn full(bytes: Bytes) -> OriginBody {
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed()
}

async fn origin_serve(
    state: Arc<OriginState>,
    request: Request<hyper::body::Incoming>,
) -> Response<OriginBody> {
    let path = request.uri().path().to_owned();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let kind = parts.next().unwrap_or("").to_owned();
    let arg = parts.next().unwrap_or("").to_owned();
    let cacheable = ("cache-control", "max-age=300".to_owned());
    if !matches!(kind.as_str(), "stats" | "answered") {
        *state.fetches.lock().entry(kind.clone()).or_insert(0) += 1;
    }
    match kind.as_str() {
        "size" => {
            let len: usize = arg.parse().unwrap_or(0).min(64 << 20);
            respond(
                200,
                &[cacheable, ("content-length", len.to_string())],
                full(body_of(len)),
            )
        }
        "cold" => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            state.answered.lock().insert(arg, unix_micros());
            respond(200, &[cacheable], full(body_of(1024)))
        }
        "answered" => {
            let at = state.answered.lock().get(&arg).copied().unwrap_or(0);
            respond(
                200,
                &[("cache-control", "no-store".to_owned())],
                full(Bytes::from(at.to_string())),
            )
        }
        "stats" => {
            let mut text = String::new();
            for (kind, n) in state.fetches.lock().iter() {
                text.push_str(&format!("{kind} {n}\n"));
            }
            respond(
                200,
                &[("cache-control", "no-store".to_owned())],
                full(Bytes::from(text)),
            )
        }
        "die" => {
            let body = body_of(DIE_LEN);
            let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
                Ok(Frame::data(body.slice(..DIE_AT / 2))),
                Ok(Frame::data(body.slice(DIE_AT / 2..DIE_AT))),
                Err(std::io::Error::other("origin died mid-body")),
            ];
            let stream = futures::stream::iter(frames).then(|frame| async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                frame
            });
            // No Content-Length: chunked to 1.1 proxies.
            respond(200, &[cacheable], BodyExt::boxed(StreamBody::new(stream)))
        }
        _ => respond(404, &[], full(Bytes::from_static(b"not found\n"))),
    }
}

async fn origin(addr: &str) {
    let listener = TcpListener::bind(addr).await.expect("bind origin");
    let state = Arc::new(OriginState::default());
    eprintln!("origin on {addr}");
    while let Ok((stream, _)) = listener.accept().await {
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(origin_serve(state, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// One GET on a fresh connection: status, body (or error).
async fn get(
    proxy: SocketAddr,
    path: &str,
    version: Version,
) -> Result<(u16, Result<Bytes, String>), String> {
    let stream = TcpStream::connect(proxy).await.map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let request = Request::get(path)
        .version(version)
        .header("host", "compare.local")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| e.to_string());
    Ok((status, body))
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 - 1.0) * q).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

async fn stampede(proxy: SocketAddr, origin_addr: SocketAddr, n: usize) {
    let id = format!("{}", unix_micros());
    let path = format!("/cold/{id}");
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move {
                let result = get(proxy, &path, Version::HTTP_11).await;
                (result, unix_micros())
            })
        })
        .collect();
    let mut done = Vec::new();
    let mut failed = 0;
    for task in tasks {
        match task.await {
            Ok((Ok((200, Ok(body))), at)) if body.len() == 1024 => done.push(at),
            _ => failed += 1,
        }
    }
    let answered = match get(origin_addr, &format!("/answered/{id}"), Version::HTTP_11).await {
        Ok((_, Ok(body))) => String::from_utf8_lossy(&body).parse::<u64>().unwrap_or(0),
        _ => 0,
    };
    let mut after: Vec<f64> = done
        .iter()
        .map(|at| at.saturating_sub(answered) as f64 / 1000.0)
        .collect();
    after.sort_by(f64::total_cmp);
    println!(
        "stampede ok={} failed={failed} after_origin_ms_p50={:.1} after_origin_ms_p99={:.1}",
        done.len(),
        percentile(&after, 0.5),
        percentile(&after, 0.99)
    );
}

async fn die(proxy: SocketAddr, n: usize, version: Version) {
    let id = format!("{}", unix_micros());
    let path = format!("/die/{id}");
    let expected = body_of(DIE_LEN);
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let path = path.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis((i * 1000 / n.max(1)) as u64)).await;
                get(proxy, &path, version).await
            })
        })
        .collect();
    let (mut correct, mut truncated, mut errors, mut statuses) = (0, 0, 0, 0);
    for task in tasks {
        match task.await {
            Ok(Ok((200, Ok(body)))) if body == expected => correct += 1,
            Ok(Ok((200, Ok(_short)))) => truncated += 1,
            Ok(Ok((200, Err(_)))) | Ok(Err(_)) | Err(_) => errors += 1,
            Ok(Ok((_, _))) => statuses += 1,
        }
    }
    println!(
        "die complete={correct} truncated_as_complete={truncated} body_errors={errors} error_statuses={statuses}"
    );
}

async fn fill(proxy: SocketAddr, count: usize) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..32)
        .map(|_| {
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                let mut ok = 0;
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= count {
                        return ok;
                    }
                    if let Ok((200, Ok(_))) =
                        get(proxy, &format!("/size/1024?object={i}"), Version::HTTP_11).await
                    {
                        ok += 1;
                    }
                }
            })
        })
        .collect();
    let mut ok = 0;
    for worker in workers {
        ok += worker.await.unwrap_or(0);
    }
    println!("fill ok={ok}");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = |i: usize| -> SocketAddr {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("argument {i} must be ip:port"))
    };
    let number = |i: usize| -> usize {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("argument {i} must be a number"))
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        match args.first().map(String::as_str) {
            Some("origin") => origin(args.get(1).map_or("127.0.0.1:18080", String::as_str)).await,
            Some("stampede") => stampede(addr(1), addr(2), number(3)).await,
            Some("die") => {
                let version = if args.iter().any(|a| a == "--http10") {
                    Version::HTTP_10
                } else {
                    Version::HTTP_11
                };
                die(addr(1), number(2), version).await;
            }
            Some("fill") => fill(addr(1), number(2)).await,
            _ => eprintln!("usage: see the file's docs"),
        }
    });
}
