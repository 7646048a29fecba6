"""Eligible Leader Replicas (KIP-966), unclean-shutdown detection at registration (KAFKA-15586),
directory ids (KIP-858), the recovery election of partitions with an empty ISR and ELR, and the
fencing of a refused AlterPartition's copies.

Method: the pure `partition_change` rules on hand-built registrations (and a property test of the
invariants they keep), then the `QuorumController` through the `Harness` (every result committed
through the codec, the metadata invariants checked after every step).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.metadata import PartitionRegistration
from controller.metadata_records import PartitionChange
from controller.partition_change import partition_change
from controller.quorum_controller import ControllerConfig
from storage.config import LogConfig
from tests.controller.metadata_harness import Harness
from wire.alter_partition import AlterPartitionData, AlterPartitionRequest, EpochLineage
from wire.broker_lifecycle import BrokerHeartbeatRequest, BrokerRegistrationRequest, ReplicaLogInfo
from wire.configs import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
)
from wire.error_codes import ErrorCode
from wire.sentinels import NO_LEADER

SESSION_MS = 9000
TOPIC_ID = "ECfE0cOGu8TNYT4w2PFq3w"
DIR_A, DIR_B, DIR_NEW = "9ZxEQ-ZEQLqmP-9-dUFZ2A", "Wg7Fq4VRTO6QmPMTGm0P2A", "kM2yJ9Q1R_uMTHkVL7fXbw"


def everyone(replica: int) -> bool:
    return True


def state(isr: tuple[int, ...], leader: int, elr: tuple[int, ...] = (), last_known_elr: tuple[int, ...] = (),
          replicas: tuple[int, ...] = (1, 2, 3)) -> PartitionRegistration:
    return PartitionRegistration(replicas, isr, leader, 4, 9, elr, last_known_elr)


# ---- the rules -------------------------------------------------------------------------------------


def test_elr_is_empty_while_the_target_isr_meets_min_isr() -> None:
    change = partition_change(TOPIC_ID, 0, state((1, 2, 3), 1), (1, 3), 2, everyone)
    assert change == PartitionChange(TOPIC_ID, 0, isr=(1, 3))


def test_replicas_leaving_an_isr_below_min_isr_join_the_elr() -> None:
    change = partition_change(TOPIC_ID, 0, state((1, 3), 1), (1,), 2, everyone)
    assert change == PartitionChange(TOPIC_ID, 0, isr=(1,), elr=(3,))
    change = partition_change(TOPIC_ID, 0, state((1,), 1, elr=(3,)), (), 2, lambda replica: replica != 1)
    assert change == PartitionChange(TOPIC_ID, 0, isr=(3,), leader=3, elr=(1,)), "3 leads from the ELR"


def test_an_unclean_shutdown_moves_a_replica_from_the_elr_to_the_last_known_elr() -> None:
    change = partition_change(TOPIC_ID, 0, state((), NO_LEADER, elr=(1, 3)), (), 2, lambda r: False,
                              unclean_shutdown=(1,))
    assert change == PartitionChange(TOPIC_ID, 0, elr=(3,), last_known_elr=(1,))


def test_joining_the_isr_up_to_min_isr_empties_elr_and_last_known_elr() -> None:
    change = partition_change(TOPIC_ID, 0, state((3,), 3, elr=(1,), last_known_elr=(2,)), (1, 3), 2, everyone)
    assert change == PartitionChange(TOPIC_ID, 0, isr=(1, 3), elr=(), last_known_elr=())


def test_election_order_current_leader_then_isr_in_replica_order_then_elr() -> None:
    def alive(*ids: int):
        return lambda replica: replica in ids

    assert partition_change(TOPIC_ID, 0, state((1, 2, 3), 2), (1, 2, 3), 2, everyone) is None
    change = partition_change(TOPIC_ID, 0, state((1, 2, 3), 1), (2, 3), 2, alive(2, 3))
    assert change == PartitionChange(TOPIC_ID, 0, isr=(2, 3), leader=2)
    change = partition_change(TOPIC_ID, 0, state((), NO_LEADER, elr=(1, 2)), (), 3, alive(2, 3))
    assert change == PartitionChange(TOPIC_ID, 0, isr=(2,), leader=2, elr=(1,))
    change = partition_change(TOPIC_ID, 0, state((), NO_LEADER, elr=(1, 2)), (), 3, alive(3))
    assert change is None, "ELR members exist but none is active: wait for one (3 may lack acked records)"


def test_an_elr_leader_meeting_min_isr_alone_empties_the_elr() -> None:
    """min.insync.replicas 1: the new leader advances the HW alone at once, so the other ELR members
    stop being complete at once (Kafka clears them only at the next change)."""
    change = partition_change(TOPIC_ID, 0, state((), NO_LEADER, elr=(1, 2)), (), 1, everyone)
    assert change == PartitionChange(TOPIC_ID, 0, isr=(1,), leader=1, elr=())


def test_recovery_leader_is_asked_only_when_isr_and_elr_are_empty() -> None:
    asked: list[tuple[int, ...]] = []

    def recovery(last_known_elr: tuple[int, ...]) -> int:
        asked.append(last_known_elr)
        return 2

    assert partition_change(TOPIC_ID, 0, state((), NO_LEADER, elr=(1,)), (), 2, lambda r: False,
                            recovery_leader=recovery) is None
    assert asked == []
    change = partition_change(TOPIC_ID, 0, state((), NO_LEADER, last_known_elr=(1,)), (), 2, everyone,
                              recovery_leader=recovery)
    assert change == PartitionChange(TOPIC_ID, 0, isr=(2,), leader=2, last_known_elr=())
    assert asked == [(1,)], "asked with the target last known ELR"


def test_unclean_election_takes_the_first_active_replica_and_empties_the_elr() -> None:
    change = partition_change(TOPIC_ID, 0, state((), NO_LEADER, elr=(1,)), (), 2, lambda replica: replica == 3,
                              unclean_election=True)
    assert change == PartitionChange(TOPIC_ID, 0, isr=(3,), leader=3, elr=())


members = st.lists(st.sampled_from((1, 2, 3)), unique=True).map(lambda ids: tuple(sorted(ids)))


@given(members, members, members, members, st.integers(1, 3), members, st.booleans(), st.sampled_from((-1, 1, 2, 3)))
def test_changes_keep_the_registration_invariants(isr: tuple[int, ...], elr: tuple[int, ...], known: tuple[int, ...],
                                                   target: tuple[int, ...], min_isr: int, active: tuple[int, ...],
                                                   unclean: bool, recovery: int) -> None:
    """Whatever the inputs: the ISR, ELR and last known ELR stay disjoint; the leader is an active ISR
    member or -1; the ELR is empty when the ISR meets min.insync.replicas; an ELR member never
    appears from outside the old ISR and ELR."""
    elr = tuple(replica for replica in elr if replica not in isr)
    known = tuple(replica for replica in known if replica not in isr and replica not in elr)
    before = state(isr, isr[0] if isr else NO_LEADER, elr, known)
    change = partition_change(TOPIC_ID, 0, before, target, min_isr, lambda replica: replica in active,
                              unclean_election=unclean,
                              recovery_leader=lambda candidates: recovery if recovery in active else -1)
    after = before if change is None else before.merge(change)
    assert not set(after.isr) & set(after.elr)
    assert not set(after.last_known_elr) & (set(after.isr) | set(after.elr))
    assert after.leader == NO_LEADER or (after.leader in after.isr and after.leader in active)
    if len(after.isr) >= min_isr:
        assert after.elr == after.last_known_elr == ()
    assert set(after.elr) <= set(isr) | set(elr)


# ---- the controller: fencing and registration -----------------------------------------------------------


def three_brokers(min_isr: str = "2", dirs: bool = False) -> Harness:
    harness = Harness(config=ControllerConfig(topic_defaults=LogConfig(min_insync_replicas=int(min_isr))))
    for broker_id in (1, 2, 3):
        register(harness, broker_id, log_dirs=(f"dir-{broker_id}",) if dirs else ())
        harness.heartbeat(broker_id)
    harness.create_topic("t", assignments={0: (1, 2, 3)})
    return harness


def register(harness: Harness, broker_id: int, previous_broker_epoch: int = -1,
             log_dirs: tuple[str, ...] = ()) -> object:
    request = BrokerRegistrationRequest(broker_id, f"incarnation-{broker_id}-{harness.now_ms}",
                                        {"PLAINTEXT": f"broker{broker_id}:9092"}, None, log_dirs,
                                        previous_broker_epoch)
    response = harness.run(request)
    assert response.error_code == ErrorCode.NONE, response
    harness.broker_epochs[broker_id] = response.broker_epoch
    return response


def fence(harness: Harness, *broker_ids: int) -> None:
    for broker_id in broker_ids:
        harness.heartbeat(broker_id, want_fence=True)


def test_min_isr_comes_from_the_topic_over_the_controller_defaults() -> None:
    harness = three_brokers(min_isr="1")
    fence(harness, 2, 3)
    assert (harness.partition("t").isr, harness.partition("t").elr) == ((1,), ())
    harness.create_topic("u", assignments={0: (1, 2, 3)}, configs={"min.insync.replicas": "3"})
    harness.heartbeat(2)
    harness.heartbeat(3)
    harness.run(AlterPartitionRequest(1, harness.broker_epochs[1], (isr_data(harness, "u", (1, 2, 3)),)))
    fence(harness, 3)
    assert (harness.partition("u").isr, harness.partition("u").elr) == ((1, 2), (3,))


def test_last_replica_standing_stays_offline_until_an_elr_member_is_back() -> None:
    """Issue 11's story at the controller: followers fenced, ISR down to the leader, the leader loses
    power and re-registers uncleanly: the follower in the ELR leads, not the restarted leader."""
    harness = three_brokers()
    fence(harness, 2)
    assert (harness.partition("t").isr, harness.partition("t").elr) == ((1, 3), ())
    fence(harness, 3)
    assert (harness.partition("t").isr, harness.partition("t").elr) == ((1,), (3,))
    harness.heartbeat_all(SESSION_MS, except_ids=(1,))
    harness.tick(1)  # the leader's session expires
    state_ = harness.partition("t")
    assert (state_.leader, state_.isr, state_.elr) == (NO_LEADER, (), (1, 3))
    response = register(harness, 1, previous_broker_epoch=-1)
    assert "restarted without a clean shutdown" in response.warning
    harness.heartbeat(1)
    state_ = harness.partition("t")
    assert (state_.leader, state_.isr, state_.elr, state_.last_known_elr) == (NO_LEADER, (), (3,), (1,))
    harness.heartbeat(2)
    assert harness.partition("t").leader == NO_LEADER, "broker 2 left the ISR before it was below min ISR"
    harness.heartbeat(3)
    state_ = harness.partition("t")
    assert (state_.leader, state_.isr, state_.elr, state_.last_known_elr) == (3, (3,), (), (1,))


def test_clean_reregistration_keeps_elr_membership_and_leaves_the_isr() -> None:
    harness = three_brokers()
    fence(harness, 2, 3)
    epoch = harness.broker_epochs[3]
    response = register(harness, 3, previous_broker_epoch=epoch)
    assert response.warning is None
    assert harness.partition("t").elr == (3,)
    epoch = harness.broker_epochs[1]
    register(harness, 1, previous_broker_epoch=epoch)
    state_ = harness.partition("t")
    assert (state_.leader, state_.isr, state_.elr) == (NO_LEADER, (), (1, 3))


def test_unclean_reregistration_leaves_isr_and_elr() -> None:
    harness = three_brokers()
    fence(harness, 2, 3)
    response = register(harness, 3, previous_broker_epoch=harness.broker_epochs[3] - 1)
    assert "broker 3 restarted without a clean shutdown" in response.warning
    assert "left the ISR or ELR of 1 partition(s)" in response.warning
    register(harness, 1)
    state_ = harness.partition("t")
    assert (state_.leader, state_.isr, state_.elr, state_.last_known_elr) == (NO_LEADER, (), (), (1, 3))


def test_a_missing_log_dir_makes_a_registration_unclean_whatever_its_marker_says() -> None:
    """KIP-858: the marker of a second, intact dir matches, but the dir that held the replica is new."""
    harness = three_brokers(dirs=True)
    assert harness.committed.broker(3).log_dirs == ("dir-3",)
    fence(harness, 2, 3)
    response = register(harness, 3, previous_broker_epoch=harness.broker_epochs[3], log_dirs=(DIR_NEW,))
    assert response.warning.startswith(f"broker 3's log dir {DIR_NEW} is new and dir-3 is gone")
    assert harness.partition("t").elr == ()
    assert harness.committed.broker(3).log_dirs == (DIR_NEW,)
    response = register(harness, 3, previous_broker_epoch=harness.broker_epochs[3], log_dirs=(DIR_NEW, DIR_A))
    assert response.warning is None, "a dir added beside the registered ones is no loss"


# ---- the controller: recovery of a partition with an empty ISR and ELR --------------------------------


def emptied(min_isr: str = "3", lineages: dict[int, tuple[int, int]] | None = None) -> Harness:
    """Every replica restarted uncleanly after the ISR emptied: the ISR and ELR are empty. With
    min.insync.replicas 3 every replica went through the ELR, so all are in the last known ELR.
    Brokers 1, 2 and 3 lead epochs 0, 1 and 2 in turn; `lineages` maps epoch 1 or 2 to the
    (previous epoch, start offset) its leader recorded (epoch 0's is (-1, 0), from the creation)."""
    harness = three_brokers(min_isr)
    for broker_id in (1, 2, 3):
        state_ = harness.partition("t")
        if state_.leader_epoch in (lineages or {}):
            previous_epoch, start_offset = (lineages or {})[state_.leader_epoch]
            lineage = EpochLineage(state_.leader_epoch, previous_epoch, start_offset)
            data = replace(isr_data(harness, "t", state_.isr), epoch_lineage=lineage)
            response = harness.run(AlterPartitionRequest(broker_id, harness.broker_epochs[broker_id], (data,)))
            assert response.partitions[0].error_code == ErrorCode.NONE, response
            assert harness.partition("t").epoch_lineage == lineage
        fence(harness, broker_id)
    for broker_id in (1, 2, 3):
        register(harness, broker_id)
        harness.heartbeat(broker_id)
    state_ = harness.partition("t")
    assert (state_.leader, state_.isr, state_.elr) == (NO_LEADER, (), ())
    return harness


def report(harness: Harness, broker_id: int, last_epoch: int, log_end_offset: int,
           leader_epoch: int | None = None, epochs: tuple[tuple[int, int], ...] | None = None,
           log_start_offset: int | None = None, may_be_committed_end: int = -1) -> object:
    """Broker `broker_id`'s heartbeat with its log end. Without `epochs`, its leader-epoch cache
    is one entry of `last_epoch` at offset 0 (none for an empty log, last_epoch -1, which starts at
    its end unless `log_start_offset` says otherwise)."""
    state_ = harness.partition("t")
    if epochs is None:
        epochs = () if last_epoch < 0 else ((last_epoch, 0),)
    if log_start_offset is None:
        log_start_offset = log_end_offset if last_epoch < 0 else 0
    info = ReplicaLogInfo(harness.committed.topic_id("t"), 0,
                          state_.leader_epoch if leader_epoch is None else leader_epoch, last_epoch, log_end_offset,
                          log_start_offset, epochs, may_be_committed_end)
    request = BrokerHeartbeatRequest(broker_id, harness.broker_epochs[broker_id], harness.committed.last_applied_offset,
                                     replica_log_info=(info,))
    return harness.run(request)


def test_recovery_waits_for_every_replica_then_elects_the_most_complete_log() -> None:
    harness = emptied()
    report(harness, 1, 0, 3)
    report(harness, 2, 0, 7)
    assert harness.partition("t").leader == NO_LEADER, "broker 3 has not reported"
    report(harness, 3, -1, 0)  # a wiped replica: it must never lead while another holds data
    state_ = harness.partition("t")
    assert (state_.leader, state_.isr, state_.elr, state_.last_known_elr) == (2, (2,), (), ())


def test_recovery_does_not_take_a_later_epoch_from_outside_the_last_known_elr() -> None:
    """KIP-966 Balanced: broker 1 left the ISR while it still met min.insync.replicas, so it may lack
    acknowledged records; its later epoch (a deposed leader's unreplicated batches, seed 5000872)
    does not make it the leader. The election waits for its report all the same."""
    harness = emptied(min_isr="2")
    assert harness.partition("t").last_known_elr == (2, 3)
    report(harness, 2, 0, 55)
    report(harness, 3, 0, 54)
    assert harness.partition("t").leader == NO_LEADER, "broker 1 has not reported: it may hold records"
    report(harness, 1, 7, 99)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (2, (2,))


def test_recovery_elects_a_replica_outside_the_last_known_elr_whose_log_extends_the_members() -> None:
    """Replication sim seed 91: acknowledged with ISR (1, 2, 3); broker 1 was fenced first and left
    while the ISR still met min.insync.replicas, the last member (here 2, 3) went into the ELR and,
    restarted uncleanly with 3, into the last known ELR; both lost their unflushed tail [50, 55),
    which broker 1 kept. Its log ends in the members' last epoch, so it extends theirs: it leads."""
    harness = emptied(min_isr="2")
    assert harness.partition("t").last_known_elr == (2, 3)
    report(harness, 2, 0, 50)
    report(harness, 3, 0, 50)
    assert harness.partition("t").leader == NO_LEADER, "broker 1 has not reported: it may hold records"
    report(harness, 1, 0, 55)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


def test_recovery_elects_a_replica_that_went_on_to_a_later_epoch_after_holding_all_the_members_records() -> None:
    """Replication sim seed 731204935: the last known ELR member (here 2, 3) kept [0, 10) of epoch 0
    after its unclean restart; broker 1 holds epoch 0 up to 26 and then the acknowledged epoch-1
    records [26, 45). Its epochs say it holds all the members hold and more on the same history: it
    leads (the last written epoch alone, 1 against 0, could not tell it from a deposed leader)."""
    harness = emptied(min_isr="2")
    report(harness, 2, 0, 10)
    report(harness, 3, 0, 8)
    report(harness, 1, 1, 45, epochs=((0, 0), (1, 26)))
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


def test_recovery_passes_over_a_later_epoch_that_begins_below_the_members_log_end() -> None:
    """Seed 5000872's shape, with the epochs reported: broker 1's epoch-1 batches begin at 40, below
    the end of the members' epoch 0 (55): its log parts from theirs there, so it does not lead."""
    harness = emptied(min_isr="2")
    report(harness, 2, 0, 55)
    report(harness, 3, 0, 54)
    report(harness, 1, 1, 99, epochs=((0, 0), (1, 40)))
    assert (harness.partition("t").leader, harness.partition("t").isr) == (2, (2,))


def test_recovery_passes_over_a_deposed_leaders_records_off_the_recorded_lineage() -> None:
    """Replication sim seed 2026113664's shape: broker 2, leader of epoch 1 while paused, woke up and
    appended epoch-1 records [0, 4) that no follower ever fetched; broker 3, leader of epoch 2 (its log
    epoch 0 up to 20 when it began), committed the epoch-0 records, which broker 1 also held ([0, 17)
    after a crash), and was wiped. Broker 2 restarted, so its report counts [0, 4) as maybe committed,
    and by epoch it outranks broker 1. Epoch 2's recorded lineage says epoch 1 is on no committed
    history: broker 1 leads."""
    harness = emptied(lineages={2: (0, 20)})
    report(harness, 1, 0, 17)
    report(harness, 2, 1, 4, epochs=((1, 0),), may_be_committed_end=4)
    report(harness, 3, -1, 0)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


def test_recovery_cuts_reports_where_they_leave_the_recorded_lineage() -> None:
    """Epoch 2 began at 10 after epoch 0 (lineage (2, 0, 10)): broker 3's epoch-1 records (from 5)
    and broker 1's epoch-0 records from 10 on are on no committed history. Cut there, broker 1's
    log, epoch 0 up to 10, is the most complete; uncut, broker 3's epoch 1 would outrank it."""
    harness = emptied(lineages={2: (0, 10)})
    report(harness, 1, 0, 30)
    report(harness, 2, 0, 8)
    report(harness, 3, 1, 25, epochs=((0, 0), (1, 5)))
    assert harness.partition("t").leader == 1


def test_recovery_prefers_the_candidate_whose_log_extends_every_other_candidate() -> None:
    """Both broker 1 and broker 3 extend the member's log (2: [0, 10) of epoch 0); broker 1's also
    extends broker 3's (epoch 0 to 30 against 20, then epoch 1), so it leads; an entry a leader
    made at its election without writing after it (epoch 4 at broker 3's end) holds nothing."""
    harness = emptied(min_isr="3")
    report(harness, 2, 0, 10)
    report(harness, 3, 4, 20, epochs=((0, 0), (4, 20)))
    report(harness, 1, 1, 31, epochs=((0, 0), (1, 30)))
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


def test_recovery_does_not_let_records_no_other_broker_held_outrank_ones_another_holds() -> None:
    """Replication sim seed 532003445: broker 2, a deposed leader of epoch 1, appended [4, 6) after
    the controller had elected broker 3 in epoch 2, and never sent them anywhere (its report says
    they may not be committed from 4 on); broker 3 committed its epoch-0 records [4, 6), which broker
    1 also holds, then lost its log. Neither log extends the other, and by last epoch broker 2's
    would win and truncate the committed records on broker 1; without its unshared records broker
    1's log extends every other, so broker 1 leads."""
    harness = emptied(min_isr="2")
    report(harness, 2, 1, 6, epochs=((0, 0), (1, 4)), may_be_committed_end=4)
    report(harness, 3, -1, 0)
    report(harness, 1, 0, 6)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


def test_recovery_keeps_unshared_records_that_conflict_with_none() -> None:
    """Records only the deposed leader held are kept when its log extends every other (acks=1
    records, say): nothing anyone else holds gives way to them."""
    harness = emptied(min_isr="2", lineages={1: (0, 4)})
    report(harness, 2, 1, 6, epochs=((0, 0), (1, 4)), may_be_committed_end=4)
    report(harness, 3, 0, 4)
    report(harness, 1, 0, 4)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (2, (2,))


def test_recovery_never_writes_below_a_log_start_offset() -> None:
    """A replica whose log starts at 40 (retention deleted [0, 40) after it was committed) keeps the
    candidates that end below 40 from leading, even with records in its leader-epoch cache."""
    harness = emptied(min_isr="2")
    report(harness, 2, 0, 30)
    report(harness, 3, 0, 25)
    report(harness, 1, 0, 42, epochs=((0, 40),), log_start_offset=40)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


def test_recovery_counts_no_record_below_the_largest_log_start_offset() -> None:
    """Replication sim seed 435096042: DeleteRecords moved the log start to 1; the last known ELR
    members kept only offset 0 through their crashes (their logStartOffset checkpoint lagged), with
    no epoch left for it in their caches. Broker 1 holds the acknowledged [1, 21). Records below a
    log start were deleted: the members hold nothing that counts, and broker 1 leads (it was passed
    over, since no log "surely extends" one whose records have no epoch, and [1, 4) was truncated)."""
    harness = emptied(min_isr="2")
    assert harness.partition("t").last_known_elr == (2, 3)
    report(harness, 2, -1, 1, epochs=(), log_start_offset=0)
    report(harness, 3, -1, 1, epochs=(), log_start_offset=0)
    report(harness, 1, 0, 21, epochs=((0, 1),), log_start_offset=1)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


def test_recovery_hands_the_largest_log_start_to_the_new_leader() -> None:
    """Replication sim seed 435096169: retention deleted the committed [0, 4) on broker 3 (log start 4,
    nothing left); broker 1 holds [0, 18) it wrote as a deposed leader. It may lead (its log reaches
    past 4), but with the partition's log start 4, so that it never serves offsets 0-3 again."""
    harness = emptied(min_isr="2")
    report(harness, 2, -1, 0)
    report(harness, 3, -1, 4, log_start_offset=4)
    report(harness, 1, 0, 18)
    state_ = harness.partition("t")
    assert (state_.leader, state_.isr, state_.log_start_offset) == (1, (1,), 4)
    fence(harness, 1)
    state_ = harness.partition("t")
    assert (state_.leader, state_.log_start_offset) == (NO_LEADER, 0), "it held for broker 1's epoch only"


def test_recovery_waits_for_a_fenced_replica_outside_the_last_known_elr() -> None:
    harness = emptied(min_isr="2")
    report(harness, 1, 0, 55)
    fence(harness, 1)
    report(harness, 2, 0, 50)
    report(harness, 3, 0, 50)
    assert harness.partition("t").leader == NO_LEADER, "broker 1 is fenced: it may hold the only copies"
    harness.heartbeat(1)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


def test_recovery_among_empty_last_known_elr_members_waits_for_every_replica_and_keeps_the_data() -> None:
    """Every last known ELR member lost all it held (wiped, or crashed before any fsync): electing
    one keeps nothing, while broker 1, which left the ISR earlier, still holds records acknowledged
    before it left. Then every replica is waited for and the most complete leads (seed 1295)."""
    harness = emptied(min_isr="2")
    assert harness.partition("t").last_known_elr == (2, 3)
    report(harness, 2, -1, 0)
    report(harness, 3, -1, 0)
    assert harness.partition("t").leader == NO_LEADER, "broker 1 has not reported: it may hold records"
    report(harness, 1, 1, 15)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


def test_recovery_never_writes_below_the_end_of_an_empty_log() -> None:
    """Replication sim seed 731204823: of the last known ELR, broker 3 was wiped and broker 2's
    retention deleted everything below 40 (acknowledged records); broker 1, which left the ISR
    earlier, ends at 30. Electing it would write new records at offsets 30-39: broker 2 leads."""
    harness = emptied(min_isr="2")
    assert harness.partition("t").last_known_elr == (2, 3)
    report(harness, 1, 0, 30)
    report(harness, 2, -1, 40)
    report(harness, 3, -1, 0)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (2, (2,))


def test_recovery_prefers_an_empty_log_to_a_member_that_ends_below_it() -> None:
    harness = emptied(min_isr="2")
    report(harness, 1, -1, 40)
    report(harness, 2, 0, 30)
    report(harness, 3, 0, 25)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


def test_recovery_prefers_the_later_epoch_then_the_longer_log_then_replica_order() -> None:
    harness = emptied(lineages={2: (1, 5)})
    report(harness, 1, 0, 5)
    report(harness, 2, 1, 2)
    report(harness, 3, 1, 2)
    assert harness.partition("t").leader == 2


def test_recovery_ignores_reports_from_another_leader_epoch_or_an_older_registration() -> None:
    harness = emptied()
    state_ = harness.partition("t")
    report(harness, 1, 0, 9, leader_epoch=state_.leader_epoch - 1)
    report(harness, 2, 0, 1)
    report(harness, 3, 0, 1)
    assert harness.partition("t").leader == NO_LEADER, "broker 1's report is from another leader epoch"
    register(harness, 2)  # restarted again: its report is void
    harness.heartbeat(2)
    report(harness, 1, 0, 9)
    assert harness.partition("t").leader == NO_LEADER
    report(harness, 2, 0, 1)
    assert harness.partition("t").leader == 1


def test_a_new_controller_waits_for_fresh_reports() -> None:
    harness = emptied()
    report(harness, 1, 0, 3)
    report(harness, 2, 0, 3)
    harness.controller.reset_to(harness.committed, harness.now_ms, harness.committed.last_applied_offset + 1)
    report(harness, 3, 0, 9)
    assert harness.partition("t").leader == NO_LEADER
    report(harness, 1, 0, 3)
    report(harness, 2, 0, 3)
    assert harness.partition("t").leader == 3


def test_unclean_election_does_not_wait_for_reports() -> None:
    harness = emptied()
    harness.run(alter_config("t", "unclean.leader.election.enable", "true"))
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


def test_a_malformed_report_is_invalid_request() -> None:
    harness = emptied()
    response = report(harness, 1, 0, -5)
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert "negative offset" in response.error_message


def test_a_report_with_epochs_out_of_order_or_a_log_start_beyond_its_end_is_invalid_request() -> None:
    harness = emptied()
    response = report(harness, 1, 1, 9, epochs=((1, 0), (0, 5)))
    assert response.error_code == ErrorCode.INVALID_REQUEST and "increase" in response.error_message
    response = report(harness, 1, 0, 9, log_start_offset=10)
    assert response.error_code == ErrorCode.INVALID_REQUEST and "log start offset" in response.error_message


def test_lowering_min_isr_empties_the_elr_where_the_isr_meets_it() -> None:
    harness = three_brokers()
    fence(harness, 2, 3)
    assert harness.partition("t").elr == (3,)
    harness.run(alter_config("t", "min.insync.replicas", "3"))
    assert harness.partition("t").elr == (3,), "still below: the HW stays held, 3 stays complete"
    harness.run(alter_config("t", "min.insync.replicas", "1"))
    assert harness.partition("t").elr == (), "the leader advances the HW alone now"


def alter_config(name: str, key: str, value: str) -> IncrementalAlterConfigsRequest:
    resource = AlterConfigsResource(ConfigResourceType.TOPIC, name, (AlterableConfig(key, AlterConfigOp.SET, value),))
    return IncrementalAlterConfigsRequest((resource,))


# ---- a refused AlterPartition fences its copies ---------------------------------------------------------


def isr_data(harness: Harness, name: str, new_isr: tuple[int, ...],
             broker_epochs: tuple[int, ...] | None = None) -> AlterPartitionData:
    state_ = harness.partition(name)
    return AlterPartitionData(harness.committed.topic_id(name), 0, state_.leader_epoch, state_.partition_epoch,
                              new_isr, broker_epochs)


def test_a_refused_expansion_bumps_the_partition_epoch_so_its_late_copy_is_refused() -> None:
    """Seed 28142510: leader 1 proposed broker 2 for the ISR; refused INELIGIBLE_REPLICA (2 was fenced),
    the leader acked on ISR (1, 3); a delayed copy of the same request (same epochs) was accepted once
    2 was back, putting a replica without those records into the ISR. Now the refusal moves the
    partition epoch and answers with it, and the copy fails the epoch check."""
    harness = three_brokers()
    harness.run(AlterPartitionRequest(1, harness.broker_epochs[1], (isr_data(harness, "t", (1, 3)),)))
    before = harness.partition("t")
    fence(harness, 2)
    request = AlterPartitionRequest(
        1, harness.broker_epochs[1], (isr_data(harness, "t", (1, 2, 3), (-1, harness.broker_epochs[2], -1)),)
    )
    (refused,) = harness.run(request).partitions
    assert refused.error_code == ErrorCode.INELIGIBLE_REPLICA
    after = harness.partition("t")
    assert (after.isr, after.partition_epoch) == (before.isr, before.partition_epoch + 1)
    assert (refused.isr, refused.partition_epoch, refused.leader_id, refused.leader_epoch) == (
        after.isr, after.partition_epoch, after.leader, after.leader_epoch,
    )
    harness.heartbeat(2)  # back, with the same broker epoch
    (copy,) = harness.run(request).partitions
    assert copy.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert harness.partition("t").isr == (1, 3)


def test_a_leader_records_its_epoch_lineage_once_with_the_isr_unchanged() -> None:
    harness = three_brokers()
    fence(harness, 1)
    before = harness.partition("t")
    lineage = EpochLineage(before.leader_epoch, 0, 7)
    data = replace(isr_data(harness, "t", before.isr), epoch_lineage=lineage)
    (result,) = harness.run(AlterPartitionRequest(2, harness.broker_epochs[2], (data,))).partitions
    after = harness.partition("t")
    assert result.error_code == ErrorCode.NONE and result.partition_epoch == after.partition_epoch
    assert after == replace(before, partition_epoch=before.partition_epoch + 1, epoch_lineage=lineage)
    (copy,) = harness.run(AlterPartitionRequest(2, harness.broker_epochs[2], (data,))).partitions
    assert copy.error_code == ErrorCode.INVALID_UPDATE_VERSION
    other = replace(isr_data(harness, "t", before.isr), epoch_lineage=replace(lineage, start_offset=8))
    (again,) = harness.run(AlterPartitionRequest(2, harness.broker_epochs[2], (other,))).partitions
    assert again.error_code == ErrorCode.INVALID_REQUEST and harness.partition("t") == after


@pytest.mark.parametrize("lineage", [EpochLineage(0, -1, 0), EpochLineage(1, 1, 0), EpochLineage(1, -2, 0),
                                     EpochLineage(1, 0, -1)])
def test_a_lineage_of_another_epoch_or_out_of_range_is_invalid_request(lineage: EpochLineage) -> None:
    harness = three_brokers()
    fence(harness, 1)
    before = harness.partition("t")
    assert before.leader_epoch == 1
    data = replace(isr_data(harness, "t", before.isr), epoch_lineage=lineage)
    (result,) = harness.run(AlterPartitionRequest(2, harness.broker_epochs[2], (data,))).partitions
    assert result.error_code == ErrorCode.INVALID_REQUEST and harness.partition("t") == before


def test_a_lineage_with_an_isr_change_is_invalid_request() -> None:
    harness = three_brokers()
    fence(harness, 1)
    before = harness.partition("t")
    data = replace(isr_data(harness, "t", (2,)), epoch_lineage=EpochLineage(1, 0, 0))
    (result,) = harness.run(AlterPartitionRequest(2, harness.broker_epochs[2], (data,))).partitions
    assert result.error_code == ErrorCode.INVALID_REQUEST and harness.partition("t") == before


@pytest.mark.parametrize("new_isr", [(1, 2, 3), (1, 3)])
def test_requests_refused_for_other_reasons_change_nothing(new_isr: tuple[int, ...]) -> None:
    harness = three_brokers()
    before = harness.partition("t")
    data = isr_data(harness, "t", new_isr, (0,))  # one broker epoch for several members: INVALID_REQUEST
    (result,) = harness.run(AlterPartitionRequest(1, harness.broker_epochs[1], (data,))).partitions
    assert result.error_code == ErrorCode.INVALID_REQUEST
    assert harness.partition("t") == before


@pytest.mark.parametrize("broker_1", [(-1, 0, None), (0, 50, ((0, 0),))])
def test_recovery_keeps_records_below_a_lineage_whose_leader_knew_no_epoch_there(
        broker_1: tuple[int, int, tuple[tuple[int, int], ...] | None]) -> None:
    """Review of the epoch lineage: broker 2, truncated fully to the log start 50 that DeleteRecords
    set (an empty leader-epoch cache), led epoch 1 from 50 and committed epoch-1 records [50, 60)
    with broker 3, whose log-start checkpoint lagged its crash. Its lineage says only that older
    epochs end by 50 (`Leader` records previous epoch 0 for an empty cache): broker 3 leads."""
    harness = emptied(lineages={1: (0, 50)})
    last_epoch, log_end_offset, epochs = broker_1
    report(harness, 1, last_epoch, log_end_offset, epochs=epochs, log_start_offset=0)
    report(harness, 2, -1, 0)
    report(harness, 3, 1, 60, epochs=((0, 0), (1, 50)), log_start_offset=0)
    assert harness.partition("t").leader == 3
