"""QuorumController: every request, every error it can answer, fencing, elections, controlled shutdown.

Method: a `Harness` joins the controller to a follower's metadata through the record codec; each
test drives requests with explicit `now_ms` and checks responses, records and the committed
state. The harness also checks, after every step, that follower and controller agree and that
the metadata invariants hold.
"""

from __future__ import annotations

import random

import pytest

from controller.controller_api import ControllerTick
from controller.metadata import ClusterMetadata, PartitionRegistration
from controller.metadata_records import (
    BrokerRegistrationChange,
    ConfigChange,
    FenceBroker,
    Partition,
    PartitionChange,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnfenceBroker,
    encode_record,
)
from controller.quorum_controller import ControllerConfig, QuorumController
from tests.controller.metadata_harness import Harness
from wire.alter_partition import AlterPartitionData, AlterPartitionRequest, EpochLineage
from wire.broker_lifecycle import BrokerHeartbeatRequest, BrokerRegistrationRequest, ControlledShutdownRequest
from wire.configs import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
)
from wire.error_codes import ErrorCode
from wire.producer_ids import AllocateProducerIdsRequest
from wire.sentinels import NO_LEADER
from wire.topics import (
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)

SESSION_MS = 9000


def cluster(broker_count: int = 3, seed: int = 0, **config: int) -> Harness:
    harness = Harness(seed, ControllerConfig(**config))
    for broker_id in range(1, broker_count + 1):
        harness.add_broker(broker_id)
    return harness


def create(harness: Harness, *topics: CreatableTopic, validate_only: bool = False):
    return harness.run(CreateTopicsRequest(tuple(topics), validate_only)).topics


def alter_configs(harness: Harness, name: str, *ops: AlterableConfig, validate_only: bool = False):
    resource = AlterConfigsResource(ConfigResourceType.TOPIC, name, ops)
    (result,) = harness.run(IncrementalAlterConfigsRequest((resource,), validate_only)).responses
    return result


def alter_isr(harness: Harness, name: str, new_isr: tuple[int, ...], index: int = 0, **overrides):
    """An AlterPartition from the current leader at the current epochs, unless overridden."""
    state = harness.partition(name, index)
    fields = {
        "topic_id": harness.committed.topic_id(name),
        "partition_index": index,
        "leader_epoch": state.leader_epoch,
        "partition_epoch": state.partition_epoch,
        "new_isr": new_isr,
    }
    broker_id = overrides.pop("broker_id", state.leader)
    broker_epoch = overrides.pop("broker_epoch", harness.broker_epochs.get(broker_id, 0))
    fields.update(overrides)
    return harness.run(AlterPartitionRequest(broker_id, broker_epoch, (AlterPartitionData(**fields),)))


# ---- CreateTopics ----------------------------------------------------------------------------------


def test_create_topic_writes_topic_and_partitions_with_spread_leaders() -> None:
    harness = cluster(3)
    (result,) = create(harness, CreatableTopic("orders", 6, 3, configs={"retention.ms": "1000"}))
    assert result.error_code == ErrorCode.NONE
    assert len(result.topic_id) == 22
    assert (result.num_partitions, result.replication_factor) == (6, 3)
    assert harness.committed.topic_configs("orders") == {"retention.ms": "1000"}
    leaders = []
    for index in range(6):
        state = harness.partition("orders", index)
        assert sorted(state.replicas) == [1, 2, 3]
        assert state.isr == state.replicas
        assert state.leader == state.replicas[0]
        assert (state.leader_epoch, state.partition_epoch) == (0, 0)
        leaders.append(state.leader)
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]


def test_create_topic_records_are_topic_then_partitions_in_order() -> None:
    harness = cluster(2)
    result = harness.controller.create_topics(CreateTopicsRequest((CreatableTopic("t", 2, 2),)), 0)
    assert [type(record) for record in result.records] == [Topic, Partition, Partition]
    assert [record.partition for record in result.records[1:]] == [0, 1]
    harness.commit(result)


def test_create_topic_uses_configured_defaults() -> None:
    harness = cluster(3, num_partitions=4, default_replication_factor=2)
    (result,) = create(harness, CreatableTopic("t"))
    assert (result.num_partitions, result.replication_factor) == (4, 2)
    assert len(harness.committed.partitions(result.topic_id)) == 4
    assert len(harness.partition("t").replicas) == 2


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/name", "ümlaut", "tab\t"])
def test_illegal_topic_names_are_invalid_topic_exception(name: str) -> None:
    harness = cluster(1)
    (result,) = create(harness, CreatableTopic(name, 1, 1))
    assert result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, result
    assert result.topic_id is None
    assert harness.committed.topic_names() == []


@pytest.mark.parametrize("name", ["a" * 249, "a.b_c-D9", "...", "_"])
def test_legal_topic_names_are_accepted(name: str) -> None:
    harness = cluster(1)
    (result,) = create(harness, CreatableTopic(name, 1, 1))
    assert result.error_code == ErrorCode.NONE, result


def test_topic_names_differing_only_in_dot_and_underscore_collide() -> None:
    harness = cluster(1)
    harness.create_topic("metrics.cpu")
    (result,) = create(harness, CreatableTopic("metrics_cpu", 1, 1))
    assert result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "collides" in result.error_message


def test_existing_topic_is_topic_already_exists() -> None:
    harness = cluster(1)
    harness.create_topic("t")
    (result,) = create(harness, CreatableTopic("t", 1, 1))
    assert result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_second_create_before_the_first_commits_is_already_exists() -> None:
    """The controller validates against its own uncommitted records, not only committed state."""
    harness = cluster(1)
    first = harness.controller.create_topics(CreateTopicsRequest((CreatableTopic("t", 1, 1),)), 0)
    second = harness.controller.create_topics(CreateTopicsRequest((CreatableTopic("t", 1, 1),)), 0)
    assert first.response.topics[0].error_code == ErrorCode.NONE
    assert second.response.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert second.records == ()
    assert second.base_offset == first.base_offset + len(first.records)
    assert harness.committed.topic_id("t") is None
    harness.commit(first)
    harness.commit(second)


def test_name_given_twice_in_one_request_is_invalid_request() -> None:
    harness = cluster(1)
    results = create(harness, CreatableTopic("t", 1, 1), CreatableTopic("t", 2, 1), CreatableTopic("u", 1, 1))
    assert [result.error_code for result in results] == [
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NONE,
    ]
    assert harness.committed.topic_names() == ["u"]


@pytest.mark.parametrize("count", [0, -2, 10_001])
def test_partition_count_out_of_range_is_invalid_partitions(count: int) -> None:
    harness = cluster(1)
    (result,) = create(harness, CreatableTopic("t", count, 1))
    assert result.error_code == ErrorCode.INVALID_PARTITIONS
    assert harness.committed.topic_names() == []


@pytest.mark.parametrize("factor", [0, -3, 4])
def test_replication_factor_out_of_range_is_invalid_replication_factor(factor: int) -> None:
    harness = cluster(3)
    (result,) = create(harness, CreatableTopic("t", 1, factor))
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_fenced_brokers_do_not_count_for_the_replication_factor() -> None:
    harness = cluster(3)
    harness.heartbeat(3, want_fence=True)
    (result,) = create(harness, CreatableTopic("t", 1, 3))
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "only 2 broker(s)" in result.error_message
    (result,) = create(harness, CreatableTopic("t", 3, 2))
    assert result.error_code == ErrorCode.NONE
    assert all(3 not in state.replicas for state in harness.committed.partitions(result.topic_id))


@pytest.mark.parametrize(
    "configs",
    [{"no.such.key": "1"}, {"retention.ms": "soon"}, {"segment.bytes": "1"}, {"cleanup.policy": "shred"}],
)
def test_bad_configs_are_invalid_config(configs: dict[str, str]) -> None:
    harness = cluster(1)
    (result,) = create(harness, CreatableTopic("t", 1, 1, configs=configs))
    assert result.error_code == ErrorCode.INVALID_CONFIG
    assert harness.committed.topic_names() == []


def test_min_insync_replicas_above_replication_factor_is_invalid_config() -> None:
    harness = cluster(3)
    (result,) = create(harness, CreatableTopic("t", 1, 2, configs={"min.insync.replicas": "3"}))
    assert result.error_code == ErrorCode.INVALID_CONFIG
    assert "min.insync.replicas=3" in result.error_message
    (result,) = create(harness, CreatableTopic("t", 1, 3, configs={"min.insync.replicas": "3"}))
    assert result.error_code == ErrorCode.NONE


def test_config_values_are_stored_as_kafka_strings() -> None:
    harness = cluster(1)
    configs = {"unclean.leader.election.enable": True, "retention.ms": 5000}
    harness.create_topic("t", configs=configs)
    assert harness.committed.topic_configs("t") == {"unclean.leader.election.enable": "true", "retention.ms": "5000"}


def test_validate_only_checks_but_writes_nothing() -> None:
    harness = cluster(2)
    result = harness.controller.create_topics(CreateTopicsRequest((CreatableTopic("t", 3, 2),), True), 0)
    assert result.records == ()
    (topic,) = result.response.topics
    assert (topic.error_code, topic.topic_id, topic.num_partitions, topic.replication_factor) == (
        ErrorCode.NONE,
        None,
        3,
        2,
    )
    harness.commit(result)
    (bad,) = create(harness, CreatableTopic("t", 1, 5), validate_only=True)
    assert bad.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    harness.create_topic("t", 3, 2)


def test_one_bad_topic_does_not_fail_the_others() -> None:
    harness = cluster(1)
    results = create(harness, CreatableTopic("good", 1, 1), CreatableTopic("bad", 0, 1), CreatableTopic("ok", 2, 1))
    assert [result.error_code for result in results] == [ErrorCode.NONE, ErrorCode.INVALID_PARTITIONS, ErrorCode.NONE]
    assert harness.committed.topic_names() == ["good", "ok"]


def test_manual_assignment_is_used_and_fenced_replicas_start_outside_the_isr() -> None:
    harness = cluster(3)
    harness.heartbeat(1, want_fence=True)
    harness.create_topic("t", -1, -1, assignments={0: (1, 2), 1: (3, 1)})
    lineage = EpochLineage(0, -1, 0)  # every log starts empty
    assert harness.partition("t", 0) == PartitionRegistration((1, 2), (2,), 2, 0, 0, epoch_lineage=lineage)
    assert harness.partition("t", 1).replicas == (3, 1)
    assert harness.partition("t", 1).isr == (3,)
    assert harness.partition("t", 1).leader == 3


@pytest.mark.parametrize(
    ("assignments", "code"),
    [
        ({0: (1, 2), 2: (2, 3)}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # gap in partition indices
        ({0: (1, 1)}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # broker twice
        ({0: (1, 9)}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # unknown broker
        ({0: (1, 2), 1: (3,)}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # replica counts differ
        ({0: ()}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # no replicas
        ({}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # no partitions
    ],
)
def test_bad_manual_assignments_are_rejected(assignments: dict[int, tuple[int, ...]], code: ErrorCode) -> None:
    harness = cluster(3)
    (result,) = create(harness, CreatableTopic("t", assignments=assignments))
    assert result.error_code == code, result


def test_manual_assignment_on_fenced_brokers_only_is_invalid_replica_assignment() -> None:
    harness = cluster(3)
    harness.heartbeat(1, want_fence=True)
    harness.heartbeat(2, want_fence=True)
    (result,) = create(harness, CreatableTopic("t", assignments={0: (1, 2)}))
    assert result.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "fenced" in result.error_message


def test_manual_assignment_with_a_partition_count_is_invalid_request() -> None:
    harness = cluster(2)
    (result,) = create(harness, CreatableTopic("t", 1, -1, assignments={0: (1, 2)}))
    assert result.error_code == ErrorCode.INVALID_REQUEST


def test_topic_ids_and_placement_come_from_the_injected_generator() -> None:
    def run(seed: int) -> tuple[str, tuple[tuple[int, ...], ...]]:
        harness = cluster(5, seed=seed)
        topic_id = harness.create_topic("t", 10, 3)
        return topic_id, tuple(state.replicas for state in harness.committed.partitions(topic_id))

    assert run(7) == run(7)
    assert run(7) != run(8)


@pytest.mark.parametrize("seed", range(5))
def test_placement_spreads_each_partition_over_the_registered_racks(seed: int) -> None:
    """Goal: racks given at registration reach placement. Method: brokers 1-4 register (and are
    unfenced) with racks a, a, b, b; a topic of 4 partitions and replication factor 2 is created; each
    partition's replicas are on two distinct brokers in both racks, whatever the seed draws."""
    harness = Harness(seed, ControllerConfig())
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    for broker_id, rack in racks.items():
        harness.add_broker(broker_id, rack)
    assert {broker.broker_id: broker.rack for broker in harness.committed.brokers()} == racks
    topic_id = harness.create_topic("t", 4, 2)
    partitions = harness.committed.partitions(topic_id)
    assert len(partitions) == 4
    for state in partitions:
        assert len(set(state.replicas)) == 2, state
        assert {racks[broker_id] for broker_id in state.replicas} == {"a", "b"}, state


def test_topic_ids_are_kafka_style_and_unique() -> None:
    harness = cluster(1)
    ids = {harness.create_topic(f"t{number}") for number in range(50)}
    assert len(ids) == 50
    assert all(len(topic_id) == 22 and not topic_id.startswith("-") and "=" not in topic_id for topic_id in ids)


# ---- DeleteTopics ----------------------------------------------------------------------------------


def test_delete_topics_by_name_and_by_id() -> None:
    harness = cluster(1)
    first = harness.create_topic("first", 2)
    second = harness.create_topic("second")
    result = harness.controller.delete_topics(DeleteTopicsRequest(("first",), (second,)), 0)
    assert result.records == (RemoveTopic(first), RemoveTopic(second))
    response = harness.commit(result)
    assert [(topic.name, topic.error_code) for topic in response.topics] == [
        ("first", ErrorCode.NONE),
        ("second", ErrorCode.NONE),
    ]
    assert harness.committed.topic_names() == []
    assert harness.committed.partitions(first) == ()


def test_delete_unknown_topics() -> None:
    harness = cluster(1)
    response = harness.run(DeleteTopicsRequest(("nope",), ("AAAAAAAAAAAAAAAAAAAAAA",)))
    assert [topic.error_code for topic in response.topics] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
    ]


def test_delete_same_topic_twice_in_one_request_is_invalid_request() -> None:
    harness = cluster(1)
    harness.create_topic("t")
    response = harness.run(DeleteTopicsRequest(("t", "t")))
    assert [topic.error_code for topic in response.topics] == [ErrorCode.INVALID_REQUEST] * 2
    assert harness.committed.topic_names() == ["t"]


def test_delete_before_the_first_delete_commits_is_unknown() -> None:
    harness = cluster(1)
    harness.create_topic("t")
    first = harness.controller.delete_topics(DeleteTopicsRequest(("t",)), 0)
    second = harness.controller.delete_topics(DeleteTopicsRequest(("t",)), 0)
    assert second.response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    harness.commit(first)
    harness.commit(second)


def test_recreated_topic_gets_a_new_id_and_fresh_configs() -> None:
    harness = cluster(1)
    old = harness.create_topic("t", configs={"retention.ms": "5"})
    harness.run(DeleteTopicsRequest(("t",)))
    new = harness.create_topic("t")
    assert new != old
    assert harness.committed.topic_configs("t") == {}


# ---- CreatePartitions --------------------------------------------------------------------------------


def add_partitions(harness: Harness, *topics: CreatePartitionsTopic, validate_only: bool = False):
    return harness.run(CreatePartitionsRequest(tuple(topics), validate_only)).results


def test_create_partitions_appends_new_partitions_with_the_topics_replication_factor() -> None:
    harness = cluster(3)
    topic_id = harness.create_topic("t", 2, 2)
    before = harness.committed.partitions(topic_id)
    (result,) = add_partitions(harness, CreatePartitionsTopic("t", 5))
    assert result.error_code == ErrorCode.NONE, result
    partitions = harness.committed.partitions(topic_id)
    assert partitions[:2] == before
    assert len(partitions) == 5
    for state in partitions[2:]:
        assert len(state.replicas) == 2
        assert state.isr == state.replicas
        assert state.leader == state.replicas[0]


def test_create_partitions_takes_a_manual_assignment_of_the_new_partitions() -> None:
    harness = cluster(3)
    topic_id = harness.create_topic("t", 1, 2)
    (result,) = add_partitions(harness, CreatePartitionsTopic("t", 3, ((3, 1), (2, 3))))
    assert result.error_code == ErrorCode.NONE, result
    assert [state.replicas for state in harness.committed.partitions(topic_id)[1:]] == [(3, 1), (2, 3)]


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        (CreatePartitionsTopic("t", 2), ErrorCode.INVALID_PARTITIONS),  # not more than now
        (CreatePartitionsTopic("t", 1), ErrorCode.INVALID_PARTITIONS),  # fewer
        (CreatePartitionsTopic("nope", 4), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (CreatePartitionsTopic("t", 4, ((1, 2),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # one of two given
        (CreatePartitionsTopic("t", 3, ((1,),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # factor differs
        (CreatePartitionsTopic("t", 3, ((1, 9),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # unknown broker
    ],
)
def test_bad_create_partitions_are_refused_and_write_nothing(topic: CreatePartitionsTopic, code: ErrorCode) -> None:
    harness = cluster(3)
    topic_id = harness.create_topic("t", 2, 2)
    (result,) = add_partitions(harness, topic)
    assert result.error_code == code, result
    assert len(harness.committed.partitions(topic_id)) == 2


def test_create_partitions_needs_as_many_usable_brokers_as_the_replication_factor() -> None:
    harness = cluster(3)
    harness.create_topic("t", 1, 3)
    harness.heartbeat(3, want_fence=True)
    (result,) = add_partitions(harness, CreatePartitionsTopic("t", 2))
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR, result


def test_create_partitions_validate_only_writes_nothing() -> None:
    harness = cluster(2)
    topic_id = harness.create_topic("t", 1, 2)
    (result,) = add_partitions(harness, CreatePartitionsTopic("t", 4), validate_only=True)
    assert result.error_code == ErrorCode.NONE
    assert len(harness.committed.partitions(topic_id)) == 1


# ---- IncrementalAlterConfigs -----------------------------------------------------------------------


def test_set_and_delete_configs_write_config_changes() -> None:
    harness = cluster(1)
    harness.create_topic("t", configs={"retention.ms": "5", "segment.ms": "60000"})
    ops = (
        AlterableConfig("retention.ms", AlterConfigOp.SET, "10"),
        AlterableConfig("segment.ms", AlterConfigOp.DELETE),
        AlterableConfig("flush.ms", AlterConfigOp.SET, "100"),
    )
    result = harness.controller.incremental_alter_configs(
        IncrementalAlterConfigsRequest((AlterConfigsResource(ConfigResourceType.TOPIC, "t", ops),)), 0
    )
    assert result.records == (
        ConfigChange("t", "flush.ms", "100"),
        ConfigChange("t", "retention.ms", "10"),
        ConfigChange("t", "segment.ms", None),
    )
    harness.commit(result)
    assert harness.committed.topic_configs("t") == {"retention.ms": "10", "flush.ms": "100"}
    assert harness.committed.log_config("t").retention_ms == 10


def test_replace_makes_the_given_configs_the_whole_set_of_overrides() -> None:
    """Kafka's legacy AlterConfigs: keys left out are deleted, in the same records."""
    harness = cluster(1)
    harness.create_topic("t", configs={"retention.ms": "5", "segment.ms": "60000"})
    resource = AlterConfigsResource(ConfigResourceType.TOPIC, "t", (AlterableConfig("retention.ms", AlterConfigOp.SET,
                                                                                     "10"),), replace=True)
    result = harness.controller.incremental_alter_configs(IncrementalAlterConfigsRequest((resource,)), 0)
    assert result.records == (ConfigChange("t", "retention.ms", "10"), ConfigChange("t", "segment.ms", None))
    harness.commit(result)
    assert harness.committed.topic_configs("t") == {"retention.ms": "10"}


def test_append_and_subtract_edit_list_configs() -> None:
    harness = cluster(1)
    harness.create_topic("t")
    result = alter_configs(harness, "t", AlterableConfig("cleanup.policy", AlterConfigOp.APPEND, "compact"))
    assert result.error_code == ErrorCode.NONE
    assert harness.committed.topic_configs("t")["cleanup.policy"] == "delete,compact"
    result = alter_configs(harness, "t", AlterableConfig("cleanup.policy", AlterConfigOp.SUBTRACT, "delete"))
    assert result.error_code == ErrorCode.NONE
    assert harness.committed.log_config("t").compact
    assert not harness.committed.log_config("t").delete


@pytest.mark.parametrize(
    ("op", "code"),
    [
        (AlterableConfig("retention.ms", AlterConfigOp.SET, "never"), ErrorCode.INVALID_CONFIG),
        (AlterableConfig("no.such.key", AlterConfigOp.SET, "1"), ErrorCode.INVALID_CONFIG),
        (AlterableConfig("retention.ms", AlterConfigOp.SET, None), ErrorCode.INVALID_CONFIG),
        (AlterableConfig("retention.ms", AlterConfigOp.APPEND, "5"), ErrorCode.INVALID_CONFIG),
        (AlterableConfig("cleanup.policy", AlterConfigOp.SUBTRACT, "delete"), ErrorCode.INVALID_CONFIG),
        (AlterableConfig("min.insync.replicas", AlterConfigOp.SET, "2"), ErrorCode.INVALID_CONFIG),
    ],
)
def test_bad_config_alterations_change_nothing(op: AlterableConfig, code: ErrorCode) -> None:
    harness = cluster(1)
    harness.create_topic("t", configs={"retention.ms": "5"})
    result = alter_configs(harness, "t", AlterableConfig("flush.ms", AlterConfigOp.SET, "1"), op)
    assert result.error_code == code, result
    assert harness.committed.topic_configs("t") == {"retention.ms": "5"}


def test_alter_configs_of_unknown_topic_broker_resource_and_repeated_key() -> None:
    harness = cluster(1)
    harness.create_topic("t")
    assert alter_configs(harness, "nope").error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    twice = (AlterableConfig("flush.ms", AlterConfigOp.SET, "1"), AlterableConfig("flush.ms", AlterConfigOp.DELETE))
    assert alter_configs(harness, "t", *twice).error_code == ErrorCode.INVALID_REQUEST
    broker = AlterConfigsResource(ConfigResourceType.BROKER, "1", ())
    (result,) = harness.run(IncrementalAlterConfigsRequest((broker,))).responses
    assert result.error_code == ErrorCode.INVALID_REQUEST
    resource = AlterConfigsResource(ConfigResourceType.TOPIC, "t", ())
    response = harness.run(IncrementalAlterConfigsRequest((resource, resource)))
    assert [result.error_code for result in response.responses] == [ErrorCode.INVALID_REQUEST] * 2


def test_alter_configs_of_a_topic_whose_partitions_never_committed() -> None:
    """A creation cut short by a failover can leave a topic without partitions; altering its
    configs must still work (there is no replication factor to check min.insync.replicas against)."""
    harness = cluster(1)
    offset = harness.committed.last_applied_offset + 1
    harness.committed.apply(offset, 1, encode_record(Topic("t", "ECfE0cOGu8TNYT4w2PFq3w", {})))
    harness.controller.reset_to(harness.committed, harness.now_ms, offset + 1)
    result = alter_configs(harness, "t", AlterableConfig("min.insync.replicas", AlterConfigOp.SET, "3"))
    assert result.error_code == ErrorCode.NONE
    assert harness.committed.topic_configs("t") == {"min.insync.replicas": "3"}


def test_alter_configs_validate_only_writes_nothing() -> None:
    harness = cluster(1)
    harness.create_topic("t")
    result = alter_configs(harness, "t", AlterableConfig("flush.ms", AlterConfigOp.SET, "1"), validate_only=True)
    assert result.error_code == ErrorCode.NONE
    assert harness.committed.topic_configs("t") == {}


# ---- BrokerRegistration ----------------------------------------------------------------------------


def test_registration_epoch_is_the_record_offset_and_the_broker_starts_fenced() -> None:
    harness = Harness()
    result = harness.controller.register_broker(BrokerRegistrationRequest(4, "inc", {"PLAINTEXT": "h:1"}, "r1"), 0)
    assert result.records == (RegisterBroker(4, "inc", {"PLAINTEXT": "h:1"}, "r1"),)
    assert result.response.broker_epoch == result.base_offset == 0
    harness.commit(result)
    broker = harness.committed.broker(4)
    assert (broker.broker_epoch, broker.fenced, broker.rack, broker.endpoints) == (0, True, "r1", {"PLAINTEXT": "h:1"})
    second = harness.controller.register_broker(BrokerRegistrationRequest(5, "inc5", {"PLAINTEXT": "h:2"}), 0)
    assert second.response.broker_epoch == 1
    harness.commit(second)


@pytest.mark.parametrize(
    "request_",
    [
        BrokerRegistrationRequest(-1, "inc", {"PLAINTEXT": "h:1"}),
        BrokerRegistrationRequest(1, "", {"PLAINTEXT": "h:1"}),
        BrokerRegistrationRequest(1, "inc", {}),
        BrokerRegistrationRequest(1, "inc", {"PLAINTEXT": "no-port"}),
        BrokerRegistrationRequest(1, "inc", {"PLAINTEXT": "h:99999"}),
        BrokerRegistrationRequest(1, "inc", {"PLAINTEXT": ":9092"}),
    ],
)
def test_malformed_registration_is_invalid_request(request_: BrokerRegistrationRequest) -> None:
    harness = Harness()
    response = harness.run(request_)
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert harness.committed.brokers() == []


def test_second_live_process_with_the_same_id_is_duplicate_registration() -> None:
    harness = cluster(1)
    harness.heartbeat(1, advance_ms=5000)
    response = harness.run(BrokerRegistrationRequest(1, "other-process", {"PLAINTEXT": "h:1"}), advance_ms=1000)
    assert response.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert harness.committed.broker(1).incarnation_id == "incarnation-1"
    # Once the old process's session lapses and it is fenced, the new one may register.
    harness.tick(SESSION_MS + 1)
    assert harness.committed.broker(1).fenced
    response = harness.run(BrokerRegistrationRequest(1, "other-process", {"PLAINTEXT": "h:1"}))
    assert response.error_code == ErrorCode.NONE


def test_reregistration_leaves_isrs_and_leaderships_and_bumps_the_epoch() -> None:
    harness = cluster(2)
    harness.create_topic("t", 1, 2, assignments=None)
    leader = harness.partition("t").leader
    other = 3 - leader
    old_epoch = harness.broker_epochs[leader]
    new_epoch = harness.register(leader)  # the same incarnation: a retried registration
    assert new_epoch > old_epoch
    state = harness.partition("t")
    assert (state.leader, state.isr, state.leader_epoch) == (other, (other,), 1)
    assert harness.committed.broker(leader).fenced
    stale = harness.run(BrokerHeartbeatRequest(leader, old_epoch, harness.committed.last_applied_offset))
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH


# ---- BrokerHeartbeat -------------------------------------------------------------------------------


def test_heartbeat_from_unknown_broker_or_stale_epoch() -> None:
    harness = cluster(1)
    assert harness.run(BrokerHeartbeatRequest(9, 0, 0)).error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    stale = harness.run(BrokerHeartbeatRequest(1, harness.broker_epochs[1] + 1, 0))
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH


def test_broker_unfences_only_once_caught_up_with_its_registration() -> None:
    harness = Harness()
    epoch = harness.register(1)
    behind = harness.controller.broker_heartbeat(BrokerHeartbeatRequest(1, epoch, epoch - 1), 0)
    assert behind.records == ()
    assert (behind.response.is_caught_up, behind.response.is_fenced) == (False, True)
    harness.commit(behind)
    starting = harness.run(BrokerHeartbeatRequest(1, epoch, epoch, want_fence=True))
    assert (starting.is_caught_up, starting.is_fenced) == (True, True)
    result = harness.controller.broker_heartbeat(BrokerHeartbeatRequest(1, epoch, epoch), 0)
    assert result.records == (UnfenceBroker(1, epoch),)
    assert not result.response.is_fenced
    harness.commit(result)
    assert harness.committed.broker(1).active


def test_want_fence_fences_an_active_broker_and_moves_its_leaderships() -> None:
    harness = cluster(2)
    harness.create_topic("t", 1, 2)
    leader = harness.partition("t").leader
    response = harness.heartbeat(leader, want_fence=True)
    assert response.is_fenced
    assert harness.partition("t").leader == 3 - leader


# ---- session timeout, fencing and elections --------------------------------------------------------


def test_broker_is_fenced_only_after_more_than_the_session_timeout() -> None:
    harness = cluster(2)
    harness.heartbeat_all(1000)
    assert harness.tick(SESSION_MS).fenced_broker_ids == ()
    harness.heartbeat(2)
    result = harness.tick(1)
    assert result.fenced_broker_ids == (1,)
    assert harness.committed.broker(1).fenced
    assert harness.committed.broker(2).active


def test_a_broker_fenced_by_its_session_is_unfenced_only_once_it_has_applied_its_fencing() -> None:
    """Back from a partition, a broker may still hold metadata from before the leaderships moved
    away from it; unfenced then, it would renew its lease to lead (controller/broker_lifecycle.py)
    on partitions the controller gave to others."""
    harness = cluster(2)
    harness.create_topic("t", assignments={0: (1, 2)})
    before = harness.committed.last_applied_offset
    harness.heartbeat_all(SESSION_MS, except_ids=(1,))
    assert harness.tick(1).fenced_broker_ids == (1,)
    fence_offset = harness.committed.broker(1).fenced_offset
    assert fence_offset > before and harness.partition("t").leader == 2
    epoch = harness.broker_epochs[1]
    stale = harness.controller.broker_heartbeat(BrokerHeartbeatRequest(1, epoch, before), harness.now_ms)
    assert stale.records == () and stale.response.is_fenced
    seen = harness.controller.broker_heartbeat(BrokerHeartbeatRequest(1, epoch, fence_offset), harness.now_ms)
    assert seen.records[0] == UnfenceBroker(1, epoch) and not seen.response.is_fenced


def test_fencing_moves_leadership_to_the_first_live_isr_member_in_replica_order() -> None:
    harness = cluster(4)
    harness.create_topic("t", assignments={0: (1, 2, 3, 4), 1: (2, 1, 3, 4), 2: (3, 4, 2, 1)})
    alter_isr(harness, "t", (1, 3, 4), index=0)  # 2 drops out of partition 0's ISR
    harness.heartbeat_all(SESSION_MS, except_ids=(1,))
    result = harness.tick(1)
    assert result.fenced_broker_ids == (1,)
    zero, one, two = (harness.partition("t", index) for index in range(3))
    assert (zero.leader, zero.isr, zero.leader_epoch, zero.partition_epoch) == (3, (3, 4), 1, 2)
    assert (one.leader, one.isr, one.leader_epoch, one.partition_epoch) == (2, (2, 3, 4), 0, 1)
    assert (two.leader, two.isr, two.leader_epoch, two.partition_epoch) == (3, (3, 4, 2), 0, 1)


def test_fence_records_come_after_the_partition_changes() -> None:
    harness = cluster(2)
    topic_id = harness.create_topic("t", 1, 2, assignments=None)
    leader = harness.partition("t").leader
    harness.heartbeat(3 - leader, advance_ms=SESSION_MS)
    result = harness.controller.tick(harness.now_ms + 1)
    assert result.records == (
        PartitionChange(topic_id, 0, isr=(3 - leader,), leader=3 - leader),
        FenceBroker(leader, harness.broker_epochs[leader]),
    )
    harness.commit(result)


def test_last_isr_member_leaves_into_the_elr_and_leads_again_when_back() -> None:
    """KIP-966: the ISR may empty; its last member stays eligible in the ELR (min.insync.replicas 1)."""
    harness = cluster(2)
    harness.create_topic("t", assignments={0: (1, 2)})
    alter_isr(harness, "t", (1,))
    harness.heartbeat_all(SESSION_MS, except_ids=(1,))
    harness.tick(1)
    state = harness.partition("t")
    assert (state.leader, state.isr, state.elr, state.leader_epoch) == (NO_LEADER, (), (1,), 1)
    assert harness.committed.leaderless_partitions() == [(harness.committed.topic_id("t"), 0)]
    # Broker 2 is alive but was not in the ISR: with unclean election off it may not lead.
    harness.heartbeat(2)
    assert harness.tick(0).elected_partitions == ()
    assert harness.partition("t").leader == NO_LEADER
    # Broker 1 comes back: it unfences and, as the ELR member, leads with the ISR to itself.
    harness.heartbeat(1)
    state = harness.partition("t")
    assert (state.leader, state.isr, state.elr, state.leader_epoch) == (1, (1,), (), 2)


def test_unclean_election_picks_the_first_live_replica_and_resets_the_isr() -> None:
    harness = cluster(3)
    harness.create_topic("t", assignments={0: (1, 2, 3)}, configs={"unclean.leader.election.enable": "true"})
    alter_isr(harness, "t", (1,))
    harness.heartbeat_all(SESSION_MS, except_ids=(1,))
    harness.tick(1)
    state = harness.partition("t")
    assert (state.leader, state.isr, state.leader_epoch) == (2, (2,), 1)


def test_turning_unclean_election_on_elects_offline_partitions_at_once() -> None:
    harness = cluster(2)
    harness.create_topic("t", assignments={0: (1, 2)})
    alter_isr(harness, "t", (1,))
    harness.heartbeat_all(SESSION_MS, except_ids=(1,))
    harness.tick(1)
    assert harness.partition("t").leader == NO_LEADER
    result = alter_configs(harness, "t", AlterableConfig("unclean.leader.election.enable", AlterConfigOp.SET, "true"))
    assert result.error_code == ErrorCode.NONE
    state = harness.partition("t")
    assert (state.leader, state.isr) == (2, (2,))


def test_offline_partition_with_no_live_replica_stays_offline_even_with_unclean_election() -> None:
    harness = cluster(1)
    harness.create_topic("t", configs={"unclean.leader.election.enable": "true"})
    harness.tick(SESSION_MS + 1)
    state = harness.partition("t")
    assert (state.leader, state.isr, state.elr) == (NO_LEADER, (), (1,))


def test_new_controller_assumes_every_unfenced_broker_was_just_heard_from() -> None:
    harness = cluster(2)
    harness.now_ms += 20_000
    harness.controller.reset_to(harness.committed, harness.now_ms, harness.committed.last_applied_offset + 1)
    assert harness.tick(SESSION_MS).fenced_broker_ids == ()
    assert harness.tick(1).fenced_broker_ids == (1, 2)


# ---- controlled shutdown ---------------------------------------------------------------------------


def test_controlled_shutdown_moves_leaderships_then_lets_the_broker_stop() -> None:
    harness = cluster(3)
    harness.create_topic("t", assignments={0: (1, 2, 3), 1: (2, 1, 3)})
    harness.create_topic("solo", assignments={0: (1,)})
    epoch = harness.broker_epochs[1]
    seen_offset = harness.committed.last_applied_offset
    result = harness.controller.controlled_shutdown(ControlledShutdownRequest(1, epoch, seen_offset), 0)
    assert isinstance(result.records[-1], BrokerRegistrationChange)
    response = harness.commit(result)
    assert (response.is_fenced, response.should_shut_down) == (False, False)
    zero, one, solo = harness.partition("t", 0), harness.partition("t", 1), harness.partition("solo")
    assert (zero.leader, zero.isr, zero.leader_epoch) == (2, (2, 3), 1)
    assert (one.leader, one.isr, one.leader_epoch) == (2, (2, 3), 0)
    assert (solo.leader, solo.isr, solo.elr, solo.leader_epoch) == (NO_LEADER, (), (1,), 1)  # the sole replica
    assert harness.committed.broker(1).in_controlled_shutdown
    # Not yet: the broker has not seen the records that moved its leaderships.
    early = harness.run(ControlledShutdownRequest(1, epoch, seen_offset))
    assert (early.is_fenced, early.should_shut_down) == (False, False)
    done = harness.run(ControlledShutdownRequest(1, epoch, harness.committed.last_applied_offset))
    assert (done.is_fenced, done.should_shut_down) == (True, True)
    assert harness.committed.broker(1).fenced


def test_broker_in_controlled_shutdown_is_not_elected_and_cannot_join_an_isr() -> None:
    harness = cluster(3)
    harness.create_topic("t", assignments={0: (2, 1, 3)})
    alter_isr(harness, "t", (2, 1))
    harness.heartbeat(1, want_shutdown=True)
    assert harness.partition("t").isr == (2,)
    response = alter_isr(harness, "t", (2, 1))
    assert response.partitions[0].error_code == ErrorCode.INELIGIBLE_REPLICA
    alter_isr(harness, "t", (2, 3))
    harness.heartbeat_all(SESSION_MS, except_ids=(2,))
    harness.tick(1)
    assert harness.partition("t").leader == 3


def test_fenced_broker_asking_to_shut_down_may_stop_at_once() -> None:
    harness = cluster(1)
    harness.heartbeat(1, want_fence=True)
    response = harness.heartbeat(1, want_shutdown=True)
    assert (response.is_fenced, response.should_shut_down) == (True, True)


# ---- AlterPartition --------------------------------------------------------------------------------


def test_alter_partition_shrinks_and_expands_the_isr() -> None:
    harness = cluster(3)
    harness.create_topic("t", assignments={0: (1, 2, 3)})
    response = alter_isr(harness, "t", (1, 3))
    (result,) = response.partitions
    assert (result.error_code, result.leader_id, result.isr, result.leader_epoch, result.partition_epoch) == (
        ErrorCode.NONE,
        1,
        (1, 3),
        0,
        1,
    )
    (result,) = alter_isr(harness, "t", (3, 2, 1)).partitions
    assert (result.isr, result.partition_epoch) == ((1, 2, 3), 2)  # kept in replica order
    assert harness.partition("t").isr == (1, 2, 3)


def test_alter_partition_with_the_current_isr_writes_nothing() -> None:
    harness = cluster(2)
    harness.create_topic("t", assignments={0: (1, 2)})
    state = harness.partition("t")
    request = AlterPartitionRequest(
        1, harness.broker_epochs[1], (AlterPartitionData(state_topic(harness), 0, 0, 0, (1, 2)),)
    )
    result = harness.controller.alter_partition(request, 0)
    assert result.records == ()
    assert result.response.partitions[0].error_code == ErrorCode.NONE
    assert state == harness.partition("t")


def state_topic(harness: Harness) -> str:
    topic_id = harness.committed.topic_id("t")
    assert topic_id is not None
    return topic_id


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({"partition_epoch": -1}, ErrorCode.INVALID_UPDATE_VERSION),
        ({"leader_epoch": -1}, ErrorCode.FENCED_LEADER_EPOCH),
        ({"leader_epoch": 5}, ErrorCode.NOT_CONTROLLER),
        ({"partition_epoch": 5}, ErrorCode.NOT_CONTROLLER),
        ({"broker_id": 2}, ErrorCode.INVALID_REQUEST),
        ({"new_isr": (2, 3)}, ErrorCode.INVALID_REQUEST),  # without the leader
        ({"new_isr": (1, 4)}, ErrorCode.INVALID_REQUEST),  # 4 is not a replica
        ({"new_isr": (1, 1)}, ErrorCode.INVALID_REQUEST),  # repeated
        ({"new_isr_broker_epochs": (0,)}, ErrorCode.INVALID_REQUEST),  # one epoch for two members
        ({"partition_index": 7}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ({"topic_id": "AAAAAAAAAAAAAAAAAAAAAA"}, ErrorCode.UNKNOWN_TOPIC_ID),
    ],
)
def test_alter_partition_errors_change_nothing(overrides: dict[str, object], code: ErrorCode) -> None:
    harness = cluster(3)
    harness.create_topic("t", assignments={0: (1, 2, 3)})
    alter_isr(harness, "t", (1, 2))  # partition epoch 1: a stale epoch can be named
    before = harness.partition("t")
    fields = {"new_isr": (1, 3), **overrides}
    response = alter_isr(harness, "t", **fields)
    assert response.error_code == ErrorCode.NONE
    (result,) = response.partitions
    assert result.error_code == code, result
    assert result.error_message
    assert harness.partition("t") == before


def test_alter_partition_with_a_stale_partition_epoch_after_an_uncommitted_change() -> None:
    """Two proposals from the same epoch: the second is stale against the speculative state."""
    harness = cluster(3)
    topic_id = harness.create_topic("t", assignments={0: (1, 2, 3)})
    request = AlterPartitionRequest(1, harness.broker_epochs[1], (AlterPartitionData(topic_id, 0, 0, 0, (1, 2)),))
    first = harness.controller.alter_partition(request, 0)
    second = harness.controller.alter_partition(request, 0)
    assert first.response.partitions[0].error_code == ErrorCode.NONE
    assert second.response.partitions[0].error_code == ErrorCode.INVALID_UPDATE_VERSION
    harness.commit(first)
    harness.commit(second)


def test_one_alter_partition_request_for_many_partitions_judges_each_alone_in_one_batch() -> None:
    """A broker sends the proposals of one step together (a failover's new leaders): each partition
    is answered as it would be alone, and the accepted changes are one batch of records."""
    harness = cluster(3)
    topic_id = harness.create_topic("t", assignments={0: (1, 2, 3), 1: (1, 2, 3), 2: (1, 2, 3)})
    request = AlterPartitionRequest(1, harness.broker_epochs[1], (
        AlterPartitionData(topic_id, 0, 0, 0, (1, 2)),
        AlterPartitionData(topic_id, 1, 0, 0, (2, 3)),  # without its leader
        AlterPartitionData(topic_id, 2, 0, 0, (1, 3)),
    ))
    result = harness.controller.alter_partition(request, 0)
    assert [(part.partition_index, part.error_code) for part in result.response.partitions] == [
        (0, ErrorCode.NONE), (1, ErrorCode.INVALID_REQUEST), (2, ErrorCode.NONE)]
    assert len(result.records) == 2
    harness.commit(result)
    assert [harness.partition("t", index).isr for index in range(3)] == [(1, 2), (1, 2, 3), (1, 3)]


def test_fenced_broker_cannot_join_the_isr() -> None:
    harness = cluster(3)
    harness.create_topic("t", assignments={0: (1, 2, 3)})
    alter_isr(harness, "t", (1, 2))
    harness.heartbeat(3, want_fence=True)
    (result,) = alter_isr(harness, "t", (1, 2, 3)).partitions
    assert result.error_code == ErrorCode.INELIGIBLE_REPLICA
    assert "broker 3 is fenced" in result.error_message
    assert harness.partition("t").isr == (1, 2)


def test_alter_partition_from_unknown_or_stale_broker() -> None:
    harness = cluster(2)
    harness.create_topic("t", assignments={0: (1, 2)})
    response = alter_isr(harness, "t", (1,), broker_id=9)
    assert (response.error_code, response.partitions) == (ErrorCode.BROKER_ID_NOT_REGISTERED, ())
    response = alter_isr(harness, "t", (1,), broker_epoch=harness.broker_epochs[1] + 100)
    assert (response.error_code, response.partitions) == (ErrorCode.STALE_BROKER_EPOCH, ())
    assert harness.partition("t").isr == (1, 2)


# ---- leadership changes of the controller ----------------------------------------------------------


def test_reset_to_discards_uncommitted_proposals() -> None:
    harness = cluster(1)
    lost = harness.controller.create_topics(CreateTopicsRequest((CreatableTopic("t", 1, 1),)), 0)
    assert lost.response.topics[0].error_code == ErrorCode.NONE
    assert harness.controller.metadata.topic_id("t") is not None
    harness.controller.reset_to(harness.committed, 0, harness.committed.last_applied_offset + 1)
    assert harness.controller.metadata.topic_id("t") is None
    assert harness.controller.next_offset == harness.committed.last_applied_offset + 1
    harness.create_topic("t")


def test_reset_to_refuses_a_next_offset_inside_the_committed_log() -> None:
    harness = cluster(1)
    with pytest.raises(AssertionError):
        harness.controller.reset_to(harness.committed, 0, harness.committed.last_applied_offset)


def test_records_are_placed_from_the_given_next_offset() -> None:
    """Raft may hold entries the state machine never sees (a leader's no-op): broker epochs follow
    the real offsets given by the owner."""
    committed = ClusterMetadata()
    controller = QuorumController(committed, random.Random(0), 0, next_offset=5)
    result = controller.register_broker(BrokerRegistrationRequest(1, "inc", {"PLAINTEXT": "h:1"}), 0)
    assert (result.base_offset, result.response.broker_epoch, controller.next_offset) == (5, 5, 6)


def test_handle_dispatches_every_request_type_and_ticks() -> None:
    harness = cluster(1)
    assert harness.run(ControllerTick(), SESSION_MS + 1).fenced_broker_ids == (1,)
    with pytest.raises(AssertionError):
        harness.controller.handle(object(), harness.now_ms)


def test_time_going_backwards_is_a_programmer_error() -> None:
    harness = cluster(1)
    harness.tick(100)
    with pytest.raises(AssertionError):
        harness.controller.tick(harness.now_ms - 1)


def test_same_seed_and_requests_give_identical_records() -> None:
    def records(seed: int) -> list[object]:
        harness = cluster(4, seed=seed)
        harness.create_topic("a", 8, 3)
        harness.create_topic("b", 3, 2)
        harness.heartbeat_all(SESSION_MS, except_ids=(2,))
        return list(harness.controller.tick(harness.now_ms + 1).records)

    assert records(11) == records(11)


# ---- AllocateProducerIds ---------------------------------------------------------------------------


def test_producer_id_blocks_are_recorded_and_never_given_twice() -> None:
    harness = cluster(2)
    first = harness.run(AllocateProducerIdsRequest(1, harness.broker_epochs[1]))
    second = harness.run(AllocateProducerIdsRequest(2, harness.broker_epochs[2]))
    assert (first.error_code, first.producer_id_start, first.producer_id_len) == (ErrorCode.NONE, 0, 1000)
    assert (second.producer_id_start, second.producer_id_len) == (1000, 1000)
    assert harness.committed.next_producer_id == 2000
    restored = ClusterMetadata()
    restored.restore(harness.committed.last_applied_offset, harness.committed.snapshot())
    assert restored.next_producer_id == 2000, "a new controller goes on from the snapshot"
    stale = harness.run(AllocateProducerIdsRequest(1, harness.broker_epochs[1] + 1))
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH and harness.committed.next_producer_id == 2000
