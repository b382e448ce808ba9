//! Invalidation fences per key: which writes a fill's publish must lose to.
//!
//! A fill reads its shard's write sequence before it starts (its fence) and publishes only if
//! no write of its own key (insert, remove, invalidate) and no clear happened since. Every plain
//! write or remove of a shard bumps the shard's sequence and records its key's hash in a ring of
//! the last `len` writes (under the shard's write lock: two plain stores, no locked
//! instruction); the publish, also under the write lock, scans the records after its fence for
//! its own hash. Until issue 17 fences were 16 counters per shard chosen by key hash, so a fill
//! lost to any write of a key in the same stripe: on tokio's paused clock, 256 fills of keys
//! nobody wrote, 10 ms each, with 4 plain writes of other keys per millisecond, lost 191 (one
//! shard), 46 (8 shards) and 10 (64 shards) of their publishes (`tests/fences.rs`); now none.
//!
//! The ring is bounded: if more than `len` writes went to the shard while a fill ran, the
//! records of its window are partly gone and the fill is fenced, conservatively (never a value
//! older than a write of its key stored). `len` is the shard's share of the capacity rounded
//! up to a power of two, between 64 and 1,024 (8 bytes each): at 1M writes a second over 8
//! shards, a fill shorter than about 8 ms is fenced exactly. Two keys with equal 64-bit hashes
//! fence each other (also the safe direction; in `Cache::remove_unless_written_since` such a
//! collision spares an entry that should have gone, with odds of about 2^-64).

/// Fewest and most write records a shard keeps.
const MIN_LOG: usize = 64;
const MAX_LOG: usize = 1024;

/// The hashes of a shard's last writes, indexed by write sequence modulo its length.
pub(crate) struct WriteLog {
    hashes: Box<[u64]>,
    mask: u64,
}

impl WriteLog {
    /// A log for a shard expected to hold about `share` entries.
    pub(crate) fn new(share: u64) -> Self {
        let len = usize::try_from(share)
            .unwrap_or(MAX_LOG)
            .clamp(MIN_LOG, MAX_LOG)
            .next_power_of_two();
        Self {
            hashes: vec![0; len].into_boxed_slice(),
            mask: len as u64 - 1,
        }
    }

    /// How many writes it remembers.
    pub(crate) fn len(&self) -> u64 {
        self.mask + 1
    }

    /// Records that write number `seq` was of the key hashing to `hash`.
    #[inline]
    pub(crate) fn record(&mut self, seq: u64, hash: u64) {
        self.hashes[(seq & self.mask) as usize] = hash;
    }

    /// Whether a fill fenced at `fence` must lose to the writes `fence..now`: one of them was of
    /// its key, or they are more than the log remembers.
    #[inline]
    pub(crate) fn fences(&self, fence: u64, now: u64, hash: u64) -> bool {
        now.wrapping_sub(fence) > self.len() || self.wrote(fence, now, hash)
    }

    /// Whether one of the writes `fence..now` is known to be of the key hashing to `hash`:
    /// false when they are more than the log remembers (unknown), unlike [`fences`](Self::fences).
    #[inline]
    pub(crate) fn wrote(&self, fence: u64, now: u64, hash: u64) -> bool {
        now.wrapping_sub(fence) <= self.len()
            && (fence..now).any(|seq| self.hashes[(seq & self.mask) as usize] == hash)
    }
}

#[cfg(all(test, not(herd_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_fence_falls_only_to_its_own_key_or_an_overflowed_log() {
        let mut log = WriteLog::new(10);
        assert_eq!(log.len(), 64);
        for seq in 0..40 {
            log.record(seq, 1000 + seq);
        }
        assert!(!log.fences(40, 40, 7), "no write since");
        assert!(!log.fences(0, 40, 7), "forty writes of other keys");
        assert!(log.fences(0, 40, 1020), "a write of its own key");
        assert!(
            !log.fences(21, 40, 1020),
            "its key was written before the fence"
        );
        for seq in 40..100 {
            log.record(seq, 1000 + seq);
        }
        assert!(
            log.fences(30, 100, 7),
            "70 writes: more than the log remembers"
        );
        assert!(!log.fences(36, 100, 7), "64 writes: all remembered");
        assert!(log.wrote(36, 100, 1040) && !log.wrote(36, 100, 7));
        assert!(!log.wrote(30, 100, 1040), "70 writes: not known");
        assert_eq!(WriteLog::new(1 << 40).len(), 1024);
    }
}
