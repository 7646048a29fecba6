"""Kafka's consumer protocol formats (ConsumerProtocolSubscription / ConsumerProtocolAssignment)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.consumer_protocol import (
    SUBSCRIPTION_VERSION,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from wire.topic_partition import TopicPartition

names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=4)
subscriptions = st.builds(
    Subscription, st.lists(names, max_size=4).map(lambda topics: tuple(sorted(set(topics)))),
    st.none() | st.binary(max_size=8),
    st.frozensets(st.builds(TopicPartition, names, st.integers(0, 2**31 - 1)), max_size=6),
    st.integers(-1, 2**31 - 1), st.none() | names)


def test_a_v1_subscription_has_kafkas_layout() -> None:
    """Version, topics, null user data, then the owned partitions grouped by topic (KIP-429)."""
    data = encode_subscription(Subscription(("t",), owned_partitions=frozenset({TopicPartition("t", 0)})), version=1)
    assert data == bytes.fromhex("0001" "00000001" "000174" "ffffffff" "00000001" "000174" "00000001" "00000000")


@given(subscriptions, st.integers(0, SUBSCRIPTION_VERSION))
def test_a_subscription_keeps_the_fields_its_version_has(subscription: Subscription, version: int) -> None:
    decoded = decode_subscription(encode_subscription(subscription, version))
    assert decoded.topics == subscription.topics
    assert decoded.user_data == subscription.user_data
    assert decoded.owned_partitions == (subscription.owned_partitions if version >= 1 else frozenset())
    assert decoded.generation_id == (subscription.generation_id if version >= 2 else -1)
    assert decoded.rack_id == (subscription.rack_id if version >= 3 else None)


@given(subscriptions, st.binary(max_size=12))
def test_a_newer_version_is_read_as_the_newest_known_and_its_added_fields_ignored(
        subscription: Subscription, added: bytes) -> None:
    data = encode_subscription(subscription)
    assert decode_subscription(b"\x00\x07" + data[2:] + added) == subscription


@given(subscriptions)
def test_every_truncated_subscription_is_refused(subscription: Subscription) -> None:
    data = encode_subscription(subscription)
    for end in range(len(data)):
        with pytest.raises(ConsumerProtocolError):
            decode_subscription(data[:end])


def test_counts_versions_and_partitions_from_outside_are_checked() -> None:
    for data in (b"\xff\xff" + bytes(8),  # a negative version
                 b"\x00\x00\x7f\xff\xff\xff",  # two billion topics in no bytes
                 b"\x00\x00\xff\xff\xff\xfe",  # a negative count
                 b"\x00\x00\x00\x00\x00\x01\x00\x01\xff\xff\xff\xff\xff"):  # a name that is not UTF-8
        with pytest.raises(ConsumerProtocolError):
            decode_subscription(data)
    negative = encode_assignment({"t": [0]})[:-8] + b"\xff\xff\xff\xfe" + b"\xff\xff\xff\xff"
    with pytest.raises(ConsumerProtocolError, match="negative partition"):
        decode_assignment(negative)


def test_assignments_round_trip_and_refuse_truncated_bytes() -> None:
    assignment = {"orders": [2, 0], "audit": [1]}
    data = encode_assignment(assignment)
    assert decode_assignment(data) == {"audit": [1], "orders": [0, 2]}
    assert decode_assignment(b"\x00\x09" + data[2:] + b"later fields") == {"audit": [1], "orders": [0, 2]}
    assert decode_assignment(b"") == {}
    for end in range(1, len(data)):
        with pytest.raises(ConsumerProtocolError):
            decode_assignment(data[:end])
