"""ReplicationConfig: the broker settings the replication core reads, with Kafka's names and defaults.

Topic settings (`min.insync.replicas`) stay in the log's `LogConfig`, so a config change that the
node applies to the `Log` (`LogManager.update_config`) reaches the core at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """Broker-level replication settings (Kafka's keys in snake_case, Kafka's defaults).

    - `replica_lag_time_max_ms` (`replica.lag.time.max.ms`): a follower that has not caught up
      with the leader's log end offset for this long leaves the ISR.
    - `replica_fetch_max_bytes` (`replica.fetch.max.bytes`): bytes a follower asks for per fetch.
    - `alter_partition_timeout_ms`: an AlterPartition proposal unanswered this long is sent again
      (Kafka's AlterPartitionManager retries over its controller channel the same way).
    - `ineligible_replica_backoff_ms`: after the controller refuses to add a replica to the ISR
      (INELIGIBLE_REPLICA: fenced or shutting down), the leader waits this long before proposing
      it again. Kafka consults its metadata cache instead; the core has no view of broker states.
    - `delayed_produce_max`, `delayed_fetch_max`, `delayed_delete_records_max`: bounds on the
      requests one partition parks (STYLE §7: bound everything); a request over the bound is
      answered at once (produce: REQUEST_TIMED_OUT before any append; fetch: with what is there).
    """

    replica_lag_time_max_ms: int = 30_000
    replica_fetch_max_bytes: int = 1024 * 1024
    alter_partition_timeout_ms: int = 30_000
    ineligible_replica_backoff_ms: int = 1_000
    delayed_produce_max: int = 10_000
    delayed_fetch_max: int = 10_000
    delayed_delete_records_max: int = 1_000

    def __post_init__(self) -> None:
        assert self.replica_lag_time_max_ms > 0, f"replica_lag_time_max_ms={self.replica_lag_time_max_ms}"
        assert self.replica_fetch_max_bytes > 0, f"replica_fetch_max_bytes={self.replica_fetch_max_bytes}"
        assert self.alter_partition_timeout_ms > 0, f"alter_partition_timeout_ms={self.alter_partition_timeout_ms}"
        assert self.ineligible_replica_backoff_ms >= 0, (
            f"ineligible_replica_backoff_ms={self.ineligible_replica_backoff_ms}"
        )
        assert self.delayed_produce_max > 0, f"delayed_produce_max={self.delayed_produce_max}"
        assert self.delayed_fetch_max > 0, f"delayed_fetch_max={self.delayed_fetch_max}"
        assert self.delayed_delete_records_max > 0, f"delayed_delete_records_max={self.delayed_delete_records_max}"
