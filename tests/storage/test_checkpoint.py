"""Checkpoint files: Kafka's text format, atomic replacement, and rejection of damaged files.

Method: examples pin the exact bytes Kafka writes and reads; hypothesis checks that any legal
offsets round-trip and that every strict prefix of a valid file (a torn write) is rejected.
"""

from __future__ import annotations

import base64
import errno
import os
import random
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    write_atomically,
)
from storage.errors import (
    CorruptCheckpointError,
    InconsistentClusterIdError,
    InconsistentNodeIdError,
)
from storage.meta_properties import (
    META_PROPERTIES_FILE,
    MetaProperties,
    ensure,
    new_cluster_id,
    new_directory_id,
)
from wire.topic_partition import TopicPartition

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1

topic_names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=40,
)
topic_partitions = st.builds(TopicPartition, topic_names, st.integers(0, 2**31 - 1))
offset_maps = st.dictionaries(topic_partitions, st.integers(LONG_MIN, LONG_MAX), max_size=20)


def test_topic_partition_str_is_the_directory_name() -> None:
    assert str(TopicPartition("orders", 3)) == "orders-3"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("orders-0", TopicPartition("orders", 0)),
        ("my-topic-3", TopicPartition("my-topic", 3)),
        ("a-b-c-12", TopicPartition("a-b-c", 12)),
        ("7-7", TopicPartition("7", 7)),
        ("-x--1", TopicPartition("-x-", 1)),
    ],
)
def test_topic_partition_from_dir_name_splits_on_the_last_dash(
    name: str, expected: TopicPartition
) -> None:
    assert TopicPartition.from_dir_name(name) == expected
    assert str(expected) == name


@pytest.mark.parametrize("name", ["orders", "orders-", "-3", "orders-x", "orders-+1", "orders- 1"])
def test_topic_partition_from_dir_name_rejects_other_names(name: str) -> None:
    with pytest.raises(ValueError, match="not a partition directory name"):
        TopicPartition.from_dir_name(name)


@given(topic_partitions)
def test_topic_partition_dir_name_round_trips(topic_partition: TopicPartition) -> None:
    assert TopicPartition.from_dir_name(str(topic_partition)) == topic_partition


def test_topic_partitions_order_by_topic_then_partition() -> None:
    unsorted = [TopicPartition("b", 0), TopicPartition("a", 10), TopicPartition("a", 2)]
    assert sorted(unsorted) == [
        TopicPartition("a", 2),
        TopicPartition("a", 10),
        TopicPartition("b", 0),
    ]


def test_kafka_file_names() -> None:
    assert RECOVERY_POINT_CHECKPOINT == "recovery-point-offset-checkpoint"
    assert REPLICATION_OFFSET_CHECKPOINT == "replication-offset-checkpoint"
    assert LOG_START_OFFSET_CHECKPOINT == "log-start-offset-checkpoint"
    assert CLEANER_OFFSET_CHECKPOINT == "cleaner-offset-checkpoint"


def test_write_produces_kafkas_format_sorted_by_topic_partition(tmp_path: Path) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    OffsetCheckpointFile(path).write(
        {TopicPartition("topicB", 3): 45, TopicPartition("topicA", 0): 123}
    )
    assert path.read_text() == "0\n2\ntopicA 0 123\ntopicB 3 45\n"


def test_read_accepts_a_file_written_by_kafka(tmp_path: Path) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    path.write_text("0\n3\n__consumer_offsets 12 0\nmy.topic-v2 0 99\nmy.topic-v2 1 7\n")
    assert OffsetCheckpointFile(path).read() == {
        TopicPartition("__consumer_offsets", 12): 0,
        TopicPartition("my.topic-v2", 0): 99,
        TopicPartition("my.topic-v2", 1): 7,
    }


def test_missing_and_empty_files_read_as_no_offsets(tmp_path: Path) -> None:
    path = tmp_path / LOG_START_OFFSET_CHECKPOINT
    assert OffsetCheckpointFile(path).read() == {}
    path.write_bytes(b"")
    assert OffsetCheckpointFile(path).read() == {}


def test_an_empty_map_writes_a_zero_count(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    OffsetCheckpointFile(path).write({})
    assert path.read_text() == "0\n0\n"
    assert OffsetCheckpointFile(path).read() == {}


def test_write_replaces_the_previous_content(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    checkpoint.write({TopicPartition("a", 0): 1, TopicPartition("b", 0): 2})
    checkpoint.write({TopicPartition("a", 0): 5})
    assert checkpoint.read() == {TopicPartition("a", 0): 5}


@given(offsets=offset_maps)
def test_offsets_round_trip(tmp_path_factory: pytest.TempPathFactory, offsets: dict) -> None:
    path = tmp_path_factory.mktemp("checkpoint") / RECOVERY_POINT_CHECKPOINT
    OffsetCheckpointFile(path).write(offsets)
    assert OffsetCheckpointFile(path).read() == offsets


def test_a_249_character_topic_round_trips(tmp_path: Path) -> None:
    offsets = {TopicPartition("t" * 249, 0): 1}
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    checkpoint.write(offsets)
    assert checkpoint.read() == offsets


@pytest.mark.parametrize(
    "topic_partition",
    [
        TopicPartition("", 0),
        TopicPartition("has space", 0),
        TopicPartition("new\nline", 0),
        TopicPartition("tab\t", 0),
        TopicPartition("émoji", 0),
        TopicPartition("t" * 250, 0),
        TopicPartition("orders", -1),
    ],
)
def test_write_refuses_what_cannot_read_back_and_keeps_the_old_file(
    tmp_path: Path, topic_partition: TopicPartition
) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    checkpoint.write({TopicPartition("good", 0): 1})
    with pytest.raises(ValueError):
        checkpoint.write({topic_partition: 5})
    assert checkpoint.read() == {TopicPartition("good", 0): 1}


CORRUPT_FILES = [
    ("1\n1\norders 0 5\n", 1, "version 1"),
    ("x\n1\norders 0 5\n", 1, "'x' is not an integer"),
    ("0\n", 2, "missing the count line"),
    ("0\n2\norders 0 5\n", 2, "says 2 entries but 1 lines follow"),
    ("0\n1\norders 0 5\norders 1 6\n", 2, "says 1 entries but 2 lines follow"),
    ("0\n-1\n", 2, "negative entry count"),
    ("0\n1\norders 0\n", 3, "expected 3 fields"),
    ("0\n1\norders 0 5 6\n", 3, "expected 3 fields"),
    ("0\n1\norders  0 5\n", 3, "expected 3 fields"),
    ("0\n1\norders\t0\t5\n", 3, "expected 3 fields"),
    ("0\n1\n\n", 3, "expected 3 fields"),
    ("0\n2\norders 0 5\n\n", 4, "expected 3 fields"),
    ("0\n1\norders 0 five\n", 3, "'five' is not an integer"),
    ("0\n1\norders 0 +5\n", 3, "'\\+5' is not an integer"),
    ("0\n1\norders 0 1_000\n", 3, "'1_000' is not an integer"),
    ("0\n1\norders zero 5\n", 3, "'zero' is not an integer"),
    ("0\n1\norders -1 5\n", 3, "negative partition"),
    ("0\n1\norders 0 5\r\n", 3, "is not an integer"),
    ("0\n1\norders 0 5", 3, "no newline"),
    ("0\n2\norders 0 5\norders 0 6\n", 4, "orders-0 appears twice"),
]


@pytest.mark.parametrize(("text", "line_number", "reason"), CORRUPT_FILES)
def test_malformed_files_are_rejected_with_path_and_line(
    tmp_path: Path, text: str, line_number: int, reason: str
) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError, match=reason) as raised:
        OffsetCheckpointFile(path).read()
    assert f"{path} line {line_number}:" in str(raised.value)
    assert raised.value.error_name == "KAFKA_STORAGE_ERROR"


def test_invalid_utf8_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    path.write_bytes(b"0\n1\nord\xffers 0 5\n")
    with pytest.raises(CorruptCheckpointError, match="line 3: not valid UTF-8"):
        OffsetCheckpointFile(path).read()


@given(offsets=offset_maps, data=st.data())
def test_every_torn_prefix_of_a_valid_file_is_rejected(
    tmp_path_factory: pytest.TempPathFactory, offsets: dict, data: st.DataObject
) -> None:
    # A crash can only leave a prefix behind if the atomic rename were skipped; the reader must
    # still never mistake one for a valid, shorter checkpoint.
    path = tmp_path_factory.mktemp("checkpoint") / RECOVERY_POINT_CHECKPOINT
    OffsetCheckpointFile(path).write(offsets)
    full = path.read_bytes()
    cut = data.draw(st.integers(1, len(full) - 1), label="cut")
    path.write_bytes(full[:cut])
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(path).read()


def test_a_leftover_temporary_file_does_not_affect_read_or_write(tmp_path: Path) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({TopicPartition("a", 0): 1})
    temporary_path = tmp_path / (RECOVERY_POINT_CHECKPOINT + ".tmp")
    temporary_path.write_text("0\n1\ngarbage 0 999\nhalf a li")
    assert checkpoint.read() == {TopicPartition("a", 0): 1}
    checkpoint.write({TopicPartition("a", 0): 2})
    assert checkpoint.read() == {TopicPartition("a", 0): 2}
    assert not temporary_path.exists()


def test_a_failed_write_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rename is the commit point: if anything fails before it, readers see the old file.
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({TopicPartition("a", 0): 1})

    def failing_replace(source: object, target: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.write({TopicPartition("a", 0): 2})
    monkeypatch.undo()
    assert checkpoint.read() == {TopicPartition("a", 0): 1}


def write_meta_properties(path: Path, node_id: int) -> None:
    MetaProperties(1, node_id, "clusterA").write(path)


def write_leader_epochs(path: Path, epoch: int) -> None:
    LeaderEpochCheckpointFile(path).write([EpochEntry(0, 0), EpochEntry(epoch, 10 * epoch)])


@pytest.mark.parametrize("failing", ["replace", "fsync"])
@pytest.mark.parametrize(
    ("name", "write"),
    [(META_PROPERTIES_FILE, write_meta_properties), (LEADER_EPOCH_CHECKPOINT, write_leader_epochs)],
    ids=["meta.properties", "leader-epoch-checkpoint"],
)
def test_a_failed_write_keeps_the_old_file_and_the_next_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, write: Callable[[Path, int], None], failing: str
) -> None:
    # A failure before the rename (the temporary file's fsync, or the rename itself) must leave
    # the old bytes; the temporary file it leaves is replaced by the next successful write.
    path = tmp_path / name
    write(path, 1)
    old = path.read_bytes()

    def fail(*args: object) -> None:
        raise OSError(errno.EIO, "injected")

    with monkeypatch.context() as patch:
        patch.setattr(os, failing, fail)
        with pytest.raises(OSError, match="injected"):
            write(path, 2)
    assert path.read_bytes() == old
    write(path, 3)
    assert [p.name for p in tmp_path.iterdir()] == [name]
    reference = tmp_path / "reference"
    reference.mkdir()
    write(reference / name, 3)
    assert path.read_bytes() == (reference / name).read_bytes()


def test_write_atomically_fsyncs_the_file_then_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def recording_fsync(descriptor: int) -> None:
        events.append("fsync")
        real_fsync(descriptor)

    def recording_replace(source: str, target: str) -> None:
        events.append("replace")
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    write_atomically(tmp_path / "file", "text\n")
    assert events == ["fsync", "replace", "fsync"]
    assert (tmp_path / "file").read_text() == "text\n"


def test_leader_epoch_checkpoint_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(path).write([EpochEntry(0, 0), EpochEntry(3, 120)])
    assert path.read_text() == "0\n2\n0 0\n3 120\n"
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(0, 0), EpochEntry(3, 120)]
    assert LeaderEpochCheckpointFile(tmp_path / "absent").read() == []


@pytest.mark.parametrize(
    ("text", "line_number"),
    [
        ("0\n1\n0\n", 3),
        ("0\n1\n0 0 0\n", 3),
        ("0\n1\n-1 5\n", 3),
        ("0\n1\n1 -5\n", 3),
        ("0\n1\nx 5\n", 3),
        ("1\n1\n1 5\n", 1),
        ("0\n2\n1 5\n", 2),
    ],
)
def test_malformed_leader_epoch_checkpoints_are_rejected(
    tmp_path: Path, text: str, line_number: int
) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError, match=f"line {line_number}:"):
        LeaderEpochCheckpointFile(path).read()


@given(
    entries=st.lists(
        st.builds(EpochEntry, st.integers(0, 2**31 - 1), st.integers(0, LONG_MAX)), max_size=20
    )
)
def test_leader_epoch_entries_round_trip_in_order(
    tmp_path_factory: pytest.TempPathFactory, entries: list[EpochEntry]
) -> None:
    path = tmp_path_factory.mktemp("epochs") / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(path).write(entries)
    assert LeaderEpochCheckpointFile(path).read() == entries


# --- meta.properties (written by write_atomically, hence tested here) -----------------------


def test_meta_properties_format_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / META_PROPERTIES_FILE
    meta = MetaProperties(version=1, node_id=3, cluster_id="MkU3OEVBNTcwNTJENDM2Qg")
    meta.write(path)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("#")
    assert lines[1:] == ["version=1", "node.id=3", "cluster.id=MkU3OEVBNTcwNTJENDM2Qg"]
    assert MetaProperties.read(path) == meta


def test_meta_properties_reads_a_file_written_by_kafka(tmp_path: Path) -> None:
    path = tmp_path / META_PROPERTIES_FILE
    path.write_text(
        "#\n#Tue Mar 05 10:00:00 UTC 2024\nnode.id=1\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\n"
        "version=1\ncluster.id=4L6g3nShT-eMCtK--X86sw\n"
    )
    assert MetaProperties.read(path) == MetaProperties(1, 1, "4L6g3nShT-eMCtK--X86sw", "J8aAPcfLQt2bqs1JT_rMgQ")


def test_meta_properties_with_a_directory_id_round_trip(tmp_path: Path) -> None:
    path = tmp_path / META_PROPERTIES_FILE
    meta = MetaProperties(1, 3, "MkU3OEVBNTcwNTJENDM2Qg", "J8aAPcfLQt2bqs1JT_rMgQ")
    meta.write(path)
    assert path.read_text().splitlines()[-1] == "directory.id=J8aAPcfLQt2bqs1JT_rMgQ"
    assert MetaProperties.read(path) == meta


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("version=1\nnode.id=1\n", "'cluster.id' is missing"),
        ("version=1\ncluster.id=abc\n", "'node.id' is missing"),
        ("node.id=1\ncluster.id=abc\n", "'version' is missing"),
        ("version=0\nbroker.id=1\nnode.id=1\ncluster.id=abc\n", "version 0 is not supported"),
        ("version=1\nnode.id=one\ncluster.id=abc\n", "'one' is not an integer"),
        ("version=1\nnode.id=-2\ncluster.id=abc\n", "negative"),
        ("version=1\nnode.id=1\nnode.id=2\ncluster.id=abc\n", "repeats key 'node.id'"),
        ("version=1\nnode.id=1\ncluster.id=a\\u0062\n", "backslash"),
        ("version=1\nnode.id=1\ncluster.id\n", "not key=value"),
        ("version=1\nnode.id=1\ncluster.id=\n", "cluster.id ''"),
        ("version=1\nnode.id=1\ncluster.id=abc\ndirectory.id=short\n", "directory.id 'short'"),
    ],
)
def test_malformed_meta_properties_are_rejected(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / META_PROPERTIES_FILE
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError, match=reason) as raised:
        MetaProperties.read(path)
    assert str(path) in str(raised.value)


def test_ensure_claims_a_fresh_directory_then_accepts_the_same_identity(tmp_path: Path) -> None:
    log_dir = tmp_path / "data" / "logs"
    created = ensure(log_dir, node_id=1, cluster_id="abcDEF-_12", rng=random.Random(1))
    assert created == MetaProperties(1, 1, "abcDEF-_12", new_directory_id(random.Random(1)))
    assert MetaProperties.read(log_dir / META_PROPERTIES_FILE) == created
    assert ensure(log_dir, node_id=1, cluster_id="abcDEF-_12", rng=random.Random(2)) == created, "the id stays"


def test_ensure_gives_a_directory_formatted_before_directory_ids_one_and_keeps_it(tmp_path: Path) -> None:
    MetaProperties(1, 1, "clusterA").write(tmp_path / META_PROPERTIES_FILE)
    claimed = ensure(tmp_path, node_id=1, cluster_id="clusterA", rng=random.Random(5))
    assert claimed.directory_id == new_directory_id(random.Random(5))
    assert MetaProperties.read(tmp_path / META_PROPERTIES_FILE) == claimed


def test_a_wiped_directory_gets_a_new_id(tmp_path: Path) -> None:
    """KIP-858: what the controller compares to tell a wiped or replaced dir from the old one."""
    first = ensure(tmp_path / "logs", node_id=1, cluster_id="clusterA", rng=random.Random(5))
    (tmp_path / "logs" / META_PROPERTIES_FILE).unlink()
    (tmp_path / "logs").rmdir()
    second = ensure(tmp_path / "logs", node_id=1, cluster_id="clusterA", rng=random.Random(6))
    assert first.directory_id != second.directory_id


def test_ensure_refuses_a_directory_of_another_cluster(tmp_path: Path) -> None:
    ensure(tmp_path, node_id=1, cluster_id="clusterA", rng=random.Random(1))
    with pytest.raises(InconsistentClusterIdError) as raised:
        ensure(tmp_path, node_id=1, cluster_id="clusterB", rng=random.Random(1))
    message = str(raised.value)
    assert str(tmp_path) in message
    assert "'clusterA'" in message
    assert "'clusterB'" in message
    assert "fresh directory" in message
    assert raised.value.error_name == "INCONSISTENT_CLUSTER_ID"
    assert MetaProperties.read(tmp_path / META_PROPERTIES_FILE).cluster_id == "clusterA"


def test_ensure_refuses_a_directory_of_another_node(tmp_path: Path) -> None:
    ensure(tmp_path, node_id=1, cluster_id="clusterA", rng=random.Random(1))
    with pytest.raises(InconsistentNodeIdError) as raised:
        ensure(tmp_path, node_id=2, cluster_id="clusterA", rng=random.Random(1))
    message = str(raised.value)
    assert str(tmp_path) in message
    assert "node.id=1" in message
    assert "fresh directory" in message


def test_ensure_rejects_an_invalid_identity(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"node\.id -1"):
        ensure(tmp_path, node_id=-1, cluster_id="clusterA", rng=random.Random(1))
    with pytest.raises(ValueError, match=r"cluster\.id"):
        ensure(tmp_path, node_id=1, cluster_id="has space", rng=random.Random(1))
    assert not (tmp_path / META_PROPERTIES_FILE).exists()


@given(seed=st.integers(0, 2**64))
def test_new_cluster_id_is_kafkas_uuid_form_and_reproducible(seed: int) -> None:
    cluster_id = new_cluster_id(random.Random(seed))
    assert cluster_id == new_cluster_id(random.Random(seed))
    assert len(cluster_id) == 22
    assert not cluster_id.startswith("-")
    value = uuid.UUID(bytes=base64.urlsafe_b64decode(cluster_id + "=="))
    assert value.version == 4
    assert value.variant == uuid.RFC_4122
    MetaProperties(1, 0, cluster_id)


def test_new_cluster_ids_differ() -> None:
    rng = random.Random(7)
    assert len({new_cluster_id(rng) for _ in range(1000)}) == 1000


def test_offset_checkpoint_unchanged_since_its_last_write_is_not_written_again(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Goal: an idle broker's periodic checkpoints (2,000 partitions, every 5 s) cost no write or
    fsync while no offset moved. Method: count the atomic writes of one file over equal and changed
    offsets."""
    import storage.checkpoint as checkpoint_module

    writes: list[Path] = []
    real_write = checkpoint_module.write_atomically

    def counting_write(path: Path, text: str | bytes) -> None:
        writes.append(path)
        real_write(path, text)

    monkeypatch.setattr(checkpoint_module, "write_atomically", counting_write)
    checkpoint = OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint")
    offsets = {TopicPartition("orders", 0): 5, TopicPartition("orders", 1): 7}
    checkpoint.write(offsets)
    checkpoint.write(dict(offsets))
    assert len(writes) == 1, "the same offsets again are not rewritten"
    checkpoint.write({**offsets, TopicPartition("orders", 1): 8})
    assert len(writes) == 2
    assert checkpoint.read() == {**offsets, TopicPartition("orders", 1): 8}
