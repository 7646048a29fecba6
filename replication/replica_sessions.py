"""ReplicaSessionCache: the leader's half of KIP-227 incremental fetch sessions with its followers.

Theory of operation. A follower's fetcher (fetch_session.py) opens one session per leader with a
full fetch (epoch 0) that lists every partition it fetches from this broker; the leader answers
all of them and, from then on, keeps each partition's last fetch (`parts`) and the HW and
logStartOffset it last answered (`answered`). Each next fetch (epoch 1, 2, ...) lists only
partitions added or whose position moved, and those to forget. What an incremental fetch reads:

- `dirty`: partitions listed since the last answer, and partitions that changed on this broker
  (log, HW, role, epoch, ISR: `mark_changed`) since then;
- `sticky`: partitions that were not quiet when last read (records, an error, a diverging epoch,
  or an ISR without this follower): read on every fetch, as Kafka reads every partition of a
  session on every fetch, so records the follower could not append come again and it rejoins
  the ISR at once;

The others (quiet: the follower at the leader's log end and in the ISR) are not read, so their
cores do not see the follower's fetches. Kafka records every fetch in every partition of the
session; what it feeds is the follower's caught-up time, which matters only once the leader's log
end moves past the follower (`ReplicaState.is_caught_up`). So before an append to a quiet
partition the broker reads it for each live session that did not read it at its latest fetch
(`needs_refresh`), at the time that fetch arrived (or the core's own later time: its clock never
goes back): the core then takes the follower as caught up then, as Kafka would, not at the last
read before a quiet spell (which would shrink the ISR at the first append). A session is live
while its fetch is parked here, or within `refresh_window_ms` (replica.lag.time.max.ms / 10) of
its last answer, which bounds how much later than in Kafka a follower that stopped fetching can
leave the ISR when the core's clock was past its last fetch.

The answer lists only partitions with news (records, an error, a diverging epoch, a logStartOffset
above the follower's, a changed HW or logStartOffset; Kafka's CachedPartition.maybeUpdateResponseData).
An idle follower's fetch so reads a few partitions and is answered empty at its deadline, instead
of reading, encoding and applying every partition twice per `replica.fetch.wait.max.ms`.

Errors: an unknown session id, one opened by another replica or another process of it (broker
epoch) is FETCH_SESSION_ID_NOT_FOUND; another epoch than expected INVALID_FETCH_SESSION_EPOCH; the
follower then opens a new session. A replica has at most one session here (a new full fetch closes
its old one); at most `max_sessions`, the least recently used evicted first. Ids are numbered, not
drawn: a session is found by id and checked against its replica, broker epoch and epoch, so an id
reused after a restart of this broker is refused like an unknown one. Pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from replication.broker_ready import PartAnswer
from replication.events import FollowerFetch
from replication.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from replication.ready import FetchResult
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

REFRESH_WINDOW_FRACTION = 10  # refresh_window_ms = replica.lag.time.max.ms // REFRESH_WINDOW_FRACTION
MAX_SESSIONS = 1_000


@dataclass(frozen=True, slots=True)
class SessionFetchRef:
    """A follower fetch's session fields (Kafka's FetchMetadata and ForgottenTopicsData) and the
    broker epoch it was sent with (KIP-903: the session belongs to that process of the follower)."""

    session_id: int
    epoch: int
    forgotten: tuple[TopicPartition, ...] = ()
    broker_epoch: int = -1


@dataclass(slots=True)
class ReplicaSession:
    """One follower's session; a full session (`full`) has not been answered yet and reads all its
    parts. `read_at_arrival`: the partitions read when its latest fetch arrived (at `last_used_ms`);
    `parked`: that fetch waits here; `answered_ms`: when the last one was answered."""

    session_id: int
    replica_id: int
    broker_epoch: int
    epoch: int
    parts: dict[TopicPartition, FollowerFetch]
    last_used_ms: int
    full: bool = True
    answered: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    dirty: set[TopicPartition] = field(default_factory=set)
    sticky: set[TopicPartition] = field(default_factory=set)
    read_at_arrival: set[TopicPartition] = field(default_factory=set)
    parked: bool = False
    answered_ms: int = -1

    def reads(self, now_ms: int, arrived: bool) -> list[TopicPartition]:
        """The partitions to read for the fetch in hand, sorted: all of a full session, else the
        dirty and sticky ones (see the module docstring). `arrived`: the fetch just came."""
        chosen = sorted(self.parts) if self.full else sorted(self.dirty | self.sticky)
        if arrived:
            self.last_used_ms = now_ms
            self.read_at_arrival = set(chosen)
        return chosen

    def needs_refresh(self, topic_partition: TopicPartition, leader_end_offset: int, now_ms: int,
                      window_ms: int) -> FollowerFetch | None:
        """The cached fetch to read `topic_partition` with before an append to it, if the session
        is live and its latest fetch did not read it while the follower is at `leader_end_offset`."""
        part = self.parts.get(topic_partition)
        if part is None or topic_partition in self.read_at_arrival or part.fetch_offset != leader_end_offset:
            return None
        if not self.parked and now_ms - self.answered_ms > window_ms:
            return None
        self.read_at_arrival.add(topic_partition)
        return part

    def news(self, answer: PartAnswer, part: FollowerFetch) -> bool:
        """Whether a read of one partition has something for the follower."""
        result = answer.result
        assert isinstance(result, FetchResult), result
        if result.error != ErrorCode.NONE or result.records or result.diverging_epoch is not None:
            return True
        if result.log_start_offset > part.log_start_offset:
            return True
        return self.answered.get(answer.topic_partition) != (result.high_watermark, result.log_start_offset)

    def answer(self, answers: Iterable[PartAnswer], now_ms: int) -> tuple[PartAnswer, ...]:
        """The parts to answer from the reads of this fetch (all of a full fetch; the ones with news
        of an incremental one); the cache takes the values answered and nothing stays dirty."""
        listed = []
        for answer in answers:
            part = self.parts.get(answer.topic_partition)
            if part is None:
                continue
            if self.full or self.news(answer, part):
                result = answer.result
                assert isinstance(result, FetchResult), result
                # A follower takes no HW from an error or a diverging epoch (it truncates first), so
                # such an answer caches nothing and the HW is news again next time.
                unapplied = result.error != ErrorCode.NONE or result.diverging_epoch is not None
                self.answered[answer.topic_partition] = (-1, -1) if unapplied else (result.high_watermark,
                                                                                     result.log_start_offset)
                listed.append(answer)
        self.full = False
        self.dirty.clear()
        self.parked = False
        self.answered_ms = now_ms
        return tuple(listed)

    def park(self, answers: Iterable[PartAnswer]) -> None:
        """The fetch waits: only reads with news need reading again when it is answered (a partition
        that changes meanwhile is marked dirty again)."""
        self.parked = True
        if self.full:
            return
        self.dirty = {answer.topic_partition for answer in answers
                      if answer.topic_partition in self.parts and self.news(answer, self.parts[answer.topic_partition])}


class ReplicaSessionCache:
    """The follower sessions of this broker, by id and by replica."""

    def __init__(self, refresh_window_ms: int, max_sessions: int = MAX_SESSIONS) -> None:
        assert refresh_window_ms >= 0, f"refresh_window_ms={refresh_window_ms}"
        assert max_sessions > 0, f"max_sessions={max_sessions}"
        self.refresh_window_ms = refresh_window_ms
        self.max_sessions = max_sessions
        self.sessions: dict[int, ReplicaSession] = {}
        self._by_replica: dict[int, int] = {}
        self._last_id = INVALID_SESSION_ID

    def begin(self, replica_id: int, ref: SessionFetchRef, parts: Iterable[tuple[TopicPartition, FollowerFetch]],
              now_ms: int) -> ReplicaSession | ErrorCode:
        """The session of a follower's fetch with `ref` (epoch 0: a new one), updated with the
        partitions it lists and forgets; or the error to answer."""
        assert ref.epoch != FINAL_EPOCH, "a sessionless fetch has no session"
        if ref.epoch == INITIAL_EPOCH:
            self._close(ref.session_id)
            self._close(self._by_replica.get(replica_id, INVALID_SESSION_ID))
            self._evict_if_full()
            self._last_id = self._last_id % (2**31 - 1) + 1
            session = ReplicaSession(self._last_id, replica_id, ref.broker_epoch, next_epoch(INITIAL_EPOCH),
                                     dict(parts), now_ms)
            self.sessions[session.session_id] = session
            self._by_replica[replica_id] = session.session_id
            return session
        session = self.sessions.get(ref.session_id)
        if session is None or session.replica_id != replica_id or session.broker_epoch != ref.broker_epoch:
            return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != ref.epoch:
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH
        session.epoch = next_epoch(session.epoch)
        for topic_partition in ref.forgotten:
            session.parts.pop(topic_partition, None)
            session.answered.pop(topic_partition, None)
            session.dirty.discard(topic_partition)
            session.sticky.discard(topic_partition)
        for topic_partition, part in parts:
            session.parts.pop(topic_partition, None)
            session.parts[topic_partition] = part
            session.dirty.add(topic_partition)
        return session

    def refreshes(self, topic_partition: TopicPartition, leader_end_offset: int,
                  now_ms: int) -> list[tuple[int, FollowerFetch]]:
        """The reads to do before an append to `topic_partition`, each with the time its session's
        latest fetch arrived (see the module docstring)."""
        refreshes = []
        for session in self.sessions.values():
            part = session.needs_refresh(topic_partition, leader_end_offset, now_ms, self.refresh_window_ms)
            if part is not None:
                refreshes.append((session.last_used_ms, part))
        return refreshes

    def mark_changed(self, changed: set[TopicPartition]) -> None:
        """Partitions whose log, HW, role, epoch or ISR changed: each session holding one reads it
        at its next fetch (or wakes its parked one)."""
        if not changed:
            return
        for session in self.sessions.values():
            for topic_partition in changed:
                if topic_partition in session.parts:
                    session.dirty.add(topic_partition)

    def clear(self) -> None:
        self.sessions.clear()
        self._by_replica.clear()

    def _close(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None and self._by_replica.get(session.replica_id) == session_id:
            del self._by_replica[session.replica_id]

    def _evict_if_full(self) -> None:
        if len(self.sessions) >= self.max_sessions:
            oldest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.session_id))
            self._close(oldest.session_id)
