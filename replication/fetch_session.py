"""ReplicaFetchers: which partitions this broker fetches from which leader, and when.

Kafka's ReplicaFetcherManager and one ReplicaFetcherThread per leader, as data: a `FetchSession`
per leader holds the partitions followed from it, each with the time its backoff ends, and at most
one fetch in flight (all its partitions in one request, as Kafka's fetcher sends). The partition
cores say whom to follow (`Ready.fetch`) and when to back off (`Ready.fetch_backoff`); the broker
core (`replica_manager.py`) builds each request from the cores' positions at send time, so a
partition that joins while a fetch is in flight goes with the next one (as in Kafka).

A fetch in flight has a deadline (`replica.fetch.wait.max.ms` + `replica.socket.timeout.ms`): past
it the fetch counts as failed and its partitions back off, and a late answer is dropped (its
`request_id` is no longer in flight). So a lost answer never stalls a session, in the node or in
the simulator, whatever the transport does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replication.ready import FollowerFetchPosition
from wire.sentinels import NO_LEADER
from wire.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class InFlightFetch:
    """A fetch sent to a leader: its id, its deadline and the position each partition fetched at."""

    request_id: int
    deadline_ms: int
    positions: tuple[tuple[TopicPartition, FollowerFetchPosition], ...]


@dataclass(slots=True)
class FetchSession:
    """The fetcher of one leader. `backoff_until_ms[tp]` is 0 when the partition may fetch now."""

    leader_id: int
    backoff_until_ms: dict[TopicPartition, int] = field(default_factory=dict)
    in_flight: InFlightFetch | None = None

    def due(self, now_ms: int) -> list[TopicPartition]:
        """The partitions that may fetch now, sorted."""
        return sorted(tp for tp, until_ms in self.backoff_until_ms.items() if until_ms <= now_ms)

    def next_time_ms(self, now_ms: int) -> int | None:
        """When this session next has something to do: its deadline, or the first backoff's end."""
        if self.in_flight is not None:
            return self.in_flight.deadline_ms
        ends = [until_ms for until_ms in self.backoff_until_ms.values() if until_ms > now_ms]
        return min(ends, default=None)


class ReplicaFetchers:
    """Every session of this broker, keyed by leader; a partition is in at most one.

    Invariants: `leader_of[tp] == L` iff `tp` is in session L; a session without partitions and
    without a fetch in flight is removed (Kafka's shutdownIdleFetcherThreads)."""

    def __init__(self) -> None:
        self.sessions: dict[int, FetchSession] = {}
        self.leader_of: dict[TopicPartition, int] = {}

    def follow(self, topic_partition: TopicPartition, leader_id: int) -> None:
        """File `topic_partition` under `leader_id` (NO_LEADER: fetch it from nowhere)."""
        current = self.leader_of.get(topic_partition, NO_LEADER)
        if current == leader_id:
            return
        if current != NO_LEADER:
            session = self.sessions[current]
            del session.backoff_until_ms[topic_partition]
            del self.leader_of[topic_partition]
            self._drop_if_idle(session)
        if leader_id != NO_LEADER:
            session = self.sessions.setdefault(leader_id, FetchSession(leader_id))
            session.backoff_until_ms[topic_partition] = 0
            self.leader_of[topic_partition] = leader_id

    def back_off(self, topic_partition: TopicPartition, until_ms: int) -> None:
        leader_id = self.leader_of.get(topic_partition)
        if leader_id is not None:
            session = self.sessions[leader_id]
            session.backoff_until_ms[topic_partition] = max(session.backoff_until_ms[topic_partition], until_ms)

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
        """The fetches in flight past their deadline, now given up."""
        expired = []
        for session in self.sessions.values():
            if session.in_flight is not None and session.in_flight.deadline_ms <= now_ms:
                expired.append((session, session.in_flight))
                session.in_flight = None
        return expired

    def drop_idle(self) -> None:
        for session in list(self.sessions.values()):
            self._drop_if_idle(session)

    def next_time_ms(self, now_ms: int) -> int | None:
        times = [session.next_time_ms(now_ms) for session in self.sessions.values()]
        return min((time for time in times if time is not None), default=None)

    def clear(self) -> None:
        self.sessions.clear()
        self.leader_of.clear()

    def _drop_if_idle(self, session: FetchSession) -> None:
        if not session.backoff_until_ms and session.in_flight is None:
            del self.sessions[session.leader_id]
