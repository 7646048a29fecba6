"""meta.properties: which node and which cluster a log directory belongs to (Kafka KRaft, v1).

Format: Java properties text, written atomically (`write_atomically`) at each log dir root:

    #Tributary log directory identity; do not edit.
    version=1
    node.id=1
    cluster.id=MkU3OEVBNTcwNTJENDM2Qg

`cluster.id` is Kafka's form of a random UUID: 16 bytes (version-4 bits set) in URL-safe
base64 without padding, 22 characters. Reading skips blank lines and `#`/`!` comments, splits
each line at the first `=` or `:` and ignores keys it does not know (newer Kafka versions add
`directory.id`). Backslash escapes are not supported: our values never need them.

A node checks every log dir with `ensure` before opening it, so it never appends to a log of
another node or cluster: that would mix two histories in one partition.
"""

from __future__ import annotations

import random
import re
import uuid
from base64 import urlsafe_b64encode
from dataclasses import dataclass
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
_CLUSTER_ID_ATTEMPTS_MAX = 64


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """The identity stored in a log dir: format `version`, `node_id`, `cluster_id`."""

    version: int
    node_id: int
    cluster_id: str

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

    def to_text(self) -> str:
        return (
            f"{_COMMENT}\nversion={self.version}\nnode.id={self.node_id}\n"
            f"cluster.id={self.cluster_id}\n"
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
            )
        except ValueError as error:
            raise _corrupt(path, str(error)) from error


def ensure(log_dir: Path, node_id: int, cluster_id: str) -> MetaProperties:
    """Claim `log_dir` for this node and cluster, or check that it is already ours.

    Creates `log_dir` if needed and writes `meta.properties` when it is absent. When present,
    its cluster id and node id must equal `cluster_id` and `node_id`, else
    InconsistentClusterIdError or InconsistentNodeIdError (the cluster is checked first).
    """
    expected = MetaProperties(META_PROPERTIES_VERSION, node_id, cluster_id)
    path = log_dir / META_PROPERTIES_FILE
    try:
        stored = MetaProperties.read(path)
    except FileNotFoundError:
        log_dir.mkdir(parents=True, exist_ok=True)
        expected.write(path)
        return expected
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
    assert stored == expected, f"stored={stored} expected={expected}"
    return stored


def new_cluster_id(rng: random.Random) -> str:
    """A random cluster id in Kafka's form (see module docstring), drawn from `rng`."""
    for _ in range(_CLUSTER_ID_ATTEMPTS_MAX):
        value = uuid.UUID(int=rng.getrandbits(128), version=4)
        text = urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")
        assert len(text) == 22, text
        # Kafka's Uuid.randomUuid redraws ids starting with '-': a command line would take
        # such an id for an option (e.g. `kafka-storage format --cluster-id -abc...`).
        if not text.startswith("-"):
            return text
    raise AssertionError(f"{_CLUSTER_ID_ATTEMPTS_MAX} cluster ids in a row started with '-'")


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
