"""Group metadata records of `__consumer_offsets`, in Kafka's formats.

A group's membership is stored as one record keyed by Kafka's GroupMetadataKey (key version 2: the
group id) with a GroupMetadataValue (value version 3: protocol type, generation, protocol, leader,
the current state's timestamp, and per member its id, `group.instance.id` (KIP-345), client id and
host, rebalance and session timeouts, subscription and assignment); a null value (tombstone) deletes
the group. Compaction keeps the last record per group, so a new coordinator replays the partition
and finds every group as last stored. Versions 0 to 3 are read (the fields they lack take Kafka's
defaults); version 4, Kafka's first flexible one, is not written by Kafka's classic coordinator.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member as stored: `subscription` for the group's protocol, `assignment` the leader's."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """A group as stored: no members and no protocol or leader when it is Empty."""

    protocol_type: str
    generation_id: int
    protocol: str | None
    leader: str | None
    members: tuple[MemberMetadata, ...] = ()


def encode_group_key(group_id: str) -> bytes:
    return struct.pack(">h", GROUP_KEY_VERSION) + _string(group_id)


def decode_group_key(data: bytes) -> str | None:
    """The group id of a GroupMetadataKey; None for another key version (an offset commit)."""
    (version,) = struct.unpack_from(">h", data, 0)
    if version != GROUP_KEY_VERSION:
        return None
    group_id, _ = _read_string(data, 2)
    assert group_id is not None, "a group key's group id is not nullable"
    return group_id


def encode_group_value(group: GroupMetadata, current_state_timestamp_ms: int) -> bytes:
    parts = [struct.pack(">h", GROUP_VALUE_VERSION), _string(group.protocol_type),
             struct.pack(">i", group.generation_id), _string(group.protocol), _string(group.leader),
             struct.pack(">qi", current_state_timestamp_ms, len(group.members))]
    for member in group.members:
        parts += [_string(member.member_id), _string(member.group_instance_id), _string(member.client_id),
                  _string(member.client_host),
                  struct.pack(">iii", member.rebalance_timeout_ms, member.session_timeout_ms,
                              len(member.subscription)),
                  member.subscription, struct.pack(">i", len(member.assignment)), member.assignment]
    return b"".join(parts)


def decode_group_value(data: bytes) -> GroupMetadata:
    """A GroupMetadataValue of version 0 to 3; struct.error, UnicodeDecodeError or ValueError when
    it does not decode as one."""
    (version,) = struct.unpack_from(">h", data, 0)
    if not 0 <= version <= GROUP_VALUE_VERSION:
        raise ValueError(f"GroupMetadataValue version {version} is not one of 0 to {GROUP_VALUE_VERSION}")
    protocol_type, position = _read_string(data, 2)
    (generation_id,) = struct.unpack_from(">i", data, position)
    protocol, position = _read_string(data, position + 4)
    leader, position = _read_string(data, position)
    if version >= 2:
        position += 8  # currentStateTimestamp: not needed to resume the group
    (count,) = struct.unpack_from(">i", data, position)
    position += 4
    members = []
    for _ in range(count):
        member_id, position = _read_string(data, position)
        instance_id = None
        if version >= 3:
            instance_id, position = _read_string(data, position)
        client_id, position = _read_string(data, position)
        client_host, position = _read_string(data, position)
        (session_timeout_ms,) = struct.unpack_from(">i", data, position)
        rebalance_timeout_ms = session_timeout_ms  # Kafka's default before version 1
        if version >= 1:
            rebalance_timeout_ms, session_timeout_ms = struct.unpack_from(">ii", data, position)
            position += 4
        subscription, position = _read_bytes(data, position + 4)
        assignment, position = _read_bytes(data, position)
        if member_id is None or client_id is None or client_host is None:
            raise ValueError("a member's id, client id and host are not nullable")
        members.append(MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                                      session_timeout_ms, subscription, assignment))
    if protocol_type is None:
        raise ValueError("the protocol type is not nullable")
    return GroupMetadata(protocol_type, generation_id, protocol, leader, tuple(members))


def _string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _read_string(data: bytes, position: int) -> tuple[str | None, int]:
    (length,) = struct.unpack_from(">h", data, position)
    start = position + 2
    if length < 0:
        return None, start
    if start + length > len(data):
        raise ValueError(f"a string of {length} bytes at {start} runs past the value's {len(data)}")
    return data[start:start + length].decode(), start + length


def _read_bytes(data: bytes, position: int) -> tuple[bytes, int]:
    (length,) = struct.unpack_from(">i", data, position)
    start = position + 4
    if length < 0 or start + length > len(data):
        raise ValueError(f"{length} bytes at {start} do not fit the value's {len(data)}")
    return data[start:start + length], start + length
