"""The assignors a group's leader runs: range, round-robin and cooperative-sticky (KIP-429),
checked against plain models of what each promises."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping

from hypothesis import given
from hypothesis import strategies as st

from client.assignors import range_assign, round_robin_assign
from client.consumer_protocol import Subscription
from client.sticky_assignor import Plan, cooperative_sticky_assign, sticky_assign
from wire.topic_partition import TopicPartition


def subscribed(topics_of: dict[str, list[str]]) -> dict[str, Subscription]:
    return {member: Subscription(tuple(topics)) for member, topics in topics_of.items()}


def test_the_range_assignor_gives_consecutive_ranges_the_first_members_one_more() -> None:
    """Kafka's RangeAssignor example: two members, two topics of three partitions each."""
    assert range_assign(subscribed({"c0": ["t0", "t1"], "c1": ["t0", "t1"]}), {"t0": 3, "t1": 3}) == {
        "c0": {"t0": [0, 1], "t1": [0, 1]}, "c1": {"t0": [2], "t1": [2]}}
    assert range_assign(subscribed({"a": ["t"], "b": ["u"]}), {"t": 2, "u": 1}) == {"a": {"t": [0, 1]}, "b": {"u": [0]}}


@given(st.dictionaries(st.text(min_size=1, max_size=3), st.sets(st.sampled_from(["t", "u", "v"])), max_size=6),
       st.fixed_dictionaries({"t": st.integers(0, 9), "u": st.integers(0, 9), "v": st.integers(0, 9)}))
def test_range_gives_every_partition_of_a_subscribed_topic_exactly_one_owner(
        topics_of: dict[str, set[str]], counts: dict[str, int]) -> None:
    plan = range_assign(subscribed({member: sorted(topics) for member, topics in topics_of.items()}), counts)
    for topic, count in counts.items():
        owners = [index for parts in plan.values() for index in parts.get(topic, [])]
        anyone = any(topic in topics for topics in topics_of.values())
        assert sorted(owners) == (list(range(count)) if anyone else [])


# -- checks shared by the assignors ----------------------------------------------------------------

TOPICS = ("t", "u", "v")
member_ids = st.sampled_from([f"m{n}" for n in range(7)])
topic_sets = st.sets(st.sampled_from(TOPICS))
counts_of_topics = st.fixed_dictionaries({topic: st.integers(0, 9) for topic in TOPICS})


def owners(plan: Plan) -> dict[TopicPartition, list[str]]:
    found: dict[TopicPartition, list[str]] = {}
    for member, topics in plan.items():
        for topic, numbers in topics.items():
            for number in numbers:
                found.setdefault(TopicPartition(topic, number), []).append(member)
    return found


def all_partitions(subscriptions: Mapping[str, Subscription], counts: Mapping[str, int]) -> set[TopicPartition]:
    """Every partition of a topic some member subscribes to."""
    return {TopicPartition(topic, number) for topic, count in counts.items() for number in range(count)
            if any(topic in subscription.topics for subscription in subscriptions.values())}


def assert_assigned_at_most_once_to_subscribers(plan: Plan, subscriptions: Mapping[str, Subscription]) -> None:
    assert set(plan) == set(subscriptions)
    for tp, holders in owners(plan).items():
        assert len(holders) == 1, f"{tp} assigned to {holders}"
        assert tp.topic in subscriptions[holders[0]].topics, f"{tp} assigned to {holders[0]}, not a subscriber"


def assert_complete(plan: Plan, subscriptions: Mapping[str, Subscription], counts: Mapping[str, int]) -> None:
    """Every partition of a subscribed topic assigned exactly once, to a subscriber of its topic."""
    assert_assigned_at_most_once_to_subscribers(plan, subscriptions)
    assert set(owners(plan)) == all_partitions(subscriptions, counts)


def sizes(plan: Plan) -> dict[str, int]:
    return {member: sum(map(len, topics.values())) for member, topics in plan.items()}


def assert_balanced(plan: Plan, subscriptions: Mapping[str, Subscription]) -> None:
    """Members of the same subscription hold within one partition of each other, and (Kafka's
    isBalanced) no partition could go from a member to one holding two fewer that subscribes to it."""
    size = sizes(plan)
    for member, other in itertools.permutations(plan, 2):
        if set(subscriptions[member].topics) == set(subscriptions[other].topics):
            assert abs(size[member] - size[other]) <= 1, (member, other, plan)
        if size[member] >= size[other] + 2:
            assert not set(plan[member]) & set(subscriptions[other].topics), (member, other, plan)


def owning(plan: Plan, generation: int, topics_of: Mapping[str, Iterable[str]]) -> dict[str, Subscription]:
    """Subscriptions of members that own what `plan` gave them in `generation`."""
    return {member: Subscription(tuple(topics_of[member]), owned_partitions=frozenset(
        tp for tp, holders in owners(plan).items() if holders == [member]), generation_id=generation)
        for member in topics_of}


# -- round-robin ------------------------------------------------------------------------------------


def test_round_robin_deals_sorted_partitions_in_turn_as_kafkas_documentation_shows() -> None:
    assert round_robin_assign(subscribed({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}), {"t0": 3, "t1": 3}) == {
        "C0": {"t0": [0, 2], "t1": [1]}, "C1": {"t0": [1], "t1": [0, 2]}}
    assert round_robin_assign(subscribed({"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}),
                              {"t0": 1, "t1": 2, "t2": 3}) == {
        "C0": {"t0": [0]}, "C1": {"t1": [0]}, "C2": {"t1": [1], "t2": [0, 1, 2]}}


@given(st.dictionaries(member_ids, topic_sets, min_size=1), counts_of_topics)
def test_round_robin_assigns_every_partition_once_and_evenly_to_one_subscription(
        topics_of: dict[str, set[str]], counts: dict[str, int]) -> None:
    subscriptions = subscribed({member: sorted(topics) for member, topics in topics_of.items()})
    plan = round_robin_assign(subscriptions, counts)
    assert_complete(plan, subscriptions, counts)
    if len({frozenset(topics) for topics in topics_of.values()}) == 1:
        assert max(sizes(plan).values()) - min(sizes(plan).values()) <= 1


# -- sticky and cooperative-sticky ------------------------------------------------------------------


@st.composite
def claims(draw: st.DrawFn) -> tuple[dict[str, Subscription], dict[str, int]]:
    """Members with any subscriptions claiming any partitions, existing or not, in any generation:
    what a leader may be sent."""
    counts = draw(counts_of_topics)
    topics_of = draw(st.dictionaries(member_ids, topic_sets, min_size=1))
    subscriptions = {member: Subscription(tuple(sorted(topics)), owned_partitions=draw(st.frozensets(
        st.builds(TopicPartition, st.sampled_from(TOPICS), st.integers(0, 11)), max_size=12)),
        generation_id=draw(st.sampled_from([-1, 4, 5]))) for member, topics in topics_of.items()}
    return subscriptions, counts


@given(claims())
def test_sticky_assigns_every_partition_once_in_balance_whatever_the_members_claim(
        case: tuple[dict[str, Subscription], dict[str, int]]) -> None:
    subscriptions, counts = case
    plan = sticky_assign(subscriptions, counts)
    assert_complete(plan, subscriptions, counts)
    assert_balanced(plan, subscriptions)


@given(st.integers(1, 6), st.integers(0, 30), st.data())
def test_sticky_keeps_as_many_owned_partitions_as_a_balanced_assignment_can(
        members: int, partitions: int, data: st.DataObject) -> None:
    """One subscription, each partition owned by one member or none: the members keep the most
    that fits the balanced sizes (the larger shares go to those that owned the most)."""
    ids = [f"m{n}" for n in range(members)]
    holder = data.draw(st.lists(st.sampled_from([*ids, None]), min_size=partitions, max_size=partitions))
    subscriptions = {member: Subscription(("t",), owned_partitions=frozenset(
        TopicPartition("t", n) for n, owner in enumerate(holder) if owner == member), generation_id=3)
        for member in ids}
    plan = sticky_assign(subscriptions, {"t": partitions})
    assert_complete(plan, subscriptions, {"t": partitions})
    assert_balanced(plan, subscriptions)
    share, larger = divmod(partitions, members)
    owned = sorted((len(subscriptions[member].owned_partitions) for member in ids), reverse=True)
    best = sum(min(count, share + (index < larger)) for index, count in enumerate(owned))
    kept = sum(len(set(plan[member].get("t", [])) & {tp.partition for tp in subscriptions[member].owned_partitions})
               for member in ids)
    assert kept == best


@given(st.dictionaries(member_ids, topic_sets, min_size=1), counts_of_topics,
       st.sampled_from([sticky_assign, cooperative_sticky_assign]))
def test_nothing_moves_when_members_and_subscriptions_stay(
        topics_of: dict[str, set[str]], counts: dict[str, int], assign: Callable[..., Plan]) -> None:
    first = assign(subscribed({member: sorted(topics) for member, topics in topics_of.items()}), counts)
    assert assign(owning(first, 1, topics_of), counts) == first


@given(st.integers(1, 6), st.integers(0, 40))
def test_a_member_joining_one_subscription_takes_only_its_share(members: int, partitions: int) -> None:
    """The fewest moves: the newcomer's balanced share, floor(P / (N + 1)), all from others to it."""
    topics_of = {f"m{n}": ["t"] for n in range(members)}
    before = sticky_assign(subscribed(topics_of), {"t": partitions})
    after = sticky_assign(owning(before, 1, {**topics_of, "new": ["t"]}), {"t": partitions})
    moved = {tp for tp, holders in owners(after).items() if owners(before).get(tp) != holders}
    assert len(moved) == partitions // (members + 1)
    assert {owners(after)[tp][0] for tp in moved} <= {"new"}


@given(claims())
def test_cooperative_never_gives_a_partition_another_member_still_owns(
        case: tuple[dict[str, Subscription], dict[str, int]]) -> None:
    subscriptions, counts = case
    plan = cooperative_sticky_assign(subscriptions, counts)
    assert_assigned_at_most_once_to_subscribers(plan, subscriptions)
    for tp, holders in owners(plan).items():
        assert all(tp not in subscriptions[member].owned_partitions for member in subscriptions if member != holders[0])
    claimed = {tp for subscription in subscriptions.values() for tp in subscription.owned_partitions}
    assert all_partitions(subscriptions, counts) - set(owners(plan)) <= claimed, "left out yet owned by nobody"


def settle(before: dict[str, set[str]], after: dict[str, set[str]], counts: dict[str, int]
           ) -> tuple[int, Plan, dict[str, Subscription]]:
    """Members `before` hold a cooperative-sticky assignment; then the members are `after`. Each
    generation, members give up what they were not assigned and join again with what they own.
    The generations until an assignment is given that moves nothing more, and that assignment."""
    plan = cooperative_sticky_assign(subscribed({member: sorted(topics) for member, topics in before.items()}), counts)
    for generation in range(1, SETTLE_MAX + 1):
        subscriptions = owning({member: plan.get(member, {}) for member in after}, generation, after)
        plan = cooperative_sticky_assign(subscriptions, counts)
        if all(set(owners(plan)) >= subscription.owned_partitions for subscription in subscriptions.values()) \
                and set(owners(plan)) == all_partitions(subscriptions, counts):
            return generation, plan, subscriptions
    raise AssertionError(f"no settled assignment in {SETTLE_MAX} generations: {plan}")


SETTLE_MAX = 8


@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 30))
def test_cooperative_rebalances_of_one_subscription_settle_in_two_generations(
        before: int, after: int, partitions: int) -> None:
    """KIP-429's two rebalances: the first takes away what moves, the second gives it out."""
    members = {f"m{n}": {"t"} for n in range(max(before, after))}
    generations, plan, subscriptions = settle(dict(list(members.items())[:before]),
                                              dict(list(members.items())[-after:]), {"t": partitions})
    assert generations <= 2
    assert_complete(plan, subscriptions, {"t": partitions})
    assert_balanced(plan, subscriptions)


@given(st.dictionaries(member_ids, topic_sets, min_size=1), st.dictionaries(member_ids, topic_sets, min_size=1),
       counts_of_topics)
def test_cooperative_rebalances_settle_in_balance_after_members_change(
        before: dict[str, set[str]], after: dict[str, set[str]], counts: dict[str, int]) -> None:
    """Mixed subscriptions may take a generation or two more: balance in one may ask to move a
    partition the previous one gave out (each generation is safe, as the test above checks)."""
    _, plan, subscriptions = settle(before, after, counts)
    assert_complete(plan, subscriptions, counts)
    assert_balanced(plan, subscriptions)
