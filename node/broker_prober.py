"""BrokerProber: the edge that runs the active controller's probes of brokers' listeners.

Every PROBE_INTERVAL_MS, while this node holds the controller office, it opens (and at once
closes) a TCP connection to each address the core lists (`ControllerOffice.broker_probes`), and
hands a refusal back to the office as a `BrokerConnectionRefused` call; the core decides whether
it proves the broker dead (README, "Failover after kill -9"). Time-outs and every other error are dropped: they
leave the session timeout to decide. It decides nothing itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from controller.controller_api import BrokerConnectionRefused, BrokerProbe

log = logging.getLogger(__name__)

PROBE_INTERVAL_MS = 200  # bounds the detection part of a kill -9 failover
CONNECT_TIMEOUT_MS = 1000  # a probe slower than this proves nothing; the next one tries again


class BrokerProber:
    """One task; `probes()` gives the office's probes (empty out of office), `now_ms()` the
    controller's monotonic clock, `call(request)` submits a refusal to the local office."""

    def __init__(self, probes: Callable[[], tuple[BrokerProbe, ...]], now_ms: Callable[[], int],
                 call: Callable[[Any], Awaitable[Any]]) -> None:
        self._probes = probes
        self._now_ms = now_ms
        self._call = call
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-prober")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            probes = self._probes()
            if probes:
                await asyncio.gather(*(self._probe(probe) for probe in probes))
            await asyncio.sleep(PROBE_INTERVAL_MS / 1000)

    async def _probe(self, probe: BrokerProbe) -> None:
        host, _, port = probe.endpoint.rpartition(":")
        attempted_ms = self._now_ms()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_MS / 1000):
                _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
        except ConnectionRefusedError:
            log.warning("broker %s (epoch %s) refused the controller's probe at %s", probe.broker_id,
                        probe.broker_epoch, probe.endpoint)
            await self._call(BrokerConnectionRefused(probe.broker_id, probe.broker_epoch, attempted_ms))
            return
        except (OSError, TimeoutError, ValueError):
            return  # unreachable or slow: the session timeout decides
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
