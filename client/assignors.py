"""The partition assignors a group's leader runs (Kafka's ConsumerPartitionAssignor), by the
protocol names members join with, and the `partition.assignment.strategy` that lists them.

An assignor maps every member's `Subscription` and each subscribed topic's partition count to
each member's partitions, topic -> partition numbers (every member present, maybe with nothing).
Members are ordered by member id, as in Kafka for dynamic members.

Rebalance protocol (KIP-429): a consumer is cooperative only if every assignor in its strategy
is (Kafka's ConsumerCoordinator takes the protocol common to all), because it must decide before
joining whether to give up its partitions: the coordinator names the assignor chosen only in the
JoinGroup answer. An eager consumer revokes everything before joining; a cooperative one keeps
its partitions, sends them as owned, and gives up only those the assignment moved away.

Our default strategy is cooperative-sticky alone, where Kafka's Java client (3.x) has
[range, cooperative-sticky]. Kafka lists range first so that groups of older, range-only clients
can move to cooperative-sticky by two rolling restarts (KIP-429's upgrade path), and a consumer
with both is eager by the rule above. We have no such installed base, and cooperative-sticky gives
what a user wants by default: a join or leave moves only the partitions that must move, the
others keep being read through the rebalance, and no partition changes owner unless balance asks.
A group with range-only members (Kafka clients so configured) needs `range,cooperative-sticky`
here (eager, as Kafka) until they are gone: the coordinator chooses a protocol every member offers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from client.consumer_protocol import Subscription
from client.sticky_assignor import Plan, cooperative_sticky_assign

KAFKA_PACKAGE = "org.apache.kafka.clients.consumer."


@dataclass(frozen=True, slots=True)
class Assignor:
    """`name` is the protocol name in JoinGroup (Kafka's), `class_name` Kafka's class for it."""

    name: str
    class_name: str
    cooperative: bool
    assign: Callable[[Mapping[str, Subscription], Mapping[str, int]], Plan]


def subscribers(subscriptions: Mapping[str, Subscription], topic: str) -> list[str]:
    return sorted(member for member, subscription in subscriptions.items() if topic in subscription.topics)


def range_assign(subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]) -> Plan:
    """Kafka's RangeAssignor: per topic, its subscribers in member-id order get consecutive ranges,
    the first `partitions % members` one partition more than the others."""
    plan: Plan = {member: {} for member in subscriptions}
    for topic, count in sorted(partition_counts.items()):
        members = subscribers(subscriptions, topic)
        if not members:
            continue
        share, extra = divmod(count, len(members))
        start = 0
        for index, member in enumerate(members):
            size = share + (1 if index < extra else 0)
            if size:
                plan[member][topic] = list(range(start, start + size))
            start += size
    return plan


def round_robin_assign(subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]) -> Plan:
    """Kafka's RoundRobinAssignor: every partition of every subscribed topic, in topic then partition
    order, dealt in turn to the members in member-id order, passing over members not subscribed to
    its topic (the turn goes on from the member that took it)."""
    plan: Plan = {member: {} for member in subscriptions}
    members = sorted(subscriptions)
    turn = 0
    for topic, count in sorted(partition_counts.items()):
        if not subscribers(subscriptions, topic):
            continue
        for number in range(count):
            while topic not in subscriptions[members[turn % len(members)]].topics:
                turn += 1
            plan[members[turn % len(members)]].setdefault(topic, []).append(number)
            turn += 1
    return plan


RANGE = Assignor("range", KAFKA_PACKAGE + "RangeAssignor", False, range_assign)
ROUND_ROBIN = Assignor("roundrobin", KAFKA_PACKAGE + "RoundRobinAssignor", False, round_robin_assign)
COOPERATIVE_STICKY = Assignor("cooperative-sticky", KAFKA_PACKAGE + "CooperativeStickyAssignor", True,
                              cooperative_sticky_assign)
ASSIGNORS = {assignor.name: assignor for assignor in (RANGE, ROUND_ROBIN, COOPERATIVE_STICKY)}
DEFAULT_STRATEGY = ("cooperative-sticky",)


def assignor_for(name: str) -> Assignor:
    """An assignor by its protocol name or its Kafka class name (as partition.assignment.strategy
    takes either)."""
    for assignor in ASSIGNORS.values():
        if name.strip() in (assignor.name, assignor.class_name):
            return assignor
    known = ", ".join(f"{assignor.name} ({assignor.class_name})" for assignor in ASSIGNORS.values())
    raise ValueError(f"partition.assignment.strategy {name!r} is not an assignor we have; use one of {known}")


def strategy(names: str | Iterable[str]) -> tuple[Assignor, ...]:
    """`partition.assignment.strategy`: a comma-separated string or a list, in preference order."""
    listed = names.split(",") if isinstance(names, str) else list(names)
    assignors = tuple(assignor_for(name) for name in listed if name.strip())
    if not assignors:
        raise ValueError("partition.assignment.strategy names no assignor")
    if len({assignor.name for assignor in assignors}) < len(assignors):
        raise ValueError(f"partition.assignment.strategy names an assignor twice: {names!r}")
    return assignors


def is_cooperative(assignors: Iterable[Assignor]) -> bool:
    return all(assignor.cooperative for assignor in assignors)
