"""Which event loop `tributary` and `tributary-node` run on: uvloop when installed, else asyncio's.

uvloop (libuv under asyncio's API) cuts the per-callback and per-socket overhead that dominates a
lightly loaded node (issue 15). `TRIBUTARY_EVENT_LOOP=asyncio` turns it off (to compare, or to rule
it out when chasing a bug); `uvloop` asks for it and fails if it is not installed. The variable is
read once, by the entry points, and given here.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

EVENT_LOOP_ENV = "TRIBUTARY_EVENT_LOOP"
UVLOOP = "uvloop"
ASYNCIO = "asyncio"

T = TypeVar("T")


def event_loop_name(requested: str | None) -> str:
    """The loop to run for the variable's value (None or empty: uvloop if installed)."""
    choice = (requested or "").strip().lower()
    if choice not in ("", UVLOOP, ASYNCIO):
        raise ValueError(f"{EVENT_LOOP_ENV}={requested!r}: expected {UVLOOP!r} or {ASYNCIO!r}")
    if choice:
        return choice
    return UVLOOP if importlib.util.find_spec(UVLOOP) is not None else ASYNCIO


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """`asyncio.Runner`'s factory for `name`; None is asyncio's default loop."""
    if name == ASYNCIO:
        return None
    assert name == UVLOOP, f"unknown event loop {name!r}"
    import uvloop

    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], requested: str | None) -> T:
    """`asyncio.run(main)` on the loop `requested` names (the value of TRIBUTARY_EVENT_LOOP)."""
    with asyncio.Runner(loop_factory=loop_factory(event_loop_name(requested))) as runner:
        return runner.run(main)
