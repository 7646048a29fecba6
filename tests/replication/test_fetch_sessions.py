"""KIP-227 fetch sessions (replication/fetch_sessions.py): full, incremental and sessionless fetches,
session errors, and the cache's bound and eviction order, with hand-built reads and times."""

from __future__ import annotations

import random

from replication.fetch_sessions import (
    EVICTION_MS,
    INVALID_SESSION_ID,
    ContextKind,
    FetchSessionCache,
    PartitionFetch,
    PartitionRead,
    next_epoch,
)
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def fetch(offset: int = 0) -> PartitionFetch:
    return PartitionFetch(fetch_offset=offset, partition_max_bytes=1024)


def read(hw: int = 10, records: int = 0, lso: int = 0, error: ErrorCode = ErrorCode.NONE,
         preferred: int = -1) -> PartitionRead:
    return PartitionRead(error, records, hw, lso, preferred)


def full(cache: FetchSessionCache, parts: list[TopicPartition], now_ms: int = 0, privileged: bool = False,
         reads: dict[TopicPartition, PartitionRead] | None = None, session_id: int = 0) -> int:
    context = cache.begin(session_id, 0, [(tp, fetch()) for tp in parts], [], privileged, now_ms)
    assert context.kind is ContextKind.FULL
    plan = cache.complete(context, reads or {tp: read() for tp in parts}, now_ms)
    assert plan.partitions == tuple(parts)
    return plan.session_id


def test_a_full_fetch_creates_a_session_whose_incremental_fetches_list_only_partitions_with_news() -> None:
    cache = FetchSessionCache(10, random.Random(1))
    session_id = full(cache, [A, B, C])
    assert session_id != INVALID_SESSION_ID
    context = cache.begin(session_id, 1, [], [], False, 5)
    assert context.kind is ContextKind.INCREMENTAL
    assert [tp for tp, _ in context.partitions] == [A, B, C]  # every session partition is read
    plan = cache.complete(context, {A: read(records=100), B: read(), C: read(hw=11)}, 5)
    assert plan == type(plan)(session_id, (A, C))
    # A and C moved to the end of the session's order; B (unchanged) is read first next time.
    context = cache.begin(session_id, 2, [], [], False, 6)
    assert [tp for tp, _ in context.partitions] == [B, A, C]
    assert cache.complete(context, {A: read(), B: read(), C: read(hw=11)}, 6).partitions == ()


def test_an_incremental_fetch_updates_adds_and_forgets_partitions() -> None:
    cache = FetchSessionCache(10, random.Random(1))
    session_id = full(cache, [A, B])
    context = cache.begin(session_id, 1, [(A, fetch(7)), (C, fetch(3))], [B], False, 1)
    assert dict(context.partitions) == {A: fetch(7), C: fetch(3)}
    plan = cache.complete(context, {A: read(), C: read()}, 1)
    assert plan.partitions == (C,)  # new in the session: its HW was never answered


def test_errors_preferred_replicas_and_log_start_changes_are_always_answered() -> None:
    cache = FetchSessionCache(10, random.Random(1))
    session_id = full(cache, [A, B, C])
    context = cache.begin(session_id, 1, [], [], False, 1)
    reads = {A: read(error=ErrorCode.NOT_LEADER_OR_FOLLOWER, hw=-1, lso=-1), B: read(preferred=2), C: read(lso=4)}
    assert cache.complete(context, reads, 1).partitions == (A, B, C)
    # After an error the partition is answered again once readable, even with the HW as before.
    context = cache.begin(session_id, 2, [], [], False, 2)
    assert cache.complete(context, {A: read(), B: read(), C: read(lso=4)}, 2).partitions == (A,)


def test_unknown_sessions_and_wrong_epochs_are_refused_and_the_session_stays() -> None:
    cache = FetchSessionCache(10, random.Random(1))
    session_id = full(cache, [A])
    unknown = cache.begin(session_id + 1, 1, [], [], False, 1)
    assert (unknown.kind, unknown.error) == (ContextKind.ERROR, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    stale = cache.begin(session_id, 2, [], [], False, 1)
    assert (stale.kind, stale.error) == (ContextKind.ERROR, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    assert cache.complete(stale, {}, 1) == type(cache.complete(stale, {}, 1))(INVALID_SESSION_ID, ())
    assert cache.begin(session_id, 1, [], [], False, 1).kind is ContextKind.INCREMENTAL
    # Epoch 1 was used: the next expected is 2, so a retry of epoch 1 is refused.
    assert cache.begin(session_id, 1, [], [], False, 1).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_sessionless_fetches_create_nothing_and_a_full_fetch_closes_the_session_it_names() -> None:
    cache = FetchSessionCache(10, random.Random(1))
    context = cache.begin(0, -1, [(A, fetch())], [], False, 0)
    plan = cache.complete(context, {A: read()}, 0)
    assert (context.kind, plan.session_id, plan.partitions, cache.sessions) == (ContextKind.SESSIONLESS, 0, (A,), {})
    old = full(cache, [A])
    new = full(cache, [B], session_id=old)
    assert set(cache.sessions) == {new} and new != old
    # Closing with the final epoch: sessionless from then on.
    assert cache.begin(new, -1, [(B, fetch())], [], False, 0).kind is ContextKind.SESSIONLESS
    assert cache.sessions == {}


def test_a_session_left_empty_is_closed() -> None:
    cache = FetchSessionCache(10, random.Random(1))
    session_id = full(cache, [A])
    context = cache.begin(session_id, 1, [], [A], False, 1)
    assert (context.kind, cache.sessions) == (ContextKind.SESSIONLESS, {})


def test_no_sessions_with_zero_slots() -> None:
    assert full(FetchSessionCache(0, random.Random(1)), [A]) == INVALID_SESSION_ID


def test_a_full_cache_evicts_a_stale_session_first_then_a_smaller_old_one() -> None:
    cache = FetchSessionCache(2, random.Random(1))
    small = full(cache, [A], now_ms=0)
    large = full(cache, [A, B, C], now_ms=10)
    # Both are young: a newcomer of any size finds no room.
    assert full(cache, [A, B, C, TopicPartition("v", 0)], now_ms=100) == INVALID_SESSION_ID
    # Old but recently used: a larger newcomer evicts the smallest old one.
    cache.complete(cache.begin(small, 1, [], [], False, EVICTION_MS), {A: read()}, EVICTION_MS)
    cache.complete(cache.begin(large, 1, [], [], False, EVICTION_MS), {A: read(), B: read(), C: read()},
                   EVICTION_MS)
    now = EVICTION_MS + 20
    assert full(cache, [A], now_ms=now) == INVALID_SESSION_ID  # not worth more than the one-partition session
    bigger = full(cache, [A, B], now_ms=now)
    assert set(cache.sessions) == {large, bigger} and cache.evictions == 1
    # Idle longer than the eviction time: evicted whatever its size.
    later = now + EVICTION_MS + 1
    cache.complete(cache.begin(bigger, 1, [], [], False, later - 1), {A: read(), B: read()}, later - 1)
    newest = full(cache, [A], now_ms=later)
    assert set(cache.sessions) == {bigger, newest}


def test_a_privileged_session_evicts_a_young_unprivileged_one_but_not_the_reverse() -> None:
    cache = FetchSessionCache(1, random.Random(1))
    consumer = full(cache, [A, B, C], now_ms=0)
    follower = full(cache, [A], now_ms=1, privileged=True)
    assert set(cache.sessions) == {follower} and consumer not in cache.sessions
    assert full(cache, [A, B, C], now_ms=50) == INVALID_SESSION_ID


def test_epochs_wrap_to_one() -> None:
    assert [next_epoch(0), next_epoch(5), next_epoch(2**31 - 1), next_epoch(-1)] == [1, 6, 1, -1]
