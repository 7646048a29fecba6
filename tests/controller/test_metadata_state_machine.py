"""Random request sequences against the active controller keep every metadata invariant.

Goal: whatever brokers, clients and partition leaders send, in whatever order and timing, and
however often the controller loses office with proposals in flight, the committed metadata stays
valid (`check_invariants`), consistent over time (`MetadataHistory`), identical on a follower
that applies the records through the codec, restorable from its snapshot, and no partition stays
offline while an eligible leader exists.

Method: a hypothesis `RuleBasedStateMachine` drives a `Harness` (controller + follower). Rules are
the controller's requests with valid, stale and nonsense arguments, time passing with ticks, and
failovers that drop uncommitted proposals and skip log offsets (as Raft's control records do).
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from controller.metadata import ClusterMetadata, check_invariants
from controller.metadata_records import encode_record
from controller.quorum_controller import ControllerConfig
from tests.controller.metadata_harness import Harness
from wire.alter_partition import AlterPartitionData, AlterPartitionRequest
from wire.broker_lifecycle import BrokerHeartbeatRequest, BrokerRegistrationRequest, ControlledShutdownRequest
from wire.configs import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
)
from wire.error_codes import ErrorCode
from wire.sentinels import NO_LEADER
from wire.topics import CreatableTopic, CreateTopicsRequest, DeleteTopicsRequest

SESSION_MS = 1000
BROKER_IDS = st.integers(1, 5)
TOPIC_NAMES = st.sampled_from(["alpha", "beta", "gamma"])

CREATE_ERRORS = {
    ErrorCode.NONE,
    ErrorCode.TOPIC_ALREADY_EXISTS,
    ErrorCode.INVALID_REPLICATION_FACTOR,
    ErrorCode.INVALID_CONFIG,
    ErrorCode.INVALID_PARTITIONS,
}
HEARTBEAT_ERRORS = {ErrorCode.NONE, ErrorCode.BROKER_ID_NOT_REGISTERED, ErrorCode.STALE_BROKER_EPOCH}
ALTER_PARTITION_ERRORS = {
    ErrorCode.NONE,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.INVALID_UPDATE_VERSION,
    ErrorCode.INVALID_REQUEST,
    ErrorCode.INELIGIBLE_REPLICA,
    ErrorCode.NOT_CONTROLLER,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
}


class ControllerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.harness = Harness(seed=1, config=ControllerConfig(broker_session_timeout_ms=SESSION_MS))
        self.incarnation = 0

    @initialize(broker_count=st.integers(1, 4), partitions=st.integers(1, 4), replication_factor=st.integers(1, 3))
    def start_cluster(self, broker_count: int, partitions: int, replication_factor: int) -> None:
        """Most sequences start from a working cluster, so that rules meet topics and leaders."""
        for broker_id in range(1, broker_count + 1):
            self.harness.add_broker(broker_id, rack=f"r{broker_id % 2}")
        if replication_factor <= broker_count:
            self.harness.create_topic("alpha", partitions, replication_factor)

    # ---- brokers -------------------------------------------------------------------------------

    @rule(broker_id=BROKER_IDS, new_process=st.booleans(), rack=st.sampled_from([None, "r1", "r2"]))
    def register(self, broker_id: int, new_process: bool, rack: str | None) -> None:
        existing = self.harness.committed.broker(broker_id)
        if new_process or existing is None:
            self.incarnation += 1
        incarnation = f"process-{self.incarnation}" if new_process or existing is None else existing.incarnation_id
        request = BrokerRegistrationRequest(broker_id, incarnation, {"PLAINTEXT": f"b{broker_id}:9092"}, rack)
        response = self.harness.run(request)
        assert response.error_code in {ErrorCode.NONE, ErrorCode.DUPLICATE_BROKER_REGISTRATION}, response
        if response.error_code == ErrorCode.NONE:
            self.harness.broker_epochs[broker_id] = response.broker_epoch
            assert self.harness.committed.broker(broker_id).fenced

    @rule(
        broker_id=BROKER_IDS,
        lag=st.sampled_from([0, 0, 0, 1, 3]),
        want_fence=st.sampled_from([False, False, False, True]),
        want_shutdown=st.sampled_from([False, False, False, True]),
        stale=st.sampled_from([False, False, False, True]),
        advance_ms=st.integers(0, 400),
    )
    def heartbeat(
        self, broker_id: int, lag: int, want_fence: bool, want_shutdown: bool, stale: bool, advance_ms: int
    ) -> None:
        epoch = self.harness.broker_epochs.get(broker_id, 0) - (1 if stale else 0)
        offset = self.harness.committed.last_applied_offset - lag
        request = BrokerHeartbeatRequest(broker_id, epoch, offset, want_fence, want_shutdown)
        response = self.harness.run(request, advance_ms)
        assert response.error_code in HEARTBEAT_ERRORS, response
        broker = self.harness.committed.broker(broker_id)
        if response.error_code == ErrorCode.NONE:
            assert response.is_fenced == broker.fenced
            if response.should_shut_down:
                assert broker.fenced

    @rule(advance_ms=st.integers(0, 300))
    def heartbeat_every_unfenced_broker(self, advance_ms: int) -> None:
        self.harness.heartbeat_all(advance_ms)

    @rule(broker_id=BROKER_IDS)
    def controlled_shutdown(self, broker_id: int) -> None:
        epoch = self.harness.broker_epochs.get(broker_id, 0)
        request = ControlledShutdownRequest(broker_id, epoch, self.harness.committed.last_applied_offset)
        response = self.harness.run(request)
        assert response.error_code in HEARTBEAT_ERRORS, response

    @rule(advance_ms=st.integers(0, 2 * SESSION_MS))
    def tick(self, advance_ms: int) -> None:
        response = self.harness.tick(advance_ms)
        for broker_id in response.fenced_broker_ids:
            assert self.harness.committed.broker(broker_id).fenced

    # ---- topics and configs --------------------------------------------------------------------

    @rule(
        name=TOPIC_NAMES,
        partitions=st.integers(0, 4),
        replication_factor=st.integers(1, 4),
        unclean=st.booleans(),
        min_insync=st.integers(1, 3),
        validate_only=st.booleans(),
    )
    def create_topic(
        self, name: str, partitions: int, replication_factor: int, unclean: bool, min_insync: int, validate_only: bool
    ) -> None:
        configs = {"unclean.leader.election.enable": str(unclean).lower(), "min.insync.replicas": str(min_insync)}
        topic = CreatableTopic(name, partitions, replication_factor, configs=configs)
        (result,) = self.harness.run(CreateTopicsRequest((topic,), validate_only)).topics
        assert result.error_code in CREATE_ERRORS, result
        if result.error_code == ErrorCode.NONE and not validate_only:
            assert len(self.harness.committed.partitions(result.topic_id)) == partitions

    @rule(name=TOPIC_NAMES)
    def delete_topic(self, name: str) -> None:
        (result,) = self.harness.run(DeleteTopicsRequest((name,))).topics
        assert result.error_code in {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert self.harness.committed.topic_id(name) is None

    @rule(name=TOPIC_NAMES, unclean=st.booleans(), min_insync=st.integers(1, 3))
    def alter_configs(self, name: str, unclean: bool, min_insync: int) -> None:
        ops = (
            AlterableConfig("unclean.leader.election.enable", AlterConfigOp.SET, str(unclean).lower()),
            AlterableConfig("min.insync.replicas", AlterConfigOp.SET, str(min_insync)),
        )
        resource = AlterConfigsResource(ConfigResourceType.TOPIC, name, ops)
        (result,) = self.harness.run(IncrementalAlterConfigsRequest((resource,))).responses
        allowed = {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_CONFIG}
        assert result.error_code in allowed, result

    # ---- partition leaders ---------------------------------------------------------------------

    @precondition(lambda self: self.harness.committed.topic_names())
    @rule(data=st.data(), stale_leader_epoch=st.booleans(), stale_partition_epoch=st.booleans())
    def alter_partition(self, data: st.DataObject, stale_leader_epoch: bool, stale_partition_epoch: bool) -> None:
        """Mostly what a leader would send (its own id, current epochs, an ISR with itself); often not."""
        committed = self.harness.committed
        name = data.draw(st.sampled_from(committed.topic_names()))
        topic_id = committed.topic_id(name)
        count = len(committed.partitions(topic_id))
        index = data.draw(st.sampled_from([*range(count)] * 3 + [count]))
        state = committed.partition(topic_id, index)
        if state is None:
            replicas, leader, leader_epoch, partition_epoch = (1,), 1, 0, 0
        else:
            replicas, leader = state.replicas, state.leader
            leader_epoch = state.leader_epoch - (1 if stale_leader_epoch and data.draw(st.booleans()) else 0)
            partition_epoch = state.partition_epoch - (1 if stale_partition_epoch and data.draw(st.booleans()) else 0)
        members = data.draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True))
        if data.draw(st.sampled_from([True, True, True, False])):
            members = [leader, *[member for member in members if member != leader]]
        sender = data.draw(st.sampled_from([leader] * 3 + list(replicas)))
        partition = AlterPartitionData(topic_id, index, leader_epoch, partition_epoch, tuple(members))
        request = AlterPartitionRequest(sender, self.harness.broker_epochs.get(sender, 0), (partition,))
        response = self.harness.run(request)
        if response.error_code == ErrorCode.NONE:
            (result,) = response.partitions
            assert result.error_code in ALTER_PARTITION_ERRORS, result
            if result.error_code == ErrorCode.NONE:
                assert set(committed.partition(topic_id, index).isr) == set(members)
        else:
            assert response.error_code in {ErrorCode.BROKER_ID_NOT_REGISTERED, ErrorCode.STALE_BROKER_EPOCH}

    # ---- the controller loses office -----------------------------------------------------------

    @rule(name=TOPIC_NAMES, skipped_offsets=st.integers(0, 3), advance_ms=st.integers(0, 500))
    def failover_with_proposals_in_flight(self, name: str, skipped_offsets: int, advance_ms: int) -> None:
        """A new controller takes office; the old one's uncommitted proposals are lost, and Raft's
        own control records (a LeaderChange) take some offsets."""
        harness = self.harness
        lost = harness.controller.create_topics(CreateTopicsRequest((CreatableTopic(name, 2, 1),)), harness.now_ms)
        harness.controller.tick(harness.now_ms + SESSION_MS * 3)
        assert lost.base_offset > harness.committed.last_applied_offset
        harness.now_ms += advance_ms
        next_offset = harness.committed.last_applied_offset + 1 + skipped_offsets
        harness.controller.reset_to(harness.committed, harness.now_ms, next_offset)
        assert harness.controller.metadata == harness.committed
        assert harness.controller.next_offset == next_offset

    @rule(data=st.data(), name=TOPIC_NAMES, advance_ms=st.integers(0, 2 * SESSION_MS))
    def failover_after_a_partial_commit(self, data: st.DataObject, name: str, advance_ms: int) -> None:
        """Raft commits one record per entry, so a deposed controller's batch may commit in part:
        every prefix must be valid metadata, and the next controller's first tick must finish the
        elections the lost suffix would have made."""
        harness = self.harness
        harness.now_ms += advance_ms
        controller, now_ms = harness.controller, harness.now_ms
        brokers = harness.committed.brokers()
        kind = data.draw(st.sampled_from(["tick", "create", "shutdown", "reregister"]))
        if kind == "create" or not brokers:
            result = controller.create_topics(CreateTopicsRequest((CreatableTopic(name, 3, 2),)), now_ms)
        elif kind == "tick":
            result = controller.tick(now_ms)
        else:
            broker = data.draw(st.sampled_from(brokers))
            if kind == "shutdown":
                request = ControlledShutdownRequest(broker.broker_id, broker.broker_epoch, 0)
                result = controller.controlled_shutdown(request, now_ms)
            else:
                request = BrokerRegistrationRequest(broker.broker_id, broker.incarnation_id, dict(broker.endpoints))
                result = controller.register_broker(request, now_ms)
        kept = data.draw(st.integers(0, len(result.records)))
        for position, record in enumerate(result.records[:kept]):
            harness.committed.apply(result.base_offset + position, 4, encode_record(record))
            assert check_invariants(harness.committed) == []
        assert harness.history.observe("follower", harness.committed) == []
        next_offset = max(harness.committed.last_applied_offset + 1, result.base_offset + kept)
        controller.reset_to(harness.committed, now_ms, next_offset)
        for broker in harness.committed.brokers():
            harness.broker_epochs[broker.broker_id] = broker.broker_epoch
        harness.tick(0)

    # ---- invariants ----------------------------------------------------------------------------

    @invariant()
    def follower_agrees_and_snapshot_restores(self) -> None:
        committed = self.harness.committed
        assert committed == self.harness.controller.metadata
        restored = ClusterMetadata()
        restored.restore(committed.last_applied_offset, committed.snapshot())
        assert restored == committed

    @invariant()
    def no_partition_is_offline_while_an_eligible_leader_exists(self) -> None:
        committed = self.harness.committed
        for topic_id, index, state in committed.all_partitions():
            if state.leader != NO_LEADER:
                continue
            active = [replica for replica in state.replicas if committed.broker(replica).active]
            assert not [replica for replica in state.isr if replica in active], (topic_id, index, state)
            if committed.log_config(committed.topic_name(topic_id)).unclean_leader_election_enable:
                assert not active, (topic_id, index, state)

    @invariant()
    def fenced_and_shutting_down_brokers_lead_nothing(self) -> None:
        committed = self.harness.committed
        leaders = {state.leader for _, _, state in committed.all_partitions()} - {NO_LEADER}
        assert all(committed.broker(leader).active for leader in leaders)

    def teardown(self) -> None:
        self.harness.history.forget("follower")


ControllerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_random_request_sequences_keep_metadata_invariants = ControllerMachine.TestCase

