//! One writer streaming a body to many readers, three ways, so the stream benches and the memory
//! binary share one implementation of each:
//! - [`stream_cache_fanout`]: `stream_cache::MemStorage`, readers attached to the partial body
//!   before the first chunk (chunks shared as `Bytes`);
//! - [`broadcast_fanout`]: a `tokio::sync::broadcast` channel sized to hold the whole body (so no
//!   reader lags), chunks shared as `Bytes`;
//! - [`copy_fanout`]: the naive design, a bounded `mpsc` channel per reader and a private copy of
//!   every chunk for every reader.
//!
//! Each returns the total number of bytes the readers received, which callers check.

use bytes::Bytes;
use stream_cache::{MemStorage, ObjectMeta, Storage};

/// A body of `len` bytes split into `chunk`-byte `Bytes` views of one buffer (no copies).
pub fn body_chunks(len: usize, chunk: usize) -> Vec<Bytes> {
    let body = Bytes::from((0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    (0..len)
        .step_by(chunk)
        .map(|at| body.slice(at..(at + chunk).min(len)))
        .collect()
}

/// Streams `chunks` through `storage` under `key` to `readers` readers attached before the first
/// write; returns the bytes the readers received. Spawns on the current tokio runtime.
pub async fn stream_cache_fanout(
    storage: &MemStorage,
    key: &str,
    chunks: &[Bytes],
    readers: usize,
) -> u64 {
    let key = key.into();
    let len: u64 = chunks.iter().map(|c| c.len() as u64).sum();
    let mut writer = storage
        .begin_write(&key, ObjectMeta::new("bench").with_len(len))
        .await
        .expect("begin_write");
    let mut tasks = Vec::with_capacity(readers);
    for _ in 0..readers {
        let mut hit = storage
            .lookup(&key)
            .await
            .expect("lookup")
            .expect("partial body is visible");
        tasks.push(tokio::spawn(async move {
            let mut got = 0u64;
            while let Some(chunk) = hit.body.read().await.expect("no abort") {
                got += chunk.len() as u64;
            }
            got
        }));
    }
    let chunks = chunks.to_vec();
    let write = tokio::spawn(async move {
        for chunk in chunks {
            writer.write(chunk).await.expect("write");
        }
        writer.finish().await.expect("finish")
    });
    assert_eq!(write.await.expect("writer task"), len);
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("reader task");
    }
    total
}

/// The same fan-out through a `tokio::sync::broadcast` channel holding every chunk.
pub async fn broadcast_fanout(chunks: &[Bytes], readers: usize) -> u64 {
    let (tx, _) = tokio::sync::broadcast::channel::<Bytes>(chunks.len().max(1));
    let tasks: Vec<_> = (0..readers)
        .map(|_| {
            let mut rx = tx.subscribe();
            tokio::spawn(async move {
                let mut got = 0u64;
                while let Ok(chunk) = rx.recv().await {
                    got += chunk.len() as u64;
                }
                got
            })
        })
        .collect();
    let chunks = chunks.to_vec();
    let write = tokio::spawn(async move {
        for chunk in chunks {
            tx.send(chunk).expect("receivers alive");
            tokio::task::yield_now().await;
        }
    });
    write.await.expect("writer task");
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("reader task");
    }
    total
}

/// The naive design: every reader gets its own copy of every chunk through a bounded channel.
pub async fn copy_fanout(chunks: &[Bytes], readers: usize) -> u64 {
    let mut senders = Vec::with_capacity(readers);
    let mut tasks = Vec::with_capacity(readers);
    for _ in 0..readers {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
        senders.push(tx);
        tasks.push(tokio::spawn(async move {
            let mut got = 0u64;
            while let Some(chunk) = rx.recv().await {
                got += chunk.len() as u64;
            }
            got
        }));
    }
    let chunks = chunks.to_vec();
    let write = tokio::spawn(async move {
        for chunk in chunks {
            for tx in &senders {
                tx.send(chunk.to_vec()).await.expect("reader alive");
            }
        }
    });
    write.await.expect("writer task");
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("reader task");
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_design_delivers_every_byte_to_every_reader() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let chunks = body_chunks(100_000, 16_384);
        assert_eq!(chunks.len(), 7);
        let storage = MemStorage::new(1 << 20);
        rt.block_on(async {
            assert_eq!(
                stream_cache_fanout(&storage, "k", &chunks, 3).await,
                300_000
            );
            assert_eq!(broadcast_fanout(&chunks, 3).await, 300_000);
            assert_eq!(copy_fanout(&chunks, 3).await, 300_000);
        });
    }
}
