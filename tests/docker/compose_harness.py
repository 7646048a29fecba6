"""The deploy/ compose cluster driven from the host for the docker tests: the engine
(deploy/ensure-docker), the image (deploy/build-image), `up` with test timeouts
(tests/docker/docker-compose.fast.yml), and the faults of issue 5 on one node's container.

Works with compose v2 (`docker compose`) and v1.29 (`docker-compose`): containers are found with
`ps -q SERVICE`, never by name (v1 names them `PROJECT_SERVICE_1`, v2 `PROJECT-SERVICE-1`), and
health is polled with `docker inspect` (v1 has no `up --wait`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_FILES = (DEPLOY / "docker-compose.yml", Path(__file__).resolve().parent / "docker-compose.fast.yml")
IMAGE = "tributary:test"
SERVICES = {1: "node1", 2: "node2", 3: "node3"}
# From docker-compose.fast.yml: what the tests wait for is bounded by these.
REPLICA_LAG_TIME_MAX_MS = 1500
HEALTHY_TIMEOUT_S = 90.0
COMMAND_TIMEOUT_S = 600.0


SKIP_REASON_PREFIX = "docker tests skipped: "


class DockerUnavailable(Exception):
    """Docker cannot run here; the message (SKIP_REASON_PREFIX and why) is the one line the skipped
    tests show."""


def run(command: list[str], env: dict[str, str] | None = None, timeout_s: float = COMMAND_TIMEOUT_S,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise with its output, which says what went wrong."""
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


def docker_answers() -> bool:
    return shutil.which("docker") is not None and run(["docker", "info"], check=False, timeout_s=30).returncode == 0


def ensure_docker() -> bool:
    """deploy/ensure-docker: install and start what is missing. True when it started a dockerd
    (which `stop_docker` then stops at the end); DockerUnavailable when Docker cannot run."""
    answered_before = docker_answers()
    result = run([str(DEPLOY / "ensure-docker")], check=False)
    if result.returncode != 0:
        reasons = [line for line in result.stderr.splitlines() if line.strip()]
        raise DockerUnavailable(f"{SKIP_REASON_PREFIX}{reasons[-1] if reasons else 'deploy/ensure-docker failed'}")
    return not answered_before


def stop_docker() -> None:
    run([str(DEPLOY / "ensure-docker"), "--stop"])


def compose_command() -> list[str]:
    """`docker compose` (v2) when the plugin exists, else `docker-compose` (v1)."""
    if run(["docker", "compose", "version"], check=False, timeout_s=30).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise DockerUnavailable(f"{SKIP_REASON_PREFIX}neither `docker compose` nor `docker-compose` is installed")


def build_image() -> str:
    """deploy/build-image; the base image it used."""
    result = run([str(DEPLOY / "build-image"), IMAGE])
    return result.stdout.strip().rpartition("base: ")[2]


@dataclass
class ComposeCluster:
    """One compose project of deploy/docker-compose.yml, on host ports `ports` (node id -> port of
    its EXTERNAL HTTP listener) and `kafka_ports` (node id -> port of its Kafka listener)."""

    project: str
    ports: dict[int, int]
    kafka_ports: dict[int, int]
    compose: list[str] = field(default_factory=compose_command)

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "TRIBUTARY_IMAGE": IMAGE,
            **{f"TRIBUTARY_PORT_{node_id}": str(port) for node_id, port in self.ports.items()},
            **{f"TRIBUTARY_KAFKA_PORT_{node_id}": str(port) for node_id, port in self.kafka_ports.items()},
        }

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.kafka_ports.values())

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(node_id) for node_id in self.ports)

    def bootstrap_without(self, node_id: int) -> str:
        """The other nodes' addresses: for asking the cluster about `node_id` while it is paused, cut
        off or just restarted (then it accepts connections without answering, or answers from stale
        metadata)."""
        return ",".join(self.address(other) for other in self.ports if other != node_id)

    def address(self, node_id: int) -> str:
        """The node's EXTERNAL listener, as published on the host."""
        return f"127.0.0.1:{self.ports[node_id]}"

    @property
    def network(self) -> str:
        """The compose network's name (both versions: PROJECT_tributary)."""
        return f"{self.project}_tributary"

    def compose_run(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        files = [option for path in COMPOSE_FILES for option in ("-f", str(path))]
        return run([*self.compose, "-p", self.project, *files, *arguments], env=self.env)

    def up(self) -> None:
        self.compose_run("up", "-d", "--no-build")
        self.wait_healthy(list(self.ports))

    def down(self) -> None:
        self.compose_run("down", "-v", "--remove-orphans", "-t", "20")

    def logs(self, tail: int = 40) -> str:
        return self.compose_run("logs", "--no-color", "--tail", str(tail)).stdout

    def container(self, node_id: int) -> str:
        container_id = self.compose_run("ps", "-q", SERVICES[node_id]).stdout.strip()
        assert container_id, f"no container for {SERVICES[node_id]} in project {self.project}"
        return container_id

    def health(self, node_id: int) -> str:
        """Docker's health status of the node's container: starting, healthy or unhealthy."""
        inspected = json.loads(run(["docker", "inspect", self.container(node_id)]).stdout)[0]
        return inspected["State"].get("Health", {}).get("Status", "none")

    def wait_healthy(self, node_ids: list[int], timeout_s: float = HEALTHY_TIMEOUT_S) -> float:
        """Until Docker reports every node's HEALTHCHECK healthy; seconds it took. A poll, as
        Docker gives no event to await (and compose v1 has no `up --wait`)."""
        started = time.monotonic()
        pending = set(node_ids)
        while pending:
            pending = {node_id for node_id in pending if self.health(node_id) != "healthy"}
            if pending and time.monotonic() - started > timeout_s:
                raise AssertionError(f"nodes {sorted(pending)} not healthy within {timeout_s:.0f} s; logs:\n"
                                     f"{self.logs()}")
            if pending:
                time.sleep(0.2)
        return time.monotonic() - started

    def docker(self, verb: str, node_id: int) -> None:
        """`docker kill|start|pause|unpause` the node's container."""
        run(["docker", verb, self.container(node_id)])

    def disconnect(self, node_id: int) -> None:
        run(["docker", "network", "disconnect", self.network, self.container(node_id)])

    def connect(self, node_id: int) -> None:
        # --alias: the service name must resolve again for the other nodes.
        run(["docker", "network", "connect", "--alias", SERVICES[node_id], self.network, self.container(node_id)])
