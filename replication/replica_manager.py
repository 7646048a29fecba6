"""ReplicaManager: the broker core — every partition this broker hosts, kept in step with the metadata.

Theory of operation
-------------------
Kafka's ReplicaManager (applyDelta, appendRecords, fetchMessages, the fetcher manager, the
AlterPartition manager) as one deterministic state machine: every input goes through
`handle(event, now_ms, wall_clock_ms)` and the answer is a `BrokerReady` (broker_ready.py says what
the owner does with it, in which order). It opens, creates and deletes logs through the node's
`LogManager` (synchronous storage, one owner), reads no clock, opens no socket, draws no random
number. `node/` and the simulator drive the very same object.

Metadata (`MetadataChanged`, Kafka's ReplicaManager.applyDelta), applied only once it includes this
broker's own registration: every partition whose replicas include this broker gets a `Partition`
core, stepped with `MakeLeader` or `MakeFollower` whenever its (leader_epoch, partition_epoch)
changed. A hosted partition that left the metadata (topic deleted), no longer lists this broker, or
belongs to an older topic of the same name is stopped and its log deleted; so is a log on disk that
no partition here owns (a stray, left by a deletion while the broker was down), and one whose
`partition.metadata` names another topic id (KIP-516). Strays go before any partition is applied,
so a new topic never opens an old topic's log. Topic config changes reach the open logs.
The partitions are then applied in name order, a bounded number per call
(`metadata_partitions_per_call`, of which `metadata_log_creations_per_call` create their log): the
rest waits for the Tick the broker asks for at once, so that its owner serves other events in
between (creating a log fsyncs files; 250 new partitions at once held a node's event loop for
seconds). A failover's steps of open logs are cheaper and go 200 a call: two a call, each node's
~2,700 steps of a failover at 2,000 partitions per node (new leaders, the dead broker out of every
ISR, each new leader's lineage) took ~1 s. A client request for a partition still waiting applies
its step first (`_apply_ahead`). Newer metadata queues, after those still waiting, only
the partitions whose state it changed (as Kafka applies a delta), unless a replica's broker epoch
changed, which restarts the pass from the first partition: a failover's many small changes (each
new leader's epoch lineage) would otherwise keep restarting it, and the partitions last in name
order would wait for the metadata to go quiet. The broker is caught up once no partition of the
last metadata waits; until then a partition not applied yet is refused as not hosted here.

Requests (`ClientRequest`): each part goes to its partition's core with a fresh partition request
id; the request is answered once every part is (an acks=all produce when the HW passes it). A part
for a partition the metadata does not know is UNKNOWN_TOPIC_OR_PARTITION; one this broker does not
host, NOT_LEADER_OR_FOLLOWER with the current leader. A Fetch is read at once over all its
partitions and answered or parked (delayed_fetch.py); a parked fetch is re-read when a partition it
reads changed in a step (log, HW, role, epoch; a follower's not for a HW move alone) and answered at
its deadline whatever it holds.
KIP-392: a consumer that names its rack may be sent to a replica in it (replica_selector.py).

Replication: the cores say whom to follow and when to back off; `ReplicaFetchers` (fetch_session.py)
keeps one session per leader with at most one fetch in flight, built from the cores' positions when
sent; each partition's answer goes back to its core. The leaders' AlterPartition proposals go out
as `AlterPartitionSend` and their answers back to the proposing core. `offline_log_ends` gives the
heartbeat the log ends of replicas whose partition has no leader and an empty ISR and ELR (KIP-966).

Time: `now_ms` is monotonic (timeouts, deadlines, backoffs); `wall_clock_ms` only reaches storage
(record and segment timestamps, retention). Partition cores want ticks (`Ready.next_tick_ms`); the
broker ticks those that are due on every call and asks its owner for the earliest next one.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import deque
from collections.abc import Callable, Iterator

from replication.broker_events import (
    AlterPartitionAnswer,
    ClientRequest,
    LeaseChanged,
    MetadataChanged,
    ReplicaFetchAnswer,
    Shutdown,
)
from replication.broker_ready import (
    NO_PREFERRED_READ_REPLICA,
    AlterPartitionSend,
    BrokerReady,
    ClientAnswer,
    DeletedLog,
    LeaderIdAndEpoch,
    PartAnswer,
    PartitionStep,
    ReplicaFetchSend,
    ReplicaLogEnd,
)
from replication.config import ReplicaManagerConfig
from replication.delayed_fetch import FetchPurgatory, ParkedFetch, is_answerable
from replication.events import (
    AlterPartitionResponse,
    ConsumerFetch,
    Event,
    FetchResponseFromLeader,
    FollowerFetch,
    MakeFollower,
    MakeLeader,
    PartitionRequest,
    ProduceRequest,
    RunRetention,
    StopReplica,
    Tick,
    UpdateBrokerEpochs,
    error_result,
)
from replication.fetch_session import FINAL_EPOCH, FetchSession, InFlightFetch, ReplicaFetchers
from replication.lease import BrokerLease
from replication.metadata_view import MetadataView, PartitionStateView
from replication.partition import Partition
from replication.ready import AlterPartitionProposal, Completion, FetchResult, FollowerFetchPosition, Ready, Role
from replication.replica_selector import preferred_read_replica
from replication.replica_sessions import REFRESH_WINDOW_FRACTION, ReplicaSession, ReplicaSessionCache
from replication.replica_state import NO_BROKER_EPOCH
from storage.log_manager import LogManager
from wire.error_codes import ErrorCode
from wire.sentinels import NO_EPOCH, NO_LEADER
from wire.topic_partition import TopicPartition

_SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH})
_CURRENT_LEADER_ERRORS = frozenset(
    {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH}
)
ALTER_PARTITION_IN_FLIGHT_MAX = 10_000  # a proposal's answer lost in transit is forgotten past this


@dataclasses.dataclass(slots=True)
class HostedPartition:
    """A partition core with what the broker keeps beside it: the topic id it was made for (a topic
    deleted and created again under the same name is a new host), the (leader_epoch,
    partition_epoch) and the replicas' broker epochs last stepped into it, so unchanged metadata is
    not stepped again."""

    partition: Partition
    topic_id: str
    applied: tuple[int, int] | None = None
    broker_epochs: tuple[tuple[int, int], ...] | None = None
    tick_at_ms: int | None = None


@dataclasses.dataclass(slots=True)
class PendingRequest:
    """A client request some of whose parts wait (acks=all produces, DeleteRecords)."""

    request: ClientRequest
    parts: list[PartAnswer | None]
    remaining: int


@dataclasses.dataclass(slots=True)
class _Outbox:
    """The outputs of one `handle` call, collected as it runs."""

    steps: list[PartitionStep] = dataclasses.field(default_factory=list)
    alter_partitions: list[AlterPartitionSend] = dataclasses.field(default_factory=list)
    answers: list[ClientAnswer] = dataclasses.field(default_factory=list)
    fetches: list[ReplicaFetchSend] = dataclasses.field(default_factory=list)
    deleted_logs: list[DeletedLog] = dataclasses.field(default_factory=list)
    changed: set[TopicPartition] = dataclasses.field(default_factory=set)
    changed_for_followers: set[TopicPartition] = dataclasses.field(default_factory=set)  # not by a HW move alone
    isr_changed: set[TopicPartition] = dataclasses.field(default_factory=set)
    log_dir_failure: str | None = None


class ReplicaManager:
    """The partitions of one broker (see the module docstring). One owner, no locks."""

    def __init__(self, config: ReplicaManagerConfig, log_manager: LogManager, now_ms: int) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.log_manager = log_manager
        self.hosted: dict[TopicPartition, HostedPartition] = {}
        self.metadata: MetadataView | None = None
        self.broker_epoch = -1
        self.caught_up = False
        self.lease = BrokerLease()
        self.stopped = False
        self.now_ms = now_ms
        self.wall_clock_ms = 0
        self.fetchers = ReplicaFetchers()
        self.purgatory = FetchPurgatory(config.replication.delayed_fetch_max)
        self.replica_sessions = ReplicaSessionCache(
            config.replication.replica_lag_time_max_ms // REFRESH_WINDOW_FRACTION)
        self._pending: dict[int, PendingRequest] = {}
        self._part_of: dict[int, tuple[int, int]] = {}  # partition request id -> (request id, part index)
        self._alter_in_flight: dict[int, tuple[TopicPartition, HostedPartition, AlterPartitionProposal, int]] = {}
        self._topic_configs: dict[str, dict[str, str]] = {}
        # The partitions the last metadata assigns here, and those of them not applied yet, in order;
        # the broker epoch of each of their replicas.
        self._wanted: dict[TopicPartition, tuple[str, PartitionStateView]] = {}
        self._unapplied: deque[TopicPartition] = deque()
        self._strays_removed = False  # by a pass over the current registration's metadata
        self._replica_broker_epochs: dict[int, int] = {}
        self._names: dict[tuple[str, int], TopicPartition] = {}
        self._ticks: list[tuple[int, TopicPartition]] = []  # heap; stale entries skipped
        self._next_id = 0

    # -- the entry point ---------------------------------------------------------------------------

    def handle(self, event: object, now_ms: int, wall_clock_ms: int) -> BrokerReady:
        """Apply one event at monotonic time `now_ms` (wall clock `wall_clock_ms`, for storage)."""
        assert now_ms >= self.now_ms, f"time went back: {now_ms} < {self.now_ms} on broker {self.broker_id}"
        self.now_ms = now_ms
        self.wall_clock_ms = wall_clock_ms
        out = _Outbox()
        if isinstance(event, ClientRequest):
            self._on_client_request(event, out)
        elif isinstance(event, MetadataChanged):
            self._on_metadata(event, out)
        elif isinstance(event, LeaseChanged):
            self.lease.until_ms = event.until_ms
        elif isinstance(event, ReplicaFetchAnswer):
            self._on_replica_fetch_answer(event, out)
        elif isinstance(event, AlterPartitionAnswer):
            self._on_alter_partition_answer(event, out)
        elif isinstance(event, RunRetention):
            self._on_run_retention(out)
        elif isinstance(event, Shutdown):
            self._on_shutdown(out)
        else:
            assert isinstance(event, Tick), f"not a broker event: {event!r}"
            if self._unapplied and not self.stopped:
                self._apply_metadata_chunk(out)
        if not self.stopped and out.log_dir_failure is None:
            # An ISR may have changed: follower sessions read the partition at their next fetch
            # (waking parked fetches for it would turn each refused ISR expansion into a loop).
            self.replica_sessions.mark_changed(out.isr_changed)
            self._tick_due_partitions(out)
            self._expire_fetches(out)
            self._settle_fetches(out)
            self._send_fetches(out)
        self._check_invariants()
        return BrokerReady(
            caught_up=self.caught_up,
            steps=tuple(out.steps),
            alter_partitions=tuple(out.alter_partitions),
            answers=tuple(out.answers),
            fetches=tuple(out.fetches),
            deleted_logs=tuple(out.deleted_logs),
            next_tick_ms=None if self.stopped else self._next_tick_ms(),
            log_dir_failure=out.log_dir_failure,
        )

    def _check_invariants(self) -> None:
        assert len(self.purgatory) <= self.purgatory.capacity, len(self.purgatory)
        assert len(self._alter_in_flight) <= ALTER_PARTITION_IN_FLIGHT_MAX, len(self._alter_in_flight)
        # O(1) per call: a loop over every followed partition cost more than the call at 2,000.
        assert len(self.fetchers.leader_of) <= len(self.hosted), (len(self.fetchers.leader_of), len(self.hosted))

    def _next_id_value(self) -> int:
        self._next_id += 1
        return self._next_id

    # -- stepping one partition --------------------------------------------------------------------

    def _step(self, topic_partition: TopicPartition, event: Event, out: _Outbox, at_ms: int | None = None) -> Ready:
        """Step one core and do what its Ready asks within the broker: completions to their requests,
        proposals out, the fetch session and tick updated, the partition marked changed. `at_ms`: an
        earlier time the event happened at (not before the core's own clock)."""
        hosted = self.hosted[topic_partition]
        partition = hosted.partition
        before = (partition.role, partition.leader_epoch)
        ready = partition.handle(event, self.now_ms if at_ms is None else at_ms, self.wall_clock_ms)
        out.steps.append(PartitionStep(topic_partition, event, ready))
        if ready.log_dir_failure is not None and out.log_dir_failure is None:
            out.log_dir_failure = ready.log_dir_failure
        if ready.log_changes or (ready.role, ready.leader_epoch) != before:
            out.changed.add(topic_partition)
            out.changed_for_followers.add(topic_partition)
        elif ready.high_watermark is not None:
            out.changed.add(topic_partition)
        for proposal in ready.messages:
            self._send_alter_partition(topic_partition, hosted, proposal, out)
        for completion in ready.completions:
            self._complete_part(completion, out)
        self.fetchers.follow(topic_partition, NO_LEADER if ready.fetch is None else ready.fetch.leader_id)
        if ready.fetch_backoff:
            self.fetchers.back_off(topic_partition, self.now_ms + self.config.replica_fetch_backoff_ms)
        hosted.tick_at_ms = ready.next_tick_ms
        if ready.next_tick_ms is not None:
            heapq.heappush(self._ticks, (ready.next_tick_ms, topic_partition))
        return ready

    def _tick_due_partitions(self, out: _Outbox) -> None:
        """Tick each partition whose timer is due, once (its next timer waits for the next call)."""
        due = set()
        while self._ticks and self._ticks[0][0] <= self.now_ms:
            at_ms, topic_partition = heapq.heappop(self._ticks)
            hosted = self.hosted.get(topic_partition)
            if hosted is not None and hosted.tick_at_ms == at_ms:
                due.add(topic_partition)
        for topic_partition in sorted(due):
            if topic_partition in self.hosted:
                self._step(topic_partition, Tick(), out)

    def _next_tick_ms(self) -> int | None:
        while self._ticks:
            at_ms, topic_partition = self._ticks[0]
            hosted = self.hosted.get(topic_partition)
            if hosted is not None and hosted.tick_at_ms == at_ms:
                break
            heapq.heappop(self._ticks)
        earliest = self._ticks[0][0] if self._ticks else None
        for time in (self.purgatory.next_deadline_ms(), self.fetchers.next_time_ms(self.now_ms),
                     self.now_ms if self._unapplied else None):
            if time is not None and (earliest is None or time < earliest):
                earliest = time
        return earliest

    # -- metadata ----------------------------------------------------------------------------------

    def _on_metadata(self, event: MetadataChanged, out: _Outbox) -> None:
        self.metadata = event.metadata
        self.broker_epoch = event.broker_epoch
        metadata = event.metadata
        if self.stopped or event.broker_epoch < 0 or metadata.metadata_offset < event.broker_epoch:
            self.caught_up = False
            self._wanted = {}
            self._unapplied.clear()
            self._strays_removed = False
            return
        previous, wanted = self._wanted, self._wanted_partitions(metadata)
        changed = [topic_partition for topic_partition, entry in wanted.items()
                   if _entry_changed(previous.get(topic_partition), entry)]
        if not self._strays_removed or len(wanted) != len(previous) or any(
                topic_partition not in previous or previous[topic_partition][0] != wanted[topic_partition][0]
                for topic_partition in changed):
            for topic_partition, hosted in sorted(self.hosted.items()):
                entry = wanted.get(topic_partition)
                if entry is None or entry[0] != hosted.topic_id:
                    self._stop_and_delete(topic_partition, out)
            self._delete_stray_logs(wanted, out)
            self._strays_removed = True
        self._apply_topic_configs(metadata, {topic_partition.topic for topic_partition in wanted})
        self._wanted = wanted
        replica_broker_epochs = self._replica_broker_epochs_of(metadata, wanted)
        if replica_broker_epochs != self._replica_broker_epochs:
            self._replica_broker_epochs = replica_broker_epochs
            self._unapplied = deque(sorted(wanted))
        else:
            waiting = set(self._unapplied)
            self._unapplied.extend(sorted(tp for tp in changed if tp not in waiting))
        self._apply_metadata_chunk(out)

    def _replica_broker_epochs_of(self, metadata: MetadataView,
                                  wanted: dict[TopicPartition, tuple[str, PartitionStateView]]) -> dict[int, int]:
        """The broker epoch of every replica of the wanted partitions (NO_BROKER_EPOCH: unregistered)."""
        replicas = set(self._replica_broker_epochs)
        for _, state in wanted.values():
            replicas.update(state.replicas)
        return {replica: NO_BROKER_EPOCH if (broker := metadata.broker(replica)) is None else broker.broker_epoch
                for replica in replicas}

    def _apply_metadata_chunk(self, out: _Outbox) -> None:
        """Apply the last metadata to the next partitions in line: at most
        `metadata_partitions_per_call` of them, of which at most `metadata_log_creations_per_call`
        create their log. Caught up once none is left."""
        metadata = self.metadata
        assert metadata is not None, f"metadata pass without metadata on broker {self.broker_id}"
        examined = creations = 0
        while (self._unapplied and examined < self.config.metadata_partitions_per_call
               and creations < self.config.metadata_log_creations_per_call):
            topic_partition = self._unapplied[0]
            entry = self._wanted.get(topic_partition)
            examined += 1
            # Taken off the queue once applied: one that raises (a log dir failing) is tried again.
            if entry is not None:
                creations += topic_partition not in self.hosted
                self._apply_partition(topic_partition, entry[0], entry[1], metadata, out)
            self._unapplied.popleft()
        self.caught_up = not self._unapplied

    def offline_log_ends(self) -> tuple[ReplicaLogEnd, ...]:
        """The log end of each hosted replica whose partition has no leader and an empty ISR and ELR,
        once its core is in that leader epoch: without a leader it appends nothing, so the report
        holds for the whole epoch. The heartbeat sends them; the controller elects the most complete
        replica once every replica has reported (controller/quorum_controller.py)."""
        metadata = self.metadata
        if metadata is None or self.stopped:
            return ()
        ends = []  # sorted at the end: usually none of thousands (a sort of all was ~5 % of a failover)
        for topic_partition, hosted in self.hosted.items():
            state = metadata.partition(hosted.topic_id, topic_partition.partition)
            partition = hosted.partition
            if state is None or state.leader != NO_LEADER or state.isr or state.elr:
                continue
            if partition.leader_epoch != state.leader_epoch or partition.leader_id != NO_LEADER:
                continue
            ends.append((topic_partition, _log_end(hosted.topic_id, topic_partition.partition, state.leader_epoch,
                                                   partition)))
        return tuple(end for _, end in sorted(ends, key=lambda pair: pair[0]))

    def _wanted_partitions(self, metadata: MetadataView) -> dict[TopicPartition, tuple[str, PartitionStateView]]:
        """Every partition with a replica on this broker, with its topic id and state."""
        wanted = {}
        names = self._names
        for topic_id, index, state in metadata.all_partitions():
            if self.broker_id in state.replicas:
                name = metadata.topic_name(topic_id)
                assert name is not None, f"partition {index} of unknown topic id {topic_id}"
                topic_partition = names.get((name, index))
                if topic_partition is None:
                    topic_partition = names[(name, index)] = TopicPartition(name, index)
                wanted[topic_partition] = (topic_id, state)
        if len(names) > 2 * len(wanted) + 1_000:  # topics deleted: forget their names
            self._names = {(tp.topic, tp.partition): tp for tp in wanted}
        return wanted

    def _delete_stray_logs(self, wanted: dict[TopicPartition, tuple[str, PartitionStateView]],
                           out: _Outbox) -> None:
        """Delete the logs on disk that no partition assigned here owns, as Kafka's stray-log cleanup
        does (KRaft `isStrayReplica`): those the metadata does not assign to this broker (a topic
        deleted, or its replicas moved, while this broker was down), and those whose
        `partition.metadata` names another topic id (deleted and created again under the same name
        while this broker was down). A log without the file (written before topic ids) cannot be
        told apart and is adopted by the current topic, as in Kafka. Safe only because metadata is
        applied once it includes this broker's registration: everything decided before this process
        started is known by then."""
        for topic_partition, _ in list(self.log_manager):
            entry = wanted.get(topic_partition)
            stored_topic_id = self.log_manager.topic_id(topic_partition)
            if entry is None:
                reason = "not assigned to this broker in the metadata"
            elif stored_topic_id is not None and stored_topic_id != entry[0]:
                reason = (f"a log of an older topic of the same name (partition.metadata has topic id "
                          f"{stored_topic_id}, the metadata {entry[0]})")
            else:
                continue
            assert topic_partition not in self.hosted, f"{topic_partition} hosted with topic id {stored_topic_id}"
            self.log_manager.delete_log(topic_partition)
            out.deleted_logs.append(DeletedLog(topic_partition, f"stray: {reason}"))

    def _apply_topic_configs(self, metadata: MetadataView, topics: set[str]) -> None:
        for topic in sorted(topics):
            configs = dict(metadata.topic_configs(topic))
            if self._topic_configs.get(topic) != configs:
                self._topic_configs[topic] = configs
                self.log_manager.update_config(topic, self.log_manager.config_for(topic))
        for topic in set(self._topic_configs) - topics:
            del self._topic_configs[topic]

    def _apply_partition(self, topic_partition: TopicPartition, topic_id: str, state: PartitionStateView,
                         metadata: MetadataView, out: _Outbox) -> None:
        """Host the partition and step its core into the metadata's state."""
        hosted = self.hosted.get(topic_partition)
        if hosted is None:
            # Open or create the log under its topic id first (partition.metadata is written if
            # absent); the core then finds it open. A log of another topic id was deleted as a stray.
            self.log_manager.get_or_create_log(topic_partition, self.wall_clock_ms, topic_id)
            partition = Partition(topic_partition, self.log_manager, self.broker_id, self.config.replication,
                                  self.lease, self.now_ms, self.wall_clock_ms)
            hosted = self.hosted[topic_partition] = HostedPartition(partition, topic_id)
        # The replicas' broker epochs first (KIP-903): a leader forgets what the older process of a
        # re-registered follower reported before it counts the ISR of the same metadata.
        broker_epochs = tuple((replica, NO_BROKER_EPOCH if (broker := metadata.broker(replica)) is None
                               else broker.broker_epoch) for replica in state.replicas)
        if hosted.broker_epochs != broker_epochs:
            hosted.broker_epochs = broker_epochs
            self._step(topic_partition, UpdateBrokerEpochs(broker_epochs), out)
        version = (state.leader_epoch, state.partition_epoch)
        if hosted.applied == version:
            return
        hosted.applied = version
        out.isr_changed.add(topic_partition)
        event: Event
        if state.leader == self.broker_id:
            lineage = state.epoch_lineage
            recorded = lineage is not None and lineage.leader_epoch == state.leader_epoch
            event = MakeLeader(state.leader_epoch, state.partition_epoch, state.isr, state.replicas,
                               state.log_start_offset, recorded)
        else:
            event = MakeFollower(state.leader, state.leader_epoch, state.partition_epoch, state.isr, state.replicas)
        self._step(topic_partition, event, out)

    def _stop_and_delete(self, topic_partition: TopicPartition, out: _Outbox) -> None:
        self._step(topic_partition, StopReplica(), out)
        del self.hosted[topic_partition]
        self.log_manager.delete_log(topic_partition)
        out.deleted_logs.append(DeletedLog(topic_partition, "no longer assigned to this broker"))

    # -- client requests ---------------------------------------------------------------------------

    def _on_client_request(self, request: ClientRequest, out: _Outbox) -> None:
        assert request.request_id not in self._pending, f"request id {request.request_id} reused"
        if request.wait is not None:
            self._on_fetch(request, out)
            return
        pending = PendingRequest(request, [None] * len(request.parts), len(request.parts))
        self._pending[request.request_id] = pending
        for index, (topic_partition, part) in enumerate(request.parts):
            refused = self._refusal(topic_partition, part)
            if refused is not None:
                self._fill(pending, index, refused, out)
                continue
            if self._unapplied:
                self._apply_ahead(topic_partition, out)
            if isinstance(part, ProduceRequest):
                self._refresh_quiet_followers(topic_partition, out)
            part_id = self._next_id_value()
            self._part_of[part_id] = (request.request_id, index)
            self._step(topic_partition, dataclasses.replace(part, request_id=part_id), out)
        if pending.remaining == 0 and request.request_id in self._pending:
            self._finish(pending, out)

    def _apply_ahead(self, topic_partition: TopicPartition, out: _Outbox) -> None:
        """A request for a hosted partition whose metadata change still waits in the pass applies it
        first: the client learned the new leader epoch from metadata this broker holds already, and
        would be refused (UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER) and retry after a backoff.
        Only a step of an open log: a creation waits for its turn. The pass finds it applied."""
        entry = self._wanted.get(topic_partition)
        hosted = self.hosted[topic_partition]
        if entry is not None and entry[0] == hosted.topic_id and hosted.applied != (
                entry[1].leader_epoch, entry[1].partition_epoch):
            assert self.metadata is not None, f"a pass without metadata on broker {self.broker_id}"
            self._apply_partition(topic_partition, entry[0], entry[1], self.metadata, out)

    def _refusal(self, topic_partition: TopicPartition, part: PartitionRequest) -> PartAnswer | None:
        """Why this broker cannot hand `part` to a core: the metadata has no such partition, or this
        broker hosts no replica of it (or is stopping); None if it can."""
        metadata = self.metadata
        topic_id = None if metadata is None else metadata.topic_id(topic_partition.topic)
        state = None if metadata is None or topic_id is None else metadata.partition(topic_id,
                                                                                       topic_partition.partition)
        if state is None:
            offset = -1 if metadata is None else metadata.metadata_offset
            message = (f"topic {topic_partition.topic!r} has no partition {topic_partition.partition} (metadata "
                       f"offset {offset}); check the name, or create the topic")
            return PartAnswer(topic_partition, error_result(part, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message))
        if topic_partition in self.hosted and not self.stopped:
            return None
        message = (f"broker {self.broker_id} hosts no replica of {topic_partition} (replicas {list(state.replicas)}, "
                   f"leader {state.leader}); refresh metadata")
        return PartAnswer(topic_partition, error_result(part, ErrorCode.NOT_LEADER_OR_FOLLOWER, message),
                          LeaderIdAndEpoch(state.leader, state.leader_epoch))

    def _complete_part(self, completion: Completion, out: _Outbox) -> None:
        """A partition core answered one part: file it; answer the request once every part is in."""
        owner = self._part_of.pop(completion.request_id, None)
        if owner is None:
            return  # a fetch read: `_read` takes it from the Ready itself
        request_id, index = owner
        pending = self._pending[request_id]
        topic_partition, _ = pending.request.parts[index]
        self._fill(pending, index, self._answer_of(topic_partition, completion), out)

    def _fill(self, pending: PendingRequest, index: int, answer: PartAnswer, out: _Outbox) -> None:
        assert pending.parts[index] is None, f"part {index} of request {pending.request.request_id} answered twice"
        pending.parts[index] = answer
        pending.remaining -= 1
        if pending.remaining == 0:
            self._finish(pending, out)

    def _finish(self, pending: PendingRequest, out: _Outbox) -> None:
        del self._pending[pending.request.request_id]
        parts = tuple(part for part in pending.parts if part is not None)
        assert len(parts) == len(pending.request.parts), pending.request.request_id
        out.answers.append(ClientAnswer(pending.request.request_id, parts))

    def _answer_of(self, topic_partition: TopicPartition, completion: Completion) -> PartAnswer:
        """A core's completion with the current leader attached where the client must go elsewhere."""
        current_leader = None
        if completion.error in _CURRENT_LEADER_ERRORS and self.metadata is not None:
            topic_id = self.metadata.topic_id(topic_partition.topic)
            state = None if topic_id is None else self.metadata.partition(topic_id, topic_partition.partition)
            if state is not None:
                current_leader = LeaderIdAndEpoch(state.leader, state.leader_epoch)
        return PartAnswer(topic_partition, completion, current_leader)

    # -- fetch (the long poll) ---------------------------------------------------------------------

    def _on_fetch(self, request: ClientRequest, out: _Outbox) -> None:
        wait = request.wait
        assert wait is not None
        if wait.session is not None and wait.session.epoch != FINAL_EPOCH:
            self._on_session_fetch(request, out)
            return
        answers = self._read(request, out)
        if is_answerable(request, answers) or self.purgatory.is_full or self.stopped:
            out.answers.append(ClientAnswer(request.request_id, tuple(answers)))
            return
        self.purgatory.add(ParkedFetch(request, self.now_ms + wait.max_wait_ms))

    def _read(self, request: ClientRequest, out: _Outbox) -> list[PartAnswer]:
        """Read every part of a Fetch once, at most `wait.max_bytes` over all of them."""
        wait = request.wait
        assert wait is not None
        answers = []
        bytes_left = wait.max_bytes
        for topic_partition, part in request.parts:
            assert isinstance(part, ConsumerFetch | FollowerFetch), part
            answer = self._refusal(topic_partition, part)
            if answer is None:
                part_id = self._next_id_value()
                event = part.renumbered(part_id, min(part.max_bytes, max(bytes_left, 0)))
                ready = self._step(topic_partition, event, out)
                result = next(item for item in ready.completions if item.request_id == part_id)
                answer = self._answer_of(topic_partition, result)
                if isinstance(part, ConsumerFetch) and result.error == ErrorCode.NONE:
                    answer = self._maybe_redirect(topic_partition, answer, wait.rack_id)
            assert isinstance(answer.result, FetchResult), answer
            bytes_left -= len(answer.result.records)
            answers.append(answer)
        return answers

    def _on_session_fetch(self, request: ClientRequest, out: _Outbox) -> None:
        """A follower's KIP-227 session fetch (replica_sessions.py): a session error is answered at
        once; else the session's reads are answered now or parked."""
        wait = request.wait
        assert wait is not None and wait.session is not None
        parts = []
        for topic_partition, part in request.parts:
            assert isinstance(part, FollowerFetch), part
            parts.append((topic_partition, part))
        begun = self.replica_sessions.begin(wait.replica_id, wait.session, parts, self.now_ms)
        if isinstance(begun, ErrorCode):
            out.answers.append(ClientAnswer(request.request_id, (), error=begun))
            return
        self._serve_session(ParkedFetch(request, self.now_ms + wait.max_wait_ms, begun), out, arrived=True)

    def _serve_session(self, item: ParkedFetch, out: _Outbox, arrived: bool = False, final: bool = False) -> None:
        """Read what the session's fetch reads; answer the parts with news (at once if `final`), or
        park it again."""
        session = item.session
        assert session is not None
        reads = session.reads(self.now_ms, arrived)
        request = ClientRequest(item.request.request_id, tuple((tp, session.parts[tp]) for tp in reads),
                                item.request.wait)
        answers = self._read(request, out)
        self._note_quiet(session, answers)
        answerable = is_answerable(request, answers) or item.deadline_ms <= self.now_ms or final
        if answerable or self.purgatory.is_full or self.stopped:
            out.answers.append(ClientAnswer(request.request_id, session.answer(answers, self.now_ms),
                                            session.session_id))
            return
        session.park(answers)
        self.purgatory.add(item)

    def _note_quiet(self, session: ReplicaSession, answers: list[PartAnswer]) -> None:
        """A partition is read on every fetch of the session (sticky) until it is quiet: its read
        has no records, error or diverging epoch, and the follower is in its ISR. So the follower
        gets records it could not append again, and rejoins the ISR at once, as in Kafka (which
        reads every partition of a session on every fetch)."""
        for answer in answers:
            result = answer.result
            assert isinstance(result, FetchResult), result
            hosted = self.hosted.get(answer.topic_partition)
            quiet = (hosted is not None and hosted.partition.role == Role.LEADER and not result.records
                     and result.error == ErrorCode.NONE and result.diverging_epoch is None
                     and session.replica_id in hosted.partition.isr)
            if quiet:
                session.sticky.discard(answer.topic_partition)
            else:
                session.sticky.add(answer.topic_partition)

    def _refresh_quiet_followers(self, topic_partition: TopicPartition, out: _Outbox) -> None:
        """Before an append: the follower fetches that live sessions made without reading this
        quiet partition, read as of their arrival (replica_sessions.py), so its core counts the
        followers caught up then."""
        partition = self.hosted[topic_partition].partition
        if partition.role != Role.LEADER or not self.replica_sessions.sessions:
            return
        for arrived_ms, part in self.replica_sessions.refreshes(topic_partition, partition.log.log_end_offset,
                                                               self.now_ms):
            event = dataclasses.replace(part, request_id=self._next_id_value())
            self._step(topic_partition, event, out, at_ms=max(arrived_ms, partition.now_ms))

    def _maybe_redirect(self, topic_partition: TopicPartition, answer: PartAnswer, rack_id: str) -> PartAnswer:
        """KIP-392 on the leader: with a preferred replica the answer carries no records."""
        partition = self.hosted[topic_partition].partition
        if partition.role != Role.LEADER or self.metadata is None:
            return answer
        preferred = preferred_read_replica(self.metadata, self.broker_id, self.config.broker_rack, partition.isr,
                                           rack_id)
        if preferred == NO_PREFERRED_READ_REPLICA:
            return answer
        assert isinstance(answer.result, FetchResult)
        return dataclasses.replace(answer, result=dataclasses.replace(answer.result, records=b""),
                                   preferred_read_replica=preferred)

    def _settle_fetches(self, out: _Outbox) -> None:
        """Re-read the parked fetches whose partitions changed in this call (a follower's: not by a
        HW move alone, delayed_fetch.py), or whose time is up. Re-reading a follower's fetch may move
        a leader's HW (a change of its own), so this repeats until nothing new changed; each round
        answers or re-parks every fetch it took."""
        for _ in range(len(self.purgatory) + 2):
            changed, out.changed = out.changed, set()
            changed_for_followers, out.changed_for_followers = out.changed_for_followers, set()
            self.replica_sessions.mark_changed(changed)
            taken = self.purgatory.take(changed, changed_for_followers, self.now_ms)
            if not taken:
                return
            for item in taken:
                if item.session is not None:
                    self._serve_session(item, out)
                    continue
                answers = self._read(item.request, out)
                if is_answerable(item.request, answers) or item.deadline_ms <= self.now_ms or self.stopped:
                    out.answers.append(ClientAnswer(item.request.request_id, tuple(answers)))
                else:
                    self.purgatory.add(item)
        raise AssertionError(f"parked fetches did not settle on broker {self.broker_id}")

    # -- replica fetchers --------------------------------------------------------------------------

    def _send_fetches(self, out: _Outbox) -> None:
        """One fetch per leader with partitions due and nothing in flight: a KIP-227 session fetch
        that lists only what changed since the last one (fetch_session.py)."""
        self.fetchers.drop_idle()
        for leader_id, session in sorted(self.fetchers.sessions.items()):
            if session.in_flight is not None:
                continue
            address = self._leader_address(leader_id)
            if address is None:
                for topic_partition in session.due(self.now_ms):
                    self.fetchers.back_off(topic_partition, self.now_ms + self.config.replica_fetch_backoff_ms)
                continue
            fetch = session.build(self.now_ms, self._fetch_position_of(leader_id))
            if fetch is None:
                continue
            request_id = self._next_id_value()
            deadline_ms = self.now_ms + self.config.replica_fetch_timeout_ms
            self.fetchers.sent(session, InFlightFetch(request_id, deadline_ms, fetch.positions))
            out.fetches.append(ReplicaFetchSend(
                request_id=request_id,
                leader_id=leader_id,
                address=address,
                broker_epoch=self.broker_epoch,
                max_wait_ms=self.config.replica_fetch_wait_max_ms,
                min_bytes=self.config.replica_fetch_min_bytes,
                max_bytes=self.config.replica_fetch_response_max_bytes,
                positions=fetch.listed,
                replica_id=self.broker_id,
                session_id=fetch.session_id,
                session_epoch=fetch.epoch,
                forgotten=fetch.forgotten,
            ))

    def _fetch_position_of(self, leader_id: int) -> Callable[[TopicPartition], FollowerFetchPosition]:
        def position_of(topic_partition: TopicPartition) -> FollowerFetchPosition:
            position = self.hosted[topic_partition].partition.fetch_position()
            assert position is not None and position.leader_id == leader_id, (topic_partition, position)
            return position
        return position_of

    def _leader_address(self, leader_id: int) -> str | None:
        broker = None if self.metadata is None else self.metadata.broker(leader_id)
        return None if broker is None else broker.endpoints.get(self.config.inter_broker_listener_name)

    def _on_replica_fetch_answer(self, answer: ReplicaFetchAnswer, out: _Outbox) -> None:
        taken = self.fetchers.take_answer(answer.request_id)
        if taken is None:
            return  # late (given up at its deadline) or a duplicate
        session, fetch = taken
        if answer.error in _SESSION_ERRORS:
            session.reset()  # the next fetch opens a new session, at once (Kafka's FetchSessionHandler)
            return
        if answer.error != ErrorCode.NONE:
            session.reset()
            self._back_off_all(session, fetch)
            return
        session.answered(answer.session_id)
        for topic_partition, result in answer.results:
            position = fetch.positions.get(topic_partition)
            if position is None or self.fetchers.leader_of.get(topic_partition) != session.leader_id:
                continue  # not fetched, or moved to another leader meanwhile
            self._step(topic_partition, FetchResponseFromLeader.from_result(position, result), out)

    def _expire_fetches(self, out: _Outbox) -> None:
        for session, fetch in self.fetchers.take_expired(self.now_ms):
            self._back_off_all(session, fetch)

    def _back_off_all(self, session: FetchSession, fetch: InFlightFetch) -> None:
        """The leader did not answer: every partition of the fetch waits `replica.fetch.backoff.ms`."""
        until_ms = self.now_ms + self.config.replica_fetch_backoff_ms
        for topic_partition in fetch.positions:
            if self.fetchers.leader_of.get(topic_partition) == session.leader_id:
                self.fetchers.back_off(topic_partition, until_ms)

    # -- AlterPartition ----------------------------------------------------------------------------

    def _send_alter_partition(self, topic_partition: TopicPartition, hosted: HostedPartition,
                              proposal: AlterPartitionProposal, out: _Outbox) -> None:
        request_id = self._next_id_value()
        self._expire_alter_partitions()
        self._alter_in_flight[request_id] = (topic_partition, hosted, proposal, self.now_ms)
        out.alter_partitions.append(AlterPartitionSend(request_id, self.broker_epoch, hosted.topic_id,
                                                       topic_partition, proposal))

    def _expire_alter_partitions(self) -> None:
        """Forget the oldest proposals when the bound is reached: their answers were lost, and the
        core resends unanswered proposals itself (`alter_partition_timeout_ms`)."""
        while len(self._alter_in_flight) >= ALTER_PARTITION_IN_FLIGHT_MAX:
            del self._alter_in_flight[next(iter(self._alter_in_flight))]

    def _on_alter_partition_answer(self, answer: AlterPartitionAnswer, out: _Outbox) -> None:
        entry = self._alter_in_flight.pop(answer.request_id, None)
        if entry is None:
            return
        topic_partition, hosted, proposal, _ = entry
        if self.hosted.get(topic_partition) is not hosted:
            return  # stopped (or made anew) meanwhile
        event = AlterPartitionResponse(proposal, answer.error, answer.leader_id, answer.leader_epoch,
                                       answer.partition_epoch, answer.isr)
        self._step(topic_partition, event, out)
        out.isr_changed.add(topic_partition)

    # -- retention and shutdown --------------------------------------------------------------------

    def _on_run_retention(self, out: _Outbox) -> None:
        """Retention on the partitions this broker leads only: followers follow the leader's
        logStartOffset (DESIGN §4)."""
        for topic_partition, hosted in sorted(self.hosted.items()):
            if hosted.partition.role == Role.LEADER:
                self._step(topic_partition, RunRetention(), out)

    def _on_shutdown(self, out: _Outbox) -> None:
        for item in self.purgatory.take_all():
            if item.session is not None:
                self._serve_session(item, out, final=True)
            else:
                out.answers.append(ClientAnswer(item.request.request_id, tuple(self._read(item.request, out))))
        self.stopped = True
        self._unapplied.clear()
        self.replica_sessions.clear()
        for topic_partition in sorted(self.hosted):
            self._step(topic_partition, StopReplica(), out)
        self.hosted.clear()
        self._ticks.clear()
        self.fetchers.clear()
        self._alter_in_flight.clear()
        assert not self._pending, f"requests unanswered after shutdown: {sorted(self._pending)}"

    # -- reads for tools, metrics and heartbeats ---------------------------------------------------

    def partitions(self) -> Iterator[tuple[TopicPartition, Partition]]:
        for topic_partition, hosted in sorted(self.hosted.items()):
            yield topic_partition, hosted.partition


def _log_end(topic_id: str, index: int, leader_epoch: int, partition: Partition) -> ReplicaLogEnd:
    log = partition.log
    latest_epoch = log.leader_epoch_cache.latest_epoch()
    return ReplicaLogEnd(topic_id, index, leader_epoch, NO_EPOCH if latest_epoch is None else latest_epoch,
                         log.log_end_offset, log.log_start_offset,
                         tuple((entry.epoch, entry.start_offset) for entry in log.leader_epoch_cache.entries()),
                         partition.replica_log.may_be_committed_end())


def _entry_changed(previous: tuple[str, PartitionStateView] | None, entry: tuple[str, PartitionStateView]) -> bool:
    """Whether a partition's (topic id, state) differs from the last metadata's (states are immutable:
    an unchanged one is usually the very same object)."""
    return previous is None or previous[0] != entry[0] or (previous[1] is not entry[1] and previous[1] != entry[1])
