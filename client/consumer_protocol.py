"""Kafka's consumer protocol: the subscription a member joins with and the assignment its group's
leader gives it (ConsumerProtocolSubscription / ConsumerProtocolAssignment), opaque to the
coordinator. Big-endian, a version i16 first, then (Kafka's message schemas, versions 0-3):

    subscription: topics (i32 count, each an i16-length UTF-8 string), user data (i32 length, -1 null);
                  v1+ owned partitions (i32 count of topic and i32 array of partitions, KIP-429);
                  v2+ generation id i32 (the generation the owned partitions were assigned in);
                  v3+ rack id (i16-length string, -1 null; KIP-881)
    assignment:   (i32 count of) topic (i16-length string) and partitions (i32 count, each i32),
                  then user data (i32 length, -1 null); the same in every version 0-3

As Kafka's ConsumerProtocol does, a newer version than we know is read as the newest we know, and
bytes after the fields of the version read are ignored: a later version only adds fields at the
end. Decoding checks every length and count against the bytes present and refuses negative
partitions: what another member sent is input.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from wire.topic_partition import TopicPartition

SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3
NO_GENERATION = -1
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(ValueError):
    """Bytes that are not a subscription or an assignment."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """A member's subscription. `owned_partitions` and `generation_id` (KIP-429) let a cooperative
    assignor keep partitions where they are and move only what it must."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: frozenset[TopicPartition] = frozenset()
    generation_id: int = NO_GENERATION
    rack_id: str | None = None


def _string(text: str | None) -> bytes:
    if text is None:
        return _I16.pack(-1)
    data = text.encode()
    return _I16.pack(len(data)) + data


def _bytes(data: bytes | None) -> bytes:
    return _I32.pack(-1) if data is None else _I32.pack(len(data)) + data


def _topic_partitions(partitions: Mapping[str, Iterable[int]]) -> bytes:
    parts = [_string(topic) + _I32.pack(len(numbers := sorted(set(indexes)))) + b"".join(map(_I32.pack, numbers))
             for topic, indexes in sorted(partitions.items())]
    return _I32.pack(len(parts)) + b"".join(parts)


def encode_subscription(subscription: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    """The subscription at `version` (0-3); fields the version lacks are left out."""
    assert 0 <= version <= SUBSCRIPTION_VERSION, f"subscription version {version}"
    names = sorted(set(subscription.topics))
    parts = [_I16.pack(version), _I32.pack(len(names)), *map(_string, names), _bytes(subscription.user_data)]
    if version >= 1:
        owned: dict[str, list[int]] = {}
        for tp in subscription.owned_partitions:
            owned.setdefault(tp.topic, []).append(tp.partition)
        parts.append(_topic_partitions(owned))
    if version >= 2:
        parts.append(_I32.pack(subscription.generation_id))
    if version >= 3:
        parts.append(_string(subscription.rack_id))
    return b"".join(parts)


def encode_assignment(partitions: Mapping[str, Iterable[int]], user_data: bytes | None = None) -> bytes:
    return _I16.pack(ASSIGNMENT_VERSION) + _topic_partitions(partitions) + _bytes(user_data)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0

    def take(self, size: int) -> bytes:
        if size < 0 or self.position + size > len(self.data):
            raise ConsumerProtocolError(f"{size} bytes wanted at {self.position} of {len(self.data)}")
        chunk = self.data[self.position : self.position + size]
        self.position += size
        return chunk

    def i16(self) -> int:
        return _I16.unpack(self.take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self.take(4))[0]

    def version(self) -> int:
        version = self.i16()
        if version < 0:
            raise ConsumerProtocolError(f"version {version}")
        return version

    def string(self, nullable: bool = False) -> str | None:
        size = self.i16()
        if size == -1 and nullable:
            return None
        try:
            return self.take(size).decode()
        except UnicodeDecodeError as error:
            raise ConsumerProtocolError(f"a name is not UTF-8: {error}") from None

    def name(self) -> str:
        text = self.string()
        assert text is not None
        return text

    def nullable_bytes(self) -> bytes | None:
        size = self.i32()
        return None if size == -1 else self.take(size)

    def count(self, item_size: int) -> int:
        """An array's count, refused if its items (at least `item_size` bytes each) cannot fit."""
        count = self.i32()
        if count < 0 or count * item_size > len(self.data) - self.position:
            raise ConsumerProtocolError(f"a count of {count} with {len(self.data) - self.position} bytes left")
        return count

    def topic_partitions(self) -> dict[str, set[int]]:
        found: dict[str, set[int]] = {}
        for _ in range(self.count(6)):
            topic = self.name()
            numbers = [self.i32() for _ in range(self.count(4))]
            if any(number < 0 for number in numbers):
                raise ConsumerProtocolError(f"a negative partition of {topic}: {numbers}")
            found.setdefault(topic, set()).update(numbers)
        return found


def decode_subscription(data: bytes) -> Subscription:
    reader = _Reader(data)
    version = min(reader.version(), SUBSCRIPTION_VERSION)
    topics = tuple(reader.name() for _ in range(reader.count(2)))
    user_data = reader.nullable_bytes()
    owned: frozenset[TopicPartition] = frozenset()
    generation_id, rack_id = NO_GENERATION, None
    if version >= 1:
        owned = frozenset(TopicPartition(topic, number) for topic, numbers in reader.topic_partitions().items()
                          for number in numbers)
    if version >= 2:
        generation_id = reader.i32()
    if version >= 3:
        rack_id = reader.string(nullable=True)
    return Subscription(topics, user_data, owned, generation_id, rack_id)


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    if not data:
        return {}  # a member the leader gave nothing
    reader = _Reader(data)
    reader.version()  # every version has the same layout
    assignment = {topic: sorted(numbers) for topic, numbers in reader.topic_partitions().items()}
    reader.nullable_bytes()  # user data: none of our assignors gives any
    return assignment
