"""Reading one offset range in a Spark task: a consumer on a private event loop, fetched
batches turned into Arrow RecordBatches (`arrow_records`), one per fetch.

Spark calls `read` from plain synchronous Python and pulls the generator at its own pace, so the
consumer lives on an event loop this module owns and steps with `run_until_complete`, one poll
per RecordBatch, instead of `asyncio.run` around the whole read (which would hold the range in
memory).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pyarrow as pa

from client.consumer import Consumer
from client.errors import OffsetOutOfRangeError, error_for
from pipeline.arrow_records import to_arrow
from pipeline.offsets import OffsetRange, data_loss_message
from pipeline.options import SourceOptions
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

FETCH_BYTES = 8 << 20  # per fetch: one RecordBatch of ~70k 100-byte records
POLL_MS = 500


def read_range(options: SourceOptions, offsets: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Every record of the range that the chosen replica serves, in offset order."""
    tp = TopicPartition(offsets.topic, offsets.partition)
    loop = asyncio.new_event_loop()
    consumer = loop.run_until_complete(_open(options, tp, offsets.start))
    try:
        position = offsets.start
        waiting_since = time.monotonic()
        while position < offsets.end:
            consumer.high_watermarks.pop(tp, None)  # set again only by an answer that arrives in this poll
            try:
                batches = loop.run_until_complete(consumer.poll_batches(POLL_MS))
            except OffsetOutOfRangeError:
                earliest = loop.run_until_complete(consumer.beginning_offsets([tp]))[tp]
                raise error_for(ErrorCode.OFFSET_OUT_OF_RANGE, data_loss_message(tp, position, earliest)) from None
            if batches:
                waiting_since = time.monotonic()
                position = batches[-1].next_offset
                arrow = to_arrow(batches, offsets.end)
                if arrow is not None:
                    yield arrow
            elif consumer.high_watermarks.get(tp, -1) >= offsets.end:
                return  # an answer with no records although the end is below the HW: compacted away
            elif (time.monotonic() - waiting_since) * 1000 > options.poll_timeout_ms:
                raise error_for(ErrorCode.REQUEST_TIMED_OUT, f"{tp} served nothing at offset {position} for "
                                f"{options.poll_timeout_ms} ms (readFrom={options.read_from}); the range ends at "
                                f"{offsets.end}. Check the replica, or raise kafkaConsumer.pollTimeoutMs")
            else:
                position = loop.run_until_complete(consumer.position(tp))
    finally:
        loop.run_until_complete(consumer.close())
        loop.close()


async def _open(options: SourceOptions, tp: TopicPartition, start: int) -> Consumer:
    """failOnDataLoss=false: a position below logStartOffset moves to it (auto.offset.reset=earliest)."""
    consumer = Consumer(
        options.bootstrap, read_from=options.read_from, auto_offset_reset="none" if options.fail_on_data_loss
        else "earliest", max_partition_fetch_bytes=FETCH_BYTES, fetch_max_bytes=FETCH_BYTES,
    )
    consumer.assign([tp])
    consumer.seek(tp, start)
    return consumer
