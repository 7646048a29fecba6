"""The leader half of the partition core: appends, acks, HW, ISR changes, fencing.

Method: three brokers' cores on temp dirs, driven by hand-built events and `now_ms`; followers
fetch through `harness.fetch_round`. Every test states the Kafka rule it checks."""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import replace

import pytest

from replication.events import (
    AlterPartitionResponse,
    FollowerFetch,
    MakeLeader,
    ProduceRequest,
    Tick,
    UpdateBrokerEpochs,
)
from replication.isr_state import CommittedIsr, PendingExpandIsr, PendingLineage, PendingShrinkIsr
from replication.ready import AlterPartitionProposal, FetchResult, LogStartOffsetRaised, ProduceResult, Role
from storage import log_segment
from storage.log import LogStartOffsetIncrementReason
from storage.records import build_batch
from tests.replication.harness import (
    LAG_MS,
    REPLICAS,
    Broker,
    batch,
    catch_up,
    fetch_round,
    make_follower,
    make_leader,
    only,
    produce_results,
)
from wire.alter_partition import EpochLineage
from wire.error_codes import ErrorCode
from wire.sentinels import NO_EPOCH

Brokers = Callable[..., list[Broker]]


def setup(brokers: Brokers, epoch: int = 1, isr: tuple[int, ...] = REPLICAS, **properties: str) -> list[Broker]:
    cluster = brokers(**properties)
    make_leader(cluster[0], epoch, isr)
    for follower in cluster[1:]:
        make_follower(follower, 1, epoch, isr)
    return cluster


def produce(broker: Broker, records: bytes, acks: int, now_ms: int = 0, timeout_ms: int = 1_000,
            epoch: int = -1) -> tuple[int, list[ProduceResult]]:
    request_id = broker.request_id()
    ready = broker.handle(ProduceRequest(request_id, records, acks, timeout_ms, epoch), now_ms)
    return request_id, produce_results(ready)


def test_acks_1_is_answered_after_the_local_append(brokers: Brokers) -> None:
    leader, *_ = setup(brokers)
    request_id, results = produce(leader, batch(b"a", b"b"), acks=1)
    assert results == [ProduceResult(request_id, ErrorCode.NONE, 0, -1, 0)]
    assert leader.log.log_end_offset == 2
    assert leader.log.high_watermark == 0, "followers have not fetched: the HW stays"


def test_acks_0_is_answered_at_once_too(brokers: Brokers) -> None:
    leader, *_ = setup(brokers)
    _, results = produce(leader, batch(b"a"), acks=0)
    assert [r.error for r in results] == [ErrorCode.NONE]


def test_invalid_acks_are_refused_before_append(brokers: Brokers) -> None:
    leader, *_ = setup(brokers)
    _, results = produce(leader, batch(b"a"), acks=2)
    assert results[0].error == ErrorCode.INVALID_REQUIRED_ACKS
    assert leader.log.log_end_offset == 0


def test_corrupt_batch_is_refused_and_log_unchanged(brokers: Brokers) -> None:
    leader, *_ = setup(brokers)
    records = bytearray(batch(b"a"))
    records[-1] ^= 0xFF
    _, results = produce(leader, bytes(records), acks=1)
    assert results[0].error == ErrorCode.CORRUPT_MESSAGE
    assert "CRC" in results[0].error_message or "crc" in results[0].error_message.lower()
    assert leader.log.log_end_offset == 0


def test_a_failed_disk_write_is_kafka_storage_error_and_the_next_produce_lands(
        brokers: Brokers, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka answers an IOException on append KAFKA_STORAGE_ERROR (retriable); the log took the
    request back (storage's undo), so the core keeps serving and a retry lands at the same offset."""
    leader, *_ = setup(brokers)
    produce(leader, batch(b"a"), acks=1)
    real_pwritev = log_segment.os.pwritev

    def no_space(fd: int, buffers: object, position: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device (injected)")

    monkeypatch.setattr(log_segment.os, "pwritev", no_space)
    _, results = produce(leader, batch(b"b", b"c"), acks=-1)
    assert [r.error for r in results] == [ErrorCode.KAFKA_STORAGE_ERROR]
    assert "No space left" in results[0].error_message and "nothing was appended" in results[0].error_message
    assert leader.log.log_end_offset == 1
    monkeypatch.setattr(log_segment.os, "pwritev", real_pwritev)
    request_id, results = produce(leader, batch(b"b", b"c"), acks=1)
    assert results == [ProduceResult(request_id, ErrorCode.NONE, 1, -1, 0)]


def test_a_failed_flush_after_the_append_is_not_answered_as_nothing_appended(
        brokers: Brokers, monkeypatch: pytest.MonkeyPatch) -> None:
    """With flush.messages=1 the append fsyncs after writing: if that fails the records are in the
    log, so the answer must not invite a retry that would write them twice. The OSError reaches
    the node (a 500), as before KAFKA_STORAGE_ERROR answers existed."""
    leader, *_ = setup(brokers, **{"flush.messages": "1"})

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "fsync failed (injected)")

    monkeypatch.setattr(log_segment.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="fsync failed"):
        produce(leader, batch(b"a"), acks=1)
    assert leader.log.log_end_offset == 1


def test_acks_all_completes_when_the_high_watermark_passes_the_last_offset(brokers: Brokers) -> None:
    leader, one, two = setup(brokers)
    request_id, results = produce(leader, batch(b"a", b"b", b"c"), acks=-1)
    assert results == [], "acks=all waits for the ISR"
    fetch_round(leader, one, now_ms=1)  # fetches [0, 3)
    leader_ready, _ = fetch_round(leader, one, now_ms=2)  # reports LEO 3; two has not fetched
    assert produce_results(leader_ready) == []
    fetch_round(leader, two, now_ms=3)
    leader_ready, _ = fetch_round(leader, two, now_ms=4)
    assert produce_results(leader_ready) == [ProduceResult(request_id, ErrorCode.NONE, 0, -1, 0)]
    assert leader_ready.high_watermark is not None and leader_ready.high_watermark.new == 3


def test_high_watermark_is_min_leo_over_isr_and_never_falls(brokers: Brokers) -> None:
    leader, one, two = setup(brokers)
    produce(leader, batch(b"a", b"b"), acks=1)
    catch_up(leader, [one, two], now_ms=1)
    assert leader.log.high_watermark == 2
    # A follower that lost its tail (say, a restart) reports a lower LEO: the HW stays.
    request = FollowerFetch(99, 2, fetch_offset=1, last_fetched_epoch=1, log_start_offset=0, current_leader_epoch=1,
                            max_bytes=1 << 20)
    ready = leader.handle(request, now_ms=2)
    assert ready.high_watermark is None
    assert leader.log.high_watermark == 2
    produce(leader, batch(b"c"), acks=1, now_ms=3)
    fetch_round(leader, two, now_ms=4)
    assert leader.log.high_watermark == 2, "follower 2 is at 1 < 3: the HW waits"


def test_not_enough_replicas_is_refused_before_append(brokers: Brokers) -> None:
    leader, *_ = setup(brokers, isr=(1,), **{"min.insync.replicas": "2"})
    _, results = produce(leader, batch(b"a"), acks=-1)
    assert results[0].error == ErrorCode.NOT_ENOUGH_REPLICAS
    assert "min.insync.replicas=2" in results[0].error_message
    assert leader.log.log_end_offset == 0, "nothing appended"
    _, results = produce(leader, batch(b"a"), acks=1)
    assert results[0].error == ErrorCode.NONE, "acks=1 does not need the ISR"


def test_hw_holds_and_acks_all_times_out_when_the_isr_shrinks_below_min_after_append(brokers: Brokers) -> None:
    leader, one, two = setup(brokers, **{"min.insync.replicas": "2"})
    catch_up(leader, [one, two], now_ms=0)
    request_id, _ = produce(leader, batch(b"a"), acks=-1, now_ms=10, timeout_ms=10 * LAG_MS)
    fetch_round(leader, one, now_ms=20)  # one has the record; two never fetches again
    # Much later both followers lag (one fetched nothing since): the leader proposes ISR {1}.
    ready = leader.handle(Tick(), now_ms=LAG_MS + 100)
    proposal = only(ready.messages, AlterPartitionProposal)
    assert proposal.new_isr == (1,)
    assert produce_results(ready) == [], "the maximal ISR (pending shrink) still counts 2 and 3"
    ready = leader.handle(AlterPartitionResponse(proposal, ErrorCode.NONE, 1, 1, 1, (1,)), LAG_MS + 101)
    assert produce_results(ready) == []
    assert leader.log.high_watermark == 0, "KIP-966: the HW holds while the ISR {1} is below min.insync.replicas"
    ready = leader.handle(Tick(), now_ms=10 * LAG_MS + 10)
    (result,) = produce_results(ready)
    assert (result.request_id, result.error) == (request_id, ErrorCode.REQUEST_TIMED_OUT)
    assert leader.log.high_watermark == 0


def test_acks_all_times_out_on_tick(brokers: Brokers) -> None:
    leader, *_ = setup(brokers)
    request_id, _ = produce(leader, batch(b"a"), acks=-1, now_ms=0, timeout_ms=300)
    assert leader.readies[-1].next_tick_ms == 300
    assert produce_results(leader.handle(Tick(), now_ms=299)) == []
    (result,) = produce_results(leader.handle(Tick(), now_ms=300))
    assert (result.request_id, result.error, result.base_offset) == (request_id, ErrorCode.REQUEST_TIMED_OUT, 0)


def test_produce_with_stale_or_future_epoch_is_fenced(brokers: Brokers) -> None:
    leader, *_ = setup(brokers, epoch=5)
    _, results = produce(leader, batch(b"a"), acks=1, epoch=4)
    assert results[0].error == ErrorCode.FENCED_LEADER_EPOCH
    _, results = produce(leader, batch(b"a"), acks=1, epoch=6)
    assert results[0].error == ErrorCode.UNKNOWN_LEADER_EPOCH
    _, results = produce(leader, batch(b"a"), acks=1, epoch=5)
    assert results[0].error == ErrorCode.NONE
    assert leader.log.log_end_offset == 1


def test_produce_to_a_follower_is_not_leader_or_follower(brokers: Brokers) -> None:
    _, follower, _ = setup(brokers)
    _, results = produce(follower, batch(b"a"), acks=1)
    assert results[0].error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_leader_without_a_lease_tells_no_follower_to_truncate(brokers: Brokers) -> None:
    """Replication sim seed 214664264's shape: a leader cut off from the controller, or back with
    stale metadata, must not make a follower cut its log: the controller may have moved the
    leadership and the new leader committed what the follower would cut. The rest goes on (static
    stability): writes, and fetches that append."""
    leader, follower, _ = setup(brokers)
    epoch = leader.partition.leader_epoch
    produce(leader, batch(b"a", b"b"), acks=1, now_ms=0)
    leader.lease.until_ms = 10
    diverging = FollowerFetch(7, follower.broker_id, 5, epoch - 1, 0, current_leader_epoch=epoch, max_bytes=100)
    ahead = FollowerFetch(8, follower.broker_id, 5, NO_EPOCH, 0, current_leader_epoch=epoch, max_bytes=100)
    assert only(leader.handle(diverging, now_ms=10).completions, FetchResult).diverging_epoch is not None
    for request in (diverging, ahead):
        result = only(leader.handle(request, now_ms=11).completions, FetchResult)
        assert result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and "lease" in result.error_message, result
    assert produce(leader, batch(b"c"), acks=1, now_ms=12)[1][0].error == ErrorCode.NONE
    appending = FollowerFetch(9, follower.broker_id, 0, NO_EPOCH, 0, current_leader_epoch=epoch, max_bytes=1000)
    result = only(leader.handle(appending, now_ms=13).completions, FetchResult)
    assert result.error == ErrorCode.NONE and result.records


def test_an_idempotent_retry_waits_for_the_first_write_and_gets_its_offsets(brokers: Brokers) -> None:
    """Replication sim seed 6's shape: the retry of a parked acks=all batch, behind a later one."""
    leader, *followers = setup(brokers)
    first = build_batch([(None, b"a"), (None, b"b")], producer_id=9, producer_epoch=0, base_sequence=0)
    later = build_batch([(None, b"c")], producer_id=9, producer_epoch=0, base_sequence=2)
    first_id, _ = produce(leader, first, acks=-1)
    later_id, _ = produce(leader, later, acks=-1)
    retry_id, results = produce(leader, first, acks=-1)
    assert results == [] and leader.log.log_end_offset == 3, "the retry waits, and appends nothing"
    catch_up(leader, followers, now_ms=1)
    answers = {result.request_id: result for ready in leader.readies for result in produce_results(ready)}
    assert {request_id: answers[request_id].base_offset for request_id in (first_id, later_id, retry_id)} == {
        first_id: 0, later_id: 2, retry_id: 0}


def test_follower_fetch_with_stale_or_future_epoch_is_fenced(brokers: Brokers) -> None:
    leader, *_ = setup(brokers, epoch=3)
    for epoch, error in ((2, ErrorCode.FENCED_LEADER_EPOCH), (4, ErrorCode.UNKNOWN_LEADER_EPOCH)):
        request = FollowerFetch(7, 2, 0, -1, 0, current_leader_epoch=epoch, max_bytes=100)
        result = only(leader.handle(request, now_ms=0).completions, FetchResult)
        assert result.error == error


def test_a_re_registered_follower_no_longer_counts_its_old_process_log_end(brokers: Brokers) -> None:
    """KIP-903 / KIP-966 (replication sim seed 731204646's shape): broker 2 fetched up to 2 in broker
    epoch 10, then came back as a new process (registered at epoch 11) that may have lost that tail
    unflushed. When the metadata that says so also drops the laggard 3 from the ISR, the leader must
    not commit up to the old process's LEO: it forgets it, refuses the old process's fetches, and
    counts broker 2 again only from a fetch of the new process."""
    leader, one, _ = setup(brokers)
    leader.handle(UpdateBrokerEpochs(((1, 1), (2, 10), (3, 20))), now_ms=0)
    request_id, results = produce(leader, batch(b"a", b"b"), acks=-1, now_ms=0)
    assert results == []
    fetch_round(leader, one, now_ms=1, broker_epoch=10)
    fetch_round(leader, one, now_ms=2, broker_epoch=10)  # broker 2's LEO is 2 in epoch 10
    assert leader.log.high_watermark == 0, "broker 3 has not fetched"
    leader.handle(UpdateBrokerEpochs(((1, 1), (2, 11), (3, 20))), now_ms=3)
    ready = leader.handle(MakeLeader(1, 1, (1, 2), REPLICAS), now_ms=3)
    assert leader.log.high_watermark == 0, "broker 2's LEO of epoch 10 no longer counts"
    assert produce_results(ready) == []
    stale = FollowerFetch(leader.request_id(), 2, 2, 1, 0, current_leader_epoch=1, max_bytes=100, broker_epoch=10)
    result = only(leader.handle(stale, now_ms=4).completions, FetchResult)
    assert result.error == ErrorCode.STALE_BROKER_EPOCH, "a fetch of the old process is refused"
    assert leader.log.high_watermark == 0
    fresh = FollowerFetch(leader.request_id(), 2, 2, 1, 0, current_leader_epoch=1, max_bytes=100, broker_epoch=11)
    ready = leader.handle(fresh, now_ms=5)
    assert leader.log.high_watermark == 2, "the new process holds offsets 0-1"
    assert produce_results(ready) == [ProduceResult(request_id, ErrorCode.NONE, 0, -1, 0)]


def test_a_fetch_from_a_newer_broker_epoch_starts_a_fresh_fetch_state(brokers: Brokers) -> None:
    """KIP-903: the caught-up time of broker 2's old process (epoch 10) does not keep its new process
    (epoch 11), which came back behind, in the ISR."""
    leader, one, _ = setup(brokers, isr=(1, 2))
    produce(leader, batch(b"a"), acks=1, now_ms=0)
    fetch_round(leader, one, now_ms=500, broker_epoch=10)
    fetch_round(leader, one, now_ms=500, broker_epoch=10)  # caught up at 500
    produce(leader, batch(b"b"), acks=1, now_ms=505)
    request = FollowerFetch(leader.request_id(), 2, 0, -1, 0, current_leader_epoch=1, max_bytes=100, broker_epoch=11)
    ready = leader.handle(request, now_ms=LAG_MS + 100)
    assert leader.partition.state.remote[2].broker_epoch == 11
    assert only(ready.messages, AlterPartitionProposal).new_isr == (1,), "not caught up: the old time is gone"


def test_a_follower_joins_the_isr_only_from_its_registered_broker_epoch(brokers: Brokers) -> None:
    """Kafka's isReplicaIsrEligible (KIP-903): a fetch from an epoch older than the metadata's is
    refused; here one from a newer epoch (metadata not yet applied) is refused too (KIP-380's check:
    any but the registered epoch), and the follower is served and joins once the metadata registers
    that epoch."""
    leader, one, _ = setup(brokers, isr=(1,))
    leader.handle(UpdateBrokerEpochs(((1, 1), (2, 20), (3, 30))), now_ms=0)
    old = FollowerFetch(leader.request_id(), 2, 0, -1, 0, current_leader_epoch=1, max_bytes=100, broker_epoch=19)
    assert only(leader.handle(old, now_ms=1).completions, FetchResult).error == ErrorCode.STALE_BROKER_EPOCH
    ready, _ = fetch_round(leader, one, now_ms=2, broker_epoch=21)
    assert ready.messages == (), "epoch 21 is not registered yet"
    leader.handle(UpdateBrokerEpochs(((1, 1), (2, 21), (3, 30))), now_ms=3)
    ready, _ = fetch_round(leader, one, now_ms=4, broker_epoch=21)
    assert only(ready.messages, AlterPartitionProposal) == AlterPartitionProposal(1, 0, (1, 2), (-1, 21))


def test_isr_shrinks_after_lag_and_the_answer_commits_it(brokers: Brokers) -> None:
    leader, one, two = setup(brokers)
    catch_up(leader, [one, two], now_ms=0)
    produce(leader, batch(b"a"), acks=1, now_ms=10)
    assert leader.readies[-1].next_tick_ms == LAG_MS + 1, "the ISR check needs no polling"
    fetch_round(leader, one, now_ms=500)
    fetch_round(leader, one, now_ms=600)
    assert leader.handle(Tick(), now_ms=LAG_MS).messages == ()
    ready = leader.handle(Tick(), now_ms=LAG_MS + 1)
    proposal = only(ready.messages, AlterPartitionProposal)
    assert proposal == AlterPartitionProposal(1, 0, (1, 2), (-1, -1))
    state = leader.partition.state.isr_state
    assert isinstance(state, PendingShrinkIsr) and state.maximal_isr == REPLICAS
    assert leader.log.high_watermark == 0, "HW uses the maximal ISR while the shrink is in flight"
    ready = leader.handle(AlterPartitionResponse(proposal, ErrorCode.NONE, 1, 1, 1, (1, 2)), LAG_MS + 2)
    assert leader.partition.isr == (1, 2)
    assert leader.partition.partition_epoch == 1
    assert ready.high_watermark is not None and ready.high_watermark.new == 1


def test_only_one_isr_change_is_in_flight(brokers: Brokers) -> None:
    leader, one, two = setup(brokers, isr=(1,))
    ready, _ = fetch_round(leader, one, now_ms=0)
    first = only(ready.messages, AlterPartitionProposal)
    assert first.new_isr == (1, 2)
    ready, _ = fetch_round(leader, two, now_ms=1)
    assert ready.messages == (), "an expansion of 2 is in flight"
    ready = leader.handle(AlterPartitionResponse(first, ErrorCode.NONE, 1, 1, 1, (1, 2)), now_ms=2)
    ready, _ = fetch_round(leader, two, now_ms=3)
    assert only(ready.messages, AlterPartitionProposal) == AlterPartitionProposal(1, 1, REPLICAS, (-1, -1, -1))


def test_isr_expands_when_follower_reaches_hw_and_epoch_start(brokers: Brokers) -> None:
    leader, one, two = setup(brokers, isr=(1, 2))
    produce(leader, batch(b"a", b"b"), acks=1)
    catch_up(leader, [one], now_ms=1)
    assert leader.log.high_watermark == 2
    ready, _ = fetch_round(leader, two, now_ms=2)  # fetch offset 0 < HW 2: not yet
    assert ready.messages == ()
    ready, _ = fetch_round(leader, two, now_ms=3, broker_epoch=42)  # fetch offset 2 = HW
    proposal = only(ready.messages, AlterPartitionProposal)
    assert proposal.new_isr == REPLICAS
    assert proposal.new_isr_broker_epochs == (-1, -1, 42)
    state = leader.partition.state.isr_state
    assert isinstance(state, PendingExpandIsr) and state.maximal_isr == REPLICAS and state.isr == (1, 2)


def test_follower_below_leader_epoch_start_does_not_join(brokers: Brokers) -> None:
    """Kafka's isFollowerInSync: a follower must hold this leader's first records, not just the HW."""
    leader, _one, two = brokers()
    make_leader(leader, 1, isr=(1,))
    produce(leader, batch(b"a"), acks=1)
    make_leader(leader, 2, isr=(1,), partition_epoch=1)  # epoch 2 starts at offset 1; HW is 1 already
    assert leader.log.high_watermark == 1
    make_follower(two, 1, 2, isr=(1,), partition_epoch=1)
    request = FollowerFetch(5, 3, fetch_offset=1, last_fetched_epoch=1, log_start_offset=0, current_leader_epoch=2,
                            max_bytes=100)
    ready = leader.handle(request, now_ms=1)
    assert only(ready.messages, AlterPartitionProposal).new_isr == (1, 3), "offset 1 = epoch start: joins"
    make_leader(leader, 3, isr=(1,), partition_epoch=2, now_ms=2)
    produce(leader, batch(b"b"), acks=1, now_ms=3)
    make_leader(leader, 4, isr=(1,), partition_epoch=3, now_ms=4)  # epoch 4 starts at 2; HW 2
    request = FollowerFetch(6, 3, fetch_offset=1, last_fetched_epoch=1, log_start_offset=0, current_leader_epoch=4,
                            max_bytes=100)
    ready = leader.handle(request, now_ms=5)
    assert ready.messages == ()


def test_ineligible_replica_adopts_the_answered_epoch_reverts_and_backs_off(brokers: Brokers) -> None:
    """The controller's refusal bumped the partition epoch, fencing every copy of the proposal: the
    leader takes that state, goes back to its committed ISR and proposes again after the backoff."""
    leader, one, _ = setup(brokers, isr=(1,))
    ready, _ = fetch_round(leader, one, now_ms=0)
    proposal = only(ready.messages, AlterPartitionProposal)
    leader.handle(AlterPartitionResponse(proposal, ErrorCode.INELIGIBLE_REPLICA, 1, 1, 1, (1,)), now_ms=1)
    assert leader.partition.state.isr_state == CommittedIsr((1,))
    assert leader.partition.partition_epoch == 1
    leader.handle(MakeLeader(1, 1, (1,), REPLICAS), now_ms=2)  # the same state from the metadata: no-op
    ready, _ = fetch_round(leader, one, now_ms=100)
    assert ready.messages == (), "backing off"
    ready, _ = fetch_round(leader, one, now_ms=202)
    assert only(ready.messages, AlterPartitionProposal) == AlterPartitionProposal(1, 1, (1, 2), (-1, -1))


def test_ineligible_replica_without_a_newer_epoch_keeps_the_expansion_pending(brokers: Brokers) -> None:
    """Seed 28142510: reverting on a refusal that fenced nothing let the leader advance the HW without
    the refused follower, and a late copy of the proposal then put that follower into the ISR. Without
    proof that the copies are fenced, the HW keeps waiting for the proposed member."""
    leader, one, _ = setup(brokers, isr=(1,))
    produce(leader, batch(b"a"), acks=1)
    fetch_round(leader, one, now_ms=0)
    ready, _ = fetch_round(leader, one, now_ms=0)  # at the HW (1): proposed
    proposal = only(ready.messages, AlterPartitionProposal)
    produce(leader, batch(b"b"), acks=1, now_ms=1)
    leader.handle(AlterPartitionResponse(proposal, ErrorCode.INELIGIBLE_REPLICA), now_ms=2)
    assert isinstance(leader.partition.state.isr_state, PendingExpandIsr)
    assert leader.log.high_watermark == 1, "the HW waits for the proposed follower (LEO 1)"


def test_stale_partition_epoch_answer_keeps_change_pending_until_metadata(brokers: Brokers) -> None:
    leader, one, _ = setup(brokers, isr=(1,))
    ready, _ = fetch_round(leader, one, now_ms=0)
    proposal = only(ready.messages, AlterPartitionProposal)
    ready = leader.handle(AlterPartitionResponse(proposal, ErrorCode.INVALID_UPDATE_VERSION), now_ms=1)
    assert isinstance(leader.partition.state.isr_state, PendingExpandIsr)
    assert ready.next_tick_ms is None, "given up: no resend"
    leader.handle(MakeLeader(1, 3, (1, 2), REPLICAS), now_ms=2)
    assert leader.partition.state.isr_state == CommittedIsr((1, 2))
    assert leader.partition.partition_epoch == 3


def test_unanswered_proposal_is_resent_and_late_duplicate_answers_are_ignored(brokers: Brokers) -> None:
    leader, one, _ = setup(brokers, isr=(1,))
    ready, _ = fetch_round(leader, one, now_ms=0)
    proposal = only(ready.messages, AlterPartitionProposal)
    assert ready.next_tick_ms == 500
    assert only(leader.handle(Tick(), now_ms=500).messages, AlterPartitionProposal) == proposal
    answer = AlterPartitionResponse(proposal, ErrorCode.NONE, 1, 1, 1, (1, 2))
    leader.handle(answer, now_ms=501)
    assert leader.partition.isr == (1, 2)
    leader.handle(AlterPartitionResponse(proposal, ErrorCode.INVALID_UPDATE_VERSION), now_ms=502)
    assert leader.partition.state.isr_state == CommittedIsr((1, 2))


def test_retriable_alter_partition_error_is_resent_at_once(brokers: Brokers) -> None:
    leader, one, _ = setup(brokers, isr=(1,))
    ready, _ = fetch_round(leader, one, now_ms=0)
    proposal = only(ready.messages, AlterPartitionProposal)
    ready = leader.handle(AlterPartitionResponse(proposal, ErrorCode.NOT_CONTROLLER), now_ms=10)
    assert ready.messages == (proposal,)


def test_leader_answers_diverging_epoch_for_a_follower_ahead_in_an_old_epoch(brokers: Brokers) -> None:
    leader, *_ = brokers()
    make_leader(leader, 1, isr=(1,))
    produce(leader, batch(b"a", b"b"), acks=1)  # epoch 1: [0, 2)
    make_leader(leader, 3, isr=(1,), partition_epoch=1)
    produce(leader, batch(b"c"), acks=1)  # epoch 3: [2, 3)
    request = FollowerFetch(8, 2, fetch_offset=5, last_fetched_epoch=2, log_start_offset=0, current_leader_epoch=3,
                            max_bytes=100)
    result = only(leader.handle(request, now_ms=1).completions, FetchResult)
    assert result.error == ErrorCode.NONE
    assert (result.diverging_epoch.epoch, result.diverging_epoch.end_offset) == (1, 2)
    assert result.records == b""
    assert leader.partition.state.remote[2].log_end_offset == -1, "a diverging follower's offsets mean nothing"


def test_fetch_beyond_the_leader_log_end_is_out_of_range(brokers: Brokers) -> None:
    leader, *_ = setup(brokers)
    request = FollowerFetch(8, 2, fetch_offset=3, last_fetched_epoch=-1, log_start_offset=0, current_leader_epoch=1,
                            max_bytes=100)
    result = only(leader.handle(request, now_ms=1).completions, FetchResult)
    assert result.error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (result.log_start_offset, result.log_end_offset) == (0, 0)


def test_becoming_follower_fails_delayed_produce(brokers: Brokers) -> None:
    leader, _one, _ = setup(brokers)
    request_id, _ = produce(leader, batch(b"a"), acks=-1)
    ready = make_follower(leader, 2, 2, now_ms=2)
    assert ready.role == Role.FOLLOWER
    results = {c.request_id: c.error for c in ready.completions}
    assert results == {request_id: ErrorCode.NOT_LEADER_OR_FOLLOWER}


def test_re_elected_leader_keeps_delayed_produce_and_completes_it(brokers: Brokers) -> None:
    leader, one, two = setup(brokers)
    request_id, _ = produce(leader, batch(b"a"), acks=-1, timeout_ms=10_000)
    make_leader(leader, 2, partition_epoch=1, now_ms=1)
    for follower in (one, two):
        make_follower(follower, 1, 2, partition_epoch=1, now_ms=1)
    catch_up(leader, [one, two], now_ms=2)
    completed = [r for ready in leader.readies for r in produce_results(ready) if r.request_id == request_id]
    assert [r.error for r in completed] == [ErrorCode.NONE]


def test_stale_metadata_is_ignored(brokers: Brokers) -> None:
    leader, *_ = setup(brokers, epoch=3)
    make_follower(leader, 2, 2, partition_epoch=5)
    make_leader(leader, 3, partition_epoch=0)
    assert leader.partition.role == Role.LEADER
    assert leader.partition.leader_epoch == 3


def test_high_watermark_waits_for_a_follower_whose_expansion_is_in_flight(brokers: Brokers) -> None:
    """KIP-497: while an expansion is in flight the controller may already count the follower in
    the ISR (and elect it), so the HW must not pass its LEO: the HW uses the maximal ISR."""
    leader, one, two = setup(brokers, isr=(1, 2))
    catch_up(leader, [one, two], now_ms=0)
    assert isinstance(leader.partition.state.isr_state, PendingExpandIsr), "3 reached the HW: proposed"
    produce(leader, batch(b"a"), acks=1, now_ms=1)
    catch_up(leader, [one], now_ms=2)
    assert leader.log.high_watermark == 0, "broker 3 has not fetched offset 0 yet"
    fetch_round(leader, two, now_ms=3)
    fetch_round(leader, two, now_ms=4)
    assert leader.log.high_watermark == 1


def test_follower_at_hw_but_below_leader_epoch_start_does_not_join(brokers: Brokers) -> None:
    """Kafka's isFollowerInSync: reaching a new leader's lagging HW is not enough; the follower must
    also reach the start of the leader's epoch, or the ISR could gain a member that lacks records
    this leader will commit."""
    old, new, _ = brokers()
    make_leader(old, 1, isr=(1, 2))
    make_follower(new, 1, 1, isr=(1, 2))
    for value in (b"a", b"b", b"c"):
        produce(old, batch(value), acks=1)
    catch_up(old, [new], now_ms=0)
    produce(old, batch(b"d"), acks=1)
    produce(old, batch(b"e"), acks=1)
    fetch_round(old, new, now_ms=1)  # new: LEO 5, HW 3
    make_leader(new, 2, isr=(1, 2), partition_epoch=1, now_ms=2)
    assert (new.log.high_watermark, new.partition.state.leader_epoch_start_offset) == (3, 5)
    request = FollowerFetch(9, 3, fetch_offset=3, last_fetched_epoch=1, log_start_offset=0, current_leader_epoch=2,
                            max_bytes=100)
    ready = new.handle(request, now_ms=3)
    assert only(ready.completions, FetchResult).error == ErrorCode.NONE
    assert ready.messages == (), "at the HW (3) but below the epoch start (5)"


@pytest.mark.parametrize(("min_isr", "high_watermark"), [("1", 6), ("2", 4)])
def test_a_leader_from_a_recovery_election_starts_its_log_at_the_partitions_log_start(
        brokers: Brokers, min_isr: str, high_watermark: int) -> None:
    """Replication sim seed 435096169's shape: this broker's records [0, 6) were never committed (a
    deposed leader's), while another replica's log start 4 says committed records at 0-3 were
    deleted. Elected by recovery with the partition's log start 4, it serves nothing below 4: the
    HW rises to 4 at least (those offsets were committed), then the log start."""
    leader, *_ = setup(brokers, **{"min.insync.replicas": min_isr})
    produce(leader, batch(b"a", b"b", b"c"), acks=1)
    produce(leader, batch(b"d", b"e", b"f"), acks=1)
    assert (leader.log.log_start_offset, leader.log.high_watermark) == (0, 0)
    ready = leader.handle(MakeLeader(3, 5, (1,), REPLICAS, log_start_offset=4), now_ms=1)
    assert (leader.log.log_start_offset, leader.log.high_watermark) == (4, high_watermark)
    assert [(c.old, c.new, c.reason) for c in ready.log_changes if isinstance(c, LogStartOffsetRaised)] == [
        (0, 4, LogStartOffsetIncrementReason.RECOVERY_ELECTION)]


def test_a_leader_whose_lineage_is_not_recorded_proposes_it_and_holds_the_hw_until_it_is(brokers: Brokers) -> None:
    """Ours: the HW moves only once the controller has recorded where this epoch begins, so every
    committed record lies on the newest recorded lineage (the recovery election relies on it)."""
    leader, one, two = brokers()
    make_leader(leader, 1)
    produce(leader, batch(b"old"), acks=1)  # epoch 1's record: epoch 2 starts at 1
    ready = leader.handle(MakeLeader(2, 0, REPLICAS, REPLICAS, lineage_recorded=False), now_ms=0)
    proposal = only(ready.messages, AlterPartitionProposal)
    assert proposal.new_isr == REPLICAS and proposal.epoch_lineage == EpochLineage(2, 1, 1)
    assert isinstance(leader.partition.state.isr_state, PendingLineage)
    for follower in (one, two):
        make_follower(follower, 1, 2)
    request_id, _ = produce(leader, batch(b"a"), acks=-1, now_ms=1)
    for now_ms in (2, 3):
        for follower in (one, two):
            leader_ready, _ = fetch_round(leader, follower, now_ms=now_ms)
            assert produce_results(leader_ready) == []
    assert leader.log.high_watermark == 0, "every follower holds [0, 2), but the lineage is not recorded"
    assert only(leader.handle(Tick(), now_ms=500).messages, AlterPartitionProposal) == proposal, "resent"
    ready = leader.handle(AlterPartitionResponse(proposal, ErrorCode.NONE, 1, 2, 1, REPLICAS), now_ms=501)
    assert produce_results(ready) == [ProduceResult(request_id, ErrorCode.NONE, 1, -1, 0)]
    assert leader.log.high_watermark == 2 and leader.partition.state.isr_state == CommittedIsr(REPLICAS)


def test_metadata_that_records_the_lineage_releases_the_hw_and_newer_metadata_repeats_the_proposal(
        brokers: Brokers) -> None:
    leader, one, _ = brokers()
    ready = leader.handle(MakeLeader(1, 0, (1, 2), REPLICAS, lineage_recorded=False), now_ms=0)
    first = only(ready.messages, AlterPartitionProposal)
    leader.handle(AlterPartitionResponse(first, ErrorCode.INVALID_UPDATE_VERSION), now_ms=1)
    ready = leader.handle(MakeLeader(1, 1, (1, 2), REPLICAS, lineage_recorded=False), now_ms=2)
    assert only(ready.messages, AlterPartitionProposal) == replace(first, partition_epoch=1)
    make_follower(one, 1, 1, (1, 2), partition_epoch=1)
    produce(leader, batch(b"a"), acks=1, now_ms=3)
    fetch_round(leader, one, now_ms=4)
    fetch_round(leader, one, now_ms=5)
    assert leader.log.high_watermark == 0
    leader.handle(MakeLeader(1, 2, (1, 2), REPLICAS), now_ms=6)  # the controller recorded it
    assert leader.log.high_watermark == 1


def test_a_leader_with_an_empty_epoch_cache_records_every_earlier_epoch_as_possibly_below(brokers: Brokers) -> None:
    """A follower truncated fully to the leader's log start holds no record and no epoch entry, but
    the offsets below were used, by records of epochs it cannot name: its lineage must not say that
    no epoch precedes its own (the recovery election would cut committed records of epoch 0)."""
    leader, one, late = brokers()
    make_leader(leader, 0, isr=(1, 2))
    make_follower(one, 1, 0, (1, 2))
    for _ in range(5):
        produce(leader, batch(b"x"), acks=1)
    catch_up(leader, [one], now_ms=1)
    leader.log.maybe_increment_log_start_offset(5, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
    make_follower(late, 1, 0, (1, 2))
    catch_up(leader, [late], now_ms=2)
    assert (late.log.log_start_offset, late.log.leader_epoch_cache.entries()) == (5, [])
    ready = late.handle(MakeLeader(1, 1, REPLICAS, REPLICAS, lineage_recorded=False), now_ms=3)
    assert only(ready.messages, AlterPartitionProposal).epoch_lineage == EpochLineage(1, 0, 5)
