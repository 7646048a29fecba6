"""Group metadata records in Kafka's formats (GroupMetadataKey version 2, GroupMetadataValue version
3), checked against bytes laid out by hand from Kafka's schema files, and read back from older
value versions."""

from __future__ import annotations

import struct

import pytest

from replication.group_coordinator import decode_key
from replication.group_metadata import (
    GroupMetadata,
    MemberMetadata,
    decode_group_key,
    decode_group_value,
    encode_group_key,
    encode_group_value,
)

MEMBER = MemberMetadata("m-1", "host-a", "client", "/127.0.0.1", 30_000, 10_000, b"sub", b"asg")
GROUP = GroupMetadata("consumer", 7, "range", "m-1", (MEMBER,))


def s(text: str | None) -> bytes:
    """A Kafka STRING / NULLABLE_STRING: int16 length (-1 for null), then UTF-8."""
    return struct.pack(">h", -1) if text is None else struct.pack(">h", len(text)) + text.encode()


def b(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def test_the_key_is_version_2_with_the_group_id_and_is_not_an_offset_commit_key() -> None:
    assert encode_group_key("billing") == b"\x00\x02" + s("billing")
    assert decode_group_key(encode_group_key("billing")) == "billing"
    assert decode_key(encode_group_key("billing")) is None, "the offsets replay tells the two apart"


def test_the_value_is_kafkas_version_3_layout() -> None:
    expected = (struct.pack(">h", 3) + s("consumer") + struct.pack(">i", 7) + s("range") + s("m-1")
                + struct.pack(">q", 1_234) + struct.pack(">i", 1)
                + s("m-1") + s("host-a") + s("client") + s("/127.0.0.1") + struct.pack(">ii", 30_000, 10_000)
                + b(b"sub") + b(b"asg"))
    assert encode_group_value(GROUP, 1_234) == expected
    assert decode_group_value(expected) == GROUP


def test_an_empty_group_has_null_protocol_and_leader() -> None:
    empty = GroupMetadata("consumer", 8, None, None)
    value = encode_group_value(empty, 0)
    assert value == struct.pack(">h", 3) + s("consumer") + struct.pack(">i", 8) + s(None) + s(None) \
        + struct.pack(">qi", 0, 0)
    assert decode_group_value(value) == empty


def test_older_versions_read_with_kafkas_defaults() -> None:
    """Version 0 has no rebalance timeout (the session timeout stands in) and no instance id."""
    version_0 = (struct.pack(">h", 0) + s("consumer") + struct.pack(">i", 2) + s("range") + s("m")
                 + struct.pack(">i", 1) + s("m") + s("c") + s("h") + struct.pack(">i", 10_000) + b(b"x") + b(b"y"))
    assert decode_group_value(version_0) == GroupMetadata(
        "consumer", 2, "range", "m", (MemberMetadata("m", None, "c", "h", 10_000, 10_000, b"x", b"y"),))


@pytest.mark.parametrize("value", [b"\x00\x04" + s("consumer"), b"\x00\x03" + s("consumer")[:-1],
                                   encode_group_value(GROUP, 0)[:-1]])
def test_a_value_that_does_not_decode_raises(value: bytes) -> None:
    with pytest.raises((struct.error, ValueError)):
        decode_group_value(value)
