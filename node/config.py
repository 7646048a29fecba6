"""NodeConfig: one node's settings, with Kafka's broker keys, defaults and bounds.

Sources, later ones winning (`load_config`):
1. a Kafka-style `.properties` file: `key=value` or `key: value` lines, `#` and `!` comments;
2. environment variables `TRIBUTARY_<KEY>`, the key upper-cased with dots as underscores
   (`TRIBUTARY_LOG_DIRS` sets `log.dirs`; Kafka keys hold no underscores, so this is one to one);
3. explicit overrides (`tributary-node --override key=value`).

Keys are parsed by the module that owns them, never twice: `controller.quorum.*` and
`metadata.log.*` (but `metadata.log.dir`, the node's own) by `QuorumConfig.from_properties`; the
topic defaults (`log.segment.bytes`, `log.retention.hours`, `message.max.bytes`, ...) are Kafka's
broker synonyms of `LogConfig`'s topic keys and are handed to `LogConfig.from_properties`; the
node's own keys are in `_NODE_KEYS`.
Every bad value raises `ConfigException` naming the key, the value and what is allowed.

Listeners speak one of two protocols, by `listener.security.protocol.map` (Kafka's key): PLAINTEXT
is Kafka's wire protocol (node/kafka/: every Kafka client), HTTP is Tributary's HTTP+msgpack API
(inter-node traffic, the controller quorum, `/metrics`, `/health` and our own client). A listener
the map does not name speaks the protocol its name is (PLAINTEXT, HTTP), else HTTP (Tributary's
default, so `INTERNAL://`/`EXTERNAL://` configs keep their meaning). The inter-broker and controller
listeners must speak HTTP; a node needs one.

Unknown keys are not errors (Kafka logs "supplied but isn't a known config" and carries on, so
a Kafka `server.properties` full of keys we do not use still starts); they are listed in
`NodeConfig.unused_keys` for the node to log at start.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from controller.quorum_config import QuorumConfig, QuorumConfigError
from controller.quorum_controller import ControllerConfig
from node.broker_settings import BrokerSettings
from replication.config import ReplicationConfig
from replication.consumer_groups import GroupsConfig
from storage.config import INT_MAX, LONG_MAX, LogConfig
from storage.errors import InvalidConfigError

ENV_PREFIX = "TRIBUTARY_"
DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092,HTTP://127.0.0.1:9192"
KAFKA_PROTOCOL = "PLAINTEXT"  # Kafka's wire protocol, no TLS (SSL and SASL are not served)
HTTP_PROTOCOL = "HTTP"  # Tributary's HTTP+msgpack API
PROTOCOLS = (KAFKA_PROTOCOL, HTTP_PROTOCOL)
DEFAULT_LOG_DIR = "/tmp/kafka-logs"  # Kafka's `log.dir` default; `log.dirs` falls back to it
_QUORUM_PREFIXES = ("controller.quorum.", "metadata.log.")
METADATA_LOG_DIR_KEY = "metadata.log.dir"  # Kafka's; under a quorum prefix, but the node's own key
_LISTENER_PATTERN = re.compile(r"([A-Za-z0-9_]+)://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]*):(\d+)")
_CLUSTER_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]+")
_UNROUTABLE_HOSTS = frozenset({"", "0.0.0.0", "[::]"})
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")
_MS_PER_MINUTE = 60_000
_MS_PER_HOUR = 3_600_000


class ConfigException(ValueError):
    """A config key has a bad value, or keys contradict each other (Kafka's ConfigException).
    The message names the key, the value and what is allowed."""


class ProcessRole(Enum):
    """`process.roles` (KRaft): what a node runs."""

    BROKER = "broker"
    CONTROLLER = "controller"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One `NAME://host:port` entry of `listeners` or `advertised.listeners`."""

    name: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.name}://{self.address}"


@dataclass(frozen=True, slots=True)
class _Integer:
    default: int
    minimum: int
    maximum: int = LONG_MAX


@dataclass(frozen=True, slots=True)
class _Boolean:
    default: bool


# The node's own scalar keys: field = key with dots as underscores; defaults are Kafka's.
_NODE_KEYS: dict[str, _Integer | _Boolean] = {
    "broker.heartbeat.interval.ms": _Integer(2000, 1),
    "broker.session.timeout.ms": _Integer(9000, 1),
    # Not Kafka's: fence a broker whose inter-broker listener refuses the controller's probe
    # (README, "Failover after kill -9").
    "broker.refused.connection.fencing.enable": _Boolean(True),
    "replica.lag.time.max.ms": _Integer(30_000, 1),
    "replica.fetch.wait.max.ms": _Integer(500, 0, INT_MAX),
    "replica.fetch.max.bytes": _Integer(1024 * 1024, 1, INT_MAX),  # Kafka allows 0; a fetch of 0 bytes never moves
    "replica.fetch.backoff.ms": _Integer(1000, 0, INT_MAX),
    "replica.fetch.min.bytes": _Integer(1, 0, INT_MAX),
    "replica.fetch.response.max.bytes": _Integer(10 * 1024 * 1024, 1, INT_MAX),
    "replica.high.watermark.checkpoint.interval.ms": _Integer(5000, 1),
    "socket.request.max.bytes": _Integer(100 * 1024 * 1024, 1, INT_MAX),
    # Ours: the longest list one request may hold (its partitions, mostly); msgpack would otherwise
    # build a list as long as the body, ~40 bytes of memory for each byte received.
    "max.request.partitions": _Integer(100_000, 1, INT_MAX),
    # Ours: long polls parked at once; one more is answered at once with what is there.
    "max.delayed.fetches": _Integer(10_000, 1, INT_MAX),
    # KIP-227: incremental fetch sessions cached by a broker for Kafka clients (0: none).
    "max.incremental.fetch.session.cache.slots": _Integer(1000, 0, INT_MAX),
    "request.timeout.ms": _Integer(30_000, 1, INT_MAX),
    "num.partitions": _Integer(1, 1, INT_MAX),
    "default.replication.factor": _Integer(1, 1, INT_MAX),
    "offsets.topic.num.partitions": _Integer(50, 1, INT_MAX),
    "offsets.topic.replication.factor": _Integer(3, 1, 32767),
    "log.retention.check.interval.ms": _Integer(300_000, 1),
    # Kafka's default is Long.MAX_VALUE, which never checks a topic's `flush.ms`; once a second
    # costs one comparison per log and makes `flush.ms` mean what it says (node/broker_settings.py).
    "log.flush.scheduler.interval.ms": _Integer(1000, 1),
    "log.flush.offset.checkpoint.interval.ms": _Integer(60_000, 0, INT_MAX),
    "log.flush.start.offset.checkpoint.interval.ms": _Integer(60_000, 0, INT_MAX),
    "log.cleaner.enable": _Boolean(True),
    "log.cleaner.backoff.ms": _Integer(15_000, 0),
    "producer.id.expiration.ms": _Integer(86_400_000, 1),
    "group.min.session.timeout.ms": _Integer(6_000, 1),
    "group.max.session.timeout.ms": _Integer(1_800_000, 1),
    "group.initial.rebalance.delay.ms": _Integer(3_000, 0),
    "group.max.size": _Integer(INT_MAX, 1, INT_MAX),
    "producer.id.expiration.check.interval.ms": _Integer(600_000, 1),
}

# Kafka's broker keys for the topic defaults (ServerTopicConfigSynonyms): broker key -> topic key.
TOPIC_DEFAULT_SYNONYMS: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "message.max.bytes": "max.message.bytes",
    "max.decompressed.batch.bytes": "max.decompressed.batch.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}
# Coarser units of a time key, used only when the finer key is absent (Kafka: ms, then minutes, then hours).
_TIME_UNIT_SYNONYMS: dict[str, tuple[tuple[str, int, int], ...]] = {
    "log.roll.ms": (("log.roll.hours", _MS_PER_HOUR, 1),),
    "log.retention.ms": (("log.retention.minutes", _MS_PER_MINUTE, -1), ("log.retention.hours", _MS_PER_HOUR, -1)),
}
_SPECIAL_KEYS = frozenset({
    "node.id", "process.roles", "listeners", "advertised.listeners", "inter.broker.listener.name",
    "controller.listener.names", "listener.security.protocol.map",
    "controller.quorum.voters", "log.dirs", "log.dir", "cluster.id", "broker.rack", METADATA_LOG_DIR_KEY,
})
KNOWN_KEYS = frozenset(
    _SPECIAL_KEYS | set(_NODE_KEYS) | set(TOPIC_DEFAULT_SYNONYMS)
    | {unit_key for units in _TIME_UNIT_SYNONYMS.values() for unit_key, _, _ in units}
)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """A node's validated settings (see the module docstring). Immutable; `properties` holds the
    merged raw key/value strings it was built from."""

    node_id: int
    process_roles: frozenset[ProcessRole]
    listeners: tuple[Endpoint, ...]
    advertised_listeners: tuple[Endpoint, ...]
    listener_protocols: Mapping[str, str]  # listener name -> PLAINTEXT (Kafka) or HTTP
    inter_broker_listener_name: str
    controller_listener_names: tuple[str, ...]
    log_dirs: tuple[Path, ...]
    metadata_log_dir: Path
    cluster_id: str
    broker_rack: str | None
    broker_heartbeat_interval_ms: int
    broker_session_timeout_ms: int
    replica_lag_time_max_ms: int
    replica_fetch_wait_max_ms: int
    replica_fetch_max_bytes: int
    replica_fetch_backoff_ms: int
    replica_fetch_min_bytes: int
    replica_fetch_response_max_bytes: int
    replica_high_watermark_checkpoint_interval_ms: int
    socket_request_max_bytes: int
    max_request_partitions: int
    max_delayed_fetches: int
    max_incremental_fetch_session_cache_slots: int
    request_timeout_ms: int
    num_partitions: int
    default_replication_factor: int
    offsets_topic_num_partitions: int
    offsets_topic_replication_factor: int
    log_retention_check_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    log_cleaner_enable: bool
    broker_refused_connection_fencing_enable: bool
    log_cleaner_backoff_ms: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_initial_rebalance_delay_ms: int
    group_max_size: int
    quorum: QuorumConfig
    topic_defaults: LogConfig
    properties: Mapping[str, str]
    unused_keys: tuple[str, ...]

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> NodeConfig:
        """Validate `properties` (raw strings, Kafka keys) into a NodeConfig."""
        node_id = _parse_integer("node.id", _required(properties, "node.id"), _Integer(0, 0, INT_MAX))
        roles = _parse_roles(properties.get("process.roles", "broker,controller"))
        listeners = _parse_listeners("listeners", properties.get("listeners", DEFAULT_LISTENERS))
        advertised = _parse_advertised(properties, listeners)
        protocols = _parse_protocol_map(properties, listeners)
        quorum = _parse_quorum(properties)
        _check_voter_role(node_id, roles, quorum)
        scalars = {
            key.replace(".", "_"): _parse_scalar(key, properties.get(key), spec) for key, spec in _NODE_KEYS.items()
        }
        log_dirs = _parse_log_dirs(properties)
        config = cls(
            node_id=node_id,
            process_roles=roles,
            listeners=listeners,
            advertised_listeners=advertised,
            listener_protocols=protocols,
            inter_broker_listener_name=_parse_inter_broker_listener(properties, listeners, advertised, protocols),
            controller_listener_names=_parse_controller_listeners(properties, listeners, node_id, quorum, protocols),
            log_dirs=log_dirs,
            metadata_log_dir=_parse_metadata_log_dir(properties, log_dirs),
            cluster_id=_parse_cluster_id(properties, quorum),
            broker_rack=_parse_rack(properties.get("broker.rack")),
            quorum=quorum,
            topic_defaults=_parse_topic_defaults(properties),
            properties=dict(properties),
            unused_keys=tuple(sorted(key for key in properties if not _is_known(key))),
            **scalars,
        )
        config._check_relations()
        return config

    def _check_relations(self) -> None:
        if self.broker_heartbeat_interval_ms >= self.broker_session_timeout_ms:
            raise ConfigException(
                f"broker.heartbeat.interval.ms={self.broker_heartbeat_interval_ms} must be below "
                f"broker.session.timeout.ms={self.broker_session_timeout_ms}, or every broker is fenced between "
                "two heartbeats; lower the interval or raise the timeout"
            )
        if self.replica_fetch_wait_max_ms > self.replica_lag_time_max_ms:
            # Kafka's rule: a follower parked this long at the leader must not drop out of the ISR meanwhile.
            raise ConfigException(
                f"replica.fetch.wait.max.ms={self.replica_fetch_wait_max_ms} must be at most "
                f"replica.lag.time.max.ms={self.replica_lag_time_max_ms}"
            )

    # ---- what the rest of the node asks --------------------------------------------------------

    @property
    def is_broker(self) -> bool:
        return ProcessRole.BROKER in self.process_roles

    @property
    def is_controller(self) -> bool:
        return ProcessRole.CONTROLLER in self.process_roles

    @property
    def data_dirs(self) -> tuple[Path, ...]:
        """Every directory this node keeps data in: `log.dirs`, then `metadata.log.dir` when it is
        not one of them. Each carries meta.properties (Kafka's `kafka-storage format` formats them all)."""
        if self.metadata_log_dir in self.log_dirs:
            return self.log_dirs
        return (*self.log_dirs, self.metadata_log_dir)

    def listener(self, name: str) -> Endpoint:
        """The listener `name` (as configured, to bind to); KeyError names the known ones."""
        return _by_name(self.listeners, name, "listeners")

    def listener_address(self, name: str) -> str:
        """`host:port` to bind listener `name` to."""
        return self.listener(name).address

    def advertised_address(self, name: str) -> str:
        """`host:port` other nodes and clients use to reach listener `name`."""
        return _by_name(self.advertised_listeners, name, "advertised.listeners").address

    def listener_addresses(self) -> list[str]:
        """Every listener as `NAME://host:port`, in configured order (for logs)."""
        return [str(endpoint) for endpoint in self.listeners]

    def listener_binds(self, protocol: str = HTTP_PROTOCOL) -> list[tuple[str, int]]:
        """(host, port) of every listener speaking `protocol`, to bind its server to."""
        return [(endpoint.host.strip("[]"), endpoint.port) for endpoint in self.listeners
                if self.listener_protocols[endpoint.name] == protocol]

    def kafka_listeners(self) -> tuple[Endpoint, ...]:
        """The listeners speaking Kafka's protocol (a broker's; a controller-only node has none)."""
        return tuple(endpoint for endpoint in self.listeners
                     if self.listener_protocols[endpoint.name] == KAFKA_PROTOCOL)

    def listener_for(self, host: str | None, port: int | None) -> str:
        """The name of the listener bound to local `host`:`port` (two listeners may share a port on
        different addresses; a wildcard host matches any). A socket no listener matches is the
        inter-broker listener's only when it is the node's one listener; else the first client
        listener's, so an unknown socket is never trusted with node-to-node traffic."""
        http = [endpoint for endpoint in self.listeners if self.listener_protocols[endpoint.name] == HTTP_PROTOCOL]
        for endpoint in http:
            if endpoint.port == port and endpoint.host.strip("[]") in (host, *_WILDCARD_HOSTS):
                return endpoint.name
        clients = [endpoint.name for endpoint in http if not self.serves_node_traffic(endpoint.name)]
        return clients[0] if clients else self.inter_broker_listener_name

    def serves_node_traffic(self, listener: str) -> bool:
        """Whether `listener` takes Raft, the broker-to-controller requests and replica fetches: the
        inter-broker listener and the controller listeners do; any other serves clients only."""
        return listener == self.inter_broker_listener_name or listener in self.controller_listener_names

    def voter_address(self, node_id: int) -> str:
        """`host:port` of voter `node_id` (from `controller.quorum.voters`); KeyError if not a voter."""
        endpoint = self.quorum.voters[node_id]
        return f"{endpoint.host}:{endpoint.port}"

    def log_config(self) -> LogConfig:
        """Topic defaults: what a topic without overrides gets (Kafka's broker-level topic keys)."""
        return self.topic_defaults

    def broker_configs(self) -> dict[str, str]:
        """Every broker key's effective value as text, as this node runs with it (DescribeConfigs of
        its BROKER resource): its own keys, the broker-level topic defaults, the listener, quorum
        and identity keys given."""
        values = {key: _text(getattr(self, key.replace(".", "_"))) for key in _NODE_KEYS}
        topic_values = self.topic_defaults.to_properties()
        values.update({key: topic_values[topic_key] for key, topic_key in TOPIC_DEFAULT_SYNONYMS.items()})
        values.update({key: value for key, value in self.properties.items() if key in _SPECIAL_KEYS})
        values.update({
            "node.id": str(self.node_id),
            "process.roles": ",".join(sorted(role.value for role in self.process_roles)),
            "listeners": ",".join(str(endpoint) for endpoint in self.listeners),
            "advertised.listeners": ",".join(str(endpoint) for endpoint in self.advertised_listeners),
            "inter.broker.listener.name": self.inter_broker_listener_name,
            "log.dirs": ",".join(str(path) for path in self.log_dirs),
            "cluster.id": self.cluster_id,
        })
        values.pop("log.dir", None)  # log.dirs says it
        return dict(sorted(values.items()))

    def set_in_file(self, key: str) -> bool:
        """Whether the node's properties give `key` (a time key also through its coarser units):
        Kafka's STATIC_BROKER_CONFIG source, as against DEFAULT_CONFIG."""
        units = _TIME_UNIT_SYNONYMS.get(key, ())
        return key in self.properties or any(unit_key in self.properties for unit_key, _, _ in units)

    def replication_config(self) -> ReplicationConfig:
        return ReplicationConfig(replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                                 replica_fetch_max_bytes=self.replica_fetch_max_bytes,
                                 delayed_fetch_max=self.max_delayed_fetches)

    def quorum_config(self) -> QuorumConfig:
        return self.quorum

    def controller_config(self) -> ControllerConfig:
        probe_listener_name = self.inter_broker_listener_name if self.broker_refused_connection_fencing_enable else None
        return ControllerConfig(broker_session_timeout_ms=self.broker_session_timeout_ms,
                                probe_listener_name=probe_listener_name,
                                num_partitions=self.num_partitions,
                                default_replication_factor=self.default_replication_factor,
                                topic_defaults=self.topic_defaults)

    def groups_config(self) -> GroupsConfig:
        """What the consumer-group coordinator reads (replication/consumer_groups.py)."""
        return GroupsConfig(self.group_min_session_timeout_ms, self.group_max_session_timeout_ms,
                            self.group_initial_rebalance_delay_ms, self.group_max_size)

    def broker_settings(self) -> BrokerSettings:
        """What the broker side reads (node/broker_settings.py)."""
        return BrokerSettings(
            node_id=self.node_id,
            advertised_endpoints={endpoint.name: endpoint.address for endpoint in self.advertised_listeners},
            inter_broker_listener_name=self.inter_broker_listener_name,
            cluster_id=self.cluster_id,
            broker_rack=self.broker_rack,
            replication=self.replication_config(),
            broker_heartbeat_interval_ms=self.broker_heartbeat_interval_ms,
            broker_session_timeout_ms=self.broker_session_timeout_ms,
            replica_fetch_wait_max_ms=self.replica_fetch_wait_max_ms,
            replica_fetch_min_bytes=self.replica_fetch_min_bytes,
            replica_fetch_response_max_bytes=self.replica_fetch_response_max_bytes,
            replica_fetch_backoff_ms=self.replica_fetch_backoff_ms,
            request_timeout_ms=self.request_timeout_ms,
            log_retention_check_interval_ms=self.log_retention_check_interval_ms,
            log_flush_scheduler_interval_ms=self.log_flush_scheduler_interval_ms,
            replica_high_watermark_checkpoint_interval_ms=self.replica_high_watermark_checkpoint_interval_ms,
            log_cleaner_backoff_ms=self.log_cleaner_backoff_ms,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
            producer_id_expiration_check_interval_ms=self.producer_id_expiration_check_interval_ms,
        )


def load_config(path: str | None, environ: Mapping[str, str], overrides: Mapping[str, str] = {}) -> NodeConfig:
    """Read the file at `path` (if any), apply `TRIBUTARY_*` variables of `environ`, then
    `overrides`, and validate. OSError if the file cannot be read; ConfigException if bad."""
    properties: dict[str, str] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise ConfigException(f"{path} is not UTF-8 text ({error}); save it as UTF-8") from None
        properties.update(parse_properties(text, path))
    properties.update(environment_properties(environ))
    properties.update({key.strip(): str(value).strip() for key, value in overrides.items()})
    return NodeConfig.from_properties(properties)


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Java properties text as a dict: `key=value` or `key: value`, `#`/`!` comments, blank lines
    skipped; a repeated key keeps its last value (as `java.util.Properties` does)."""
    properties: dict[str, str] = {}
    for line_number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.fullmatch(r"([^=:\s]+)\s*[=:]\s*(.*)", line)
        if match is None:
            raise ConfigException(f"{source} line {line_number}: {raw_line!r} is not key=value or key: value")
        properties[match.group(1)] = match.group(2)
    return properties


def environment_properties(environ: Mapping[str, str]) -> dict[str, str]:
    """`TRIBUTARY_LOG_DIRS=/data` -> `{"log.dirs": "/data"}`, for every `TRIBUTARY_` variable."""
    return {
        name[len(ENV_PREFIX):].lower().replace("_", "."): value.strip()
        for name, value in environ.items()
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX)
    }


def environment_variable(key: str) -> str:
    """The variable that overrides `key`: `log.dirs` -> `TRIBUTARY_LOG_DIRS`."""
    return ENV_PREFIX + key.upper().replace(".", "_")


def derived_cluster_id(quorum: QuorumConfig) -> str:
    """A cluster id every node of one quorum computes alike: Kafka's form (16 bytes with the
    version-4 UUID bits, URL-safe base64 without padding) of a SHA-256 over the voters."""
    voters = ",".join(str(quorum.voters[node_id]) for node_id in sorted(quorum.voters))
    digest = bytearray(hashlib.sha256(voters.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x40
    digest[8] = (digest[8] & 0x3F) | 0x80
    if digest[0] >> 2 == 62:  # base64 '-' first: Kafka never starts an id with '-' (it reads as an option)
        digest[0] ^= 0x80
    return base64.urlsafe_b64encode(bytes(digest)).decode("ascii").rstrip("=")


# ---- parsing helpers --------------------------------------------------------------------------


def _text(value: int | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _is_known(key: str) -> bool:
    return key in KNOWN_KEYS or key.startswith(_QUORUM_PREFIXES)


def _required(properties: Mapping[str, str], key: str) -> str:
    value = properties.get(key)
    if value is None or not value.strip():
        raise ConfigException(f"{key} is required (set it in the file or as {environment_variable(key)})")
    return value


def _parse_integer(key: str, raw: str, spec: _Integer) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigException(f"{key}={raw!r} is not an integer; allowed: [{spec.minimum}, {spec.maximum}]") from None
    if not spec.minimum <= value <= spec.maximum:
        raise ConfigException(f"{key}={value} is outside the allowed range [{spec.minimum}, {spec.maximum}]")
    return value


def _parse_scalar(key: str, raw: str | None, spec: _Integer | _Boolean) -> int | bool:
    if raw is None:
        return spec.default
    if isinstance(spec, _Integer):
        return _parse_integer(key, raw, spec)
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise ConfigException(f"{key}={raw!r} must be true or false")
    return text == "true"


def _parse_roles(raw: str) -> frozenset[ProcessRole]:
    names = [part.strip().lower() for part in raw.split(",") if part.strip()]
    allowed = {role.value: role for role in ProcessRole}
    bad = [name for name in names if name not in allowed]
    if bad or not names or len(set(names)) != len(names):
        raise ConfigException(f"process.roles={raw!r}: use broker, controller or broker,controller (each once)")
    return frozenset(allowed[name] for name in names)


def _parse_listeners(key: str, raw: str) -> tuple[Endpoint, ...]:
    endpoints: list[Endpoint] = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        match = _LISTENER_PATTERN.fullmatch(entry)
        if match is None:
            raise ConfigException(f"{key}: {entry!r} is not NAME://host:port (e.g. PLAINTEXT://127.0.0.1:9092)")
        name, host, port = match.group(1).upper(), match.group(2), int(match.group(3))
        if not host:
            raise ConfigException(f"{key}: {entry!r} has no host; use 0.0.0.0 to listen on every interface")
        if port > 65535:
            raise ConfigException(f"{key}: port {port} of {entry!r} is outside 0..65535")
        if any(endpoint.name == name for endpoint in endpoints):
            raise ConfigException(f"{key}={raw!r} names listener {name} twice; listener names must be unique")
        endpoints.append(Endpoint(name, host, port))
    if not endpoints:
        raise ConfigException(f"{key}={raw!r} names no listener; use NAME://host:port,...")
    return tuple(endpoints)


def _parse_advertised(properties: Mapping[str, str], listeners: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
    raw = properties.get("advertised.listeners")
    advertised = listeners if raw is None else _parse_listeners("advertised.listeners", raw)
    names = {endpoint.name for endpoint in listeners}
    for endpoint in advertised:
        if endpoint.name not in names:
            raise ConfigException(
                f"advertised.listeners: listener {endpoint.name} is not in listeners "
                f"({', '.join(sorted(names))}); advertise only listeners this node opens"
            )
        if endpoint.host in _UNROUTABLE_HOSTS or endpoint.port == 0:
            raise ConfigException(
                f"advertised.listeners: {endpoint} cannot be reached by other nodes (a wildcard host or port 0); "
                "set advertised.listeners to the host:port clients should use"
            )
    return advertised


def _parse_protocol_map(properties: Mapping[str, str], listeners: tuple[Endpoint, ...]) -> dict[str, str]:
    """`listener.security.protocol.map` (NAME:PROTOCOL,...): each listener's protocol."""
    raw = properties.get("listener.security.protocol.map", "")
    mapped: dict[str, str] = {}
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        name, _, protocol = (part.strip().upper() for part in entry.partition(":"))
        if not name or protocol not in PROTOCOLS:
            raise ConfigException(
                f"listener.security.protocol.map: {entry!r} is not NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(PROTOCOLS)} (PLAINTEXT: Kafka's protocol; HTTP: Tributary's API; SSL and SASL are "
                "not served)")
        mapped[name] = protocol
    protocols = {}
    for endpoint in listeners:
        default = endpoint.name if endpoint.name in PROTOCOLS else HTTP_PROTOCOL
        protocols[endpoint.name] = mapped.get(endpoint.name, default)
    if HTTP_PROTOCOL not in protocols.values():
        raise ConfigException(
            f"listeners={','.join(map(str, listeners))} has no HTTP listener; nodes replicate and run the controller "
            "quorum over Tributary's HTTP API: add one, e.g. HTTP://127.0.0.1:9192")
    return protocols


def _parse_inter_broker_listener(properties: Mapping[str, str], listeners: tuple[Endpoint, ...],
                                 advertised: tuple[Endpoint, ...], protocols: Mapping[str, str]) -> str:
    raw = properties.get("inter.broker.listener.name")
    http = [endpoint.name for endpoint in listeners if protocols[endpoint.name] == HTTP_PROTOCOL]
    name = http[0] if raw is None else raw.strip().upper()
    if name not in {endpoint.name for endpoint in advertised}:
        raise ConfigException(
            f"inter.broker.listener.name={name!r} is not an advertised listener; use one of "
            f"{', '.join(endpoint.name for endpoint in advertised)}"
        )
    if protocols[name] != HTTP_PROTOCOL:
        raise ConfigException(f"inter.broker.listener.name={name}: listener {name} speaks Kafka's protocol; nodes "
                              f"replicate over Tributary's HTTP API: use one of {', '.join(http)}")
    return name


def _parse_controller_listeners(properties: Mapping[str, str], listeners: tuple[Endpoint, ...], node_id: int,
                                quorum: QuorumConfig, protocols: Mapping[str, str]) -> tuple[str, ...]:
    """`controller.listener.names`: the listeners `controller.quorum.voters` points at, when they
    are not the inter-broker one (Kafka's `CONTROLLER://:9093` beside `PLAINTEXT://:9092`). Unset,
    a voter's is the listener on its own voter port, so a Kafka-style config without the key keeps
    its quorum."""
    raw = properties.get("controller.listener.names")
    if raw is None:
        voter = quorum.voters.get(node_id)
        names = tuple(endpoint.name for endpoint in listeners if voter is not None and endpoint.port == voter.port)
    else:
        names = tuple(name.strip().upper() for name in raw.split(",") if name.strip())
        known = {endpoint.name for endpoint in listeners}
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ConfigException(
                f"controller.listener.names={raw!r} names {', '.join(unknown)}, not in listeners; use some of "
                f"{', '.join(sorted(known))}"
            )
    kafka = [name for name in names if protocols[name] != HTTP_PROTOCOL]
    if kafka:
        raise ConfigException(
            f"controller listener {', '.join(kafka)} speaks Kafka's protocol; the controller quorum runs over "
            "Tributary's HTTP API: map it to HTTP in listener.security.protocol.map or point "
            "controller.quorum.voters at an HTTP listener")
    return names


def _parse_quorum(properties: Mapping[str, str]) -> QuorumConfig:
    quorum_properties = {key: value for key, value in properties.items()
                         if key.startswith(_QUORUM_PREFIXES) and key != METADATA_LOG_DIR_KEY}
    try:
        return QuorumConfig.from_properties(quorum_properties)
    except QuorumConfigError as error:
        message = str(error)
        if not any(key in message for key in quorum_properties):
            # QuorumConfig's own checks name its fields; say which keys set them.
            given = ", ".join(f"{key}={value}" for key, value in sorted(quorum_properties.items()))
            message = f"{message} (given {given})"
        raise ConfigException(message) from None


def _check_voter_role(node_id: int, roles: frozenset[ProcessRole], quorum: QuorumConfig) -> None:
    """KRaft's rule: a controller is a voter, and a broker-only node is not (it observes)."""
    voters = ",".join(str(voter) for voter in quorum.voters.values())
    if ProcessRole.CONTROLLER in roles and not quorum.is_voter(node_id):
        raise ConfigException(
            f"process.roles includes controller, but node.id={node_id} is not in controller.quorum.voters={voters}; "
            "add it as id@host:port or drop the controller role"
        )
    if ProcessRole.CONTROLLER not in roles and quorum.is_voter(node_id):
        raise ConfigException(
            f"node.id={node_id} is in controller.quorum.voters={voters} but process.roles has no controller; "
            "add the controller role or remove the node from the voters"
        )


def _parse_log_dirs(properties: Mapping[str, str]) -> tuple[Path, ...]:
    key = "log.dirs" if "log.dirs" in properties else "log.dir"
    raw = properties.get(key, DEFAULT_LOG_DIR)
    directories = [part.strip() for part in raw.split(",") if part.strip()]
    if not directories:
        raise ConfigException(f"{key}={raw!r} names no directory; use a comma-separated list of paths")
    if len(set(directories)) != len(directories):
        raise ConfigException(f"{key}={raw!r} names a directory twice")
    return tuple(Path(directory) for directory in directories)


def _parse_metadata_log_dir(properties: Mapping[str, str], log_dirs: tuple[Path, ...]) -> Path:
    """Kafka's `metadata.log.dir`: where the metadata log lives; the first log dir when unset. A
    controller-only node keeps nothing else, so this is its one data directory that matters."""
    raw = properties.get(METADATA_LOG_DIR_KEY)
    if raw is None:
        return log_dirs[0]
    if not raw.strip() or "," in raw:
        raise ConfigException(f"{METADATA_LOG_DIR_KEY}={raw!r} must name one directory; remove the key to use the "
                              "first of log.dirs")
    return Path(raw.strip())


def _parse_cluster_id(properties: Mapping[str, str], quorum: QuorumConfig) -> str:
    raw = properties.get("cluster.id")
    if raw is None:
        return derived_cluster_id(quorum)
    if not _CLUSTER_ID_PATTERN.fullmatch(raw):
        raise ConfigException(f"cluster.id={raw!r} must be non-empty and use only A-Z a-z 0-9 _ -")
    return raw


def _parse_rack(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not raw.strip():
        raise ConfigException("broker.rack is empty; remove the key or name the rack")
    return raw.strip()


def _parse_topic_defaults(properties: Mapping[str, str]) -> LogConfig:
    """The broker keys of the topic defaults, as `LogConfig` (its own checks, with the broker key
    named in the message)."""
    topic_properties: dict[str, Any] = {}
    for broker_key, topic_key in TOPIC_DEFAULT_SYNONYMS.items():
        raw = properties.get(broker_key)
        for unit_key, factor, minimum in _TIME_UNIT_SYNONYMS.get(broker_key, ()):
            if raw is None and unit_key in properties:
                raw = str(_scaled(unit_key, properties[unit_key], factor, minimum))
        if raw is not None:
            topic_properties[topic_key] = (broker_key, raw)
    config = LogConfig()
    for topic_key, (broker_key, raw) in topic_properties.items():
        config = _with_topic_default(config, broker_key, topic_key, raw)
    return config


def _with_topic_default(config: LogConfig, broker_key: str, topic_key: str, raw: str) -> LogConfig:
    try:
        return LogConfig.from_properties({topic_key: raw}, config)
    except InvalidConfigError as error:
        raise ConfigException(f"{broker_key} (the default of topic config {topic_key}): {error}") from None


def _scaled(key: str, raw: str, factor: int, minimum: int) -> int:
    """`log.retention.hours=168` in ms; a negative retention means unlimited (-1), as in Kafka."""
    value = _parse_integer(key, raw, _Integer(0, minimum, LONG_MAX // factor))
    return -1 if value < 0 else value * factor


def _by_name(endpoints: tuple[Endpoint, ...], name: str, key: str) -> Endpoint:
    for endpoint in endpoints:
        if endpoint.name == name:
            return endpoint
    raise KeyError(f"no listener {name!r} in {key}; known: {', '.join(endpoint.name for endpoint in endpoints)}")
