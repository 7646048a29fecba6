"""Storage errors reach replication outcomes as the wire code of the same Kafka name."""

from __future__ import annotations

from replication.errors import error_of
from storage.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError, StorageError
from wire.error_codes import ErrorCode


def test_storage_errors_map_by_name() -> None:
    assert error_of(CorruptRecordError("x")) == ErrorCode.CORRUPT_MESSAGE
    assert error_of(InvalidRecordError("x")) == ErrorCode.INVALID_RECORD
    assert error_of(RecordTooLargeError("x")) == ErrorCode.MESSAGE_TOO_LARGE
    assert error_of(StorageError("x")) == ErrorCode.UNKNOWN_SERVER_ERROR
