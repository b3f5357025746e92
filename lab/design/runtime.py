"""The Runtime port and its error types: nothing else.

This is the one room every design core talks to the outside world through: the
clock, sleeping, tasks, events, a seeded random source, the disk and the network.
A core receives a `Runtime` and never imports asyncio, simpy, socket, time or random
itself, so the same core runs in the live world (`lab.worlds.live`: real clock, real files
with fsync, real TCP) and in the simulated world (`models.world`: SimPy time, a disk
that loses unsynced bytes, a network with partitions and per-node pauses). What both
worlds share to implement it is in `lab.worlds.shared`.

Files: a core uses one port, the ``Store`` (a folder: open, list, rename, fsync with group
commit, ``settle``), built on its Runtime's ``Disk`` by ``lab.design.storage.RuntimeStore``. The
``Disk`` and its ``File`` (a ``Handle`` that fsyncs itself) are what a world implements
under it; the embeddable libraries use the same Store on plain files
(``lab.worlds.live.disk.FileStore``).

Network errors, one set, raised alike in both worlds (a design's failover catches these
names and nothing else):

- ``Unreachable`` — no connection could be opened (nothing listens on that node's port, a
  refused connection, no such node): the request was certainly not sent, a definite fail;
- ``ConnectionLost`` (a ``ConnectionResetError``) — an open connection broke (reset or
  closed by the server) before the whole reply came — a server process that crashed resets
  its connections, and is reset again while it is down: the request may have been applied;
- ``CallTimeout`` (a ``TimeoutError``) — no reply in time (a silent peer: a partition, a
  paused process, a reset a partition dropped): the request may have been applied.

``Network.call`` reports a lost connection as ``CallTimeout`` (no reply), as the sim does.

The one thing taken from asyncio is the name of cancellation, ``Cancelled``: both
worlds raise it, so a core catches one name.
"""

from __future__ import annotations

from asyncio import CancelledError
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Generator, Protocol, TypeVar, runtime_checkable

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


class ConnectionLost(ConnectionResetError):
    """A connection broke (reset, or closed by the server) after the request may have been
    sent and before the whole reply: the outcome is unknown. A ``ConnectionResetError``, so
    a client that caught that still catches it."""


class RemoteError(Exception):
    """The peer's handler raised; ``.error`` is the exception it raised."""

    def __init__(self, error: BaseException):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


class NodeDown(RuntimeError):
    """An operation was attempted by a node that has crashed."""


class ProtocolDrop(Exception):
    """A connection's peer broke the wire protocol so badly that the connection is closed
    at once (a framing error): raised by ``ServerConnection.next_request``."""


@runtime_checkable
class Task(Protocol):
    """A spawned coroutine: cancel it, ask if it is done, or await its result."""

    def cancel(self) -> None: ...
    def done(self) -> bool: ...
    def __await__(self) -> Generator[Any, None, Any]: ...


@runtime_checkable
class Event(Protocol):
    """A one-shot event carrying a value. ``await ev.wait()`` returns the value."""

    def set(self, value: Any = None) -> None: ...
    def is_set(self) -> bool: ...
    def wait(self) -> Awaitable[Any]: ...


#: what a file's ``append`` takes: any bytes-like value (a writer may pass a view of its
#: buffer, so that nothing is copied on the way)
BytesLike = bytes | bytearray | memoryview


@runtime_checkable
class Handle(Protocol):
    """An open append-only file: append at the end, read anywhere, truncate. Writes land
    in the page cache; a Store's ``fsync`` makes them durable."""

    def append(self, data: BytesLike) -> int: ...
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


#: How a connection writes: ``await send(data)``.
Send = Callable[[bytes], Awaitable[None]]


class ServerConnection(Protocol):
    """One accepted connection's wire protocol, sans-IO (as h11): the world feeds it the
    bytes that arrive and runs its requests strictly in order, one at a time; replies go out
    through ``send``. Written once per protocol: the live world drives it over TCP, the sim
    world over simulated links.

    Idleness: the world closes the connection once ``timeout`` seconds pass with no request
    running. The timer starts when the connection is accepted and again after every handled
    request, and also at every chunk received if ``idle_resets_on_data`` (a memcache
    client's idle timeout; an HTTP header timeout must not be reset by a trickle of bytes).
    """

    timeout: float | None
    idle_resets_on_data: bool

    def feed(self, data: bytes) -> None: ...

    def next_request(self) -> Any | None:
        """The next complete request, or None until more bytes arrive. ``ProtocolDrop``
        closes the connection at once; a protocol that answers bad input (HTTP's 400)
        returns a request whose handling says so and returns False."""

    async def handle(self, request: Any, send: Send) -> bool:
        """Run one request; False closes the connection after it."""

    def lost(self) -> None:
        """The connection is gone (either side closed it): release what it held."""


#: A listener's factory: one ``ServerConnection`` per accepted connection.
Accept = Callable[[], ServerConnection]


class Connection(Protocol):
    """A client's byte-stream connection to a named port of a node (real TCP in the live
    world, through the link's proxy; simulated links in the sim world), opened on first use."""

    async def exchange(self, data: bytes, receive: Callable[[bytes], T | None], timeout: float) -> T:
        """Send ``data`` and feed the reply's bytes to ``receive`` until it returns the reply
        (not None). ``CallTimeout`` after ``timeout`` seconds: the connection is closed then
        (its state is unknown) and the next exchange opens a new one. ``Unreachable`` if no
        connection could be opened (refused, nothing listens): ``data`` was certainly not
        sent. ``ConnectionLost`` if the connection was reset or closed before the whole
        reply: ``data`` may have been acted on. No other network error (no raw
        ``ConnectionResetError``, ``BrokenPipeError`` or ``OSError``) leaves an exchange; an
        exception ``receive`` raises passes through as it is."""

    @property
    def broken(self) -> bool:
        """Whether the connection was closed by the server or the network since it was last
        opened (a reset, a close, a server's restart) and none has been opened since: what
        the server leased to it is the server's again. A client that holds what it fetched
        (a prefetch) asks before handing it out. False before the first exchange."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class Network(Protocol):
    """A node's view of the network: messages to named peers (``serve``/``call``/``send``,
    the transport between cores), and byte streams on named ports (``listen``/``connect``,
    a design's wire protocol)."""

    async def serve(self, handler: Handler) -> None: ...
    async def call(self, peer: str, message: Any, timeout: float) -> Any: ...
    def send(self, peer: str, message: Any) -> None: ...
    async def listen(self, port: str, accept: Accept) -> None: ...
    def connect(self, node: str, port: str) -> Connection: ...


@runtime_checkable
class Runtime(Protocol):
    """Everything a core may do that touches time, randomness, disk or network. A core
    reads its node's name, random source, disk and network and never replaces them, so
    they are read-only here, and each world's own types fill them in."""

    @property
    def node(self) -> str: ...
    @property
    def random(self) -> random.Random: ...
    @property
    def disk(self) -> Disk: ...
    @property
    def net(self) -> Network: ...

    def now(self) -> float: ...
    def now_ns(self) -> int: ...
    def sleep(self, seconds: float) -> Awaitable[None]: ...
    def spawn(self, coro: Awaitable[T], name: str = "") -> Task: ...
    def event(self) -> Event: ...
    async def wait(self, event: Event, timeout: float | None) -> bool: ...
