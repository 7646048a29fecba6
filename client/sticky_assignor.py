"""Kafka's CooperativeStickyAssignor: balanced assignments that move as few partitions as they
can, in two steps when a partition changes owner (KIP-429 over KIP-54's sticky assignment).

Sticky (`sticky_assign`), in three passes:
1. Each member keeps the partitions it owned that still exist and that it still subscribes to.
   Only owners in the newest generation any member reports count (an older claim may be stale),
   and a partition two members claim in that generation is kept by neither (Kafka drops such
   claims too).
2. Partitions nobody keeps go one by one, those with the fewest possible takers first, to the
   subscriber holding the fewest partitions (ties to the lower member id).
3. While a member holds at least two more than another member that subscribes to one of its
   partitions' topics, one such partition moves, from the most loaded member to the least, and one
   it was given in pass 2 rather than one it kept. This ends in Kafka's notion of balance: no
   partition can go from one member to another holding at least two fewer. (Each move lowers the
   sum of squared counts, so the loop ends.) Members with the same subscription end up within one
   partition of each other; when nothing changed no partition moves; when a member joins a
   balanced group of the same subscription, the fewest partitions possible move.

Cooperative (`cooperative_sticky_assign`): a partition the sticky plan gives to a member while
another member still claims it is left out of this generation's assignment. Its owner sees it
missing from its own assignment, gives it up and joins again at once; the next generation gives it
to its new owner. So no partition ever has two owners in one generation, and members keep
consuming what does not move.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from client.consumer_protocol import Subscription
from wire.topic_partition import TopicPartition

Plan = dict[str, dict[str, list[int]]]


class _Holdings:
    """Each member's partitions by topic, and its count, as the passes move them."""

    def __init__(self, members: list[str]) -> None:
        self.held: dict[str, dict[str, set[int]]] = {member: {} for member in members}
        self.count: Counter[str] = Counter(dict.fromkeys(members, 0))

    def add(self, member: str, tp: TopicPartition) -> None:
        self.held[member].setdefault(tp.topic, set()).add(tp.partition)
        self.count[member] += 1

    def remove(self, member: str, tp: TopicPartition) -> None:
        self.held[member][tp.topic].discard(tp.partition)
        self.count[member] -= 1

    def plan(self) -> Plan:
        return {member: {topic: sorted(numbers) for topic, numbers in sorted(topics.items()) if numbers}
                for member, topics in self.held.items()}


def sticky_assign(subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]) -> Plan:
    """See the module docstring."""
    members = sorted(subscriptions)
    takers = {topic: [member for member in members if topic in subscriptions[member].topics]
              for topic, count in sorted(partition_counts.items()) if count > 0}
    takers = {topic: found for topic, found in takers.items() if found}
    existing = {TopicPartition(topic, number) for topic in takers for number in range(partition_counts[topic])}
    holdings = _Holdings(members)
    kept = _valid_claims(subscriptions, existing)
    for tp, member in kept.items():
        holdings.add(member, tp)
    given: set[TopicPartition] = set()
    for tp in sorted(existing - kept.keys(), key=lambda tp: (len(takers[tp.topic]), tp.topic, tp.partition)):
        member = min(takers[tp.topic], key=lambda name: (holdings.count[name], name))
        holdings.add(member, tp)
        given.add(tp)
    _balance(holdings, {member: frozenset(subscriptions[member].topics) for member in members}, given)
    return holdings.plan()


def _valid_claims(subscriptions: Mapping[str, Subscription], existing: set[TopicPartition]
                  ) -> dict[TopicPartition, str]:
    """Pass 1: partition -> the member that keeps it."""
    claiming = [subscription for subscription in subscriptions.values() if subscription.owned_partitions]
    if not claiming:
        return {}
    newest = max(subscription.generation_id for subscription in claiming)
    claims: dict[TopicPartition, list[str]] = {}
    for member, subscription in subscriptions.items():
        if subscription.generation_id == newest:
            for tp in subscription.owned_partitions:
                if tp in existing and tp.topic in subscription.topics:
                    claims.setdefault(tp, []).append(member)
    return {tp: owners[0] for tp, owners in claims.items() if len(owners) == 1}


def _balance(holdings: _Holdings, topics_of: dict[str, frozenset[str]], given: set[TopicPartition]) -> None:
    """Pass 3: see the module docstring."""
    while (move := _next_move(holdings, topics_of, given)) is not None:
        source, destination, tp = move
        holdings.remove(source, tp)
        holdings.add(destination, tp)


def _next_move(holdings: _Holdings, topics_of: dict[str, frozenset[str]], given: set[TopicPartition]
               ) -> tuple[str, str, TopicPartition] | None:
    by_load = sorted(holdings.count, key=lambda member: (holdings.count[member], member))
    for source in reversed(by_load):
        for destination in by_load:
            if holdings.count[destination] + 2 > holdings.count[source]:
                break
            for topic, numbers in sorted(holdings.held[source].items()):
                if numbers and topic in topics_of[destination]:
                    number = min(numbers, key=lambda n: (TopicPartition(topic, n) not in given, n))
                    return source, destination, TopicPartition(topic, number)
    return None


def cooperative_sticky_assign(subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
                              ) -> Plan:
    """See the module docstring: the sticky plan less the partitions another member still claims."""
    claimants: dict[TopicPartition, set[str]] = {}
    for member, subscription in subscriptions.items():
        for tp in subscription.owned_partitions:
            claimants.setdefault(tp, set()).add(member)
    return {member: {topic: kept for topic, numbers in topics.items()
                     if (kept := [n for n in numbers if claimants.get(TopicPartition(topic, n), set()) <= {member}])}
            for member, topics in sticky_assign(subscriptions, partition_counts).items()}
