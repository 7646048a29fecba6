"""The entry points' event loop: uvloop unless TRIBUTARY_EVENT_LOOP=asyncio (issue 15).

Method: run a coroutine through `event_loop.run` and look at the loop it ran on; the loop must
serve what the node relies on (signal handlers, subprocesses, `loop.time()`, sockets)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest
import uvloop

from client import event_loop


async def loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


def test_default_is_uvloop_when_installed() -> None:
    assert event_loop.event_loop_name(None) == event_loop.UVLOOP
    assert issubclass(event_loop.run(loop_type(), None), uvloop.Loop)


def test_asyncio_turns_uvloop_off() -> None:
    ran_on = event_loop.run(loop_type(), "asyncio")
    assert not issubclass(ran_on, uvloop.Loop)
    assert issubclass(ran_on, asyncio.BaseEventLoop)


def test_an_unknown_loop_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="TRIBUTARY_EVENT_LOOP='trio'"):
        event_loop.event_loop_name("trio")


async def what_the_node_uses() -> tuple[bool, bytes, bytes]:
    """A signal handler, a subprocess, a timer on loop.time() and a loopback stream round trip."""
    loop = asyncio.get_running_loop()
    signalled = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, signalled.set)
    os.kill(os.getpid(), signal.SIGUSR1)
    await asyncio.wait_for(signalled.wait(), 5)
    loop.remove_signal_handler(signal.SIGUSR1)
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", "print('child')",
                                                   stdout=asyncio.subprocess.PIPE)
    child_output, _ = await process.communicate()
    fired = loop.create_future()
    loop.call_at(loop.time() + 0.001, fired.set_result, True)
    await asyncio.wait_for(fired, 5)

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(4))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"ping")
    echoed = await reader.readexactly(4)
    writer.close()
    server.close()
    await server.wait_closed()
    return signalled.is_set(), child_output, echoed


@pytest.mark.parametrize("name", [event_loop.UVLOOP, event_loop.ASYNCIO])
def test_each_loop_serves_signals_subprocesses_timers_and_sockets(name: str) -> None:
    assert event_loop.run(what_the_node_uses(), name) == (True, b"child\n", b"ping")
