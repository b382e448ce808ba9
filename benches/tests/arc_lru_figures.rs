//! The hit-ratio harness is only trustworthy if exact LRU over the ARC traces reproduces the
//! figures published in the ARC paper (see `benches/traces/arc/README.md`, which cites the paper). OLTP at all five sizes
//! runs by default (under a second or two even unoptimised); the four workstation traces expand to
//! 42M requests, so they are `#[ignore]`d here and run with
//! `cargo test --release -p benches --test arc_lru_figures -- --include-ignored`.

use benches::policy::{ExactLru, simulate};
use benches::trace::ArcTrace;

/// Simulates exact LRU at `size` and checks the ratio rounds to the published figure.
fn check(trace: &ArcTrace, size: usize, published: f64) {
    let got = simulate(&mut ExactLru::new(size), trace.keys()).percent();
    let rounded = (got * 100.0).round() / 100.0;
    assert!(
        (rounded - published).abs() < 1e-9,
        "{} at {size}: exact LRU gives {got:.4}%, the paper gives {published:.2}%",
        trace.name()
    );
}

fn load(name: &str) -> ArcTrace {
    ArcTrace::load(name).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn oltp_exact_lru_matches_the_paper_at_all_five_sizes() {
    let trace = load("OLTP");
    assert_eq!(trace.lines(), 914_145);
    assert_eq!(trace.requests(), 914_145);
    for (size, published) in [
        (1_000, 32.83),
        (2_000, 42.47),
        (5_000, 53.65),
        (10_000, 60.70),
        (15_000, 64.63),
    ] {
        check(&trace, size, published);
    }
}

fn check_workstation(name: &str, lines: usize, requests: u64, published: f64) {
    let trace = load(name);
    assert_eq!(trace.lines(), lines);
    assert_eq!(trace.requests(), requests);
    check(&trace, 32_768, published);
}

#[test]
#[ignore = "12.7M requests: run with --release --include-ignored"]
fn p2_exact_lru_matches_the_paper() {
    check_workstation("P2", 666_176, 12_729_495, 18.47);
}

#[test]
#[ignore = "3.9M requests: run with --release --include-ignored"]
fn p3_exact_lru_matches_the_paper() {
    check_workstation("P3", 238_578, 3_912_296, 3.57);
}

#[test]
#[ignore = "12.7M requests: run with --release --include-ignored"]
fn p6_exact_lru_matches_the_paper() {
    check_workstation("P6", 519_711, 12_672_123, 4.24);
}

#[test]
#[ignore = "13.2M requests: run with --release --include-ignored"]
fn p12_exact_lru_matches_the_paper() {
    check_workstation("P12", 547_147, 13_208_930, 8.93);
}
