//! `stream-cache` memory and time-to-first-byte (issue 4 "Measured"), printed as markdown tables.
//!
//! Memory: one writer streams a body in 16 KiB chunks (each chunk freshly allocated, as if read
//! from a socket) to R readers that are attached but have not read anything yet (the worst case
//! of lagging readers); the heap growth at the moment the body is fully written is reported for
//! stream-cache's `MemStorage`, a `tokio::sync::broadcast` channel holding every chunk, and the
//! naive copy-per-reader design (an unbounded queue per reader). Counted with a counting global
//! allocator. Then every reader reads to the end and the byte counts are checked.
//!
//! Time to first byte: a fill whose upstream yields 64 chunks 2 ms apart; a follower calls
//! `get_or_fill` for the same key 10 ms after the leader. Reported: the follower's time to its
//! first byte (it attaches to the partial body) and to the end of the body (what a cache that
//! only serves complete bodies would make it wait before its first byte).
//!
//! `cargo run --release -p benches --bin stream -- [--body-mib N]`

use std::alloc::System;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use stream_cache::{MemStorage, ObjectMeta, Storage, StreamCache, Upstream};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const CHUNK: usize = 16 * 1024;

fn fresh_chunk(i: usize) -> Bytes {
    Bytes::from(vec![(i % 251) as u8; CHUNK])
}

fn heap_now(region: &Region<'_, System>) -> u64 {
    let c = region.change();
    c.bytes_allocated.saturating_sub(c.bytes_deallocated) as u64
}

async fn mem_stream_cache(body: usize, readers: usize) -> (u64, u64) {
    let storage = MemStorage::new(2 * body as u64);
    let key = "body".into();
    let region = Region::new(GLOBAL);
    let mut writer = storage
        .begin_write(&key, ObjectMeta::new("m").with_len(body as u64))
        .await
        .expect("begin_write");
    let mut hits = Vec::new();
    for _ in 0..readers {
        hits.push(
            storage
                .lookup(&key)
                .await
                .expect("lookup")
                .expect("partial"),
        );
    }
    for i in 0..body / CHUNK {
        writer.write(fresh_chunk(i)).await.expect("write");
    }
    writer.finish().await.expect("finish");
    let peak = heap_now(&region);
    let mut got = 0;
    for hit in &mut hits {
        while let Some(c) = hit.body.read().await.expect("no abort") {
            got += c.len() as u64;
        }
    }
    (peak, got)
}

async fn mem_broadcast(body: usize, readers: usize) -> (u64, u64) {
    let region = Region::new(GLOBAL);
    let (tx, _) = tokio::sync::broadcast::channel::<Bytes>(body / CHUNK);
    let mut rxs: Vec<_> = (0..readers).map(|_| tx.subscribe()).collect();
    for i in 0..body / CHUNK {
        tx.send(fresh_chunk(i)).expect("receivers");
    }
    drop(tx);
    let peak = heap_now(&region);
    let mut got = 0;
    for rx in &mut rxs {
        while let Ok(c) = rx.recv().await {
            got += c.len() as u64;
        }
    }
    (peak, got)
}

async fn mem_copy(body: usize, readers: usize) -> (u64, u64) {
    let region = Region::new(GLOBAL);
    let (txs, mut rxs): (Vec<_>, Vec<_>) = (0..readers)
        .map(|_| tokio::sync::mpsc::unbounded_channel::<Vec<u8>>())
        .unzip();
    for i in 0..body / CHUNK {
        let chunk = fresh_chunk(i);
        for tx in &txs {
            tx.send(chunk.to_vec()).expect("reader");
        }
    }
    drop(txs);
    let peak = heap_now(&region);
    let mut got = 0;
    for rx in &mut rxs {
        while let Some(c) = rx.recv().await {
            got += c.len() as u64;
        }
    }
    (peak, got)
}

async fn ttfb_once(run: usize) -> (Duration, Duration) {
    let cache = StreamCache::new(MemStorage::new(64 << 20));
    let key = format!("slow/{run}");
    let fill = || async {
        let chunks = futures::stream::iter(0..64usize)
            .then(|i| async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok::<_, std::io::Error>(fresh_chunk(i))
            })
            .boxed();
        Ok(Upstream::new(
            ObjectMeta::new("slow").with_len((64 * CHUNK) as u64),
            chunks,
        ))
    };
    let leader = {
        let cache = cache.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let mut hit = cache.get_or_fill(key, fill).await.expect("leader fill");
            while hit.body.read().await.expect("leader read").is_some() {}
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let asked = Instant::now();
    let never = || async {
        Err::<Upstream<std::io::Error>, _>(std::io::Error::other("follower must not fill"))
    };
    let mut hit = cache
        .get_or_fill(key, never)
        .await
        .expect("follower attaches");
    let first = hit.body.read().await.expect("first read");
    let ttfb = asked.elapsed();
    assert!(first.is_some(), "a first chunk");
    while hit.body.read().await.expect("follower read").is_some() {}
    let complete = asked.elapsed();
    leader.await.expect("leader task");
    (ttfb, complete)
}

fn main() {
    let mut body_mib = 16usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next().map(|n| n.parse::<usize>())) {
            ("--body-mib", Some(Ok(n))) if n > 0 => body_mib = n,
            _ => {
                eprintln!("usage: stream [--body-mib N]");
                std::process::exit(2);
            }
        }
    }
    let body = body_mib << 20;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    println!("### Memory with lagging readers ({body_mib} MiB body, 16 KiB chunks)\n");
    println!("| design | readers | heap when written | x body |");
    println!("|---|---:|---:|---:|");
    for readers in [1usize, 16, 64] {
        for (name, (peak, got)) in [
            (
                "stream-cache MemStorage",
                rt.block_on(mem_stream_cache(body, readers)),
            ),
            ("tokio broadcast", rt.block_on(mem_broadcast(body, readers))),
            ("copy per reader", rt.block_on(mem_copy(body, readers))),
        ] {
            assert_eq!(got, (body * readers) as u64, "{name} delivered every byte");
            println!(
                "| {name} | {readers} | {:.1} MiB | {:.2} |",
                peak as f64 / (1 << 20) as f64,
                peak as f64 / body as f64
            );
        }
    }
    println!("\n### Time to first byte for a follower (64 chunks, 2 ms apart; 5 runs, median)\n");
    let mut runs: Vec<(Duration, Duration)> = (0..5).map(|r| rt.block_on(ttfb_once(r))).collect();
    runs.sort();
    let (ttfb, _) = runs[runs.len() / 2];
    runs.sort_by_key(|&(_, complete)| complete);
    let (_, complete) = runs[runs.len() / 2];
    println!("| follower | time |");
    println!("|---|---:|");
    println!(
        "| first byte, attached to the in-progress fill | {:.3} ms |",
        ttfb.as_secs_f64() * 1e3
    );
    println!(
        "| end of body (= first byte if only complete bodies were served) | {:.3} ms |",
        complete.as_secs_f64() * 1e3
    );
}
