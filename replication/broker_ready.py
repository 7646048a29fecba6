"""The outputs of the broker core: `BrokerReady` and what it carries (frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass

from replication.events import Event
from replication.ready import AlterPartitionProposal, Completion, FollowerFetchPosition, Ready
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

NO_PREFERRED_READ_REPLICA = -1


@dataclass(frozen=True, slots=True)
class LeaderIdAndEpoch:
    """Where a partition's leader is, for an answer that sends the client elsewhere."""

    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class PartAnswer:
    """One partition's answer within a `ClientAnswer`: the partition core's completion (or the
    broker's refusal in the same shape). `current_leader` is set with NOT_LEADER_OR_FOLLOWER,
    FENCED_LEADER_EPOCH and UNKNOWN_LEADER_EPOCH when the metadata knows the partition (Kafka's
    CurrentLeader, KIP-951); `preferred_read_replica` (KIP-392) tells a consumer to fetch from that
    replica instead (the answer then has no records)."""

    topic_partition: TopicPartition
    result: Completion
    current_leader: LeaderIdAndEpoch | None = None
    preferred_read_replica: int = NO_PREFERRED_READ_REPLICA


@dataclass(frozen=True, slots=True)
class ClientAnswer:
    """The answer to `ClientRequest` `request_id`: one part per requested part, in request order.
    A follower's session fetch (KIP-227, replica_sessions.py) is answered with its `session_id` and
    only the parts with news, or with a session `error` and no parts."""

    request_id: int
    parts: tuple[PartAnswer, ...]
    session_id: int = 0
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class ReplicaFetchSend:
    """A follower fetch to send to leader `leader_id` at `address` (its inter-broker endpoint), all
    its partitions in one request (Kafka's FetchRequest with replica_id = this broker). The owner
    hands the answer back as `ReplicaFetchAnswer(request_id, ...)`, or an error if there is none.
    KIP-227: `session_id` and `session_epoch` name the fetch session (epoch 0: a full fetch that
    opens one); `positions` lists the partitions added or changed, `forgotten` those to drop."""

    request_id: int
    leader_id: int
    address: str
    broker_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    positions: tuple[tuple[TopicPartition, FollowerFetchPosition], ...]
    replica_id: int = -1
    session_id: int = 0
    session_epoch: int = -1
    forgotten: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class AlterPartitionSend:
    """A partition leader's ISR proposal for the active controller (Kafka's AlterPartition, one
    partition per request). The owner hands the answer back as `AlterPartitionAnswer(request_id,
    ...)`, REQUEST_TIMED_OUT if none comes."""

    request_id: int
    broker_epoch: int
    topic_id: str
    topic_partition: TopicPartition
    proposal: AlterPartitionProposal


@dataclass(frozen=True, slots=True)
class PartitionStep:
    """One step of a partition core inside this call: the event and its Ready (already performed by
    the broker core). For observers: the simulator's checker, traces."""

    topic_partition: TopicPartition
    event: Event
    ready: Ready


@dataclass(frozen=True, slots=True)
class DeletedLog:
    """A log this broker deleted, and why (for the operator's log)."""

    topic_partition: TopicPartition
    reason: str


@dataclass(frozen=True, slots=True)
class ReplicaLogEnd:
    """A hosted replica's log end, for a partition with no leader and an empty ISR and ELR (what the
    heartbeat reports for KIP-966's recovery election): the partition's `leader_epoch` the core is
    in, the epoch of its last batch (-1 for an empty log), its log end offset, its log start offset
    and its leader-epoch cache ((epoch, start offset) pairs, oldest first); the end of the records it
    may hold committed (`ReplicaLog.may_be_committed_end`: past it, records only this broker ever
    held, never committed)."""

    topic_id: str
    partition_index: int
    leader_epoch: int
    last_written_leader_epoch: int
    log_end_offset: int
    log_start_offset: int = 0
    epoch_start_offsets: tuple[tuple[int, int], ...] = ()
    may_be_committed_end_offset: int = -1


@dataclass(frozen=True, slots=True)
class BrokerReady:
    """The work one `ReplicaManager.handle` call hands back. Log writes are done already (the cores
    write through `storage.Log`). The owner then, in this order:

    0. if `log_dir_failure` is set (a read found a damaged batch; that log was cut there, durably,
       and went offline), halts the process at once and does nothing else of this Ready: Kafka
       halts a broker whose log dir failed when it has no other. Restarted, it registers without a
       clean shutdown, so its replicas rejoin as followers (see `Partition._take_offline`);
    1. sends each `alter_partitions` request to the active controller;
    2. sends each `answers` entry to the client that asked (in order: a produce answer precedes the
       fetches its append made answerable);
    3. sends each `fetches` request to its leader;
    4. asks for a `Tick` no later than `next_tick_ms` (None: no timer; ticking earlier is harmless).

    `caught_up`: the last metadata given was applied to every partition (a large change takes several
    calls, ending in Ticks) and it includes this broker's current registration (a broker serves
    clients only once it has been, and asks to be unfenced each time it is): the owner tells its
    lifecycle when a Tick's Ready is the first caught up since the last metadata.
    `deleted_logs`: logs this call deleted, and why (strays, replicas moved away), to be logged.
    `steps`: every partition step of this call, for observers; the owner need not read them."""

    caught_up: bool
    steps: tuple[PartitionStep, ...] = ()
    alter_partitions: tuple[AlterPartitionSend, ...] = ()
    answers: tuple[ClientAnswer, ...] = ()
    fetches: tuple[ReplicaFetchSend, ...] = ()
    deleted_logs: tuple[DeletedLog, ...] = ()
    next_tick_ms: int | None = None
    log_dir_failure: str | None = None
