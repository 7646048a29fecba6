"""BrokerSettings: what the broker side of a node reads from its configuration.

The node maps its `NodeConfig` (Kafka-style properties) onto this, so the broker depends on
nothing but these values. Fields are Kafka's keys in snake_case with Kafka's defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from replication.config import ReplicaManagerConfig, ReplicationConfig


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """The broker's settings.

    - `node_id` (`node.id`), `broker_rack` (`broker.rack`, None: no rack), `cluster_id` (sent with
      replica fetches; the leader refuses another cluster's).
    - `advertised_endpoints`: listener name -> "host:port" (`advertised.listeners`), registered
      with the controller; `inter_broker_listener_name` picks the one followers fetch from.
    - `replication`: the replication core's settings (`replica.lag.time.max.ms`, `replica.fetch.max.bytes`).
    - `broker_heartbeat_interval_ms` (`broker.heartbeat.interval.ms`); `broker_session_timeout_ms`
      (`broker.session.timeout.ms`): a controlled shutdown with no controller answering for this
      long gives up, since a returning controller fences the broker anyway.
    - `replica_fetch_wait_max_ms`, `replica_fetch_min_bytes`, `replica_fetch_response_max_bytes`,
      `replica_fetch_backoff_ms`: the follower's long-poll fetch (`replica.fetch.*`).
    - `request_timeout_ms` (`request.timeout.ms`): controller requests and broker-to-broker calls.
    - `controlled_shutdown_timeout_ms`: how long a controlled stop waits for the controller to move
      leaderships away before stopping anyway (Kafka's broker waits up to 5 minutes; ours is shorter
      because a stop that hangs is worse for `tributary-node dev` and Docker than one that fails over).
    - `log_retention_check_interval_ms` (`log.retention.check.interval.ms`): the leader's retention pass.
    - `log_flush_scheduler_interval_ms` (`log.flush.scheduler.interval.ms`): how often each log's
      `flush.ms` is checked. Kafka's default (Long.MAX_VALUE) never checks, so a topic's `flush.ms`
      would never apply; checking every second costs one comparison per log.
    - `replica_high_watermark_checkpoint_interval_ms` (`replica.high.watermark.checkpoint.interval.ms`):
      the checkpoint pass. It writes the HW, recovery-point and log-start-offset checkpoints together
      (Kafka writes the last two every 60 s; more often is harmless and keeps one timer).
    - `log_cleaner_backoff_ms` (`log.cleaner.backoff.ms`): the compaction pass over every replica.
    - `producer_id_expiration_ms` (`producer.id.expiration.ms`): an idempotent producer idle that
      long is forgotten, checked every `producer_id_expiration_check_interval_ms`
      (`producer.id.expiration.check.interval.ms`); Kafka's defaults, one day and ten minutes.
    """

    node_id: int
    advertised_endpoints: Mapping[str, str]
    inter_broker_listener_name: str
    cluster_id: str
    broker_rack: str | None = None
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    broker_heartbeat_interval_ms: int = 2_000
    broker_session_timeout_ms: int = 9_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_backoff_ms: int = 1_000
    request_timeout_ms: int = 30_000
    controlled_shutdown_timeout_ms: int = 30_000
    log_retention_check_interval_ms: int = 300_000
    log_flush_scheduler_interval_ms: int = 1_000
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    log_cleaner_backoff_ms: int = 15_000
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000

    def __post_init__(self) -> None:
        assert self.node_id >= 0, f"node_id={self.node_id}"
        assert self.inter_broker_listener_name in self.advertised_endpoints, (
            f"inter-broker listener {self.inter_broker_listener_name} not in {dict(self.advertised_endpoints)}"
        )
        for name in ("broker_heartbeat_interval_ms", "request_timeout_ms", "log_retention_check_interval_ms",
                     "log_flush_scheduler_interval_ms", "replica_high_watermark_checkpoint_interval_ms",
                     "log_cleaner_backoff_ms", "replica_fetch_response_max_bytes", "producer_id_expiration_ms",
                     "producer_id_expiration_check_interval_ms"):
            assert getattr(self, name) > 0, f"{name}={getattr(self, name)}"
        for name in ("replica_fetch_wait_max_ms", "replica_fetch_min_bytes", "replica_fetch_backoff_ms",
                     "controlled_shutdown_timeout_ms"):
            assert getattr(self, name) >= 0, f"{name}={getattr(self, name)}"

    def replica_manager_config(self) -> ReplicaManagerConfig:
        """The broker core's settings (a replica fetch's socket timeout is `request.timeout.ms`)."""
        return ReplicaManagerConfig(
            broker_id=self.node_id,
            inter_broker_listener_name=self.inter_broker_listener_name,
            replication=self.replication,
            broker_rack=self.broker_rack,
            replica_fetch_wait_max_ms=self.replica_fetch_wait_max_ms,
            replica_fetch_min_bytes=self.replica_fetch_min_bytes,
            replica_fetch_response_max_bytes=self.replica_fetch_response_max_bytes,
            replica_fetch_backoff_ms=self.replica_fetch_backoff_ms,
            replica_socket_timeout_ms=self.request_timeout_ms,
        )
