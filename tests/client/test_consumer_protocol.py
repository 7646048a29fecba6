"""Kafka's consumer protocol formats and the range assignor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.consumer_protocol import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)


def test_the_range_assignor_gives_consecutive_ranges_the_first_members_one_more() -> None:
    """Kafka's RangeAssignor example: two members, two topics of three partitions each."""
    subscriptions = {"c0": ["t0", "t1"], "c1": ["t0", "t1"]}
    assert range_assign(subscriptions, {"t0": 3, "t1": 3}) == {
        "c0": {"t0": [0, 1], "t1": [0, 1]}, "c1": {"t0": [2], "t1": [2]}}
    assert range_assign({"a": ["t"], "b": ["u"]}, {"t": 2, "u": 1}) == {"a": {"t": [0, 1]}, "b": {"u": [0]}}


@given(st.dictionaries(st.text(min_size=1, max_size=3), st.sets(st.sampled_from(["t", "u", "v"])), max_size=6),
       st.fixed_dictionaries({"t": st.integers(0, 9), "u": st.integers(0, 9), "v": st.integers(0, 9)}))
def test_every_partition_of_a_subscribed_topic_has_exactly_one_owner(subscriptions: dict, counts: dict) -> None:
    plan = range_assign({member: sorted(topics) for member, topics in subscriptions.items()}, counts)
    for topic, count in counts.items():
        owners = [index for parts in plan.values() for index in parts.get(topic, [])]
        subscribed = any(topic in topics for topics in subscriptions.values())
        assert sorted(owners) == (list(range(count)) if subscribed else [])


def test_formats_round_trip_and_refuse_truncated_bytes() -> None:
    assert decode_subscription(encode_subscription(["b", "a", "a"])) == ["a", "b"]
    assignment = {"orders": [2, 0], "audit": [1]}
    assert decode_assignment(encode_assignment(assignment)) == {"audit": [1], "orders": [0, 2]}
    assert decode_assignment(b"") == {}
    for data in (encode_assignment(assignment)[:-9], b"\x00\x00\x7f\xff\xff\xff"):
        with pytest.raises(ConsumerProtocolError):
            decode_assignment(data)
