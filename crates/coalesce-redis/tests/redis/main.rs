//! Every test that needs a real `redis-server`, in one binary with its own small harness
//! (`harness = false`), so that a machine without the binary gets a summary line naming each
//! skipped test at the end of `cargo test`'s output, where libtest would have shown a pass (its
//! captured output hides a per-test skip message). Under CI (`CI` set) a missing binary fails
//! these tests instead.

mod conformance;
mod harness;
mod lease;

use harness::Case;

fn main() -> std::process::ExitCode {
    harness::run(&[
        Case::redis(
            "lease::two_processes_fill_each_key_once_through_redis",
            2,
            |server| {
                Box::pin(lease::two_processes_fill_each_key_once_through_redis(
                    server,
                ))
            },
        ),
        Case::redis(
            "lease::killing_redis_mid_fill_fails_open_and_nothing_hangs",
            2,
            |server| {
                Box::pin(lease::killing_redis_mid_fill_fails_open_and_nothing_hangs(
                    server,
                ))
            },
        ),
        Case::redis(
            "lease::the_lease_reconnects_when_redis_comes_back",
            1,
            |server| Box::pin(lease::the_lease_reconnects_when_redis_comes_back(server)),
        ),
        Case::plain(
            "lease::a_redis_that_never_answers_costs_a_timeout_not_a_hang",
            1,
            || Box::pin(lease::a_redis_that_never_answers_costs_a_timeout_not_a_hang()),
        ),
        Case::redis(
            "conformance::redis_lease_passes_the_lease_suite",
            1,
            |server| Box::pin(conformance::redis_lease_passes_the_lease_suite(server)),
        ),
    ])
}
