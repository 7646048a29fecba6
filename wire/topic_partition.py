"""`TopicPartition`: the name of one partition, as every layer and both protocols spell it."""

from __future__ import annotations

import re
from dataclasses import dataclass

_DIGITS_PATTERN = re.compile(r"[0-9]+")


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """A partition of a topic; `str()` is its log directory name, `<topic>-<partition>`."""

    topic: str
    partition: int

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
