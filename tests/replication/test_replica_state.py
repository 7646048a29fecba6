"""ReplicaState: Kafka's caught-up rule (Replica.scala), with time as an argument."""

from __future__ import annotations

from replication.replica_state import NO_BROKER_EPOCH, UNKNOWN_OFFSET, ReplicaState

LAG_MS = 100


def test_new_leadership_state_knows_no_offsets() -> None:
    state = ReplicaState.for_new_leadership(now_ms=50, in_sync=True)
    assert state.log_end_offset == UNKNOWN_OFFSET
    assert state.log_start_offset == UNKNOWN_OFFSET
    assert state.last_caught_up_time_ms == 50
    assert ReplicaState.for_new_leadership(now_ms=50, in_sync=False).last_caught_up_time_ms == 0


def test_fetch_at_leader_end_offset_is_caught_up_now() -> None:
    state = ReplicaState().after_fetch(10, 0, fetch_time_ms=500, leader_end_offset=10, broker_epoch=7)
    assert state.last_caught_up_time_ms == 500
    assert state.broker_epoch == 7
    assert state.is_caught_up(10, now_ms=10_000, replica_lag_time_max_ms=LAG_MS)


def test_fetch_reaching_previous_leader_end_offset_is_caught_up_as_of_previous_fetch() -> None:
    first = ReplicaState().after_fetch(5, 0, fetch_time_ms=100, leader_end_offset=10, broker_epoch=NO_BROKER_EPOCH)
    assert first.last_caught_up_time_ms == 0
    second = first.after_fetch(10, 0, fetch_time_ms=180, leader_end_offset=15, broker_epoch=NO_BROKER_EPOCH)
    assert second.last_caught_up_time_ms == 100
    third = second.after_fetch(12, 0, fetch_time_ms=260, leader_end_offset=20, broker_epoch=NO_BROKER_EPOCH)
    assert third.last_caught_up_time_ms == 100, "12 < 15: not caught up with the previous fetch's LEO"


def test_lagging_replica_falls_out_after_lag_time() -> None:
    state = ReplicaState().after_fetch(10, 0, fetch_time_ms=100, leader_end_offset=10, broker_epoch=NO_BROKER_EPOCH)
    assert state.is_caught_up(20, now_ms=100 + LAG_MS, replica_lag_time_max_ms=LAG_MS)
    assert not state.is_caught_up(20, now_ms=101 + LAG_MS, replica_lag_time_max_ms=LAG_MS)


def test_older_broker_epoch_is_stale() -> None:
    state = ReplicaState().after_fetch(0, 0, fetch_time_ms=1, leader_end_offset=0, broker_epoch=9)
    assert state.is_stale_broker_epoch(8)
    assert not state.is_stale_broker_epoch(9)
    assert not state.is_stale_broker_epoch(NO_BROKER_EPOCH)


def test_leader_update_restarts_caught_up_time_for_isr_members_only() -> None:
    state = ReplicaState().after_fetch(4, 2, fetch_time_ms=10, leader_end_offset=8, broker_epoch=3)
    kept = state.for_leader_update(now_ms=90, in_sync=True)
    assert (kept.log_end_offset, kept.log_start_offset, kept.broker_epoch) == (4, 2, 3)
    assert kept.last_caught_up_time_ms == 90
    assert state.for_leader_update(now_ms=90, in_sync=False).last_caught_up_time_ms == 0
