//! `stream-cache` fan-out throughput (issue 4 "Measured"): one writer, 1/16/64 readers, 1 MiB
//! and 64 MiB bodies in 16 KiB chunks, on a 2-worker tokio runtime; aggregate bytes delivered to
//! all readers per second, beside a `tokio::sync::broadcast` baseline and a naive
//! copy-per-reader design (see `benches::fanout`). Peak memory and time to first byte are printed
//! by `cargo run --release -p benches --bin stream`.

// `criterion_group!` generates a `pub fn` that cannot carry a doc comment.
#![allow(missing_docs)]

use std::time::Duration;

use benches::fanout::{body_chunks, broadcast_fanout, copy_fanout, stream_cache_fanout};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use stream_cache::MemStorage;

const CHUNK: usize = 16 * 1024;

fn fanout(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("tokio runtime");
    for (label, len) in [("1MiB", 1usize << 20), ("64MiB", 64 << 20)] {
        let chunks = body_chunks(len, CHUNK);
        let mut group = c.benchmark_group(format!("stream_fanout/{label}"));
        group.sampling_mode(SamplingMode::Flat);
        if len > 1 << 20 {
            group.sample_size(10);
        }
        for readers in [1usize, 16, 64] {
            let expect = (len * readers) as u64;
            group.throughput(Throughput::Bytes(expect));
            let storage = MemStorage::new(4 * len as u64);
            group.bench_function(format!("stream-cache/{readers}"), |b| {
                b.iter(|| {
                    let got = rt.block_on(stream_cache_fanout(&storage, "body", &chunks, readers));
                    assert_eq!(got, expect);
                })
            });
            group.bench_function(format!("broadcast/{readers}"), |b| {
                b.iter(|| assert_eq!(rt.block_on(broadcast_fanout(&chunks, readers)), expect))
            });
            group.bench_function(format!("copy-per-reader/{readers}"), |b| {
                b.iter(|| assert_eq!(rt.block_on(copy_fanout(&chunks, readers)), expect))
            });
        }
        group.finish();
    }
}

fn short() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args()
}

criterion_group! {
    name = stream;
    config = short();
    targets = fanout
}
criterion_main!(stream);
