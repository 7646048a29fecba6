"""The group coordinator core: commits as acks=all produces, fetches as replays checked against the
partition's "latest" offset, one load per partition. Method: the core alone, its requests answered
by hand."""

from __future__ import annotations

from replication.group_coordinator import (
    NO_OFFSET,
    CommitAnswer,
    CommitOffsets,
    CoordinatorReady,
    DeleteOffsets,
    FetchAnswer,
    FetchOffsets,
    GroupCoordinator,
    GroupsLoaded,
    LatestListed,
    ListLatest,
    ListOffsetGroups,
    LoadGroups,
    OffsetGroupsAnswer,
    PartitionOffset,
    Produced,
    ProduceOffsets,
    Read,
    ReadOffsets,
    WriteGroupMetadata,
    encode_key,
    encode_value,
)
from replication.group_metadata import (
    GroupMetadata,
    decode_group_key,
    decode_group_value,
    encode_group_key,
    encode_group_value,
)
from storage.records import build_batch, iter_records
from wire.error_codes import ErrorCode

GROUP = "billing"


def commit_batch(base_offset: int, offset: int, metadata: str = "", group: str = GROUP) -> bytes:
    batch = bytearray(build_batch([(encode_key(group, "orders", 0), encode_value(offset, metadata, 1_000))]))
    batch[0:8] = base_offset.to_bytes(8, "big")
    return bytes(batch)


def fetch(request_id: int) -> FetchOffsets:
    return FetchOffsets(request_id, GROUP, 0, (("orders", 0),))


def only(ready: CoordinatorReady, kind: type) -> object:
    found = [request for request in ready.requests if isinstance(request, kind)]
    assert len(found) == 1 and len(ready.requests) == 1, ready
    return found[0]


def test_a_commit_is_an_acks_all_produce_answered_with_the_coordinator_error() -> None:
    core = GroupCoordinator()
    ready = core.handle(CommitOffsets(1, GROUP, 0, (PartitionOffset("orders", 0, 42, "m"),), 1_000))
    produce = only(ready, ProduceOffsets)
    assert isinstance(produce, ProduceOffsets) and produce.partition == 0 and ready.answers == ()
    assert core.handle(Produced(produce.token, ErrorCode.NONE)).answers == (CommitAnswer(1, ErrorCode.NONE),)
    produce = only(core.handle(CommitOffsets(2, GROUP, 0, (PartitionOffset("orders", 0, 43),), 1_000)),
                   ProduceOffsets)
    assert isinstance(produce, ProduceOffsets)
    answers = core.handle(Produced(produce.token, ErrorCode.NOT_ENOUGH_REPLICAS)).answers
    assert answers == (CommitAnswer(2, ErrorCode.COORDINATOR_NOT_AVAILABLE),)


def test_a_group_record_is_written_through_the_commit_path() -> None:
    core = GroupCoordinator()
    group = GroupMetadata("consumer", 3, None, None)
    produce = only(core.handle(WriteGroupMetadata(1, GROUP, 0, group, 1_000)), ProduceOffsets)
    assert isinstance(produce, ProduceOffsets)
    (record,) = [record for _, batch in iter_records(produce.records) for record in batch]
    assert record.key is not None and record.value is not None
    assert (decode_group_key(record.key), decode_group_value(record.value)) == (GROUP, group)
    answers = core.handle(Produced(produce.token, ErrorCode.NOT_LEADER_OR_FOLLOWER)).answers
    assert answers == (CommitAnswer(1, ErrorCode.NOT_COORDINATOR),)


def test_a_fetch_waits_while_the_new_leaders_hw_lags_its_epoch() -> None:
    core = GroupCoordinator()
    latest = only(core.handle(fetch(1)), ListLatest)
    assert isinstance(latest, ListLatest)
    answers = core.handle(LatestListed(latest.token, ErrorCode.OFFSET_NOT_AVAILABLE, message="lags")).answers
    assert answers == (FetchAnswer(1, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, (), "lags"),)


def test_a_fetch_replays_to_the_hw_and_a_new_epoch_replays_from_the_start() -> None:
    core = GroupCoordinator()
    latest = only(core.handle(fetch(1)), ListLatest)
    assert isinstance(latest, ListLatest)
    read = only(core.handle(LatestListed(latest.token, ErrorCode.NONE, leader_epoch=3)), ReadOffsets)
    assert isinstance(read, ReadOffsets) and (read.offset, read.leader_epoch) == (0, 3)
    read = only(core.handle(Read(read.token, ErrorCode.NONE, commit_batch(0, 10, "a"))), ReadOffsets)
    assert isinstance(read, ReadOffsets) and read.offset == 1
    answers = core.handle(Read(read.token, ErrorCode.NONE)).answers
    assert answers == (FetchAnswer(1, ErrorCode.NONE, (PartitionOffset("orders", 0, 10, "a"),)),)

    latest = only(core.handle(fetch(2)), ListLatest)
    assert isinstance(latest, ListLatest)
    read = only(core.handle(LatestListed(latest.token, ErrorCode.NONE, leader_epoch=5)), ReadOffsets)
    assert isinstance(read, ReadOffsets) and (read.offset, read.leader_epoch) == (0, 5), "another epoch: from 0"
    read = only(core.handle(Read(read.token, ErrorCode.NONE, commit_batch(0, 12, "b"))), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    answers = core.handle(Read(read.token, ErrorCode.NONE)).answers
    assert answers == (FetchAnswer(2, ErrorCode.NONE, (PartitionOffset("orders", 0, 12, "b"),)),)


def test_a_fetch_joining_a_load_is_answered_only_by_a_read_issued_after_it() -> None:
    """Its commits were acknowledged before it arrived: a read issued earlier may predate them."""
    core = GroupCoordinator()
    latest = only(core.handle(fetch(1)), ListLatest)
    assert isinstance(latest, ListLatest)
    read = only(core.handle(LatestListed(latest.token, ErrorCode.NONE, leader_epoch=1)), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    assert core.handle(fetch(2)).requests == (), "it joins the load in progress"
    ready = core.handle(Read(read.token, ErrorCode.NONE))
    assert ready.answers == (FetchAnswer(1, ErrorCode.NONE, (PartitionOffset("orders", 0, NO_OFFSET),)),)
    read = only(ready, ReadOffsets)
    assert isinstance(read, ReadOffsets) and read.offset == 0
    read = only(core.handle(Read(read.token, ErrorCode.NONE, commit_batch(0, 7))), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    answers = core.handle(Read(read.token, ErrorCode.NONE)).answers
    assert answers == (FetchAnswer(2, ErrorCode.NONE, (PartitionOffset("orders", 0, 7),)),)


def test_a_read_fenced_by_a_new_epoch_answers_not_coordinator() -> None:
    core = GroupCoordinator()
    latest = only(core.handle(fetch(1)), ListLatest)
    assert isinstance(latest, ListLatest)
    read = only(core.handle(LatestListed(latest.token, ErrorCode.NONE, leader_epoch=1)), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    answers = core.handle(Read(read.token, ErrorCode.FENCED_LEADER_EPOCH)).answers
    assert answers == (FetchAnswer(1, ErrorCode.NOT_COORDINATOR),)


def test_a_record_that_is_not_a_commit_is_skipped() -> None:
    """Anyone may produce to the topic: a record that does not decode must not stop the replay."""
    core = GroupCoordinator()
    latest = only(core.handle(fetch(1)), ListLatest)
    assert isinstance(latest, ListLatest)
    read = only(core.handle(LatestListed(latest.token, ErrorCode.NONE, leader_epoch=1)), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    garbage = bytearray(build_batch([(b"\x00\x01\xff", b"\x00")]))
    read = only(core.handle(Read(read.token, ErrorCode.NONE, bytes(garbage))), ReadOffsets)
    assert isinstance(read, ReadOffsets) and read.offset == 1
    read = only(core.handle(Read(read.token, ErrorCode.NONE, commit_batch(1, 4))), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    answers = core.handle(Read(read.token, ErrorCode.NONE)).answers
    assert answers == (FetchAnswer(1, ErrorCode.NONE, (PartitionOffset("orders", 0, 4),)),)


def test_the_groups_with_offsets_are_listed_after_a_load_shared_with_fetches() -> None:
    """ListGroups and DescribeGroups show groups that only committed offsets (Kafka lists the groups
    it loaded): a listing replays the partition to its HW, in the same load as a fetch."""
    core = GroupCoordinator()
    latest = only(core.handle(ListOffsetGroups(1, 0)), ListLatest)
    assert isinstance(latest, ListLatest)
    read = only(core.handle(LatestListed(latest.token, ErrorCode.NONE, leader_epoch=1)), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    assert core.handle(fetch(2)).requests == (), "a fetch joins the listing's load"
    read = only(core.handle(Read(read.token, ErrorCode.NONE, commit_batch(0, 3, group="solo"))), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    read = only(core.handle(Read(read.token, ErrorCode.NONE, commit_batch(1, 5))), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    answers = core.handle(Read(read.token, ErrorCode.NONE)).answers
    assert answers == (OffsetGroupsAnswer(1, ErrorCode.NONE, frozenset({"solo", GROUP})),
                       FetchAnswer(2, ErrorCode.NONE, (PartitionOffset("orders", 0, 5),)))


def test_a_listing_whose_load_fails_answers_the_coordinator_error() -> None:
    core = GroupCoordinator()
    latest = only(core.handle(ListOffsetGroups(1, 0)), ListLatest)
    assert isinstance(latest, ListLatest)
    answers = core.handle(LatestListed(latest.token, ErrorCode.OFFSET_NOT_AVAILABLE, message="lags")).answers
    assert answers == (OffsetGroupsAnswer(1, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, message="lags"),)


def test_a_load_answers_every_group_stored_as_replayed_with_the_offsets() -> None:
    core = GroupCoordinator()
    latest = only(core.handle(LoadGroups(1, 0)), ListLatest)
    assert isinstance(latest, ListLatest)
    read = only(core.handle(LatestListed(latest.token, ErrorCode.NONE, leader_epoch=4)), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    first, second = GroupMetadata("consumer", 2, None, None), GroupMetadata("consumer", 3, None, None)
    records = build_batch([(encode_group_key("a"), encode_group_value(first, 0)),
                           (encode_group_key("b"), encode_group_value(first, 0)),
                           (encode_key(GROUP, "orders", 0), encode_value(7, "", 0)),
                           (encode_group_key("a"), encode_group_value(second, 0)),
                           (encode_group_key("b"), None)])
    read = only(core.handle(Read(read.token, ErrorCode.NONE, records)), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    assert core.handle(Read(read.token, ErrorCode.NONE)).answers == (
        GroupsLoaded(1, ErrorCode.NONE, 4, (("a", second),)),)


def test_a_commits_leader_epoch_is_stored_and_answered() -> None:
    """KIP-320's committed_leader_epoch travels in the OffsetCommitValue (version 3) and back."""
    core = GroupCoordinator()
    produce = only(core.handle(CommitOffsets(1, GROUP, 0, (PartitionOffset("orders", 0, 42, "", 4),), 1_000)),
                   ProduceOffsets)
    assert isinstance(produce, ProduceOffsets)
    core.handle(Produced(produce.token, ErrorCode.NONE))
    latest = only(core.handle(fetch(2)), ListLatest)
    assert isinstance(latest, ListLatest)
    read = only(core.handle(LatestListed(latest.token, ErrorCode.NONE, leader_epoch=1)), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    read = only(core.handle(Read(read.token, ErrorCode.NONE, produce.records)), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    answers = core.handle(Read(read.token, ErrorCode.NONE)).answers
    assert answers == (FetchAnswer(2, ErrorCode.NONE, (PartitionOffset("orders", 0, 42, "", 4),)),)


# -- DeleteGroups and OffsetDelete: tombstones --------------------------------------------------------


def at(base_offset: int, batch: bytes) -> bytes:
    """`batch` as the partition appended it at `base_offset`."""
    return base_offset.to_bytes(8, "big") + batch[8:]


def replay(core: GroupCoordinator, records: bytes, epoch: int) -> tuple:
    """A new coordinator's replay of `records` (leader epoch `epoch`): what LoadGroups, ListOffsetGroups
    and an OffsetFetch of every partition of GROUP answer."""
    latest = only(core.handle(LoadGroups(1, 0)), ListLatest)
    assert core.handle(ListOffsetGroups(2, 0)).requests == ()
    assert core.handle(FetchOffsets(3, GROUP, 0, None)).requests == ()
    assert isinstance(latest, ListLatest)
    read = only(core.handle(LatestListed(latest.token, ErrorCode.NONE, leader_epoch=epoch)), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    read = only(core.handle(Read(read.token, ErrorCode.NONE, records)), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    return core.handle(Read(read.token, ErrorCode.NONE)).answers


def test_a_groups_tombstone_takes_its_offsets_and_commits_in_flight_in_one_batch_and_a_replay_finds_none() -> None:
    core = GroupCoordinator()
    stored = build_batch([(encode_group_key(GROUP), encode_group_value(GroupMetadata("consumer", 4, None, None), 0)),
                          (encode_key(GROUP, "orders", 0), encode_value(7, "", 0)),
                          (encode_key("other", "orders", 0), encode_value(9, "", 0))])
    committing = only(core.handle(CommitOffsets(1, GROUP, 0, (PartitionOffset("orders", 1, 3),), 1_000)),
                      ProduceOffsets)
    assert isinstance(committing, ProduceOffsets)
    latest = only(core.handle(WriteGroupMetadata(2, GROUP, 0, None, 2_000)), ListLatest)
    assert isinstance(latest, ListLatest), "the tombstone waits for the replay to reach the HW"
    read = only(core.handle(LatestListed(latest.token, ErrorCode.NONE, leader_epoch=1)), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    read = only(core.handle(Read(read.token, ErrorCode.NONE, at(0, stored))), ReadOffsets)
    assert isinstance(read, ReadOffsets)
    produce = only(core.handle(Read(read.token, ErrorCode.NONE)), ProduceOffsets)
    assert isinstance(produce, ProduceOffsets)
    (batch,) = [batch for _, batch in iter_records(produce.records)]
    assert [(record.key, record.value) for record in batch] == [
        (encode_key(GROUP, "orders", 0), None), (encode_key(GROUP, "orders", 1), None),
        (encode_group_key(GROUP), None)], "one batch: the offsets replayed and being committed, then the group"
    assert core.handle(Produced(produce.token, ErrorCode.NONE)).answers == (CommitAnswer(2, ErrorCode.NONE),)
    core.handle(Produced(committing.token, ErrorCode.NONE))

    log = at(0, stored) + at(3, committing.records) + at(4, produce.records)
    assert replay(core, log, epoch=2) == (
        GroupsLoaded(1, ErrorCode.NONE, 2, ()),
        OffsetGroupsAnswer(2, ErrorCode.NONE, frozenset({"other"})),
        FetchAnswer(3, ErrorCode.NONE, ()))


def test_a_groups_tombstone_whose_replay_fails_is_not_written() -> None:
    core = GroupCoordinator()
    latest = only(core.handle(WriteGroupMetadata(1, GROUP, 0, None, 1_000)), ListLatest)
    assert isinstance(latest, ListLatest)
    ready = core.handle(LatestListed(latest.token, ErrorCode.NOT_LEADER_OR_FOLLOWER, message="moved"))
    assert (ready.requests, ready.answers) == ((), (CommitAnswer(1, ErrorCode.NOT_COORDINATOR, "moved"),))


def test_deleting_offsets_writes_tombstones_of_the_partitions_named() -> None:
    core = GroupCoordinator()
    commits = build_batch([(encode_key(GROUP, "orders", 0), encode_value(7, "", 0)),
                           (encode_key(GROUP, "payments", 0), encode_value(8, "", 0))])
    produce = only(core.handle(DeleteOffsets(1, GROUP, 0, (("orders", 0),))), ProduceOffsets)
    assert isinstance(produce, ProduceOffsets)
    assert core.handle(Produced(produce.token, ErrorCode.NONE)).answers == (CommitAnswer(1, ErrorCode.NONE),)
    assert core.handle(DeleteOffsets(2, GROUP, 0, ())).answers == (CommitAnswer(2, ErrorCode.NONE),)
    answers = replay(core, at(0, commits) + at(2, produce.records), epoch=1)
    assert answers[2] == FetchAnswer(3, ErrorCode.NONE, (PartitionOffset("payments", 0, 8),))
