"""The Kafka error codes replication answers with: Kafka's names and wire numbers.

DESIGN §1 lets `replication/` import only `storage`, so it cannot use the one wire `ErrorCode`
(`controller/error_codes.py`, re-exported by `client/protocol.py`). `ReplicationError` repeats the
few codes replication needs, with the same names and numbers; the node converts both ways by name
(`ErrorCode[error.name]`, `ReplicationError[code.name]`), and `tests/replication/test_errors.py`
checks that every name here has the same number there.
"""

from __future__ import annotations

from enum import IntEnum

from storage.errors import StorageError


class ReplicationError(IntEnum):
    """An error code in a replication outcome (a produce, fetch or AlterPartition answer).

    The codes the core produces itself: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
    UNKNOWN_LEADER_EPOCH, OFFSET_OUT_OF_RANGE, OFFSET_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT, INVALID_REQUIRED_ACKS, INVALID_REQUEST, and
    the storage errors of a rejected batch (CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE,
    UNSUPPORTED_COMPRESSION_TYPE). The others arrive in AlterPartition answers from the controller."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    INVALID_RECORD = 87
    INVALID_UPDATE_VERSION = 95
    UNKNOWN_TOPIC_ID = 100
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108

    @property
    def retriable(self) -> bool:
        """Kafka's RetriableException codes: the same request may succeed later, unchanged."""
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ReplicationError.CORRUPT_MESSAGE,
        ReplicationError.UNKNOWN_TOPIC_OR_PARTITION,
        ReplicationError.NOT_LEADER_OR_FOLLOWER,
        ReplicationError.REQUEST_TIMED_OUT,
        ReplicationError.NOT_ENOUGH_REPLICAS,
        ReplicationError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ReplicationError.NOT_CONTROLLER,
        ReplicationError.KAFKA_STORAGE_ERROR,
        ReplicationError.FENCED_LEADER_EPOCH,
        ReplicationError.UNKNOWN_LEADER_EPOCH,
        ReplicationError.OFFSET_NOT_AVAILABLE,
        ReplicationError.UNKNOWN_TOPIC_ID,
    }
)


def error_of(error: StorageError) -> ReplicationError:
    """The code for a storage error, by its Kafka name (UNKNOWN_SERVER_ERROR for a name we lack)."""
    return ReplicationError.__members__.get(error.error_name, ReplicationError.UNKNOWN_SERVER_ERROR)
