"""Purgatories as data: the requests a partition parks until its HW moves, or time passes.

Kafka keeps delayed operations in timer wheels and watcher lists and polls `tryComplete` when a
key is touched. Here each purgatory is a plain list owned by the core: the core checks it in the
same `handle` call that moved the HW (or LEO, or time), and the answers leave in that call's
`Ready.completions`. Nothing polls. Every list is bounded by `ReplicationConfig`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DelayedProduce:
    """An acks=all produce appended at [base_offset, required_offset): done when HW >= required_offset."""

    request_id: int
    base_offset: int
    required_offset: int
    log_append_time_ms: int
    deadline_ms: int


class ProducePurgatory:
    """Delayed acks=all produces of one leadership, by `required_offset`: in append order, as the
    leader's log only grows, except an idempotent producer's retry answered with the offsets of a
    batch appended earlier, which goes in its place. Invariant: `required_offset` never decreases
    along the list."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._waiting: list[DelayedProduce] = []

    def __len__(self) -> int:
        return len(self._waiting)

    @property
    def is_full(self) -> bool:
        return len(self._waiting) >= self.capacity

    def add(self, delayed: DelayedProduce) -> None:
        assert not self.is_full, f"purgatory holds {len(self._waiting)} >= {self.capacity}"
        bisect.insort_right(self._waiting, delayed, key=lambda waiting: waiting.required_offset)

    def pop_reached(self, high_watermark: int) -> list[DelayedProduce]:
        """The produces whose records are all below `high_watermark`, oldest first."""
        count = 0
        while count < len(self._waiting) and self._waiting[count].required_offset <= high_watermark:
            count += 1
        done, self._waiting = self._waiting[:count], self._waiting[count:]
        return done

    def pop_expired(self, now_ms: int) -> list[DelayedProduce]:
        done = [delayed for delayed in self._waiting if delayed.deadline_ms <= now_ms]
        if done:
            self._waiting = [delayed for delayed in self._waiting if delayed.deadline_ms > now_ms]
        return done

    def pop_all(self) -> list[DelayedProduce]:
        done, self._waiting = self._waiting, []
        return done

    def next_deadline_ms(self) -> int | None:
        if not self._waiting:
            return None
        return min(delayed.deadline_ms for delayed in self._waiting)


@dataclass(frozen=True, slots=True)
class DelayedDeleteRecords:
    """A DeleteRecords waiting for every ISR member's logStartOffset to reach `offset`."""

    request_id: int
    offset: int
    deadline_ms: int


class DelayedList:
    """Parked requests of one kind with deadlines, in arrival order; bounded by `capacity`."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: list[DelayedDeleteRecords] = []

    def __len__(self) -> int:
        return len(self.items)

    @property
    def is_full(self) -> bool:
        return len(self.items) >= self.capacity

    def add(self, item: DelayedDeleteRecords) -> None:
        assert not self.is_full, f"{len(self.items)} parked >= {self.capacity}"
        self.items.append(item)

    def take_all(self) -> list[DelayedDeleteRecords]:
        taken, self.items = self.items, []
        return taken

    def next_deadline_ms(self) -> int | None:
        if not self.items:
            return None
        return min(item.deadline_ms for item in self.items)
