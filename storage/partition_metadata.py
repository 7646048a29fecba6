"""partition.metadata: the id of the topic a partition log belongs to (Kafka KIP-516).

A partition directory is named `<topic>-<partition>`, so a topic deleted and created again under
the same name while a broker was down would meet its old log there. The topic id tells the two
apart: the broker writes it into every partition directory it hosts and, before opening a log,
compares the stored id with the metadata's (see `LogManager.get_or_create_log` and the node's
stray-log pass).

Format (Kafka's `PartitionMetadataFile`, version 0), UTF-8, exactly two lines and, as Kafka
writes it, no newline after the second:

    version: 0
    topic_id: kGlA7dc5S_SJMIt-HYP3ig

The topic id is Kafka's `Uuid.toString`: 16 bytes in URL-safe base64 without padding (22
characters), never all zeros. The file is replaced atomically (`write_atomically`).

Reading accepts what Kafka's reader accepts from Kafka's writer, plus one trailing newline (an
editor's); anything else (another version, other keys or separators, a third line, an id that is
not 22 canonical base64 characters or is all zeros) is `CorruptPartitionMetadataError`: a
damaged file must not decide whether a log is kept or deleted.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from pathlib import Path

from storage.checkpoint import write_atomically
from storage.errors import CorruptPartitionMetadataError

PARTITION_METADATA_FILE = "partition.metadata"
PARTITION_METADATA_VERSION = 0
TOPIC_ID_LENGTH = 22
_TOPIC_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{22}")
_LINE_PATTERN = re.compile(r"([a-z_]+): (\S+)")
_LINE_KEYS = ("version", "topic_id")


def topic_id_error(topic_id: str) -> str | None:
    """Why `topic_id` is not a Kafka topic id in canonical text form, or None if it is."""
    if not _TOPIC_ID_PATTERN.fullmatch(topic_id):
        return f"{topic_id!r} is not 22 characters of URL-safe base64 [A-Za-z0-9_-]"
    try:
        value = base64.urlsafe_b64decode(topic_id + "==")
    except binascii.Error as error:
        return f"{topic_id!r} is not URL-safe base64: {error}"
    if base64.urlsafe_b64encode(value).decode("ascii").rstrip("=") != topic_id:
        return f"{topic_id!r} is not the canonical text of a 16-byte id (its last character has stray bits)"
    if value == bytes(16):
        return f"{topic_id!r} is the all-zero id, which names no topic"
    return None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """The content of one `partition.metadata` file: its format `version` and the `topic_id`."""

    version: int
    topic_id: str

    def __post_init__(self) -> None:
        if self.version != PARTITION_METADATA_VERSION:
            raise ValueError(
                f"partition.metadata version {self.version} is not supported; "
                f"only version {PARTITION_METADATA_VERSION} is"
            )
        error = topic_id_error(self.topic_id)
        if error is not None:
            raise ValueError(f"topic id {error}")

    def to_text(self) -> str:
        """Kafka's bytes: `PartitionMetadata.encode`, no newline after the topic id line."""
        return f"version: {self.version}\ntopic_id: {self.topic_id}"


class PartitionMetadataFile:
    """The `partition.metadata` file of one partition directory.

    Written once, when the broker first hosts the partition under a topic id (or adopts an older
    log that has no file); never rewritten with another id: a log of another topic is deleted,
    not relabelled.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / PARTITION_METADATA_FILE

    def exists(self) -> bool:
        return self.path.exists()

    def write(self, topic_id: str) -> None:
        """Record `topic_id` atomically; ValueError (file untouched) if it is not a topic id."""
        write_atomically(self.path, PartitionMetadata(PARTITION_METADATA_VERSION, topic_id).to_text())

    def read(self) -> PartitionMetadata | None:
        """The stored metadata; None if the file is absent (a log written before topic ids)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise self._corrupt("not valid UTF-8") from error
        lines = text.removesuffix("\n").split("\n")
        if len(lines) != len(_LINE_KEYS):
            raise self._corrupt(f"expected 2 lines (version, topic_id), found {len(lines)}: {text!r}")
        values = [self._value(line_number, line, key)
                  for line_number, (line, key) in enumerate(zip(lines, _LINE_KEYS, strict=True), start=1)]
        version_text, topic_id = values
        if version_text != str(PARTITION_METADATA_VERSION):
            raise self._corrupt(f"version {version_text!r} is not the supported version {PARTITION_METADATA_VERSION}")
        error = topic_id_error(topic_id)
        if error is not None:
            raise self._corrupt(f"line 2: topic id {error}")
        return PartitionMetadata(PARTITION_METADATA_VERSION, topic_id)

    def _value(self, line_number: int, line: str, key: str) -> str:
        match = _LINE_PATTERN.fullmatch(line)
        if match is None or match.group(1) != key:
            raise self._corrupt(f"line {line_number} is not '{key}: <value>': {line!r}")
        return match.group(2)

    def _corrupt(self, reason: str) -> CorruptPartitionMetadataError:
        return CorruptPartitionMetadataError(
            f"partition metadata file {self.path}: {reason}. The file is damaged or was edited: "
            "restore it from a good copy, or delete it so that the broker adopts the topic id of "
            "the cluster metadata when it next hosts the partition (only if the log belongs to "
            f"the current topic; otherwise delete {self.path.parent} and let the replica "
            "rebuild from the leader)"
        )
