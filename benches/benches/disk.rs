//! `DiskStorage` against plain files (issue 15): write throughput with the durable default and
//! with `Durability::None` beside `tokio::fs` writing the same bytes with and without
//! `sync_all`; read throughput of a cached body through a verifying reader beside
//! `tokio::fs::read` of the same file; the time of one insert at capacity with few and many
//! objects stored (it should be flat).
//!
//! `HERD_DISK_OBJECTS=1000,100000` sets the object counts of the eviction group (default
//! `1000,10000`: filling 100,000 files takes a while).

// `criterion_group!` generates a `pub fn` that cannot carry a doc comment.
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use stream_cache::{DiskStorage, Durability, ObjectMeta, Storage, read_to_end};
use tokio::io::AsyncWriteExt;

const CHUNK: usize = 64 * 1024;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn scratch(name: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "herd-disk-bench-{}-{name}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn body(len: usize) -> Vec<Bytes> {
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    data.chunks(CHUNK).map(Bytes::copy_from_slice).collect()
}

async fn disk_write(storage: &DiskStorage, key: &str, chunks: &[Bytes]) {
    let mut writer = storage
        .begin_write(&key.into(), ObjectMeta::default())
        .await
        .expect("begin");
    for chunk in chunks {
        writer.write(chunk.clone()).await.expect("write");
    }
    writer.finish().await.expect("finish");
}

async fn file_write(path: &Path, chunks: &[Bytes], sync: bool) {
    let mut file = tokio::fs::File::create(path).await.expect("create");
    for chunk in chunks {
        file.write_all(chunk).await.expect("write");
    }
    file.flush().await.expect("flush");
    if sync {
        file.sync_all().await.expect("sync");
    }
}

fn writes(c: &mut Criterion) {
    let rt = runtime();
    let len = 16 << 20;
    let chunks = body(len);
    let mut group = c.benchmark_group("disk_write_16MiB");
    group.throughput(Throughput::Bytes(len as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    for (name, durability) in [
        ("disk_full", Durability::Full),
        ("disk_none", Durability::None),
    ] {
        let dir = scratch(name);
        let storage = rt
            .block_on(
                DiskStorage::builder(&dir, 1 << 30)
                    .durability(durability)
                    .open(),
            )
            .expect("open");
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| disk_write(&storage, "k", &chunks));
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
    for (name, sync) in [("tokio_fs_sync_all", true), ("tokio_fs_plain", false)] {
        let dir = scratch(name);
        let path = dir.join("file");
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| file_write(&path, &chunks, sync));
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
    group.finish();
}

fn reads(c: &mut Criterion) {
    let rt = runtime();
    let len = 64 << 20;
    let chunks = body(len);
    let dir = scratch("read");
    let storage = rt.block_on(DiskStorage::open(&dir, 1 << 30)).expect("open");
    rt.block_on(disk_write(&storage, "k", &chunks));
    let file = std::fs::read_dir(dir.join("objects"))
        .expect("objects")
        .next()
        .expect("one object")
        .expect("entry")
        .path();
    let mut group = c.benchmark_group("disk_read_64MiB");
    group.throughput(Throughput::Bytes(len as u64));
    group.sample_size(10);
    group.bench_function("disk_reader_verified", |b| {
        b.to_async(&rt).iter(|| async {
            let mut hit = storage.lookup(&"k".into()).await.unwrap().unwrap();
            read_to_end(&mut *hit.body).await.unwrap()
        });
    });
    group.bench_function("tokio_fs_read", |b| {
        b.to_async(&rt)
            .iter(|| async { tokio::fs::read(&file).await.unwrap() });
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

fn eviction(c: &mut Criterion) {
    let rt = runtime();
    let counts: Vec<u64> = std::env::var("HERD_DISK_OBJECTS")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![1_000, 10_000]);
    let object = body(1024);
    let mut group = c.benchmark_group("disk_insert_at_capacity");
    for count in counts {
        let dir = scratch("evict");
        // Room for `count` objects: every insert from then on evicts one.
        let capacity = count * 1200;
        let storage = rt
            .block_on(
                DiskStorage::builder(&dir, capacity)
                    .durability(Durability::None)
                    .open(),
            )
            .expect("open");
        let next = AtomicU64::new(0);
        rt.block_on(async {
            for _ in 0..count + 1 {
                let key = format!("k{}", next.fetch_add(1, Ordering::Relaxed));
                disk_write(&storage, &key, &object).await;
            }
        });
        group.bench_with_input(BenchmarkId::from_parameter(count), &count, |b, _| {
            b.to_async(&rt).iter(|| async {
                let key = format!("k{}", next.fetch_add(1, Ordering::Relaxed));
                disk_write(&storage, &key, &object).await;
                assert!(storage.used_bytes() <= capacity);
            });
        });
        drop(storage);
        let _ = std::fs::remove_dir_all(&dir);
    }
    group.finish();
}

criterion_group!(benches, writes, reads, eviction);
criterion_main!(benches);
