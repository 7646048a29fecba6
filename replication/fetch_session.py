"""ReplicaFetchers: which partitions this broker fetches from which leader, and when.

Kafka's ReplicaFetcherManager and one ReplicaFetcherThread per leader, as data: a `FetchSession`
per leader holds the partitions followed from it, each with the time its backoff ends, and at most
one fetch in flight (all its partitions in one request, as Kafka's fetcher sends). The partition
cores say whom to follow (`Ready.fetch`) and when to back off (`Ready.fetch_backoff`); the broker
core (`replica_manager.py`) builds each request from the cores' positions at send time, so a
partition that joins while a fetch is in flight goes with the next one (as in Kafka).

Each session is also the follower's half of a KIP-227 incremental fetch session with its leader
(Kafka's FetchSessionHandler): the first fetch is full (epoch 0) and lists every fetchable
partition; once the leader has answered with a session id, each next fetch lists only partitions
added or whose position changed since the last one, and those to forget (backing off or no longer
followed); the leader then answers only partitions with news. An idle fetch so lists nothing, and
building it looks only at the partitions stepped since the last one (`stale`), not at all of them.
A failed, expired or refused fetch resets the session: the next one is full again.

A fetch in flight has a deadline (`replica.fetch.wait.max.ms` + `replica.socket.timeout.ms`): past
it the fetch counts as failed and its partitions back off, and a late answer is dropped (its
`request_id` is no longer in flight). So a lost answer never stalls a session, in the node or in
the simulator, whatever the transport does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from replication.ready import FollowerFetchPosition
from wire.sentinels import NO_LEADER
from wire.topic_partition import TopicPartition

INVALID_SESSION_ID = 0  # Kafka's FetchMetadata: no session
INITIAL_EPOCH = 0  # a full fetch that asks for a session
FINAL_EPOCH = -1  # a sessionless fetch


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: epochs count up from 1 and wrap to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 2**31 - 1 else epoch + 1


@dataclass(frozen=True, slots=True)
class InFlightFetch:
    """A fetch sent to a leader: its id, its deadline and the position each partition of the
    leader's session fetches at (all of them, listed in the request or not; a map, as the answer
    looks its partitions up in it); `full` for epoch 0."""

    request_id: int
    deadline_ms: int
    positions: Mapping[TopicPartition, FollowerFetchPosition]
    full: bool = True


@dataclass(frozen=True, slots=True)
class SessionFetch:
    """What one fetch of a session sends: its session id and epoch, the partitions it lists (all on
    a full fetch, else the added and changed ones) and those it forgets; `positions` is a copy of
    `FetchSession.sent` (a dict copy: this runs on every fetch, over every partition of the
    session)."""

    session_id: int
    epoch: int
    listed: tuple[tuple[TopicPartition, FollowerFetchPosition], ...]
    forgotten: tuple[TopicPartition, ...]
    positions: Mapping[TopicPartition, FollowerFetchPosition]


@dataclass(slots=True)
class FetchSession:
    """The fetcher of one leader. `backoff_until_ms[tp]` is 0 when the partition may fetch now;
    `backing_off` holds those with a backoff end; `sent` the positions the leader's session holds;
    `stale` the partitions whose position or fetchability may have changed since the last fetch."""

    leader_id: int
    backoff_until_ms: dict[TopicPartition, int] = field(default_factory=dict)
    in_flight: InFlightFetch | None = None
    backing_off: set[TopicPartition] = field(default_factory=set)
    session_id: int = INVALID_SESSION_ID
    epoch: int = INITIAL_EPOCH
    sent: dict[TopicPartition, FollowerFetchPosition] = field(default_factory=dict)
    stale: set[TopicPartition] = field(default_factory=set)

    def due(self, now_ms: int) -> list[TopicPartition]:
        """The partitions that may fetch now, sorted."""
        return sorted(tp for tp, until_ms in self.backoff_until_ms.items() if until_ms <= now_ms)

    def next_time_ms(self, now_ms: int) -> int | None:
        """When this session next has something to do: its deadline, or the first backoff's end."""
        if self.in_flight is not None:
            return self.in_flight.deadline_ms
        if not self.backing_off:
            return None
        ends = [self.backoff_until_ms[tp] for tp in self.backing_off if self.backoff_until_ms[tp] > now_ms]
        return min(ends, default=None)

    def build(self, now_ms: int, position_of: Callable[[TopicPartition], FollowerFetchPosition]) -> SessionFetch | None:
        """The next fetch (None: no partition may fetch now). Looks only at `stale` partitions (and
        all of them on a full fetch); `sent` becomes what the leader's session will hold."""
        for topic_partition in [tp for tp in self.backing_off if self.backoff_until_ms[tp] <= now_ms]:
            self.backing_off.discard(topic_partition)
            self.backoff_until_ms[topic_partition] = 0
            self.stale.add(topic_partition)
        if len(self.backing_off) == len(self.backoff_until_ms):
            return None
        full = self.session_id == INVALID_SESSION_ID or self.epoch == INITIAL_EPOCH
        if full:
            self.sent.clear()
            self.stale.update(self.backoff_until_ms)
        listed, forgotten = [], []
        for topic_partition in sorted(self.stale):
            fetchable = self.backoff_until_ms.get(topic_partition) == 0
            if not fetchable:
                if self.sent.pop(topic_partition, None) is not None:
                    forgotten.append(topic_partition)
                continue
            position = position_of(topic_partition)
            if self.sent.get(topic_partition) != position:
                self.sent[topic_partition] = position
                listed.append((topic_partition, position))
        self.stale.clear()
        return SessionFetch(self.session_id, self.epoch, tuple(listed), tuple(forgotten), dict(self.sent))

    def answered(self, session_id: int) -> None:
        """The leader answered the fetch in flight: a full fetch's answer names the new session
        (INVALID_SESSION_ID: none was made, the next fetch is full again)."""
        if self.epoch == INITIAL_EPOCH or self.session_id == INVALID_SESSION_ID:
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH if session_id == INVALID_SESSION_ID else next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)

    def reset(self) -> None:
        """The leader's session state is unknown (a failed or refused fetch): the next one is full,
        with epoch 0 and the old id, which closes the old session (Kafka's handleError)."""
        self.epoch = INITIAL_EPOCH
        self.sent.clear()
        self.stale.update(self.backoff_until_ms)


class ReplicaFetchers:
    """Every session of this broker, keyed by leader; a partition is in at most one.

    Invariants: `leader_of[tp] == L` iff `tp` is in session L; a session without partitions and
    without a fetch in flight is removed (Kafka's shutdownIdleFetcherThreads)."""

    def __init__(self) -> None:
        self.sessions: dict[int, FetchSession] = {}
        self.leader_of: dict[TopicPartition, int] = {}

    def follow(self, topic_partition: TopicPartition, leader_id: int) -> None:
        """File `topic_partition` under `leader_id` (NO_LEADER: fetch it from nowhere). Called after
        every step of the partition's core: its position may have changed."""
        current = self.leader_of.get(topic_partition, NO_LEADER)
        if current == leader_id:
            if current != NO_LEADER:
                self.sessions[current].stale.add(topic_partition)
            return
        if current != NO_LEADER:
            session = self.sessions[current]
            del session.backoff_until_ms[topic_partition]
            session.backing_off.discard(topic_partition)
            session.stale.add(topic_partition)
            del self.leader_of[topic_partition]
            self._drop_if_idle(session)
        if leader_id != NO_LEADER:
            session = self.sessions.setdefault(leader_id, FetchSession(leader_id))
            session.backoff_until_ms[topic_partition] = 0
            session.stale.add(topic_partition)
            self.leader_of[topic_partition] = leader_id

    def back_off(self, topic_partition: TopicPartition, until_ms: int) -> None:
        leader_id = self.leader_of.get(topic_partition)
        if leader_id is not None:
            session = self.sessions[leader_id]
            session.backoff_until_ms[topic_partition] = max(session.backoff_until_ms[topic_partition], until_ms)
            if session.backoff_until_ms[topic_partition] > 0:
                session.backing_off.add(topic_partition)
                session.stale.add(topic_partition)

    def sent(self, session: FetchSession, fetch: InFlightFetch) -> None:
        assert session.in_flight is None, f"leader {session.leader_id} has a fetch in flight"
        session.in_flight = fetch

    def take_answer(self, request_id: int) -> tuple[FetchSession, InFlightFetch] | None:
        """The session whose fetch in flight is `request_id`, now answered (None: late or unknown)."""
        for session in self.sessions.values():
            if session.in_flight is not None and session.in_flight.request_id == request_id:
                fetch, session.in_flight = session.in_flight, None
                return session, fetch
        return None

    def take_expired(self, now_ms: int) -> list[tuple[FetchSession, InFlightFetch]]:
        """The fetches in flight past their deadline, now given up (their sessions reset)."""
        expired = []
        for session in self.sessions.values():
            if session.in_flight is not None and session.in_flight.deadline_ms <= now_ms:
                expired.append((session, session.in_flight))
                session.in_flight = None
                session.reset()
        return expired

    def drop_idle(self) -> None:
        for session in list(self.sessions.values()):
            self._drop_if_idle(session)

    def next_time_ms(self, now_ms: int) -> int | None:
        earliest = None
        for session in self.sessions.values():
            time = session.next_time_ms(now_ms)
            if time is not None and (earliest is None or time < earliest):
                earliest = time
        return earliest

    def clear(self) -> None:
        self.sessions.clear()
        self.leader_of.clear()

    def _drop_if_idle(self, session: FetchSession) -> None:
        if not session.backoff_until_ms and session.in_flight is None:
            del self.sessions[session.leader_id]
