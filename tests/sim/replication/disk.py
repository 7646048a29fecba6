"""BrokerDisk: the crash model of a broker's log directory — what survives a power loss.

Storage writes reach the page cache; only an fsync makes them durable. The model keeps, per
segment `.log` file, how many bytes are durable: everything in the files when the incarnation
opened them (it survived the previous crash), plus everything below a log's recovery point after
each step (`Log.flush` moves it to the LEO, a roll to the end of the rolled segment). A truncation
is durable at once (the file shrinks). A crash cuts every segment file to its durable length,
keeping with `tear_probability` a random part of the unflushed tail (the page cache wrote some of it
back), maybe with one damaged byte, before `LogLoader` recovers. Renames and deletions are durable
at once; files written with `write_atomically` (checkpoints, the leader-epoch cache) are fsynced
by their writers and survive whole; index files are left as they are (recovery rebuilds what it
does not trust).

A damaged byte lies in a batch's CRC-covered bytes: baseOffset, batchLength, partitionLeaderEpoch
and magic precede the CRC, and recovery cannot tell a damaged epoch from a real one (see the
report: `LogSegment.recover` keeps such a batch), so damaging them would test a gap of storage,
not replication.

`crash` returns, per partition, the offsets that may have been lost ([first non-durable offset,
LEO)), for the checker's "every ISR member lost it" excuse (DESIGN §6.1).
"""

from __future__ import annotations

import random
from pathlib import Path

from storage.checkpoint import TopicPartition
from storage.log import Log
from storage.log_manager import LogManager
from storage.log_segment import LogSegment

CRC_START = 21  # baseOffset 8, batchLength 4, partitionLeaderEpoch 4, magic 1, crc 4


def position_of(segment: LogSegment, offset: int) -> int:
    """The byte position of the first batch at or after `offset` in the segment (its size if none)."""
    if offset <= segment.base_offset:
        return 0
    if offset >= segment.next_offset:
        return segment.size
    for position, header in segment.iter_headers():
        if header.base_offset >= offset:
            return position
    return segment.size


class BrokerDisk:
    def __init__(self) -> None:
        self.durable: dict[Path, int] = {}

    def opened(self, manager: LogManager) -> None:
        """Everything in the files now survived the last crash: it is on the disk."""
        self.durable = {}
        for _, log in manager:
            for segment in log.segments:
                self.durable[segment.log_path] = segment.size

    def stepped(self, log: Log, truncated: bool) -> None:
        """After a step of the log's core: truncations shrink, flushes (the recovery point) grow
        the durable lengths."""
        recovery_point = log.recovery_point
        for segment in log.segments:
            path = segment.log_path
            size = segment.size
            durable = self.durable.get(path, 0)
            if truncated:
                durable = min(durable, size)
            elif durable == size:
                continue
            if segment.next_offset <= recovery_point:
                durable = size
            elif segment.base_offset < recovery_point:
                durable = max(durable, position_of(segment, recovery_point))
            self.durable[path] = min(durable, size)

    def crash(self, manager: LogManager, rng: random.Random, tear_probability: float
              ) -> tuple[dict[TopicPartition, tuple[int, int]], list[str]]:
        """Drop the open files unflushed and cut every segment to what a crash leaves. Returns the
        possibly lost offset range per partition and a description of the cuts, for the trace."""
        lost: dict[TopicPartition, tuple[int, int]] = {}
        cuts: list[str] = []
        for topic_partition, log in manager:
            for segment in list(log.segments):
                keep = self.durable.get(segment.log_path, 0)
                size = segment.size
                if keep < size and topic_partition not in lost:
                    lost[topic_partition] = (_offset_at(segment, keep), log.log_end_offset)
                damage_at = -1
                if keep < size and rng.random() < tear_probability:
                    torn = rng.randint(keep, size)
                    if torn > keep and rng.random() < 0.5:
                        damage_at = _crc_covered_position(segment, keep, torn, rng)
                    keep = torn
                segment.close_handlers()
                if keep < size:
                    with open(segment.log_path, "r+b") as file:
                        file.truncate(keep)
                        if damage_at >= 0:
                            file.seek(damage_at)
                            file.write(bytes([rng.randint(0, 255)]))
                    cuts.append(f"{topic_partition}/{segment.base_offset}:{size}->{keep}"
                                f"{'!' if damage_at >= 0 else ''}")
            for _, segment in log._pending_deletes:  # a dying process drops these too
                segment.close_handlers()
        return lost, cuts


def _offset_at(segment: LogSegment, position: int) -> int:
    """The first offset of the batch that extends past `position` (what a cut there loses)."""
    for batch_position, header in segment.iter_headers():
        if batch_position + header.size_in_bytes > position:
            return header.base_offset
    return segment.next_offset


def _crc_covered_position(segment: LogSegment, start: int, end: int, rng: random.Random) -> int:
    """A random byte in [start, end) that some batch's CRC covers, or -1 if there is none."""
    spans = []
    for position, header in segment.iter_headers():
        low, high = max(position + CRC_START, start), min(position + header.size_in_bytes, end)
        if low < high:
            spans.append((low, high))
    if not spans:
        return -1
    low, high = rng.choice(spans)
    return rng.randint(low, high - 1)
