"""The leader's half of a replica fetch session (replication/replica_sessions.py): what an
incremental answer lists."""

from __future__ import annotations

from replication.broker_ready import PartAnswer
from replication.events import FollowerFetch
from replication.ready import EpochEndOffset, FetchResult
from replication.replica_sessions import ReplicaSession
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

TP = TopicPartition("orders", 0)


def session_after_full_fetch(fetch_offset: int) -> ReplicaSession:
    part = FollowerFetch(0, 2, fetch_offset, 0, 0, 4, 1 << 20)
    session = ReplicaSession(session_id=1, replica_id=2, broker_epoch=3, epoch=1, parts={TP: part}, last_used_ms=0)
    return session


def answer(**result: object) -> PartAnswer:
    return PartAnswer(TP, FetchResult(0, ErrorCode.NONE, **result))  # type: ignore[arg-type]


def test_an_unchanged_hw_is_not_answered_again() -> None:
    session = session_after_full_fetch(209)
    assert session.answer([answer(high_watermark=209, log_start_offset=0, log_end_offset=209)], 10)
    assert session.answer([answer(high_watermark=209, log_start_offset=0, log_end_offset=209)], 20) == ()


def test_the_hw_of_a_diverging_answer_is_answered_again() -> None:
    """A follower truncating on a diverging epoch takes no HW from that answer (seed 848000138: its
    HW stayed one below the leader's for good, the leader taking it as told)."""
    session = session_after_full_fetch(211)
    diverging = answer(high_watermark=209, log_start_offset=0, log_end_offset=209,
                       diverging_epoch=EpochEndOffset(0, 209))
    assert session.answer([diverging], 10)
    session.parts[TP] = session_after_full_fetch(209).parts[TP]
    (again,) = session.answer([answer(high_watermark=209, log_start_offset=0, log_end_offset=209)], 20)
    assert again.result.high_watermark == 209  # type: ignore[union-attr]
