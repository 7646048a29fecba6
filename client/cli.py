"""The `tributary` command line (DESIGN §7): one subcommand per module.

A subcommand module exposes `register(subcommands)`, which adds its parser to the argparse
sub-parsers and sets the parser default `run`: a function `run(arguments, out, err) -> int`
that writes to the given streams and returns the exit status. Adding a subcommand means writing
its module and listing it in `SUBCOMMANDS`; nothing else here changes.

Exit statuses follow the Unix convention the subcommands share: 0 success, 1 the command ran
and found a problem (an invalid batch, a wrong index entry), 2 a usage error (argparse's own
status, a missing file).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, Protocol

from client import cli_cluster, cli_consume, cli_groups, cli_perf, cli_produce, cli_topics, dump_log
from client.cli_support import add_global_bootstrap

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


class Subcommand(Protocol):
    """What `main` needs from a subcommand module."""

    def register(self, subcommands: Any) -> None: ...


SUBCOMMANDS: tuple[Subcommand, ...] = (
    cli_topics, cli_produce, cli_consume, cli_groups, cli_cluster, cli_perf, dump_log
)


def build_parser() -> argparse.ArgumentParser:
    """The `tributary` parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="tributary",
        description="Tributary command line: inspect and operate a Tributary cluster.",
    )
    add_global_bootstrap(parser)
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for subcommand in SUBCOMMANDS:
        subcommand.register(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `tributary` with `argv` (default: the process arguments); return the exit status."""
    arguments = build_parser().parse_args(argv)
    try:
        return arguments.run(arguments, sys.stdout, sys.stderr)
    except BrokenPipeError:
        # The reader went away (`tributary dump-log ... | head`): stop quietly, as Unix tools
        # do, and keep the interpreter's final flush from raising again.
        _detach_stdout()
        return 1
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _detach_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # stdout is not a real file (a test's capture): nothing will flush to a pipe


if __name__ == "__main__":
    sys.exit(main())
