"""Replica assignment (Kafka's AdminUtils algorithm): distinct replicas, balanced leaders and
replicas, spread over racks, reproducible from the seed.

Method: hypothesis draws broker sets (with and without racks), partition counts, replication
factors and seeds, and checks the balance properties on every placement; a few fixed examples pin
the algorithm's shape.
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from controller.replica_assignment import UsableBroker, assign_replicas, rack_alternated_brokers


@st.composite
def placements(draw: st.DrawFn, racks: bool) -> tuple[list[UsableBroker], int, int, int]:
    broker_ids = draw(st.lists(st.integers(0, 50), min_size=1, max_size=9, unique=True))
    rack_names = ["a", "b", "c", "d"]
    if racks:
        brokers = [UsableBroker(broker_id, draw(st.sampled_from(rack_names))) for broker_id in broker_ids]
    else:
        brokers = [UsableBroker(broker_id) for broker_id in broker_ids]
    replication_factor = draw(st.integers(1, len(brokers)))
    partition_count = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32))
    return brokers, partition_count, replication_factor, seed


def spread(counter: Counter[int], brokers: list[UsableBroker]) -> int:
    counts = [counter.get(broker.broker_id, 0) for broker in brokers]
    return max(counts) - min(counts)


@given(placements(racks=False))
def test_rack_unaware_placement_is_distinct_and_balanced(case: tuple[list[UsableBroker], int, int, int]) -> None:
    brokers, partition_count, replication_factor, seed = case
    result = assign_replicas(brokers, partition_count, replication_factor, random.Random(seed))
    assert len(result) == partition_count
    known = {broker.broker_id for broker in brokers}
    for replicas in result:
        assert len(replicas) == replication_factor
        assert len(set(replicas)) == replication_factor
        assert set(replicas) <= known
    assert spread(Counter(replicas[0] for replicas in result), brokers) <= 1
    replica_counts = Counter(broker for replicas in result for broker in replicas)
    if partition_count % len(brokers) == 0:
        assert spread(replica_counts, brokers) == 0
    else:
        assert spread(replica_counts, brokers) <= replication_factor


@given(placements(racks=True))
def test_rack_aware_placement_spreads_every_partition_over_racks(
    case: tuple[list[UsableBroker], int, int, int],
) -> None:
    brokers, partition_count, replication_factor, seed = case
    result = assign_replicas(brokers, partition_count, replication_factor, random.Random(seed))
    racks = {broker.broker_id: broker.rack for broker in brokers}
    rack_count = len(set(racks.values()))
    for replicas in result:
        assert len(set(replicas)) == replication_factor
        assert len({racks[replica] for replica in replicas}) == min(replication_factor, rack_count)
    assert spread(Counter(replicas[0] for replicas in result), brokers) <= 1


@given(placements(racks=True))
def test_placement_is_a_function_of_the_seed(case: tuple[list[UsableBroker], int, int, int]) -> None:
    brokers, partition_count, replication_factor, seed = case
    one = assign_replicas(brokers, partition_count, replication_factor, random.Random(seed))
    two = assign_replicas(list(reversed(brokers)), partition_count, replication_factor, random.Random(seed))
    assert one == two


def test_rack_alternation_interleaves_racks_by_name() -> None:
    brokers = [
        UsableBroker(0, "rack1"),
        UsableBroker(1, "rack3"),
        UsableBroker(2, "rack3"),
        UsableBroker(3, "rack2"),
        UsableBroker(4, "rack2"),
        UsableBroker(5, "rack1"),
        UsableBroker(6, None),
    ]
    assert rack_alternated_brokers(brokers) == [0, 3, 1, 6, 5, 4, 2]


def test_followers_shift_every_round_of_partitions() -> None:
    """Kafka's layout: leaders go round-robin; each round of n partitions moves the followers one
    further, so partition p and p+n do not share a follower layout."""
    brokers = [UsableBroker(broker_id) for broker_id in range(4)]
    result = assign_replicas(brokers, 8, 2, random.Random(3))
    leaders = [replicas[0] for replicas in result]
    assert leaders[:4] == leaders[4:]
    assert sorted(leaders[:4]) == [0, 1, 2, 3]
    gaps = [(replicas[1] - replicas[0]) % 4 for replicas in result]
    assert len(set(gaps[:4])) == 1
    assert len(set(gaps[4:])) == 1
    assert gaps[0] != gaps[4]


def test_single_broker_single_replica() -> None:
    assert assign_replicas([UsableBroker(7)], 3, 1, random.Random(0)) == [(7,), (7,), (7,)]
