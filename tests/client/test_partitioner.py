"""Kafka's default partitioner: murmur2 bit for bit, and sticky partitions for null keys (KIP-480).

Method: murmur2 is checked against the values in Kafka's own `UtilsTest.testMurmur2` and, for
random inputs, against kafka-python's independent port; stickiness is checked on the
partitioner alone with a seeded generator.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from client.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2.items())
def test_murmur2_matches_kafkas_utils(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(key: bytes) -> None:
    assert to_positive(murmur2(key)) == kafka_python_murmur2(key) & 0x7FFFFFFF


def test_murmur2_of_empty_key_is_a_signed_32_bit_int() -> None:
    assert -(2**31) <= murmur2(b"") < 2**31


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(-(2**31)) == 0  # Math.abs would overflow here; Kafka masks instead
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(5) == 5


def test_keys_map_to_kafkas_partition_numbers() -> None:
    for key, hashed in KAFKA_MURMUR2.items():
        assert partition_for_key(key, 7) == (hashed & 0x7FFFFFFF) % 7


def test_null_keys_stick_to_one_partition_until_told_to_move() -> None:
    partitioner = StickyPartitioner(random.Random(1))
    first = partitioner.partition("t", [0, 1, 2, 3], 4)
    assert all(partitioner.partition("t", [0, 1, 2, 3], 4) == first for _ in range(100))
    moved = partitioner.next_partition("t", [0, 1, 2, 3], 4, first)
    assert moved != first
    assert partitioner.partition("t", [0, 1, 2, 3], 4) == moved


def test_a_stale_move_request_keeps_the_current_sticky_partition() -> None:
    partitioner = StickyPartitioner(random.Random(2))
    first = partitioner.partition("t", [0, 1, 2], 3)
    second = partitioner.next_partition("t", [0, 1, 2], 3, first)
    assert partitioner.next_partition("t", [0, 1, 2], 3, first) == second


def test_sticky_partitions_are_chosen_among_those_with_a_leader() -> None:
    partitioner = StickyPartitioner(random.Random(3))
    chosen = {partitioner.next_partition("t", [2, 3], 5, partitioner.partition("t", [2, 3], 5)) for _ in range(20)}
    assert chosen <= {2, 3}


def test_topics_stick_independently() -> None:
    partitioner = StickyPartitioner(random.Random(4))
    a = partitioner.partition("a", [0, 1], 2)
    partitioner.next_partition("b", [0, 1], 2, partitioner.partition("b", [0, 1], 2))
    assert partitioner.partition("a", [0, 1], 2) == a
