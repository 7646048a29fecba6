"""What storage keeps beside the files to save work agrees with what the files say.

`LogSegments` keeps the active segment beside its map, and each `LogSegment` the positions and
headers of its last batches (`_recent_from`), which answer `translate_offset` and `read` near the
end without the offset index or a header read. Hypothesis appends (as leader, and as follower with
offset gaps as a compacted leader sends them), rolls, truncates, undoes an append, deletes records and
segments, and reopens cleanly or after a crash; after every rule the active segment is the one with
the largest base offset, and every segment's `translate_offset` and `read` answer as a walk over the
headers in its file does. A small `index.interval.bytes` keeps few batches after the last index
entry; a large one lets a segment outgrow the 64 batches kept."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from storage.config import LogConfig
from storage.log import Log
from storage.log_loader import LogLoader
from storage.log_segment import LogSegment
from storage.records import BatchHeader, build_batch

EPOCH = 0


def walked(segment: LogSegment) -> list[tuple[int, BatchHeader]]:
    """Every batch of the segment's file, from its headers on disk."""
    return list(segment.iter_headers())


def walked_translate(batches: list[tuple[int, BatchHeader]], offset: int) -> tuple[int, BatchHeader] | None:
    return next(((position, header) for position, header in batches if header.last_offset >= offset), None)


def walked_read(segment: LogSegment, batches: list[tuple[int, BatchHeader]], offset: int, max_bytes: int,
                max_offset: int | None) -> tuple[int, bytes] | None:
    """`LogSegment.read`'s contract over the walked batches: whole batches from the one holding
    `offset`, at most `max_bytes` but at least one, none reaching `max_offset`."""
    found = walked_translate(batches, offset)
    if found is None:
        return None
    start = end = found[0]
    for position, header in batches:
        if position < start:
            continue
        if max_offset is not None and header.last_offset >= max_offset:
            break
        if position + header.size_in_bytes - start > max_bytes and end != start:
            break
        end = position + header.size_in_bytes
    return start, segment.read_bytes(start, end - start) if end > start else b""


class DerivedStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp())
        self.directory = self.root / "orders-0"
        self.now_ms = 1_000
        self.log: Log | None = None
        self.config: LogConfig | None = None

    @initialize(index_interval_bytes=st.sampled_from([100, 4096, 1 << 20]))
    def open(self, index_interval_bytes: int) -> None:
        self.config = LogConfig.from_properties({"segment.bytes": 12_000, "index.interval.bytes": index_interval_bytes,
                                                 "retention.ms": 10**9})
        self.log = LogLoader(self.directory, self.config, self.now_ms).load()

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def opened(self) -> Log:
        assert self.log is not None
        return self.log

    @rule(count=st.integers(1, 40), records=st.integers(1, 3), value=st.binary(max_size=40))
    def append_as_leader(self, count: int, records: int, value: bytes) -> None:
        for _ in range(count):
            self.now_ms += 1
            batch = build_batch([(b"k", value)] * records, timestamps=[self.now_ms] * records)
            self.opened.append_as_leader(batch, EPOCH, self.now_ms)

    @rule(gap=st.integers(0, 5), records=st.integers(1, 3))
    def append_as_follower_with_a_gap(self, gap: int, records: int) -> None:
        self.now_ms += 1
        batch = build_batch([(b"k", b"v")] * records, timestamps=[self.now_ms] * records,
                            base_offset=self.opened.log_end_offset + gap, partition_leader_epoch=EPOCH)
        self.opened.append_as_follower(batch, self.now_ms)

    @rule()
    def roll(self) -> None:
        self.opened.roll(self.now_ms)

    @rule(records=st.integers(1, 3))
    def undo_an_append(self, records: int) -> None:
        """A request whose later write failed takes back what it appended (`Log._undo_append`)."""
        active = self.opened.segments.active_segment
        before = (active.size, active.offset_index.entries, active.time_index.entries)
        self.now_ms += 1
        batch = build_batch([(b"k", b"v")] * records, timestamps=[self.now_ms] * records)
        self.opened.append_as_leader(batch, EPOCH, self.now_ms)
        if self.opened.segments.active_segment is active:
            active.undo_appends(*before)

    @precondition(lambda self: self.log is not None and self.log.log_end_offset > self.log.log_start_offset)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        log = self.opened
        self.opened.truncate_to(data.draw(st.integers(log.log_start_offset, log.log_end_offset)), self.now_ms)

    @rule(data=st.data())
    def delete_records_and_segments(self, data: st.DataObject) -> None:
        log = self.opened
        log.maybe_increment_high_watermark(log.log_end_offset)
        log.delete_records(data.draw(st.integers(log.log_start_offset, log.high_watermark)))
        log.delete_old_segments(self.now_ms)
        log.delete_expired_files(self.now_ms + log.config.file_delete_delay_ms)

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        self._reopen(clean, b"")

    @precondition(lambda self: self.log is not None and self.log.segments.active_segment.size > 0)
    @rule(stray=st.binary(min_size=1, max_size=60))
    def reopen_with_stray_bytes_past_the_last_batch(self, stray: bytes) -> None:
        """A file trusted after a clean shutdown yet ending in part of a header: reads stop before it.
        (An append there would build on the stray bytes, so they are cut off again after the check.)"""
        self._reopen(True, stray)
        self.segment_lookups_match_a_walk_of_the_file()
        self._reopen(True, b"", cut=len(stray))

    def _reopen(self, clean: bool, stray: bytes, cut: int = 0) -> None:
        """Close (cleanly, or as kill -9 leaves it), add `stray` to or cut `cut` bytes off the active
        segment's file, and load again."""
        log = self.opened
        offsets = (log.log_start_offset, log.recovery_point, log.high_watermark)
        if clean:
            log.flush(self.now_ms)
            log.close()
        else:
            log.close_handlers()
        path = log.segments.active_segment.log_path
        with path.open("r+b") as file:
            file.truncate(path.stat().st_size - cut)
            file.seek(0, 2)
            file.write(stray)
        assert self.config is not None
        self.log = LogLoader(self.directory, self.config, self.now_ms).load(
            log_start_offset=offsets[0], recovery_point=offsets[1], high_watermark=offsets[2], had_clean_shutdown=clean)

    @invariant()
    def active_segment_is_the_last_one(self) -> None:
        if self.log is None:
            return
        last = max(self.log.segments, key=lambda segment: segment.base_offset)
        assert self.log.segments.active_segment is last, f"{self.log.segments.active_segment} is not {last}"
        assert self.log.log_end_offset == last.next_offset, f"{self.log} last={last}"

    @invariant()
    def segment_lookups_match_a_walk_of_the_file(self) -> None:
        if self.log is None:
            return
        for segment in self.log.segments:
            batches = walked(segment)
            edges = {segment.base_offset - 1, segment.next_offset, segment.next_offset + 1}
            for _, header in batches[-70:]:
                edges |= {header.base_offset - 1, header.base_offset, header.last_offset, header.last_offset + 1}
            for _, header in batches[:-70:7]:
                edges.add(header.base_offset)
            for offset in sorted(edges):
                found = segment.translate_offset(offset)
                assert found == walked_translate(batches, offset), f"translate {offset} in {segment}: {found}"
                for max_bytes in (1, 150, 1 << 20):
                    for max_offset in (None, segment.next_offset, offset + 2):
                        got = segment.read(offset, max_bytes, max_offset)
                        want = walked_read(segment, batches, offset, max_bytes, max_offset)
                        assert got == want, f"read {offset} {max_bytes} {max_offset} in {segment}: {got} != {want}"


DerivedStateMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
TestDerivedState = DerivedStateMachine.TestCase
