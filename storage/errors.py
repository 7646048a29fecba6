"""Errors the storage engine raises, each carrying the Kafka error name a client will see.

Each carries the Kafka name as `error_name`; `replication/errors.py` maps it to the numeric
`wire.error_codes.ErrorCode`. Errors that a client can cause
(bad batches, offsets out of range) are operating errors and leave the log unchanged; errors
that name a broken file (`CorruptIndexError`) are caught by recovery, which rebuilds.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class: `error_name` is the Kafka error this maps to."""

    error_name = "UNKNOWN_SERVER_ERROR"


class CorruptRecordError(StorageError):
    """A batch failed a size, magic or CRC check (Kafka CORRUPT_MESSAGE)."""

    error_name = "CORRUPT_MESSAGE"


class InvalidRecordError(StorageError):
    """A batch is well-formed but breaks a rule: record count, offsets, timestamps."""

    error_name = "INVALID_RECORD"


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch does not follow its last sequence on this partition."""

    error_name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpochError(StorageError):
    """An idempotent producer's batch carries an epoch older than the partition has seen."""

    error_name = "INVALID_PRODUCER_EPOCH"


class RecordTooLargeError(StorageError):
    """A batch is larger than `max.message.bytes` or a segment (Kafka code 10, MESSAGE_TOO_LARGE)."""

    error_name = "MESSAGE_TOO_LARGE"


class UnsupportedCompressionTypeError(StorageError):
    """The batch's compression codec is unknown or its package is not installed."""

    error_name = "UNSUPPORTED_COMPRESSION_TYPE"


class OffsetOutOfRangeError(StorageError):
    """A read or delete asked for an offset outside [logStartOffset, bound]."""

    error_name = "OFFSET_OUT_OF_RANGE"


class InvalidConfigError(StorageError):
    """A log config key is unknown or its value is out of range."""

    error_name = "INVALID_CONFIG"


class CorruptIndexError(StorageError):
    """An index file is inconsistent with its segment; recovery rebuilds it."""

    error_name = "CORRUPT_MESSAGE"


class LogSegmentOffsetOverflowError(StorageError):
    """An offset does not fit the segment's i32 relative-offset space."""

    error_name = "UNKNOWN_SERVER_ERROR"


class InconsistentClusterIdError(StorageError):
    """meta.properties names another cluster than the one this node belongs to."""

    error_name = "INCONSISTENT_CLUSTER_ID"


class KafkaStorageError(StorageError):
    """A write to the log failed (an OSError: a full or failing disk) and the log took the
    request back: it is as it was before. `__cause__` is the OSError."""

    error_name = "KAFKA_STORAGE_ERROR"


class CorruptCheckpointError(StorageError):
    """A checkpoint or meta.properties file is malformed; the message names the file and line."""

    error_name = "KAFKA_STORAGE_ERROR"


class LogDirLockedError(StorageError):
    """Another process holds a data dir's `.lock`: two processes must never share a log dir."""

    error_name = "KAFKA_STORAGE_ERROR"


class InconsistentNodeIdError(StorageError):
    """meta.properties names another node id than this node's `node.id`."""

    error_name = "UNKNOWN_SERVER_ERROR"


class CorruptPartitionMetadataError(CorruptCheckpointError):
    """A partition's `partition.metadata` is malformed; the message names the file and the fix."""


class InconsistentTopicIdError(StorageError):
    """A log's `partition.metadata` names another topic id than the one it was opened for: the
    log belongs to an older topic of the same name (Kafka INCONSISTENT_TOPIC_ID)."""

    error_name = "INCONSISTENT_TOPIC_ID"
