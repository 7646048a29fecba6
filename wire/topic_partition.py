"""`TopicPartition`: the name of one partition, as every layer and both protocols spell it."""

from __future__ import annotations

import re
from dataclasses import dataclass

_DIGITS_PATTERN = re.compile(r"[0-9]+")


@dataclass(frozen=True, order=True)
class TopicPartition:
    """A partition of a topic; `str()` is its log directory name, `<topic>-<partition>`.

    Its hash is computed once, at construction: partitions key the broker's maps and sets, and
    the dataclass's own `__hash__` built a tuple on every lookup. The value is the one that
    `__hash__` gave, so equality, ordering and iteration orders do not change."""

    __slots__ = ("_hash", "partition", "topic")
    topic: str
    partition: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.topic, self.partition)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[TopicPartition], tuple[str, int]]:
        # pickle and copy rebuild it from its fields: a hash of a str differs between processes
        return TopicPartition, (self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @classmethod
    def from_dir_name(cls, name: str) -> TopicPartition:
        """Parse `my-topic-3`: a topic may contain '-', so the partition follows the last one."""
        topic, separator, partition = name.rpartition("-")
        if not separator or not topic or not _DIGITS_PATTERN.fullmatch(partition):
            raise ValueError(
                f"{name!r} is not a partition directory name: expected <topic>-<partition>, "
                "e.g. orders-0"
            )
        return cls(topic, int(partition))
