"""meta.properties: which node and which cluster a log directory belongs to, and its own id (Kafka KRaft, v1).

Format: Java properties text, written atomically (`write_atomically`) at each log dir root:

    #Tributary log directory identity; do not edit.
    version=1
    node.id=1
    cluster.id=MkU3OEVBNTcwNTJENDM2Qg
    directory.id=J8aAPcfLQt2bqs1JT_rMgQ

`cluster.id` and `directory.id` are Kafka's form of a random UUID: 16 bytes (version-4 bits set) in
URL-safe base64 without padding, 22 characters. Reading skips blank lines and `#`/`!` comments,
splits each line at the first `=` or `:` and ignores keys it does not know. Backslash escapes are
not supported: our values never need them.

`directory.id` (KIP-858) is drawn when the dir is formatted (`ensure` on an empty dir) and never
changes; a dir written before it existed gets one on its next start. The broker registers its
directory ids with the controller, so a dir that was wiped or replaced (a fresh id where an old
one was) is recognised: its replicas rejoin as empty followers and never lead while another
replica holds data.

A node checks every log dir with `ensure` before opening it, so it never appends to a log of
another node or cluster: that would mix two histories in one partition.
"""

from __future__ import annotations

import random
import re
import uuid
from base64 import urlsafe_b64encode
from dataclasses import dataclass, replace
from pathlib import Path

from storage.checkpoint import parse_integer, write_atomically
from storage.errors import (
    CorruptCheckpointError,
    InconsistentClusterIdError,
    InconsistentNodeIdError,
)

META_PROPERTIES_FILE = "meta.properties"
META_PROPERTIES_VERSION = 1
_COMMENT = "#Tributary log directory identity; do not edit."
_CLUSTER_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]+")
_DIRECTORY_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{22}")
_UUID_ATTEMPTS_MAX = 64


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """The identity stored in a log dir: format `version`, `node_id`, `cluster_id`, and its
    `directory_id` (None only in a file written before directory ids)."""

    version: int
    node_id: int
    cluster_id: str
    directory_id: str | None = None

    def __post_init__(self) -> None:
        if self.version != META_PROPERTIES_VERSION:
            raise ValueError(
                f"meta.properties version {self.version} is not supported; "
                f"only version {META_PROPERTIES_VERSION} (KRaft) is"
            )
        if self.node_id < 0:
            raise ValueError(f"node.id {self.node_id} is negative")
        if not _CLUSTER_ID_PATTERN.fullmatch(self.cluster_id):
            raise ValueError(
                f"cluster.id {self.cluster_id!r} must be non-empty [A-Za-z0-9_-] "
                "(new_cluster_id makes one)"
            )
        if self.directory_id is not None and not _DIRECTORY_ID_PATTERN.fullmatch(self.directory_id):
            raise ValueError(
                f"directory.id {self.directory_id!r} must be 22 characters of [A-Za-z0-9_-] "
                "(new_directory_id makes one)"
            )

    def to_text(self) -> str:
        directory = "" if self.directory_id is None else f"directory.id={self.directory_id}\n"
        return (
            f"{_COMMENT}\nversion={self.version}\nnode.id={self.node_id}\n"
            f"cluster.id={self.cluster_id}\n{directory}"
        )

    def write(self, path: Path) -> None:
        """Write this identity to the file `path`, atomically."""
        write_atomically(path, self.to_text())

    @classmethod
    def read(cls, path: Path) -> MetaProperties:
        """Read the file `path`; FileNotFoundError if absent, CorruptCheckpointError if bad."""
        properties = _parse_properties(path, path.read_bytes())
        try:
            return cls(
                version=parse_integer(_required(path, properties, "version")),
                node_id=parse_integer(_required(path, properties, "node.id")),
                cluster_id=_required(path, properties, "cluster.id"),
                directory_id=properties.get("directory.id"),
            )
        except ValueError as error:
            raise _corrupt(path, str(error)) from error


def ensure(log_dir: Path, node_id: int, cluster_id: str, rng: random.Random) -> MetaProperties:
    """Claim `log_dir` for this node and cluster, or check that it is already ours.

    Creates `log_dir` if needed and writes `meta.properties` when it is absent, with a directory id
    drawn from `rng`. When present, its cluster id and node id must equal `cluster_id` and
    `node_id`, else InconsistentClusterIdError or InconsistentNodeIdError (the cluster is checked
    first); a file without a directory id gets one written. Returns what the file now says.
    """
    expected = MetaProperties(META_PROPERTIES_VERSION, node_id, cluster_id)
    path = log_dir / META_PROPERTIES_FILE
    try:
        stored = MetaProperties.read(path)
    except FileNotFoundError:
        log_dir.mkdir(parents=True, exist_ok=True)
        created = replace(expected, directory_id=new_directory_id(rng))
        created.write(path)
        return created
    if stored.cluster_id != cluster_id:
        raise InconsistentClusterIdError(
            f"log dir {log_dir} belongs to node {stored.node_id} of cluster "
            f"{stored.cluster_id!r}, but this node is configured for cluster {cluster_id!r}; "
            f"point log.dirs at a fresh directory, or join the node to cluster "
            f"{stored.cluster_id!r}"
        )
    if stored.node_id != node_id:
        raise InconsistentNodeIdError(
            f"log dir {log_dir} belongs to node {stored.node_id} of cluster "
            f"{stored.cluster_id!r}, but this node's node.id is {node_id}; set "
            f"node.id={stored.node_id}, or point log.dirs at a fresh directory"
        )
    assert replace(stored, directory_id=None) == expected, f"stored={stored} expected={expected}"
    if stored.directory_id is None:
        stored = replace(stored, directory_id=new_directory_id(rng))
        stored.write(path)
    return stored


def new_cluster_id(rng: random.Random) -> str:
    """A random cluster id in Kafka's form (see module docstring), drawn from `rng`."""
    return _random_uuid(rng)


def new_directory_id(rng: random.Random) -> str:
    """A random log directory id in Kafka's form (KIP-858), drawn from `rng`. The version-4 bits
    keep it clear of Kafka's reserved directory ids (UNASSIGNED, LOST, MIGRATING: 0, 1, 2)."""
    return _random_uuid(rng)


def _random_uuid(rng: random.Random) -> str:
    for _ in range(_UUID_ATTEMPTS_MAX):
        value = uuid.UUID(int=rng.getrandbits(128), version=4)
        text = urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")
        assert len(text) == 22, text
        # Kafka's Uuid.randomUuid redraws ids starting with '-': a command line would take
        # such an id for an option (e.g. `kafka-storage format --cluster-id -abc...`).
        if not text.startswith("-"):
            return text
    raise AssertionError(f"{_UUID_ATTEMPTS_MAX} ids in a row started with '-'")


def _parse_properties(path: Path, data: bytes) -> dict[str, str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _corrupt(path, "not valid UTF-8") from error
    properties: dict[str, str] = {}
    for line_number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "\\" in line:
            raise _corrupt(path, f"line {line_number} uses a backslash escape: {raw_line!r}")
        match = re.fullmatch(r"([^=:\s]+)\s*[=:]\s*(.*)", line)
        if match is None:
            raise _corrupt(path, f"line {line_number} is not key=value: {raw_line!r}")
        key, value = match.group(1), match.group(2)
        if key in properties:
            raise _corrupt(path, f"line {line_number} repeats key {key!r}")
        properties[key] = value
    return properties


def _required(path: Path, properties: dict[str, str], key: str) -> str:
    if key not in properties:
        raise _corrupt(path, f"key {key!r} is missing")
    return properties[key]


def _corrupt(path: Path, reason: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"{path}: {reason}. This file names the node and cluster that own the log dir; restore "
        "it, or point log.dirs at a fresh directory"
    )
