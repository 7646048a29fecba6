"""The classic replication failures as scripted scenarios (issue 4, DESIGN §6).

Each test states its goal, then drives a `Scenario` (the simulator with a calm network and no
dice): every step is checked against the invariants as in the random runs, `converge` heals the
cluster and runs the final checks (every acks=all record kept), and the test compares the story
(leader changes, ISR proposals, truncations, fencing) with the one Kafka's design predicts."""

from __future__ import annotations

from storage.config import LONG_MAX
from tests.sim.replication.messages import CONTROLLER_ID
from tests.sim.replication.scenario import Scenario
from wire.error_codes import ErrorCode

NONE = ErrorCode.NONE

STORY_ISR_SHRINKS_TO_LEADER = """\
broker 1: leader in epoch 0, ISR [1, 2, 3]
broker 3: follower of 1 in epoch 0, ISR [1, 2, 3]
broker 2: follower of 1 in epoch 0, ISR [1, 2, 3]
links 1 <-> 2 cut
links 1 <-> 3 cut
broker 1: proposes ISR [1]
broker 1: AlterPartition answer NONE ISR [1]
broker 1: leader in epoch 0, ISR [1]
broker 3: follower of 1 in epoch 0, ISR [1]
broker 2: follower of 1 in epoch 0, ISR [1]
node 1 isolated
broker 3: follower of -1 in epoch 1, ISR []
broker 2: follower of -1 in epoch 1, ISR []
links healed
broker 1: follower of -1 in epoch 1, ISR []
broker 1: leader in epoch 2, ISR [1]
broker 1: proposes lineage of epoch 2: after epoch 0, from offset 2
broker 3: follower of 1 in epoch 2, ISR [1]
broker 2: follower of 1 in epoch 2, ISR [1]
broker 1: leader in epoch 2, ISR [1]
broker 3: follower of 1 in epoch 2, ISR [1]
broker 1: AlterPartition answer NONE ISR [1]
broker 2: follower of 1 in epoch 2, ISR [1]
broker 1: proposes ISR [1, 2]
broker 3: follower of 1 in epoch 2, ISR [1, 2]
broker 1: leader in epoch 2, ISR [1, 2]
broker 2: follower of 1 in epoch 2, ISR [1, 2]
broker 1: AlterPartition answer NONE ISR [1, 2]
broker 1: proposes ISR [1, 2, 3]
broker 1: AlterPartition answer NONE ISR [1, 2, 3]
broker 3: follower of 1 in epoch 2, ISR [1, 2, 3]
broker 2: follower of 1 in epoch 2, ISR [1, 2, 3]
broker 1: leader in epoch 2, ISR [1, 2, 3]
""".splitlines()


def started(**overrides: object) -> Scenario:
    scenario = Scenario(**overrides)
    scenario.run_until(lambda: all(scenario.leader_id(broker) == 1 for broker in (1, 2, 3)))
    first = scenario.produce(acks=-1)
    assert first is not None and (first.error, first.base_offset) == (NONE, 0)
    scenario.run_for(50)  # followers learn the HW
    return scenario


def test_isr_shrinks_to_the_leader_then_the_leader_is_cut_off() -> None:
    """Goal: with the ISR down to the leader, an acks=all record (min.insync.replicas=1) lives only
    there; when the leader is cut off the partition must go offline rather than elect a replica
    without it (no unclean election), and come back with it: fenced, the leader leaves the ISR for
    the ELR (KIP-966), from which it is elected again when it returns."""
    scenario = started(min_insync_replicas=1)
    scenario.cut(1, 2)
    scenario.cut(1, 3)
    # Followers at the leader's LEO stay in sync however long they are silent (Kafka's isCaughtUp);
    # this record puts them behind, and replica.lag.time.max.ms later the leader shrinks the ISR.
    acked = scenario.produce(acks=-1)
    assert acked is not None and acked.error == NONE
    assert scenario.state().isr == (1,)
    scenario.isolate(1)
    scenario.run_until(lambda: scenario.state().leader == -1)
    assert (scenario.state().isr, scenario.state().elr) == ((), (1,)), "the last ISR member stays eligible (ELR)"
    scenario.run_for(500)
    assert scenario.state().leader == -1, "no replica without the record may lead"
    scenario.reconnect()
    scenario.run_until(lambda: scenario.state().leader == 1)
    scenario.converge()
    assert acked.base_offset in scenario.values(2)
    assert scenario.values(2) == scenario.values(1) == scenario.values(3)
    assert scenario.story == STORY_ISR_SHRINKS_TO_LEADER, "\n".join(scenario.story)


def test_acks_1_leader_dies_before_replicating_and_returns_truncated() -> None:
    """Goal: a record the leader appended with acks=1 and never replicated is not kept when the
    leader dies and a follower takes over; the old leader, back as a follower, truncates it
    (KIP-101: to the end offset of its epoch in the new leader's log, not its HW)."""
    scenario = started()
    scenario.cut(1, 2)
    scenario.cut(1, 3)
    unreplicated = scenario.produce(acks=1)
    assert unreplicated is not None and (unreplicated.error, unreplicated.base_offset) == (NONE, 1)
    scenario.crash(1)
    scenario.reconnect()
    scenario.run_until(lambda: scenario.state().leader == 2 and scenario.leader_id(2) == 2)
    replacement = scenario.produce(acks=-1)
    assert replacement is not None and (replacement.error, replacement.base_offset) == (NONE, 1)
    scenario.restart(1)
    scenario.run_until(lambda: scenario.leader_id(1) == 2 and scenario.values(1) == scenario.values(2))
    scenario.converge()
    truncations = [line for line in scenario.story if "Truncated" in line]
    assert truncations == ["broker 1: Truncated(Truncated(end_offset=1, high_watermark_before=1))"], scenario.story


def test_two_failovers_in_a_row_each_old_leader_truncates() -> None:
    """Goal (KIP-279): leader 1 appends B at offset 1 alone and dies; leader 2 (epoch 1) appends C
    at offset 1 alone and dies; leader 3 (epoch 2) holds neither. Both old leaders come back as
    followers and truncate their own unreplicated record, though each diverged in an epoch the new
    leader does not have."""
    scenario = started()
    scenario.cut(1, 2)
    scenario.cut(1, 3)
    assert scenario.produce(acks=1).error == NONE  # B on broker 1 alone
    scenario.crash(1)
    scenario.run_until(lambda: scenario.state().leader == 2 and scenario.leader_id(2) == 2)
    scenario.cut(2, 3)
    c_record = scenario.produce(acks=1)
    assert c_record is not None and (c_record.error, c_record.base_offset) == (NONE, 1)  # C on broker 2 alone
    scenario.crash(2)
    scenario.run_until(lambda: scenario.state().leader == 3 and scenario.leader_id(3) == 3)
    assert scenario.state().leader_epoch >= 2
    scenario.reconnect()
    d_record = scenario.produce(acks=-1)
    assert d_record is not None and (d_record.error, d_record.base_offset) == (NONE, 1)
    scenario.restart(1)
    scenario.restart(2)
    scenario.converge()
    truncations = sorted(line for line in scenario.story if "Truncated" in line)
    assert truncations == [
        "broker 1: Truncated(Truncated(end_offset=1, high_watermark_before=1))",
        "broker 2: Truncated(Truncated(end_offset=1, high_watermark_before=1))",
    ], scenario.story


def test_zombie_old_leader_is_fenced() -> None:
    """Goal: a leader paused past its session (a long GC) is replaced; when it wakes it still thinks
    it leads the old epoch. A client with stale metadata can write to it with acks=1, but never
    with acks=all (its ISR still counts the new leader, which no longer fetches from it), and a
    follower stuck in the old epoch that keeps fetching from it is fenced once the zombie learns.
    Every zombie record is truncated after healing."""
    scenario = started()
    scenario.cut(3, CONTROLLER_ID)  # broker 3 will not hear of the new epoch
    scenario.pause(1, 400)
    scenario.run_until(lambda: scenario.state().leader == 2 and scenario.leader_id(2) == 2)
    new_leader_record = scenario.produce(acks=-1)
    assert new_leader_record is not None and new_leader_record.error == NONE
    scenario.run_until(lambda: scenario.brokers[1].paused_until_ms <= scenario.now_ms)
    scenario.cut(1, CONTROLLER_ID)  # the zombie keeps its old view for a while
    zombie_write = scenario.produce(acks=1, leader_id=1)
    assert zombie_write is not None and zombie_write.error == NONE, "acks=1 on a zombie is accepted (Kafka too)"
    zombie_all = scenario.produce(acks=-1, leader_id=1)
    assert zombie_all is not None and zombie_all.error != NONE, zombie_all
    scenario.reconnect()
    scenario.cut(3, CONTROLLER_ID)
    scenario.run_until(lambda: scenario.leader_id(1) == 2)
    scenario.run_until(lambda: any("FENCED_LEADER_EPOCH" in line for line in scenario.story))
    scenario.converge()
    assert scenario.values(1) == scenario.values(2) == scenario.values(3)
    story = scenario.story
    assert "broker 1: answers a fetch FENCED_LEADER_EPOCH" in story, story
    assert "broker 1: AlterPartition answer FENCED_LEADER_EPOCH ISR []" in story, "the zombie's ISR shrink is refused"
    truncations = sorted(line for line in story if "Truncated" in line)
    assert truncations == [
        "broker 1: Truncated(Truncated(end_offset=1, high_watermark_before=1))",
        "broker 3: Truncated(Truncated(end_offset=1, high_watermark_before=1))",
    ], "the zombie and the follower that fetched from it drop the zombie's record"


def test_a_crashed_active_controller_is_replaced_before_the_fetch_timeout() -> None:
    """Goal (README, "Failover after kill -9"; controller/raft.py, "A refused leader"): when the
    active controller's process dies, its host closes the followers' fetch connections and refuses
    their retries, so a follower stands at once instead of waiting out the fetch timeout; a new
    controller takes office and the partition takes acks=all writes again, nothing lost."""
    scenario = started()
    old_id = scenario.quorum.active_controller()
    assert old_id is not None
    crashed_ms = scenario.now_ms
    scenario.crash_controller(old_id)
    scenario.run_until(lambda: scenario.quorum.active_controller() not in (None, old_id))
    failover_ms = scenario.now_ms - crashed_ms
    assert failover_ms < scenario.options.fetch_timeout_ms, f"a new controller after {failover_ms} ms"
    assert scenario.result.refused_leader_fetches > 0
    acked = scenario.produce(acks=-1)
    assert acked is not None and acked.error == NONE
    scenario.converge()


def test_last_replica_standing_keeps_acked_records() -> None:
    """Goal (issue 11, KIP-966): RF=3, min.insync.replicas=2, three records acked at offsets 0..2
    and replicated to all three. Both followers lose contact with the controller only (they keep
    fetching from the leader): they are fenced and the ISR shrinks to the leader alone. The leader
    loses power with its unflushed tail. The acked records live on the followers, so one of them
    must lead next: the partition waits offline until a follower the controller kept eligible (ELR)
    is back, and no offset is reused with other bytes."""
    scenario = Scenario(min_insync_replicas=2, flush_messages=LONG_MAX, tear_probability=0.0)
    scenario.run_until(lambda: all(scenario.leader_id(broker) == 1 for broker in (1, 2, 3)))
    for offset in range(3):
        acked = scenario.produce(acks=-1)
        assert acked is not None and (acked.error, acked.base_offset) == (NONE, offset), acked
    scenario.run_for(50)  # followers learn the HW
    records = scenario.records(2)
    assert sorted(records) == [0, 1, 2] and scenario.records(3) == records
    scenario.cut(2, CONTROLLER_ID)
    scenario.run_until(lambda: scenario.state().isr == (1, 3))
    scenario.cut(3, CONTROLLER_ID)
    scenario.run_until(lambda: scenario.state().isr == (1,))
    assert scenario.state().elr == (3,), "the last follower to leave the ISR holds every acked record"
    scenario.crash(1)  # power loss: the leader's unflushed tail, offsets 0..2, is gone
    scenario.run_for(300)
    scenario.restart(1)
    scenario.run_until(lambda: scenario.brokers[1].broker_epoch >= 0)
    scenario.run_for(300)
    assert scenario.state().leader == -1, "the restarted leader lost the acked records: it may not lead"
    assert 1 not in scenario.state().elr, "an unclean restart ends eligibility"
    scenario.reconnect()
    scenario.run_until(lambda: scenario.state().leader != -1)
    assert (scenario.state().leader, scenario.state().isr) == (3, (3,)), "the ELR member leads, not broker 2"
    scenario.converge()
    for broker in (1, 2, 3):
        kept = scenario.records(broker)
        assert {offset: kept.get(offset) for offset in records} == records, f"broker {broker} lost acked records"


def test_a_paused_broker_heartbeats_again_after_it_resumes() -> None:
    """Goal: a broker whose heartbeat came due while it was paused (a stopped process, a long GC)
    sends it once it resumes, as a node's overdue timer fires then. The simulator dropped the
    lifecycle's tick that came due in the pause and never armed it again: unless newer metadata
    happened to reach the broker, it never heartbeated again and stayed fenced (liveness failure
    'broker 1 is not up and active', replication sim seed 731204789 on the options of 69c728e).
    Broker 2 is cut off from the controllers, so no answer and no metadata wakes its lifecycle."""
    scenario = started()
    broker = scenario.brokers[2]
    scenario.cut(2, CONTROLLER_ID)
    scenario.run_until(lambda: broker.lifecycle_tick_at_ms is not None and not any(
        isinstance(context, tuple) and context[0] == "lifecycle" for _, context in broker.controller_requests.values()))
    last_sent = broker.lifecycle_correlation_id
    scenario.pause(2, 300)
    scenario.run_for(400)
    assert broker.lifecycle_correlation_id != last_sent, "the lifecycle sent nothing after the pause"
    scenario.converge()
