"""QuorumController: the active controller's request handling, as a pure state machine.

Theory of operation. The node whose Raft replica leads the quorum is the active controller. It
owns one `QuorumController`, built from the committed `ClusterMetadata` when it takes office. Each
request (`handle(request, now_ms)` or the named methods) is validated against a *speculative*
copy of the metadata, which includes the records this controller proposed that are not committed
yet, so two creates of one topic in a row are caught. The answer is a `ControllerResult`: the
records to append (in order, one Raft entry each) and the response to send once they commit.
Every record is applied to the speculative copy as it is produced, at the offset it will get in
the log, so a RegisterBroker's broker epoch (= its offset, as in KRaft) is known at once.

Contract with the owner (the node's controller driver):
- Take office with `QuorumController(committed, rng, now_ms, next_offset)` or `reset_to(...)`,
  only after the Raft leader has committed an entry of its own term, so that `committed` holds
  every record of earlier terms; `next_offset` is the Raft log end offset, where the next record
  will land.
- Append `result.records` at once, as ONE Raft batch (`ProposeBatch`, one entry per record),
  from `result.base_offset`. If Raft refuses or places them elsewhere (leadership lost), call
  `reset_to` with the committed state; uncommitted records of a deposed controller are discarded
  by Raft and by the speculative copy alike.
- Send `result.response` after the records commit (immediately if there are none).
- Call `tick(now_ms)` periodically (e.g. every `broker.heartbeat.interval.ms` / 4).

Broker liveness (Kafka's `BrokerHeartbeatManager`): the last heartbeat time of each broker is
controller memory, not metadata; a new controller assumes every unfenced broker was just heard
from. A broker silent for more than `broker.session.timeout.ms` is fenced by `tick`. A fenced broker
is unfenced only once its heartbeat reports metadata applied up to its fencing record
(`BrokerRegistration.fenced_offset`): so it has seen the leaderships moved away from it, and the
lease it renews (controller/broker_lifecycle.py) never lets it act on older ones.

Leader, ISR and ELR changes (Kafka's `ReplicationControlManager`, KIP-966). Every change goes
through `partition_change` (controller/partition_change.py, the rules and why they keep every
acknowledged record): a broker that is fenced, starts a controlled shutdown or registers again
leaves every ISR (into the ELR while the ISR is below min.insync.replicas), and each partition it
led gets the next leader from the ISR, then the ELR. The ISR may become empty. min.insync.replicas
is the topic's config over `ControllerConfig.topic_defaults` (the node's broker-level defaults, as
the partition leaders resolve it), capped at the replication factor as the leader caps it.

Registration (KIP-966's unclean shutdown detection, KAFKA-15586; KIP-858's directory ids). A
broker registers with the broker epoch its clean-shutdown marker recorded (`previous_broker_epoch`,
-1 if it had none) and the ids of its log dirs. It registered cleanly only if that epoch is the
one on record and none of the log dirs it registered before is missing: then it leaves ISRs as a
fenced broker does but keeps its ELR memberships. Otherwise it may have lost an unflushed tail, or
a whole dir was wiped or replaced: it leaves every ISR and ELR too (into the last known ELR), and
its replicas rejoin as followers that must catch up. The response's `warning` says which.

Offline partitions with an empty ISR and ELR (every replica that held all acknowledged records
restarted uncleanly). Kafka 4.x elects the last known leader, which may be exactly the replica that
lost its tail. Instead, brokers report each such replica's log end in their heartbeats (last
written leader epoch, log end offset, for the partition's current leader epoch); once every
replica is registered, unfenced and has reported, the most complete member of the last known ELR
leads, or a replica whose log surely extends that member's: KIP-966 part 2's "Balanced" recovery,
simplified (`_recovery_leader` says which logs and why). Reports are controller memory, like heartbeat
times: a new controller waits for fresh ones, and a report counts only for the broker epoch and
the leader epoch it was made in (during a leader epoch without a leader no replica's log changes).
With `unclean.leader.election.enable=true` the first active replica leads instead when nothing else
can (data may be lost, which is what the user chose). Unfencing a broker, a `tick`, a heartbeat
with reports and turning unclean election on all elect leaders for offline partitions where that
became possible. Changing a topic's configs re-applies the rules to its partitions: a lower
min.insync.replicas empties the ELR where the ISR now meets it (its leader advances the HW again).

Stale AlterPartition. A request may arrive late or twice (client retries, forwarding). When the
controller refuses an ISR change as INELIGIBLE_REPLICA, the leader goes back to its committed ISR
and may advance the HW without the refused member; a later copy of the same request (same epochs)
must then never be accepted. So the refusal itself commits a PartitionChange that only bumps the
partition epoch, and the answer carries the new state: every copy of the old request now fails the
partition epoch check (INVALID_UPDATE_VERSION). Safe: the leader acts on the refusal only after
the bump committed (the driver answers after the commit), and the copies are fenced by it. Live:
nothing waits for the refused member; the leader adopts the answered partition epoch (or learns
it from the metadata) and may propose again after `ineligible_replica_backoff_ms`. The other
option, the leader counting the refused member in its maximal ISR until the partition epoch
moves, could hold the HW for good when nothing else changes the partition.

Atomic results. The driver proposes a result's records as one Raft batch (`ProposeBatch`, Kafka's
atomic append of a controller result, KIP-868): they replicate, survive crashes, are truncated and
commit together, so a failover never commits a prefix of a request (the simulator checks this on
every step, tests/sim/checker.py). The records are still ordered so that every prefix would leave
valid metadata — ISR and leader changes precede the FenceBroker / BrokerRegistrationChange that
needs them, UnfenceBroker precedes the elections it enables — as a second line of defence.

Validation follows Kafka's order and error codes; every error message names the values and the
way out. A rejected request yields no records and leaves the state untouched.
"""

from __future__ import annotations

import base64
import itertools
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from controller.controller_api import BrokerConnectionRefused, BrokerProbe, ControllerTick, TickResponse
from controller.metadata import BrokerRegistration, ClusterMetadata, PartitionRegistration, topic_name_error
from controller.metadata_records import (
    BrokerRegistrationChange,
    ConfigChange,
    FenceBroker,
    MetadataRecord,
    Partition,
    PartitionChange,
    ProducerIds,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnfenceBroker,
)
from controller.partition_change import partition_change
from controller.replica_assignment import RandomSource, UsableBroker, assign_replicas
from storage.config import LogConfig
from storage.errors import InvalidConfigError
from wire.alter_partition import (
    AlterPartitionData,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    EpochLineage,
)
from wire.broker_lifecycle import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControlledShutdownRequest,
    ReplicaLogInfo,
)
from wire.configs import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResourceResult,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from wire.error_codes import ErrorCode
from wire.producer_ids import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from wire.sentinels import NO_LEADER, NO_VALUE
from wire.topics import (
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
PRODUCER_ID_MAX = 2**63 - 1

ResponseT = TypeVar("ResponseT")

MIN_INSYNC_REPLICAS = "min.insync.replicas"
_LIST_CONFIGS = {"cleanup.policy"}  # the only list-typed topic config: APPEND/SUBTRACT apply to it
_TOPIC_ID_DRAWS_MAX = 64


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The controller's settings; names are Kafka's broker config keys in snake_case."""

    broker_session_timeout_ms: int = 9000
    # Fast fencing of a dead broker (README, "Failover after kill -9"; not in Kafka): the listener name to probe
    # (`inter.broker.listener.name`), None for none: then only the session timeout fences.
    probe_listener_name: str | None = None
    num_partitions: int = 1  # `num.partitions`: the default for CreateTopics without a count
    default_replication_factor: int = 1  # `default.replication.factor`
    partition_count_max: int = 10_000  # per CreateTopics topic; Kafka bounds records per operation similarly
    # The broker-level topic defaults (min.insync.replicas, unclean.leader.election.enable) under
    # each topic's overrides: the same resolution the partition leaders make.
    topic_defaults: LogConfig = field(default_factory=LogConfig)

    def __post_init__(self) -> None:
        assert self.broker_session_timeout_ms > 0, f"broker_session_timeout_ms={self.broker_session_timeout_ms}"
        assert self.num_partitions >= 1, f"num_partitions={self.num_partitions}"
        assert self.default_replication_factor >= 1, f"default_replication_factor={self.default_replication_factor}"


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[ResponseT]):
    """What a request produced: records to append from `base_offset` (one Raft entry each, in
    order), and the response to send once they are committed."""

    records: tuple[MetadataRecord, ...]
    response: ResponseT
    base_offset: int


class _Batch:
    """Records of one request, each applied to the speculative metadata at its future offset."""

    def __init__(self, metadata: ClusterMetadata, base_offset: int) -> None:
        self.metadata = metadata
        self.base_offset = base_offset
        self.records: list[MetadataRecord] = []

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)

    def append(self, record: MetadataRecord) -> int:
        """Apply `record` speculatively; return the offset it will have."""
        offset = self.next_offset
        self.metadata.apply_record(offset, record)
        self.records.append(record)
        return offset

    def result(self, response: ResponseT) -> ControllerResult[ResponseT]:
        return ControllerResult(tuple(self.records), response, self.base_offset)


class _Rejected(Exception):
    """A request check failed; internal control flow only, turned into an error response. `state`:
    the partition's registration to answer with (an AlterPartition refusal that bumped it)."""

    def __init__(self, code: ErrorCode, message: str, state: PartitionRegistration | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.state = state


class QuorumController:
    """The active controller: validates requests and answers with records and a response.

    State: the speculative metadata (committed + own proposals), the offset the next record
    will get, each broker's last heartbeat time, the offset from which a broker in controlled
    shutdown must have read before it may stop, and the replica log ends brokers reported for
    partitions with an empty ISR and ELR. All of it is rebuilt by `reset_to`.
    """

    def __init__(
        self,
        committed: ClusterMetadata,
        rng: RandomSource,
        now_ms: int,
        next_offset: int,
        config: ControllerConfig | None = None,
    ) -> None:
        self._config = config or ControllerConfig()
        self._rng = rng
        self.reset_to(committed, now_ms, next_offset)

    def reset_to(self, committed: ClusterMetadata, now_ms: int, next_offset: int) -> None:
        """Drop every uncommitted proposal and start again from `committed` (taking office, or
        after Raft refused an append). Every unfenced broker counts as heard from at `now_ms`."""
        assert next_offset > committed.last_applied_offset, (
            f"next_offset={next_offset} last_applied_offset={committed.last_applied_offset}"
        )
        self._metadata = committed.copy()
        self._next_offset = next_offset
        self._now_ms = now_ms
        self._last_contact_ms = {broker.broker_id: now_ms for broker in committed.brokers()}
        self._controlled_shutdown_offset = {
            broker.broker_id: committed.last_applied_offset
            for broker in committed.brokers()
            if broker.in_controlled_shutdown
        }
        # (topic id, index) -> broker id -> (the broker epoch it reported with, its report)
        self._log_ends: dict[tuple[str, int], dict[int, tuple[int, ReplicaLogInfo]]] = {}

    @property
    def metadata(self) -> ClusterMetadata:
        """The speculative metadata (read only): committed state plus this controller's proposals."""
        return self._metadata

    @property
    def next_offset(self) -> int:
        """The log offset the next proposed record will get."""
        return self._next_offset

    def handle(self, request: Any, now_ms: int) -> ControllerResult[Any]:
        """Dispatch any controller request (or `ControllerTick`) to its method."""
        method = _HANDLERS.get(type(request))
        assert method is not None, f"not a controller request: {request!r}"
        return method(self, request, now_ms)

    def _begin(self, now_ms: int) -> _Batch:
        assert now_ms >= self._now_ms, f"time went back: now_ms={now_ms} < {self._now_ms}"
        self._now_ms = now_ms
        return _Batch(self._metadata, self._next_offset)

    def _finish(self, batch: _Batch, response: ResponseT) -> ControllerResult[ResponseT]:
        assert batch.base_offset == self._next_offset, f"interleaved batches at {self._next_offset}"
        self._next_offset = batch.next_offset
        return batch.result(response)

    # ---- CreateTopics --------------------------------------------------------------------------

    def create_topics(self, request: CreateTopicsRequest, now_ms: int) -> ControllerResult[CreateTopicsResponse]:
        """Create each topic with its partitions, or say why not (INVALID_TOPIC_EXCEPTION,
        TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
        INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, INVALID_REQUEST for a name given twice)."""
        batch = self._begin(now_ms)
        counts = Counter(topic.name for topic in request.topics)
        results: list[CreatableTopicResult] = []
        for topic in request.topics:
            try:
                if counts[topic.name] > 1:
                    raise _Rejected(ErrorCode.INVALID_REQUEST, f"topic {topic.name!r} appears twice in the request")
                results.append(self._create_topic(topic, request.validate_only, batch))
            except _Rejected as rejected:
                results.append(CreatableTopicResult(topic.name, rejected.code, rejected.message))
        return self._finish(batch, CreateTopicsResponse(tuple(results)))

    def _create_topic(self, topic: CreatableTopic, validate_only: bool, batch: _Batch) -> CreatableTopicResult:
        self._check_new_topic_name(topic.name)
        configs = _config_strings(topic.configs)
        manual = None if topic.assignments is None else self._manual_assignment(topic)
        if manual is None:
            partition_count, replication_factor = self._partition_count_and_factor(topic)
        else:
            partition_count, replication_factor = len(manual), len(manual[0])
        _check_topic_configs(configs, replication_factor)
        if validate_only:
            return CreatableTopicResult(
                topic.name, ErrorCode.NONE, None, None, partition_count, replication_factor, configs
            )
        assignment = manual or assign_replicas(self._usable_brokers(), partition_count, replication_factor, self._rng)
        topic_id = self._new_topic_id()
        batch.append(Topic(topic.name, topic_id, configs))
        self._append_partitions(batch, topic_id, 0, assignment)
        return CreatableTopicResult(
            topic.name, ErrorCode.NONE, None, topic_id, partition_count, replication_factor, configs
        )

    def _check_new_topic_name(self, name: str) -> None:
        error = topic_name_error(name)
        if error is not None:
            raise _Rejected(ErrorCode.INVALID_TOPIC_EXCEPTION, error)
        if self._metadata.topic_id(name) is not None:
            raise _Rejected(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        # Kafka's Topic.hasCollision: '.' and '_' map to the same metric name, so they may not
        # tell two topics apart.
        if "." in name or "_" in name:
            key = name.replace(".", "_")
            for other in self._metadata.topic_names():
                if other.replace(".", "_") == key:
                    raise _Rejected(
                        ErrorCode.INVALID_TOPIC_EXCEPTION,
                        f"topic {name!r} collides with existing topic {other!r}: '.' and '_' are the same in metric "
                        "names; choose another name",
                    )

    def _partition_count_and_factor(self, topic: CreatableTopic) -> tuple[int, int]:
        count = self._config.num_partitions if topic.num_partitions == NO_VALUE else topic.num_partitions
        if not 1 <= count <= self._config.partition_count_max:
            raise _Rejected(
                ErrorCode.INVALID_PARTITIONS,
                f"num_partitions={count} for {topic.name!r}; use 1..{self._config.partition_count_max}",
            )
        factor = (
            self._config.default_replication_factor
            if topic.replication_factor == NO_VALUE
            else topic.replication_factor
        )
        usable = len(self._usable_brokers())
        if factor < 1:
            raise _Rejected(ErrorCode.INVALID_REPLICATION_FACTOR, f"replication_factor={factor}; use at least 1")
        if factor > usable:
            raise _Rejected(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication_factor={factor} but only {usable} broker(s) are registered and unfenced; "
                f"use at most {usable} or start more brokers",
            )
        return count, factor

    def _manual_assignment(self, topic: CreatableTopic) -> list[tuple[int, ...]]:
        """Kafka's `validateManualPartitionAssignment`: indices 0..n-1, one replica count, no repeats,
        registered brokers, and at least one active replica per partition."""
        assert topic.assignments is not None
        if topic.num_partitions != NO_VALUE or topic.replication_factor != NO_VALUE:
            raise _Rejected(
                ErrorCode.INVALID_REQUEST,
                f"{topic.name!r}: give either assignments or num_partitions/replication_factor, not both",
            )
        count = len(topic.assignments)
        if sorted(topic.assignments) != list(range(count)) or count == 0:
            raise _Rejected(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"{topic.name!r}: partition indices {sorted(topic.assignments)} must be 0..n-1",
            )
        if count > self._config.partition_count_max:
            raise _Rejected(
                ErrorCode.INVALID_PARTITIONS,
                f"{topic.name!r}: {count} partitions; at most {self._config.partition_count_max}",
            )
        assignment = [tuple(topic.assignments[index]) for index in range(count)]
        for index, replicas in enumerate(assignment):
            self._check_manual_replicas(f"{topic.name}-{index}", replicas, len(assignment[0]))
        return assignment

    def _check_manual_replicas(self, where: str, replicas: tuple[int, ...], factor: int) -> None:
        if not replicas or len(set(replicas)) != len(replicas) or len(replicas) != factor:
            raise _Rejected(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"{where}: replicas {list(replicas)} are empty, repeat a broker, or differ in count "
                f"from the topic's replication factor {factor}",
            )
        unknown = [replica for replica in replicas if self._metadata.broker(replica) is None]
        if unknown:
            raise _Rejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{where}: brokers {unknown} are not registered")
        if not any(self._is_active(replica) for replica in replicas):
            raise _Rejected(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"{where}: all of brokers {list(replicas)} are fenced or shutting down",
            )

    def _append_partitions(self, batch: _Batch, topic_id: str, first_index: int,
                           assignment: list[tuple[int, ...]]) -> None:
        """Partition records for new partitions `first_index`...: the active replicas are the ISR,
        the first of them leads."""
        for index, replicas in enumerate(assignment, first_index):
            isr = tuple(replica for replica in replicas if self._is_active(replica))
            assert isr, f"{topic_id}-{index}: no active replica in {replicas}"
            # Every replica's log starts empty: epoch 0 begins at offset 0 with nothing before it.
            batch.append(Partition(topic_id, index, replicas, isr, isr[0], 0, 0,
                                   epoch_lineage=EpochLineage(0, -1, 0).as_record()))

    def _new_topic_id(self) -> str:
        """A Kafka-style topic id from the injected generator: 16 random bytes, url-safe base64
        without padding (22 characters), never all zeros, never Kafka's metadata topic id (1),
        never starting with '-' (it would read as a command-line flag), never taken."""
        for _ in range(_TOPIC_ID_DRAWS_MAX):
            value = self._rng.getrandbits(128)
            topic_id = base64.urlsafe_b64encode(value.to_bytes(16, "big")).decode("ascii").rstrip("=")
            if value > 1 and not topic_id.startswith("-") and self._metadata.topic_name(topic_id) is None:
                assert len(topic_id) == 22, topic_id
                return topic_id
        raise AssertionError(f"no fresh topic id in {_TOPIC_ID_DRAWS_MAX} draws: the generator is broken")

    # ---- DeleteTopics --------------------------------------------------------------------------

    def delete_topics(self, request: DeleteTopicsRequest, now_ms: int) -> ControllerResult[DeleteTopicsResponse]:
        """Remove topics by name (UNKNOWN_TOPIC_OR_PARTITION if absent) or id (UNKNOWN_TOPIC_ID)."""
        batch = self._begin(now_ms)
        results: list[DeletableTopicResult] = []
        names, ids = Counter(request.topic_names), Counter(request.topic_ids)
        for name in request.topic_names:
            topic_id = self._metadata.topic_id(name)
            if names[name] > 1:
                results.append(DeletableTopicResult(name, None, ErrorCode.INVALID_REQUEST, f"{name!r} is given twice"))
            elif topic_id is None:
                results.append(
                    DeletableTopicResult(
                        name,
                        None,
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"topic {name!r} does not exist; list topics to check the name",
                    )
                )
            else:
                batch.append(RemoveTopic(topic_id))
                results.append(DeletableTopicResult(name, topic_id, ErrorCode.NONE))
        for topic_id in request.topic_ids:
            name = self._metadata.topic_name(topic_id)
            if ids[topic_id] > 1:
                results.append(
                    DeletableTopicResult(
                        None, topic_id, ErrorCode.INVALID_REQUEST, f"topic id {topic_id} is given twice"
                    )
                )
            elif name is None:
                results.append(
                    DeletableTopicResult(
                        None,
                        topic_id,
                        ErrorCode.UNKNOWN_TOPIC_ID,
                        f"no topic has id {topic_id}; it may be deleted already",
                    )
                )
            else:
                batch.append(RemoveTopic(topic_id))
                results.append(DeletableTopicResult(name, topic_id, ErrorCode.NONE))
        return self._finish(batch, DeleteTopicsResponse(tuple(results)))

    # ---- CreatePartitions ------------------------------------------------------------------------

    def create_partitions(
        self, request: CreatePartitionsRequest, now_ms: int
    ) -> ControllerResult[CreatePartitionsResponse]:
        """Grow topics to their requested partition counts (Kafka's `ReplicationControlManager.
        createPartitions`): UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS for a count not above the
        current one, INVALID_REPLICA_ASSIGNMENT, INVALID_REPLICATION_FACTOR when fewer brokers are
        usable than the topic's replication factor, INVALID_REQUEST for a topic given twice. New
        partitions keep the replication factor of partition 0; existing ones are untouched."""
        batch = self._begin(now_ms)
        counts = Counter(topic.name for topic in request.topics)
        results: list[CreatePartitionsTopicResult] = []
        for topic in request.topics:
            try:
                if counts[topic.name] > 1:
                    raise _Rejected(ErrorCode.INVALID_REQUEST, f"topic {topic.name!r} appears twice in the request")
                self._create_partitions(topic, request.validate_only, batch)
                results.append(CreatePartitionsTopicResult(topic.name, ErrorCode.NONE))
            except _Rejected as rejected:
                results.append(CreatePartitionsTopicResult(topic.name, rejected.code, rejected.message))
        return self._finish(batch, CreatePartitionsResponse(tuple(results)))

    def _create_partitions(self, topic: CreatePartitionsTopic, validate_only: bool, batch: _Batch) -> None:
        topic_id = self._metadata.topic_id(topic.name)
        if topic_id is None:
            raise _Rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic.name!r} does not exist")
        existing = self._metadata.partitions(topic_id)
        current = len(existing)
        if topic.count <= current:
            raise _Rejected(ErrorCode.INVALID_PARTITIONS,
                            f"topic {topic.name!r} has {current} partition(s); partitions can only be added, "
                            f"so ask for more than {current} (not {topic.count})")
        if topic.count > self._config.partition_count_max:
            raise _Rejected(ErrorCode.INVALID_PARTITIONS,
                            f"{topic.count} partitions for {topic.name!r}; at most {self._config.partition_count_max}")
        # A topic whose creation committed only in part has no partition 0 to take the factor from.
        factor = len(existing[0].replicas) if existing else self._config.default_replication_factor
        added = topic.count - current
        if topic.assignments is not None:
            if len(topic.assignments) != added:
                raise _Rejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                f"{topic.name!r}: {added} partition(s) added but {len(topic.assignments)} "
                                "assignment(s) given; give one per new partition or none")
            for index, replicas in enumerate(topic.assignments, current):
                self._check_manual_replicas(f"{topic.name}-{index}", tuple(replicas), factor)
            assignment = [tuple(replicas) for replicas in topic.assignments]
        else:
            usable = self._usable_brokers()
            if factor > len(usable):
                raise _Rejected(ErrorCode.INVALID_REPLICATION_FACTOR,
                                f"{topic.name!r} has replication factor {factor} but only {len(usable)} broker(s) "
                                "are registered and unfenced; start more brokers")
            assignment = assign_replicas(usable, added, factor, self._rng)
        if not validate_only:
            self._append_partitions(batch, topic_id, current, assignment)

    # ---- IncrementalAlterConfigs ---------------------------------------------------------------

    def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest, now_ms: int
    ) -> ControllerResult[IncrementalAlterConfigsResponse]:
        """Apply SET/DELETE/APPEND/SUBTRACT to topic configs; each resource all or nothing
        (UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG, INVALID_REQUEST). Turning unclean leader
        election on elects leaders for the topic's offline partitions at once; lowering
        min.insync.replicas empties the ELR where the ISR meets it."""
        batch = self._begin(now_ms)
        counts = Counter((resource.resource_type, resource.resource_name) for resource in request.resources)
        results: list[AlterConfigsResourceResult] = []
        for resource in request.resources:
            try:
                if counts[(resource.resource_type, resource.resource_name)] > 1:
                    raise _Rejected(ErrorCode.INVALID_REQUEST, f"resource {resource.resource_name!r} is given twice")
                self._alter_configs(resource, request.validate_only, batch)
                results.append(
                    AlterConfigsResourceResult(resource.resource_type, resource.resource_name, ErrorCode.NONE)
                )
            except _Rejected as rejected:
                results.append(
                    AlterConfigsResourceResult(
                        resource.resource_type, resource.resource_name, rejected.code, rejected.message
                    )
                )
        return self._finish(batch, IncrementalAlterConfigsResponse(tuple(results)))

    def _alter_configs(self, resource: AlterConfigsResource, validate_only: bool, batch: _Batch) -> None:
        if resource.resource_type != ConfigResourceType.TOPIC:
            raise _Rejected(
                ErrorCode.INVALID_REQUEST,
                f"{resource.resource_type!r} configs are static here; set them in the broker's config file",
            )
        name = resource.resource_name
        topic_id = self._metadata.topic_id(name)
        if topic_id is None:
            raise _Rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        current = self._metadata.topic_configs(name)
        updated = _apply_config_ops({} if resource.replace else current, resource.configs)
        # A topic whose creation committed only in part (a log not written in atomic batches, see
        # the module docstring) may have no partition; then there is no replication factor to hold
        # min.insync.replicas against.
        factors = [len(state.replicas) for state in self._metadata.partitions(topic_id)]
        _check_topic_configs(updated, min(factors, default=None))
        if validate_only:
            return
        for key in sorted(set(current) | set(updated)):
            if current.get(key) != updated.get(key):
                batch.append(ConfigChange(name, key, updated.get(key)))
        # Under the new configs: a lower min.insync.replicas empties the ELR of partitions whose ISR
        # now meets it (their leaders advance the HW again), and unclean election may elect.
        self._refresh_partitions(batch, topic_id)

    # ---- BrokerRegistration, BrokerHeartbeat, ControlledShutdown -------------------------------

    def register_broker(
        self, request: BrokerRegistrationRequest, now_ms: int
    ) -> ControllerResult[BrokerRegistrationResponse]:
        """Register (or re-register) a broker, fenced, with a new broker epoch; a second live
        process with the same id gets DUPLICATE_BROKER_REGISTRATION. A re-registration is clean or
        unclean as the module docstring says; the response's `warning` explains an unclean one."""
        batch = self._begin(now_ms)
        error = _registration_error(request)
        existing = self._metadata.broker(request.broker_id)
        if (
            error is None
            and existing is not None
            and existing.incarnation_id != request.incarnation_id
            and self._has_valid_session(existing, now_ms)
        ):
            error = _Rejected(
                ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                f"broker {request.broker_id} is registered by another live process (incarnation "
                f"{existing.incarnation_id}); give this node another node.id, or wait "
                f"{self._config.broker_session_timeout_ms} ms after the old one stops",
            )
        if error is not None:
            return self._finish(batch, BrokerRegistrationResponse(error.code, error.message))
        warning = None
        if existing is not None:
            # A new process leaves ISRs and leaderships before its new registration; after an
            # unclean shutdown or with a wiped log dir it leaves every ELR too (module docstring).
            unclean_reason = _unclean_shutdown_reason(existing, request)
            changed = self._remove_broker(batch, request.broker_id, unclean=unclean_reason is not None)
            if unclean_reason is not None:
                warning = (f"{unclean_reason}; it left the ISR or ELR of {changed} partition(s) and its "
                           "replicas rejoin them by catching up as followers")
        broker_epoch = batch.append(
            RegisterBroker(request.broker_id, request.incarnation_id, dict(request.endpoints), request.rack,
                           tuple(request.log_dirs))
        )
        self._last_contact_ms[request.broker_id] = now_ms
        self._controlled_shutdown_offset.pop(request.broker_id, None)
        return self._finish(batch, BrokerRegistrationResponse(ErrorCode.NONE, None, broker_epoch, warning))

    def broker_heartbeat(
        self, request: BrokerHeartbeatRequest, now_ms: int
    ) -> ControllerResult[BrokerHeartbeatResponse]:
        """Record that the broker is alive and move it between fenced, active, controlled shutdown
        and shut down (Kafka's `BrokerHeartbeatManager.calculateNextBrokerState`); keep its replica
        log ends and elect where they complete a partition's reports."""
        batch = self._begin(now_ms)
        broker = self._metadata.broker(request.broker_id)
        rejected = self._check_broker_epoch(broker, request.broker_id, request.broker_epoch)
        if rejected is not None:
            return self._finish(batch, BrokerHeartbeatResponse(rejected.code, rejected.message))
        assert broker is not None
        rejected = _log_info_error(request.replica_log_info)
        if rejected is not None:
            return self._finish(batch, BrokerHeartbeatResponse(rejected.code, rejected.message))
        self._last_contact_ms[broker.broker_id] = now_ms
        reported = self._record_log_ends(broker, request.replica_log_info)
        caught_up = request.current_metadata_offset >= broker.broker_epoch
        should_shut_down = False
        if broker.fenced:
            should_shut_down = request.want_shutdown
            # Seen its own fencing, so every leadership moved away from it: only then may it lead
            # again (a broker back from a partition may still hold metadata older than that).
            if (not request.want_shutdown and not request.want_fence and caught_up
                    and request.current_metadata_offset >= broker.fenced_offset):
                self._unfence(batch, broker)
        elif request.want_fence:
            self._fence(batch, broker)
            should_shut_down = request.want_shutdown
        elif broker.in_controlled_shutdown:
            shutdown_offset = self._controlled_shutdown_offset.get(broker.broker_id, broker.broker_epoch)
            if not self._leads_anything(broker.broker_id) and request.current_metadata_offset >= shutdown_offset:
                self._fence(batch, broker)
                should_shut_down = True
        elif request.want_shutdown:
            self._begin_controlled_shutdown(batch, broker)
        if reported:
            self._elect_offline_leaders(batch, reported)
        after = self._metadata.broker(broker.broker_id)
        assert after is not None
        response = BrokerHeartbeatResponse(ErrorCode.NONE, None, caught_up, after.fenced, should_shut_down)
        return self._finish(batch, response)

    def allocate_producer_ids(
        self, request: AllocateProducerIdsRequest, now_ms: int
    ) -> ControllerResult[AllocateProducerIdsResponse]:
        """The next block of producer ids, recorded before it is answered (Kafka's
        ProducerIdControlManager): a block is never given twice, across controller failovers too."""
        batch = self._begin(now_ms)
        broker = self._metadata.broker(request.broker_id)
        rejected = self._check_broker_epoch(broker, request.broker_id, request.broker_epoch)
        if rejected is not None:
            return self._finish(batch, AllocateProducerIdsResponse(rejected.code, rejected.message))
        start = self._metadata.next_producer_id
        if start > PRODUCER_ID_MAX - PRODUCER_ID_BLOCK_SIZE:
            return self._finish(batch, AllocateProducerIdsResponse(
                ErrorCode.UNKNOWN_SERVER_ERROR, f"producer ids are exhausted (next {start})"))
        batch.append(ProducerIds(request.broker_id, request.broker_epoch, start + PRODUCER_ID_BLOCK_SIZE))
        return self._finish(batch, AllocateProducerIdsResponse(ErrorCode.NONE, None, start, PRODUCER_ID_BLOCK_SIZE))

    def controlled_shutdown(
        self, request: ControlledShutdownRequest, now_ms: int
    ) -> ControllerResult[BrokerHeartbeatResponse]:
        """Move leadership away from a stopping broker (a heartbeat with `want_shutdown`). Repeat
        until `should_shut_down`: then it leads nothing and may stop."""
        heartbeat = BrokerHeartbeatRequest(
            request.broker_id, request.broker_epoch, request.current_metadata_offset, want_shutdown=True
        )
        return self.broker_heartbeat(heartbeat, now_ms)

    def _check_broker_epoch(
        self, broker: BrokerRegistration | None, broker_id: int, broker_epoch: int
    ) -> _Rejected | None:
        if broker is None:
            return _Rejected(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered; register it")
        if broker.broker_epoch != broker_epoch:
            return _Rejected(
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker {broker_id} has epoch {broker.broker_epoch}, the request says {broker_epoch}; "
                "this process is stale: re-register",
            )
        return None

    def _has_valid_session(self, broker: BrokerRegistration, now_ms: int) -> bool:
        """Kafka's `hasValidSession`: unfenced and heard from within the session timeout."""
        last_contact_ms = self._last_contact_ms.get(broker.broker_id, now_ms)
        return not broker.fenced and now_ms <= last_contact_ms + self._config.broker_session_timeout_ms

    def _record_log_ends(self, broker: BrokerRegistration, reports: tuple[ReplicaLogInfo, ...]) -> set[tuple[str, int]]:
        """Keep the reports that concern a replica of this broker in a partition that has no leader
        and an empty ISR and ELR, in its current leader epoch; return those partitions. Others are
        late (the partition moved on) and dropped."""
        kept: set[tuple[str, int]] = set()
        for report in reports:
            key = (report.topic_id, report.partition_index)
            state = self._metadata.partition(*key)
            if (
                state is None
                or broker.broker_id not in state.replicas
                or state.leader != NO_LEADER
                or state.isr
                or state.elr
                or report.current_leader_epoch != state.leader_epoch
            ):
                continue
            self._log_ends.setdefault(key, {})[broker.broker_id] = (broker.broker_epoch, report)
            kept.add(key)
        return kept

    def _recovery_leader(self, topic_id: str, index: int, state: PartitionRegistration,
                         acceptable: Callable[[int], bool], last_known_elr: tuple[int, ...]) -> int:
        """KIP-966's unclean recovery, Balanced: once every replica is acceptable and has reported
        in this leader epoch with its current broker epoch (NO_LEADER until then), the most complete
        log that surely contains the most complete last known ELR member's log (every replica's if
        the last known ELR is empty).

        The last known ELR members each held every acknowledged record until their unclean restart,
        so their logs are prefixes of one history (each lost at most an unflushed tail), and the
        longest by (last written leader epoch, log end offset), ties to replica order, is the best of
        them: call it B, with last written epoch E. A replica that left the ISR earlier, while the
        ISR still met min.insync.replicas, may hold acknowledged records that every member lost in
        its restart (replication sim seed 91: acknowledged with ISR (1, 2, 3); brokers 1 and 3 crashed
        and lost the unflushed tail [50, 55), 2 kept it; the controller fenced 1, 2 and 3 in turn, so
        only 3 went into the ELR, then into the last known ELR as it restarted): electing B would
        truncate them there. So every replica is waited for, and a replica leads instead of B when its
        log surely extends B's (`_surely_extends`): it holds batches of B's last written epoch E up to
        B's log end or beyond. Why that is sure: a leader epoch has one leader, which never truncates its
        own log in that epoch, and a replica holding a batch of epoch E fetched it with its log matching
        that leader's (truncation by leader epoch), so every log cut at the end of its batches of epoch E
        is a prefix of that leader's log in epoch E, and of two such prefixes the longer contains the
        shorter. So it holds what B holds, and whatever it holds beyond (later epochs too) sits on B's
        history. The reports carry each replica's leader-epoch cache for this: with only the last
        written epoch, a replica that had gone on to a later epoch after holding all of B's epoch E
        could not be told from a deposed leader whose unreplicated batches of a later epoch begin
        below B's end (seed 5000872: epoch-1 batches of a deposed leader over the epoch-0 records a
        later leader committed in epoch 2 without appending), and the former was passed over for a
        replica that held less (replication sim seed 731204935: broker 1, the last known ELR, kept
        [0, 10) of epoch 0 after its restart; broker 3 held [0, 17) of epoch 0 and led; broker 2 held
        epoch 0 to 26 and the acknowledged epoch-1 records [26, 45), which the election truncated).
        Of the replicas that extend B, one that extends every other leads; when none does (their
        histories part above B), the most complete by (last written epoch, log end offset).

        When B holds no record at all (every member was wiped, or crashed before anything was
        fsynced) nothing needs extending: every replica is a candidate, the same way (replication sim
        seed 1295: two empty members, while broker 1 held offsets 0-14, acknowledged, which their
        election truncated).

        Whatever the candidates, a log starting at offset s says that every offset below s was used:
        its records were deleted there (retention, DeleteRecords, or following a leader's
        logStartOffset) after they were committed, and the new leader must not write below s again.
        So a candidate whose log ends below the largest log start offset does not lead; if none is
        left, the replica with that log start leads, losing only what logStartOffset had deleted
        already (seed 731204823: the last known ELR was a wiped replica and one whose retention had
        deleted everything below 40; a replica that left the ISR earlier, its log ending at 30, led
        and wrote new records over the acknowledged offsets 30-39). The election hands that largest
        log start to the new leader (`PartitionRegistration.log_start_offset`), which raises its own
        to it: its records below may be a deposed leader's, never committed, over offsets whose
        committed records were deleted elsewhere (seed 435096169: broker 1 kept epoch-0 records
        [0, 18) it wrote as a deposed leader; the committed epoch-1 records [0, 4) were deleted by
        retention on broker 3, which alone had them; elected with its log start 0, broker 1 served
        offsets 0-3 again with other records). For the same reason records below
        that largest start count for nothing: they were deleted, and a replica shows them only
        because its logStartOffset checkpoint lagged a crash. Every report is read from that start
        (seed 435096042: DeleteRecords moved the start to 1; the last known ELR member kept only
        offset 0 through its crash, its epoch cache, truncated from the start, naming no epoch for
        it, so no replica "surely extended" it and it led, truncating the acknowledged [1, 4) that
        the other two held).

        Records a replica reports past its `may_be_committed_end_offset` only it ever held, and no
        leader counted them committed (a deposed leader's, never sent to a follower): they give way.
        The members are ranked without them; a candidate whose whole log extends every other
        candidate's leads first, then one whose log extends what every other may hold committed, and
        otherwise the ranking leaves them out too (replication sim seed 532003445: broker 2, deposed
        leader of epoch 1, appended [4, 6) after broker 3 was elected in epoch 2; broker 3 committed
        its epoch-0 records [4, 6), which broker 1 also held, and lost its log; by its later epoch
        broker 2 led and broker 1 truncated the committed records).

        Before any of this, each report is cut at its first record off the newest recorded epoch
        lineage (`_on_lineage`): a leader moves its HW only once its epoch's lineage is recorded
        (`replication.leader.Leader`), so every committed record lies on the history that lineage's
        leader continued, and a record off it was committed by no leader (replication sim seed
        2026113664: broker 2, deposed leader of epoch 1, appended epoch-1 records [0, 4) no follower
        fetched; broker 3 led epoch 2 from offset 20 after epoch 0, committed the epoch-0 records
        [0, 20), which broker 1 also held up to 17, and was wiped; broker 2 restarted, so it counted
        [0, 4) as maybe committed, and by its epoch it outranked broker 1).

        Waiting for every replica, not only the last known ELR as Kafka's Balanced mode does: the
        members' reports cannot say whether they lost anything, and a replica that is down may hold
        the only copies. When one never comes back, `unclean.leader.election.enable` elects anyway."""
        reports = self._log_end_reports(topic_id, index, state, acceptable)
        if reports is None:
            return NO_LEADER
        # Every offset below a log start offset was used, by records deleted there (committed).
        used_below = max(info.log_start_offset for info in reports.values())
        lineage = state.epoch_lineage
        ends = {replica: _on_lineage(replace(info, log_start_offset=used_below), lineage)
                for replica, info in reports.items()}
        shared = {replica: _may_be_committed(info) for replica, info in ends.items()}
        _, best = _most_complete(shared, last_known_elr or state.replicas)
        if _holds_records(shared[best]):
            candidates = tuple(replica for replica in state.replicas
                               if replica == best or _surely_extends(ends[replica], shared[best]))
        else:
            candidates = state.replicas
        keeping_offsets = tuple(replica for replica in candidates if ends[replica].log_end_offset >= used_below)
        if not keeping_offsets:
            return max(state.replicas, key=lambda replica: (reports[replica].log_start_offset,
                                                            reports[replica].log_end_offset,
                                                            -state.replicas.index(replica)))
        extending_all = tuple(replica for replica in keeping_offsets
                              if all(_surely_extends(ends[replica], ends[other]) for other in keeping_offsets))
        if extending_all:
            return _most_complete(ends, extending_all)[1]
        extending_shared = tuple(replica for replica in keeping_offsets
                                 if all(_surely_extends(ends[replica], shared[other]) for other in keeping_offsets))
        if extending_shared:
            return _most_complete(ends, extending_shared)[1]
        return _most_complete(shared, keeping_offsets)[1]

    def _log_end_reports(self, topic_id: str, index: int, state: PartitionRegistration,
                         acceptable: Callable[[int], bool]) -> dict[int, ReplicaLogInfo] | None:
        """Every replica's report; None until every replica is acceptable and has reported in this
        leader epoch with its current broker epoch."""
        reports = self._log_ends.get((topic_id, index), {})
        ends: dict[int, ReplicaLogInfo] = {}
        for replica in state.replicas:
            broker = self._metadata.broker(replica)
            entry = reports.get(replica)
            if broker is None or not acceptable(replica) or entry is None:
                return None
            broker_epoch, report = entry
            if broker_epoch != broker.broker_epoch or report.current_leader_epoch != state.leader_epoch:
                return None
            ends[replica] = report
        return ends

    def _unfence(self, batch: _Batch, broker: BrokerRegistration) -> None:
        batch.append(UnfenceBroker(broker.broker_id, broker.broker_epoch))
        self._controlled_shutdown_offset.pop(broker.broker_id, None)
        self._elect_offline_leaders(batch, None)

    def _fence(self, batch: _Batch, broker: BrokerRegistration) -> None:
        """Leave ISRs and leaderships first, then fence: after every record a fenced broker leads nothing."""
        self._remove_broker(batch, broker.broker_id, unclean=False)
        batch.append(FenceBroker(broker.broker_id, broker.broker_epoch))
        self._controlled_shutdown_offset.pop(broker.broker_id, None)

    def _begin_controlled_shutdown(self, batch: _Batch, broker: BrokerRegistration) -> None:
        self._remove_broker(batch, broker.broker_id, unclean=False)
        offset = batch.append(BrokerRegistrationChange(broker.broker_id, broker.broker_epoch, True))
        self._controlled_shutdown_offset[broker.broker_id] = offset

    def _leads_anything(self, broker_id: int) -> bool:
        return any(state.leader == broker_id for _, _, state in self._metadata.all_partitions())

    # ---- AlterPartition ------------------------------------------------------------------------

    def alter_partition(self, request: AlterPartitionRequest, now_ms: int) -> ControllerResult[AlterPartitionResponse]:
        """A partition leader's ISR change, checked like KRaft's `validateAlterPartitionData`."""
        batch = self._begin(now_ms)
        rejected = self._check_broker_epoch(
            self._metadata.broker(request.broker_id), request.broker_id, request.broker_epoch
        )
        if rejected is not None:
            return self._finish(batch, AlterPartitionResponse(rejected.code, rejected.message))
        results: list[AlterPartitionResult] = []
        for data in request.partitions:
            try:
                state = self._alter_partition(request.broker_id, data, batch)
            except _Rejected as error:
                if error.state is None:
                    results.append(
                        AlterPartitionResult(data.topic_id, data.partition_index, error.code, error.message)
                    )
                else:
                    results.append(
                        AlterPartitionResult(
                            data.topic_id, data.partition_index, error.code, error.message, error.state.leader,
                            error.state.leader_epoch, error.state.isr, error.state.partition_epoch,
                        )
                    )
                continue
            results.append(
                AlterPartitionResult(
                    data.topic_id,
                    data.partition_index,
                    ErrorCode.NONE,
                    None,
                    state.leader,
                    state.leader_epoch,
                    state.isr,
                    state.partition_epoch,
                )
            )
        return self._finish(batch, AlterPartitionResponse(ErrorCode.NONE, None, tuple(results)))

    def _alter_partition(self, broker_id: int, data: AlterPartitionData, batch: _Batch) -> PartitionRegistration:
        """The partition's state after the leader's ISR change (the ELR follows it), or `_Rejected`."""
        where = f"{self._metadata.topic_name(data.topic_id)}-{data.partition_index}"
        if self._metadata.topic_name(data.topic_id) is None:
            raise _Rejected(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {data.topic_id}")
        state = self._metadata.partition(data.topic_id, data.partition_index)
        if state is None:
            raise _Rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {where} does not exist")
        _check_alter_partition_epochs(broker_id, data, state, where)
        new_isr = tuple(replica for replica in state.replicas if replica in data.new_isr)
        if len(new_isr) != len(data.new_isr) or len(set(data.new_isr)) != len(data.new_isr):
            raise _Rejected(
                ErrorCode.INVALID_REQUEST,
                f"{where}: ISR {list(data.new_isr)} repeats a broker or is not within replicas {list(state.replicas)}",
            )
        if state.leader not in new_isr:
            raise _Rejected(
                ErrorCode.INVALID_REQUEST, f"{where}: ISR {list(data.new_isr)} must include leader {state.leader}"
            )
        lineage = _lineage_to_record(data, state, where)
        if lineage is not None:
            if set(new_isr) != set(state.isr):
                raise _Rejected(ErrorCode.INVALID_REQUEST, f"{where}: an epoch lineage comes with the ISR unchanged")
            batch.append(PartitionChange(data.topic_id, data.partition_index, epoch_lineage=lineage.as_record()))
            after = self._metadata.partition(data.topic_id, data.partition_index)
            assert after is not None
            return after
        try:
            self._check_isr_eligible(data, where)
        except _Rejected as refused:
            if refused.code != ErrorCode.INELIGIBLE_REPLICA:
                raise
            # Fence every copy of this request (module docstring, "Stale AlterPartition").
            batch.append(PartitionChange(data.topic_id, data.partition_index, isr=state.isr))
            refused.state = self._metadata.partition(data.topic_id, data.partition_index)
            raise
        change = self._partition_change(data.topic_id, data.partition_index, state, target_isr=new_isr)
        if change is not None:
            assert change.leader is None, f"{where}: an ISR change from leader {state.leader} moved it: {change}"
            batch.append(change)
        after = self._metadata.partition(data.topic_id, data.partition_index)
        assert after is not None
        return after

    def _check_isr_eligible(self, data: AlterPartitionData, where: str) -> None:
        """KIP-841/903: every ISR member must be registered, unfenced, not shutting down, and (when
        the leader gives one) at the broker epoch the leader saw it fetch with."""
        epochs = data.new_isr_broker_epochs
        if epochs is not None and len(epochs) != len(data.new_isr):
            raise _Rejected(
                ErrorCode.INVALID_REQUEST, f"{where}: {len(epochs)} broker epochs for {len(data.new_isr)} ISR members"
            )
        for position, replica in enumerate(data.new_isr):
            broker = self._metadata.broker(replica)
            reason = None
            if broker is None:
                reason = "is not registered"
            elif broker.fenced:
                reason = "is fenced"
            elif broker.in_controlled_shutdown:
                reason = "is shutting down"
            elif epochs is not None and epochs[position] != NO_VALUE and epochs[position] != broker.broker_epoch:
                reason = f"has broker epoch {broker.broker_epoch}, not {epochs[position]}"
            if reason is not None:
                raise _Rejected(
                    ErrorCode.INELIGIBLE_REPLICA,
                    f"{where}: broker {replica} {reason} and cannot join the ISR; retry when it is back",
                )

    # ---- fast fencing of dead brokers (README, "Failover after kill -9") -------------------------------------

    def broker_probes(self) -> tuple[BrokerProbe, ...]:
        """A probe of every unfenced broker's inter-broker listener, for the owner to run now (the
        owner's probe cadence bounds how soon a dead broker is fenced)."""
        listener = self._config.probe_listener_name
        if listener is None:
            return ()
        return tuple(
            BrokerProbe(broker.broker_id, broker.broker_epoch, broker.endpoints[listener])
            for broker in self._metadata.brokers()
            if not broker.fenced and listener in broker.endpoints
        )

    def connection_refused(self, refused: BrokerConnectionRefused, now_ms: int) -> ControllerResult[TickResponse]:
        """Fence a broker at once when this controller's own probe, begun after the broker's last
        heartbeat reached it, found nothing listening at its current epoch's address: the process
        that holds that epoch opened the listener before registering and closes it only to stop,
        so it is gone or going, and can neither acknowledge nor make a follower truncate again
        (README, "Failover after kill -9"). Anything older or of another epoch proves nothing and is ignored."""
        batch = self._begin(now_ms)
        broker = self._metadata.broker(refused.broker_id)
        last_contact_ms = self._last_contact_ms.get(refused.broker_id)
        if (
            broker is None
            or broker.fenced
            or broker.broker_epoch != refused.broker_epoch
            or last_contact_ms is None
            or refused.attempted_ms <= last_contact_ms
        ):
            return self._finish(batch, TickResponse())
        assert refused.attempted_ms <= now_ms, f"attempted_ms={refused.attempted_ms} now_ms={now_ms}"
        self._fence(batch, broker)
        elected = self._elect_offline_leaders(batch, None)
        return self._finish(batch, TickResponse((broker.broker_id,), tuple(elected)))

    # ---- periodic work -------------------------------------------------------------------------

    def tick(self, now_ms: int) -> ControllerResult[TickResponse]:
        """Fence every broker silent for longer than the session timeout, then elect leaders for
        offline partitions where that became possible."""
        batch = self._begin(now_ms)
        fenced: list[int] = []
        for broker in self._metadata.brokers():
            if broker.fenced:
                continue
            last_contact_ms = self._last_contact_ms.get(broker.broker_id)
            assert last_contact_ms is not None, f"unfenced broker {broker.broker_id} has no heartbeat time"
            if last_contact_ms + self._config.broker_session_timeout_ms < now_ms:
                self._fence(batch, broker)
                fenced.append(broker.broker_id)
        elected = self._elect_offline_leaders(batch, None)
        return self._finish(batch, TickResponse(tuple(fenced), tuple(elected)))

    # ---- leader and ISR changes ----------------------------------------------------------------

    def _remove_broker(self, batch: _Batch, broker_id: int, unclean: bool) -> int:
        """Take `broker_id` out of every ISR and away from every leadership; with `unclean` (it
        restarted without a clean shutdown, or lost a log dir) out of every ELR too. Returns how
        many partitions changed."""
        involved = [
            (topic_id, index, state)
            for topic_id, index, state in self._metadata.all_partitions()
            if broker_id in state.isr or (unclean and broker_id in state.elr)
        ]
        changed = 0
        for topic_id, index, state in involved:
            change = self._partition_change(
                topic_id, index, state,
                target_isr=tuple(replica for replica in state.isr if replica != broker_id),
                removing=broker_id,
                unclean_shutdown=(broker_id,) if unclean else (),
            )
            if change is not None:
                batch.append(change)
                changed += 1
        assert not self._leads_anything(broker_id), f"broker {broker_id} still leads after removal"
        return changed

    def _elect_offline_leaders(self, batch: _Batch, only: set[tuple[str, int]] | None) -> list[tuple[str, int]]:
        """Elect leaders for offline partitions (those in `only`, or all) where one is now eligible."""
        elected: list[tuple[str, int]] = []
        for topic_id, index in self._metadata.leaderless_partitions():
            if only is not None and (topic_id, index) not in only:
                continue
            state = self._metadata.partition(topic_id, index)
            assert state is not None
            change = self._partition_change(topic_id, index, state)
            if change is not None:
                batch.append(change)
                if change.leader is not None:
                    elected.append((topic_id, index))
                    self._log_ends.pop((topic_id, index), None)
        return elected

    def _refresh_partitions(self, batch: _Batch, topic_id: str) -> None:
        """Re-apply the rules to every partition of the topic (after its configs changed)."""
        for index, state in enumerate(self._metadata.partitions(topic_id)):
            change = self._partition_change(topic_id, index, state)
            if change is not None:
                batch.append(change)

    def _partition_change(
        self,
        topic_id: str,
        index: int,
        state: PartitionRegistration,
        target_isr: tuple[int, ...] | None = None,
        removing: int | None = None,
        unclean_shutdown: tuple[int, ...] = (),
    ) -> PartitionChange | None:
        """`partition_change` for this partition under its topic's configs: `removing` is not an
        acceptable leader, `target_isr` defaults to the current ISR."""

        def acceptable(replica: int) -> bool:
            return replica != removing and self._is_active(replica)

        config = self._topic_config(topic_id)
        change = partition_change(
            topic_id,
            index,
            state,
            state.isr if target_isr is None else target_isr,
            min(config.min_insync_replicas, len(state.replicas)),
            acceptable,
            unclean_shutdown,
            config.unclean_leader_election_enable,
            lambda last_known_elr: self._recovery_leader(topic_id, index, state, acceptable, last_known_elr),
        )
        if change is None or change.leader in (None, NO_LEADER) or state.isr or state.elr:
            return change
        # An election from an empty ISR and ELR: the new leader starts its log no lower than any
        # replica reported (the offsets below were used; see `_recovery_leader`).
        reports = self._log_end_reports(topic_id, index, state, acceptable)
        used_below = max((info.log_start_offset for info in (reports or {}).values()), default=0)
        return replace(change, log_start_offset=used_below) if used_below > 0 else change

    def _topic_config(self, topic_id: str) -> LogConfig:
        """The topic's effective config: its overrides over the broker-level defaults (the leaders'
        resolution, so that both sides agree on min.insync.replicas)."""
        name = self._metadata.topic_name(topic_id)
        assert name is not None, f"unknown topic id {topic_id}"
        return LogConfig.from_properties(self._metadata.topic_configs(name), base=self._config.topic_defaults)

    def _is_active(self, broker_id: int) -> bool:
        broker = self._metadata.broker(broker_id)
        return broker is not None and broker.active

    def _usable_brokers(self) -> list[UsableBroker]:
        return [UsableBroker(broker.broker_id, broker.rack) for broker in self._metadata.brokers() if broker.active]


# ---- leaf checks ---------------------------------------------------------------------------------


def _most_complete(ends: Mapping[int, ReplicaLogInfo], candidates: tuple[int, ...]) -> tuple[tuple[int, int], int]:
    """((last written epoch, log end offset), replica) of the largest candidate, ties to replica order."""
    def rank(replica: int) -> tuple[int, int]:
        return ends[replica].last_written_leader_epoch, ends[replica].log_end_offset

    best = max(candidates, key=lambda replica: (rank(replica), -candidates.index(replica)))
    return rank(best), best


def _may_be_committed(info: ReplicaLogInfo) -> ReplicaLogInfo:
    """The report cut where its records stop being possibly committed: past that end only this
    replica ever held them (`ReplicaLogInfo.may_be_committed_end_offset`)."""
    return _cut(info, info.may_be_committed_end_offset)


def _on_lineage(info: ReplicaLogInfo, lineage: EpochLineage | None) -> ReplicaLogInfo:
    """The report cut at its first record off the history `lineage` continues: a record of an epoch
    above the lineage's (a later leader's, who never moved its HW), of an epoch between the lineage's
    previous epoch and its own (no such epoch is in that history), or of an earlier epoch at or above
    the lineage's start offset (the lineage's leader wrote its own epoch there). No leader committed
    such a record (`QuorumController._recovery_leader`), and every later record of the same log is
    off that history too: a log matches each leader's whose records it holds up to their end. A
    report without its leader-epoch cache (an older broker) names no epoch per offset: left whole."""
    if lineage is None or not info.epoch_start_offsets:
        return info
    for epoch, first, end in _epoch_ranges(info):
        if epoch == lineage.leader_epoch:
            continue
        if epoch > lineage.previous_epoch:  # and not the lineage's own epoch
            return _cut(info, first)
        if end > lineage.start_offset:
            return _cut(info, max(first, lineage.start_offset))
    return info


def _cut(info: ReplicaLogInfo, end: int) -> ReplicaLogInfo:
    """The report as if its log ended at `end` (not below its log start; unchanged when `end` is
    negative or not below its log end)."""
    if end < 0 or end >= info.log_end_offset or info.log_start_offset >= info.log_end_offset:
        return info
    end = max(end, info.log_start_offset)
    if not info.epoch_start_offsets:
        return replace(info, log_end_offset=end)
    entries = tuple(entry for entry in info.epoch_start_offsets if entry[1] < end)
    return replace(info, log_end_offset=end, epoch_start_offsets=entries,
                   last_written_leader_epoch=entries[-1][0] if entries else NO_VALUE)


def _holds_records(info: ReplicaLogInfo) -> bool:
    return info.log_end_offset > info.log_start_offset


def _epoch_ranges(info: ReplicaLogInfo) -> list[tuple[int, int, int]]:
    """(epoch, first offset, end offset) of each epoch that has records in the replica's log, oldest
    first, from its leader-epoch cache (an epoch ends where the next starts, the last at the log end;
    an entry a leader made at its election and never wrote after holds nothing). A report without
    the cache (an older broker) is read as one range of its last written epoch."""
    if not info.epoch_start_offsets:
        if info.last_written_leader_epoch < 0 or not _holds_records(info):
            return []
        return [(info.last_written_leader_epoch, info.log_start_offset, info.log_end_offset)]
    ranges = []
    entries = info.epoch_start_offsets
    for position, (epoch, start) in enumerate(entries):
        end = entries[position + 1][1] if position + 1 < len(entries) else info.log_end_offset
        first = max(start, info.log_start_offset)
        if first < end:
            ranges.append((epoch, first, end))
    return ranges


def _surely_extends(log: ReplicaLogInfo, other: ReplicaLogInfo) -> bool:
    """Does `log` surely hold every record `other` holds, on the same history? Yes when `other` holds
    none, or when `log` holds batches of `other`'s last epoch with records up to `other`'s log end or
    beyond: both logs, cut at the end of that epoch's batches, are prefixes of the one log its leader
    wrote (`QuorumController._recovery_leader`)."""
    other_ranges = _epoch_ranges(other)
    if not other_ranges:
        return not _holds_records(other)
    last_epoch, _, other_end = other_ranges[-1]
    return any(epoch == last_epoch and end >= other_end for epoch, _, end in _epoch_ranges(log))


def _lineage_to_record(data: AlterPartitionData, state: PartitionRegistration, where: str) -> EpochLineage | None:
    """The leader's epoch lineage if the controller has yet to record it; `_Rejected` if it cannot be
    the current leader's (the epochs were checked already). A copy of an answered request finds it
    recorded and changes nothing more than a repeated ISR does."""
    lineage = data.epoch_lineage
    if lineage is None:
        return None
    if (lineage.leader_epoch != state.leader_epoch or not -1 <= lineage.previous_epoch < lineage.leader_epoch
            or lineage.start_offset < 0):
        raise _Rejected(ErrorCode.INVALID_REQUEST, f"{where}: {lineage} is not a lineage of leader epoch "
                        f"{state.leader_epoch}: it names that epoch, an earlier one and an offset >= 0")
    if state.epoch_lineage is not None and state.epoch_lineage.leader_epoch == lineage.leader_epoch:
        if state.epoch_lineage != lineage:
            raise _Rejected(ErrorCode.INVALID_REQUEST,
                            f"{where}: leader epoch {lineage.leader_epoch} already has lineage {state.epoch_lineage}")
        return None
    return lineage


def _registration_error(request: BrokerRegistrationRequest) -> _Rejected | None:
    if request.broker_id < 0:
        return _Rejected(ErrorCode.INVALID_REQUEST, f"broker id {request.broker_id} is negative; set node.id >= 0")
    if not request.incarnation_id:
        return _Rejected(ErrorCode.INVALID_REQUEST, "incarnation_id is empty; draw a fresh one at process start")
    if not request.endpoints:
        return _Rejected(ErrorCode.INVALID_REQUEST, f"broker {request.broker_id} gave no endpoints; set listeners")
    for listener, address in request.endpoints.items():
        host, _, port = str(address).rpartition(":")
        if not listener or not host or not port.isdigit() or not 0 < int(port) < 65536:
            return _Rejected(
                ErrorCode.INVALID_REQUEST,
                f"endpoint {listener}={address!r} of broker {request.broker_id} is not host:port",
            )
    return None


def _unclean_shutdown_reason(existing: BrokerRegistration, request: BrokerRegistrationRequest) -> str | None:
    """Why a re-registration counts as unclean (KIP-966, KIP-858), or None if it is clean."""
    broker_id = request.broker_id
    gone = [directory for directory in existing.log_dirs if directory not in request.log_dirs]
    if gone:
        new = [directory for directory in request.log_dirs if directory not in existing.log_dirs]
        return (f"broker {broker_id}'s log dir {', '.join(new) or '(none)'} is new and {', '.join(gone)} is gone: "
                "its storage was wiped or replaced, so its replicas hold nothing they may lead with")
    if request.previous_broker_epoch != existing.broker_epoch:
        previous = "none" if request.previous_broker_epoch == NO_VALUE else request.previous_broker_epoch
        return (f"broker {broker_id} restarted without a clean shutdown (its clean-shutdown marker names broker "
                f"epoch {previous}, the registration on record is {existing.broker_epoch}): it may have lost "
                "unflushed records")
    return None


def _log_info_error(reports: tuple[ReplicaLogInfo, ...]) -> _Rejected | None:
    for report in reports:
        if report.log_end_offset < 0 or report.last_written_leader_epoch < NO_VALUE or report.current_leader_epoch < 0:
            return _Rejected(
                ErrorCode.INVALID_REQUEST,
                f"replica log info {report} has a negative offset or epoch; it must come from the replica's log",
            )
        entries = report.epoch_start_offsets
        committed_end = report.may_be_committed_end_offset
        if (
            not 0 <= report.log_start_offset <= report.log_end_offset
            or not (committed_end == NO_VALUE or report.log_start_offset <= committed_end <= report.log_end_offset)
            or any(epoch < 0 or start < 0 for epoch, start in entries)
            or any(earlier[0] >= later[0] or earlier[1] >= later[1] for earlier, later in itertools.pairwise(entries))
        ):
            return _Rejected(
                ErrorCode.INVALID_REQUEST,
                f"replica log info {report}: the log start offset must lie in [0, log end offset] and the leader "
                "epochs and their start offsets must be non-negative and increase; it must come from the replica's log",
            )
    return None


def _check_alter_partition_epochs(
    broker_id: int, data: AlterPartitionData, state: PartitionRegistration, where: str
) -> None:
    """KRaft's order: epochs from the future mean this controller is behind (NOT_CONTROLLER); an
    old leader epoch is a deposed leader (FENCED_LEADER_EPOCH); an old partition epoch is a
    leader that missed a change (INVALID_UPDATE_VERSION)."""
    if data.leader_epoch > state.leader_epoch or data.partition_epoch > state.partition_epoch:
        raise _Rejected(
            ErrorCode.NOT_CONTROLLER,
            f"{where}: request epochs ({data.leader_epoch}, {data.partition_epoch}) are ahead of "
            f"({state.leader_epoch}, {state.partition_epoch}); find the active controller",
        )
    if data.leader_epoch < state.leader_epoch:
        raise _Rejected(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"{where}: leader epoch {data.leader_epoch} is older than {state.leader_epoch}; refresh metadata",
        )
    if broker_id != state.leader:
        raise _Rejected(ErrorCode.INVALID_REQUEST, f"{where}: broker {broker_id} is not the leader ({state.leader})")
    if data.partition_epoch < state.partition_epoch:
        raise _Rejected(
            ErrorCode.INVALID_UPDATE_VERSION,
            f"{where}: partition epoch {data.partition_epoch} is older than {state.partition_epoch}; "
            "refresh metadata and propose again",
        )


def _config_strings(configs: Mapping[str, Any]) -> dict[str, str]:
    """Config values as Kafka stores them: strings (booleans lower case)."""
    out: dict[str, str] = {}
    for key, value in configs.items():
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            out[key] = str(value)
        else:
            raise _Rejected(ErrorCode.INVALID_CONFIG, f"{key}={value!r}: a config value must be a string")
    return out


def _check_topic_configs(configs: Mapping[str, str], replication_factor: int | None) -> None:
    """Every key known and every value in range (`LogConfig.from_properties`), and
    min.insync.replicas <= replication factor. Kafka accepts the latter and then fails every
    acks=all produce with NOT_ENOUGH_REPLICAS; we refuse it up front, where the fix is obvious."""
    try:
        config = LogConfig.from_properties(configs)
    except InvalidConfigError as error:
        raise _Rejected(ErrorCode.INVALID_CONFIG, str(error)) from None
    if replication_factor is not None and config.min_insync_replicas > replication_factor:
        raise _Rejected(
            ErrorCode.INVALID_CONFIG,
            f"{MIN_INSYNC_REPLICAS}={config.min_insync_replicas} exceeds the replication factor {replication_factor}; "
            "acks=all writes could never succeed",
        )


def _apply_config_ops(current: Mapping[str, str], ops: tuple[AlterableConfig, ...]) -> dict[str, str]:
    """The configs after `ops` (Kafka's incremental semantics), or `_Rejected`."""
    counts = Counter(op.name for op in ops)
    updated = dict(current)
    defaults = LogConfig().to_properties()
    for op in ops:
        if counts[op.name] > 1:
            raise _Rejected(ErrorCode.INVALID_REQUEST, f"config {op.name} is altered twice in one request")
        if op.op == AlterConfigOp.DELETE:
            updated.pop(op.name, None)
            continue
        if op.value is None:
            raise _Rejected(ErrorCode.INVALID_CONFIG, f"{op.op.name} of {op.name} needs a value")
        value = _config_strings({op.name: op.value})[op.name]
        if op.op == AlterConfigOp.SET:
            updated[op.name] = value
            continue
        if op.name not in _LIST_CONFIGS:
            raise _Rejected(ErrorCode.INVALID_CONFIG, f"{op.op.name} applies to list configs only, not {op.name}")
        items = [item.strip() for item in updated.get(op.name, defaults.get(op.name, "")).split(",") if item.strip()]
        given = [item.strip() for item in value.split(",") if item.strip()]
        if op.op == AlterConfigOp.APPEND:
            items += [item for item in given if item not in items]
        else:
            items = [item for item in items if item not in given]
        updated[op.name] = ",".join(items)
    return updated


_HANDLERS: dict[type, Callable[[QuorumController, Any, int], ControllerResult[Any]]] = {
    CreateTopicsRequest: QuorumController.create_topics,
    CreatePartitionsRequest: QuorumController.create_partitions,
    DeleteTopicsRequest: QuorumController.delete_topics,
    IncrementalAlterConfigsRequest: QuorumController.incremental_alter_configs,
    BrokerRegistrationRequest: QuorumController.register_broker,
    BrokerHeartbeatRequest: QuorumController.broker_heartbeat,
    ControlledShutdownRequest: QuorumController.controlled_shutdown,
    AlterPartitionRequest: QuorumController.alter_partition,
    AllocateProducerIdsRequest: QuorumController.allocate_producer_ids,
    ControllerTick: lambda controller, request, now_ms: controller.tick(now_ms),
    BrokerConnectionRefused: QuorumController.connection_refused,
}
