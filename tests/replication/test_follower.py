"""The follower half of the partition core: truncation by leader epoch, HW and logStartOffset
following the leader, retention only on the leader, stale answers, fencing.

Method: brokers' cores on temp dirs; the leader's answers come from a real leader core
(`harness.fetch_round`) or are built by hand where a test needs an exact answer."""

from __future__ import annotations

from collections.abc import Callable

from replication.events import FetchResponseFromLeader, ProduceRequest, RunRetention
from replication.ready import (
    EpochEndOffset,
    FetchResult,
    LogStartOffsetRaised,
    SegmentsDeleted,
    Truncated,
    TruncatedFully,
)
from storage.log import LogStartOffsetIncrementReason
from storage.producer_state import BatchMetadata, ProducerStateEntry, ProducerStateManager
from storage.records import build_batch, iter_headers
from tests.replication.harness import (
    Broker,
    batch,
    catch_up,
    fetch_round,
    make_follower,
    make_leader,
    only,
    produce_results,
)
from wire.error_codes import ErrorCode

Brokers = Callable[..., list[Broker]]


def append(leader: Broker, *values: bytes, now_ms: int = 0, timestamp_ms: int = 1_000) -> None:
    leader.handle(ProduceRequest(leader.request_id(), batch(*values, timestamp_ms=timestamp_ms), 1, 1000), now_ms)


def batches(broker: Broker) -> list[tuple[int, int, bytes]]:
    """(base offset, epoch, bytes) of every batch in the broker's log."""
    log = broker.log
    found = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        for position, header in iter_headers(data):
            found.append((header.base_offset, header.partition_leader_epoch,
                          bytes(data[position:position + header.size_in_bytes])))
            offset = header.next_offset
    return found


def test_follower_appends_leader_bytes_unchanged_and_follows_hw(brokers: Brokers) -> None:
    leader, one, two = brokers()
    make_leader(leader, 1)
    make_follower(one, 1, 1)
    make_follower(two, 1, 1)
    append(leader, b"a", b"b")
    append(leader, b"c")
    _, _ready = fetch_round(leader, one, now_ms=1)
    assert one.log.log_end_offset == 3
    assert one.log.high_watermark == 0, "the leader's HW was 0 when it answered"
    assert batches(one) == batches(leader)
    catch_up(leader, [one, two], now_ms=2)
    assert (leader.log.high_watermark, one.log.high_watermark, two.log.high_watermark) == (3, 3, 3)


def test_follower_truncates_to_epoch_end_offset(brokers: Brokers) -> None:
    """KIP-101/279: a follower with an unreplicated tail from an old leader epoch truncates to the
    end offset of the largest epoch it shares with the new leader, not to its HW."""
    old_leader, new_leader, _ = brokers()
    make_leader(old_leader, 1, isr=(1, 2))
    make_follower(new_leader, 1, 1, isr=(1, 2))
    append(old_leader, b"a", b"b")  # epoch 1: [0, 2), replicated
    catch_up(old_leader, [new_leader], now_ms=0)
    append(old_leader, b"c")  # epoch 1: [2, 4), never replicated (acks=1)
    append(old_leader, b"d")
    assert (old_leader.log.log_end_offset, old_leader.log.high_watermark) == (4, 2)
    # Broker 2 leads epoch 2 and appends its own records at 2 and 3.
    make_leader(new_leader, 2, isr=(1, 2), partition_epoch=1)
    append(new_leader, b"x", b"y")
    make_follower(old_leader, 2, 2, isr=(1, 2), partition_epoch=1)
    position = old_leader.partition.fetch_position()
    assert (position.fetch_offset, position.last_fetched_epoch) == (4, 1)
    leader_ready, ready = fetch_round(new_leader, old_leader, now_ms=0)
    assert leader_ready.completions[0].diverging_epoch == EpochEndOffset(1, 2)
    assert ready.log_changes == (Truncated(2, 2),)
    assert old_leader.log.log_end_offset == 2
    fetch_round(new_leader, old_leader, now_ms=0)
    assert batches(old_leader) == batches(new_leader)
    assert [epoch for _, epoch, _ in batches(old_leader)] == [1, 2]


def test_two_failovers_in_a_row_truncate_in_steps(brokers: Brokers) -> None:
    """KIP-279: the follower lacks the epoch the leader answers with; it first truncates to the end
    of its own largest epoch below that one, and its next fetch finds the exact point.

    Epoch 1 (leader 1) writes [0, 5); broker 2 has [0, 4), broker 3 all five. Epoch 2 (leader 2)
    writes [4, 6) on 2 alone; epoch 3 (leader 3) writes [5, 8) on 3 alone; epoch 4 (leader 2)
    writes [6, 7). Then 3 follows 2: caches 3 = {1: 0, 3: 5}, 2 = {1: 0, 2: 4, 4: 6}."""
    one, two, three = brokers()
    make_leader(one, 1)
    make_follower(two, 1, 1)
    make_follower(three, 1, 1)
    for value in (b"0", b"1", b"2", b"3"):
        append(one, value)
    catch_up(one, [two, three], now_ms=0)
    append(one, b"4")
    fetch_round(one, three, now_ms=0)
    make_leader(two, 2, partition_epoch=1)
    append(two, b"x4")
    append(two, b"x5")
    make_leader(three, 3, partition_epoch=2)
    for value in (b"y5", b"y6", b"y7"):  # one batch each: a truncation to 6 would keep y5
        append(three, value)
    make_leader(two, 4, partition_epoch=3)
    append(two, b"z6")
    make_follower(three, 2, 4, partition_epoch=3)
    assert three.partition.fetch_position().last_fetched_epoch == 3
    leader_ready, ready = fetch_round(two, three, now_ms=0)
    assert leader_ready.completions[0].diverging_epoch == EpochEndOffset(2, 6)
    assert ready.log_changes == (Truncated(5, 4),), "intermediate: end of epoch 1 on broker 3"
    leader_ready, ready = fetch_round(two, three, now_ms=0)
    assert leader_ready.completions[0].diverging_epoch == EpochEndOffset(1, 4)
    assert ready.log_changes == (Truncated(4, 4),)
    fetch_round(two, three, now_ms=0)
    assert batches(three) == batches(two)
    assert [epoch for _, epoch, _ in batches(three)] == [1, 1, 1, 1, 2, 2, 4]


def test_deposed_leader_that_appended_nothing_does_not_loop(brokers: Brokers) -> None:
    """A leader's epoch entry sits at its LEO until it appends; demoted without appending, it must
    not keep that empty epoch as its latest (its fetches would get the same answer forever)."""
    one, two, _ = brokers()
    make_leader(one, 1)
    append(one, b"a", b"b")
    make_leader(two, 2, partition_epoch=1)  # broker 2 leads epoch 2 with nothing
    make_leader(one, 3, partition_epoch=2)  # broker 1 again, appends in epoch 3
    append(one, b"c")
    make_follower(two, 1, 3, partition_epoch=2)
    assert two.partition.fetch_position().last_fetched_epoch == -1
    catch_up(one, [two], now_ms=0)
    assert batches(two) == batches(one)


def test_follower_hw_never_falls_when_new_leader_hw_lags(brokers: Brokers) -> None:
    """Kafka's follower takes the leader's HW even when lower; ours keeps its own (DESIGN §6.3)."""
    one, two, three = brokers()
    make_leader(one, 1)
    make_follower(two, 1, 1)
    make_follower(three, 1, 1)
    append(one, b"a", b"b")
    catch_up(one, [two, three], now_ms=0)
    assert three.log.high_watermark == 2
    # Broker 2 leads epoch 2; its HW is 2 too, but suppose it learned less: force a lagging answer.
    make_leader(two, 2, partition_epoch=1)
    make_follower(three, 2, 2, partition_epoch=1)
    position = three.partition.fetch_position()
    response = FetchResponseFromLeader(2, 2, position.fetch_offset, position.last_fetched_epoch,
                                       ErrorCode.NONE, b"", high_watermark=1, log_start_offset=0,
                                       log_end_offset=2)
    ready = three.handle(response, now_ms=0)
    assert ready.high_watermark is None
    assert three.log.high_watermark == 2


def test_stale_or_duplicate_answers_are_ignored(brokers: Brokers) -> None:
    one, two, _ = brokers()
    make_leader(one, 1)
    make_follower(two, 1, 1)
    append(one, b"a")
    position = two.partition.fetch_position()
    leader_ready, _ = fetch_round(one, two, now_ms=0)
    duplicate = FetchResponseFromLeader.from_result(position, leader_ready.completions[0])
    ready = two.handle(duplicate, now_ms=0)
    assert ready.log_changes == ()
    assert two.log.log_end_offset == 1
    other_epoch = FetchResponseFromLeader(1, 0, 1, 1, ErrorCode.NONE, b"", 1, 0, 1)
    assert two.handle(other_epoch, now_ms=0).log_changes == ()


def test_fenced_follower_stops_fetching_until_new_metadata(brokers: Brokers) -> None:
    one, two, _ = brokers()
    make_leader(one, 3)
    make_follower(two, 1, 2)  # broker 2 still thinks epoch 2
    leader_ready, ready = fetch_round(one, two, now_ms=0)
    assert leader_ready.completions[0].error == ErrorCode.FENCED_LEADER_EPOCH
    assert ready.fetch is None
    ready = make_follower(two, 1, 3, partition_epoch=1)
    assert ready.fetch is not None and ready.fetch.leader_epoch == 3


def test_follower_log_start_offset_follows_leader_and_deletes_segments(brokers: Brokers) -> None:
    one, two, _ = brokers(**{"segment.bytes": "200", "retention.ms": "1000"})
    make_leader(one, 1, isr=(1, 2))
    make_follower(two, 1, 1, isr=(1, 2))
    for index in range(8):
        append(one, b"record-%d" % index, timestamp_ms=1_000 + index)
    catch_up(one, [two], now_ms=0)
    segments_before = len(two.log.segments)
    assert segments_before > 2
    ready = one.handle(RunRetention(), now_ms=1_000 + 5 + 1_001)
    assert any(isinstance(change, SegmentsDeleted) for change in ready.log_changes)
    leader_start = one.log.log_start_offset
    assert leader_start > 0
    _, ready = fetch_round(one, two, now_ms=2_006)
    assert two.log.log_start_offset == leader_start
    raised = [change for change in ready.log_changes if isinstance(change, LogStartOffsetRaised)]
    assert [(change.old, change.new) for change in raised] == [(0, leader_start)]
    assert two.log.segments.first_segment.base_offset == one.log.segments.first_segment.base_offset
    assert [base for base, _, _ in batches(two)] == [base for base, _, _ in batches(one)]


def test_retention_runs_only_on_the_leader(brokers: Brokers) -> None:
    one, two, _ = brokers(**{"segment.bytes": "200", "retention.ms": "1000"})
    make_leader(one, 1, isr=(1, 2))
    make_follower(two, 1, 1, isr=(1, 2))
    for index in range(8):
        append(one, b"record-%d" % index, timestamp_ms=1_000 + index)
    catch_up(one, [two], now_ms=0)
    ready = two.handle(RunRetention(), now_ms=10_000)
    assert ready.log_changes == ()
    assert two.log.log_start_offset == 0


def test_follower_behind_leader_log_start_starts_over_there(brokers: Brokers) -> None:
    one, two, _ = brokers(**{"segment.bytes": "200", "retention.ms": "1000"})
    make_leader(one, 1, isr=(1,))
    for index in range(8):
        append(one, b"record-%d" % index, timestamp_ms=1_000 + index)
    one.handle(RunRetention(), now_ms=2_010)
    start = one.log.log_start_offset
    assert start > 0
    make_follower(two, 1, 1, isr=(1,))
    leader_ready, ready = fetch_round(one, two, now_ms=2_010)
    assert leader_ready.completions[0].error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert ready.log_changes == (TruncatedFully(start),)
    catch_up(one, [two], now_ms=2_011)
    assert batches(two) == batches(one)
    assert two.log.log_start_offset == start


def idempotent(value: bytes, sequence: int) -> bytes:
    return build_batch([(None, value)], base_timestamp=1_000, producer_id=9, producer_epoch=0,
                       base_sequence=sequence)


def test_follower_behind_leader_log_start_takes_the_leaders_producers_there(brokers: Brokers) -> None:
    """Replication sim seed 659147698's shape: retention removed an idempotent producer's batch on
    the leader; a follower that starts over above it and becomes leader must still answer that
    batch's retry as a retry, not write it a second time (Kafka's follower starts with no producers)."""
    one, two, _ = brokers(**{"segment.bytes": "200", "retention.ms": "1000"})
    make_leader(one, 1, isr=(1,))
    for sequence in range(8):
        one.handle(ProduceRequest(one.request_id(), idempotent(b"record-%d" % sequence, sequence), 1, 1000), 0)
    one.handle(RunRetention(), now_ms=2_010)
    start = one.log.log_start_offset
    assert start == 8, "retention removed every batch"
    make_follower(two, 1, 1, isr=(1,))
    leader_ready, ready = fetch_round(one, two, now_ms=2_010)
    assert only(leader_ready.completions, FetchResult).producer_snapshot
    assert ready.log_changes == (TruncatedFully(start),)
    catch_up(one, [two], now_ms=2_011)
    make_leader(two, 2, isr=(2,), partition_epoch=1, now_ms=2_012)
    retry = two.handle(ProduceRequest(two.request_id(), idempotent(b"record-6", 6), 1, 1000), now_ms=2_012)
    assert [(result.error, result.base_offset) for result in produce_results(retry)] == [(ErrorCode.NONE, 6)]
    assert two.log.log_end_offset == 8, "the retry is in the log already"
    fresh = two.handle(ProduceRequest(two.request_id(), idempotent(b"record-8", 8), 1, 1000), now_ms=2_012)
    assert [(result.error, result.base_offset) for result in produce_results(fresh)] == [(ErrorCode.NONE, 8)]


def test_follower_refuses_a_producer_state_that_does_not_parse(brokers: Brokers) -> None:
    """Nothing changes, and the fetch is tried again after the backoff."""
    _, two, _ = brokers()
    make_follower(two, 1, 1, isr=(1,))
    append_to = two.log.log_end_offset
    position = two.partition.fetch_position()
    for snapshot in (b"\x00\x01junk", ProducerStateManager(two.log.directory, "x").encode()[:-1] + b"\x07"):
        response = FetchResponseFromLeader(1, 1, position.fetch_offset, position.last_fetched_epoch,
                                           ErrorCode.OFFSET_OUT_OF_RANGE, b"", 5, 5, 9, producer_snapshot=snapshot)
        ready = two.handle(response, now_ms=0)
        assert ready.log_changes == () and ready.fetch_backoff
        assert (two.log.log_start_offset, two.log.log_end_offset) == (0, append_to)


def test_follower_starting_inside_the_leaders_first_batch_starts_at_that_batch(brokers: Brokers) -> None:
    """DeleteRecords put the leader's logStartOffset inside a batch; a follower that starts empty
    there is answered with the whole batch, and must take it (it failed every fetch before)."""
    one, two, _ = brokers()
    make_leader(one, 1, isr=(1,))
    append(one, b"a", b"b", b"c")
    assert one.log.maybe_increment_log_start_offset(1, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION) == 0
    make_follower(two, 1, 1, isr=(1,))
    other_history = open_log_state(two, producer_batch_at=0)  # after an unclean election, say
    two.log.truncate_fully_and_start_at(1, 0, other_history)
    _, ready = fetch_round(one, two, now_ms=0)
    assert ready.log_changes[0] == TruncatedFully(0)
    assert (two.log.log_start_offset, two.log.log_end_offset) == (1, 3), "the log start follows the leader's again"
    assert batches(two) == batches(one)
    assert 9 not in two.log.producer_state.producers, "its batch at 0 is cut, as a truncation cuts it"


def open_log_state(broker: Broker, producer_batch_at: int) -> bytes:
    """A producers' state holding producer 9's one-record batch at `producer_batch_at`."""
    state = ProducerStateManager(broker.log.directory, "other")
    state.producers[9] = ProducerStateEntry(9, 0)
    state.producers[9].batches.append(BatchMetadata(0, producer_batch_at, 0, 1_000))
    return state.encode()


def test_follower_ahead_of_leader_end_truncates_to_it(brokers: Brokers) -> None:
    """Kafka's fetchOffsetAndTruncate: OFFSET_OUT_OF_RANGE with the leader's LEO below ours (only an
    unclean election allows it) cuts the log there."""
    one, two, _ = brokers()
    make_leader(one, 1, isr=(1, 2))
    make_follower(two, 1, 1, isr=(1, 2))
    append(one, b"a")
    append(one, b"b")
    catch_up(one, [two], now_ms=0)
    position = two.partition.fetch_position()
    response = FetchResponseFromLeader(1, 1, position.fetch_offset, position.last_fetched_epoch,
                                       ErrorCode.OFFSET_OUT_OF_RANGE, b"", 1, 0, 1)
    ready = two.handle(response, now_ms=0)
    assert ready.log_changes == (Truncated(1, 2),)


def test_retriable_fetch_errors_change_nothing(brokers: Brokers) -> None:
    _, two, _ = brokers()
    make_follower(two, 1, 1)
    position = two.partition.fetch_position()
    for error in (ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER):
        response = FetchResponseFromLeader(1, 1, position.fetch_offset, position.last_fetched_epoch, error)
        ready = two.handle(response, now_ms=0)
        assert (ready.log_changes, ready.fetch) == ((), position)
