"""`df.write.format("tributary")` and `df.writeStream.format("tributary")`: rows to records.

Columns, as in Spark's Kafka sink: `value` (binary or string, required), `key` (binary or string),
`topic` (string; the `topic` option wins over it), `partition` (int; else the key's hash, else the
sticky partition), `headers` (array<struct<key string, value binary>>). Each task writes its
Arrow batches with one producer at acks=all and waits for every acknowledgement before it
reports success, so a finished task's records are committed on the ISR; any failure (after the
producer's retries) raises the Kafka-named error (`NOT_ENOUGH_REPLICAS: ...`) and fails the task.
Like Spark's Kafka sink this is at-least-once: a retried task or micro-batch writes its rows again.
Options: `bootstrap` (or `kafka.bootstrap.servers`), `topic`; streams also `checkpointLocation`.
Any other is refused (`UnsupportedOptionError`), and so is a batch write's `mode("overwrite")`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from client.producer import Producer
from pipeline.options import check_supported

BATCH_BYTES = 512 * 1024  # producer batch.size: few large batches, as perf-produce sends
SINK_OPTIONS = ("bootstrap", "kafka.bootstrap.servers", "topic")
STREAM_SINK_OPTIONS = (*SINK_OPTIONS, "checkpointLocation")  # Spark passes the query's checkpoint to its sink


class UnsupportedSaveModeError(ValueError):
    """`mode("overwrite")` on a batch write: a topic is only ever appended to."""


def check_save_mode(overwrite: bool) -> None:
    """Spark's Kafka sink refuses Overwrite (and Ignore) for batch writes ("Save mode Overwrite not
    allowed for Kafka"): records cannot replace a topic's. Spark allows Python data sources only
    append and overwrite, so append is the one left. A streaming query's complete output mode also
    arrives as overwrite; Spark's Kafka sink writes every row of it, and so does this one."""
    if overwrite:
        raise UnsupportedSaveModeError('save mode Overwrite is not allowed for tributary (nor for Spark\'s Kafka '
                                       'sink): a write appends records to a topic; use mode("append")')


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap: str
    topic: str | None

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType, streaming: bool) -> SinkOptions:
        check_supported(options, STREAM_SINK_OPTIONS if streaming else SINK_OPTIONS, "the tributary sink")
        bootstrap = options.get("bootstrap") or options.get("kafka.bootstrap.servers")
        if not bootstrap:
            raise ValueError('option "bootstrap" is required: host:port of any Tributary node(s)')
        check_schema(schema, options.get("topic"))
        return cls(bootstrap, options.get("topic"))


def check_schema(schema: StructType, topic: str | None) -> None:
    """Spark's KafkaWriter.validateQuery: the columns it knows, with types it can write."""
    fields = {field.name: field.dataType for field in schema.fields}
    if "value" not in fields:
        raise ValueError(f"Required attribute 'value' not found in the columns {sorted(fields)}")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], BinaryType | StringType):
            raise ValueError(f"{name} attribute type must be a string or binary, not {fields[name].simpleString()}")
    if topic is None and "topic" not in fields:
        raise ValueError("topic option required when no 'topic' attribute is present")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise ValueError(f"topic attribute type must be a string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise ValueError(f"partition attribute type must be an int, not {fields['partition'].simpleString()}")
    if "headers" in fields and not isinstance(fields["headers"], ArrayType):
        raise ValueError("headers attribute type must be array<struct<key: string, value: binary>>, not "
                         f"{fields['headers'].simpleString()}")


@dataclass
class Written(WriterCommitMessage):
    records: int


def _column(batch: pa.RecordBatch, name: str) -> list | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


async def _write(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    written = 0
    async with Producer(options.bootstrap, acks="all", batch_size=BATCH_BYTES) as producer:
        pending: list[asyncio.Future] = []
        for batch in batches:
            pending.extend(await _send(producer, options.topic, batch))
            written += batch.num_rows
        for future in pending:
            await future  # raises the first failure by its Kafka name
    return written


async def _send(producer: Producer, topic_option: str | None, batch: pa.RecordBatch) -> list[asyncio.Future]:
    """Runs of consecutive rows for one (topic, partition) go through `send_many`, rows with
    headers one by one; calls follow the rows, so each partition keeps the rows' order."""
    values = _column(batch, "value")
    assert values is not None, "check_schema requires a value column"
    keys = _column(batch, "key")
    topics = _column(batch, "topic")
    partitions = _column(batch, "partition")
    headers = _column(batch, "headers")
    if topic_option is not None and partitions is None and headers is None:
        return [await producer.send_many(topic_option, values, keys)]  # the common case: one call per batch
    futures = []
    run: list[int] = []
    run_target: tuple[str, int | None] | None = None
    for row in range(batch.num_rows):
        topic = topic_option or (topics[row].decode() if topics is not None and topics[row] is not None else None)
        if topic is None:
            raise ValueError(f"row {row} has a null topic and no topic option is set")
        target = (topic, partitions[row] if partitions is not None else None)
        if run and (target != run_target or (headers is not None and headers[row])):
            futures.append(await _send_run(producer, run_target, run, values, keys))
            run = []
        if headers is not None and headers[row]:
            pairs = [(h["key"], h["value"]) for h in headers[row]]
            futures.append(await producer.send(topic, values[row], key=keys[row] if keys is not None else None,
                                               partition=target[1], headers=pairs))
        else:
            run.append(row)
            run_target = target
    if run:
        futures.append(await _send_run(producer, run_target, run, values, keys))
    return futures


async def _send_run(producer: Producer, target: tuple[str, int | None] | None, rows: list[int], values: list,
                    keys: list | None) -> asyncio.Future:
    assert target is not None, "a run has a target"
    return await producer.send_many(target[0], _pick(values, rows), _pick(keys, rows) if keys is not None else None,
                                    partition=target[1])


def _pick(column: list, rows: list[int]) -> Sequence:
    return column if len(rows) == len(column) else [column[row] for row in rows]


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return Written(asyncio.run(_write(self.options, iterator)))


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return Written(asyncio.run(_write(self.options, iterator)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every task waited for acks=all before it reported success."""
