//! Zipf-distributed keys for the synthetic hit-ratio and throughput workloads.
//!
//! Exact inverse-CDF sampling over a precomputed table: P(rank i) is proportional to 1 / i^s for
//! i in 1..=n. The table costs 8 bytes per key (8 MB at 1M keys) and a sample is one binary search,
//! which is fine for generating workloads ahead of a measurement.

use crate::rng::Rng;

/// A Zipf(s) distribution over the keys `0..n` (key 0 is the most popular).
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

/// Why a [`Zipf`] could not be built.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ZipfError {
    /// There must be at least one key.
    #[error("zipf needs at least one key")]
    NoKeys,
    /// The exponent must be finite and non-negative.
    #[error("zipf exponent must be finite and >= 0, got {0}")]
    BadExponent(f64),
}

impl Zipf {
    /// Builds the table for `n` keys with exponent `s` (s = 0 is uniform).
    pub fn new(n: u64, s: f64) -> Result<Self, ZipfError> {
        if n == 0 {
            return Err(ZipfError::NoKeys);
        }
        if !s.is_finite() || s < 0.0 {
            return Err(ZipfError::BadExponent(s));
        }
        let mut cdf = Vec::with_capacity(n as usize);
        let mut total = 0.0;
        for rank in 1..=n {
            total += (rank as f64).powf(-s);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Ok(Self { cdf })
    }

    /// Number of distinct keys.
    pub fn len(&self) -> u64 {
        self.cdf.len() as u64
    }

    /// Always false: a `Zipf` has at least one key.
    pub fn is_empty(&self) -> bool {
        self.cdf.is_empty()
    }

    /// Draws one key in `0..len()`.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.next_f64();
        let idx = self.cdf.partition_point(|&c| c <= u);
        idx.min(self.cdf.len() - 1) as u64
    }

    /// `count` keys drawn with a fresh generator seeded by `seed`, scattered over the u64 space
    /// (so hash-based caches do not get sequential keys that happen to hash nicely).
    pub fn keys(&self, count: usize, seed: u64) -> Vec<u64> {
        let mut rng = Rng::new(seed);
        (0..count).map(|_| scatter(self.sample(&mut rng))).collect()
    }
}

/// A bijection on u64 (the SplitMix64 finaliser) used to turn ranks into unordered keys.
pub fn scatter(rank: u64) -> u64 {
    let mut z = rank.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::{Zipf, ZipfError};
    use crate::rng::Rng;

    #[test]
    fn rejects_bad_input() {
        assert_eq!(Zipf::new(0, 1.0).unwrap_err(), ZipfError::NoKeys);
        assert!(matches!(
            Zipf::new(10, -1.0),
            Err(ZipfError::BadExponent(_))
        ));
        assert!(matches!(
            Zipf::new(10, f64::NAN),
            Err(ZipfError::BadExponent(_))
        ));
    }

    #[test]
    fn frequencies_follow_the_power_law() {
        // With s = 1 over 100 keys, rank 1 is drawn twice as often as rank 2 and ten times as
        // often as rank 10 (1 / H_100 = 0.1928 for rank 1).
        let zipf = Zipf::new(100, 1.0).unwrap();
        let mut rng = Rng::new(3);
        let mut counts = [0u32; 100];
        let draws = 400_000;
        for _ in 0..draws {
            counts[zipf.sample(&mut rng) as usize] += 1;
        }
        let p0 = f64::from(counts[0]) / f64::from(draws);
        assert!((p0 - 0.1928).abs() < 0.005, "p(rank 1) = {p0}");
        let r2 = f64::from(counts[0]) / f64::from(counts[1]);
        let r10 = f64::from(counts[0]) / f64::from(counts[9]);
        assert!((r2 - 2.0).abs() < 0.1, "rank1/rank2 = {r2}");
        assert!((r10 - 10.0).abs() < 0.8, "rank1/rank10 = {r10}");
    }
}
