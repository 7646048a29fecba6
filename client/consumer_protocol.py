"""Kafka's consumer protocol: the subscription a member joins with and the assignment its group's
leader gives it (ConsumerProtocolSubscription / ConsumerProtocolAssignment, version 0), opaque to
the coordinator. Big-endian: a version i16, then

    subscription: topics (i32 count, each an i16-length UTF-8 string), user data (i32 length, -1 null)
    assignment:   (i32 count of) topic (i16-length string) and partitions (i32 count, each i32),
                  then user data (i32 length, -1 null)

Decoding checks every length against the bytes present: what another member sent is input.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

VERSION = 0
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(ValueError):
    """Bytes that are not a subscription or an assignment."""


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def encode_subscription(topics: Iterable[str]) -> bytes:
    names = sorted(set(topics))
    return _I16.pack(VERSION) + _I32.pack(len(names)) + b"".join(_string(name) for name in names) + _I32.pack(-1)


def encode_assignment(partitions: Mapping[str, Iterable[int]]) -> bytes:
    parts = [_string(topic) + _I32.pack(len(numbers := sorted(indexes))) + b"".join(_I32.pack(n) for n in numbers)
             for topic, indexes in sorted(partitions.items())]
    return _I16.pack(VERSION) + _I32.pack(len(parts)) + b"".join(parts) + _I32.pack(-1)


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

    def string(self) -> str:
        try:
            return self.take(self.i16()).decode()
        except UnicodeDecodeError as error:
            raise ConsumerProtocolError(f"a name is not UTF-8: {error}") from None

    def count(self) -> int:
        count = self.i32()
        if count < 0 or count > len(self.data):
            raise ConsumerProtocolError(f"a count of {count} in {len(self.data)} bytes")
        return count


def decode_subscription(data: bytes) -> list[str]:
    reader = _Reader(data)
    reader.i16()  # later versions add fields after these; they are read the same way
    return [reader.string() for _ in range(reader.count())]


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    if not data:
        return {}  # a member the leader gave nothing
    reader = _Reader(data)
    reader.i16()
    assignment: dict[str, list[int]] = {}
    for _ in range(reader.count()):
        topic = reader.string()
        assignment[topic] = [reader.i32() for _ in range(reader.count())]
    return assignment


def range_assign(subscriptions: Mapping[str, Iterable[str]], partition_counts: Mapping[str, int]
                 ) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor: per topic, its subscribers in member-id order get consecutive ranges,
    the first `partitions % members` one partition more than the others."""
    assignment: dict[str, dict[str, list[int]]] = {member: {} for member in subscriptions}
    for topic, count in sorted(partition_counts.items()):
        members = sorted(member for member, topics in subscriptions.items() if topic in set(topics))
        if not members:
            continue
        share, extra = divmod(count, len(members))
        start = 0
        for index, member in enumerate(members):
            size = share + (1 if index < extra else 0)
            if size:
                assignment[member][topic] = list(range(start, start + size))
            start += size
    return assignment
