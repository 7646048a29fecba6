"""ClusterMetadata as Raft's state machine: applying records, determinism, snapshots, the read view,
and the invariant checkers the simulator uses.

Method: records are applied as Raft would (encoded bytes at increasing offsets); a record that
does not fit the state must raise `MetadataApplyError` and change nothing; two instances fed the
same records must produce byte-identical snapshots; `restore(snapshot())` must give an equal
instance; each invariant checker must flag a hand-made violation.
"""

from __future__ import annotations

import msgpack
import pytest

from controller.errors import MetadataApplyError, MetadataRecordError
from controller.metadata import (
    ClusterMetadata,
    MetadataHistory,
    PartitionRegistration,
    check_invariants,
    topic_name_error,
)
from controller.metadata_records import (
    BrokerRegistrationChange,
    ConfigChange,
    FenceBroker,
    MetadataRecord,
    Partition,
    PartitionChange,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnfenceBroker,
    encode_record,
)
from tests.controller.metadata_harness import Harness
from wire.sentinels import NO_LEADER

TOPIC_ID = "ECfE0cOGu8TNYT4w2PFq3w"
OTHER_ID = "eOUQYXMR2KPCzm9EftTVew"


def base_records() -> list[MetadataRecord]:
    """Brokers 1..3 registered at offsets 0..2 and unfenced; topic 'orders' with two partitions."""
    return [
        RegisterBroker(1, "i1", {"PLAINTEXT": "b1:9092"}, "a"),
        RegisterBroker(2, "i2", {"PLAINTEXT": "b2:9092"}, "b"),
        RegisterBroker(3, "i3", {"PLAINTEXT": "b3:9092"}, None),
        UnfenceBroker(1, 0),
        UnfenceBroker(2, 1),
        UnfenceBroker(3, 2),
        Topic("orders", TOPIC_ID, {"retention.ms": "1000"}),
        Partition(TOPIC_ID, 0, (1, 2, 3), (1, 2, 3), 1, 0, 0),
        Partition(TOPIC_ID, 1, (2, 3, 1), (2, 3, 1), 2, 0, 0),
    ]


def feed(metadata: ClusterMetadata, records: list[MetadataRecord], start: int | None = None) -> ClusterMetadata:
    offset = metadata.last_applied_offset + 1 if start is None else start
    for record in records:
        metadata.apply(offset, 1, encode_record(record))
        offset += 1
    return metadata


def loaded() -> ClusterMetadata:
    return feed(ClusterMetadata(), base_records())


def test_apply_builds_brokers_topics_and_partitions() -> None:
    metadata = loaded()
    assert metadata.last_applied_offset == metadata.metadata_offset == 8
    broker = metadata.broker(2)
    assert (broker.broker_epoch, broker.fenced, broker.rack, broker.endpoints) == (
        1,
        False,
        "b",
        {"PLAINTEXT": "b2:9092"},
    )
    assert metadata.topic_id("orders") == TOPIC_ID
    assert metadata.topic_name(TOPIC_ID) == "orders"
    assert metadata.partitions(TOPIC_ID) == (
        PartitionRegistration((1, 2, 3), (1, 2, 3), 1, 0, 0),
        PartitionRegistration((2, 3, 1), (2, 3, 1), 2, 0, 0),
    )
    assert metadata.log_config("orders").retention_ms == 1000
    assert check_invariants(metadata) == []


def test_partition_change_bumps_leader_epoch_on_leader_change_and_partition_epoch_always() -> None:
    metadata = feed(loaded(), [PartitionChange(TOPIC_ID, 0, isr=(1, 3))])
    assert metadata.partition(TOPIC_ID, 0) == PartitionRegistration((1, 2, 3), (1, 3), 1, 0, 1)
    feed(metadata, [PartitionChange(TOPIC_ID, 0, leader=3)])
    assert metadata.partition(TOPIC_ID, 0) == PartitionRegistration((1, 2, 3), (1, 3), 3, 1, 2)
    feed(metadata, [PartitionChange(TOPIC_ID, 0, isr=(3,), leader=NO_LEADER)])
    assert metadata.partition(TOPIC_ID, 0) == PartitionRegistration((1, 2, 3), (3,), NO_LEADER, 2, 3)
    assert metadata.leaderless_partitions() == [(TOPIC_ID, 0)]
    feed(metadata, [PartitionChange(TOPIC_ID, 0, leader=3)])
    assert metadata.leaderless_partitions() == []


def test_broker_state_records() -> None:
    metadata = feed(loaded(), [BrokerRegistrationChange(3, 2, True)])
    assert metadata.broker(3).in_controlled_shutdown
    assert not metadata.broker(3).active
    feed(metadata, [FenceBroker(3, 2)])
    assert metadata.broker(3).fenced
    feed(metadata, [UnfenceBroker(3, 2)])
    assert metadata.broker(3).active
    feed(metadata, [RegisterBroker(3, "i3-new", {"PLAINTEXT": "b3:9093"}, None)])
    assert metadata.broker(3).broker_epoch == metadata.last_applied_offset
    assert metadata.broker(3).fenced


def test_config_change_and_remove_topic() -> None:
    metadata = feed(
        loaded(), [ConfigChange("orders", "segment.ms", "100"), ConfigChange("orders", "retention.ms", None)]
    )
    assert metadata.topic_configs("orders") == {"segment.ms": "100"}
    feed(metadata, [PartitionChange(TOPIC_ID, 1, leader=NO_LEADER, isr=(2,)), RemoveTopic(TOPIC_ID)])
    assert metadata.topic_names() == []
    assert metadata.partitions(TOPIC_ID) == ()
    assert metadata.topic_configs("orders") == {}
    assert metadata.leaderless_partitions() == []


@pytest.mark.parametrize(
    "record",
    [
        FenceBroker(9, 0),  # unknown broker
        FenceBroker(1, 5),  # stale broker epoch
        UnfenceBroker(2, 0),
        BrokerRegistrationChange(1, 1, True),
        RegisterBroker(-1, "i", {}, None),
        Topic("orders", OTHER_ID, {}),  # name taken
        Topic("other", TOPIC_ID, {}),  # id taken
        Topic("bad name", OTHER_ID, {}),
        Topic("other", "", {}),
        Partition(OTHER_ID, 0, (1,), (1,), 1, 0, 0),  # unknown topic
        Partition(TOPIC_ID, 3, (1,), (1,), 1, 0, 0),  # index gap
        Partition(TOPIC_ID, 2, (1, 1), (1,), 1, 0, 0),  # repeated replica
        Partition(TOPIC_ID, 2, (1, 2), (3,), 3, 0, 0),  # ISR outside replicas
        Partition(TOPIC_ID, 2, (1, 2), (), 1, 0, 0),  # a leader with an empty ISR
        Partition(TOPIC_ID, 2, (1, 2), (1,), 2, 0, 0),  # leader outside ISR
        Partition(TOPIC_ID, 2, (1, 2), (1,), 1, 0, 0, (1,)),  # ELR overlaps the ISR
        Partition(TOPIC_ID, 2, (1, 2), (1,), 1, 0, 0, (3,)),  # ELR outside replicas
        Partition(TOPIC_ID, 2, (1, 2), (), NO_LEADER, 0, 0, (2, 2)),  # ELR repeats
        Partition(TOPIC_ID, 2, (1, 2), (), NO_LEADER, 0, 0, (2,), (2,)),  # last known ELR overlaps the ELR
        Partition(TOPIC_ID, 2, (1, 9), (9,), 9, 0, 0),  # leader not a broker
        Partition(TOPIC_ID, 2, (1,), (1,), 1, -1, 0),  # negative epoch
        PartitionChange(TOPIC_ID, 0),  # changes nothing
        PartitionChange(TOPIC_ID, 5, leader=1),  # unknown partition
        PartitionChange(OTHER_ID, 0, leader=1),  # unknown topic
        PartitionChange(TOPIC_ID, 0, isr=(2, 3)),  # would drop the leader from the ISR
        PartitionChange(TOPIC_ID, 0, isr=(1, 4)),  # outside replicas
        PartitionChange(TOPIC_ID, 0, elr=(2,)),  # ELR overlaps the ISR
        PartitionChange(TOPIC_ID, 0, isr=(1,), elr=(2,), last_known_elr=(1,)),  # last known ELR overlaps the ISR
        ConfigChange("nope", "retention.ms", "1"),
        RemoveTopic(OTHER_ID),
    ],
    ids=repr,
)
def test_records_that_do_not_fit_the_state_are_refused_and_change_nothing(record: MetadataRecord) -> None:
    metadata = loaded()
    before = metadata.snapshot()
    with pytest.raises(MetadataApplyError, match="offset 9"):
        metadata.apply(9, 1, encode_record(record))
    assert metadata.snapshot() == before
    assert metadata.last_applied_offset == 8


def test_offsets_must_grow() -> None:
    metadata = loaded()
    with pytest.raises(AssertionError):
        metadata.apply(8, 1, encode_record(RemoveTopic(TOPIC_ID)))


def test_offsets_may_skip_entries_the_state_machine_never_sees() -> None:
    metadata = feed(ClusterMetadata(), [RegisterBroker(1, "i", {"PLAINTEXT": "h:1"}, None)], start=4)
    assert metadata.broker(1).broker_epoch == 4


def test_garbage_bytes_are_a_record_error() -> None:
    with pytest.raises(MetadataRecordError):
        loaded().apply(9, 1, b"\xff\xff")


def test_two_instances_fed_the_same_records_have_identical_snapshots() -> None:
    records = [*base_records(), PartitionChange(TOPIC_ID, 0, isr=(1, 3)), ConfigChange("orders", "flush.ms", "1")]
    one = feed(ClusterMetadata(), records)
    two = feed(ClusterMetadata(), records)
    assert one == two
    assert one.snapshot() == two.snapshot()


def test_snapshot_bytes_do_not_depend_on_insertion_order() -> None:
    one = feed(
        ClusterMetadata(),
        [RegisterBroker(1, "i", {"A": "h:1", "B": "h:2"}, None), RegisterBroker(2, "j", {"A": "h:3"}, None)],
    )
    two = feed(
        ClusterMetadata(),
        [RegisterBroker(1, "i", {"B": "h:2", "A": "h:1"}, None), RegisterBroker(2, "j", {"A": "h:3"}, None)],
    )
    assert one.snapshot() == two.snapshot()


def test_the_isr_may_empty_into_the_elr_and_an_elr_member_may_lead_with_the_isr_to_itself() -> None:
    """KIP-966: the metadata holds an empty ISR, an ELR and a last known ELR; PartitionChange sets
    each alone, and an unchanged ISR still moves the partition epoch."""
    metadata = feed(loaded(), [PartitionChange(TOPIC_ID, 0, isr=(1,), elr=(2,), last_known_elr=(3,))])
    feed(metadata, [PartitionChange(TOPIC_ID, 0, isr=(), leader=NO_LEADER, elr=(1, 2))])
    assert metadata.partition(TOPIC_ID, 0) == PartitionRegistration((1, 2, 3), (), NO_LEADER, 1, 2, (1, 2), (3,))
    feed(metadata, [PartitionChange(TOPIC_ID, 0, isr=(2,), leader=2, elr=(1,))])
    assert metadata.partition(TOPIC_ID, 0) == PartitionRegistration((1, 2, 3), (2,), 2, 2, 3, (1,), (3,))
    feed(metadata, [PartitionChange(TOPIC_ID, 0, isr=(2,))])
    assert metadata.partition(TOPIC_ID, 0) == PartitionRegistration((1, 2, 3), (2,), 2, 2, 4, (1,), (3,))
    assert check_invariants(metadata) == []
    copy = ClusterMetadata()
    copy.restore(metadata.last_applied_offset, metadata.snapshot())
    assert copy == metadata


def test_a_version_0_snapshot_and_records_load_with_empty_elr_and_no_log_dirs() -> None:
    """Metadata written before KIP-966/KIP-858 fields existed still loads: they take their defaults."""
    snapshot = msgpack.packb([0, [[1, "i", 0, {"PLAINTEXT": "h:1"}, None, False, False]],
                              [[TOPIC_ID, "t", {}, [[[1], [1], 1, 0, 0]]]]])
    metadata = ClusterMetadata()
    metadata.restore(0, snapshot)
    assert metadata.broker(1).log_dirs == ()
    assert metadata.broker(1).fenced_offset == -1  # version 3 field: unfencing then waits on nothing
    assert metadata.partition(TOPIC_ID, 0) == PartitionRegistration((1,), (1,), 1, 0, 0)
    metadata.apply(1, 1, msgpack.packb([5, 0, TOPIC_ID, 0, [], -1]))  # PartitionChange version 0
    assert metadata.partition(TOPIC_ID, 0) == PartitionRegistration((1,), (), -1, 1, 1)


def test_restore_of_a_snapshot_equals_the_original() -> None:
    original = feed(loaded(), [PartitionChange(TOPIC_ID, 1, isr=(2,)), BrokerRegistrationChange(3, 2, True)])
    copy = ClusterMetadata()
    copy.restore(original.last_applied_offset, original.snapshot())
    assert copy == original
    assert copy.snapshot() == original.snapshot()
    assert copy.image() == original.image()
    # The restored copy goes on applying like the original.
    more = [PartitionChange(TOPIC_ID, 1, leader=NO_LEADER), ConfigChange("orders", "flush.ms", "2")]
    feed(original, more)
    feed(copy, more)
    assert copy == original
    assert copy.leaderless_partitions() == original.leaderless_partitions() == [(TOPIC_ID, 1)]


def test_restore_replaces_everything() -> None:
    metadata = loaded()
    metadata.restore(3, ClusterMetadata().snapshot())
    assert (metadata.last_applied_offset, metadata.brokers(), metadata.topic_names()) == (3, [], [])


def test_copy_is_independent() -> None:
    original = loaded()
    copy = original.copy()
    feed(copy, [ConfigChange("orders", "flush.ms", "1"), PartitionChange(TOPIC_ID, 0, isr=(1,))])
    assert original.topic_configs("orders") == {"retention.ms": "1000"}
    assert original.partition(TOPIC_ID, 0).isr == (1, 2, 3)
    assert copy != original


@pytest.mark.parametrize(
    "snapshot",
    [
        msgpack.packb([6, [], [], 0]),  # unknown version
        msgpack.packb([4, [], []]),  # version 4 without the next producer id
        msgpack.packb([4, [], [], -1]),  # a negative next producer id
        msgpack.packb([3, [[1, "i", 0, {}, None, True, False, []]], []]),  # version 3 broker without fenced_offset
        msgpack.packb([1, [[1, "i", 0, {}, None, True, False]], []]),  # version 1 broker without log_dirs
        msgpack.packb([0, []]),  # missing topics
        msgpack.packb([0, [[1, "i", 0, {}, None, True]], []]),  # broker field missing
        msgpack.packb([0, [[1, "i", 0, {}, None, "yes", False]], []]),  # bool field of another type
        msgpack.packb([0, [[1, "i", 0, {}, None, True, False], [1, "i", 0, {}, None, True, False]], []]),  # twice
        msgpack.packb([0, [], [[TOPIC_ID, "t", {}, [[[1], [2], 1, 0, 0]]]]]),  # ISR outside replicas
        msgpack.packb([0, [], [[TOPIC_ID, "t", {}, []], [TOPIC_ID, "u", {}, []]]]),  # id twice
        b"\x00garbage",
    ],
)
def test_malformed_snapshots_are_refused_and_change_nothing(snapshot: bytes) -> None:
    metadata = loaded()
    before = metadata.snapshot()
    with pytest.raises(MetadataRecordError):
        metadata.restore(20, snapshot)
    assert metadata.snapshot() == before
    assert metadata.last_applied_offset == 8


def test_image_is_an_immutable_read_view_with_the_metadata_offset() -> None:
    metadata = loaded()
    image = metadata.image()
    assert image.metadata_offset == 8
    topic = image.topic("orders")
    assert (topic.topic_id, topic.configs, topic.partitions[1].leader) == (TOPIC_ID, {"retention.ms": "1000"}, 2)
    assert image.broker(3).endpoints == {"PLAINTEXT": "b3:9092"}
    assert image.topic("nope") is None
    feed(metadata, [RemoveTopic(TOPIC_ID)])
    assert image.topic("orders") is not None


@pytest.mark.parametrize(
    ("name", "legal"),
    [
        ("a", True),
        ("a" * 249, True),
        ("a-b.c_D9", True),
        ("", False),
        (".", False),
        ("..", False),
        ("a" * 250, False),
        ("a b", False),
        ("a:b", False),
        (7, False),
    ],
)
def test_topic_name_rules(name: object, legal: bool) -> None:
    assert (topic_name_error(name) is None) == legal


# ---- invariant checkers ------------------------------------------------------------------------------


def test_check_invariants_flags_a_fenced_leader() -> None:
    metadata = feed(loaded(), [FenceBroker(1, 0)])
    problems = check_invariants(metadata)
    assert len(problems) == 1
    assert "orders-0: leader 1 is not an active broker" in problems[0]


def test_check_invariants_flags_a_leader_in_controlled_shutdown_and_bad_configs() -> None:
    metadata = feed(loaded(), [BrokerRegistrationChange(2, 1, True), ConfigChange("orders", "retention.ms", "x")])
    problems = check_invariants(metadata)
    assert any("orders-1: leader 2" in problem for problem in problems)
    assert any("invalid config" in problem for problem in problems)


def test_history_flags_epochs_that_fall_for_one_observer() -> None:
    history = MetadataHistory()
    later = feed(loaded(), [PartitionChange(TOPIC_ID, 0, leader=2)])
    assert history.observe("node-1", later) == []
    problems = history.observe("node-1", loaded())
    assert problems and "epochs fell" in problems[0]
    history.forget("node-1")
    assert history.observe("node-1", loaded()) == []
    assert history.observe("node-2", loaded()) == []


def test_history_flags_two_leaders_in_one_leader_epoch_across_nodes() -> None:
    history = MetadataHistory()
    assert history.observe("node-1", feed(loaded(), [PartitionChange(TOPIC_ID, 0, leader=2)])) == []
    problems = history.observe("node-2", feed(loaded(), [PartitionChange(TOPIC_ID, 0, leader=3)]))
    assert any("leader epoch 1 has leaders 2 and 3" in problem for problem in problems)
    assert any("partition epoch 1" in problem for problem in problems)


def test_history_of_a_controller_run_is_clean() -> None:
    """The harness feeds every committed state of a failover scenario to a MetadataHistory."""
    harness = Harness(seed=5)
    for broker_id in (1, 2, 3):
        harness.add_broker(broker_id)
    harness.create_topic("t", 6, 3)
    harness.heartbeat_all(9000, except_ids=(1,))
    harness.tick(1)
    harness.heartbeat_all(9000, except_ids=(2,))
    harness.tick(1)
    harness.heartbeat(1)
    assert check_invariants(harness.committed) == []
    assert all(state.leader in (1, 3) for state in harness.committed.partitions(harness.committed.topic_id("t")))
