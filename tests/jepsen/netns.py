"""A network of our own for real node processes: one network namespace per node, each with a veth
pair whose host end is on a bridge that also has an address, so clients on the host reach every
node. Partitions drop packets with blackhole routes in the sender's namespace (one way), or in
both (two way). Everything made here is removed in `close`, and only that."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field


def available() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (the ip command) is not installed"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Network:
    """`size` namespaces with addresses 10.213.S.1..size (S from the pid), the bridge .254."""

    size: int
    tag: str = field(default_factory=lambda: f"t{os.getpid() % 100000}")
    blackholes: set[tuple[int, int]] = field(default_factory=set)
    _made: list[tuple[str, ...]] = field(default_factory=list)  # undo commands, newest last

    @property
    def subnet(self) -> str:
        return f"10.213.{os.getpid() % 250}"

    def host(self, node: int) -> str:
        return f"{self.subnet}.{node}"

    def namespace(self, node: int) -> str:
        return f"{self.tag}n{node}"

    def wrapper(self, node: int) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.namespace(node))

    def open(self) -> Network:
        bridge = f"{self.tag}br"
        _ip("link", "add", bridge, "type", "bridge")
        self._made.append(("link", "del", bridge))
        _ip("addr", "add", f"{self.subnet}.254/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for node in range(1, self.size + 1):
            namespace, outside, inside = self.namespace(node), f"{self.tag}h{node}", f"{self.tag}c{node}"
            _ip("netns", "add", namespace)
            self._made.append(("netns", "del", namespace))
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            self._made.append(("link", "del", outside))
            _ip("link", "set", inside, "netns", namespace)
            _ip("link", "set", outside, "master", bridge)
            _ip("link", "set", outside, "up")
            _ip("-n", namespace, "addr", "add", f"{self.host(node)}/24", "dev", inside)
            _ip("-n", namespace, "link", "set", inside, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
        return self

    def drop(self, source: int, destination: int) -> None:
        """Packets from `source` to `destination` are dropped (one way)."""
        if (source, destination) not in self.blackholes:
            _ip("-n", self.namespace(source), "route", "add", "blackhole", f"{self.host(destination)}/32")
            self.blackholes.add((source, destination))

    def heal(self) -> None:
        for source, destination in sorted(self.blackholes):
            _ip("-n", self.namespace(source), "route", "del", "blackhole", f"{self.host(destination)}/32")
        self.blackholes.clear()

    def close(self) -> None:
        for undo in reversed(self._made):
            subprocess.run(["ip", *undo], capture_output=True, timeout=30)
        self._made.clear()
