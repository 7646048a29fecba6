"""The assignors a group's leader runs: range, round-robin and cooperative-sticky (KIP-429),
checked against plain models of what each promises."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from client.assignors import range_assign
from client.consumer_protocol import Subscription


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
