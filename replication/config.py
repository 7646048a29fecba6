"""ReplicationConfig: the broker settings the replication core reads, with Kafka's names and defaults.

Topic settings (`min.insync.replicas`) stay in the log's `LogConfig`, so a config change that the
node applies to the `Log` (`LogManager.update_config`) reaches the core at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
    - `delayed_produce_max`, `delayed_delete_records_max`: bounds on the requests one partition
      parks, and `delayed_fetch_max` on the fetches the broker parks (STYLE §7: bound everything);
      a request over the bound is answered at once (produce: REQUEST_TIMED_OUT before any append;
      fetch: with what is there).
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


@dataclass(frozen=True, slots=True)
class ReplicaManagerConfig:
    """What the broker core (`ReplicaManager`) reads: this broker's identity, the partitions' settings
    and the replica fetchers' (Kafka's keys in snake_case, Kafka's defaults).

    - `broker_id` (`node.id`), `broker_rack` (`broker.rack`, None: no rack; KIP-392 selection).
    - `inter_broker_listener_name`: the endpoint of a leader that followers fetch from.
    - `replica_fetch_wait_max_ms`, `replica_fetch_min_bytes`, `replica_fetch_response_max_bytes`:
      a follower's long-poll fetch (`replica.fetch.*`), one per leader with all its partitions.
    - `replica_fetch_backoff_ms` (`replica.fetch.backoff.ms`): a partition whose fetch failed (or
      whose records could not be appended) waits this long; a leader that did not answer, all its
      partitions.
    - `replica_socket_timeout_ms` (`replica.socket.timeout.ms`): a replica fetch unanswered this long
      after its `replica_fetch_wait_max_ms` counts as failed, and a late answer is dropped.
    - `metadata_partitions_per_call`, `metadata_log_creations_per_call` (ours): a metadata change is
      applied to at most this many partitions per `handle` call, of which at most this many create
      their log (files and fsyncs, ~3 ms each; stepping a core into a new role or ISR costs a tenth
      of that); the rest waits for the next Tick, which the core asks for at once, so that one
      CreateTopics of thousands of partitions or a failover does not hold the owner's event loop for
      seconds.
    """

    broker_id: int
    inter_broker_listener_name: str
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    broker_rack: str | None = None
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_backoff_ms: int = 1_000
    replica_socket_timeout_ms: int = 30_000
    metadata_partitions_per_call: int = 200
    metadata_log_creations_per_call: int = 2

    def __post_init__(self) -> None:
        assert self.broker_id >= 0, f"broker_id={self.broker_id}"
        assert self.replica_fetch_wait_max_ms >= 0, f"replica_fetch_wait_max_ms={self.replica_fetch_wait_max_ms}"
        assert self.replica_fetch_min_bytes >= 0, f"replica_fetch_min_bytes={self.replica_fetch_min_bytes}"
        assert self.replica_fetch_response_max_bytes > 0, (
            f"replica_fetch_response_max_bytes={self.replica_fetch_response_max_bytes}"
        )
        assert self.replica_fetch_backoff_ms >= 0, f"replica_fetch_backoff_ms={self.replica_fetch_backoff_ms}"
        assert self.replica_socket_timeout_ms > 0, f"replica_socket_timeout_ms={self.replica_socket_timeout_ms}"
        assert self.metadata_partitions_per_call > 0, f"partitions_per_call={self.metadata_partitions_per_call}"
        assert self.metadata_log_creations_per_call > 0, (
            f"metadata_log_creations_per_call={self.metadata_log_creations_per_call}")

    @property
    def replica_fetch_timeout_ms(self) -> int:
        """How long a replica fetch may take before the fetcher gives up on it."""
        return self.replica_fetch_wait_max_ms + self.replica_socket_timeout_ms
