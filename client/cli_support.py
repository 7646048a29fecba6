"""What the network subcommands of `tributary` share: the `--bootstrap` option, running a
coroutine, and turning expected failures into one line on stderr and an exit status.

Expected failures (a node down, an unknown topic, a bad config value) print the Kafka error
name and the message that says what to do, exit 1, and never a traceback; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable
from typing import TextIO

from client import event_loop
from client.errors import TributaryError
from client.metadata import DEFAULT_BOOTSTRAP

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
BOOTSTRAP_ENV = "TRIBUTARY_BOOTSTRAP"


def default_bootstrap() -> str:
    return os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP


def bootstrap_parent() -> argparse.ArgumentParser:
    """A parent parser so `--bootstrap` may also follow the subcommand (the global one is the default)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--bootstrap", "--bootstrap-server", dest="bootstrap", default=argparse.SUPPRESS,
                        metavar="HOST:PORT[,HOST:PORT...]", help="any reachable node(s) of the cluster")
    return parent


def add_global_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap", "--bootstrap-server", dest="bootstrap", default=default_bootstrap(),
        metavar="HOST:PORT[,HOST:PORT...]",
        help=f"any reachable node(s) of the cluster (default: ${BOOTSTRAP_ENV}, then {DEFAULT_BOOTSTRAP})",
    )


def parse_properties(pairs: list[str] | None, option: str) -> dict[str, str]:
    """key=value strings (a repeatable option) as a dict; ValueError names the bad one."""
    properties = {}
    for pair in pairs or []:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise ValueError(f"{option} {pair!r} is not key=value")
        properties[key.strip()] = value.strip()
    return properties


def run_command(
    main: Callable[[argparse.Namespace, TextIO, TextIO], Awaitable[int]],
) -> Callable[[argparse.Namespace, TextIO, TextIO], int]:
    """A subcommand's `run` for an async `main`: expected errors become a message and a status."""

    def run(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
        try:
            return event_loop.run(main(arguments, out, err), os.environ.get(event_loop.EVENT_LOOP_ENV))
        except TributaryError as error:
            print(f"Error: {error.code.name}: {error.message or 'no details'}", file=err)
            return EXIT_FAILED
        except ValueError as error:
            print(f"Error: {error}", file=err)
            return EXIT_USAGE

    return run
