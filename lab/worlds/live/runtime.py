"""The live world's Runtime of one node: the real clock, asyncio tasks and events, real
files (``lab.worlds.live.disk``) and loopback TCP (``lab.worlds.live.net``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Protocol, TypeVar

from lab.design.runtime import Event, Network
from lab.worlds.live.disk import LiveDisk
from lab.worlds.live.net import LiveNet
from lab.worlds.live.host import Host
from lab.worlds.live.streams import within
from lab.worlds.shared import as_coroutine, node_random


T = TypeVar("T")


class LiveEvent:
    """An asyncio event that carries a value."""

    __slots__ = ("_event", "_value")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._value: Any = None

    def set(self, value: Any = None) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> Any:
        await self._event.wait()
        return self._value


class LiveTask:
    """An asyncio task behind the Task port."""

    __slots__ = ("_task",)

    def __init__(self, task: asyncio.Task):
        self._task = task

    def cancel(self) -> None:
        self._task.cancel()

    def done(self) -> bool:
        return self._task.done()

    def __await__(self):
        return self._task.__await__()


class NodeNetwork(Network, Protocol):
    """A live node's network, closed when the node ends: a ``LiveNet`` (the calibration's
    in-process world, ``lab.worlds.inprocess``, puts its ``InProcessNet`` in its place)."""

    async def close(self) -> None: ...


class LiveRuntime:
    """The Runtime of one node in the live world: real clock, files and TCP."""

    def __init__(self, world: Host, name: str):
        self.world = world
        self.node = name
        self.random = node_random(world.seed, name)
        self.disk = LiveDisk(world.disk_roots.get(name, world.root / name))
        self.net: NodeNetwork = LiveNet(name, world)
        self._tasks: set[asyncio.Task] = set()

    def now(self) -> float:
        return self.now_ns() / 1e9

    def now_ns(self) -> int:
        # Epoch-aligned but monotonic: samples line up with other tools' timestamps.
        return self.world.epoch_ns + (time.monotonic_ns() - self.world.mono_ns)

    def sleep(self, seconds: float) -> Awaitable[None]:
        return asyncio.sleep(max(0.0, seconds))

    def spawn(self, coro: Awaitable[T], name: str = "") -> LiveTask:
        task = asyncio.get_running_loop().create_task(as_coroutine(coro), name=name or None)
        # Keep a strong reference: asyncio only holds weak ones to running tasks.
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return LiveTask(task)

    def event(self) -> LiveEvent:
        return LiveEvent()

    async def wait(self, event: Event, timeout: float | None) -> bool:
        if event.is_set():
            return True
        try:
            await within(event.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.net.close()
