"""`tributary-node`: run one node (`--config FILE`) or a local dev cluster (`dev`).

SIGTERM or SIGINT stops a node with a controlled shutdown (leadership moves away first, then
flush, checkpoints and the clean-shutdown marker); kill -9 is recovered by storage recovery on
the next start. Configuration errors, a log dir of another cluster and a quorum-state file that
does not parse end the process with a message that says what to change, and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import gc
import logging
import os
import signal
import sys
from collections.abc import Mapping

from client import event_loop
from client.cli_support import BOOTSTRAP_ENV
from controller.quorum_state import CorruptQuorumStateError
from node import dev
from node.config import (
    KNOWN_KEYS,
    ConfigException,
    NodeConfig,
    environment_properties,
    environment_variable,
    load_config,
)
from node.node import Node
from storage.errors import StorageError

GC_THRESHOLDS = (50_000, 20, 20)
"""CPython's cyclic GC thresholds for a node (CPython's are 700, 10, 10). A node keeps many
long-lived objects (per partition its log, segments, indexes and cores); at 2,000 partitions per
node a full collection held the event loop 80-180 ms, found nothing, and ran every ~25 s when idle
and twice per node in a failover. Young collections 70x rarer let short-lived objects die first, so
few reach the old generation and full collections become rare (one per node over a whole
bench.create_bench --failover run, pauses up to 45 ms)."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["dev"]:
        return _dev(argv[1:])
    parser = argparse.ArgumentParser(prog="tributary-node", description=__doc__.split("\n")[0],
                                     epilog="`tributary-node dev --help`: the local cluster")
    parser.add_argument("--config", help="Kafka-style .properties file (TRIBUTARY_<KEY> env vars override it)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a config key over file and environment (repeatable)")
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--override {item!r}: expected KEY=VALUE")
        overrides[key.strip()] = value.strip()
    try:
        config = load_config(args.config, dict(os.environ), overrides)
        loop_name = event_loop.event_loop_name(os.environ.get(event_loop.EVENT_LOOP_ENV))
    except (ConfigException, OSError, ValueError) as error:
        print(f"tributary-node: configuration error: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s node-{config.node_id} %(levelname)s %(name)s: %(message)s")
    log_unknown_keys(config, args.config, os.environ, overrides)
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        return event_loop.run(_serve(Node(config)), loop_name)
    except (StorageError, CorruptQuorumStateError) as error:
        print(f"tributary-node: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


# How close an unknown key must be to a known one to be named as the likely typo (difflib's ratio):
# 0.85 catches a letter missed, doubled or swapped (`log.retension.hours`, `min.insync.replica`) and
# leaves Kafka keys we do not use unmatched (`offsets.retention.minutes` is not `log.retention.minutes`).
TYPO_RATIO_MIN = 0.85


def log_unknown_keys(config: NodeConfig, path: str | None, environ: Mapping[str, str],
                     overrides: Mapping[str, str]) -> None:
    """One WARNING per key the node does not know, naming where it was set and, for a likely typo,
    the key meant. Kafka's AbstractConfig.logUnused warns the same way rather than refusing to start,
    so a Kafka server.properties with keys we have no use for still starts."""
    environment = environment_properties(environ)
    for key in config.unused_keys:
        if key in overrides:
            source = f"--override {key}"
        elif key in environment:
            if environment_variable(key) == BOOTSTRAP_ENV:
                continue  # the `tributary` CLI's variable, exported in the same shell: not meant for the node
            if environment_variable(key) == event_loop.EVENT_LOOP_ENV:
                continue  # read by the entry point, not a config key
            source = f"environment variable {environment_variable(key)}"
        else:
            source = str(path)
        meant = difflib.get_close_matches(key, KNOWN_KEYS, n=1, cutoff=TYPO_RATIO_MIN)
        hint = f" (did you mean {meant[0]!r}?)" if meant else ""
        logging.getLogger(__name__).warning("unknown config key %r in %s is ignored%s", key, source, hint)


async def _serve(node: Node) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await node.start()
    logging.getLogger(__name__).info("node %s started on the %s event loop; listening on %s", node.config.node_id,
                                     type(loop).__module__.split(".")[0], ", ".join(node.config.listener_addresses()))
    await stop.wait()
    logging.getLogger(__name__).info("controlled shutdown")
    await node.stop(controlled=True)
    return 0


def _dev(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tributary-node dev", description=dev.__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, help="number of nodes, each controller and broker (default 3)")
    parser.add_argument("--controllers", type=int, help="controller-only nodes (ids 1..N); with --brokers")
    parser.add_argument("--brokers", type=int, help="broker-only nodes after the controllers; with --controllers")
    parser.add_argument("--data-dir", default=dev.DEFAULT_DATA_DIR, help=f"default {dev.DEFAULT_DATA_DIR}")
    parser.add_argument("--base-port", type=int, default=9092,
                        help="node i speaks Kafka on base-port + i - 1 and HTTP on base-port + 100 + i - 1")
    args = parser.parse_args(argv)
    if (args.controllers is None) != (args.brokers is None):
        parser.error("--controllers and --brokers go together (dedicated controllers and brokers)")
    if args.controllers is not None:
        if args.nodes is not None:
            parser.error("--nodes is for combined nodes; with --controllers and --brokers leave it out")
        if args.controllers < 1 or args.brokers < 1:
            parser.error("--controllers and --brokers must each be at least 1")
        return dev.run(args.brokers, args.data_dir, args.base_port, controller_count=args.controllers)
    nodes = 3 if args.nodes is None else args.nodes
    if nodes < 1:
        parser.error("--nodes must be at least 1")
    return dev.run(nodes, args.data_dir, args.base_port)


if __name__ == "__main__":
    sys.exit(main())
