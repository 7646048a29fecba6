"""ReplicaManager: the partitions this broker hosts, kept in step with the cluster metadata.

Kafka's ReplicaManager.applyDelta, run from the quorum's metadata listener. For every partition
whose replicas include this broker it makes a `PartitionHost` (the log comes from the
`LogManager`, opened or created with the topic's config) and steps `MakeLeader` or
`MakeFollower` whenever the partition's (leader_epoch, partition_epoch) changed. A hosted
partition that left the metadata (topic deleted), no longer lists this broker, or belongs to an
older topic of the same name gets `StopReplica` and its log is deleted; so is a log on disk that
no partition here owns (a stray, left by a deletion while the broker was down), and one whose
`partition.metadata` names another topic id than the metadata's (a stray of an older topic of the
same name, deleted and created again while the broker was down: KIP-516). Strays go before any
partition is applied, so a new topic never opens an old topic's log; a hosted partition's log
records its topic id when the host is made. Topic config changes reach the open logs
(`LogManager.update_config`).

Metadata is applied only once it includes this broker's own registration (KRaft brokers catch up
to it before publishing), so a restarted broker never acts on partition states older than its
re-registration, which took it out of every ISR and leadership.

AlterPartition proposals of the leaders go to the active controller, one task each; the answer
goes back to the core as the replication `AlterPartitionResponse` echoing the proposal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from client import protocol
from client.connection import Connections
from controller.controller_api import AlterPartitionData, AlterPartitionRequest
from controller.controller_api import AlterPartitionResponse as ControllerAlterPartitionResponse
from controller.metadata import ClusterMetadata, PartitionRegistration
from node.broker_settings import BrokerSettings
from node.fetcher import ReplicaFetcherManager
from node.lifecycle import Quorum
from node.long_poll import PartitionWatchers
from node.partition_host import PartitionHost
from replication.events import AlterPartitionResponse, Event, MakeFollower, MakeLeader
from replication.partition import Partition
from replication.ready import AlterPartitionProposal
from storage.checkpoint import TopicPartition
from storage.error_codes import ErrorCode
from storage.log_manager import LogManager

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Located:
    """Where a request for one partition goes: its host, or why not (with the leader if known)."""

    host: PartitionHost | None
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    registration: PartitionRegistration | None = None

    @property
    def current_leader(self) -> protocol.LeaderIdAndEpoch | None:
        state = self.registration
        return None if state is None else protocol.LeaderIdAndEpoch(state.leader, state.leader_epoch)


class ReplicaManager:
    """The hosted partitions (`hosts`), their fetchers and their AlterPartition requests."""

    def __init__(self, settings: BrokerSettings, quorum: Quorum, connections: Connections, log_manager: LogManager,
                 clock: Callable[[], int], watchers: PartitionWatchers, broker_epoch: Callable[[], int]) -> None:
        self.settings = settings
        self.quorum = quorum
        self.log_manager = log_manager
        self.hosts: dict[TopicPartition, PartitionHost] = {}
        self.fetchers = ReplicaFetcherManager(settings, self.hosts, lambda: quorum.metadata, connections,
                                              broker_epoch, clock)
        self._clock = clock
        self._watchers = watchers
        self._broker_epoch = broker_epoch
        self._topic_configs: dict[str, dict[str, str]] = {}
        self._alter_partition_tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- metadata ---------------------------------------------------------------------------------

    def apply_metadata(self) -> bool:
        """Bring the hosted partitions in line with the metadata; False if it is not yet applicable
        (no registration yet, or the metadata is older than it)."""
        metadata = self.quorum.metadata
        broker_epoch = self._broker_epoch()
        if self._closed or broker_epoch < 0 or metadata.metadata_offset < broker_epoch:
            return False
        wanted = self._wanted(metadata)
        for topic_partition, host in sorted(self.hosts.items()):
            entry = wanted.get(topic_partition)
            if entry is None or entry[0] != host.topic_id:
                self._stop_and_delete(topic_partition, host)
        self._delete_stray_logs(wanted)
        self._apply_topic_configs(metadata, {topic_partition.topic for topic_partition in wanted})
        for topic_partition, (topic_id, state) in sorted(wanted.items()):
            self._apply_partition(topic_partition, topic_id, state)
        return True

    def _delete_stray_logs(self, wanted: dict[TopicPartition, tuple[str, PartitionRegistration]]) -> None:
        """Delete the logs on disk that no partition assigned here owns, as Kafka's stray-log
        cleanup does (KRaft `isStrayReplica`): those the metadata does not assign to this broker (a
        topic deleted, or its replicas moved, while this broker was down), and those whose
        `partition.metadata` names another topic id (a topic deleted and created again under the
        same name while this broker was down). A log without the file (written before topic ids)
        cannot be told apart and is adopted by the current topic, as in Kafka. Runs before the
        partitions are applied, so a new topic's host never opens an old log. Safe only because
        metadata is applied once it includes this broker's registration: everything decided before
        this process started is known by then."""
        for topic_partition, _ in list(self.log_manager):
            entry = wanted.get(topic_partition)
            if entry is None:
                log.info("broker %s: deleting stray log %s (not assigned to this broker in the metadata)",
                         self.settings.node_id, topic_partition)
                self.log_manager.delete_log(topic_partition)
                continue
            stored_topic_id = self.log_manager.topic_id(topic_partition)
            if stored_topic_id is not None and stored_topic_id != entry[0]:
                assert topic_partition not in self.hosts, f"{topic_partition} hosted with topic id {stored_topic_id}"
                log.info("broker %s: deleting stray log %s of an older topic of the same name (its "
                         "partition.metadata has topic id %s, the metadata %s)",
                         self.settings.node_id, topic_partition, stored_topic_id, entry[0])
                self.log_manager.delete_log(topic_partition)

    def _wanted(self, metadata: ClusterMetadata) -> dict[TopicPartition, tuple[str, PartitionRegistration]]:
        """Every partition with a replica on this broker, with its topic id and state."""
        wanted = {}
        for topic_id, index, state in metadata.all_partitions():
            if self.settings.node_id in state.replicas:
                name = metadata.topic_name(topic_id)
                assert name is not None, f"partition {index} of unknown topic id {topic_id}"
                wanted[TopicPartition(name, index)] = (topic_id, state)
        return wanted

    def _apply_topic_configs(self, metadata: ClusterMetadata, topics: set[str]) -> None:
        for topic in sorted(topics):
            configs = metadata.topic_configs(topic)
            if self._topic_configs.get(topic) != configs:
                self._topic_configs[topic] = configs
                self.log_manager.update_config(topic, self.log_manager.config_for(topic))
        for topic in set(self._topic_configs) - topics:
            del self._topic_configs[topic]

    def _apply_partition(self, topic_partition: TopicPartition, topic_id: str, state: PartitionRegistration) -> None:
        host = self.hosts.get(topic_partition)
        if host is None:
            host = self._create(topic_partition, topic_id)
        version = (state.leader_epoch, state.partition_epoch)
        if host.applied == version:
            return
        host.applied = version
        event: Event
        if state.leader == self.settings.node_id:
            event = MakeLeader(state.leader_epoch, state.partition_epoch, state.isr, state.replicas)
        else:
            event = MakeFollower(state.leader, state.leader_epoch, state.partition_epoch, state.isr, state.replicas)
        host.handle_event(event)

    def _create(self, topic_partition: TopicPartition, topic_id: str) -> PartitionHost:
        # Open or create the log under its topic id first (partition.metadata is written if absent);
        # the core's get_or_create_log then finds it open. A log of another topic id was deleted
        # by `_delete_stray_logs`, so InconsistentTopicIdError here would be a bug.
        self.log_manager.get_or_create_log(topic_partition, self._clock(), topic_id)
        partition = Partition(topic_partition, self.log_manager, self.settings.node_id, self.settings.replication,
                              self._clock())
        host = PartitionHost(partition, topic_id, self._clock, self._watchers, self._send_alter_partition,
                             self.fetchers.update)
        self.hosts[topic_partition] = host
        return host

    def _stop_and_delete(self, topic_partition: TopicPartition, host: PartitionHost) -> None:
        log.info("broker %s: stopping replica %s and deleting its log (no longer assigned here)",
                 self.settings.node_id, topic_partition)
        del self.hosts[topic_partition]
        host.stop()
        self.log_manager.delete_log(topic_partition)

    # -- requests ---------------------------------------------------------------------------------

    def locate(self, topic: str, partition: int) -> Located:
        """The host serving `topic`-`partition` here, or UNKNOWN_TOPIC_OR_PARTITION /
        NOT_LEADER_OR_FOLLOWER with a message that says where to go."""
        metadata = self.quorum.metadata
        topic_id = metadata.topic_id(topic)
        state = None if topic_id is None else metadata.partition(topic_id, partition)
        if state is None:
            return Located(None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           f"topic {topic!r} has no partition {partition} (metadata offset "
                           f"{metadata.metadata_offset}); check the name, or create the topic")
        host = self.hosts.get(TopicPartition(topic, partition))
        if host is None:
            return Located(None, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"broker {self.settings.node_id} hosts no replica of {topic}-{partition} (replicas "
                           f"{list(state.replicas)}, leader {state.leader}); refresh metadata", state)
        return Located(host, registration=state)

    # -- AlterPartition ---------------------------------------------------------------------------

    def _send_alter_partition(self, host: PartitionHost, proposal: AlterPartitionProposal) -> None:
        if self._closed:
            return
        task = asyncio.create_task(self._alter_partition(host, proposal),
                                   name=f"alter-partition-{host.topic_partition}")
        self._alter_partition_tasks.add(task)
        task.add_done_callback(self._alter_partition_done)

    def _alter_partition_done(self, task: asyncio.Task[None]) -> None:
        self._alter_partition_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("broker %s: AlterPartition failed", self.settings.node_id, exc_info=task.exception())

    async def _alter_partition(self, host: PartitionHost, proposal: AlterPartitionProposal) -> None:
        data = AlterPartitionData(host.topic_id, host.topic_partition.partition, proposal.leader_epoch,
                                  proposal.partition_epoch, proposal.new_isr, proposal.new_isr_broker_epochs)
        request = AlterPartitionRequest(self.settings.node_id, self._broker_epoch(), (data,))
        response = await self.quorum.controller_request(request, self.settings.request_timeout_ms)
        assert isinstance(response, ControllerAlterPartitionResponse), response
        if self.hosts.get(host.topic_partition) is not host:
            return  # stopped meanwhile
        if response.error_code != ErrorCode.NONE or not response.partitions:
            event = AlterPartitionResponse(proposal, response.error_code)
        else:
            result = response.partitions[0]
            event = AlterPartitionResponse(proposal, result.error_code, result.leader_id, result.leader_epoch,
                                           result.partition_epoch, result.isr)
        host.handle_event(event)

    # -- shutdown ---------------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Stop fetching, drop AlterPartition requests in flight, stop every core (parked requests
        are answered); the logs stay open for the LogManager's shutdown."""
        self._closed = True
        await self.fetchers.shutdown()
        for task in list(self._alter_partition_tasks):
            task.cancel()
        await asyncio.gather(*self._alter_partition_tasks, return_exceptions=True)
        for _, host in sorted(self.hosts.items()):
            host.stop()
        self.hosts.clear()
        self._watchers.notify_all()
