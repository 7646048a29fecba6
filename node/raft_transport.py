"""RaftTransport: Raft messages between nodes, one-way calls on the request stream to each peer.

Every Raft message is a call of the destination's `Api.RAFT` (client/connection.py) carrying an
`Envelope(type=<raft_messages class name>, body=encode(body), source_id, source_address)`, and the
route answers at once with an empty `Envelope(type="Ack")`: a response (a vote, a fetch answer) is
another one-way message, sent when the core produces it. So a fetch parked at the leader holds no
call open, and the send timeout can be short.

Sending is fire-and-forget: a failed or timed-out send is dropped, because the Raft core retries
whatever matters (fetches, votes, BeginQuorumEpoch, probes) on its own timers; a retry here would only
duplicate messages. An undelivered fetch or probe is reported to the core (`Unreachable`), with
whether the connection was refused (the process is gone: controller/raft.py, "A refused leader").
A fetch the peer took and holds (parked until there are records) has no call in flight when the peer
dies, so the transport also reports the last fetch delivered to a node when its stream closes, not
refused: the core retries after its backoff, and that retry's refusal, if the process is gone, tells.

Addresses: voters' from `controller.quorum.voters`; observers' (broker-only
nodes) are learned from the `source_address` of what they send, as a KRaft leader learns an
observer's endpoint from its Fetch.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable

from client.connection import Connections, NodeUnavailableError, RequestRejectedError
from controller.raft_messages import (
    BeginQuorumEpoch,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    QuorumProbeRequest,
    QuorumProbeResponse,
    Unreachable,
    VoteRequest,
    VoteResponse,
)
from node.config import NodeConfig
from wire.api import Api
from wire.codec import INT64_MAX, ProtocolError, decode, encode
from wire.envelope import Envelope

log = logging.getLogger(__name__)

RAFT_MESSAGE_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (VoteRequest, VoteResponse, BeginQuorumEpoch, FetchRequest, FetchResponse, FetchSnapshotRequest,
                FetchSnapshotResponse, QuorumProbeRequest, QuorumProbeResponse)
}
ACK = Envelope(type="Ack", body={})
_FROM_ANY_NODE = frozenset({FetchRequest, FetchSnapshotRequest})
_NON_NEGATIVE_FIELDS = ("epoch", "fetch_offset", "max_bytes", "position", "last_fetched_epoch", "last_epoch",
                        "last_end_offset")
_EPOCH_FIELDS = ("epoch", "last_fetched_epoch", "last_epoch")
_SENDER_FIELDS = {VoteRequest: "candidate_id", BeginQuorumEpoch: "leader_id", FetchRequest: "replica_id",
                  FetchSnapshotRequest: "replica_id"}
INT32_MAX = 2**31 - 1  # Kafka's epochs are int32, offsets int64
SENDS_IN_FLIGHT_MAX = 256  # beyond it a message is dropped (Raft resends); bounds tasks under a slow peer
OBSERVER_ADDRESSES_MAX = 1024  # the leader's view of observers, least recently heard dropped first


def to_envelope(message: Message, source_address: str, cluster_id: str) -> Envelope:
    return Envelope(type(message.body).__name__, encode(message.body), message.source_id, source_address, cluster_id)


def from_envelope(envelope: Envelope, destination_id: int, voter_ids: frozenset[int], cluster_id: str) -> Message:
    """The Raft message in `envelope`, for this node; ProtocolError names what is wrong.

    The core trusts its peers' messages as Raft peers; the edge checks what a confused, foreign or
    forged sender could get wrong: the cluster; only voters vote, lead and answer fetches (an
    observer only fetches); a sender speaks for itself only (the candidate, leader or replica a
    message names is its source); epochs fit Kafka's int32 and offsets its int64, none negative."""
    body_type = RAFT_MESSAGE_TYPES.get(envelope.type)
    if body_type is None:
        known = ", ".join(sorted(RAFT_MESSAGE_TYPES))
        raise ProtocolError(f"Envelope.type {envelope.type!r} is not a Raft message; known: {known}")
    envelope.require_cluster(cluster_id)
    if envelope.source_id < 0 or envelope.source_id == destination_id:
        raise ProtocolError(f"Envelope.source_id {envelope.source_id} is not another node's id")
    if body_type not in _FROM_ANY_NODE and envelope.source_id not in voter_ids:
        raise ProtocolError(f"{envelope.type} from node {envelope.source_id}, which is not a voter "
                            f"({sorted(voter_ids)}); check controller.quorum.voters on both nodes")
    body = decode(body_type, envelope.body)
    sender_field = _SENDER_FIELDS.get(body_type)
    if sender_field is not None and getattr(body, sender_field) != envelope.source_id:
        raise ProtocolError(f"{envelope.type}.{sender_field} is {getattr(body, sender_field)} but node "
                            f"{envelope.source_id} sent it; a node speaks only for itself")
    for name in _NON_NEGATIVE_FIELDS:
        value = getattr(body, name, 0)
        if value < 0:
            raise ProtocolError(f"{envelope.type}.{name} is {value}; it must be 0 or more")
    for name, value in _integers(body, envelope.type):
        limit = INT32_MAX if name.rsplit(".", 1)[-1] in _EPOCH_FIELDS else INT64_MAX
        if value > limit:
            raise ProtocolError(f"{name} is {value}, above {limit}: out of range")
        if value < 0 and name.count(".") > 1:  # a nested OffsetAndEpoch: an epoch and an offset
            raise ProtocolError(f"{name} is {value}; it must be 0 or more")
    return Message(envelope.source_id, destination_id, body)


def _integers(value: object, where: str) -> list[tuple[str, int]]:
    """Every integer field of a decoded message, nested ones (OffsetAndEpoch) included, by path."""
    found = []
    for name in getattr(value, "__slots__", ()):
        member = getattr(value, name)
        if isinstance(member, bool):
            continue
        if isinstance(member, int):
            found.append((f"{where}.{name}", member))
        elif hasattr(member, "__slots__"):
            found.extend(_integers(member, f"{where}.{name}"))
    return found


class RaftTransport:
    """Sends one node's Raft messages (see the module docstring). Owner: the QuorumService; `send`
    is called from its task, synchronously, while a Ready is performed."""

    def __init__(self, config: NodeConfig, connections: Connections,
                 unreachable: Callable[[Unreachable], None]) -> None:
        self._config = config
        self._unreachable = unreachable
        self._connections = connections
        self._source_address = config.advertised_address(config.inter_broker_listener_name)
        self._timeout_ms = config.quorum.request_timeout_ms
        self._observer_addresses: OrderedDict[int, str] = OrderedDict()
        self._sends: set[asyncio.Task[None]] = set()
        # The last fetch delivered to each node, and the stream-closed future watched per address
        # (one callback per stream). Fetches go to voters only, which bounds both.
        self._fetches_delivered: dict[int, int] = {}
        self._streams_watched: dict[str, asyncio.Future[None]] = {}

    def learn(self, node_id: int, address: str) -> None:
        """Remember where observer `node_id` listens (voters' addresses are configured)."""
        if self._config.quorum.is_voter(node_id) or not address:
            return
        self._observer_addresses[node_id] = address
        self._observer_addresses.move_to_end(node_id)
        if len(self._observer_addresses) > OBSERVER_ADDRESSES_MAX:
            self._observer_addresses.popitem(last=False)

    def address_of(self, node_id: int) -> str | None:
        if self._config.quorum.is_voter(node_id):
            return self._config.voter_address(node_id)
        return self._observer_addresses.get(node_id)

    def send(self, message: Message) -> None:
        address = self.address_of(message.destination_id)
        if address is None or len(self._sends) >= SENDS_IN_FLIGHT_MAX:
            self._undelivered(message)  # an observer not heard from yet, or too much in flight
            return
        task = asyncio.get_running_loop().create_task(self._post(address, message))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _post(self, address: str, message: Message) -> None:
        envelope = to_envelope(message, self._source_address, self._config.cluster_id)
        try:
            await self._connections.call(address, Api.RAFT, envelope, Envelope, self._timeout_ms)
        except NodeUnavailableError as error:
            self._undelivered(message, error.refused)
            return
        except RequestRejectedError as error:
            log.warning("node %s refused Raft %s from us: %s", address, envelope.type, error)
            return
        if isinstance(message.body, FetchRequest | FetchSnapshotRequest):
            self._watch(address, message.destination_id, message.body.correlation_id)

    def _undelivered(self, message: Message, refused: bool = False) -> None:
        """A fetch or quorum probe that never left is reported (Raft asks again, maybe elsewhere,
        without waiting out the request timeout); other messages are dropped like lost packets."""
        body = message.body
        if isinstance(body, FetchRequest | FetchSnapshotRequest | QuorumProbeRequest):
            self._unreachable(Unreachable(message.destination_id, body.correlation_id, refused))

    def _watch(self, address: str, destination_id: int, correlation_id: int) -> None:
        """Report the fetch just delivered to `destination_id` if its stream closes (module docstring);
        the core ignores the report if the fetch was answered by then."""
        self._fetches_delivered[destination_id] = correlation_id
        closed = self._connections.stream_closed(address)
        if self._streams_watched.get(address) is closed:
            return
        self._streams_watched[address] = closed
        closed.add_done_callback(lambda _: self._stream_closed(address, destination_id))

    def _stream_closed(self, address: str, destination_id: int) -> None:
        watched = self._streams_watched.get(address)
        if watched is not None and watched.done():
            del self._streams_watched[address]
        correlation_id = self._fetches_delivered.pop(destination_id, None)
        if correlation_id is not None:
            self._unreachable(Unreachable(destination_id, correlation_id))

    async def close(self) -> None:
        """Cancel every send in flight."""
        sends = list(self._sends)
        for task in sends:
            task.cancel()
        await asyncio.gather(*sends, return_exceptions=True)
