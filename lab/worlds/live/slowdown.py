"""A test hook, not a feature: ``QUEUE_LAB_INJECT_SLOWDOWN=DESIGN:FACTOR`` makes every
request a live client makes to DESIGN's servers take FACTOR times its measured time.

It exists so the regression gate (``lab regress``) can be shown to catch a slower design
(tests/test_regress.py). Only the live world reads it (``LiveWorld``, when it starts a
design's server node), and only the clients in the runner's process are slowed: each
exchange on a connection to a stretched node (``LiveNet.connect``) and each call to one
(``LiveNet.call``, the in-process control) waits, after its reply, (FACTOR - 1) times
the time the reply took. Server processes and the sim world never see it; unset, it
changes nothing.

The extra wait leaves the event loop free and the process idle, as a slower server would:
asyncio's own sleep for the part above two milliseconds (the loop's timers have millisecond
steps), the rest but ``WAKE_UP`` in a thread of the hook's own pool (``time.sleep`` has
finer steps), then turns of the loop until the deadline.
"""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from lab.worlds.live.streams import LiveConnection

ENV = "QUEUE_LAB_INJECT_SLOWDOWN"
WAKE_UP = 0.0002  # seconds: what a sleeping thread and the loop it wakes take beyond the sleep
T = TypeVar("T")


def injected(value: str | None = None) -> dict[str, float]:
    """Design -> factor from ``value`` (default: the environment), ``DESIGN:FACTOR[,...]``;
    empty when unset. A malformed value is a ValueError naming the variable."""
    text = os.environ.get(ENV, "") if value is None else value
    found: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        design, sep, factor = item.partition(":")
        try:
            number = float(factor)
        except ValueError:
            number = float("nan")
        if not sep or not design or not number >= 1:
            raise ValueError(f"{ENV}={text!r}: use DESIGN:FACTOR with FACTOR >= 1, e.g. kestrel:2")
        found[design.strip()] = number
    return found


_sleepers: ThreadPoolExecutor | None = None


async def stretch(started_ns: int, factor: float) -> None:
    """Wait until the time since ``started_ns`` (perf_counter_ns) is ``factor`` times what it is now."""
    global _sleepers
    now = time.perf_counter_ns()
    deadline = now + round((now - started_ns) * (factor - 1))
    coarse = (deadline - now) / 1e9 - 0.002
    if coarse > 0:
        await asyncio.sleep(coarse)
    left = (deadline - time.perf_counter_ns()) / 1e9 - WAKE_UP
    if left > 0:
        if _sleepers is None:
            _sleepers = ThreadPoolExecutor(max_workers=64, thread_name_prefix="slowdown")
        await asyncio.get_running_loop().run_in_executor(_sleepers, time.sleep, left)
    while time.perf_counter_ns() < deadline:
        await asyncio.sleep(0)


class StretchedConnection:
    """A LiveConnection whose every exchange takes ``factor`` times as long."""

    def __init__(self, inner: LiveConnection, factor: float):
        self.inner, self.factor = inner, factor

    async def exchange(self, data: bytes, receive: Callable[[bytes], T | None], timeout: float) -> T:
        started = time.perf_counter_ns()
        reply = await self.inner.exchange(data, receive, timeout)
        await stretch(started, self.factor)
        return reply

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
