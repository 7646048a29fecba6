"""Replica placement for new partitions: Kafka's `AdminUtils.assignReplicasToBrokers`.

Theory of operation. Brokers are put in a fixed order (by id; with racks, alternating racks). The
first replica (the preferred leader) of partition p is broker `(start_index + p) mod n`, so
preferred leaders go round-robin and differ by at most one per broker. Follower j of a partition
sits `1 + (shift + j) mod (n - 1)` places after the leader; `shift` grows by one every n
partitions, so followers of successive rounds land on different brokers while each round of n
partitions puts exactly one replica of each position on every broker. `start_index` and the
initial `shift` come from the caller's random generator, so topics created one after another do
not all start on the same broker, yet a seed reproduces the placement exactly.

Rack-aware mode (any broker has a rack): the broker order alternates racks (rack a's first broker,
rack b's first, ..., then each rack's second, ...), and a follower candidate is skipped while its
rack already holds a replica and some rack holds none, or while it already holds one and some
broker holds none. So every partition spans min(replication factor, racks) racks. Kafka refuses
a mix of brokers with and without racks; we treat "no rack" as one more rack, which keeps the
spread for the brokers that have one (KRaft's `StripedReplicaPlacer` does the same).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class RandomSource(Protocol):
    """The slice of `random.Random` the controller draws from. The owner passes a seeded generator;
    controller/ never imports `random` (DESIGN §2: no hidden randomness in cores)."""

    def randrange(self, stop: int) -> int: ...

    def getrandbits(self, k: int) -> int: ...


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """A broker that may host new replicas: registered, unfenced, not shutting down."""

    broker_id: int
    rack: str | None = None


def assign_replicas(
    brokers: Sequence[UsableBroker],
    partition_count: int,
    replication_factor: int,
    rng: RandomSource,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions 0..partition_count-1; element 0 of each is the preferred leader.

    The caller has already checked `1 <= replication_factor <= len(brokers)` and `partition_count >= 1`
    (they are request errors, INVALID_REPLICATION_FACTOR and INVALID_PARTITIONS).
    """
    assert partition_count >= 1, f"partition_count={partition_count}"
    assert 1 <= replication_factor <= len(brokers), f"replication_factor={replication_factor} brokers={len(brokers)}"
    assert len({broker.broker_id for broker in brokers}) == len(brokers), f"duplicate broker ids in {brokers}"
    if any(broker.rack is not None for broker in brokers):
        ordered = rack_alternated_brokers(brokers)
        racks = {broker.broker_id: broker.rack for broker in brokers}
        result = _assign_rack_aware(ordered, racks, partition_count, replication_factor, rng)
    else:
        ordered = sorted(broker.broker_id for broker in brokers)
        result = _assign_rack_unaware(ordered, partition_count, replication_factor, rng)
    for replicas in result:
        assert len(set(replicas)) == replication_factor, f"replicas={replicas} rf={replication_factor}"
    return result


def _assign_rack_unaware(
    ordered: list[int], partition_count: int, replication_factor: int, rng: RandomSource
) -> list[tuple[int, ...]]:
    count = len(ordered)
    start_index = rng.randrange(count)
    shift = rng.randrange(count)
    result: list[tuple[int, ...]] = []
    for partition in range(partition_count):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start_index) % count
        replicas = [ordered[first]]
        replicas += [ordered[_replica_index(first, shift, j, count)] for j in range(replication_factor - 1)]
        result.append(tuple(replicas))
    return result


def _assign_rack_aware(
    ordered: list[int],
    racks: Mapping[int, str | None],
    partition_count: int,
    replication_factor: int,
    rng: RandomSource,
) -> list[tuple[int, ...]]:
    count = len(ordered)
    rack_count = len(set(racks.values()))
    start_index = rng.randrange(count)
    shift = rng.randrange(count)
    result: list[tuple[int, ...]] = []
    for partition in range(partition_count):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start_index) % count
        leader = ordered[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        candidate = 0
        while len(replicas) < replication_factor:
            # At most `count` candidates per follower: the walk visits every broker once per lap
            # of the ring, and a broker not yet used always qualifies on the second condition.
            assert candidate < count * replication_factor, f"placement did not converge: {replicas}"
            broker = ordered[_replica_index(first, shift * rack_count, candidate, count)]
            candidate += 1
            rack_ok = racks[broker] not in racks_used or len(racks_used) == rack_count
            broker_ok = broker not in brokers_used or len(brokers_used) == count
            if rack_ok and broker_ok:
                replicas.append(broker)
                racks_used.add(racks[broker])
                brokers_used.add(broker)
        result.append(tuple(replicas))
    return result


def _replica_index(first: int, shift: int, replica: int, count: int) -> int:
    """Kafka's `replicaIndex`: follower `replica` sits 1..count-1 places after the leader."""
    return (first + 1 + (shift + replica) % (count - 1)) % count


def rack_alternated_brokers(brokers: Sequence[UsableBroker]) -> list[int]:
    """Broker ids with racks interleaved: each rack's first broker (racks by name), then each one's second, ..."""
    by_rack: dict[str | None, list[int]] = {}
    for broker in sorted(brokers, key=lambda broker: broker.broker_id):
        by_rack.setdefault(broker.rack, []).append(broker.broker_id)
    rack_order = sorted(by_rack, key=lambda rack: (rack is None, rack or ""))
    longest = max(len(ids) for ids in by_rack.values())
    return [by_rack[rack][depth] for depth in range(longest) for rack in rack_order if depth < len(by_rack[rack])]
