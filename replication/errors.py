"""The error code of a storage error, for replication outcomes (one wire enum: wire/error_codes.py)."""

from __future__ import annotations

from storage.errors import StorageError
from wire.error_codes import ErrorCode


def error_of(error: StorageError) -> ErrorCode:
    """The code for a storage error, by its Kafka name (UNKNOWN_SERVER_ERROR for a name we lack)."""
    return ErrorCode.__members__.get(error.error_name, ErrorCode.UNKNOWN_SERVER_ERROR)
