"""ReplicationError repeats Kafka's codes; the node converts by name, so names and numbers must agree
with the one wire enum (controller/error_codes.py, re-exported by client/protocol.py)."""

from __future__ import annotations

from controller.error_codes import ErrorCode
from replication.errors import ReplicationError, error_of
from storage.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError, StorageError


def test_every_code_has_kafkas_name_and_number() -> None:
    for error in ReplicationError:
        assert ErrorCode[error.name] == error.value, error


def test_retriable_flags_agree_with_the_wire_enum() -> None:
    for error in ReplicationError:
        assert error.retriable == ErrorCode[error.name].retriable, error


def test_storage_errors_map_by_name() -> None:
    assert error_of(CorruptRecordError("x")) == ReplicationError.CORRUPT_MESSAGE
    assert error_of(InvalidRecordError("x")) == ReplicationError.INVALID_RECORD
    assert error_of(RecordTooLargeError("x")) == ReplicationError.MESSAGE_TOO_LARGE
    assert error_of(StorageError("x")) == ReplicationError.UNKNOWN_SERVER_ERROR
