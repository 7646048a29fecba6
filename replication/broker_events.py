"""The inputs of the broker core (`ReplicaManager.handle`): frozen dataclasses, one per event.

Clients' requests span partitions (`ClientRequest`): each part is the partition core's own event
(events.py) for one partition; the broker routes it, waits for its completion and answers the
request once every part is answered (`ClientAnswer`). The replica fetchers' and the controller's
answers come back as `ReplicaFetchAnswer` and `AlterPartitionAnswer`, paired with what the core
sent by `request_id`. `MetadataChanged` carries the metadata after a change, `LeaseChanged` the
broker's lease (replication/lease.py); `Tick` (events.py)
says time passed; `RunRetention` (events.py) runs the leaders' retention; `Shutdown` stops it all.
"""

from __future__ import annotations

from dataclasses import dataclass

from replication.broker_ready import ClientAnswer, ReplicaFetchSend
from replication.events import FollowerFetch, PartitionRequest
from replication.metadata_view import MetadataView
from replication.ready import FetchResult
from replication.replica_sessions import SessionFetchRef
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class MetadataChanged:
    """The metadata changed (or this broker registered): `broker_epoch` is this broker's registration
    (-1: none yet). The core applies it once it includes that registration (KRaft brokers catch up to
    it before publishing), so a restarted broker never acts on partition states older than its
    re-registration."""

    metadata: MetadataView
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class LeaseChanged:
    """The lifecycle granted (or ended) this broker's lease: it holds until `until_ms` (-1: none).
    See replication/lease.py."""

    until_ms: int


@dataclass(frozen=True, slots=True)
class FetchWait:
    """A Fetch request's long poll (Kafka's DelayedFetch): answered once `min_bytes` are readable over
    its partitions (at most `max_bytes` in all), a partition has an error or news for a follower, or
    `max_wait_ms` passed. `replica_id`: CONSUMER_REPLICA_ID or the fetching follower's broker id;
    `rack_id`: a consumer's rack (KIP-392); `session`: a follower's KIP-227 session fields (None:
    sessionless)."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    rack_id: str = ""
    session: SessionFetchRef | None = None


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """A request over partitions. Each part's `request_id` is ignored (the core numbers parts
    itself). A Fetch has `wait` and parts that are all `ConsumerFetch` (consumer) or all
    `FollowerFetch` (follower); other requests have `wait` None."""

    request_id: int
    parts: tuple[tuple[TopicPartition, PartitionRequest], ...]
    wait: FetchWait | None = None


def replica_fetch_request(send: ReplicaFetchSend, request_id: int) -> ClientRequest:
    """The `ClientRequest` a leader's core takes for a follower's `send` (a transport that carries
    the core's own types end to end, such as the simulator's, uses this)."""
    parts = tuple((topic_partition, FollowerFetch.from_position(position, 0, send.broker_epoch))
                  for topic_partition, position in send.positions)
    wait = FetchWait(send.replica_id, send.max_wait_ms, send.min_bytes, send.max_bytes,
                     session=SessionFetchRef(send.session_id, send.session_epoch, send.forgotten, send.broker_epoch))
    return ClientRequest(request_id, parts, wait)


@dataclass(frozen=True, slots=True)
class ReplicaFetchAnswer:
    """A leader's answer to `ReplicaFetchSend` `request_id`: a result per partition (of an
    incremental fetch: those with news) and the fetch session's id, or `error` (with no results)
    when the leader could not be reached, did not answer in time or refused the session."""

    request_id: int
    results: tuple[tuple[TopicPartition, FetchResult], ...] = ()
    error: ErrorCode = ErrorCode.NONE
    error_message: str = ""
    session_id: int = 0

    @staticmethod
    def of(request_id: int, answer: ClientAnswer) -> ReplicaFetchAnswer:
        """The follower-side event for the leader's answer to `replica_fetch_request`."""
        results = []
        for part in answer.parts:
            assert isinstance(part.result, FetchResult), part
            results.append((part.topic_partition, part.result))
        return ReplicaFetchAnswer(request_id, tuple(results), answer.error, session_id=answer.session_id)


@dataclass(frozen=True, slots=True)
class AlterPartitionAnswer:
    """The controller's answer to `AlterPartitionSend` `request_id` for its one partition: NONE with
    the partition's state after the change, or an error (REQUEST_TIMED_OUT when none came)."""

    request_id: int
    error: ErrorCode
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Shutdown:
    """The broker stops: parked fetches are answered with what they can read, every partition core
    stops (parked produces and DeleteRecords: NOT_LEADER_OR_FOLLOWER), fetching ends. The logs stay
    open for the LogManager's own shutdown."""
