"""`tributary cluster status`: nodes and their state, the active controller, and per partition
the leader, ISR, ELR (KIP-966 eligible leader replicas), high watermark, logStartOffset and each
replica's log end offset and lag.

`--json` prints one object: `nodes` [{id, host, port, state, listeners {name: address}}],
`controller` (id), `partitions` [{topic, partition, leader, leaderEpoch, replicas, isr, elr,
lastKnownElr, highWatermark, logStartOffset, logEndOffsets {node id: LEO}}] (a replica whose node
did not answer has no entry).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from client.admin import Admin, ClusterDescription
from client.cli_support import EXIT_FAILED, EXIT_OK, bootstrap_parent, run_command


def register(subcommands: Any) -> None:
    cluster = subcommands.add_parser("cluster", help="the cluster's nodes, controller and partitions")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    status = actions.add_parser("status", parents=[bootstrap_parent()], help="nodes, leaders, ISR, HW, LEO and lag")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument("--include-internal", action="store_true", help="also show __consumer_offsets")
    status.set_defaults(run=run_command(cluster_status))


async def cluster_status(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async with Admin(arguments.bootstrap, request_timeout_ms=5000) as admin:
        description = await admin.describe_cluster(arguments.include_internal)
    if arguments.json:
        print(json.dumps(status_json(description)), file=out)
    else:
        out.write(status_table(description))
    unreachable = [node for node in description.nodes if node.state == "unreachable"]
    return EXIT_FAILED if unreachable else EXIT_OK


def status_json(description: ClusterDescription) -> dict[str, Any]:
    return {
        "nodes": [
            {"id": node.broker.node_id, "host": node.broker.host, "port": node.broker.port, "state": node.state,
             "listeners": dict(node.broker.listeners)}
            for node in description.nodes
        ],
        "controller": description.controller_id,
        "partitions": [
            {
                "topic": p.info.topic,
                "partition": p.info.partition,
                "leader": p.info.leader,
                "leaderEpoch": p.info.leader_epoch,
                "replicas": list(p.info.replicas),
                "isr": list(p.info.isr),
                "elr": list(p.info.elr),
                "lastKnownElr": list(p.info.last_known_elr),
                "highWatermark": p.high_watermark,
                "logStartOffset": p.log_start_offset,
                "logEndOffsets": {
                    str(node): p.replica_states[node].log_end_offset
                    for node in p.info.replicas if node in p.replica_states
                },
            }
            for p in description.partitions
        ],
    }


def status_table(description: ClusterDescription) -> str:
    lines = [f"Cluster {description.cluster_id}   active controller: {description.controller_id}", ""]
    node_rows = [("NODE", "ADDRESS", "RACK", "LISTENERS", "STATE")] + [
        (str(n.broker.node_id), n.broker.address, n.broker.rack or "-",
         " ".join(f"{name}://{address}" for name, address in sorted(n.broker.listeners.items())) or "-",
         n.state + (f" ({n.error})" if n.error else ""))
        for n in description.nodes
    ]
    lines += format_rows(node_rows)
    lines.append("")
    partition_rows = [("TOPIC", "PARTITION", "LEADER", "EPOCH", "ISR", "ELR", "HW", "LOG-START",
                       "REPLICAS LEO (LAG)")]
    for p in description.partitions:
        replicas = []
        for node in p.info.replicas:
            state = p.replica_states.get(node)
            replicas.append(f"{node}:?" if state is None else f"{node}:{state.log_end_offset}({known(p.lag(node))})")
        leader_known = p.leader_state is not None  # else its HW, log start and the lags are unknown
        partition_rows.append((
            p.info.topic, str(p.info.partition), "none" if p.info.leader < 0 else str(p.info.leader),
            str(p.info.leader_epoch), ",".join(map(str, p.info.isr)) or "-", ",".join(map(str, p.info.elr)) or "-",
            str(p.high_watermark) if leader_known else "?", str(p.log_start_offset) if leader_known else "?",
            " ".join(replicas),
        ))
    lines += format_rows(partition_rows)
    return "\n".join(lines) + "\n"


def known(value: int | None) -> str:
    return "?" if value is None else str(value)


def format_rows(rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)) + "  " + row[-1]
            for row in rows]
