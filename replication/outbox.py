"""Outbox: the outputs of one `Partition.handle` call, collected as it runs, frozen into a `Ready`."""

from __future__ import annotations

from replication.ready import (
    AlterPartitionProposal,
    Completion,
    FollowerFetchPosition,
    HighWatermarkChange,
    LogChange,
    Ready,
    Role,
)
from wire.error_codes import ErrorCode
from wire.sentinels import NO_EPOCH


class Outbox:
    """Mutable and short-lived: one per `handle` call, owned by the core."""

    def __init__(self) -> None:
        self.log_changes: list[LogChange] = []
        self.messages: list[AlterPartitionProposal] = []
        self.completions: list[Completion] = []
        self.fetch_backoff = False
        self.log_dir_failure: str | None = None

    def ready(self, role: Role, leader_epoch: int, partition_epoch: int, high_watermark: HighWatermarkChange | None,
              fetch: FollowerFetchPosition | None, next_tick_ms: int | None) -> Ready:
        return Ready(
            role=role,
            leader_epoch=leader_epoch,
            partition_epoch=partition_epoch,
            log_changes=tuple(self.log_changes),
            high_watermark=high_watermark,
            messages=tuple(self.messages),
            completions=tuple(self.completions),
            fetch=fetch,
            fetch_backoff=self.fetch_backoff,
            next_tick_ms=next_tick_ms,
            log_dir_failure=self.log_dir_failure,
        )


def epoch_error(requested_epoch: int, current_epoch: int) -> ErrorCode:
    """Kafka's checkCurrentLeaderEpoch: an older epoch is fenced (the client's metadata is stale),
    a newer one unknown (this replica's metadata is stale); NO_EPOCH skips the check."""
    if requested_epoch in (NO_EPOCH, current_epoch):
        return ErrorCode.NONE
    if requested_epoch < current_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.UNKNOWN_LEADER_EPOCH
