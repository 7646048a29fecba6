"""RecordAccumulator: when batches become ready (linger.ms, batch.size, flush, retry backoff),
what `drain` takes per leader, muting, and expiry by delivery.timeout.ms.

Method: the accumulator is pure; every test passes `now_ms` by hand (an injected clock) and a
leader lookup table, and never runs an event loop.
"""

from __future__ import annotations

import asyncio

from client.accumulator import RecordAccumulator
from wire.topic_partition import TopicPartition

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)
LEADERS = {A0: 1, A1: 2, B0: 1}
LOOP = asyncio.new_event_loop()


def teardown_module() -> None:
    LOOP.close()


def leader_for(tp: TopicPartition) -> int | None:
    return LEADERS.get(tp)


def append(accumulator: RecordAccumulator, tp: TopicPartition, now_ms: int, size: int = 10) -> bool:
    return accumulator.append(tp, None, b"x" * size, now_ms, None, LOOP.create_future(), now_ms)


def test_a_batch_is_ready_only_after_linger_ms() -> None:
    accumulator = RecordAccumulator(batch_size=16384, linger_ms=5)
    append(accumulator, A0, now_ms=1000)
    assert accumulator.ready(1004, leader_for) == (set(), 1, False)
    nodes, _, _ = accumulator.ready(1005, leader_for)
    assert nodes == {1}


def test_a_full_batch_is_ready_before_linger_ms() -> None:
    accumulator = RecordAccumulator(batch_size=500, linger_ms=10_000)
    opened = [append(accumulator, A0, now_ms=0, size=100) for _ in range(6)]
    assert opened[0]
    assert True in opened[1:]  # the batch filled and a second one opened
    assert accumulator.ready(0, leader_for)[0] == {1}
    drained = accumulator.drain({1}, 0, leader_for)
    assert [batch.tp for batch in drained[1]] == [A0, A0]


def test_linger_zero_sends_at_once() -> None:
    accumulator = RecordAccumulator(batch_size=16384, linger_ms=0)
    append(accumulator, A0, now_ms=7)
    assert accumulator.ready(7, leader_for)[0] == {1}


def test_flush_makes_every_batch_ready() -> None:
    accumulator = RecordAccumulator(batch_size=16384, linger_ms=60_000)
    append(accumulator, A0, now_ms=0)
    accumulator.flushing += 1
    assert accumulator.ready(0, leader_for)[0] == {1}


def test_drain_groups_partitions_by_leader_and_mutes_them() -> None:
    accumulator = RecordAccumulator(batch_size=16384, linger_ms=0)
    for tp in (A0, A1, B0):
        append(accumulator, tp, now_ms=0)
    drained = accumulator.drain({1, 2}, 0, leader_for)
    assert {node: sorted(str(batch.tp) for batch in batches) for node, batches in drained.items()} == {
        1: ["a-0", "b-0"], 2: ["a-1"]
    }
    append(accumulator, A0, now_ms=1)
    assert accumulator.ready(1, leader_for)[0] == set()  # a-0 is in flight: muted
    accumulator.unmute(A0)
    assert accumulator.ready(1, leader_for)[0] == {1}


def test_drain_respects_max_request_size_but_takes_one_batch_at_least() -> None:
    accumulator = RecordAccumulator(batch_size=200, linger_ms=0, max_request_size=300)
    for _ in range(6):
        append(accumulator, A0, now_ms=0, size=100)
    first = accumulator.drain({1}, 0, leader_for)[1]
    assert len(first) == 1
    assert accumulator.has_unsent()


def test_a_partition_left_out_of_a_full_request_is_not_muted() -> None:
    """A0 and B0 share leader 1; A0's batches fill the request, so B0 waits for the next one
    (muting it too would leave it muted forever: no answer would unmute it)."""
    accumulator = RecordAccumulator(batch_size=200, linger_ms=0, max_request_size=300)
    for _ in range(3):
        append(accumulator, A0, now_ms=0, size=100)
    append(accumulator, B0, now_ms=0, size=100)
    (batch,) = accumulator.drain({1}, 0, leader_for)[1]
    assert batch.tp == A0
    assert accumulator.muted == {A0}
    assert accumulator.ready(0, leader_for)[0] == {1}
    assert [b.tp for b in accumulator.drain({1}, 0, leader_for)[1]] == [B0]


def test_a_partition_without_leader_is_reported() -> None:
    accumulator = RecordAccumulator(batch_size=16384, linger_ms=0)
    append(accumulator, TopicPartition("unknown", 0), now_ms=0)
    nodes, _, unknown_leader = accumulator.ready(0, leader_for)
    assert nodes == set()
    assert unknown_leader


def test_a_retried_batch_waits_out_its_backoff_and_keeps_its_place() -> None:
    accumulator = RecordAccumulator(batch_size=16384, linger_ms=0)
    append(accumulator, A0, now_ms=0)
    (batch,) = accumulator.drain({1}, 0, leader_for)[1]
    batch.attempts = 1
    append(accumulator, A0, now_ms=1)
    accumulator.reenqueue(batch, retry_at_ms=100)
    accumulator.unmute(A0)
    assert accumulator.ready(50, leader_for)[0] == set()
    assert accumulator.ready(50, leader_for)[1] == 50
    drained = accumulator.drain({1}, 100, leader_for)[1]
    assert drained[0] is batch
    assert len(drained) == 2


def test_batches_older_than_the_delivery_timeout_expire_unless_in_flight() -> None:
    accumulator = RecordAccumulator(batch_size=16384, linger_ms=0)
    append(accumulator, A0, now_ms=0)
    append(accumulator, A1, now_ms=0)
    accumulator.drain({2}, 0, leader_for)  # a-1 in flight
    append(accumulator, A1, now_ms=10)
    expired = accumulator.expired(now_ms=1000, delivery_timeout_ms=1000)
    assert [batch.tp for batch in expired] == [A0]


def test_buffered_bytes_count_appends_and_releases() -> None:
    accumulator = RecordAccumulator(batch_size=16384, linger_ms=0)
    append(accumulator, A0, now_ms=0)
    append(accumulator, A0, now_ms=0)
    assert accumulator.buffered_bytes > 0
    for batch in accumulator.drain({1}, 0, leader_for)[1]:
        accumulator.release(batch)
    assert accumulator.buffered_bytes == 0


def test_append_many_spreads_over_batches() -> None:
    accumulator = RecordAccumulator(batch_size=1000, linger_ms=0)
    futures, opened = accumulator.append_many(A0, [b"v" * 100] * 30, None, 0, LOOP.create_future, 0)
    assert opened == len(futures)
    assert opened > 1
    assert sum(batch.record_count for batch in accumulator.batches[A0]) == 30
