"""ProducerBatch encoding: what the producer sends decodes, with storage.records and with
kafka-python's independent decoder, to exactly the records appended, for every codec.

Method: hypothesis draws records (keys, values, headers, timestamps); each batch is built
through the producer's own append paths (`try_append`, `append_many`) and decoded twice.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from client.producer_batch import RECORD_OVERHEAD_MAX, ProducerBatch, record_size
from storage.records import Compression, decode_records, read_header, validate_batch
from wire.topic_partition import TopicPartition

TP = TopicPartition("t", 0)
T0 = 1_700_000_000_000
maybe_bytes = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=5), maybe_bytes), max_size=2).map(tuple)
records = st.lists(st.tuples(maybe_bytes, maybe_bytes, headers, st.integers(0, 5000)), min_size=1, max_size=30)


LOOP = asyncio.new_event_loop()  # futures here are only created and resolved, never awaited


def teardown_module() -> None:
    LOOP.close()


def future() -> asyncio.Future:
    return LOOP.create_future()


def kafka_python_records(data: bytes) -> list[tuple]:
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers)) for r in batch]


@settings(max_examples=60, deadline=None)
@given(records=records, compression=st.sampled_from(list(Compression)))
def test_appended_records_decode_identically_with_both_decoders(records: list, compression: Compression) -> None:
    batch = ProducerBatch(TP, 0, 1 << 30)
    for key, value, record_headers, delta in records:
        assert batch.try_append(key, value, T0 + delta, record_headers, future())
    data = batch.encode(compression)
    header = validate_batch(data)
    assert header.records_count == len(records)
    assert header.compression == compression
    expected = [(i, T0 + delta, key, value, h) for i, (key, value, h, delta) in enumerate(records)]
    decoded = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_records(data)]
    assert decoded == expected
    assert kafka_python_records(data) == expected


@settings(max_examples=40, deadline=None)
@given(values=st.lists(maybe_bytes, min_size=1, max_size=50), keyed=st.booleans())
def test_append_many_takes_the_fast_path_and_decodes(values: list, keyed: bool) -> None:
    keys = [b"k%d" % i for i in range(len(values))] if keyed else None
    batch = ProducerBatch(TP, 0, 1 << 30)
    assert batch.append_many(values, keys, T0, future()) == len(values)
    assert batch.uniform_timestamp
    assert batch.headers is None
    data = batch.encode(Compression.NONE)
    expected = [(i, T0, None if keys is None else keys[i], value, ()) for i, value in enumerate(values)]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_records(data)] == expected
    assert kafka_python_records(data) == expected


def test_size_estimate_bounds_the_encoded_size() -> None:
    batch = ProducerBatch(TP, 0, 1 << 30)
    for i in range(200):
        batch.try_append(b"key-%d" % i, b"v" * (i * 37 % 300), T0 + i * 1000, (("h", b"x"),), future())
    assert len(batch.encode(Compression.NONE)) <= batch.size_in_bytes


def test_a_batch_stops_at_batch_size_but_always_takes_its_first_record() -> None:
    batch = ProducerBatch(TP, 0, batch_size=1000)
    assert batch.try_append(None, b"x" * 5000, T0, None, future())  # larger than batch.size: alone
    assert not batch.try_append(None, b"y", T0, None, future())
    small = ProducerBatch(TP, 0, batch_size=1000)
    taken = small.append_many([b"z" * 100] * 50, None, T0, future())
    assert 0 < taken < 50
    assert small.size_in_bytes <= 1000
    assert small.size_in_bytes + record_size(None, b"z" * 100, None) > 1000


def test_append_many_continues_where_a_batch_is_full() -> None:
    batch = ProducerBatch(TP, 0, batch_size=61 + 10 * (RECORD_OVERHEAD_MAX + 10))
    assert batch.append_many([b"0123456789"] * 25, None, T0, future()) == 10
    assert batch.append_many([b"0123456789"] * 25, None, T0, future()) == 0


@pytest.mark.parametrize("log_append_time", [-1, T0 + 99])
def test_futures_resolve_to_offsets_from_the_base_offset(log_append_time: int) -> None:
    batch = ProducerBatch(TP, 0, 1 << 20)
    first, second, run = future(), future(), future()
    batch.try_append(None, b"a", T0, None, first)
    batch.append_many([b"b", b"c"], None, T0 + 1, run)
    batch.try_append(None, b"d", T0 + 2, None, second)
    batch.complete(100, log_append_time)
    assert first.result().offset == 100
    assert second.result().offset == 103
    assert (run.result().base_offset, run.result().record_count) == (101, 2)
    expected_timestamp = T0 if log_append_time < 0 else log_append_time
    assert first.result().timestamp == expected_timestamp
    assert read_header(batch.encode(Compression.NONE)).records_count == 4


def test_a_failed_batch_fails_every_future() -> None:
    batch = ProducerBatch(TP, 0, 1 << 20)
    one, many = future(), future()
    batch.try_append(None, b"a", T0, None, one)
    batch.append_many([b"b"], None, T0, many)
    batch.fail(ValueError("boom"))
    assert isinstance(one.exception(), ValueError)
    assert isinstance(many.exception(), ValueError)
