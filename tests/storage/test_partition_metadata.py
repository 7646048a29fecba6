"""partition.metadata: Kafka's two-line topic id file (KIP-516), atomic writes, damaged files.

Method: examples pin the exact bytes Kafka's PartitionMetadataFile writes; hypothesis checks that
every 16-byte id but zero round-trips; a table of damaged files must each be refused with the path
and the way out; fault injection shows the write is the shared `write_atomically`.
"""

from __future__ import annotations

import base64
import errno
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage import checkpoint, partition_metadata
from storage.errors import CorruptCheckpointError, CorruptPartitionMetadataError
from storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    PartitionMetadata,
    PartitionMetadataFile,
    topic_id_error,
)

TOPIC_ID = "kGlA7dc5S_SJMIt-HYP3ig"
OTHER_TOPIC_ID = "x3Ojb4p1TXK5vsK2Ae1E-w"


def kafka_topic_id(value: bytes) -> str:
    """Kafka's Uuid.toString (and the controller's `_new_topic_id`): URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(value).decode("ascii").rstrip("=")


def test_write_produces_kafkas_bytes_without_a_final_newline(tmp_path: Path) -> None:
    PartitionMetadataFile(tmp_path).write(TOPIC_ID)
    assert (tmp_path / "partition.metadata").read_bytes() == b"version: 0\ntopic_id: kGlA7dc5S_SJMIt-HYP3ig"
    assert PARTITION_METADATA_FILE == "partition.metadata"


def test_reads_a_file_written_by_kafka_and_one_with_an_editors_final_newline(tmp_path: Path) -> None:
    file = PartitionMetadataFile(tmp_path)
    for text in (f"version: 0\ntopic_id: {TOPIC_ID}", f"version: 0\ntopic_id: {TOPIC_ID}\n"):
        file.path.write_text(text)
        assert file.read() == PartitionMetadata(0, TOPIC_ID)


def test_a_missing_file_reads_as_none(tmp_path: Path) -> None:
    file = PartitionMetadataFile(tmp_path)
    assert not file.exists()
    assert file.read() is None


@given(st.binary(min_size=16, max_size=16).filter(any))
def test_every_nonzero_16_byte_id_round_trips(tmp_path_factory: pytest.TempPathFactory, value: bytes) -> None:
    directory = tmp_path_factory.mktemp("partition")
    topic_id = kafka_topic_id(value)
    PartitionMetadataFile(directory).write(topic_id)
    assert PartitionMetadataFile(directory).read() == PartitionMetadata(0, topic_id)


def test_write_replaces_the_previous_id(tmp_path: Path) -> None:
    file = PartitionMetadataFile(tmp_path)
    file.write(TOPIC_ID)
    file.write(OTHER_TOPIC_ID)
    assert file.read() == PartitionMetadata(0, OTHER_TOPIC_ID)
    assert [path.name for path in tmp_path.iterdir()] == [PARTITION_METADATA_FILE]


MALFORMED = {
    "empty": b"",
    "version only": b"version: 0",
    "version only with newline": b"version: 0\n",
    "third line": f"version: 0\ntopic_id: {TOPIC_ID}\nextra: 1".encode(),
    "two final newlines": f"version: 0\ntopic_id: {TOPIC_ID}\n\n".encode(),
    "crlf": f"version: 0\r\ntopic_id: {TOPIC_ID}\r\n".encode(),
    "version 1": f"version: 1\ntopic_id: {TOPIC_ID}".encode(),
    "version not a number": f"version: zero\ntopic_id: {TOPIC_ID}".encode(),
    "no space after colon": f"version:0\ntopic_id: {TOPIC_ID}".encode(),
    "two spaces after colon": f"version:  0\ntopic_id: {TOPIC_ID}".encode(),
    "lines swapped": f"topic_id: {TOPIC_ID}\nversion: 0".encode(),
    "other key": f"version: 0\ntopicId: {TOPIC_ID}".encode(),
    "id too short": f"version: 0\ntopic_id: {TOPIC_ID[:-1]}".encode(),
    "id padded": f"version: 0\ntopic_id: {TOPIC_ID}==".encode(),
    "id standard base64": b"version: 0\ntopic_id: kGlA7dc5S/SJMIt+HYP3ig",
    "id all zeros": b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",
    "id with stray bits": f"version: 0\ntopic_id: {TOPIC_ID[:-1]}h".encode(),
    "not utf-8": b"version: 0\ntopic_id: \xff" + TOPIC_ID[1:].encode(),
}


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_files_are_refused_with_the_path_and_the_way_out(tmp_path: Path, data: bytes) -> None:
    file = PartitionMetadataFile(tmp_path)
    file.path.write_bytes(data)
    with pytest.raises(CorruptPartitionMetadataError) as raised:
        file.read()
    message = str(raised.value)
    assert str(file.path) in message
    assert "delete it" in message
    # A damaged partition.metadata is a damaged checkpoint-like file: existing handlers catch it.
    assert isinstance(raised.value, CorruptCheckpointError)
    assert raised.value.error_name == "KAFKA_STORAGE_ERROR"


@pytest.mark.parametrize("topic_id", ["", TOPIC_ID[:-1], "AAAAAAAAAAAAAAAAAAAAAA", TOPIC_ID + "A", "a b"])
def test_write_refuses_what_is_not_a_topic_id_and_keeps_the_old_file(tmp_path: Path, topic_id: str) -> None:
    file = PartitionMetadataFile(tmp_path)
    file.write(TOPIC_ID)
    assert topic_id_error(topic_id) is not None
    with pytest.raises(ValueError, match="topic id"):
        file.write(topic_id)
    assert file.read() == PartitionMetadata(0, TOPIC_ID)


def test_the_write_is_the_shared_atomic_checkpoint_write() -> None:
    assert partition_metadata.write_atomically is checkpoint.write_atomically


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_a_failed_write_keeps_the_old_file_and_the_next_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    file = PartitionMetadataFile(tmp_path)
    file.write(TOPIC_ID)

    def fail(*args: object) -> None:
        raise OSError(errno.EIO, "injected")

    with monkeypatch.context() as patch:
        patch.setattr(os, failing, fail)
        with pytest.raises(OSError, match="injected"):
            file.write(OTHER_TOPIC_ID)
    assert file.read() == PartitionMetadata(0, TOPIC_ID)
    file.write(OTHER_TOPIC_ID)
    assert file.read() == PartitionMetadata(0, OTHER_TOPIC_ID)
    assert [path.name for path in tmp_path.iterdir()] == [PARTITION_METADATA_FILE]
