"""The Runtime port and its error types: nothing else.

This is the one room every design core talks to the outside world through: the
clock, sleeping, tasks, events, a seeded random source, the disk and the network.
A core receives a `Runtime` and never imports asyncio, simpy, socket, time or random
itself, so the same core runs in the live world (`lab.live`: real clock, real files
with fsync, real TCP) and in the simulated world (`models.world`: SimPy time, a disk
that loses unsynced bytes, a network with partitions and per-node pauses). What both
worlds share to implement it is in `lab.worlds`.

Files: a core uses one port, the ``Store`` (a folder: open, list, rename, fsync with group
commit, ``settle``), built on its Runtime's ``Disk`` by ``lab.storage.RuntimeStore``. The
``Disk`` and its ``File`` (a ``Handle`` that fsyncs itself) are what a world implements
under it; the embeddable libraries use the same Store on plain files
(``lab.live.disk.FileStore``).

The one thing taken from asyncio is the name of cancellation, ``Cancelled``: both
worlds raise it, so a core catches one name.
"""

from __future__ import annotations

from asyncio import CancelledError
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    import random

T = TypeVar("T")

#: A core's request handler: ``await handler(source_node, message) -> reply``.
Handler = Callable[[str, Any], Awaitable[Any]]
#: What a node runs when it (re)starts: ``await boot(runtime)``.
Boot = Callable[["Runtime"], Awaitable[None]]

# Cancellation is the same exception in both worlds, so a core can catch one name.
Cancelled = CancelledError


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
class Handle(Protocol):
    """An open append-only file: append at the end, read anywhere, truncate. Writes land
    in the page cache; a Store's ``fsync`` makes them durable."""

    def append(self, data: bytes) -> int: ...
    def read(self, offset: int, size: int) -> bytes: ...
    def size(self) -> int: ...
    def truncate(self, size: int) -> None: ...
    def close(self) -> None: ...


@runtime_checkable
class File(Handle, Protocol):
    """A file of a world's Disk: a Handle that fsyncs itself (what a Store's fsync awaits)."""

    path: str

    def fsync(self) -> Awaitable[None]: ...


@runtime_checkable
class Disk(Protocol):
    """A node's disk: files under one root, addressed by relative paths."""

    def open(self, path: str) -> File: ...
    def exists(self, path: str) -> bool: ...
    def list(self, directory: str = "") -> list[str]: ...
    def rename(self, src: str, dst: str) -> None: ...
    def remove(self, path: str) -> None: ...


@runtime_checkable
class Store(Protocol):
    """The file port a core uses: one folder (a Queuefka topic, a Kestrel queue path).

    Synchronous, as the designs' file formats are, except durability: ``fsync`` returns
    something to await (a task on a Runtime disk; None where it blocked until done), and
    a core awaits ``settle()`` (where the Store has one) before it acknowledges a write.
    """

    location: str

    def names(self) -> list[str]: ...
    def open(self, name: str) -> Handle: ...
    def open_read(self, name: str) -> Handle: ...
    def size(self, name: str) -> int: ...
    def exists(self, name: str) -> bool: ...
    def remove(self, name: str) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def fsync(self, handle: Handle) -> Any: ...
    def sync_names(self) -> None: ...
    def age(self, name: str) -> float: ...


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
