"""`tributary-node dev`: a local cluster on 127.0.0.1, each node in its own OS process.

Two shapes, as Kafka deploys KRaft: N nodes that are each controller and broker (combined mode,
the default), or C controller-only nodes (the Raft voters; ids 1..C) and B broker-only nodes
(ids C+1..C+B) that follow the metadata log as observers. Broker i speaks Kafka's protocol on
base-port + i - 1 (PLAINTEXT, 9092 up by default: any Kafka client) and every node Tributary's HTTP
API on base-port + 100 + i - 1 (HTTP, 9192 up: replication, the controller quorum, our own client,
/metrics and /health). Each keeps its data, its generated `server.properties` and its log under
DATA_DIR/node-<id>/. The same data dir started again keeps the data. Ctrl-C or SIGTERM stops every
node with a controlled shutdown. `DevCluster` is also what the multi-process tests use, so the README's run command is
tested.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_DATA_DIR = "/tmp/tributary-dev"
HEALTH_TIMEOUT_S = 60.0
HTTP_PORT_OFFSET = 100  # `tributary-node dev`: HTTP listeners 100 above the Kafka ones
STOP_TIMEOUT_S = 40.0


@dataclass
class DevNode:
    node_id: int
    port: int
    directory: Path
    process_roles: str  # the node's `process.roles`
    host: str = "127.0.0.1"
    kafka_port: int | None = None  # its PLAINTEXT (Kafka protocol) listener, a broker's
    wrapper: tuple[str, ...] = ()  # a command the node runs under (`ip netns exec NAME` in tests)
    environment: Mapping[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles.split(",")

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles.split(",")

    @property
    def address(self) -> str:
        """Its HTTP listener's (our client, /health, the quorum)."""
        return f"{self.host}:{self.port}"

    @property
    def kafka_address(self) -> str | None:
        return None if self.kafka_port is None else f"{self.host}:{self.kafka_port}"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "node.log"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class DevCluster:
    """Local node processes: `node_count` combined nodes, or with `controller_count` > 0 that many
    controller-only nodes followed by `node_count` broker-only nodes. `properties` are extra config
    keys for every node (tests use small timeouts). Tests may give nodes their own `hosts`, a
    `wrappers` command to run under and `environments`. Methods are synchronous: they are for the
    CLI and for tests that drive processes."""

    data_dir: Path
    node_count: int = 3
    base_port: int = 9192  # node i's HTTP listener: base_port + i - 1
    properties: Mapping[str, str] = field(default_factory=dict)
    controller_count: int = 0
    hosts: Mapping[int, str] = field(default_factory=dict)
    wrappers: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    environments: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    kafka_base_port: int | None = None  # broker i's Kafka listener: kafka_base_port + i - 1 (None: none)
    nodes: dict[int, DevNode] = field(init=False)

    def __post_init__(self) -> None:
        assert self.node_count >= 1, f"node_count={self.node_count}"
        assert self.controller_count >= 0, f"controller_count={self.controller_count}"
        self.data_dir = Path(self.data_dir).resolve()
        self.nodes = {
            node_id: DevNode(node_id, self.base_port + node_id - 1, self.data_dir / f"node-{node_id}",
                             self._roles_of(node_id), self.hosts.get(node_id, "127.0.0.1"),
                             self._kafka_port_of(node_id), self.wrappers.get(node_id, ()),
                             self.environments.get(node_id, {}))
            for node_id in range(1, self.controller_count + self.node_count + 1)
        }

    def _kafka_port_of(self, node_id: int) -> int | None:
        if self.kafka_base_port is None or "broker" not in self._roles_of(node_id).split(","):
            return None
        return self.kafka_base_port + node_id - 1

    def _roles_of(self, node_id: int) -> str:
        if self.controller_count == 0:
            return "broker,controller"
        return "controller" if node_id <= self.controller_count else "broker"

    @property
    def controller_ids(self) -> list[int]:
        return [node.node_id for node in self.nodes.values() if node.is_controller]

    @property
    def broker_ids(self) -> list[int]:
        return [node.node_id for node in self.nodes.values() if node.is_broker]

    @property
    def bootstrap(self) -> str:
        """The brokers' addresses: controller-only nodes serve no client (they answer 503)."""
        return ",".join(self.nodes[node_id].address for node_id in self.broker_ids)

    @property
    def kafka_bootstrap(self) -> str:
        """The brokers' Kafka listeners (`bootstrap.servers` for any Kafka client)."""
        return ",".join(address for node_id in self.broker_ids
                        if (address := self.nodes[node_id].kafka_address) is not None)

    def write_config(self, node: DevNode) -> None:
        voters = ",".join(f"{node_id}@{self.nodes[node_id].address}" for node_id in self.controller_ids)
        properties = {
            "node.id": str(node.node_id),
            "process.roles": node.process_roles,
            "listeners": ",".join([f"HTTP://{node.address}"]
                                  + ([f"PLAINTEXT://{node.kafka_address}"] if node.kafka_address else [])),
            "controller.quorum.voters": voters,
            "log.dirs": str(node.directory / "data"),
            # As Kafka's single-node configs do: the offsets topic is created only at this factor.
            "offsets.topic.replication.factor": str(min(3, self.node_count)),
            **self.properties,
        }
        node.directory.mkdir(parents=True, exist_ok=True)
        node.config_path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))

    def start(self, wait: bool = True) -> None:
        for node in self.nodes.values():
            self.start_node(node.node_id, wait=False)
        if wait:
            self.wait_healthy()

    def start_node(self, node_id: int, wait: bool = True) -> None:
        node = self.nodes[node_id]
        assert not node.running(), f"node {node_id} is running"
        self.write_config(node)
        log = node.log_path.open("ab")
        node.process = subprocess.Popen(
            [*node.wrapper, sys.executable, "-m", "node.main", "--config", str(node.config_path)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **node.environment},
        )
        log.close()
        if wait:
            self.wait_healthy([node_id])

    def wait_healthy(self, node_ids: list[int] | None = None, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        """Until every node answers /health with 200; raises with the node's log tail if one exits."""
        deadline = time.monotonic() + timeout_s
        pending = set(node_ids or self.nodes)
        while pending:
            for node_id in sorted(pending):
                node = self.nodes[node_id]
                if not node.running():
                    raise RuntimeError(f"node {node_id} exited (code {node.process and node.process.returncode}); "
                                       f"its log {node.log_path} ends with:\n{self.log_tail(node_id)}")
                if healthy(node.address):
                    pending.discard(node_id)
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"nodes {sorted(pending)} not healthy after {timeout_s:.0f} s; see their logs "
                                   f"under {self.data_dir}")
            if pending:
                time.sleep(0.1)

    def log_tail(self, node_id: int, lines: int = 30) -> str:
        path = self.nodes[node_id].log_path
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"

    def signal_node(self, node_id: int, signum: int) -> None:
        node = self.nodes[node_id]
        assert node.process is not None and node.running(), f"node {node_id} is not running"
        node.process.send_signal(signum)

    def kill_node(self, node_id: int) -> None:
        """kill -9: no controlled shutdown, no flush; storage recovery on the next start."""
        self.signal_node(node_id, signal.SIGKILL)
        self.nodes[node_id].process.wait(timeout=STOP_TIMEOUT_S)  # type: ignore[union-attr]

    def stop_node(self, node_id: int, timeout_s: float = STOP_TIMEOUT_S, signalled: bool = False) -> int:
        """SIGTERM (controlled shutdown; not again if `signalled`), then SIGKILL after `timeout_s`;
        the exit code. A second SIGTERM could land after the node's event loop closed (its handler
        gone) and kill a node that was exiting cleanly."""
        node = self.nodes[node_id]
        assert node.process is not None
        if node.running() and not signalled:
            node.process.send_signal(signal.SIGTERM)
        try:
            return node.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            node.process.kill()
            return node.process.wait(timeout=timeout_s)

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.running():
                node.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        for node_id, node in self.nodes.items():
            if node.process is not None:
                self.stop_node(node_id, signalled=True)


def healthy(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=1.0) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def run(node_count: int, data_dir: str, base_port: int, controller_count: int = 0) -> int:
    """The `dev` command: start, tell the user how to use it, wait for Ctrl-C or SIGTERM, stop."""
    cluster = DevCluster(Path(data_dir), node_count, base_port + HTTP_PORT_OFFSET, controller_count=controller_count,
                         kafka_base_port=base_port)
    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    last_port = base_port + len(cluster.nodes) - 1
    print(f"starting {_shape(cluster)} on 127.0.0.1:{base_port}..{last_port} (Kafka) and "
          f"{base_port + HTTP_PORT_OFFSET}..{last_port + HTTP_PORT_OFFSET} (HTTP), data in {cluster.data_dir}",
          flush=True)
    try:
        cluster.start()
    except (RuntimeError, TimeoutError) as error:
        print(f"tributary-node dev: {error}", file=sys.stderr)
        cluster.stop()
        return 1
    print(_usage(cluster), flush=True)
    reported: set[int] = set()
    while not stopping:
        # A node that exits (a crash, or a `kill -9` to try failover) is reported, not restarted: the
        # others keep serving, as a real cluster would. `start_node` in Python restarts one.
        for node_id, node in cluster.nodes.items():
            if not node.running() and node_id not in reported:
                reported.add(node_id)
                print(f"node {node_id} exited (code {node.process and node.process.returncode}); the others keep "
                      f"running. Its log ends with:\n{cluster.log_tail(node_id, 5)}", file=sys.stderr, flush=True)
        time.sleep(0.5)
    print("stopping the cluster (controlled shutdown)...", flush=True)
    cluster.stop()
    print("stopped", flush=True)
    return 1 if reported else 0


def _shape(cluster: DevCluster) -> str:
    if cluster.controller_count == 0:
        return f"{cluster.node_count} nodes (each controller and broker)"
    return f"{cluster.controller_count} controller-only and {cluster.node_count} broker-only nodes"


def _usage(cluster: DevCluster) -> str:
    logs = "\n".join(f"  node {n.node_id} ({n.process_roles}): Kafka {n.kafka_address or '-'}, HTTP {n.address}  "
                     f"log: {n.log_path}" for n in cluster.nodes.values())
    script = Path(sys.executable).parent / "tributary"  # the CLI next to this interpreter (the venv's)
    tributary = os.path.relpath(script) if script.exists() else "tributary"
    return f"""
Tributary dev cluster is up.
{logs}

kafka bootstrap: {cluster.kafka_bootstrap}
  kcat -b {cluster.kafka_bootstrap} -L

bootstrap: {cluster.bootstrap}  (Tributary's own client and CLI, over HTTP)
  export TRIBUTARY_BOOTSTRAP={cluster.bootstrap}
  {tributary} topics create --topic demo --partitions 3 --replication-factor 3
  seq 10 | {tributary} produce demo
  {tributary} consume demo --from-beginning --max-records 10
  {tributary} consume demo --from-beginning --from-follower --max-records 10
  {tributary} cluster status

Ctrl-C stops every node cleanly.
"""
