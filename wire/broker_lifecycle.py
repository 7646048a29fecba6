"""A broker's messages to the active controller about itself: BrokerRegistration, BrokerHeartbeat and
ControlledShutdown (Kafka's KRaft broker lifecycle, KIP-631), reduced to the fields Tributary uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from wire.error_codes import ErrorCode
from wire.sentinels import NO_VALUE


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest:
    """A starting broker registers. `incarnation_id` is new for every process start;
    `endpoints` maps listener name to `host:port`. `log_dirs` are the directory ids of its log
    dirs (KIP-858, from meta.properties). `previous_broker_epoch` is the broker epoch its
    clean-shutdown marker recorded (KIP-966, KAFKA-15586), -1 when it has none: the registration is
    clean only if it equals the epoch the controller has on record."""

    broker_id: int
    incarnation_id: str
    endpoints: Mapping[str, str]
    rack: str | None = None
    log_dirs: tuple[str, ...] = ()
    previous_broker_epoch: int = NO_VALUE


@dataclass(frozen=True, slots=True)
class BrokerRegistrationResponse:
    """`broker_epoch` (the registration record's offset) goes into every later request of the broker.
    `warning`, on success, says why the registration counted as an unclean restart and what it cost
    (the broker logs it for the operator); None for a clean one."""

    error_code: ErrorCode
    error_message: str | None = None
    broker_epoch: int = NO_VALUE
    warning: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    """A replica's log end, reported for a partition without a leader whose ISR and ELR are empty
    (the fields of KIP-966's GetReplicaLogInfo answer). `current_leader_epoch` is the partition's
    leader epoch the replica's core is in; `last_written_leader_epoch` the epoch of its last batch
    (-1 for an empty log). `log_start_offset` and `epoch_start_offsets` (its leader-epoch cache:
    (epoch, start offset) pairs, oldest first) let the controller tell whether one replica's log
    surely holds another's (`controller/quorum_controller.py`, `_surely_extends`). Records from
    `may_be_committed_end_offset` on (-1: none) only this replica ever held, and no leader counted
    them committed: a deposed leader's that it never sent to a follower."""

    topic_id: str
    partition_index: int
    current_leader_epoch: int
    last_written_leader_epoch: int
    log_end_offset: int
    log_start_offset: int = 0
    epoch_start_offsets: tuple[tuple[int, int], ...] = ()
    may_be_committed_end_offset: int = -1


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    """Sent every `broker.heartbeat.interval.ms`. `current_metadata_offset` is the broker's applied
    metadata offset; `want_fence` asks to stay fenced (still starting); `want_shutdown` asks for a
    controlled shutdown. `replica_log_info`: the log ends of its replicas of partitions that have
    no leader and an empty ISR and ELR, from which the controller elects the most complete."""

    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shutdown: bool = False
    replica_log_info: tuple[ReplicaLogInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class ControlledShutdownRequest:
    """A stopping broker asks to hand over its leaderships first (a heartbeat with `want_shutdown`)."""

    broker_id: int
    broker_epoch: int
    current_metadata_offset: int


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    """`is_caught_up`: the broker has applied its own registration. `should_shut_down`: a controlled
    shutdown is complete (it leads nothing and has seen the records that moved its leaderships)."""

    error_code: ErrorCode
    error_message: str | None = None
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False
