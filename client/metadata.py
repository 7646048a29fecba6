"""The client's view of the cluster: brokers, topics, partitions and their leaders.

Filled from `Api.METADATA` answers of any reachable node (the bootstrap list is only where the
first request goes, as Kafka's `bootstrap.servers`; later requests go to known brokers too).
Refreshed on demand (`refresh`) and after errors that mean it is stale (`invalidate`, then the
next `refresh_if_stale`). Concurrent refreshes share one request. After a refresh that failed (no
node answered), `refresh_if_stale` waits `retry.backoff.ms` before asking again (Kafka's metadata
refresh backoff), so a client whose nodes are all down does not ask in a loop.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from client.connection import Connections, NodeUnavailableError, RequestRejectedError
from client.errors import TributaryError, error_for
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.metadata import MetadataBroker, MetadataRequest, MetadataResponse
from wire.sentinels import NO_LEADER
from wire.topic_partition import TopicPartition

DEFAULT_BOOTSTRAP = "127.0.0.1:9192"  # `tributary-node dev`'s first HTTP listener


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: ErrorCode = ErrorCode.NONE
    elr: tuple[int, ...] = ()  # KIP-966 eligible leader replicas
    last_known_elr: tuple[int, ...] = ()


def parse_bootstrap(bootstrap: str) -> tuple[str, ...]:
    """"host:port,host:port" as addresses; ValueError names a malformed entry."""
    addresses = tuple(entry.strip() for entry in bootstrap.split(",") if entry.strip())
    if not addresses:
        raise ValueError(f"bootstrap {bootstrap!r} names no address; give host:port[,host:port...]")
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap address {address!r} is not host:port (e.g. 127.0.0.1:9192)")
    return addresses


class Metadata:
    """Metadata cache over `Connections`. `request_timeout_ms` bounds each METADATA call."""

    def __init__(
        self, bootstrap: str, connections: Connections, request_timeout_ms: int = 5000,
        rng: random.Random | None = None, retry_backoff_ms: int = 100,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.connections = connections
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._failed_at: float | None = None  # loop time of the last failed refresh, None after a success
        self._rng = rng or random.Random()
        self.cluster_id = ""
        self.controller_id = -1
        self.metadata_offset = -1
        self.brokers: dict[int, MetadataBroker] = {}
        self.topics: dict[str, dict[int, PartitionInfo]] = {}
        self.topic_errors: dict[str, ErrorCode] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self._wanted: set[str] = set()
        self._stale = True
        self._refreshing: asyncio.Future[None] | None = None
        self._last: MetadataResponse | None = None

    # -- lookups ------------------------------------------------------------------------

    def address_of(self, node_id: int) -> str | None:
        broker = self.brokers.get(node_id)
        return None if broker is None else broker.address

    def partitions_for(self, topic: str) -> dict[int, PartitionInfo] | None:
        return self.topics.get(topic)

    def partition_info(self, tp: TopicPartition) -> PartitionInfo | None:
        partitions = self.topics.get(tp.topic)
        return None if partitions is None else partitions.get(tp.partition)

    def leader_for(self, tp: TopicPartition) -> int | None:
        info = self.partition_info(tp)
        if info is None or info.leader == NO_LEADER or info.leader not in self.brokers:
            return None
        return info.leader

    def candidate_addresses(self) -> list[str]:
        """Where a request that any node can answer may go: known brokers, then bootstrap."""
        known = [broker.address for broker in self.brokers.values() if not broker.fenced]
        self._rng.shuffle(known)
        bootstrap = [address for address in self.bootstrap if address not in known]
        return known + bootstrap

    # -- refresh ------------------------------------------------------------------------

    def add_topics(self, topics: set[str] | list[str]) -> None:
        """Topics to ask about on the next refresh (a producer learns them from its sends)."""
        new = set(topics) - self._wanted
        if new:
            self._wanted |= new
            self._stale = True

    def invalidate(self) -> None:
        self._stale = True

    @property
    def stale(self) -> bool:
        return self._stale

    def may_refresh(self) -> bool:
        """False within `retry_backoff_ms` of a failed refresh."""
        return (self._failed_at is None
                or asyncio.get_running_loop().time() - self._failed_at >= self.retry_backoff_ms / 1000)

    async def refresh_if_stale(self) -> None:
        """Refresh if stale and not backing off after a failed refresh; a failure raises."""
        if self._stale and self.may_refresh():
            await self.refresh()

    async def refresh(self, all_topics: bool = False) -> MetadataResponse:
        """Ask one reachable node; concurrent callers share the same request."""
        if self._refreshing is not None and not all_topics:
            await asyncio.shield(self._refreshing)
            assert self._last is not None, "a finished refresh leaves its answer"
            return self._last
        # An all-topics refresh runs beside a shared one; each resolves its own future.
        refreshing = self._refreshing = asyncio.get_running_loop().create_future()
        try:
            topics = None if all_topics or not self._wanted else tuple(sorted(self._wanted))
            response = await self.request(Api.METADATA, MetadataRequest(topics), MetadataResponse)
            self.update(response)
            self._failed_at = None
            refreshing.set_result(None)
            return response
        except BaseException as error:
            if not isinstance(error, asyncio.CancelledError):
                self._failed_at = asyncio.get_running_loop().time()
            refreshing.set_exception(error)
            refreshing.exception()  # retrieved: waiters re-raise, nobody logs it as lost
            raise
        finally:
            if self._refreshing is refreshing:
                self._refreshing = None

    def update(self, response: MetadataResponse) -> None:
        self._last = response
        self.cluster_id = response.cluster_id
        self.controller_id = response.controller_id
        self.metadata_offset = response.metadata_offset
        self.brokers = {
            broker.node_id: broker
            for broker in response.brokers
        }
        for topic in response.topics:
            self.topic_errors[topic.name] = topic.error_code
            if topic.error_code is not ErrorCode.NONE:
                self.topics.pop(topic.name, None)
                continue
            self.topic_configs[topic.name] = dict(topic.configs)
            self.topics[topic.name] = {
                p.partition: PartitionInfo(
                    topic.name, p.partition, p.leader, p.leader_epoch, tuple(p.replicas), tuple(p.isr), p.error_code,
                    tuple(p.eligible_leader_replicas), tuple(p.last_known_elr),
                )
                for p in topic.partitions
            }
        self._stale = False

    async def request(self, api: Api, request: object, response_type: type, timeout_ms: int | None = None):
        """Send to the first node that answers (any node serves metadata and admin requests)."""
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        failures = []
        for address in self.candidate_addresses():
            try:
                return await self.connections.call(address, api, request, response_type, timeout_ms)
            except NodeUnavailableError as error:
                failures.append(str(error))
            except RequestRejectedError as error:
                raise error_for(error.code, error.message) from None
        raise error_for(
            ErrorCode.NETWORK_EXCEPTION,
            f"no node answered {api.value} ({'; '.join(failures)}); check that the cluster is running and that "
            f"--bootstrap / TRIBUTARY_BOOTSTRAP ({','.join(self.bootstrap)}) names at least one of its nodes",
        )

    def require_topic(self, topic: str) -> dict[int, PartitionInfo]:
        """The topic's partitions, or the error the cluster gave for it."""
        partitions = self.topics.get(topic)
        if partitions:
            return partitions
        raise self.topic_error(topic)

    def topic_error(self, topic: str) -> TributaryError:
        """The error the cluster gave for `topic` (UNKNOWN_TOPIC_OR_PARTITION when it gave none)."""
        code = self.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if code is ErrorCode.NONE:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return error_for(code, f"topic {topic!r} is not known to the cluster; create it with "
                               f"`tributary topics create --topic {topic}` or check its name")

