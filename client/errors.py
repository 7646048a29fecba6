"""Client-side errors: one exception class per Kafka error code, named after it.

`error_for(code, message)` builds the exception for a code found in a response, as
aiokafka's `for_code`: `NOT_LEADER_OR_FOLLOWER` raises `NotLeaderOrFollowerError`, a subclass
of `TributaryError` carrying `.code`, `.retriable` and `.invalid_metadata`. Callers catch
`TributaryError` (or one class) and retry by the flags, never by parsing messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from wire.error_codes import ErrorCode

if TYPE_CHECKING:
    from wire.topic_partition import TopicPartition

T = TypeVar("T")

# Codes after which the client's metadata is probably stale (Kafka's InvalidMetadataException).
INVALID_METADATA = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


class TributaryError(Exception):
    """A failure with a Kafka error code; the message says what happened and what to do."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "") -> None:
        super().__init__(f"{self.code.name}: {message}" if message else self.code.name)
        self.message = message

    @property
    def retriable(self) -> bool:
        return self.code.retriable or self.code in INVALID_METADATA

    @property
    def invalid_metadata(self) -> bool:
        return self.code in INVALID_METADATA


def _class_name(code: ErrorCode) -> str:
    words = "".join(word.capitalize() for word in code.name.split("_"))
    return words if words.endswith(("Error", "Exception")) else words + "Error"


ERRORS: dict[ErrorCode, type[TributaryError]] = {
    code: type(_class_name(code), (TributaryError,), {"code": code, "__doc__": f"Kafka's {code.name} ({code.value})."})
    for code in ErrorCode
    if code is not ErrorCode.NONE
}


def error_for(code: ErrorCode, message: str = "") -> TributaryError:
    """The exception for `code` (never NONE)."""
    assert code is not ErrorCode.NONE, "error_for(NONE): success is not an error"
    return ERRORS[code](message)


async def retrying(attempt: Callable[[], Awaitable[T]], timeout_ms: int, backoff_ms: int) -> T:
    """`attempt()` again after retriable errors (a coordinator loading or moving), `backoff_ms`
    apart, within `timeout_ms`; the last error is raised when time runs out."""
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    while True:
        try:
            return await attempt()
        except TributaryError as error:
            if not error.retriable or asyncio.get_running_loop().time() >= deadline:
                raise
        await asyncio.sleep(backoff_ms / 1000)


# Named classes callers catch most often, so `from client.errors import ...` type-checks.
NotLeaderOrFollowerError = ERRORS[ErrorCode.NOT_LEADER_OR_FOLLOWER]
UnknownTopicOrPartitionError = ERRORS[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
OffsetOutOfRangeError = ERRORS[ErrorCode.OFFSET_OUT_OF_RANGE]
RequestTimedOutError = ERRORS[ErrorCode.REQUEST_TIMED_OUT]
NetworkException = ERRORS[ErrorCode.NETWORK_EXCEPTION]
TopicAlreadyExistsError = ERRORS[ErrorCode.TOPIC_ALREADY_EXISTS]


class LogTruncationError(OffsetOutOfRangeError):  # type: ignore[valid-type, misc]
    """KIP-320, Kafka's LogTruncationException: the partition's log was truncated under the
    consumer's position (a leader elected without some of the records it had read), found by
    validating the position with OffsetsForLeaderEpoch after a leader change. Raised when
    `auto_offset_reset="none"`; `diverging_offset` is where the leader's log leaves what the
    consumer read (None: the leader keeps nothing of the consumer's leader epoch or earlier)."""

    def __init__(self, partition: TopicPartition, position: int, diverging_offset: int | None) -> None:
        where = ("the leader keeps no record of its leader epoch or earlier" if diverging_offset is None
                 else f"the leader's log diverges from it at offset {diverging_offset}")
        advice = "seek to an offset to go on" if diverging_offset is None else (
            f"records from {diverging_offset} on may differ from those read; seek to {diverging_offset} to read "
            "them again, or elsewhere")
        super().__init__(f"log truncation detected on {partition} at position {position}: {where}; {advice}")
        self.partition = partition
        self.position = position
        self.diverging_offset = diverging_offset
