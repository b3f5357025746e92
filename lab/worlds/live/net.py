"""The live world's network: named nodes calling each other over TCP.

Each node that serves listens on its ``peer`` port (the world's ``bind``, a ``lab serve``
process's ``--peer-port``; else any free loopback port), records it as a named port
(``world.listening``, so a ready line can report it) and writes its address into the
world's address book; callers look peers up by name there. The book may be pre-filled
with nodes of other processes (``lab serve ... --peers NAME=HOST:PORT``), often the
address of a link proxy in the runner's process, which the live world's faults cut.

A frame is a 4-byte big-endian length and a pickled ``(kind, request_id, source, payload)``
tuple. Frames may come from other machines, so they are unpickled by a restricted
unpickler that builds only plain data, builtin exceptions and the lab's own dataclasses
and exceptions: a pickle that names anything else (a function, ``os.system``) is a bad
frame. A bad frame closes that connection and nothing else. This is the transport between
cores, not a public wire protocol (those live in each backend's front end).
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import importlib
import io
import itertools
import logging
import pickle
import struct
import time
from typing import Any

from lab.worlds.live.slowdown import StretchedConnection, stretch
from lab.worlds.live.host import Host
from lab.worlds.live.streams import Listener, LiveConnection, serve_connections
from lab.design.registry import design_packages
from lab.design.runtime import Accept, CallTimeout, Handler, RemoteError, Unreachable


log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024


class BadFrame(ValueError):
    """A frame that is too long, names a class frames may not carry, or does not unpickle
    to the expected tuple."""


#: builtins a frame may build besides the builtin exceptions (the rest of plain data —
#: tuples, lists, dicts, strings, bytes, numbers — needs no class lookup)
SAFE_BUILTINS = frozenset({"set", "frozenset", "bytearray", "complex", "slice", "range"})


def _trusted(module: str) -> bool:
    """The lab's own modules, and those of an installed design's package (a plug-in's
    requests are its own dataclasses)."""
    return module.startswith("lab.") or any(module == p or module.startswith(p + ".") for p in design_packages())


def allowed_class(module: str, name: str) -> type | None:
    """The class ``module.name`` if a frame may build it, else None: builtin exceptions,
    ``SAFE_BUILTINS``, and dataclasses or exceptions of the lab's own modules or an installed
    design's. Anything else (a function, ``builtins.eval``, another package's class) could
    run code."""
    if module == "builtins":
        builtin = getattr(builtins, name, None)
        if name in SAFE_BUILTINS or (isinstance(builtin, type) and issubclass(builtin, BaseException)):
            return builtin
        return None
    if not _trusted(module):
        return None
    try:
        found: Any = importlib.import_module(module)
        for part in name.split("."):  # a nested class's qualified name
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    if not (isinstance(found, type) and _trusted(found.__module__)):
        return None
    return found if dataclasses.is_dataclass(found) or issubclass(found, BaseException) else None


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = allowed_class(module, name)
        if found is None:
            raise BadFrame(f"frame names {module}.{name}, which frames may not carry")
        return found


def safe_loads(body: bytes) -> Any:
    """Unpickle ``body`` building only what ``allowed_class`` allows; BadFrame otherwise."""
    try:
        return _SafeUnpickler(io.BytesIO(body)).load()
    except BadFrame:
        raise
    except Exception as e:
        raise BadFrame(f"frame does not unpickle: {e}") from None


def encode_frame(kind: str, request_id: int, source: str, payload: Any) -> bytes:
    body = pickle.dumps((kind, request_id, source, payload), protocol=pickle.HIGHEST_PROTOCOL)
    if len(body) > MAX_FRAME:
        raise ValueError(f"message of {len(body)} bytes exceeds the {MAX_FRAME}-byte frame limit")
    return _LENGTH.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> tuple[str, int, str, Any] | None:
    """The next frame, or None at a clean end of stream."""
    try:
        header = await reader.readexactly(_LENGTH.size)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise BadFrame("stream ended inside a frame header") from None
        return None
    (length,) = _LENGTH.unpack(header)
    if length > MAX_FRAME:
        raise BadFrame(f"frame of {length} bytes exceeds the {MAX_FRAME}-byte limit")
    frame = safe_loads(await reader.readexactly(length))
    if not (isinstance(frame, tuple) and len(frame) == 4 and frame[0] in ("call", "send", "ok", "err")):
        raise BadFrame(f"unexpected frame shape: {type(frame).__name__}")
    return frame


class _Connection:
    """One outgoing connection to a peer, with its in-flight calls."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.writer = writer
        self.pending: dict[int, asyncio.Future] = {}
        self.reader_task = asyncio.get_running_loop().create_task(self._read_replies(reader))

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        try:
            while (frame := await read_frame(reader)) is not None:
                kind, request_id, _, payload = frame
                future = self.pending.get(request_id)
                if future is not None and not future.done():
                    future.set_result((kind, payload))
        except (ConnectionError, asyncio.IncompleteReadError, BadFrame) as e:
            log.warning("connection to peer lost: %s", e)
        finally:
            self.writer.close()
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(CallTimeout("connection lost before the reply"))

    @property
    def alive(self) -> bool:
        # a reset peer closes the transport before the reader task has seen it end
        return not self.reader_task.done() and not self.writer.is_closing()

    def write(self, frame: bytes, peer: str) -> None:
        """Send ``frame``; ``Unreachable`` if the connection closed under it — it was not sent
        (uvloop raises a RuntimeError for a closed transport, which the Runtime port must not
        let through: a handler that met it answered "internal error")."""
        try:
            self.writer.write(frame)
        except (RuntimeError, ConnectionError) as e:
            raise Unreachable(f"the connection to {peer!r} closed before the request was sent: {e}") from None

    def close(self) -> None:
        self.reader_task.cancel()
        self.writer.close()


class LiveNet:
    """The network port of one live node."""

    def __init__(self, node: str, world: Host):
        self.node = node
        self.world = world
        self.addresses = world.addresses
        self._listeners: list[Listener] = []
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[str, _Connection] = {}
        self._connecting: dict[str, asyncio.Future] = {}
        self._ids = itertools.count(1)
        self._background: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ serving

    async def serve(self, handler: Handler) -> None:
        """Answer calls and sends on the named port ``peer``: the host and number the world
        binds it to (``lab serve``'s ``--peer-port``), else any free loopback port."""

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve_connection(handler, reader, writer)

        host, number = self.world.bind.get("peer", ("127.0.0.1", 0))
        self._server = await asyncio.start_server(accept, host, number)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.world.listening[(self.node, "peer")] = port
        self.addresses[self.node] = ("127.0.0.1" if host in ("0.0.0.0", "") else host, port)

    async def _serve_connection(self, handler: Handler, reader, writer) -> None:
        tasks: set[asyncio.Task] = set()
        loop = asyncio.get_running_loop()
        try:
            while (frame := await read_frame(reader)) is not None:
                kind, request_id, source, payload = frame
                if kind not in ("call", "send"):
                    raise BadFrame(f"a server does not accept {kind!r} frames")
                task = loop.create_task(self._answer(handler, writer, kind, request_id, source, payload))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except BadFrame as e:
            log.warning("%s: closing a connection that sent a bad frame: %s", self.node, e)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _answer(self, handler: Handler, writer, kind, request_id, source, payload) -> None:
        try:
            reply, status = await handler(source, payload), "ok"
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the caller gets the error; the server goes on
            reply, status = e, "err"
        if kind == "send" or writer.is_closing():
            return
        try:
            frame = encode_frame(status, request_id, self.node, reply)
            if status == "err":  # any exception may land here: one the caller may not build would
                safe_loads(frame[_LENGTH.size:])  # close the connection and every call on it
        except Exception as e:
            error = (RuntimeError(f"{type(reply).__module__}.{type(reply).__qualname__}: {reply}") if status == "err"
                     else ValueError(f"reply not serialisable: {e}"))
            frame = encode_frame("err", request_id, self.node, error)
        writer.write(frame)

    # ------------------------------------------------------------------ byte streams

    async def listen(self, port: str, accept: Accept) -> None:
        """Serve the wire protocol of ``accept`` on TCP: the host and number the world binds
        port ``port`` to (``lab serve``'s flags), else any free loopback port."""
        host, number = self.world.bind.get(port, ("127.0.0.1", 0))
        listener = await serve_connections(accept, host, number)
        self._listeners.append(listener)
        self.world.listening[(self.node, port)] = listener.port

    def connect(self, node: str, port: str) -> LiveConnection | StretchedConnection:
        """A connection to ``node``'s port ``port``, through this link's proxy."""
        conn = LiveConnection(lambda: self.world.address(node, port, self.node), f"{node}:{port}")
        factor = self.world.stretched.get(node)  # the test hook (lab.worlds.live.slowdown): unset, none
        return conn if factor is None else StretchedConnection(conn, factor)

    # ------------------------------------------------------------------ calling

    async def _connection(self, peer: str) -> _Connection:
        conn = self._connections.get(peer)
        if conn is not None and conn.alive:
            return conn
        pending = self._connecting.get(peer)
        if pending is not None:
            return await asyncio.shield(pending)
        address = self.addresses.get(peer)
        if address is None:
            raise Unreachable(f"{self.node}: no node called {peer!r} is serving")
        future = asyncio.get_running_loop().create_future()
        self._connecting[peer] = future
        try:
            reader, writer = await asyncio.open_connection(*address)
            conn = _Connection(reader, writer)
            self._connections[peer] = conn
            future.set_result(conn)
            return conn
        except OSError as e:
            error = Unreachable(f"{self.node}: cannot connect to {peer!r} at {address}: {e}")
            future.set_exception(error)
            future.exception()  # mark retrieved: concurrent callers re-raise it themselves
            raise error from None
        finally:
            del self._connecting[peer]

    async def call(self, peer: str, message: Any, timeout: float) -> Any:
        factor = self.world.stretched.get(peer)  # the test hook (lab.worlds.live.slowdown): unset, none
        started = time.perf_counter_ns()
        conn = await self._connection(peer)
        request_id = next(self._ids)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        conn.pending[request_id] = future
        expiry = loop.call_later(timeout, _expire, future, peer, timeout)
        try:
            conn.write(encode_frame("call", request_id, self.node, message), peer)
            status, payload = await future
        finally:
            expiry.cancel()
            conn.pending.pop(request_id, None)
        if status == "err":
            raise RemoteError(payload)
        if factor is not None:
            await stretch(started, factor)
        return payload

    def send(self, peer: str, message: Any) -> None:
        """Fire and forget: no reply, no error if the peer is gone."""

        async def deliver() -> None:
            try:
                conn = await self._connection(peer)
                conn.write(encode_frame("send", next(self._ids), self.node, message), peer)
            except (Unreachable, ConnectionError) as e:
                log.debug("%s: send to %s dropped: %s", self.node, peer, e)

        task = asyncio.get_running_loop().create_task(deliver())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        for listener in self._listeners:
            await listener.close()
            self.world.listening = {k: v for k, v in self.world.listening.items() if k[0] != self.node}
        self._listeners.clear()
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        if self._server is not None:
            self._server.close()
            self.addresses.pop(self.node, None)
            self.world.listening.pop((self.node, "peer"), None)
            self._server = None


def _expire(future: asyncio.Future, peer: str, timeout: float) -> None:
    if not future.done():
        future.set_exception(CallTimeout(f"no reply from {peer!r} within {timeout:g} s"))
