//! Benchmarks crate; benches live in `benches/`.
