"""What a consumer gets back: whole fetched batches, and records decoded from them on demand.

A fetch answer is raw RecordBatch v2 bytes (DESIGN §2). `FetchedBatch` keeps one batch as a
memoryview plus its header, so batch-level readers (`Consumer.poll_batches`, perf-consume) count
records and bytes without building a Python object per record; `records()` decodes when asked,
skipping those below the position the consumer asked for (a fetch starts at the batch that
holds the fetch offset, which may begin earlier).
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.records import BatchHeader, Record, decode_records, iter_headers


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """One batch of `topic`-`partition`; records below `start_offset` are not the reader's."""

    topic: str
    partition: int
    header: BatchHeader
    data: memoryview
    start_offset: int

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def next_offset(self) -> int:
        return self.header.next_offset

    @property
    def records_count(self) -> int:
        """Records in the batch (all of them, even those below `start_offset`)."""
        return self.header.records_count

    @property
    def size_in_bytes(self) -> int:
        return self.header.size_in_bytes

    def records(self) -> list[Record]:
        decoded = decode_records(self.data)
        if decoded and decoded[0].offset < self.start_offset:
            return [record for record in decoded if record.offset >= self.start_offset]
        return decoded

    def consumer_records(self) -> list[ConsumerRecord]:
        topic, partition = self.topic, self.partition
        return [
            ConsumerRecord(topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers) for r in self.records()
        ]


def split_batches(topic: str, partition: int, records: bytes, start_offset: int) -> list[FetchedBatch]:
    """The complete batches of a fetch answer that hold records at or after `start_offset`
    (control batches of transactions carry no user records and are dropped)."""
    view = memoryview(records)
    return [
        FetchedBatch(topic, partition, header, view[position : position + header.size_in_bytes], start_offset)
        for position, header in iter_headers(view)
        if header.next_offset > start_offset and not header.is_control
    ]
