"""The broker core (`ReplicaManager`): metadata to roles, requests over partitions, the one delayed
fetch, the replica fetch sessions and their backoff, KIP-392, shutdown.

Method: `CoreCluster` joins three cores and an instantly committing controller in memory; each test
drives requests, `pump`s the queued sends and moves time by hand, then reads the answers and the
cores' state. No event loop, no sockets, no clock."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.metadata import PartitionRegistration
from replication.broker_events import (
    ClientRequest,
    FetchWait,
    MetadataChanged,
    ReplicaFetchAnswer,
    Shutdown,
)
from replication.broker_ready import ClientAnswer, ReplicaLogEnd
from replication.delayed_fetch import FetchPurgatory
from replication.events import ConsumerFetch, DeleteRecords, FollowerFetch, ListOffsets, ProduceRequest, Tick
from replication.ready import FetchResult, ProduceResult, Role
from storage import log_segment
from storage.records import build_batch_from_values, iter_headers
from tests.replication.core_cluster import CoreCluster
from wire.broker_lifecycle import BrokerHeartbeatRequest, BrokerRegistrationRequest
from wire.error_codes import ErrorCode
from wire.sentinels import NO_LEADER
from wire.topic_partition import TopicPartition

TOPIC = "orders"
P0, P1, P2 = (TopicPartition(TOPIC, index) for index in range(3))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[CoreCluster]:
    cluster = CoreCluster(tmp_path)
    yield cluster
    cluster.close()


def batch(*values: bytes) -> bytes:
    return build_batch_from_values(list(values), timestamp_ms=1_000_000)


_ids = iter(range(1, 1 << 30))


def produce(cluster: CoreCluster, broker_id: int, records: bytes, acks: int = -1,
            topic_partition: TopicPartition = P0) -> int:
    request_id = next(_ids)
    cluster.request(broker_id, ClientRequest(request_id, ((topic_partition, ProduceRequest(0, records, acks, 5_000)),)))
    return request_id


def consume(cluster: CoreCluster, broker_id: int, offsets: dict[TopicPartition, int], min_bytes: int = 0,
            max_wait_ms: int = 0, rack_id: str = "") -> tuple[int, ClientAnswer | None]:
    request_id = next(_ids)
    parts = tuple((tp, ConsumerFetch(0, offset, 1 << 20)) for tp, offset in offsets.items())
    answer = cluster.request(broker_id, ClientRequest(request_id, parts, FetchWait(-1, max_wait_ms, min_bytes,
                                                                                   1 << 20, rack_id)))
    return request_id, answer


def only_result(answer: ClientAnswer | None) -> FetchResult | ProduceResult:
    assert answer is not None and len(answer.parts) == 1, answer
    result = answer.parts[0].result
    assert isinstance(result, FetchResult | ProduceResult), result
    return result


def offsets_of(records: bytes) -> list[int]:
    return [header.base_offset for _, header in iter_headers(records)]


def test_metadata_makes_the_assigned_roles_and_only_after_the_registration(tmp_path: Path) -> None:
    cluster = CoreCluster(tmp_path / "a")
    try:
        cluster.create_topic(TOPIC, {0: (1, 2, 3), 1: (2, 3, 1)})
        assert cluster.partition(1, P0).role == Role.LEADER
        assert cluster.partition(2, P0).role == Role.FOLLOWER
        assert cluster.partition(2, P1).role == Role.LEADER
        assert all(ready.caught_up for ready in cluster.brokers[1].readies)
        late = cluster.brokers[3]
        ready = late.core.handle(MetadataChanged(cluster.metadata, cluster.metadata.metadata_offset + 1), 1, 1)
        assert ready.steps == (), "metadata older than the registration it names is not applied"
    finally:
        cluster.close()


def test_acks_all_produce_is_answered_when_the_followers_have_fetched(cluster: CoreCluster) -> None:
    cluster.create_topic(TOPIC, {0: (1, 2, 3)})
    request_id = produce(cluster, 1, batch(b"a", b"b"))
    assert request_id not in cluster.brokers[1].answers, "acks=all waits for the ISR"
    cluster.pump()
    result = only_result(cluster.brokers[1].answers[request_id])
    assert (result.error, result.base_offset) == (ErrorCode.NONE, 0)
    assert [cluster.partition(b, P0).log.high_watermark for b in (1, 2, 3)] >= [2, 0, 0]


def test_unknown_partition_and_unhosted_partition_say_where_to_go(tmp_path: Path) -> None:
    cluster = CoreCluster(tmp_path)
    try:
        cluster.create_topic(TOPIC, {0: (1, 2)})
        answer = cluster.request(3, ClientRequest(next(_ids), ((P0, ProduceRequest(0, batch(b"a"), 1, 100)),)))
        assert answer is not None
        part = answer.parts[0]
        assert part.result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert part.current_leader is not None and part.current_leader.leader_id == 1
        answer = cluster.request(1, ClientRequest(next(_ids), ((P2, ListOffsets(0, -1)),)))
        assert answer is not None and answer.parts[0].result.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        cluster.close()


def test_a_request_over_partitions_is_answered_once_all_parts_are_in_request_order(cluster: CoreCluster) -> None:
    cluster.create_topic(TOPIC, {0: (1, 2, 3), 1: (1, 3, 2)})
    request_id = next(_ids)
    parts = ((P1, ProduceRequest(0, batch(b"x"), -1, 5_000)), (TopicPartition("nope", 0), ProduceRequest(
        0, batch(b"y"), -1, 5_000)), (P0, ProduceRequest(0, batch(b"z"), 1, 5_000)))
    assert cluster.request(1, ClientRequest(request_id, parts)) is None
    cluster.pump()
    answer = cluster.brokers[1].answers[request_id]
    assert [(part.topic_partition, part.result.error) for part in answer.parts] == [
        (P1, ErrorCode.NONE), (TopicPartition("nope", 0), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (P0, ErrorCode.NONE)]


def test_consumer_long_poll_is_answered_by_the_produce_that_gives_it_data(cluster: CoreCluster) -> None:
    cluster.create_topic(TOPIC, {0: (1, 2, 3)})
    request_id, answer = consume(cluster, 1, {P0: 0}, min_bytes=1, max_wait_ms=10_000)
    assert answer is None, "nothing to read yet: parked"
    produce(cluster, 1, batch(b"a"))
    cluster.pump()
    result = only_result(cluster.brokers[1].answers[request_id])
    assert isinstance(result, FetchResult) and offsets_of(result.records) == [0]


def test_consumer_long_poll_is_answered_empty_at_its_deadline(cluster: CoreCluster) -> None:
    cluster.create_topic(TOPIC, {0: (1, 2, 3)})
    request_id, answer = consume(cluster, 2, {P0: 0}, min_bytes=1, max_wait_ms=300)
    assert answer is None
    ready = cluster.brokers[2].readies[-1]
    assert ready.next_tick_ms is not None and ready.next_tick_ms <= cluster.now_ms + 300
    cluster.advance(299)
    assert request_id not in cluster.brokers[2].answers
    cluster.advance(1)
    result = only_result(cluster.brokers[2].answers[request_id])
    assert (result.error, result.records) == (ErrorCode.NONE, b"")


def follower_fetch(cluster: CoreCluster, follower_id: int, fetch_offset: int, log_start_offset: int = 0,
                   last_fetched_epoch: int = 0) -> tuple[int, ClientAnswer | None]:
    request_id = next(_ids)
    part = FollowerFetch(0, follower_id, fetch_offset=fetch_offset, last_fetched_epoch=last_fetched_epoch,
                         log_start_offset=log_start_offset, current_leader_epoch=0, max_bytes=1 << 20,
                         broker_epoch=cluster.brokers[follower_id].broker_epoch)
    answer = cluster.request(1, ClientRequest(request_id, ((P0, part),), FetchWait(follower_id, 10_000, 1, 1 << 20)))
    return request_id, answer


def test_follower_fetch_that_only_moves_the_hw_waits_for_records_or_its_deadline(cluster: CoreCluster) -> None:
    cluster.create_topic(TOPIC, {0: (1, 2)})
    produce(cluster, 1, batch(b"a"), acks=1)
    request_id, answer = follower_fetch(cluster, 2, fetch_offset=1)
    assert answer is None, "the HW moved to 1 on this fetch, but nothing is to send: parked (Kafka's DelayedFetch)"
    assert cluster.partition(1, P0).log.high_watermark == 1
    produce(cluster, 1, batch(b"b"), acks=1)
    result = only_result(cluster.brokers[1].answers[request_id])
    assert isinstance(result, FetchResult) and (result.high_watermark, offsets_of(result.records)) == (1, [1])


def test_acks_all_produce_costs_one_fetch_answer_per_follower(cluster: CoreCluster) -> None:
    cluster.create_topic(TOPIC, {0: (1, 2, 3)})
    cluster.pump()
    before = cluster.replica_fetch_answers
    request_id = produce(cluster, 1, batch(b"a"))
    cluster.pump()
    assert only_result(cluster.brokers[1].answers[request_id]).error == ErrorCode.NONE
    assert cluster.replica_fetch_answers - before == 2, "the records to each follower; the HW rides on the next"
    assert [cluster.partition(b, P0).log.high_watermark for b in (1, 2, 3)] == [1, 0, 0]
    cluster.advance(cluster.brokers[1].core.config.replica_fetch_wait_max_ms)
    cluster.pump()
    assert [cluster.partition(b, P0).log.high_watermark for b in (1, 2, 3)] == [1, 1, 1], "learnt at the deadline"


def test_acks_all_produce_costs_the_leader_one_core_step_per_follower_fetch(cluster: CoreCluster) -> None:
    """Goal: an acks=all send costs the leader as few partition-core steps as Kafka's reads (issue 15:
    each step is ~60-100 us of Python). Method: with both followers' session fetches parked, one
    produce and its replication cost the produce, each parked fetch answered with the record and
    each follower's next fetch: 5 steps, none re-reading a parked follower fetch for the HW move.
    (The first produce after a quiet spell also reads the partition for the sessions that did not,
    replica_sessions.py.)"""
    cluster.create_topic(TOPIC, {0: (1, 2, 3)})
    _idle_rounds(cluster, 2)
    produce(cluster, 1, batch(b"a"))
    cluster.pump()
    for _ in range(2):
        first = len(cluster.brokers[1].readies)
        request_id = produce(cluster, 1, batch(b"a"))
        cluster.pump()
        assert only_result(cluster.brokers[1].answers[request_id]).error == ErrorCode.NONE
        steps = [step for ready in cluster.brokers[1].readies[first:] for step in ready.steps]
        assert [type(step.event) for step in steps] == [ProduceRequest] + [FollowerFetch] * 4
        log_end_offset = cluster.partition(1, P0).log.log_end_offset
        offsets = sorted(step.event.fetch_offset for step in steps[1:])  # type: ignore[union-attr]
        assert offsets == [log_end_offset - 1] * 2 + [log_end_offset] * 2


def test_a_hw_move_answers_a_parked_consumer_fetch_and_leaves_a_parked_follower_fetch(cluster: CoreCluster) -> None:
    """Goal: a parked follower fetch is not re-read for a HW move (it could only park again) and its
    fetch counts as made when it came (Kafka's DelayedFetch does not update the follower's fetch
    state either), while a consumer's is answered by it. Method: follower 2 fetches at the LEO
    (parked) and a consumer waits on the HW; 100 ms later follower 3's fetch moves the HW: the
    consumer is answered, follower 2's fetch is neither read nor answered, and the leader still
    has follower 2's fetch time as 0."""
    cluster.create_topic(TOPIC, {0: (1, 2, 3)})
    produce(cluster, 1, batch(b"a"), acks=1)
    follower_request, answer = follower_fetch(cluster, 2, fetch_offset=1)
    assert answer is None
    consumer_request, answer = consume(cluster, 1, {P0: 0}, min_bytes=1, max_wait_ms=10_000)
    assert answer is None, "nothing below the HW yet"
    cluster.now_ms += 100
    _, answer = follower_fetch(cluster, 3, fetch_offset=1)
    assert answer is None
    ready = cluster.brokers[1].readies[-1]
    assert [type(step.event) for step in ready.steps] == [FollowerFetch, ConsumerFetch]
    assert cluster.partition(1, P0).log.high_watermark == 1
    result = only_result(cluster.brokers[1].answers[consumer_request])
    assert isinstance(result, FetchResult) and offsets_of(result.records) == [0]
    assert follower_request not in cluster.brokers[1].answers
    leader = cluster.partition(1, P0).state
    assert (leader.remote[2].last_fetch_time_ms, leader.remote[3].last_fetch_time_ms) == (0, 100)
    produce(cluster, 1, batch(b"b"), acks=1)
    result = only_result(cluster.brokers[1].answers[follower_request])
    assert isinstance(result, FetchResult) and (result.high_watermark, offsets_of(result.records)) == (1, [1])


def test_follower_fetch_with_a_diverging_epoch_is_answered_at_once(cluster: CoreCluster) -> None:
    cluster.create_topic(TOPIC, {0: (1, 2)})
    produce(cluster, 1, batch(b"a"), acks=1)
    _, answer = follower_fetch(cluster, 2, fetch_offset=3, last_fetched_epoch=0)
    result = only_result(answer)
    assert isinstance(result, FetchResult) and result.diverging_epoch is not None, "the follower must truncate to 1"
    assert (result.diverging_epoch.epoch, result.diverging_epoch.end_offset) == (0, 1)


def test_delete_records_is_answered_without_waiting_for_a_follower_fetch_deadline(cluster: CoreCluster) -> None:
    cluster.create_topic(TOPIC, {0: (1, 2, 3)})
    produce(cluster, 1, batch(b"a", b"b"))
    cluster.pump()
    cluster.advance(cluster.brokers[1].core.config.replica_fetch_wait_max_ms)
    cluster.pump()
    request_id = next(_ids)
    cluster.request(1, ClientRequest(request_id, ((P0, DeleteRecords(0, 1, 5_000)),)))
    cluster.pump()
    answer = cluster.brokers[1].answers.get(request_id)
    assert answer is not None, "the parked follower fetches are answered with the new logStartOffset at once"
    assert answer.parts[0].result.error == ErrorCode.NONE
    assert [cluster.partition(b, P0).log.log_start_offset for b in (1, 2, 3)] == [1, 1, 1]


def test_one_fetch_session_per_leader_carries_all_its_partitions(cluster: CoreCluster) -> None:
    cluster.create_topic(TOPIC, {0: (1, 2, 3), 1: (1, 3, 2), 2: (3, 2, 1)})
    cluster.pump()
    core = cluster.brokers[2].core
    assert sorted(core.fetchers.sessions) == [1, 3]
    assert sorted(core.fetchers.sessions[1].backoff_until_ms) == [P0, P1]
    sends = [send for ready in cluster.brokers[2].readies for send in ready.fetches if send.leader_id == 1]
    assert any(sorted(tp for tp, _ in send.positions) == [P0, P1] for send in sends)


def test_unanswered_fetch_times_out_backs_off_and_a_late_answer_is_dropped(cluster: CoreCluster) -> None:
    cluster.create_topic(TOPIC, {0: (1, 2)})
    cluster.cut.add(1)
    cluster.pump()
    session = cluster.brokers[2].core.fetchers.sessions[1]
    in_flight = session.in_flight
    assert in_flight is not None
    timeout_ms = cluster.brokers[2].core.config.replica_fetch_timeout_ms
    cluster.advance(timeout_ms)
    assert session.in_flight is None
    assert session.backoff_until_ms[P0] == cluster.now_ms + 50
    ready = cluster.step(2, ReplicaFetchAnswer(in_flight.request_id, ((P0, FetchResult(-1, ErrorCode.NONE, batch(
        b"late"), 1, 0, 1)),)))
    assert ready.steps == (), "a late answer reaches no core"
    cluster.cut.clear()
    cluster.advance(49)
    assert cluster.brokers[2].readies[-1].fetches == (), "still backing off"
    cluster.advance(1)
    assert [send.leader_id for send in cluster.brokers[2].readies[-1].fetches] == [1], "fetches again after it"


def test_error_answer_backs_off_that_partition_only(cluster: CoreCluster) -> None:
    cluster.create_topic(TOPIC, {0: (1, 2), 1: (1, 2)})
    cluster.pump()
    session = cluster.brokers[2].core.fetchers.sessions[1]
    in_flight = session.in_flight
    assert in_flight is not None
    cluster.queue.clear()
    results = ((P0, FetchResult(-1, ErrorCode.UNKNOWN_SERVER_ERROR)), (P1, FetchResult(-1, ErrorCode.NONE, b"", 0, 0,
                                                                                       0)))
    cluster.step(2, ReplicaFetchAnswer(in_flight.request_id, results))
    assert session.backoff_until_ms == {P0: cluster.now_ms + 50, P1: 0}
    assert session.in_flight is not None and list(session.in_flight.positions) == [P1]


def test_follower_that_cannot_append_backs_off_then_catches_up(cluster: CoreCluster,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk on the follower: the answer's records cannot be appended; the partition waits out
    the backoff instead of refetching at once (the core says so in its Ready, not in its internals)."""
    cluster.create_topic(TOPIC, {0: (1, 2)})
    produce(cluster, 1, batch(b"a"), acks=1)
    real_pwritev = os.pwritev
    full = {"on": True}

    def pwritev(fd: int, buffers: object, offset: int) -> int:
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwritev(fd, buffers, offset)  # type: ignore[arg-type]

    monkeypatch.setattr(log_segment.os, "pwritev", pwritev)
    cluster.pump()
    session = cluster.brokers[2].core.fetchers.sessions[1]
    assert session.backoff_until_ms[P0] > cluster.now_ms
    assert cluster.partition(2, P0).log.log_end_offset == 0
    full["on"] = False
    cluster.advance(50)
    cluster.pump()
    assert cluster.partition(2, P0).log.log_end_offset == 1


def test_consumer_in_another_rack_is_sent_to_a_replica_there(tmp_path: Path) -> None:
    cluster = CoreCluster(tmp_path, racks={1: "a", 2: "b", 3: "c"})
    try:
        cluster.create_topic(TOPIC, {0: (1, 2, 3)})
        produce(cluster, 1, batch(b"a"))
        cluster.pump()
        _, answer = consume(cluster, 1, {P0: 0}, rack_id="b")
        assert answer is not None and answer.parts[0].preferred_read_replica == 2
        assert only_result(answer).records == b""
        _, answer = consume(cluster, 1, {P0: 0}, rack_id="a")
        assert answer is not None and answer.parts[0].preferred_read_replica == -1
    finally:
        cluster.close()


def test_shutdown_answers_parked_fetches_and_produces(cluster: CoreCluster) -> None:
    cluster.create_topic(TOPIC, {0: (1, 2, 3)})
    fetch_id, _ = consume(cluster, 1, {P0: 0}, min_bytes=1, max_wait_ms=10_000)
    cluster.cut.update({2, 3})
    produce_id = produce(cluster, 1, batch(b"a"))
    cluster.pump()
    ready = cluster.step(1, Shutdown())
    answers = {answer.request_id: answer for answer in ready.answers}
    assert only_result(answers[produce_id]).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch_id in answers or fetch_id in cluster.brokers[1].answers
    assert ready.next_tick_ms is None


def test_a_long_poll_past_max_delayed_fetches_is_answered_at_once(cluster: CoreCluster) -> None:
    """Parked fetches are bounded (max.delayed.fetches): past the bound a long poll is answered at
    once with what is there, instead of holding memory for as long as it asks."""
    cluster.create_topic(TOPIC, {0: (1, 2, 3)})
    cluster.brokers[1].core.purgatory = FetchPurgatory(1)
    first, answer = consume(cluster, 1, {P0: 0}, min_bytes=1, max_wait_ms=10_000)
    assert answer is None, "parked until a record or the wait ends"
    _, answer = consume(cluster, 1, {P0: 0}, min_bytes=1, max_wait_ms=10_000)
    assert answer is not None and only_result(answer).error == ErrorCode.NONE and only_result(answer).records == b""
    assert first not in cluster.brokers[1].answers


@pytest.mark.parametrize("forged_epoch", [-1, 1 << 40], ids=["no broker epoch", "another broker epoch"])
def test_a_fetch_as_a_replica_without_its_registered_broker_epoch_is_refused(cluster: CoreCluster,
                                                                             forged_epoch: int) -> None:
    """KIP-380: anyone can send a replica fetch naming replica 2 and 3. Counted, the forged fetches
    moved their LEOs and the HW, so an acks=all write with min.insync.replicas=3 was acknowledged
    with one real copy. Only the replica's registered broker epoch is accepted."""
    cluster.create_topic(TOPIC, {0: (1, 2, 3)}, **{"min.insync.replicas": "3"})
    cluster.cut.update({2, 3})
    produce_id = produce(cluster, 1, batch(b"a"))
    for replica in (2, 3):
        part = FollowerFetch(0, replica, fetch_offset=1, last_fetched_epoch=0, log_start_offset=0,
                             current_leader_epoch=0, max_bytes=1 << 20, broker_epoch=forged_epoch)
        answer = cluster.request(1, ClientRequest(next(_ids), ((P0, part),), FetchWait(replica, 0, 0, 1 << 20)))
        assert only_result(answer).error == ErrorCode.STALE_BROKER_EPOCH
    assert cluster.partition(1, P0).log.high_watermark == 0
    assert produce_id not in cluster.brokers[1].answers


def test_a_follower_registering_again_resets_its_fetch_state_on_the_leader_first(cluster: CoreCluster) -> None:
    """KIP-903: the metadata that says broker 2 registered again (a new process, a new broker epoch)
    reaches the leader's core as UpdateBrokerEpochs before the partition state of the same metadata,
    so the leader forgets what broker 2's old process reported and refuses its fetches."""
    cluster.create_topic(TOPIC, {0: (1, 2, 3)})
    produce(cluster, 1, batch(b"a"), acks=1)
    cluster.pump()
    leader = cluster.brokers[1].core.hosted[P0].partition.state
    old_epoch = cluster.brokers[2].broker_epoch
    assert leader.remote[2].broker_epoch == old_epoch and leader.remote[2].log_end_offset == 1
    response = cluster.controller.handle(BrokerRegistrationRequest(
        2, "incarnation-2", {"PLAINTEXT": "broker-2:9092"}, None), cluster.now_ms).response
    assert response.error_code == ErrorCode.NONE and response.broker_epoch > old_epoch
    ready = cluster.step(1, MetadataChanged(cluster.metadata, cluster.brokers[1].broker_epoch))
    events = [type(step.event).__name__ for step in ready.steps if step.topic_partition == P0]
    assert events[0] == "UpdateBrokerEpochs", events
    assert leader.remote[2].log_end_offset == -1 and leader.remote[2].broker_epoch == -1
    part = FollowerFetch(0, 2, fetch_offset=1, last_fetched_epoch=0, log_start_offset=0, current_leader_epoch=0,
                         max_bytes=1 << 20, broker_epoch=old_epoch)
    answer = cluster.request(1, ClientRequest(next(_ids), ((P0, part),), FetchWait(2, 0, 0, 1 << 20)))
    assert answer is not None and only_result(answer).error == ErrorCode.STALE_BROKER_EPOCH


def fence(cluster: CoreCluster, *broker_ids: int) -> None:
    for broker_id in broker_ids:
        response = cluster.controller.handle(BrokerHeartbeatRequest(
            broker_id, cluster.brokers[broker_id].broker_epoch, 1 << 40, want_fence=True), cluster.now_ms).response
        assert response.error_code == ErrorCode.NONE and response.is_fenced, response
    cluster.publish()


def leave_without_isr_or_elr(cluster: CoreCluster) -> tuple[str, PartitionRegistration]:
    """Fence brokers 2 and 3 and restart all three uncleanly (no clean-shutdown marker, so out of
    the ELR): the partition has no leader, ISR or ELR. Its topic id and state."""
    fence(cluster, 2, 3)
    for broker_id in (1, 2, 3):
        response = cluster.controller.handle(BrokerRegistrationRequest(
            broker_id, f"incarnation-{broker_id}-again", {"PLAINTEXT": f"broker-{broker_id}:9092"}, None),
            cluster.now_ms).response
        assert response.error_code == ErrorCode.NONE, response
        cluster.brokers[broker_id].broker_epoch = response.broker_epoch
    cluster.publish()
    topic_id = cluster.metadata.topic_id(TOPIC)
    assert topic_id is not None
    state = cluster.metadata.partition(topic_id, 0)
    assert state is not None and (state.leader, state.isr, state.elr) == (NO_LEADER, (), ())
    return topic_id, state


def test_offline_log_ends_leave_out_records_no_other_broker_was_sent(cluster: CoreCluster) -> None:
    """A deposed leader's records that it never served to a follower and never counted committed
    exist on that broker only: its report says its records may be committed only up to them, so the
    controller does not let them outrank a log that may hold committed records at those offsets
    (replication sim seed 532003445, in the regressions). Records it did serve may be committed."""
    cluster.create_topic(TOPIC, {0: (1, 2, 3)})
    produce(cluster, 1, batch(b"a", b"b"))
    cluster.pump()
    fence(cluster, 1)
    assert cluster.partition(2, P0).role == Role.LEADER
    produce(cluster, 2, batch(b"c"))
    cluster.pump()  # broker 3 fetches [2, 3) and its next fetch waits at the leader
    produce(cluster, 2, batch(b"d"))  # which answers it with [3, 4): served, not yet committed
    cluster.cut.add(2)
    cluster.pump()
    produce(cluster, 2, batch(b"e", b"f"))  # [4, 6) of epoch 1, on broker 2 only
    cluster.pump()
    log = cluster.partition(2, P0).log
    assert (log.high_watermark, log.log_end_offset) == (3, 6)
    topic_id, state = leave_without_isr_or_elr(cluster)
    assert cluster.brokers[2].core.offline_log_ends() == (
        ReplicaLogEnd(topic_id, 0, state.leader_epoch, 1, 6, 0, ((0, 0), (1, 2)), 4),
    )


def test_offline_log_ends_report_the_log_start_and_the_leader_epoch_cache(cluster: CoreCluster) -> None:
    """A partition left without a leader, ISR or ELR (every replica restarted uncleanly): each
    replica reports its log end with its log start offset and its leader-epoch cache, from which the
    controller tells whether one log surely holds another's (the recovery election)."""
    cluster.create_topic(TOPIC, {0: (1, 2, 3)})
    produce(cluster, 1, batch(b"a", b"b"))
    cluster.pump()
    fence(cluster, 1)
    cluster.cut.add(1)  # broker 1 stays behind, with epoch 0 only
    assert cluster.partition(2, P0).role == Role.LEADER
    produce(cluster, 2, batch(b"c"))
    cluster.pump()
    topic_id, state = leave_without_isr_or_elr(cluster)
    assert cluster.brokers[3].core.offline_log_ends() == (
        ReplicaLogEnd(topic_id, 0, state.leader_epoch, 1, 3, 0, ((0, 0), (1, 2)), 3),
    )
    assert cluster.brokers[1].core.offline_log_ends() == (
        ReplicaLogEnd(topic_id, 0, state.leader_epoch, 0, 2, 0, ((0, 0),), 2),
    )


def _idle_rounds(cluster: CoreCluster, rounds: int) -> None:
    """Let each parked follower fetch reach its deadline and be answered, `rounds` times."""
    cluster.pump()
    for _ in range(rounds):
        cluster.advance(cluster.brokers[1].core.config.replica_fetch_wait_max_ms)
        cluster.pump()


def test_an_idle_follower_fetch_lists_no_partition_and_is_answered_with_none(cluster: CoreCluster) -> None:
    """Goal: an idle broker of 2,000 partitions must not read, encode and apply every partition
    twice per replica.fetch.wait.max.ms (issue 15). Method: after the KIP-227 session's full fetch,
    the follower's fetch lists no partition, and the leader answers it at its deadline with no part
    and without stepping a partition core."""
    cluster.create_topic(TOPIC, {0: (1, 2), 1: (1, 2), 2: (1, 2)})
    _idle_rounds(cluster, 3)
    last = [send for ready in cluster.brokers[2].readies for send in ready.fetches][-1]
    assert (last.positions, last.forgotten) == ((), ())
    assert last.session_id != 0 and last.session_epoch > 0
    cluster.advance(cluster.brokers[1].core.config.replica_fetch_wait_max_ms)
    ready = cluster.brokers[1].readies[-1]
    assert [answer.parts for answer in ready.answers] == [()], "answered empty at its deadline"
    assert ready.steps == (), "no partition read"
    cluster.pump()
    produce(cluster, 1, batch(b"a"), topic_partition=P1)
    cluster.pump()
    assert [cluster.partition(2, tp).log.log_end_offset for tp in (P0, P1, P2)] == [0, 1, 0]
    follower_fetch = [send for ready in cluster.brokers[2].readies for send in ready.fetches][-1]
    assert [tp for tp, _ in follower_fetch.positions] == [P1], "only the partition that moved is listed"


def test_a_produce_after_a_quiet_spell_keeps_the_isr(cluster: CoreCluster) -> None:
    """Goal: followers whose session fetches did not read a quiet partition are still caught up
    when it is next appended to (Kafka records every fetch in every partition of a session), so the
    first append after a quiet spell longer than replica.lag.time.max.ms shrinks no ISR. Method:
    three quiet seconds (lag 1 s), then an acks=all produce: no proposal, acknowledged."""
    cluster.create_topic(TOPIC, {0: (1, 2, 3), 1: (1, 2, 3)})
    _idle_rounds(cluster, 6)
    request_id = produce(cluster, 1, batch(b"a"))
    assert cluster.brokers[1].readies[-1].alter_partitions == ()
    cluster.pump()
    answer = cluster.brokers[1].answers[request_id]
    assert answer.parts[0].result.error == ErrorCode.NONE
    assert cluster.partition(1, P0).isr == (1, 2, 3)


def test_a_leader_without_the_session_makes_the_follower_fetch_in_full_again(cluster: CoreCluster) -> None:
    """Goal: a follower whose session the leader lost (a restart of the leader, an eviction) opens a
    new one and goes on replicating. Method: drop the leader's sessions; the next incremental fetch
    is refused FETCH_SESSION_ID_NOT_FOUND, the one after is full, and an acks=all produce completes."""
    cluster.create_topic(TOPIC, {0: (1, 2), 1: (1, 2)})
    _idle_rounds(cluster, 2)
    cluster.brokers[1].core.replica_sessions.clear()
    _idle_rounds(cluster, 2)
    sends = [send for ready in cluster.brokers[2].readies[-20:] for send in ready.fetches]
    assert any(send.session_epoch == 0 and [tp for tp, _ in send.positions] == [P0, P1] for send in sends)
    request_id = produce(cluster, 1, batch(b"a"))
    cluster.pump()
    assert cluster.brokers[1].answers[request_id].parts[0].result.error == ErrorCode.NONE


def test_a_large_metadata_change_is_applied_a_bounded_number_of_partitions_per_call(tmp_path: Path) -> None:
    """Goal: a creation of many partitions does not hold the broker's owner for all of them at once.
    Method: 3 changes per call; create 10 partitions on broker 1 and count what each call applied:
    the rest waits for Ticks the core asks for at once, and it is caught up only after the last."""
    cluster = CoreCluster(tmp_path, broker_ids=(1,), metadata_log_creations_per_call=3)
    try:
        broker = cluster.brokers[1]
        cluster.create_topic(TOPIC, {index: (1,) for index in range(10)}, apply_fully=False)
        ready = broker.readies[-1]
        assert len(broker.core.hosted) == 3, sorted(broker.core.hosted)
        assert not ready.caught_up
        assert ready.next_tick_ms == cluster.now_ms, "the rest is asked for at once"
        hosted_counts = []
        while not ready.caught_up:
            ready = cluster.step(1, Tick())
            hosted_counts.append(len(broker.core.hosted))
        assert hosted_counts == [6, 9, 10]
        assert all(partition.role == Role.LEADER for _, partition in broker.core.partitions())
        assert ready.next_tick_ms != cluster.now_ms, "nothing left to apply"
    finally:
        cluster.close()


def fence_unapplied(cluster: CoreCluster, broker_id: int) -> None:
    """Fence `broker_id` and hand the metadata to the others without the Ticks of their pass."""
    response = cluster.controller.handle(BrokerHeartbeatRequest(
        broker_id, cluster.brokers[broker_id].broker_epoch, 1 << 40, want_fence=True), cluster.now_ms).response
    assert response.is_fenced, response
    cluster.publish(apply_fully=False)


def test_a_failover_steps_open_logs_in_one_call_while_log_creations_stay_bounded(tmp_path: Path) -> None:
    """Goal: a failover's steps (new leaders, the dead broker out of every ISR) are not held to the
    few log creations per call: two a call, a node with 2,000 partitions took ~1 s to apply them.
    Method: one creation per call; 10 partitions on brokers 1 and 2 created over 10 calls; broker 1
    fenced: broker 2 leads all 10 after the one call that brings the metadata."""
    cluster = CoreCluster(tmp_path, broker_ids=(1, 2), metadata_log_creations_per_call=1)
    try:
        cluster.create_topic(TOPIC, {index: (1, 2) for index in range(10)}, apply_fully=False)
        assert len(cluster.brokers[2].core.hosted) == 1
        cluster.publish()
        fence_unapplied(cluster, 1)
        assert cluster.brokers[2].readies[-1].caught_up
        assert all(partition.role == Role.LEADER for _, partition in cluster.brokers[2].core.partitions())
    finally:
        cluster.close()


def test_a_request_for_a_partition_still_waiting_in_the_pass_applies_its_metadata_first(tmp_path: Path) -> None:
    """Goal: a producer that learned a new leader from metadata this broker holds is not refused
    while the broker's pass has not reached the partition (it retried after a backoff, and in a
    failover at 2,000 partitions per node a third of the writes went a third time). Method: one
    partition examined per call; broker 1 fenced; a produce to broker 2 for the partition last in
    the pass is written there at once; the pass then finds it applied."""
    cluster = CoreCluster(tmp_path, broker_ids=(1, 2), metadata_partitions_per_call=1)
    try:
        cluster.create_topic(TOPIC, {index: (1, 2) for index in range(10)})
        fence_unapplied(cluster, 1)
        last = TopicPartition(TOPIC, 9)
        assert cluster.partition(2, last).role == Role.FOLLOWER
        request_id = produce(cluster, 2, batch(b"a"), acks=1, topic_partition=last)
        result = only_result(cluster.brokers[2].answers.get(request_id))
        assert result.error == ErrorCode.NONE, result
        assert cluster.partition(2, last).role == Role.LEADER
        ready = cluster.brokers[2].readies[-1]
        while not ready.caught_up:
            ready = cluster.step(2, Tick())
        assert cluster.partition(2, last).log.log_end_offset == 1
    finally:
        cluster.close()


def test_newer_metadata_queues_only_what_it_changed_so_frequent_changes_do_not_starve_a_pass(
        tmp_path: Path) -> None:
    """Goal: metadata that changes on every call (a failover: each new leader's epoch lineage is a
    change of its own) still lets every waiting partition be applied. Before, each newer metadata
    restarted the pass from the first partition in name order, a bounded number examined per call,
    so the last ones waited for the metadata to go quiet. Method: 3 partitions examined per call,
    one change; 10 partitions applied, then a topic whose name sorts last, then on each call a new
    topic whose name sorts first."""
    cluster = CoreCluster(tmp_path, broker_ids=(1,), metadata_partitions_per_call=3, metadata_log_creations_per_call=1)
    try:
        broker = cluster.brokers[1]
        cluster.create_topic(TOPIC, {index: (1,) for index in range(10)})
        cluster.create_topic("zeta", {0: (1,)}, apply_fully=False)
        for number in range(6):
            cluster.create_topic(f"a{number}", {0: (1,)}, apply_fully=False)
        assert TopicPartition("zeta", 0) in broker.core.hosted
        assert all(TopicPartition(f"a{number}", 0) in broker.core.hosted for number in range(6))
        assert broker.readies[-1].caught_up
    finally:
        cluster.close()


def test_newer_metadata_during_a_chunked_pass_applies_its_own_state(tmp_path: Path) -> None:
    """Goal: partitions still waiting in a pass get the newest metadata, and partitions already
    applied that the newer metadata changes are stepped again. Method: one change per call; create
    3 partitions, then a second topic before the pass ends; tick until caught up."""
    cluster = CoreCluster(tmp_path, broker_ids=(1,), metadata_log_creations_per_call=1)
    try:
        broker = cluster.brokers[1]
        cluster.create_topic(TOPIC, {index: (1,) for index in range(3)}, apply_fully=False)
        assert len(broker.core.hosted) == 1
        cluster.create_topic("payments", {0: (1,)}, apply_fully=False)
        ready = broker.readies[-1]
        while not ready.caught_up:
            ready = cluster.step(1, Tick())
        assert sorted(broker.core.hosted) == [TopicPartition("orders", index) for index in range(3)] + [
            TopicPartition("payments", 0)]
        assert all(partition.role == Role.LEADER for _, partition in broker.core.partitions())
    finally:
        cluster.close()
