//! What a waiting client costs the proxy in memory. In a test binary of its own: it reads the
//! process's resident size, which other tests running beside it would move.

mod common;

use common::*;

const MIB: usize = 1 << 20;

/// The process's resident set (Linux `/proc/self/status`), `None` elsewhere.
fn resident_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// HTTP/1.0 clients of a body still arriving with no length wait for it to complete (they
/// cannot see a truncation otherwise); while they wait they hold no copy of it. Each used to
/// collect the body into a buffer of its own: 40 of them on a 1 MiB prefix held 40 MiB more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_clients_waiting_for_a_body_hold_no_copy_of_it() {
    let gate = Gate::new();
    let opened = gate.clone();
    let origin = Origin::start(move |_, _| {
        vec![
            Step::Send(head_chunked("")),
            Step::Send(chunk(&body_of(MIB))),
            Step::Wait(gate.clone()),
            Step::Send(bytes::Bytes::from_static(LAST_CHUNK)),
        ]
    })
    .await;
    let (proxy_addr, proxy) = proxy(origin.addr, |_| {}).await;
    let first = get_simple(proxy_addr, "/big").await;
    let mut first_body = first.into_body();
    read_prefix(&mut first_body, MIB).await;
    let Some(before) = resident_bytes() else {
        eprintln!("SKIPPED: no /proc/self/status on this system");
        opened.open();
        return;
    };
    let clients: Vec<_> = (0..40)
        .map(|_| tokio::spawn(async move { send(proxy_addr, get_10("/big")).await }))
        .collect();
    until("every HTTP/1.0 client attached", || {
        proxy.metrics().hits() >= 40
    })
    .await;
    // Time for each to take what has arrived (the old path copied it at once).
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let grown = resident_bytes().unwrap().saturating_sub(before);
    opened.open();
    for client in clients {
        let response = client.await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-length"], MIB.to_string());
        assert_eq!(read_body(response).await.unwrap().len(), MIB);
    }
    assert!(
        grown < 20 * MIB,
        "{} MiB more resident with 40 HTTP/1.0 clients waiting on a 1 MiB body",
        grown / MIB
    );
}
