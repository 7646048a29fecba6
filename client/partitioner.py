"""Kafka's default partitioner: murmur2 of the key bytes, sticky partitions for null keys.

A keyed record goes to `to_positive(murmur2(key)) % num_partitions`, bit for bit Kafka's
`Utils.murmur2` and `Utils.toPositive`, so the same key lands on the same partition number as
with a Java producer. A record without a key sticks to one partition until the batch it joined
is full or sent (KIP-480); the next partition is drawn at random among those with a leader, so
null-key traffic fills few large batches instead of many small ones.
"""

from __future__ import annotations

import random

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`: the 32-bit MurmurHash2 of `data` as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length & ~3
    for word in memoryview(data[:end]).cast("I") if end and _LITTLE_ENDIAN_WORDS else _words(data, end):
        k = (word * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _words(data: bytes, end: int) -> list[int]:
    return [int.from_bytes(data[i : i + 4], "little") for i in range(0, end, 4)]


_LITTLE_ENDIAN_WORDS = memoryview(b"\x01\x00\x00\x00").cast("I")[0] == 1


def to_positive(number: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not abs, which overflows at MIN_VALUE)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    assert num_partitions > 0, f"num_partitions={num_partitions}"
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """The partition null-key records of each topic stick to (KIP-480's `StickyPartitionCache`)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, available: list[int], num_partitions: int) -> int:
        """The topic's sticky partition, choosing one if there is none yet."""
        current = self._sticky.get(topic)
        if current is not None and current < num_partitions:
            return current
        return self.next_partition(topic, available, num_partitions, current)

    def next_partition(self, topic: str, available: list[int], num_partitions: int, previous: int | None) -> int:
        """Move on from `previous` (its batch is full or was sent) to another partition."""
        if self._sticky.get(topic) != previous:
            return self._sticky[topic]  # another batch already moved it on
        choices = [p for p in available if p != previous] or available or list(range(num_partitions))
        choice = choices[0] if len(choices) == 1 else self._rng.choice(choices)
        self._sticky[topic] = choice
        return choice
