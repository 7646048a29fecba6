"""Delayed fetches: the one long poll of a Fetch request over its partitions (Kafka's DelayedFetch).

The broker core reads every requested partition at once (a partition core never parks a read) and
asks `is_answerable`: answer now if `min_bytes` are readable over the partitions, a partition has an
error (a leader or epoch change reads as one), a follower must act on its answer (a diverging epoch
to truncate to, KIP-320; a logStartOffset above its own to follow, which DeleteRecords' low
watermark waits on), a consumer is sent to its preferred replica (KIP-392), or the request does not
wait. Otherwise the request parks in the `FetchPurgatory` until a partition it reads changes in a
way that may answer it (the core re-reads it then) or its deadline passes (answered with whatever is
there). Nothing polls.

A follower's fetch is not answered for a HW move alone (Kafka's DelayedFetch waits for the
follower's min bytes up to `replica.fetch.wait.max.ms`): acks=all completes on the followers' fetch
offsets, and the HW reaches a follower with its next answer, records or deadline. An acks=all
produce so costs one answer per follower, not two; a follower's HW (what consumers reading from it,
KIP-392, can see) lags by up to one fetch wait when no records follow.

So a parked follower fetch is re-read only when its partition's log (records, truncation,
logStartOffset), role or leader epoch changed, not for a HW move alone (a consumer's fetch is: the
HW bounds what it reads). Such a re-read could only re-park it: the follower's fetch offset is where
it was, so its LEO and the leader's HW stay; the HW only rises, so it cannot let the follower into
the ISR; and the session marks the HW dirty to answer later anyway (replica_sessions.py). What it
did change was the follower's last fetch and caught-up times, to a time no fetch arrived at:
Kafka's DelayedFetch re-reads without updating the follower's fetch state (`updateFetchState =
!readFromPurgatory`), so it takes the fetch as made when it arrived, as this does now. An acks=all
produce so costs the leader one core step per follower fewer, in the call that answers it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from replication.broker_events import ClientRequest, FetchWait
from replication.broker_ready import NO_PREFERRED_READ_REPLICA, PartAnswer
from replication.events import FollowerFetch
from replication.ready import FetchResult
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

if TYPE_CHECKING:
    from replication.replica_sessions import ReplicaSession


def is_answerable(request: ClientRequest, answers: Iterable[PartAnswer]) -> bool:
    """Whether a Fetch whose partitions read as `answers` is answered now (see the module docstring)."""
    wait = request.wait
    assert wait is not None, f"request {request.request_id} is not a fetch"
    total_bytes = 0
    for (_, part), answer in zip(request.parts, answers, strict=True):
        result = answer.result
        assert isinstance(result, FetchResult), result
        if result.error != ErrorCode.NONE or answer.preferred_read_replica != NO_PREFERRED_READ_REPLICA:
            return True
        if isinstance(part, FollowerFetch) and (result.diverging_epoch is not None
                                                or result.log_start_offset > part.log_start_offset):
            return True
        total_bytes += len(result.records)
    return total_bytes >= wait.min_bytes or wait.max_wait_ms <= 0


@dataclass(frozen=True, slots=True)
class ParkedFetch:
    """A Fetch waiting for data, news or its deadline; a follower's session fetch (KIP-227) waits
    on every partition of its `session`."""

    request: ClientRequest
    deadline_ms: int
    session: ReplicaSession | None = None

    @property
    def wait(self) -> FetchWait:
        assert self.request.wait is not None
        return self.request.wait

    @property
    def is_follower(self) -> bool:
        """A follower's fetch: its parts are all `FollowerFetch` (broker_events.ClientRequest)."""
        parts = self.request.parts
        return self.session is not None or (bool(parts) and isinstance(parts[0][1], FollowerFetch))

    def reads(self, topic_partitions: set[TopicPartition]) -> bool:
        if self.session is not None:
            return any(topic_partition in self.session.parts for topic_partition in topic_partitions)
        return any(topic_partition in topic_partitions for topic_partition, _ in self.request.parts)


class FetchPurgatory:
    """The parked fetches of one broker, in arrival order; at most `capacity` (a fetch over it is
    answered at once with what it read)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.parked: list[ParkedFetch] = []

    def __len__(self) -> int:
        return len(self.parked)

    @property
    def is_full(self) -> bool:
        return len(self.parked) >= self.capacity

    def add(self, parked: ParkedFetch) -> None:
        assert not self.is_full, f"{len(self.parked)} fetches parked >= {self.capacity}"
        self.parked.append(parked)

    def take(self, changed: set[TopicPartition], changed_for_followers: set[TopicPartition],
             now_ms: int) -> list[ParkedFetch]:
        """The fetches whose deadline passed, or that read a partition of `changed` (a consumer's)
        or of `changed_for_followers` (a follower's: a change other than a HW move), taken out."""
        taken: list[ParkedFetch] = []
        kept: list[ParkedFetch] = []
        for item in self.parked:
            topic_partitions = changed_for_followers if item.is_follower else changed
            # With no partition changed (most calls, and every settling round after the first), only
            # deadlines count: a fetch over many partitions is not walked for nothing.
            due = item.deadline_ms <= now_ms or (bool(topic_partitions) and item.reads(topic_partitions))
            (taken if due else kept).append(item)
        self.parked = kept
        return taken

    def take_all(self) -> list[ParkedFetch]:
        taken, self.parked = self.parked, []
        return taken

    def next_deadline_ms(self) -> int | None:
        if not self.parked:
            return None
        return min(item.deadline_ms for item in self.parked)
