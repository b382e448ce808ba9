//! `DiskStorage` against plain files (issue 15): write throughput with the durable default and
//! with `Durability::None` beside `tokio::fs` writing the same bytes with and without
//! `sync_all`; read throughput of a cached body through a verifying reader beside
//! `tokio::fs::read` of the same file; the time of one insert at capacity with few and many
//! objects stored (it should be flat).
//!
//! `HERD_DISK_OBJECTS=1000,100000` sets the object counts of the eviction group (default
//! `1000,10000`: filling 100,000 files takes a while).
//!
//! `HERD_DISK_REPORT=ROUNDS` skips criterion and prints the side-by-side table of
//! docs/benchmarks.md ("DiskStorage benchmarks") instead: every contender of a measurement
//! runs once per round, in turn (interleaved, so each meets the same machine load), and the
//! table shows the minimum per contender over the rounds and the ratios of those minima. On a
//! shared machine the minimum is the least disturbed run; a median over a few rounds mixes in
//! other people's work.

// `criterion_group!` generates a `pub fn` that cannot carry a doc comment.
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
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

/// The one object file a storage under `root` holds (in one of the subdirectories of
/// `objects/`).
fn object_file(root: &Path) -> PathBuf {
    std::fs::read_dir(root.join("objects"))
        .expect("objects")
        .flat_map(|dir| std::fs::read_dir(dir.expect("entry").path()).expect("subdir"))
        .next()
        .expect("one object")
        .expect("entry")
        .path()
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

/// What `Durability::Full` does, by hand with `tokio::fs`: a temp file written and
/// `fdatasync`ed, renamed over the previous copy, then the directory fsynced.
async fn file_write_renamed(dir: &Path, chunks: &[Bytes]) {
    let tmp = dir.join("renamed.tmp");
    let mut file = tokio::fs::File::create(&tmp).await.expect("create");
    for chunk in chunks {
        file.write_all(chunk).await.expect("write");
    }
    file.flush().await.expect("flush");
    file.sync_data().await.expect("sync");
    drop(file);
    tokio::fs::rename(&tmp, dir.join("renamed"))
        .await
        .expect("rename");
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || std::fs::File::open(dir)?.sync_all())
        .await
        .expect("join")
        .expect("sync dir");
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
    {
        let dir = scratch("tokio_fs_durable_rename");
        group.bench_function("tokio_fs_durable_rename", |b| {
            b.to_async(&rt).iter(|| file_write_renamed(&dir, &chunks));
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
    let file = object_file(&dir);
    let mut group = c.benchmark_group("disk_read_64MiB");
    group.throughput(Throughput::Bytes(len as u64));
    group.sample_size(10);
    group.bench_function("disk_reader_verified_streamed", |b| {
        b.to_async(&rt).iter(|| async {
            let mut hit = storage.lookup(&"k".into()).await.unwrap().unwrap();
            let mut n = 0;
            while let Some(chunk) = hit.body.read().await.unwrap() {
                n += chunk.len();
            }
            n
        });
    });
    group.bench_function("disk_reader_verified_collected", |b| {
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
    let counts = object_counts();
    let object = body(1024);
    let mut group = c.benchmark_group("disk_insert_at_capacity");
    for count in counts {
        let dir = scratch("evict");
        // Room for about `count` objects: filled until the first eviction, every insert from
        // then on evicts one.
        let capacity = count * 1200;
        let storage = rt
            .block_on(
                DiskStorage::builder(&dir, capacity)
                    .durability(Durability::None)
                    .open(),
            )
            .expect("open");
        let next = AtomicU64::new(0);
        rt.block_on(fill_to_capacity(&storage, &next, &object, capacity));
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

/// Insert objects until one insert evicts (the storage is full): from then on every insert
/// evicts about one object. (A fixed count of objects is not enough: the capacity of
/// `count` x 1,200 bytes holds more than `count` files of 1,102 bytes, and the largest
/// count of an earlier version of this report never reached it, so it timed inserts that
/// evicted nothing against inserts that each evicted one.)
async fn fill_to_capacity(
    storage: &DiskStorage,
    next: &AtomicU64,
    object: &[Bytes],
    capacity: u64,
) {
    let mut inserted = 0u64;
    loop {
        let key = format!("k{}", next.fetch_add(1, Ordering::Relaxed));
        disk_write(storage, &key, object).await;
        inserted += 1;
        assert!(storage.used_bytes() <= capacity);
        if (storage.len() as u64) < inserted {
            return;
        }
    }
}

criterion_group!(benches, writes, reads, eviction);

fn main() {
    if let Some(rounds) = std::env::var("HERD_DISK_REPORT")
        .ok()
        .and_then(|r| r.parse::<u32>().ok())
    {
        report(rounds.max(1));
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

fn object_counts() -> Vec<u64> {
    std::env::var("HERD_DISK_OBJECTS")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![1_000, 10_000])
}

/// Runs `contenders` in turn `rounds` times; the minimum time of each.
fn interleaved(rounds: u32, contenders: &mut [&mut dyn FnMut() -> Duration]) -> Vec<Duration> {
    let mut best = vec![Duration::MAX; contenders.len()];
    for _ in 0..rounds {
        for (run, best) in contenders.iter_mut().zip(&mut best) {
            *best = (*best).min(run());
        }
    }
    best
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The side-by-side tables (see the module docs); `HERD_DISK_SECTIONS=write,read,evict` picks.
fn report(rounds: u32) {
    let sections = std::env::var("HERD_DISK_SECTIONS").unwrap_or_default();
    let wanted = |name: &str| sections.is_empty() || sections.split(',').any(|s| s == name);
    let rt = runtime();
    println!("rounds: {rounds} (minimum per contender; contenders interleaved)");
    println!();
    if wanted("write") {
        report_writes(&rt, rounds);
    }
    if wanted("read") {
        report_reads(&rt, rounds);
    }
    if wanted("evict") {
        report_eviction(&rt, rounds);
    }
}

fn time(work: &mut dyn FnMut()) -> Duration {
    let start = Instant::now();
    work();
    start.elapsed()
}

fn report_writes(rt: &tokio::runtime::Runtime, rounds: u32) {
    let len = 16 << 20;
    let chunks = body(len);
    let open = |durability| {
        let dir = scratch("report-write");
        let storage = rt
            .block_on(
                DiskStorage::builder(&dir, 1 << 30)
                    .durability(durability)
                    .open(),
            )
            .expect("open");
        (dir, storage)
    };
    let (full_dir, full) = open(Durability::Full);
    let (none_dir, none) = open(Durability::None);
    let file_dir = scratch("report-file");
    let path = file_dir.join("file");
    let w = interleaved(
        rounds,
        &mut [
            &mut || time(&mut || rt.block_on(disk_write(&full, "k", &chunks))),
            &mut || time(&mut || rt.block_on(file_write(&path, &chunks, true))),
            &mut || time(&mut || rt.block_on(disk_write(&none, "k", &chunks))),
            &mut || time(&mut || rt.block_on(file_write(&path, &chunks, false))),
            &mut || time(&mut || rt.block_on(file_write_renamed(&file_dir, &chunks))),
        ],
    );
    println!("| write 16 MiB (64 KiB chunks) | DiskStorage | tokio::fs | ratio (goal <= 1.2) |");
    println!("|---|---:|---:|---:|");
    println!(
        "| durable: `Durability::Full` vs `write_all` + `sync_all` | {:.1} ms | {:.1} ms | {:.2} |",
        ms(w[0]),
        ms(w[1]),
        ms(w[0]) / ms(w[1])
    );
    println!(
        "| not durable: `Durability::None` vs `write_all` | {:.1} ms | {:.1} ms | {:.2} |",
        ms(w[2]),
        ms(w[3]),
        ms(w[2]) / ms(w[3])
    );
    println!(
        "| durable: `Durability::Full` vs the same protocol by hand (`write_all`, `sync_data`, rename, fsync of the directory) | {:.1} ms | {:.1} ms | {:.2} |",
        ms(w[0]),
        ms(w[4]),
        ms(w[0]) / ms(w[4])
    );
    println!();
    drop((full, none));
    for dir in [&full_dir, &none_dir, &file_dir] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn report_reads(rt: &tokio::runtime::Runtime, rounds: u32) {
    let len = 64 << 20;
    let chunks = body(len);
    let dir = scratch("report-read");
    let storage = rt.block_on(DiskStorage::open(&dir, 1 << 30)).expect("open");
    rt.block_on(disk_write(&storage, "k", &chunks));
    let file = object_file(&dir);
    let r = interleaved(
        rounds,
        &mut [
            &mut || {
                // As a proxy reads it: chunk by chunk, each sent on and dropped.
                time(&mut || {
                    let read = rt.block_on(async {
                        let mut hit = storage.lookup(&"k".into()).await.unwrap().unwrap();
                        let mut n = 0;
                        while let Some(chunk) = hit.body.read().await.unwrap() {
                            n += chunk.len();
                        }
                        n
                    });
                    assert_eq!(read, len);
                })
            },
            &mut || {
                time(&mut || {
                    let read = rt.block_on(async {
                        let mut hit = storage.lookup(&"k".into()).await.unwrap().unwrap();
                        read_to_end(&mut *hit.body).await.unwrap()
                    });
                    assert_eq!(read.len(), len);
                })
            },
            &mut || {
                time(&mut || {
                    let read = rt.block_on(tokio::fs::read(&file)).unwrap();
                    assert!(read.len() > len);
                })
            },
        ],
    );
    println!(
        "| read 64 MiB, page cache warm | DiskStorage reader (verified) | tokio::fs::read | throughput ratio (goal >= 0.8) |"
    );
    println!("|---|---:|---:|---:|");
    println!(
        "| streamed (chunks read and dropped, as a proxy sends them) | {:.1} ms | {:.1} ms | {:.2} |",
        ms(r[0]),
        ms(r[2]),
        ms(r[2]) / ms(r[0])
    );
    println!(
        "| collected into one `Vec` (`stream_cache::read_to_end`) | {:.1} ms | {:.1} ms | {:.2} |",
        ms(r[1]),
        ms(r[2]),
        ms(r[2]) / ms(r[1])
    );
    println!();
    drop(storage);
    let _ = std::fs::remove_dir_all(&dir);
}

fn report_eviction(rt: &tokio::runtime::Runtime, rounds: u32) {
    // Insert at capacity: about `count` objects of 1 KiB resident, every insert evicts one (the
    // table shows it: objects evicted per timed insert). Each round times a batch of inserts;
    // the table shows the best batch's time per insert.
    let object = body(1024);
    let batch = 500u64;
    println!(
        "| insert at capacity (1 KiB bodies, `Durability::None`) | objects resident | time per insert | evictions per timed insert | used bytes never over capacity |"
    );
    println!("|---|---:|---:|---:|---|");
    let mut stores = Vec::new();
    for count in object_counts() {
        let dir = scratch("report-evict");
        let capacity = count * 1200;
        let storage = rt
            .block_on(
                DiskStorage::builder(&dir, capacity)
                    .durability(Durability::None)
                    .open(),
            )
            .expect("open");
        let next = AtomicU64::new(0);
        rt.block_on(fill_to_capacity(&storage, &next, &object, capacity));
        let full = storage.len();
        stores.push((count, dir, storage, capacity, next, full));
    }
    let mut runs: Vec<Box<dyn FnMut() -> Duration + '_>> = stores
        .iter()
        .map(|(_, _, storage, capacity, next, _)| {
            let object = &object;
            Box::new(move || {
                // Every batch starts with every resident file on disk (not only in the page
                // cache), as in a cache that has been at capacity for a while: otherwise the
                // smallest count evicts files it wrote moments before, whose blocks were never
                // allocated (delayed allocation), while the largest evicts files that reached
                // the disk, and the comparison measures writeback instead of the storage.
                let _ = std::process::Command::new("sync").status();
                let start = Instant::now();
                rt.block_on(async {
                    for _ in 0..batch {
                        let key = format!("k{}", next.fetch_add(1, Ordering::Relaxed));
                        disk_write(storage, &key, object).await;
                        assert!(storage.used_bytes() <= *capacity);
                    }
                });
                start.elapsed() / batch as u32
            }) as Box<dyn FnMut() -> Duration + '_>
        })
        .collect();
    let mut refs: Vec<&mut dyn FnMut() -> Duration> = runs
        .iter_mut()
        .map(|run| &mut **run as &mut dyn FnMut() -> Duration)
        .collect();
    let e = interleaved(rounds, &mut refs);
    drop(refs);
    drop(runs);
    let timed = f64::from(rounds) * batch as f64;
    for ((count, dir, storage, _, _, full), per_insert) in stores.into_iter().zip(e) {
        let evicted = timed - (storage.len() as f64 - full as f64);
        println!(
            "| capacity of {count} x 1,200 bytes | {} | {:.0} µs | {:.2} | yes (checked after every insert) |",
            storage.len(),
            per_insert.as_secs_f64() * 1e6,
            evicted / timed
        );
        drop(storage);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
