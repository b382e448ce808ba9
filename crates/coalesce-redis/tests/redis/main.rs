//! Every test that needs a real `redis-server`, in one binary with its own small harness
//! (`harness = false`), so that a machine without the binary gets a summary line naming each
//! skipped test at the end of `cargo test`'s output, where libtest would have shown a pass (its
//! captured output hides a per-test skip message). Under CI (`CI` set) a missing binary fails
//! these tests instead.

mod conformance;
mod fleet;
mod forwarder;
mod harness;
mod l2_conformance;
mod lease;
mod second_level;

use harness::Case;

fn main() -> std::process::ExitCode {
    // Re-run as a child of the multi-process test: do the child's part only.
    if let Some(code) = fleet::child() {
        return code;
    }
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
        Case::redis(
            "lease::a_connect_slower_than_the_callers_limit_still_completes",
            2,
            |server| {
                Box::pin(lease::a_connect_slower_than_the_callers_limit_still_completes(server))
            },
        ),
        Case::redis(
            "lease::an_acquisition_that_times_out_does_not_leave_the_lease_held",
            2,
            |server| {
                Box::pin(lease::an_acquisition_that_times_out_does_not_leave_the_lease_held(server))
            },
        ),
        Case::redis(
            "lease::a_failover_behind_one_address_is_followed",
            2,
            |server| Box::pin(lease::a_failover_behind_one_address_is_followed(server)),
        ),
        Case::redis(
            "lease::a_late_failure_on_an_old_connection_leaves_the_new_one",
            2,
            |server| {
                Box::pin(lease::a_late_failure_on_an_old_connection_leaves_the_new_one(server))
            },
        ),
        Case::plain(
            "lease::a_redis_that_never_answers_costs_a_timeout_not_a_hang",
            1,
            || Box::pin(lease::a_redis_that_never_answers_costs_a_timeout_not_a_hang()),
        ),
        Case::redis(
            "lease::a_set_that_lands_after_its_release_is_released_again",
            2,
            |server| {
                Box::pin(lease::a_set_that_lands_after_its_release_is_released_again(
                    server,
                ))
            },
        ),
        Case::redis(
            "conformance::redis_lease_passes_the_lease_suite",
            1,
            |server| Box::pin(conformance::redis_lease_passes_the_lease_suite(server)),
        ),
        Case::redis(
            "second_level::a_failover_behind_one_address_moves_the_backplane",
            2,
            |server| {
                Box::pin(second_level::a_failover_behind_one_address_moves_the_backplane(server))
            },
        ),
        Case::redis(
            "second_level::a_failover_that_kills_clients_moves_the_backplane",
            2,
            |server| {
                Box::pin(second_level::a_failover_that_kills_clients_moves_the_backplane(server))
            },
        ),
        Case::redis(
            "second_level::a_move_behind_the_address_takes_every_connection_along",
            2,
            |server| {
                Box::pin(
                    second_level::a_move_behind_the_address_takes_every_connection_along(server),
                )
            },
        ),
        Case::redis(
            "second_level::an_ack_nobody_receives_is_not_counted_as_sent",
            1,
            |server| {
                Box::pin(second_level::an_ack_nobody_receives_is_not_counted_as_sent(
                    server,
                ))
            },
        ),
        Case::redis(
            "second_level::a_dead_connection_is_replaced_when_callers_give_up_first",
            1,
            |server| {
                Box::pin(
                    second_level::a_dead_connection_is_replaced_when_callers_give_up_first(server),
                )
            },
        ),
        Case::redis(
            "second_level::a_slow_connection_is_kept_when_callers_give_up_first",
            2,
            |server| {
                Box::pin(second_level::a_slow_connection_is_kept_when_callers_give_up_first(server))
            },
        ),
        Case::redis(
            "second_level::an_address_left_on_a_replica_is_accepted",
            2,
            |server| {
                Box::pin(second_level::an_address_left_on_a_replica_is_accepted(
                    server,
                ))
            },
        ),
        Case::redis(
            "second_level::wait_subscribed_before_a_tier_is_attached_returns",
            2,
            |server| {
                Box::pin(second_level::wait_subscribed_before_a_tier_is_attached_returns(server))
            },
        ),
        Case::redis(
            "second_level::an_invalidation_fences_a_fill_in_another_process",
            2,
            |server| {
                Box::pin(second_level::an_invalidation_fences_a_fill_in_another_process(server))
            },
        ),
        Case::redis(
            "second_level::the_fence_holds_for_a_process_without_a_backplane",
            2,
            |server| {
                Box::pin(second_level::the_fence_holds_for_a_process_without_a_backplane(server))
            },
        ),
        Case::redis(
            "second_level::an_invalidation_drops_the_l1_copy_of_every_process",
            2,
            |server| {
                Box::pin(second_level::an_invalidation_drops_the_l1_copy_of_every_process(server))
            },
        ),
        Case::redis(
            "second_level::killing_redis_mid_fill_neither_hangs_nor_errs_and_the_tier_recovers",
            2,
            |server| {
                Box::pin(second_level::killing_redis_mid_fill_neither_hangs_nor_errs_and_the_tier_recovers(server))
            },
        ),
        Case::redis(
            "second_level::a_process_whose_subscription_dropped_does_not_serve_an_entry_invalidated_meanwhile",
            2,
            |server| {
                Box::pin(second_level::a_process_whose_subscription_dropped_does_not_serve_an_entry_invalidated_meanwhile(server))
            },
        ),
        Case::redis(
            "second_level::a_value_redis_refuses_is_served_from_l1_and_counted",
            2,
            |server| {
                Box::pin(second_level::a_value_redis_refuses_is_served_from_l1_and_counted(server))
            },
        ),
        Case::redis(
            "second_level::keys_with_any_bytes_round_trip_through_redis_and_the_backplane",
            2,
            |server| {
                Box::pin(
                    second_level::keys_with_any_bytes_round_trip_through_redis_and_the_backplane(
                        server,
                    ),
                )
            },
        ),
        Case::redis(
            "fleet::eight_processes_fill_one_cold_key_once",
            2,
            |server| Box::pin(fleet::eight_processes_fill_one_cold_key_once(server)),
        ),
        Case::redis(
            "l2_conformance::redis_second_level_passes_the_l2_suite",
            2,
            |server| {
                Box::pin(l2_conformance::redis_second_level_passes_the_l2_suite(
                    server,
                ))
            },
        ),
        Case::redis(
            "second_level::struct_values_cross_processes_as_cbor",
            2,
            |server| Box::pin(second_level::struct_values_cross_processes_as_cbor(server)),
        ),
        Case::redis(
            "second_level::a_read_dropped_at_any_await_leaves_nothing_stuck",
            2,
            |server| {
                Box::pin(second_level::a_read_dropped_at_any_await_leaves_nothing_stuck(server))
            },
        ),
        Case::redis(
            "second_level::a_subscriber_that_never_acknowledges_costs_a_bounded_wait",
            2,
            |server| {
                Box::pin(
                    second_level::a_subscriber_that_never_acknowledges_costs_a_bounded_wait(server),
                )
            },
        ),
        Case::redis(
            "second_level::versions_never_repeat_across_version_expiry_and_restarts",
            2,
            |server| {
                Box::pin(
                    second_level::versions_never_repeat_across_version_expiry_and_restarts(server),
                )
            },
        ),
        Case::redis(
            "second_level::an_invalidation_never_hands_out_the_epoch",
            2,
            |server| {
                Box::pin(second_level::an_invalidation_never_hands_out_the_epoch(
                    server,
                ))
            },
        ),
        Case::redis(
            "second_level::an_evicted_version_refuses_the_fill_that_read_before_it",
            2,
            |server| {
                Box::pin(
                    second_level::an_evicted_version_refuses_the_fill_that_read_before_it(server),
                )
            },
        ),
        Case::redis(
            "second_level::versions_only_grow_across_a_counter_that_went_back",
            2,
            |server| {
                Box::pin(second_level::versions_only_grow_across_a_counter_that_went_back(server))
            },
        ),
        Case::redis(
            "second_level::an_invalidation_does_not_wait_for_acks_its_subscription_cannot_hear",
            2,
            |server| {
                Box::pin(
                    second_level::an_invalidation_does_not_wait_for_acks_its_subscription_cannot_hear(
                        server,
                    ),
                )
            },
        ),
        Case::redis(
            "second_level::a_subscriber_that_died_with_its_runtime_is_replaced",
            2,
            |server| {
                Box::pin(second_level::a_subscriber_that_died_with_its_runtime_is_replaced(server))
            },
        ),
        Case::redis(
            "second_level::killing_redis_mid_invalidation_neither_hangs_nor_leaves_stale_l1",
            2,
            |server| {
                Box::pin(
                    second_level::killing_redis_mid_invalidation_neither_hangs_nor_leaves_stale_l1(
                        server,
                    ),
                )
            },
        ),
        Case::redis(
            "second_level::a_fill_announcement_wakes_the_waiting_process_before_its_poll",
            2,
            |server| {
                Box::pin(
                    second_level::a_fill_announcement_wakes_the_waiting_process_before_its_poll(
                        server,
                    ),
                )
            },
        ),
        Case::redis(
            "second_level::invalidate_all_reaches_every_key_and_fences_fills_in_other_processes",
            2,
            |server| {
                Box::pin(
                    second_level::invalidate_all_reaches_every_key_and_fences_fills_in_other_processes(
                        server,
                    ),
                )
            },
        ),
    ])
}
