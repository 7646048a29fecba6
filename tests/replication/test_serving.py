"""Requests any replica serves (KIP-392 consumer fetches) and the leader's offset requests:
ListOffsets, OffsetsForLeaderEpoch, DeleteRecords; and a stopped replica.

Method: brokers' cores on temp dirs, hand-built events, `now_ms` passed in."""

from __future__ import annotations

from collections.abc import Callable

from replication.events import (
    ConsumerFetch,
    DeleteRecords,
    ListOffsets,
    OffsetsForLeaderEpoch,
    ProduceRequest,
    StopReplica,
    Tick,
)
from replication.ready import (
    DeleteRecordsResult,
    FetchResult,
    ListOffsetsResult,
    OffsetsForLeaderEpochResult,
    ProduceResult,
    Role,
)
from storage.records import iter_headers
from tests.replication.harness import Broker, batch, catch_up, fetch_round, make_follower, make_leader, only
from wire.error_codes import ErrorCode

Brokers = Callable[..., list[Broker]]


def setup(brokers: Brokers, **properties: str) -> list[Broker]:
    cluster = brokers(**properties)
    make_leader(cluster[0], 1, isr=(1, 2))
    make_follower(cluster[1], 1, 1, isr=(1, 2))
    make_follower(cluster[2], 1, 1, isr=(1, 2))
    return cluster


def append(leader: Broker, *values: bytes, timestamp_ms: int = 1_000, now_ms: int = 0) -> None:
    ready = leader.handle(ProduceRequest(leader.request_id(), batch(*values, timestamp_ms=timestamp_ms), 1, 1), now_ms)
    assert only(ready.completions, ProduceResult).error == ErrorCode.NONE


def fetch(broker: Broker, offset: int, now_ms: int = 0, **fields: object) -> FetchResult:
    request = ConsumerFetch(broker.request_id(), offset, 1 << 20, **fields)
    return only(broker.handle(request, now_ms).completions, FetchResult)


def offsets(records: bytes) -> list[int]:
    return [header.base_offset for _, header in iter_headers(records)]


def test_follower_serves_consumers_up_to_its_own_hw(brokers: Brokers) -> None:
    leader, follower, _ = setup(brokers)
    append(leader, b"a")
    append(leader, b"b")
    fetch_round(leader, follower, now_ms=0)  # follower: LEO 2, HW 0
    result = fetch(follower, 0)
    assert (result.error, result.records, result.high_watermark) == (ErrorCode.NONE, b"", 0)
    fetch_round(leader, follower, now_ms=0)  # leader HW 2; follower learns it
    result = fetch(follower, 0)
    assert offsets(result.records) == [0, 1]
    assert result.high_watermark == 2


def test_consumer_fetch_above_hw_is_empty_and_outside_log_is_out_of_range(brokers: Brokers) -> None:
    leader, follower, _ = setup(brokers)
    append(leader, b"a", b"b")
    fetch_round(leader, follower, now_ms=0)
    assert fetch(leader, 1).records == b"", "HW 0: nothing is served"
    assert fetch(leader, 2).error == ErrorCode.NONE, "offset == LEO is in range"
    result = fetch(leader, 3)
    assert result.error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert "outside [0, 2]" in result.error_message


def test_consumer_fetch_epoch_fencing_and_require_leader(brokers: Brokers) -> None:
    leader, follower, _ = setup(brokers)
    assert fetch(follower, 0, current_leader_epoch=0).error == ErrorCode.FENCED_LEADER_EPOCH
    assert fetch(follower, 0, current_leader_epoch=2).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert fetch(follower, 0, current_leader_epoch=1).error == ErrorCode.NONE
    assert fetch(follower, 0, require_leader=True).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch(leader, 0, require_leader=True).error == ErrorCode.NONE


def test_list_offsets_earliest_latest_and_by_timestamp(brokers: Brokers) -> None:
    leader, follower, _ = setup(brokers)
    append(leader, b"a", timestamp_ms=100)
    append(leader, b"b", timestamp_ms=200)
    append(leader, b"c", timestamp_ms=300)
    catch_up(leader, [follower], now_ms=0)
    append(leader, b"d", timestamp_ms=400)  # above the HW

    def list_offsets(timestamp: int) -> ListOffsetsResult:
        ready = leader.handle(ListOffsets(leader.request_id(), timestamp), now_ms=0)
        return only(ready.completions, ListOffsetsResult)

    assert list_offsets(-2).offset == 0
    assert list_offsets(-1).offset == 3, "latest is the HW, not the LEO"
    assert (list_offsets(150).offset, list_offsets(150).timestamp) == (1, 200)
    assert list_offsets(-3).offset == -1, "the record with the max timestamp (3) is above the HW, as in Kafka"
    assert list_offsets(350).offset == -1, "offset 3 is above the HW"
    catch_up(leader, [follower], now_ms=0)
    assert (list_offsets(-3).offset, list_offsets(-3).timestamp) == (3, 400), "KIP-734 max timestamp"
    ready = follower.handle(ListOffsets(7, -1), now_ms=0)
    assert only(ready.completions, ListOffsetsResult).error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_list_offsets_on_new_leader_with_lagging_hw_is_not_available(brokers: Brokers) -> None:
    leader, follower, _ = setup(brokers)
    append(leader, b"a")
    fetch_round(leader, follower, now_ms=0)  # follower LEO 1, HW 0
    make_leader(follower, 2, isr=(1, 2), partition_epoch=1)
    ready = follower.handle(ListOffsets(7, -1), now_ms=0)
    assert only(ready.completions, ListOffsetsResult).error == ErrorCode.OFFSET_NOT_AVAILABLE


def test_offsets_for_leader_epoch(brokers: Brokers) -> None:
    leader, *_ = setup(brokers)
    append(leader, b"a", b"b")
    make_leader(leader, 3, isr=(1, 2), partition_epoch=1)
    append(leader, b"c")

    def end_of(epoch: int) -> tuple[int, int]:
        ready = leader.handle(OffsetsForLeaderEpoch(leader.request_id(), epoch), now_ms=0)
        result = only(ready.completions, OffsetsForLeaderEpochResult)
        return result.leader_epoch, result.end_offset

    assert end_of(1) == (1, 2)
    assert end_of(2) == (1, 2)
    assert end_of(3) == (3, 3)
    assert end_of(4) == (-1, -1)


def test_delete_records_waits_for_isr_log_start_offsets(brokers: Brokers) -> None:
    leader, follower, _ = setup(brokers)
    append(leader, b"a")
    append(leader, b"b")
    catch_up(leader, [follower], now_ms=0)
    ready = leader.handle(DeleteRecords(40, 1, timeout_ms=1_000), now_ms=1)
    assert ready.completions == ()
    assert leader.log.log_start_offset == 1
    fetch_round(leader, follower, now_ms=2)  # the follower learns 1
    leader_ready, _ = fetch_round(leader, follower, now_ms=3)  # and reports it
    result = only(leader_ready.completions, DeleteRecordsResult)
    assert (result.request_id, result.error, result.low_watermark) == (40, ErrorCode.NONE, 1)
    assert follower.log.log_start_offset == 1


def test_delete_records_above_hw_is_out_of_range_and_times_out_without_followers(brokers: Brokers) -> None:
    leader, follower, _ = setup(brokers)
    append(leader, b"a", b"b")
    ready = leader.handle(DeleteRecords(41, 2, timeout_ms=10), now_ms=0)
    assert only(ready.completions, DeleteRecordsResult).error == ErrorCode.OFFSET_OUT_OF_RANGE
    catch_up(leader, [follower], now_ms=0)
    leader.handle(DeleteRecords(42, -1, timeout_ms=10), now_ms=1)
    ready = leader.handle(Tick(), now_ms=11)
    assert only(ready.completions, DeleteRecordsResult).error == ErrorCode.REQUEST_TIMED_OUT


def test_stopped_replica_refuses_everything(brokers: Brokers) -> None:
    leader, *_ = setup(brokers)
    ready = leader.handle(StopReplica(), now_ms=0)
    assert ready.role == Role.STOPPED
    assert fetch(leader, 0).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    ready = leader.handle(ProduceRequest(9, batch(b"a"), 1, 10), now_ms=0)
    assert only(ready.completions, ProduceResult).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
