"""Coverage-guided fuzzing of `tests/fuzz/targets.py` with atheris (libFuzzer), our packages
instrumented. libFuzzer's flags pass through; corpus directories come last (the first one also
receives new inputs, so give a scratch copy of `tests/fuzz/corpus/TARGET`):

    python -m tests.fuzz.run records -runs=1000000 -rss_limit_mb=1024 -timeout=10 /tmp/records

A crash (any exception out of the target), a hang past -timeout seconds or memory past
-rss_limit_mb stops the run with a nonzero exit code and the input in ./crash-*, ./timeout-* or
./oom-*: replay it with `python -m tests.fuzz.run TARGET FILE`.
"""

from __future__ import annotations

import logging
import sys

import atheris

with atheris.instrument_imports(include=["storage", "client", "node", "controller", "replication"]):
    from tests.fuzz.targets import TARGETS


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        raise SystemExit(f"usage: python -m tests.fuzz.run {{{','.join(TARGETS)}}} [libFuzzer flags] [corpus dirs]")
    logging.disable(logging.CRITICAL)  # a refused input is logged; only what escapes the target matters
    atheris.Setup([sys.argv[0], *sys.argv[2:]], TARGETS[sys.argv[1]])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
