"""Run one node (`node.main`) under cProfile timed by CPU, not wall clock; write the profile at exit.

`python -m bench.profile_node OUT.prof --config server.properties`. On a shared machine a
wall-clock profile charges a function for the time the process waited for a core (a `send` that
wakes the receiver, any line at which the scheduler preempts); `time.process_time` charges only
the CPU the node used. `cluster_bench --profile` starts its nodes this way.
"""

from __future__ import annotations

import cProfile
import sys
import time

from node import main as node_main


def main() -> int:
    output, arguments = sys.argv[1], sys.argv[2:]
    profile = cProfile.Profile(time.process_time)
    try:
        return profile.runcall(node_main.main, arguments)
    finally:
        profile.dump_stats(output)


if __name__ == "__main__":
    sys.exit(main())
