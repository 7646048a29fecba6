"""`TopicPartition` keeps a dataclass's value semantics with its hash computed once."""

import copy
import dataclasses
import pickle

import pytest

from wire.topic_partition import TopicPartition


def test_equal_partitions_hash_alike_and_order_by_topic_then_partition() -> None:
    partition = TopicPartition("orders", 1)
    assert partition == TopicPartition("orders", 1)
    assert hash(partition) == hash(TopicPartition("orders", 1)) == hash(("orders", 1))
    assert {partition: "a"}[TopicPartition("orders", 1)] == "a"
    assert sorted([TopicPartition("b", 0), TopicPartition("a", 2), TopicPartition("a", 1)]) == [
        TopicPartition("a", 1), TopicPartition("a", 2), TopicPartition("b", 0)]
    assert [field.name for field in dataclasses.fields(partition)] == ["topic", "partition"]


def test_it_is_frozen_and_a_replaced_copy_hashes_as_its_new_value() -> None:
    partition = TopicPartition("orders", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        partition.partition = 2  # type: ignore[misc]
    moved = dataclasses.replace(partition, partition=2)
    assert hash(moved) == hash(("orders", 2))
    assert moved != partition


def test_pickle_and_copy_rebuild_an_equal_partition() -> None:
    partition = TopicPartition("orders", 1)
    for rebuilt in (pickle.loads(pickle.dumps(partition)), copy.copy(partition), copy.deepcopy(partition)):
        assert rebuilt == partition
        assert hash(rebuilt) == hash(partition)
