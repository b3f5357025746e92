"""The Runtime port, and its live implementation on asyncio.

This is the one room every design core talks to the outside world through: the
clock, sleeping, tasks, events, a seeded random source, the disk and the network.
A core receives a `Runtime` and never imports asyncio, simpy, socket, time or random
itself, so the same core runs here (real clock, real files with fsync, real TCP) and
in the simulated world of `models.world` (SimPy time, a disk that loses unsynced
bytes, a network with partitions and per-node pauses).

The live disk and network live beside this file (`lab.live_disk`, `lab.live_net`).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path, PurePosixPath
from typing import Any, Awaitable, Callable, Coroutine, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")

#: A core's request handler: ``await handler(source_node, message) -> reply``.
Handler = Callable[[str, Any], Awaitable[Any]]
#: What a node runs when it (re)starts: ``await boot(runtime)``.
Boot = Callable[["Runtime"], Awaitable[None]]

# Cancellation is the same exception in both worlds, so a core can catch one name.
Cancelled = asyncio.CancelledError


class CallTimeout(TimeoutError):
    """A call got no reply in time: the request may or may not have been applied."""


class Unreachable(ConnectionError):
    """The peer could not be reached at all: the request was certainly not sent."""


class RemoteError(Exception):
    """The peer's handler raised; ``.error`` is the exception it raised."""

    def __init__(self, error: BaseException):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


class NodeDown(RuntimeError):
    """An operation was attempted by a node that has crashed."""


@runtime_checkable
class Task(Protocol):
    """A spawned coroutine: cancel it, ask if it is done, or await its result."""

    def cancel(self) -> None: ...
    def done(self) -> bool: ...
    def __await__(self): ...


@runtime_checkable
class Event(Protocol):
    """A one-shot event carrying a value. ``await ev.wait()`` returns the value."""

    def set(self, value: Any = None) -> None: ...
    def is_set(self) -> bool: ...
    def wait(self) -> Awaitable[Any]: ...


@runtime_checkable
class File(Protocol):
    """An append-only file handle: writes land in the page cache until ``fsync``."""

    path: str

    def append(self, data: bytes) -> int: ...
    def read(self, offset: int, size: int) -> bytes: ...
    def size(self) -> int: ...
    def truncate(self, size: int) -> None: ...
    def fsync(self) -> Awaitable[None]: ...
    def close(self) -> None: ...


@runtime_checkable
class Disk(Protocol):
    """A node's disk: files under one root, addressed by relative paths."""

    def open(self, path: str) -> File: ...
    def exists(self, path: str) -> bool: ...
    def list(self, directory: str = "") -> list[str]: ...
    def rename(self, src: str, dst: str) -> None: ...
    def remove(self, path: str) -> None: ...


@runtime_checkable
class Network(Protocol):
    """A node's view of the network: serve requests, call and send to named peers."""

    async def serve(self, handler: Handler) -> None: ...
    async def call(self, peer: str, message: Any, timeout: float) -> Any: ...
    def send(self, peer: str, message: Any) -> None: ...


@runtime_checkable
class Runtime(Protocol):
    """Everything a core may do that touches time, randomness, disk or network."""

    node: str
    random: random.Random
    disk: Disk
    net: Network

    def now(self) -> float: ...
    def now_ns(self) -> int: ...
    def sleep(self, seconds: float) -> Awaitable[None]: ...
    def spawn(self, coro: Awaitable[T], name: str = "") -> Task: ...
    def event(self) -> Event: ...
    async def wait(self, event: Event, timeout: float | None) -> bool: ...


@runtime_checkable
class World(Protocol):
    """A set of nodes sharing one clock: what the runner drives."""

    kind: str  # "sim" or "live"
    seed: int

    def node(self, name: str) -> Runtime: ...
    async def start(self, name: str, boot: Boot) -> Runtime: ...
    def run(self, main: Callable[[Runtime], Awaitable[T]]) -> T: ...


def checked_relative(path: str) -> str:
    """Normalise a disk path, refusing absolute paths and ``..``."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"disk path must be a non-empty string, got {path!r}")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"disk path must stay under the node's root: {path!r}")
    return str(pure)


def as_coroutine(awaitable: Awaitable[T]) -> Coroutine[Any, Any, T]:
    """A coroutine for any awaitable, so ``spawn`` takes ``rt.sleep(1)`` as well as ``f()``."""
    if asyncio.iscoroutine(awaitable):
        return awaitable

    async def wrapper() -> T:
        return await awaitable

    return wrapper()


def node_random(seed: int, node: str, incarnation: int = 0) -> random.Random:
    """The seeded random source of one node incarnation (string seeds hash stably)."""
    return random.Random(f"{seed}:{node}:{incarnation}")


# --------------------------------------------------------------------------- live world


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


class LiveRuntime:
    """The Runtime of one node in the live world: real clock, files and TCP."""

    def __init__(self, world: "LiveWorld", name: str):
        from lab.live_disk import LiveDisk
        from lab.live_net import LiveNet

        self.world = world
        self.node = name
        self.random = node_random(world.seed, name)
        self.disk = LiveDisk(world.disk_roots.get(name, world.root / name))
        self.net = LiveNet(name, world.addresses)
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

    async def wait(self, event: LiveEvent, timeout: float | None) -> bool:
        if event.is_set():
            return True
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.net.close()


class LiveWorld:
    """Nodes in one asyncio process, talking over loopback TCP, each with a disk folder."""

    kind = "live"

    def __init__(self, seed: int = 0, root: str | os.PathLike | None = None,
                 disk_roots: dict[str, str | os.PathLike] | None = None):
        """Node ``n``'s files live in ``root/n`` unless ``disk_roots`` names a folder for it
        (a server's ``--data-dir``)."""
        import tempfile

        self.seed = seed
        self.disk_roots = {name: Path(path) for name, path in (disk_roots or {}).items()}
        self._tmp = None if root is not None else tempfile.TemporaryDirectory(prefix="queue-lab-")
        self.root = Path(root if root is not None else self._tmp.name)
        self.addresses: dict[str, tuple[str, int]] = {}
        self.nodes: dict[str, LiveRuntime] = {}
        self.epoch_ns = time.time_ns()
        self.mono_ns = time.monotonic_ns()

    def node(self, name: str) -> LiveRuntime:
        """The node called ``name``, created on first use."""
        if name not in self.nodes:
            self.nodes[name] = LiveRuntime(self, name)
        return self.nodes[name]

    async def start(self, name: str, boot: Boot) -> LiveRuntime:
        """Create node ``name`` and run its boot function to completion."""
        rt = self.node(name)
        await boot(rt)
        return rt

    def run(self, main: Callable[[LiveRuntime], Awaitable[T]]) -> T:
        return _run_event_loop(self._main(main))

    async def _main(self, main: Callable[[LiveRuntime], Awaitable[T]]) -> T:
        control = self.node("control")
        try:
            return await main(control)
        finally:
            for rt in list(self.nodes.values()):
                await rt.close()
            if self._tmp is not None:
                self._tmp.cleanup()


def _run_event_loop(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run (on uvloop when installed), also from inside a running loop.

    Jupyter kernels already run an event loop in the main thread; there the live world
    gets a fresh loop on a thread of its own, and the caller waits for it.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-world") as pool:
        return pool.submit(_run_here, coro).result()


def _run_here(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)
