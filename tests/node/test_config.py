"""NodeConfig: file, environment and overrides in that precedence; Kafka's defaults; every bad
value refused with a message that names the key, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.quorum_config import QuorumConfig
from controller.quorum_controller import ControllerConfig
from node.config import (
    KNOWN_KEYS,
    TOPIC_DEFAULT_SYNONYMS,
    ConfigException,
    NodeConfig,
    ProcessRole,
    derived_cluster_id,
    environment_variable,
    load_config,
    parse_properties,
)
from replication.config import ReplicationConfig
from storage.config import CleanupPolicy, LogConfig

VOTERS = "1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194"
MINIMAL = {"node.id": "1", "controller.quorum.voters": VOTERS}


def config_of(**extra: str) -> NodeConfig:
    return NodeConfig.from_properties({**MINIMAL, **{key.replace("_", "."): value for key, value in extra.items()}})


def test_file_then_environment_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "node.properties"
    path.write_text(
        "# a comment\n! another\n\n"
        f"node.id=1\ncontroller.quorum.voters: {VOTERS}\n"
        "log.dirs=/from/file\nnum.partitions=3\nbroker.rack = r1\nlog.segment.bytes=1000\n"
    )
    environ = {"TRIBUTARY_LOG_DIRS": "/from/env", "TRIBUTARY_NUM_PARTITIONS": "4", "HOME": "/root"}
    config = load_config(str(path), environ, {"num.partitions": "5"})
    assert config.log_dirs == (Path("/from/env"),)
    assert config.num_partitions == 5
    assert config.broker_rack == "r1"
    assert config.log_config().segment_bytes == 1000
    assert config.properties["log.dirs"] == "/from/env"


def test_environment_alone_configures_a_node() -> None:
    environ = {environment_variable("node.id"): "2", environment_variable("controller.quorum.voters"): VOTERS,
               "TRIBUTARY_CONTROLLER_QUORUM_ELECTION_TIMEOUT_MS": "150"}
    config = load_config(None, environ)
    assert environment_variable("log.dirs") == "TRIBUTARY_LOG_DIRS"
    assert config.node_id == 2
    assert config.quorum_config().election_timeout_ms == 150


def test_defaults_are_kafkas() -> None:
    config = config_of()
    assert config.process_roles == frozenset({ProcessRole.BROKER, ProcessRole.CONTROLLER})
    assert config.is_broker and config.is_controller
    assert config.listener_address("PLAINTEXT") == "127.0.0.1:9092"
    assert config.advertised_address("PLAINTEXT") == "127.0.0.1:9092"
    assert config.listener_protocols == {"PLAINTEXT": "PLAINTEXT", "HTTP": "HTTP"}
    assert config.kafka_listeners() == (config.listener("PLAINTEXT"),)
    assert config.inter_broker_listener_name == "HTTP" and config.listener_address("HTTP") == "127.0.0.1:9192"
    assert config.log_dirs == (Path("/tmp/kafka-logs"),)
    assert config.broker_heartbeat_interval_ms == 2000
    assert config.broker_session_timeout_ms == 9000
    assert config.replica_lag_time_max_ms == 30_000
    assert config.replica_fetch_wait_max_ms == 500
    assert config.replica_fetch_max_bytes == 1024 * 1024
    assert config.replica_fetch_backoff_ms == 1000
    assert config.socket_request_max_bytes == 104_857_600
    assert config.request_timeout_ms == 30_000
    assert config.offsets_topic_num_partitions == 50
    assert config.offsets_topic_replication_factor == 3
    assert config.log_retention_check_interval_ms == 300_000
    assert config.log_flush_offset_checkpoint_interval_ms == 60_000
    assert config.log_config() == LogConfig()
    # The controller probes the inter-broker listener (README, "Failover after kill -9") unless turned off.
    assert config.controller_config() == ControllerConfig(probe_listener_name="HTTP")
    assert config.replication_config() == ReplicationConfig()
    assert config.quorum_config() == QuorumConfig.from_properties({"controller.quorum.voters": VOTERS})
    assert config.unused_keys == ()


def test_every_topic_config_has_its_broker_default_key() -> None:
    assert set(TOPIC_DEFAULT_SYNONYMS.values()) == set(LogConfig().to_properties())
    assert set(TOPIC_DEFAULT_SYNONYMS) <= KNOWN_KEYS


def test_every_node_key_sets_its_field() -> None:
    fields = set(NodeConfig.__dataclass_fields__)
    scalar_keys = KNOWN_KEYS - set(TOPIC_DEFAULT_SYNONYMS) - {
        "node.id", "process.roles", "listeners", "advertised.listeners", "controller.quorum.voters", "log.dir",
        "listener.security.protocol.map",
        "log.roll.hours", "log.retention.minutes", "log.retention.hours",
    }
    assert {key.replace(".", "_") for key in scalar_keys} <= fields


def test_topic_defaults_from_broker_keys() -> None:
    config = config_of(**{
        "log.retention.hours": "24", "log.roll.hours": "1", "log.cleanup.policy": "compact,delete",
        "message.max.bytes": "2000", "min.insync.replicas": "2", "unclean.leader.election.enable": "true",
        "log.cleaner.min.cleanable.ratio": "0.25",
    })
    defaults = config.log_config()
    assert defaults.retention_ms == 24 * 3_600_000
    assert defaults.segment_ms == 3_600_000
    assert defaults.cleanup_policy == frozenset({CleanupPolicy.COMPACT, CleanupPolicy.DELETE})
    assert defaults.max_message_bytes == 2000
    assert defaults.min_insync_replicas == 2
    assert defaults.unclean_leader_election_enable
    assert defaults.min_cleanable_dirty_ratio == 0.25


def test_finer_time_unit_wins_and_negative_retention_is_unlimited() -> None:
    config = config_of(**{"log.retention.ms": "5000", "log.retention.minutes": "3", "log.retention.hours": "1"})
    assert config.log_config().retention_ms == 5000
    assert config_of(**{"log.retention.minutes": "3", "log.retention.hours": "1"}).log_config().retention_ms == 180_000
    assert config_of(**{"log.retention.hours": "-1"}).log_config().retention_ms == -1


def test_listeners_and_advertised_listeners() -> None:
    config = config_of(**{
        "listeners": "INTERNAL://0.0.0.0:9092,external://0.0.0.0:19092",
        "advertised.listeners": "INTERNAL://node1:9092,EXTERNAL://localhost:19092",
        "inter.broker.listener.name": "INTERNAL",
    })
    assert config.listener_address("EXTERNAL") == "0.0.0.0:19092"
    assert config.advertised_address("EXTERNAL") == "localhost:19092"
    assert config.listener_for("10.0.0.1", 19092) == "EXTERNAL"
    assert config.listener_for(None, None) == "EXTERNAL", "an unknown socket is not trusted with node traffic"
    assert config.listener_addresses() == ["INTERNAL://0.0.0.0:9092", "EXTERNAL://0.0.0.0:19092"]
    with pytest.raises(KeyError, match="known: INTERNAL, EXTERNAL"):
        config.listener_address("OTHER")
    assert config.serves_node_traffic("INTERNAL") and not config.serves_node_traffic("EXTERNAL")


def test_listeners_sharing_a_port_on_two_addresses_are_told_apart_by_address() -> None:
    config = config_of(**{"listeners": "EXTERNAL://10.0.0.2:9092,INTERNAL://10.0.0.1:9092",
                          "inter.broker.listener.name": "INTERNAL"})
    assert config.listener_for("10.0.0.1", 9092) == "INTERNAL"
    assert config.listener_for("10.0.0.2", 9092) == "EXTERNAL"


def test_each_listener_speaks_kafka_or_http_by_the_protocol_map() -> None:
    """PLAINTEXT is Kafka's protocol; HTTP and any name the map leaves out speak Tributary's API."""
    config = config_of(**{"listeners": "INTERNAL://h:9192,CLIENT://h:9092,PLAINTEXT://h:9093,HTTP://h:9094",
                          "listener.security.protocol.map": "client:plaintext"})
    assert config.listener_protocols == {"INTERNAL": "HTTP", "CLIENT": "PLAINTEXT", "PLAINTEXT": "PLAINTEXT",
                                         "HTTP": "HTTP"}
    assert [endpoint.name for endpoint in config.kafka_listeners()] == ["CLIENT", "PLAINTEXT"]
    assert config.listener_binds() == [("h", 9192), ("h", 9094)]
    assert config.inter_broker_listener_name == "INTERNAL", "the first HTTP listener"
    assert config.listener_for("h", 9094) == "HTTP" and config.listener_for(None, None) == "HTTP"


def test_a_voters_controller_listener_defaults_to_the_one_on_its_voter_port() -> None:
    """Found in review: a Kafka-style config without controller.listener.names refused its own Raft
    traffic on the CONTROLLER listener the voters point at."""
    config = config_of(**{"listeners": "HTTP://127.0.0.1:19092,CONTROLLER://127.0.0.1:9192"})
    assert config.controller_listener_names == ("CONTROLLER",)
    assert config.serves_node_traffic("CONTROLLER")


def test_controller_listener_names_also_take_node_to_node_traffic() -> None:
    config = config_of(**{
        "listeners": "HTTP://h:9092,CONTROLLER://h:9093,CLIENT://h:9094",
        "controller.listener.names": "controller",
    })
    assert config.controller_listener_names == ("CONTROLLER",)
    assert [config.serves_node_traffic(name) for name in ("HTTP", "CONTROLLER", "CLIENT")] == [True, True, False]


def test_request_bounds_reach_the_parts_that_apply_them() -> None:
    config = config_of(**{"max.delayed.fetches": "5", "max.request.partitions": "7"})
    assert config.replication_config().delayed_fetch_max == 5
    assert config.max_request_partitions == 7


def test_voter_address_and_roles() -> None:
    assert config_of().voter_address(3) == "127.0.0.1:9194"
    broker = config_of(**{"node.id": "7", "process.roles": "broker"})
    assert broker.is_broker and not broker.is_controller


def test_the_metadata_log_dir_is_the_first_log_dir_unless_metadata_log_dir_names_another() -> None:
    config = config_of(**{"log.dirs": "/data/a,/data/b"})
    assert config.metadata_log_dir == Path("/data/a")
    assert config.data_dirs == (Path("/data/a"), Path("/data/b"))
    assert config.quorum_config() == QuorumConfig.from_properties({"controller.quorum.voters": VOTERS})
    separate = config_of(**{"log.dirs": "/data/a", "metadata.log.dir": "/meta"})
    assert separate.metadata_log_dir == Path("/meta")
    assert separate.data_dirs == (Path("/data/a"), Path("/meta"))
    assert separate.unused_keys == ()


def test_cluster_id_is_derived_from_the_voters_alike_on_every_node() -> None:
    one, two = config_of(), config_of(**{"node.id": "2"})
    assert one.cluster_id == two.cluster_id
    assert len(one.cluster_id) == 22 and not one.cluster_id.startswith("-")
    assert one.cluster_id != derived_cluster_id(QuorumConfig.from_properties({"controller.quorum.voters": "1@h:1"}))
    assert config_of(**{"cluster.id": "MkU3OEVBNTcwNTJENDM2Qg"}).cluster_id == "MkU3OEVBNTcwNTJENDM2Qg"


def test_broker_settings_and_binds() -> None:
    config = config_of(**{"listeners": "HTTP://[::1]:9092", "broker.rack": "r1", "replica.fetch.min.bytes": "7"})
    settings = config.broker_settings()
    assert settings.advertised_endpoints == {"HTTP": "[::1]:9092"}
    assert settings.broker_rack == "r1"
    assert settings.replica_fetch_min_bytes == 7
    assert settings.replication == config.replication_config()
    assert config.listener_binds() == [("::1", 9092)]


def test_unknown_keys_are_reported_not_fatal() -> None:
    config = config_of(**{"num.network.threads": "3"})
    assert config.unused_keys == ("num.network.threads",)


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({"node.id": None}, r"node.id is required .*TRIBUTARY_NODE_ID"),
        ({"node.id": "x"}, r"node.id='x' is not an integer; allowed: \[0, 2147483647\]"),
        ({"node.id": "-1"}, r"node.id=-1 is outside the allowed range \[0, 2147483647\]"),
        ({"process.roles": "broker,zookeeper"}, r"process.roles='broker,zookeeper': use broker, controller"),
        ({"process.roles": ""}, r"process.roles='': use broker, controller"),
        ({"listeners": "127.0.0.1:9092"}, r"listeners: '127.0.0.1:9092' is not NAME://host:port"),
        ({"listeners": "HTTP://:9092"}, r"has no host; use 0.0.0.0"),
        ({"listeners": "HTTP://h:70000"}, r"port 70000 .* outside 0..65535"),
        ({"listeners": "A://h:1,a://h:2"}, r"names listener A twice"),
        ({"advertised.listeners": "OTHER://h:1"}, r"listener OTHER is not in listeners \(HTTP, PLAINTEXT\)"),
        ({"listeners": "HTTP://0.0.0.0:9092"}, r"HTTP://0.0.0.0:9092 cannot be reached.*advertised"),
        ({"inter.broker.listener.name": "NOPE"},
         r"inter.broker.listener.name='NOPE' is not .* use one of PLAINTEXT, HTTP"),
        ({"controller.listener.names": "HTTP,NOPE"}, r"controller.listener.names='HTTP,NOPE' names NOPE"),
        ({"listener.security.protocol.map": "HTTP:SSL"}, r"'HTTP:SSL' is not NAME:PROTOCOL .*SSL and SASL are not"),
        ({"listeners": "PLAINTEXT://h:9092"}, r"has no HTTP listener; nodes replicate .* over Tributary's HTTP API"),
        ({"inter.broker.listener.name": "PLAINTEXT"},
         r"listener PLAINTEXT speaks Kafka's protocol; .* use one of HTTP"),
        ({"listeners": "HTTP://h:1,CONTROLLER://h:9192", "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"},
         r"controller listener CONTROLLER speaks Kafka's protocol; .*map it to HTTP"),
        ({"controller.quorum.voters": None}, r"controller.quorum.voters is required"),
        ({"controller.quorum.voters": "1@h"}, r"'1@h' is not id@host:port"),
        ({"controller.quorum.election.timeout.ms": "soon"}, r"controller.quorum.election.timeout.ms='soon'"),
        ({"controller.quorum.election.timeout.ms": "0"},
         r"election_timeout_ms=0 must be >= 1 \(given controller.quorum.election.timeout.ms=0, "),
        ({"controller.quorum.typo": "1"}, r"unknown quorum config 'controller.quorum.typo'; known keys:"),
        ({"node.id": "9"}, r"node.id=9 is not in controller.quorum.voters=.*add it"),
        ({"process.roles": "broker"}, r"node.id=1 is in controller.quorum.voters=.*no controller"),
        ({"log.dirs": " , "}, r"log.dirs=' , ' names no directory"),
        ({"log.dirs": "/a,/a"}, r"log.dirs='/a,/a' names a directory twice"),
        ({"metadata.log.dir": "/a,/b"}, r"metadata.log.dir='/a,/b' must name one directory"),
        ({"metadata.log.dir": " "}, r"metadata.log.dir=' ' must name one directory"),
        ({"cluster.id": "a b"}, r"cluster.id='a b' must be .*A-Z a-z 0-9 _ -"),
        ({"broker.rack": " "}, r"broker.rack is empty"),
        ({"num.partitions": "0"}, r"num.partitions=0 is outside the allowed range \[1, 2147483647\]"),
        ({"broker.session.timeout.ms": "many"}, r"broker.session.timeout.ms='many' is not an integer"),
        ({"log.cleaner.enable": "yes"}, r"log.cleaner.enable='yes' must be true or false"),
        ({"broker.heartbeat.interval.ms": "9000"}, r"broker.heartbeat.interval.ms=9000 must be below broker.session"),
        ({"replica.fetch.wait.max.ms": "40000"}, r"replica.fetch.wait.max.ms=40000 must be at most replica.lag"),
        ({"log.segment.bytes": "10"}, r"log.segment.bytes \(the default of topic config segment.bytes\): .*10"),
        ({"log.cleanup.policy": "shred"}, r"log.cleanup.policy .*'shred': use delete, compact"),
        ({"log.retention.hours": "x"}, r"log.retention.hours='x' is not an integer"),
        ({"log.roll.hours": "0"}, r"log.roll.hours=0 is outside the allowed range"),
        ({"min.insync.replicas": "0"}, r"min.insync.replicas .*0 is outside \[1,"),
    ],
)
def test_bad_values_name_the_key_value_and_what_is_allowed(properties: dict[str, str | None], expected: str) -> None:
    merged: dict[str, str] = {**MINIMAL}
    for key, value in properties.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    with pytest.raises(ConfigException, match=expected):
        NodeConfig.from_properties(merged)


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "node.properties"
    path.write_bytes(b"node.id=\xff\n")
    with pytest.raises(ConfigException, match="is not UTF-8 text"):
        load_config(str(path), {})


def test_a_properties_line_without_separator_is_refused() -> None:
    with pytest.raises(ConfigException, match=r"node.properties line 2: 'oops' is not key=value"):
        parse_properties("a=1\noops\n", "node.properties")
    assert parse_properties("a=1\na=2\nb: x=y\n") == {"a": "2", "b": "x=y"}
