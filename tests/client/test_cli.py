"""The `tributary` CLI: argument parsing, output formats, and every network subcommand end to
end against a fake cluster running on its own loop in a thread (the CLI runs `asyncio.run`).

Method: `client.cli.main` is called with argv, stdin is replaced by bytes, and stdout/stderr
are captured; expected failures must print the Kafka error name, exit 1 and show no traceback.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.admin import ClusterDescription, NodeStatus, PartitionStatus
from client.cli import build_parser, main
from client.cli_cluster import status_json, status_table
from client.cli_consume import format_record
from client.cli_perf import LatencyStats, produce_summary
from client.cli_produce import complete_lines, producer_settings
from client.fetched_batch import ConsumerRecord
from client.metadata import PartitionInfo
from tests.client.fake_node import FakeCluster, FakeClusterThread
from tests.client.group_helpers import start_members
from wire.api import Api
from wire.metadata import MetadataBroker, ReplicaState
from wire.topic_partition import TopicPartition

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fake_thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeClusterThread]:
    thread = FakeClusterThread(tmp_path_factory.mktemp("cli"))
    with thread:
        yield thread


@pytest.fixture(scope="module")
def fake(fake_thread: FakeClusterThread) -> FakeCluster:
    assert fake_thread.cluster is not None
    return fake_thread.cluster


def run(argv: list[str], capsys: pytest.CaptureFixture[str], stdin: bytes = b"") -> tuple[int, str, str]:
    original = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    try:
        status = main(argv)
    finally:
        sys.stdin = original
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return status, captured.out, captured.err


# -- parsing and formatting (no cluster) ----------------------------------------------------


def test_bootstrap_defaults_to_the_environment_then_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRIBUTARY_BOOTSTRAP", raising=False)
    assert build_parser().parse_args(["topics", "list"]).bootstrap == "127.0.0.1:9192"
    monkeypatch.setenv("TRIBUTARY_BOOTSTRAP", "h1:1,h2:2")
    assert build_parser().parse_args(["topics", "list"]).bootstrap == "h1:1,h2:2"


def test_bootstrap_may_come_before_or_after_the_subcommand() -> None:
    assert build_parser().parse_args(["--bootstrap", "a:1", "topics", "list"]).bootstrap == "a:1"
    assert build_parser().parse_args(["topics", "list", "--bootstrap", "b:2"]).bootstrap == "b:2"
    assert build_parser().parse_args(["topics", "list", "--bootstrap-server", "c:3"]).bootstrap == "c:3"


def test_topics_create_takes_kafkas_flags() -> None:
    arguments = build_parser().parse_args([
        "topics", "create", "--topic", "orders", "--partitions", "6", "--replication-factor", "3",
        "--config", "retention.ms=1000", "--config", "cleanup.policy=compact",
    ])
    assert (arguments.topic, arguments.partitions, arguments.replication_factor) == ("orders", 6, 3)
    assert arguments.config == ["retention.ms=1000", "cleanup.policy=compact"]


def test_consume_start_options_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["consume", "t", "--from-beginning", "--offset", "3"])
    assert exited.value.code == 2
    capsys.readouterr()


def test_producer_props_map_kafka_names_to_settings() -> None:
    assert producer_settings({"linger.ms": "7", "compression.type": "lz4", "bootstrap.servers": "x:1"}) == {
        "linger_ms": 7, "compression_type": "lz4"
    }
    with pytest.raises(ValueError, match="unknown producer property 'linger'"):
        producer_settings({"linger": "1"})
    assert producer_settings({"enable.idempotence": "false"}) == {"enable_idempotence": False}
    with pytest.raises(ValueError, match="true or false"):
        producer_settings({"enable.idempotence": "1"})


def test_records_print_like_kafka_console_consumer() -> None:
    record = ConsumerRecord("t", 2, 41, 0, None, b"hello")
    assert format_record(record, print_key=False, print_offset=False) == "hello"
    assert format_record(record, print_key=True, print_offset=True) == "Partition:2\tOffset:41\tnull\thello"


def test_latency_percentiles_weigh_each_sample_by_its_records() -> None:
    stats = LatencyStats()
    stats.add(1.0, 98)
    stats.add(50.0, 1)
    stats.add(100.0, 1)
    assert stats.percentiles((50, 99, 99.9)) == {50: 1.0, 99: 50.0, 99.9: 100.0}
    assert "1000 records sent" in produce_summary(1000, 0.5, 100, stats)
    assert "2000.0 records/sec" in produce_summary(1000, 0.5, 100, stats)


def description() -> ClusterDescription:
    def state(node: int, leo: int) -> ReplicaState:
        return ReplicaState("t", 0, "leader" if node == 0 else "follower", 0, 3, 5, leo, 8, (0, 1))

    return ClusterDescription(
        "c1", 0,
        (NodeStatus(MetadataBroker(0, "h", 9192, listeners={"HTTP": "h:9192", "PLAINTEXT": "h:9092"}), "online"),
         NodeStatus(MetadataBroker(1, "h", 9093), "online"),
         NodeStatus(MetadataBroker(2, "h", 9094), "unreachable", "down")),
        (PartitionStatus(PartitionInfo("t", 0, 0, 3, (0, 1, 2), (0, 1), elr=(2,)), {0: state(0, 10), 1: state(1, 8)}),),
    )


def test_status_json_has_the_documented_shape() -> None:
    assert status_json(description()) == {
        "nodes": [
            {"id": 0, "host": "h", "port": 9192, "state": "online",
             "listeners": {"HTTP": "h:9192", "PLAINTEXT": "h:9092"}},
            {"id": 1, "host": "h", "port": 9093, "state": "online", "listeners": {}},
            {"id": 2, "host": "h", "port": 9094, "state": "unreachable", "listeners": {}},
        ],
        "controller": 0,
        "partitions": [{
            "topic": "t", "partition": 0, "leader": 0, "leaderEpoch": 3, "replicas": [0, 1, 2], "isr": [0, 1],
            "elr": [2], "lastKnownElr": [], "highWatermark": 8, "logStartOffset": 5, "logEndOffsets": {"0": 10, "1": 8},
        }],
    }


def test_status_table_shows_lag_per_replica() -> None:
    table = status_table(description())
    assert "active controller: 0" in table
    assert "unreachable (down)" in table
    assert "HTTP://h:9192 PLAINTEXT://h:9092" in table, "every listener of the node"
    assert "0:10(0) 1:8(2) 2:?" in table
    assert table.splitlines()[-1].split()[4:6] == ["0,1", "2"], "ISR, then ELR (KIP-966)"


def test_status_table_says_unknown_when_the_leader_did_not_answer() -> None:
    partition = description().partitions[0]
    unanswered = dataclasses.replace(partition, replica_states={1: partition.replica_states[1]})
    table = status_table(dataclasses.replace(description(), partitions=(unanswered,)))
    row = table.splitlines()[-1].split()
    assert row[6:] == ["?", "?", "0:?", "1:8(?)", "2:?"]  # HW, LOG-START, each replica's LEO (lag)


# -- end to end against the fake cluster ----------------------------------------------------


def test_topics_create_list_describe_alter_delete(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["--bootstrap", fake.bootstrap]
    assert run([*b, "topics", "create", "--topic", "orders", "--partitions", "2", "--replication-factor", "3",
                "--config", "retention.ms=1000"], capsys)[:2] == (0, "Created topic orders.\n")
    assert "orders" in run([*b, "topics", "list"], capsys)[1].split()
    status, out, _ = run([*b, "topics", "describe", "--topic", "orders"], capsys)
    assert status == 0
    assert "Topic: orders\tPartitionCount: 2\tReplicationFactor: 3\tConfigs: retention.ms=1000" in out
    assert ("\tTopic: orders\tPartition: 1\tLeader: 1\tLeaderEpoch: 0\tReplicas: 1,2,0\tIsr: 1,2,0\tElr: \t"
            "LastKnownElr: \n") in out
    assert run([*b, "topics", "alter-config", "--topic", "orders", "--config", "retention.ms=5"], capsys)[0] == 0
    assert fake.state.configs["orders"] == {"retention.ms": "5"}
    status, _, err = run([*b, "topics", "create", "--topic", "orders"], capsys)
    assert status == 1
    assert err.startswith("Error: TOPIC_ALREADY_EXISTS: ")
    assert run([*b, "topics", "create", "--topic", "orders", "--if-not-exists"], capsys)[0] == 0
    assert run([*b, "topics", "delete", "--topic", "orders"], capsys)[:2] == (0, "Deleted topic orders.\n")


def test_produce_then_consume_with_keys_and_offsets(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["--bootstrap", fake.bootstrap]
    run([*b, "topics", "create", "--topic", "lines", "--partitions", "1"], capsys)
    status, _, _ = run([*b, "produce", "lines", "--key-separator", ":"], capsys, stdin=b"k1:one\nk2:two\nthree\n")
    assert status == 0
    status, out, err = run([*b, "consume", "lines", "--from-beginning", "--print-key", "--print-offset",
                            "--max-records", "3"], capsys)
    assert status == 0
    assert out.splitlines() == [
        "Partition:0\tOffset:0\tk1\tone", "Partition:0\tOffset:1\tk2\ttwo", "Partition:0\tOffset:2\tnull\tthree",
    ]
    assert "Processed a total of 3 messages" in err
    out = run([*b, "consume", "lines", "--offset", "1", "--from-follower", "--timeout-ms", "300"], capsys)[1]
    assert out.splitlines() == ["two", "three"]


@given(st.binary(max_size=64).map(lambda data: data.replace(b"x", b"\n").replace(b"y", b"\r")),
       st.lists(st.integers(min_value=0, max_value=64)))
def test_lines_split_across_chunks_are_the_lines_of_the_whole(data: bytes, cuts: list[int]) -> None:
    """However reads cut stdin, the records are its lines without `\n` or `\r\n`, the last one
    even without a newline (what iterating over the file gave before)."""
    bounds = [0, *sorted(cut % (len(data) + 1) for cut in cuts), len(data)]
    partial: list[bytes] = []
    lines = [line for start, end in itertools.pairwise(bounds) if end > start
             for line in complete_lines(partial, data[start:end])]
    if partial:
        lines.append(b"".join(partial).rstrip(b"\r"))
    assert lines == [line.rstrip(b"\r\n") for line in io.BytesIO(data)]


def test_produce_sends_each_line_while_stdin_stays_open(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """`tail -F app.log | tributary produce T` streams: a line written to the producer's stdin is
    read by a consumer while that stdin stays open (the CLI once held lines until 1,000 or EOF).
    Method: a real `tributary produce` process on a pipe; the consumer waits for the record, its
    timeout only a safety net; then EOF ends the producer with status 0."""
    b = ["--bootstrap", fake.bootstrap]
    run([*b, "topics", "create", "--topic", "tailed", "--partitions", "1"], capsys)
    producer = subprocess.Popen([sys.executable, "-m", "client.cli", *b, "produce", "tailed"], cwd=ROOT,
                                stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert producer.stdin is not None
    try:
        producer.stdin.write(b"first\n")
        producer.stdin.flush()
        status, out, _ = run([*b, "consume", "tailed", "--from-beginning", "--max-records", "1",
                              "--timeout-ms", "30000"], capsys)
        assert (status, out) == (0, "first\n")
        assert producer.poll() is None, "stdin is still open"
        producer.stdin.write(b"second\n")
        producer.stdin.close()
        assert producer.wait(timeout=60) == 0, producer.communicate()[1]
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    out = run([*b, "consume", "tailed", "--from-beginning", "--max-records", "2"], capsys)[1]
    assert out.splitlines() == ["first", "second"]


def test_consume_with_a_group_commits_and_resumes(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["--bootstrap", fake.bootstrap]
    run([*b, "topics", "create", "--topic", "grouped", "--partitions", "1"], capsys)
    run([*b, "produce", "grouped"], capsys, stdin=b"a\nb\nc\n")
    first = run([*b, "consume", "grouped", "--group", "g", "--from-beginning", "--max-records", "2"], capsys)[1]
    assert first.splitlines() == ["a", "b"]
    rest = run([*b, "consume", "grouped", "--group", "g", "--timeout-ms", "300"], capsys)[1]
    assert rest.splitlines() == ["c"]


def test_consume_with_a_group_joins_with_the_assignors_it_is_given(
        fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["--bootstrap", fake.bootstrap]
    run([*b, "topics", "create", "--topic", "assigned", "--partitions", "2"], capsys)
    run([*b, "produce", "assigned"], capsys, stdin=b"a\n")
    strategy = "partition.assignment.strategy=org.apache.kafka.clients.consumer.RoundRobinAssignor,range"
    out = run([*b, "consume", "assigned", "--group", "strategic", "--from-beginning", "--max-records", "1",
               "--consumer-property", strategy, "--consumer-property", "heartbeat.interval.ms=100"], capsys)[1]
    assert out == "a\n"
    joins = [request for _, request in fake.requests_of(Api.JOIN_GROUP) if request.group_id == "strategic"]
    assert [protocol.name for protocol in joins[-1].protocols] == ["roundrobin", "range"]
    status, _, err = run([*b, "consume", "assigned", "--group", "strategic", "--consumer-property",
                          "partition.assignment.strategy=sticky"], capsys)
    assert status == 2
    assert "'sticky' is not an assignor we have; use one of range" in err


def test_groups_describe_lag_and_reset_offsets(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["--bootstrap", fake.bootstrap]
    run([*b, "topics", "create", "--topic", "ledger", "--partitions", "2"], capsys)
    run([*b, "produce", "ledger", "--partition", "0"], capsys, stdin=b"a\nb\nc\nd\n")
    run([*b, "produce", "ledger", "--partition", "1"], capsys, stdin=b"e\n")
    assert run([*b, "groups", "describe", "--group", "audit"], capsys)[0::2] == (
        1, "Error: Consumer group 'audit' does not exist.\n")
    run([*b, "consume", "ledger", "--group", "audit", "--partition", "0", "--from-beginning", "--max-records", "1"],
        capsys)
    status, out, _ = run([*b, "groups", "describe", "--group", "audit"], capsys)
    assert status == 0
    assert [line.split() for line in out.splitlines()] == [
        ["Consumer", "group", "'audit'", "has", "no", "active", "members."],
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
        ["audit", "ledger", "0", "1", "4", "3", "-", "-", "-"],
    ]

    reset = [*b, "groups", "reset-offsets", "--group", "audit", "--topic", "ledger"]
    status, out, err = run([*reset, "--to-latest"], capsys)  # a dry run: shown, not committed
    assert (status, [line.split()[-1] for line in out.splitlines()]) == (0, ["NEW-OFFSET", "4", "1"])
    assert "add --execute" in err
    assert json.loads(run([*b, "groups", "describe", "--group", "audit", "--json"], capsys)[1])["partitions"] == [
        {"topic": "ledger", "partition": 0, "committedOffset": 1, "logEndOffset": 4, "lag": 3, "consumerId": None,
         "host": None, "clientId": None}]

    assert run([*reset, "--to-offset", "99", "--execute"], capsys)[0] == 0  # clamped to the log end
    assert run([*reset[:-1], "ledger:0", "--shift-by", "-2", "--execute"], capsys)[0] == 0
    assert run([*reset[:-1], "ledger:1", "--to-datetime", "1970-01-01T00:00:00", "--execute"], capsys)[0] == 0
    lines = run([*b, "groups", "describe", "--group", "audit"], capsys)[1].splitlines()
    assert [line.split()[2:6] for line in lines[2:]] == [["0", "2", "4", "2"], ["1", "0", "1", "1"]]

    status, _, err = run([*reset, "--shift-by", "1"], capsys)
    assert status == 0, err
    status, _, err = run([*b, "groups", "reset-offsets", "--group", "other", "--topic", "ledger", "--shift-by", "1"],
                         capsys)
    assert (status, err.startswith("Error: --shift-by needs a committed offset")) == (2, True)
    status, _, err = run([*reset[:-1], "ledger:7", "--to-earliest"], capsys)
    assert (status, "ledger has partitions [0, 1], not [7]" in err) == (2, True)


def test_groups_delete_offsets_and_delete_print_each_outcome_and_exit_1_on_a_failure(
        fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["--bootstrap", fake.bootstrap]
    run([*b, "topics", "create", "--topic", "erased", "--partitions", "2"], capsys)
    for partition in ("0", "1"):
        run([*b, "produce", "erased", "--partition", partition], capsys, stdin=b"a\nb\n")
        run([*b, "consume", "erased", "--group", "eraser", "--partition", partition, "--from-beginning",
             "--max-records", "1"], capsys)
    status, out, _ = run([*b, "groups", "delete-offsets", "--group", "eraser", "--topic", "erased:0"], capsys)
    assert (status, [line.split() for line in out.splitlines()]) == (
        0, [["TOPIC", "PARTITION", "STATUS"], ["erased", "0", "Successful"]])
    described = json.loads(run([*b, "groups", "describe", "--group", "eraser", "--json"], capsys)[1])
    assert [p["partition"] for p in described["partitions"]] == [1]
    status, _, err = run([*b, "groups", "delete-offsets", "--group", "nobody", "--topic", "erased"], capsys)
    assert (status, err.startswith("Error: GROUP_ID_NOT_FOUND")) == (1, True)

    status, out, _ = run([*b, "groups", "delete", "--group", "eraser", "--group", "nobody"], capsys)
    rows = [line.split(maxsplit=1) for line in out.splitlines()]
    assert status == 1 and rows[:2] == [["GROUP", "STATUS"], ["eraser", "Successful"]]
    assert rows[2][0] == "nobody" and rows[2][1].startswith("Error: GROUP_ID_NOT_FOUND")
    assert run([*b, "groups", "describe", "--group", "eraser"], capsys)[0] == 1
    status, out, _ = run([*b, "groups", "delete", "--group", "nobody", "--json"], capsys)
    assert status == 1 and json.loads(out)["groups"][0]["error"] == "GROUP_ID_NOT_FOUND"


def test_groups_list_and_describe_a_live_group_like_kafka_consumer_groups(
        fake: FakeCluster, fake_thread: FakeClusterThread, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["--bootstrap", fake.bootstrap]
    run([*b, "topics", "create", "--topic", "watched", "--partitions", "3"], capsys)
    run([*b, "produce", "watched", "--partition", "0"], capsys, stdin=b"a\nb\n")
    consumers = fake_thread.run(start_members(fake.bootstrap, "watchers", "watched", 3, 2))
    try:
        owner = next(c for c in consumers if TopicPartition("watched", 0) in c.assignment())
        fake_thread.run(owner.commit({TopicPartition("watched", 0): 1}))
        ids = {c.member.member_id: c.assignment() for c in consumers if c.member is not None}

        status, out, _ = run([*b, "groups", "list"], capsys)
        assert status == 0 and ["watchers", "Stable", "consumer"] in [line.split() for line in out.splitlines()]
        assert out.splitlines()[0].split() == ["GROUP", "STATE", "PROTOCOL-TYPE"]
        out = run([*b, "groups", "list", "--state", "stable,completingrebalance"], capsys)[1]
        assert [line.split() for line in out.splitlines()] == [["GROUP", "STATE", "PROTOCOL-TYPE"],
                                                               ["watchers", "Stable", "consumer"]]
        with pytest.raises(SystemExit) as exited:
            run([*b, "groups", "list", "--state", "asleep"], capsys)
        assert exited.value.code == 2 and "give states among" in capsys.readouterr().err

        rows = [line.split() for line in run([*b, "groups", "describe", "--group", "watchers"], capsys)[1].splitlines()]
        assert rows[0][6:] == ["CONSUMER-ID", "HOST", "CLIENT-ID"]
        assert [row[2:6] for row in rows[1:]] == [["0", "1", "2", "1"], ["1", "-", "0", "-"], ["2", "-", "0", "-"]]
        assert {row[6]: row[7:] for row in rows[1:]} == {member: ["/127.0.0.1", "tributary"] for member in ids}
        assert all(TopicPartition("watched", int(row[2])) in ids[row[6]] for row in rows[1:]), \
            "each partition is shown with the member it is assigned to"

        rows = [line.split() for line in run([*b, "groups", "describe", "--group", "watchers", "--members"],
                                             capsys)[1].splitlines()]
        assert rows[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert {row[1]: (int(row[4]), row[5]) for row in rows[1:]} == {
            member: (len(tps), f"watched({','.join(str(p) for p in sorted(tp.partition for tp in tps))})")
            for member, tps in ids.items()}

        out = run([*b, "groups", "describe", "--group", "watchers", "--state"], capsys)[1]
        assert [line.split() for line in out.splitlines()] == [
            ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
            ["watchers", f"127.0.0.1:{fake.ports[0]}", "(0)", "cooperative-sticky", "Stable", "2"]]
        state = json.loads(run([*b, "groups", "describe", "--group", "watchers", "--state", "--json"], capsys)[1])
        assert (state["state"], state["members"], state["coordinator"]["id"]) == ("Stable", 2, 0)
        described = json.loads(run([*b, "groups", "describe", "--group", "watchers", "--json"], capsys)[1])
        assert [(p["partition"], p["committedOffset"], p["lag"]) for p in described["partitions"]] == [
            (0, 1, 1), (1, None, None), (2, None, None)]
        assert {p["consumerId"] for p in described["partitions"]} == set(ids)
    finally:
        for consumer in consumers:
            fake_thread.run(consumer.close())


def test_consume_from_a_timestamp(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["--bootstrap", fake.bootstrap]
    run([*b, "topics", "create", "--topic", "timed", "--partitions", "1"], capsys)
    run([*b, "produce", "timed"], capsys, stdin=b"old\n")
    assert run([*b, "consume", "timed", "--timestamp", str(2**42), "--timeout-ms", "200"], capsys)[1] == ""
    assert run([*b, "consume", "timed", "--timestamp", "0", "--timeout-ms", "200"], capsys)[1] == "old\n"


def test_delete_records_and_cluster_status(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["--bootstrap", fake.bootstrap]
    run([*b, "topics", "create", "--topic", "trimmed", "--partitions", "1", "--replication-factor", "3"], capsys)
    run([*b, "produce", "trimmed"], capsys, stdin=b"1\n2\n3\n4\n")
    status, out, _ = run([*b, "delete-records", "--topic", "trimmed", "--partition", "0", "--offset", "2"], capsys)
    assert (status, out) == (0, "partition: trimmed-0\tlow_watermark: 2\n")
    status, out, _ = run([*b, "cluster", "status", "--json"], capsys)
    assert status == 0
    document = json.loads(out)
    assert [node["state"] for node in document["nodes"]] == ["online"] * 3
    (trimmed,) = [p for p in document["partitions"] if p["topic"] == "trimmed"]
    assert trimmed["highWatermark"] == 4
    assert trimmed["logStartOffset"] == 2
    assert trimmed["logEndOffsets"] == {"0": 4, "1": 4, "2": 4}
    assert "REPLICAS LEO (LAG)" in run([*b, "cluster", "status"], capsys)[1]


def test_perf_tools_print_kafka_style_summaries(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["--bootstrap", fake.bootstrap]
    run([*b, "topics", "create", "--topic", "perf", "--partitions", "2"], capsys)
    status, out, _ = run([*b, "perf-produce", "--topic", "perf", "--num-records", "3000", "--record-size", "50",
                          "--throughput", "-1", "--producer-props", "linger.ms=1", "batch.size=4096"], capsys)
    assert status == 0
    assert out.startswith("3000 records sent, ")
    assert "ms 99.9th." in out
    status, out, _ = run([*b, "perf-consume", "--topic", "perf", "--messages", "3000", "--from-follower"], capsys)
    assert status == 0
    assert out.startswith("3000 records received, ")


def test_expected_errors_print_the_kafka_name_and_exit_1(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["--bootstrap", fake.bootstrap]
    status, _, err = run([*b, "consume", "nope", "--timeout-ms", "100"], capsys)
    assert status == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in err
    assert "tributary topics create --topic nope" in err
    status, _, err = run([*b, "produce", "nope", "--producer-property", "max.block.ms=100"], capsys, stdin=b"x\n")
    assert (status, err.split(":")[0:2]) == (1, ["Error", " UNKNOWN_TOPIC_OR_PARTITION"])
    status, _, err = run(["--bootstrap", "127.0.0.1:1", "cluster", "status"], capsys)
    assert status == 1
    assert "NETWORK_EXCEPTION" in err
    assert "check that the cluster is running" in err
    status, _, err = run(["--bootstrap", "nonsense", "topics", "list"], capsys)
    assert status == 2
    assert "is not host:port" in err


def test_dump_log_is_still_registered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build_parser().parse_args(["dump-log", str(tmp_path / "x.log")]).files == [str(tmp_path / "x.log")]
