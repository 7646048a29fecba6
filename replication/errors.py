"""The error code of a storage error, for replication outcomes (one wire enum: storage/error_codes.py)."""

from __future__ import annotations

from storage.error_codes import ErrorCode
from storage.errors import StorageError


def error_of(error: StorageError) -> ErrorCode:
    """The code for a storage error, by its Kafka name (UNKNOWN_SERVER_ERROR for a name we lack)."""
    return ErrorCode.__members__.get(error.error_name, ErrorCode.UNKNOWN_SERVER_ERROR)
