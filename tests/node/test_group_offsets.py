"""__consumer_offsets: Kafka's group-to-partition hash and its key/value encodings."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from replication.group_coordinator import coordinator_partition, decode_key, decode_value, encode_key, encode_value


def java_string_hash(text: str) -> int:
    """Java's String.hashCode as a signed int, written out the textbook way for comparison."""
    units = text.encode("utf-16-be")
    code = 0
    for index in range(0, len(units), 2):
        code = (code * 31 + int.from_bytes(units[index:index + 2], "big")) % 2**32
    return code - 2**32 if code >= 2**31 else code


def test_known_java_hash_codes_pick_kafkas_partition() -> None:
    assert java_string_hash("hello") == 99162322  # the JDK's documented value
    assert coordinator_partition("hello", 50) == 99162322 % 50
    assert coordinator_partition("", 50) == 0
    # a negative hashCode: Kafka's Utils.abs masks the sign bit instead of negating
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert coordinator_partition("polygenelubricants", 50) == 0


@given(st.text(max_size=40), st.integers(1, 200))
def test_partition_matches_the_reference_hash(group: str, count: int) -> None:
    assert coordinator_partition(group, count) == (java_string_hash(group) & 0x7FFFFFFF) % count


@given(st.text(max_size=30), st.text(max_size=30), st.integers(0, 2**31 - 1), st.integers(-1, 2**62),
       st.text(max_size=20), st.integers(0, 2**50), st.integers(-1, 2**31 - 1))
def test_key_and_value_round_trip(group: str, topic: str, partition: int, offset: int, metadata: str,
                                  timestamp: int, leader_epoch: int) -> None:
    assert decode_key(encode_key(group, topic, partition)) == (group, topic, partition)
    assert decode_value(encode_value(offset, metadata, timestamp, leader_epoch)) == (offset, metadata, leader_epoch)


def test_value_has_kafkas_version_3_layout() -> None:
    value = encode_value(42, "m", 7, leader_epoch=5)
    assert struct.unpack(">hqih", value[:16]) == (3, 42, 5, 1)
    assert value[16:17] == b"m" and struct.unpack(">q", value[17:]) == (7,)


def test_group_metadata_keys_are_not_offsets() -> None:
    assert decode_key(struct.pack(">h", 2) + b"\x00\x01g") is None
