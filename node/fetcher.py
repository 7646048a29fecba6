"""Replica fetchers: one task per leader this broker follows, all its partitions in one long poll.

Kafka's ReplicaFetcherManager / ReplicaFetcherThread over asyncio. The partition cores say where
to fetch (`Ready.fetch`, reported through `PartitionHost.fetch`); `ReplicaFetcherManager.update`
files each followed partition under its leader's `ReplicaFetcher`, creating the fetcher for a new
leader and ending one that has no partitions left (Kafka's shutdownIdleFetcherThreads).

A fetcher loops: take the current position of every partition not backing off, send one
FetchRequest (replica_id = this broker, its broker epoch, `replica.fetch.wait.max.ms`, min_bytes
1) to the leader's inter-broker address, and hand each partition's answer to its core as
`FetchResponseFromLeader`. The answer echoes the position it was fetched for, so the core drops
an answer made stale by a truncation or a new leader epoch meanwhile. A partition whose answer is
an error, or the whole request when the leader is unreachable, waits `replica.fetch.backoff.ms`.
Partitions added while a fetch is in flight join the next one (as in Kafka).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping

from client import protocol
from client.connection import Connections, NodeUnavailableError, RequestRejectedError
from controller.metadata import ClusterMetadata
from node.broker_settings import BrokerSettings
from node.partition_host import PartitionHost
from replication.events import NO_LEADER, FetchResponseFromLeader
from replication.follower import Follower
from replication.ready import EpochEndOffset, FetchResult, FollowerFetchPosition
from storage.checkpoint import TopicPartition
from storage.error_codes import ErrorCode

log = logging.getLogger(__name__)


class ReplicaFetcher:
    """Fetches every partition this broker follows from `leader_id`; owns one task.

    State: the partitions it fetches, each with the time its backoff ends (0: none), and an event
    that wakes the loop when a partition joins or its backoff should be re-examined.
    """

    def __init__(self, leader_id: int, settings: BrokerSettings, hosts: Mapping[TopicPartition, PartitionHost],
                 metadata: Callable[[], ClusterMetadata], connections: Connections,
                 broker_epoch: Callable[[], int], clock: Callable[[], int]) -> None:
        self.leader_id = leader_id
        self.settings = settings
        self.partitions: dict[TopicPartition, int] = {}
        self._hosts = hosts
        self._metadata = metadata
        self._connections = connections
        self._broker_epoch = broker_epoch
        self._clock = clock
        self._wakeup = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{settings.node_id}-from-{leader_id}")

    def add(self, topic_partition: TopicPartition) -> None:
        if topic_partition not in self.partitions:
            self.partitions[topic_partition] = 0
            self._wakeup.set()

    def remove(self, topic_partition: TopicPartition) -> None:
        self.partitions.pop(topic_partition, None)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    # -- the loop ---------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            self._wakeup.clear()
            positions: dict[TopicPartition, FollowerFetchPosition] = {}
            try:
                positions = self._positions(self._clock())
                if not positions:
                    await self._idle()
                    continue
                await self._fetch_once(positions)
            except Exception as error:
                # A bug (a core assertion): log it and keep replicating; the fetcher never dies of it.
                log.exception("broker %s: fetching %s from broker %s failed", self.settings.node_id,
                              sorted(positions), self.leader_id)
                if positions:
                    self._back_off(positions, f"{type(error).__name__}: {error}")
                else:
                    await asyncio.sleep(self.settings.replica_fetch_backoff_ms / 1000)

    async def _fetch_once(self, positions: dict[TopicPartition, FollowerFetchPosition]) -> None:
        address = self._leader_address()
        if address is None:
            self._back_off(positions, f"broker {self.leader_id} has no {self.settings.inter_broker_listener_name} "
                                      "endpoint in the metadata")
            return
        try:
            response = await self._connections.call(
                address, protocol.Api.FETCH, self._request(positions), protocol.FetchResponse,
                self.settings.request_timeout_ms + self.settings.replica_fetch_wait_max_ms,
            )
        except (NodeUnavailableError, RequestRejectedError) as error:
            self._back_off(positions, str(error))
            return
        self._deliver(positions, response)

    def _positions(self, now_ms: int) -> dict[TopicPartition, FollowerFetchPosition]:
        """The fetch position of each partition due now (not backing off, still following this leader)."""
        positions = {}
        for topic_partition, backoff_until_ms in self.partitions.items():
            host = self._hosts.get(topic_partition)
            if host is None or backoff_until_ms > now_ms:
                continue
            position = host.partition.fetch_position()
            if position is not None and position.leader_id == self.leader_id:
                positions[topic_partition] = position
        return positions

    async def _idle(self) -> None:
        """Wait for a partition to join, or for the first backoff to end."""
        now_ms = self._clock()
        backoffs = [until_ms for until_ms in self.partitions.values() if until_ms > now_ms]
        timeout_s = (min(backoffs) - now_ms) / 1000 if backoffs else None
        try:
            async with asyncio.timeout(timeout_s):
                await self._wakeup.wait()
        except TimeoutError:
            pass

    def _leader_address(self) -> str | None:
        broker = self._metadata().broker(self.leader_id)
        return None if broker is None else broker.endpoints.get(self.settings.inter_broker_listener_name)

    def _request(self, positions: dict[TopicPartition, FollowerFetchPosition]) -> protocol.FetchRequest:
        partitions = tuple(
            protocol.FetchPartition(
                topic=topic_partition.topic,
                partition=topic_partition.partition,
                fetch_offset=position.fetch_offset,
                partition_max_bytes=position.max_bytes,
                current_leader_epoch=position.leader_epoch,
                last_fetched_epoch=position.last_fetched_epoch,
                log_start_offset=position.log_start_offset,
                high_watermark=position.high_watermark,
            )
            for topic_partition, position in sorted(positions.items())
        )
        return protocol.FetchRequest(
            partitions=partitions,
            replica_id=self.settings.node_id,
            broker_epoch=self._broker_epoch(),
            max_wait_ms=self.settings.replica_fetch_wait_max_ms,
            min_bytes=self.settings.replica_fetch_min_bytes,
            max_bytes=self.settings.replica_fetch_response_max_bytes,
        )

    def _deliver(self, positions: dict[TopicPartition, FollowerFetchPosition],
                 response: protocol.FetchResponse) -> None:
        answers = {(answer.topic, answer.partition): answer for answer in response.partitions}
        now_ms = self._clock()
        for topic_partition, position in positions.items():
            host = self._hosts.get(topic_partition)
            answer = answers.get((topic_partition.topic, topic_partition.partition))
            if host is None or topic_partition not in self.partitions or answer is None:
                continue
            host.handle_event(FetchResponseFromLeader.from_result(position, _fetch_result(answer)))
            error, message = answer.error_code, answer.error_message
            if error == ErrorCode.NONE and isinstance(host.partition.state, Follower):
                # The core refused the records (a full disk, a damaged transfer): the same fetch
                # would fail again at once, so it waits out the backoff too.
                error, message = host.partition.state.last_error, "the records could not be appended here"
            if error != ErrorCode.NONE:
                log.debug("broker %s: fetch of %s from %s: %s %s", self.settings.node_id, topic_partition,
                          self.leader_id, error.name, message)
                self.partitions[topic_partition] = now_ms + self.settings.replica_fetch_backoff_ms

    def _back_off(self, positions: dict[TopicPartition, FollowerFetchPosition], reason: str) -> None:
        log.info("broker %s: fetch from broker %s failed (%s); retrying in %d ms", self.settings.node_id,
                 self.leader_id, reason, self.settings.replica_fetch_backoff_ms)
        until_ms = self._clock() + self.settings.replica_fetch_backoff_ms
        for topic_partition in positions:
            if topic_partition in self.partitions:
                self.partitions[topic_partition] = until_ms


def _fetch_result(answer: protocol.FetchPartitionResponse) -> FetchResult:
    """The leader's wire answer as the core's `FetchResult` (request ids do not cross the wire)."""
    diverging = answer.diverging_epoch
    return FetchResult(
        request_id=-1,
        error=answer.error_code,
        records=answer.records,
        high_watermark=answer.high_watermark,
        log_start_offset=answer.log_start_offset,
        log_end_offset=answer.log_end_offset,
        diverging_epoch=None if diverging is None else EpochEndOffset(diverging.epoch, diverging.end_offset),
        error_message=answer.error_message,
    )


class ReplicaFetcherManager:
    """Files each followed partition under the fetcher of its leader (Kafka's ReplicaFetcherManager)."""

    def __init__(self, settings: BrokerSettings, hosts: Mapping[TopicPartition, PartitionHost],
                 metadata: Callable[[], ClusterMetadata], connections: Connections,
                 broker_epoch: Callable[[], int], clock: Callable[[], int]) -> None:
        self._settings = settings
        self._hosts = hosts
        self._metadata = metadata
        self._connections = connections
        self._broker_epoch = broker_epoch
        self._clock = clock
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._leader_of: dict[TopicPartition, int] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._closed = False

    def update(self, topic_partition: TopicPartition, position: FollowerFetchPosition | None) -> None:
        """A core's latest fetch position (None: it fetches nothing, e.g. as leader)."""
        leader_id = NO_LEADER if position is None else position.leader_id
        current = self._leader_of.get(topic_partition, NO_LEADER)
        if leader_id == current:
            return
        if current != NO_LEADER:
            self._remove(topic_partition, current)
        if leader_id != NO_LEADER and not self._closed:
            fetcher = self.fetchers.get(leader_id)
            if fetcher is None:
                fetcher = ReplicaFetcher(leader_id, self._settings, self._hosts, self._metadata, self._connections,
                                         self._broker_epoch, self._clock)
                self.fetchers[leader_id] = fetcher
            fetcher.add(topic_partition)
            self._leader_of[topic_partition] = leader_id

    def _remove(self, topic_partition: TopicPartition, leader_id: int) -> None:
        del self._leader_of[topic_partition]
        fetcher = self.fetchers[leader_id]
        fetcher.remove(topic_partition)
        if not fetcher.partitions:
            del self.fetchers[leader_id]
            task = asyncio.create_task(fetcher.stop(), name=f"stop-replica-fetcher-from-{leader_id}")
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def shutdown(self) -> None:
        """Stop every fetcher and wait for them."""
        self._closed = True
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        self._leader_of.clear()
        await asyncio.gather(*(fetcher.stop() for fetcher in fetchers), *self._stopping)
