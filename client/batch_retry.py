"""What the producer's sender does with a batch whose request failed: one decision, shared by
`Producer._handle_error`, the replication simulation's producer and the idempotence property test.

- A merged batch (client/accumulator.py) refused as too large at its first attempt was not written:
  its parts go again in its place (SPLIT).
- Idempotent, refused as out of order: a batch behind a later acknowledged one of its epoch was
  written before it and the leader will never take it again, so it fails at once (FAIL_WRITTEN,
  client/idempotence.py); one refused with every batch before it acknowledged, while a later one
  may be in the log, would be written after it, so it fails (FAIL_OVERTAKEN); any other waits for
  the batch before it, with no backoff (RETRY_NOW).
- A retriable error, within `retries` and `delivery.timeout.ms`: again after `retry.backoff.ms`
  (RETRY). Anything else fails (FAIL).
"""

from __future__ import annotations

import enum

from client.errors import TributaryError
from client.idempotence import PartitionSequences
from client.producer_batch import ProducerBatch
from wire.error_codes import ErrorCode


class Retry(enum.Enum):
    SPLIT = "split"
    RETRY = "retry"
    RETRY_NOW = "retry now"
    FAIL = "fail"
    FAIL_WRITTEN = "fail, most likely written"
    FAIL_OVERTAKEN = "fail, a later batch may be written"


OVERTAKEN_MESSAGE = ("the leader refused this batch as out of order and a later batch of the partition, whose answer "
                     "was lost, may be in the log already; not sent again: it would be written after it")
WRITTEN_MESSAGE = ("the leader no longer holds this batch's sequences and a later batch was acknowledged, so it "
                   "was most likely written; its offsets are unknown (not sent again: it could be written twice)")


def after_error(
    batch: ProducerBatch, error: TributaryError, sequences: PartitionSequences | None,
    retries: int, delivery_timeout_ms: int, now_ms: int,
) -> Retry:
    """`sequences`: the partition's, when the producer is idempotent (already told of the answer)."""
    if error.code is ErrorCode.MESSAGE_TOO_LARGE and batch.parts and batch.attempts == 1:
        return Retry.SPLIT
    out_of_order = sequences is not None and error.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    if out_of_order and sequences.behind_acknowledged(batch):
        return Retry.FAIL_WRITTEN
    if out_of_order and sequences.overtaken(batch):
        return Retry.FAIL_OVERTAKEN
    if batch.attempts > retries or now_ms - batch.created_ms >= delivery_timeout_ms:
        return Retry.FAIL
    if out_of_order:
        return Retry.RETRY_NOW
    return Retry.RETRY if error.retriable else Retry.FAIL
