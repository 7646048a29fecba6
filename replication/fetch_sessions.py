"""KIP-227 incremental fetch sessions of one broker: what a Fetch reads and what its answer lists.

Theory of operation. A client's Fetch carries a session id and epoch (Kafka's FetchMetadata):
- id 0, epoch -1: sessionless; read and answer every partition the request names.
- epoch 0 (any id): a full fetch that asks for a new session; a session named by the id is closed
  first. Its partitions are read and all answered; once answered, a session holding them (with the
  HW and logStartOffset the answer carried) is created if the cache has room, and its id is in the
  answer (0: none was made). Its next expected epoch is 1.
- epoch > 0: an incremental fetch of session `id`: the request lists only partitions added or
  changed (fetch offset, max bytes, epochs) and those to forget. An unknown id is
  FETCH_SESSION_ID_NOT_FOUND, another epoch than expected INVALID_FETCH_SESSION_EPOCH (the session
  stays). Otherwise the session is updated and every one of its partitions is read, but the answer
  lists only those with news: records, an error, a changed HW or logStartOffset, a preferred read
  replica or a diverging epoch (Kafka's CachedPartition.maybeUpdateResponseData); those move to the
  end of the session's order, so a next read of limited size starts with the others (Kafka's
  round robin). A session left empty is closed and the fetch answered as sessionless.

The cache holds at most `max.incremental.fetch.session.cache.slots` sessions (0 turns sessions
off). A new session finds room by evicting, as Kafka's FetchSessionCache.tryEvict: the least
recently used session idle longer than `eviction_ms`; else the least valuable session, ordered by
(privileged, partitions, id), if the new one is worth more (privileged over not, else more
partitions) and that session is older than `eviction_ms` (a non-privileged newcomer never evicts a
privileged one; a privileged one may evict any non-privileged one). Kafka re-files a session among
the evictable ones only when it is used; here eligibility is judged with the time of the request.

Pure: the caller passes the time (monotonic ms) and a random source for session ids; one owner,
no locks (the broker's event loop runs `begin` and `complete` synchronously).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from replication.broker_ready import NO_PREFERRED_READ_REPLICA
from replication.consumer_groups import RandomSource
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's min.incremental.fetch.session.eviction.ms default
_SESSION_ID_BITS = 31


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: epochs count up from 1 and wrap to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 2**31 - 1 else epoch + 1


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """What a Fetch asks of one partition (the fields a session remembers)."""

    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """What reading one partition gave: what an incremental answer compares with the session."""

    error: ErrorCode
    records_bytes: int
    high_watermark: int
    log_start_offset: int
    preferred_read_replica: int = NO_PREFERRED_READ_REPLICA
    diverging: bool = False


@dataclass(slots=True)
class CachedPartition:
    """A session's partition: the request's fields and the HW and logStartOffset last answered
    (-1 after an error, so the partition is answered again once the error is gone)."""

    request: PartitionFetch
    high_watermark: int = -1
    log_start_offset: int = -1

    def must_answer(self, read: PartitionRead) -> bool:
        """Whether `read` has news for the client; the cached values take the answer's."""
        news = (read.records_bytes > 0 or read.error != ErrorCode.NONE or read.diverging
                or read.preferred_read_replica != NO_PREFERRED_READ_REPLICA
                or read.high_watermark != self.high_watermark or read.log_start_offset != self.log_start_offset)
        self.high_watermark = -1 if read.error != ErrorCode.NONE else read.high_watermark
        self.log_start_offset = read.log_start_offset
        return news


@dataclass(slots=True)
class CachedFetchSession:
    """One cached session: `epoch` is the one its next incremental fetch must carry."""

    session_id: int
    privileged: bool
    created_ms: int
    last_used_ms: int
    epoch: int
    partitions: dict[TopicPartition, CachedPartition] = field(default_factory=dict)


class ContextKind(enum.Enum):
    SESSIONLESS = "sessionless"
    FULL = "full"
    INCREMENTAL = "incremental"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class FetchContext:
    """How one Fetch is served (Kafka's FetchContext): the partitions to read, in order, and for an
    incremental fetch its session; ERROR: answer `error` alone, reading nothing."""

    kind: ContextKind
    partitions: tuple[tuple[TopicPartition, PartitionFetch], ...] = ()
    error: ErrorCode = ErrorCode.NONE
    privileged: bool = False
    session: CachedFetchSession | None = None


@dataclass(frozen=True, slots=True)
class FetchAnswerPlan:
    """The answer's session id and the partitions it lists, in order."""

    session_id: int
    partitions: tuple[TopicPartition, ...]


class FetchSessionCache:
    """The broker's sessions by id. Invariant: at most `max_slots` sessions, each id > 0."""

    def __init__(self, max_slots: int, rng: RandomSource, eviction_ms: int = EVICTION_MS) -> None:
        assert max_slots >= 0, f"max_slots={max_slots}"
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._rng = rng
        self.sessions: dict[int, CachedFetchSession] = {}
        self.evictions = 0

    def begin(self, session_id: int, epoch: int, partitions: Iterable[tuple[TopicPartition, PartitionFetch]],
              forgotten: Iterable[TopicPartition], privileged: bool, now_ms: int) -> FetchContext:
        """The context of a Fetch with this session id and epoch (see the module docstring)."""
        requested = tuple(partitions)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.sessions.pop(session_id, None)
            kind = ContextKind.SESSIONLESS if epoch == FINAL_EPOCH else ContextKind.FULL
            return FetchContext(kind, requested, privileged=privileged)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext(ContextKind.ERROR, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(ContextKind.ERROR, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        for topic_partition, fetch in requested:
            cached = session.partitions.get(topic_partition)
            if cached is None:
                session.partitions[topic_partition] = CachedPartition(fetch)
            else:
                cached.request = fetch
        for topic_partition in forgotten:
            session.partitions.pop(topic_partition, None)
        if not session.partitions:
            del self.sessions[session_id]
            return FetchContext(ContextKind.SESSIONLESS, requested, privileged=privileged)
        session.last_used_ms = now_ms
        session.epoch = next_epoch(session.epoch)
        reads = tuple((tp, cached.request) for tp, cached in session.partitions.items())
        return FetchContext(ContextKind.INCREMENTAL, reads, privileged=session.privileged, session=session)

    def complete(self, context: FetchContext, reads: Mapping[TopicPartition, PartitionRead],
                 now_ms: int) -> FetchAnswerPlan:
        """What to answer once `context`'s partitions were read (`reads` has each of them)."""
        match context.kind:
            case ContextKind.ERROR:
                return FetchAnswerPlan(INVALID_SESSION_ID, ())
            case ContextKind.SESSIONLESS:
                return FetchAnswerPlan(INVALID_SESSION_ID, tuple(tp for tp, _ in context.partitions))
            case ContextKind.FULL:
                return FetchAnswerPlan(self._create(context, reads, now_ms), tuple(tp for tp, _ in context.partitions))
        session = context.session
        assert session is not None, "an incremental context has its session"
        answered = []
        for topic_partition, _ in context.partitions:
            cached = session.partitions.get(topic_partition)
            if cached is not None and cached.must_answer(reads[topic_partition]):
                answered.append(topic_partition)
                session.partitions[topic_partition] = session.partitions.pop(topic_partition)
        return FetchAnswerPlan(session.session_id, tuple(answered))

    def _create(self, context: FetchContext, reads: Mapping[TopicPartition, PartitionRead], now_ms: int) -> int:
        """A new session for a full fetch's partitions, if there is room (else INVALID_SESSION_ID)."""
        size = len(context.partitions)
        if len(self.sessions) >= self.max_slots and not self._evict_one(context.privileged, size, now_ms):
            return INVALID_SESSION_ID
        session_id = self._new_session_id()
        session = CachedFetchSession(session_id, context.privileged, now_ms, now_ms, next_epoch(INITIAL_EPOCH))
        for topic_partition, fetch in context.partitions:
            read = reads[topic_partition]
            session.partitions[topic_partition] = CachedPartition(
                fetch, -1 if read.error != ErrorCode.NONE else read.high_watermark, read.log_start_offset)
        self.sessions[session_id] = session
        assert len(self.sessions) <= self.max_slots, f"{len(self.sessions)} sessions > {self.max_slots} slots"
        return session_id

    def _evict_one(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Kafka's tryEvict (see the module docstring): True if a session made room."""
        if not self.sessions:
            return False
        stale = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.session_id))
        if now_ms - stale.last_used_ms > self.eviction_ms:
            return self._evict(stale)
        evictable = [s for s in self.sessions.values()
                     if now_ms - s.created_ms > self.eviction_ms or (privileged and not s.privileged)]
        if not evictable:
            return False
        least = min(evictable, key=lambda s: (s.privileged, len(s.partitions), s.session_id))
        if (privileged, size) <= (least.privileged, len(least.partitions)):
            return False
        return self._evict(least)

    def _evict(self, session: CachedFetchSession) -> bool:
        del self.sessions[session.session_id]
        self.evictions += 1
        return True

    def _new_session_id(self) -> int:
        while True:
            session_id = self._rng.getrandbits(_SESSION_ID_BITS)
            if session_id != INVALID_SESSION_ID and session_id not in self.sessions:
                return session_id
