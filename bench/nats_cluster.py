"""A 3-node NATS JetStream cluster on loopback for `bench.nats_bench`: Debian's `nats-server`
processes, each with its own config, client port, route port and file store in a temp dir.

NATS's file store writes through the page cache and fsyncs every `sync_interval` (2 min by default),
as Kafka and Tributary leave flushing to the OS: the comparison is of replication, not of disks.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

NATS_SERVER = "nats-server"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def nats_server_path() -> str:
    path = shutil.which(NATS_SERVER) or (f"/usr/sbin/{NATS_SERVER}" if Path(f"/usr/sbin/{NATS_SERVER}").exists()
                                         else None)
    if path is None:
        raise RuntimeError("nats-server not found: `apt-get install -y nats-server` (as root)")
    return path


@dataclass
class NatsCluster:
    """`size` servers: server i listens for clients on client_base + i and for routes on route_base + i."""

    data_dir: Path
    client_base: int
    route_base: int
    size: int = 3
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def servers(self) -> list[str]:
        return [f"nats://127.0.0.1:{self.client_base + index}" for index in range(self.size)]

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def _config(self, index: int) -> str:
        routes = ", ".join(f"nats-route://127.0.0.1:{self.route_base + other}"
                           for other in range(self.size) if other != index)
        store = self.data_dir / f"n{index + 1}"
        return (f'server_name: "n{index + 1}"\n'
                f"listen: 127.0.0.1:{self.client_base + index}\n"
                f'jetstream {{ store_dir: "{store}", max_memory_store: 256MB, max_file_store: 8GB }}\n'
                f'cluster {{ name: "bench", listen: 127.0.0.1:{self.route_base + index}, routes: [{routes}] }}\n')

    def start(self) -> None:
        binary = nats_server_path()
        for index in range(self.size):
            config = self.data_dir / f"n{index + 1}.conf"
            config.write_text(self._config(index))
            log = (self.data_dir / f"n{index + 1}.log").open("ab")
            self.processes.append(subprocess.Popen([binary, "-c", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL))

    async def wait_ready(self) -> None:
        """Until JetStream answers through the meta group (a meta leader is elected)."""
        import nats

        deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_S
        while True:
            try:
                connection = await nats.connect(servers=self.servers, connect_timeout=1)
                try:
                    await connection.jetstream().account_info()
                    return
                finally:
                    await connection.close()
            except Exception as error:  # any failure before the deadline is "not yet"
                if asyncio.get_running_loop().time() > deadline:
                    raise RuntimeError(f"JetStream not ready after {READY_TIMEOUT_S:.0f} s: {error!r}") from error
                await asyncio.sleep(0.2)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
