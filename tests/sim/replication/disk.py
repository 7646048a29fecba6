"""BrokerDisk: one simulated broker's log directory under the shared crash model.

What survives a power loss is judged by `tests/sim/kernel/disk.DiskModel` at the OS boundary: a
file keeps what was fsynced of it (the model sees every fsync storage makes), an unsynced
truncation comes back, and with `tear_probability` a random prefix of an unsynced tail survives.
This module adds what the replication checker needs: per partition, the first offset the crash
destroyed (the first batch not kept whole: recovery drops it and everything after), for its fault
log (DESIGN §6.1: a loss is excused only by a recorded fault). The checker then requires the next
incarnation's recovered log to be exactly what is left: a pairing check of the crash model, this
cut and `LogLoader`.

A torn tail may carry one damaged byte; in a segment file it lies in a batch's CRC-covered bytes:
baseOffset, batchLength, partitionLeaderEpoch and magic precede the CRC, and recovery cannot tell a
damaged epoch from a real one (`LogSegment.recover` keeps such a batch, as Kafka's does), so
damaging them would test that gap of the record format, not replication (regression seed 17).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from storage.log_manager import LogManager
from storage.records import BATCH_HEADER_SIZE, iter_headers
from tests.sim.kernel.disk import DiskModel, FileCut
from tests.sim.replication.observations import Batch
from wire.topic_partition import TopicPartition

CRC_START = 21  # baseOffset 8, batchLength 4, partitionLeaderEpoch 4, magic 1, crc 4


class BrokerDisk:
    """A broker directory's view of the shared `DiskModel`."""

    def __init__(self, model: DiskModel, directory: Path) -> None:
        self.model = model
        self.directory = directory

    def opened(self) -> None:
        """A new incarnation opened the directory: what is in it survived, it is on the disk."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.model.track(self.directory)

    def crash(self, manager: LogManager, rng: random.Random, tear_probability: float
              ) -> tuple[dict[TopicPartition, int], list[str]]:
        """Drop the open files unflushed and put every file back to what a power loss leaves.
        Returns, per partition the crash cut, the first offset it destroyed, and the cuts for the
        trace."""
        ends = {topic_partition: log.log_end_offset for topic_partition, log in manager}
        for _, log in manager:
            log.close_handlers()
        cuts = self.model.crash(self.directory, rng, tear_probability, damage=_crc_covered_position)
        cut_from: dict[TopicPartition, int] = {}
        for cut in cuts:
            topic_partition = _segment_of(cut.path)
            if topic_partition is None or topic_partition not in ends:
                continue
            low = _first_cut_offset(cut)
            if low is not None and low < ends[topic_partition]:
                cut_from[topic_partition] = min(low, cut_from.get(topic_partition, low))
        return cut_from, [cut.describe() for cut in cuts]

    def wipe(self, manager: LogManager) -> dict[TopicPartition, tuple[int, int]]:
        """The disk is replaced while the broker is down: every file goes. Returns, per partition,
        the offsets it held ([logStartOffset, LEO)), all lost."""
        held = {topic_partition: (log.log_start_offset, log.log_end_offset) for topic_partition, log in manager}
        for _, log in manager:
            log.close_handlers()
        self.model.wipe(self.directory)
        shutil.rmtree(self.directory)
        return {topic_partition: offsets for topic_partition, offsets in held.items() if offsets[0] < offsets[1]}


    def rot(self, manager: LogManager, rng: random.Random) -> tuple[TopicPartition, Batch] | None:
        """Bit rot in a random batch of a random log at or above its logStartOffset: one byte of its
        records changes (`DiskModel.rot`). Returns the partition and the batch as the disk now holds
        it, or None if no log holds a batch. Only record bytes rot: a damaged header field before
        the CRC, or lastOffsetDelta, would mislead the offset lookup itself, a gap of the record
        format that recovery shares with Kafka's (see the module docstring)."""
        logs = [(topic_partition, log) for topic_partition, log in manager
                if log.log_start_offset < log.log_end_offset]
        if not logs:
            return None
        topic_partition, log = rng.choice(logs)
        batches = [(segment, position, header) for segment, position, header in log.iter_batches()
                   if header.base_offset >= log.log_start_offset and header.size_in_bytes > BATCH_HEADER_SIZE]
        if not batches:
            return None
        segment, position, header = rng.choice(batches)
        self.model.rot(segment.log_path, position + rng.randrange(BATCH_HEADER_SIZE, header.size_in_bytes), rng)
        data = segment.read_bytes(position, header.size_in_bytes)
        return topic_partition, Batch(header.base_offset, header.next_offset, header.partition_leader_epoch, data)


def _segment_of(path: Path) -> TopicPartition | None:
    """The partition whose segment `path` is (`<topic>-<partition>/<base offset>.log`), or None."""
    if path.suffix != ".log" or not path.stem.isdigit():
        return None
    topic, _, partition = path.parent.name.rpartition("-")
    return TopicPartition(topic, int(partition)) if partition.isdigit() and topic else None


def _first_cut_offset(cut: FileCut) -> int | None:
    """The base offset of the first batch of `before` not kept whole in `after` (None: none)."""
    for position, header in iter_headers(cut.before):
        end = position + header.size_in_bytes
        if end > len(cut.after) or cut.after[position:end] != cut.before[position:end]:
            return header.base_offset
    return None


def _crc_covered_position(path: Path, data: bytes, start: int, end: int, rng: random.Random) -> int:
    """A random byte in [start, end) that some batch's CRC covers (segments), any byte (other
    files), or -1 if there is none."""
    if path.suffix != ".log":
        return rng.randint(start, end - 1)
    spans = []
    for position, header in iter_headers(data, 0, end):
        low, high = max(position + CRC_START, start), min(position + header.size_in_bytes, end)
        if low < high:
            spans.append((low, high))
    if not spans:
        return -1
    low, high = rng.choice(spans)
    return rng.randint(low, high - 1)
