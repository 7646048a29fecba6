"""GroupOffsetsRule: committed group offsets never go backwards (DESIGN §6.10), for the checker.

The group's client commits its consumer positions, one commit at a time, each record carrying the
commit's id as its metadata; a commit is a batch of `__consumer_offsets` (the coordinator's acks=all
produce), so the checker already follows it as a committed batch. The rule: an offset fetch sent
after commit A was acknowledged answers, for each partition, the commit of a record at or after A's
record in the partition's log (the last one for its key, as Kafka's replay gives), never an earlier
one and never none. Log positions, not commit ids, are compared: a commit the network delivered late
or twice may be written again after A, and then it is the last word (as in Kafka, without
generations). Excused only when A's batch was lost and the loss excused (every holder lost it to a
recorded fault): decided at the end of the run, when every batch's fate is known.
"""

from __future__ import annotations

from dataclasses import dataclass

from replication.group_coordinator import decode_key, decode_value
from storage.records import iter_records
from tests.sim.replication.committed_batch import CommittedBatch, Fate
from tests.sim.replication.observations import GroupCommitAcked, GroupOffsetsFetched
from wire.topic_partition import TopicPartition

NONE_POSITION = -1


@dataclass(frozen=True, slots=True)
class _Regression:
    """A fetch answered a record before acknowledged commit A's: a violation unless A was lost."""

    topic_partition: TopicPartition
    commit_id: int
    acked: CommittedBatch
    acked_position: int
    answered: str
    answered_position: int
    sent_ms: int


class GroupOffsetsRule:
    def __init__(self) -> None:
        # (commit id, partition) -> [(record offset, its committed batch)]: a commit may be written twice
        self.records: dict[tuple[int, TopicPartition], list[tuple[int, CommittedBatch]]] = {}
        self.acked: list[tuple[int, int, tuple[tuple[TopicPartition, int], ...]]] = []  # (ms, id, offsets)
        self.regressions: list[_Regression] = []
        self.fetches_checked = 0
        self.lost_commits = 0

    def committed(self, entry: CommittedBatch) -> None:
        """A batch of `__consumer_offsets` was committed: index its commit records."""
        for _, records in iter_records(entry.batch.data):
            for record in records:
                if record.key is None or record.value is None:
                    continue
                key = decode_key(record.key)
                _, metadata, _ = decode_value(record.value)
                if key is None or not metadata.isdigit():
                    continue
                _, topic, partition = key
                self.records.setdefault((int(metadata), TopicPartition(topic, partition)), []).append(
                    (record.offset, entry))

    def commit_acked(self, ack: GroupCommitAcked) -> str | None:
        """The reason the ack is impossible, or None."""
        self.acked.append((ack.now_ms, ack.commit_id, ack.offsets))
        for topic_partition, _ in ack.offsets:
            if not self.records.get((ack.commit_id, topic_partition)):
                return f"commit {ack.commit_id} was acknowledged but no committed batch holds its {topic_partition}"
        return None

    def fetched(self, fetch: GroupOffsetsFetched) -> str | None:
        """Check an answer against the last commit acknowledged before the fetch was sent; the
        reason it is impossible now, or None (a regression is judged at the end)."""
        last = next((commit_id for at_ms, commit_id, _ in reversed(self.acked) if at_ms <= fetch.sent_ms), None)
        self.fetches_checked += 1
        for topic_partition, offset, metadata in fetch.fetched:
            answered = NONE_POSITION
            if offset >= 0:
                if not metadata.isdigit() or not self.records.get((int(metadata), topic_partition)):
                    return (f"an offset fetch answered {topic_partition} offset {offset} of commit {metadata!r}, "
                            f"which no committed batch holds")
                answered = max(position for position, _ in self.records[(int(metadata), topic_partition)])
            if last is None:
                continue
            position, entry = min(self.records[(last, topic_partition)], key=lambda found: found[0])
            if answered < position:
                self.regressions.append(_Regression(topic_partition, last, entry, position, metadata or "none",
                                                    answered, fetch.sent_ms))
        return None

    def finish(self) -> str | None:
        """Judge the regressions: each is excused only if the acknowledged commit's batch was lost."""
        for regression in self.regressions:
            if regression.acked.fate is Fate.LOST:
                self.lost_commits += 1
                continue
            return (f"group offsets went backwards: an offset fetch sent at {regression.sent_ms} ms answered "
                    f"{regression.topic_partition} from commit {regression.answered} (log position "
                    f"{regression.answered_position}) though commit {regression.commit_id} at position "
                    f"{regression.acked_position} had been acknowledged before and was not lost "
                    f"({regression.acked.fate.value})")
        return None
