"""The Log against a reference model (a plain list of records), driven by hypothesis.

Rules append as leader, roll, move the high watermark, delete records, run retention,
truncate (as a diverged follower would), flush, close cleanly or crash, and reopen. After every
rule the log must agree with the model: same records at the same offsets, reads by offset and
by timestamp answer like a brute-force search, and the key offsets keep their order
(logStartOffset <= HW <= LEO, logStartOffset and recovery point inside the log)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage.config import LogConfig
from storage.log import Log
from storage.log_loader import LogLoader
from storage.records import build_batch, decode_records, iter_headers

CONFIG = LogConfig.from_properties(
    {"segment.bytes": 1200, "index.interval.bytes": 100, "segment.index.bytes": 400, "retention.ms": 5000}
)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp())
        self.directory = self.root / "orders-0"
        self.now_ms = 0
        self.log: Log = LogLoader(self.directory, CONFIG, self.now_ms).load()
        self.records: list[tuple[int, int, bytes]] = []  # offset, timestamp, value
        self.epoch = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(values=st.lists(st.binary(min_size=1, max_size=60), min_size=1, max_size=5), skew=st.integers(-50, 50))
    def append(self, values: list[bytes], skew: int) -> None:
        self.now_ms += 10
        timestamps = [max(0, self.now_ms + skew + i) for i in range(len(values))]
        batch = build_batch([(b"key", value) for value in values], timestamps=timestamps)
        info = self.log.append_as_leader(batch, self.epoch, self.now_ms)
        assert info.first_offset == self.model_end, f"first={info.first_offset} model_end={self.model_end}"
        pairs = zip(timestamps, values, strict=True)
        self.records += [(info.first_offset + i, ts, v) for i, (ts, v) in enumerate(pairs)]

    @property
    def model_end(self) -> int:
        return self.records[-1][0] + 1 if self.records else self.log.log_start_offset

    @rule()
    def roll(self) -> None:
        self.log.roll(self.now_ms)

    @rule(data=st.data())
    def advance_high_watermark(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.log.high_watermark, self.log.log_end_offset))
        self.log.maybe_increment_high_watermark(target)

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.log.log_start_offset, self.log.high_watermark))
        self.log.delete_records(target)
        self.records = [r for r in self.records if r[0] >= target]

    @rule(elapsed_ms=st.integers(0, 8000))
    def retention(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        start_before = self.log.log_start_offset
        self.log.delete_old_segments(self.now_ms)
        assert self.log.log_start_offset >= start_before, "logStartOffset went back"
        assert self.log.log_start_offset <= self.log.high_watermark, "retention passed the high watermark"
        self.records = [r for r in self.records if r[0] >= self.log.log_start_offset]
        self.log.delete_expired_files(self.now_ms + CONFIG.file_delete_delay_ms)

    @precondition(lambda self: self.records)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        # KIP-101: a follower truncates to a batch boundary, possibly below its own HW.
        batch_starts = [header.base_offset for _, _, header in self.log.iter_batches()]
        target = data.draw(st.sampled_from([*batch_starts, self.log.log_end_offset]))
        self.log.truncate_to(target, self.now_ms)
        self.records = [r for r in self.records if r[0] < target]
        self.epoch += 1

    @rule()
    def flush(self) -> None:
        self.log.flush(self.now_ms)
        assert self.log.recovery_point == self.log.log_end_offset

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        offsets = (self.log.log_start_offset, self.log.recovery_point, self.log.high_watermark)
        if clean:
            self.log.flush(self.now_ms)
            self.log.close()
        else:
            for segment in self.log.segments:
                segment.close_handlers()  # kill -9: indexes stay preallocated, nothing trimmed
        self.log = LogLoader(self.directory, CONFIG, self.now_ms).load(
            log_start_offset=offsets[0], recovery_point=offsets[1], high_watermark=offsets[2], had_clean_shutdown=clean
        )

    @invariant()
    def offsets_are_ordered(self) -> None:
        log = self.log
        assert log.log_start_offset <= log.high_watermark, f"{log}"
        assert log.high_watermark <= log.log_end_offset, f"{log}"
        assert log.recovery_point <= log.log_end_offset, f"{log}"
        assert log.log_end_offset == self.model_end, f"{log} model_end={self.model_end}"

    @invariant()
    def leader_epochs_cover_only_the_log(self) -> None:
        entries = self.log.leader_epoch_cache.entries()
        for entry in entries:
            # Kafka's truncateFromStart moves the first entry to logStartOffset, which may be the LEO.
            inside = entry.start_offset < self.log.log_end_offset or entry.start_offset == self.log.log_start_offset
            assert inside, f"{entry} at or past LEO: {self.log}"
            assert entry.epoch <= self.epoch, f"{entry} newer than epoch {self.epoch}"
        if self.records:
            assert entries, "appended records but the epoch cache is empty"

    @invariant()
    def contents_match_the_model(self) -> None:
        found: list[tuple[int, int, bytes]] = []
        offset = self.log.log_start_offset
        for _ in range(len(self.log.segments) + 1):
            data = self.log.read(offset, 1 << 20).records
            for position, header in iter_headers(data):
                found += [(r.offset, r.timestamp, r.value or b"") for r in decode_records(data, position)]
                offset = header.next_offset
        assert [r for r in found if r[0] >= self.log.log_start_offset] == self.records

    @invariant()
    def timestamp_lookups_match_brute_force(self) -> None:
        for target in {ts for _, ts, _ in self.records[::3]} | {0}:
            expected = next((offset for offset, ts, _ in self.records if ts >= target), None)
            found = self.log.offset_for_timestamp(target)
            assert (found.offset if found else None) == expected, f"ts={target} found={found} expected={expected}"


LogMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestLogMachine = LogMachine.TestCase
