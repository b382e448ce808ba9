//! Workloads built to defeat one static policy each (issue 17), so that "wins everywhere" in the
//! hit-ratio tables means something:
//! - [`zipf_with_scan`]: a zipf stream with a one-time scan of new keys mixed in (LRU loses: the
//!   scan flushes the hot set);
//! - [`shifting_zipf`]: a zipf whose popular keys change every `period` requests (LFU loses: old
//!   counts keep the last hot set in);
//! - [`looping`]: a loop over slightly more keys than the cache holds (LRU and FIFO lose
//!   everything: each key is evicted just before it comes back).
//!
//! Keys are scattered over the u64 space like [`Zipf::keys`], and the sets never collide: zipf
//! ranks map to `scatter(rank + epoch * n)`, scan keys to `scatter(SCAN_BASE + i)`.

use crate::rng::Rng;
use crate::zipf::{Zipf, scatter};

/// Scan keys start here (far above any zipf rank times epoch the harness uses).
const SCAN_BASE: u64 = 1 << 62;

/// `requests` zipf requests with a scan of `scan` distinct new keys mixed in: from the middle of
/// the stream on, every other request is the scan's next key until the scan is done (so the
/// stream is `requests + scan` long).
pub fn zipf_with_scan(zipf: &Zipf, requests: usize, scan: usize, seed: u64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    let start = requests / 2;
    let mut keys = Vec::with_capacity(requests + scan);
    let mut scanned = 0;
    for i in 0..requests {
        keys.push(scatter(zipf.sample(&mut rng)));
        if i >= start && scanned < scan {
            keys.push(scatter(SCAN_BASE + scanned as u64));
            scanned += 1;
        }
    }
    keys
}

/// `requests` zipf requests whose ranks map to a fresh set of keys every `period` requests: the
/// popular keys of one period are never requested again.
pub fn shifting_zipf(zipf: &Zipf, requests: usize, period: usize, seed: u64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    let period = period.max(1);
    (0..requests)
        .map(|i| {
            let epoch = (i / period) as u64;
            scatter(zipf.sample(&mut rng) + epoch * zipf.len())
        })
        .collect()
}

/// `requests` requests cycling over `len` keys in order.
pub fn looping(len: u64, requests: usize) -> Vec<u64> {
    let len = len.max(1);
    (0..requests as u64).map(|i| scatter(i % len)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{ExactLru, simulate};
    use std::collections::HashSet;

    #[test]
    fn the_scan_is_mixed_in_once() {
        let zipf = Zipf::new(100, 1.0).unwrap();
        let keys = zipf_with_scan(&zipf, 1_000, 200, 1);
        assert_eq!(keys.len(), 1_200);
        let scan: Vec<u64> = keys
            .iter()
            .copied()
            .filter(|k| (0..200).any(|i| scatter(SCAN_BASE + i) == *k))
            .collect();
        assert_eq!(scan.len(), 200);
        assert_eq!(scan.iter().collect::<HashSet<_>>().len(), 200);
        assert!(keys[..500].iter().all(|k| !scan.contains(k)));
    }

    #[test]
    fn shifted_hot_sets_do_not_overlap() {
        let zipf = Zipf::new(50, 1.0).unwrap();
        let keys = shifting_zipf(&zipf, 2_000, 1_000, 2);
        let a: HashSet<u64> = keys[..1_000].iter().copied().collect();
        let b: HashSet<u64> = keys[1_000..].iter().copied().collect();
        assert!(a.is_disjoint(&b));
    }

    #[test]
    fn a_loop_one_longer_than_the_cache_defeats_lru() {
        let keys = looping(101, 10_000);
        assert_eq!(simulate(&mut ExactLru::new(100), keys).hits, 0);
    }
}
