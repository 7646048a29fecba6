"""The columnar decoder of the Spark reader against the codec's record-by-record decoder."""

from __future__ import annotations

import random

import pytest

from client.fetched_batch import split_batches
from pipeline.arrow_records import ARROW_SCHEMA, to_arrow
from storage.records import Compression, Record, TimestampKind, build_batch, decode_records

pytestmark = pytest.mark.spark


def random_bytes(rng: random.Random, longest: int) -> bytes | None:
    return None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 1, 60, longest)))


@pytest.mark.parametrize("seed", range(20))
def test_columns_equal_the_records_decoded_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    batches, offset = [], 0
    for _ in range(rng.randint(1, 6)):
        count = rng.randint(1, 200)
        records = [
            Record(offset + n, 1_700_000_000_000 + rng.randrange(10**6),
                   random_bytes(rng, 300), random_bytes(rng, 20_000),
                   tuple((f"h{h}", random_bytes(rng, 10)) for h in range(rng.choice((0, 0, 0, 2)))))
            for n in range(count)
        ]
        kept = [r for r in records if rng.random() < 0.8] or records[:1]  # compaction leaves gaps in offsets
        batches.append(build_batch(
            kept, base_offset=offset, keep_offsets=True, last_offset_delta=count - 1,
            compression=rng.choice((Compression.NONE, Compression.GZIP, Compression.ZSTD)),
            timestamp_type=rng.choice((TimestampKind.CREATE_TIME, TimestampKind.LOG_APPEND_TIME)),
            base_timestamp=min(r.timestamp for r in kept)))
        offset += count
    start, end = rng.randrange(offset), rng.randrange(offset + 1)
    expected = [r for batch in batches for r in decode_records(batch) if start <= r.offset < end]

    found = to_arrow(split_batches("t", 4, b"".join(batches), start), end)

    if not expected:
        assert found is None
        return
    assert found is not None
    assert found.schema == ARROW_SCHEMA
    columns = found.to_pydict()
    assert columns["offset"] == [r.offset for r in expected]
    assert columns["key"] == [r.key for r in expected]
    assert columns["value"] == [r.value for r in expected]
    assert [int(t.timestamp() * 1000) for t in columns["timestamp"]] == [r.timestamp for r in expected]
    assert columns["headers"] == [[{"key": k, "value": v} for k, v in r.headers] for r in expected]
    assert set(columns["topic"]) == {"t"}
    assert set(columns["partition"]) == {4}
