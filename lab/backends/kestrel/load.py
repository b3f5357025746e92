"""Kestrel's load client: pymemcache on one connection to the ``kestrel`` node's
``memcache`` port, with Kestrel's queue verbs.

put is ``set q 0 0 <n>``; a reliable get is ``get q/t=<ms>/open`` (one open read per
connection and queue: the token is the queue), its ack ``get q/close`` and its release
``get q/abort``; a plain get is ``get q/t=<ms>`` and takes the item for good (token None).
The short ``/t=`` wait lets the server hold an empty get instead of the consumer spinning.

With ``batch > 1`` and reliable reads, the consumer is Kestrel's monitor/confirm one
(``KestrelBatchClient``): a get hands out one message from a local buffer, which one
``monitor q <seconds> <batch>`` fills when it is empty. Each item of that stream is an open
read of the connection; an ack is ``confirm q 1`` and a release ``get q/abort``. Both act
on the connection's *oldest* open read on the queue, so messages are settled in the order
get handed them out (out of order is a ValueError: the protocol cannot say which read it
means). The server caps a monitor at ``maxOpenTransactions`` open reads per connection and
queue, so a batch needs that many. Plain gets are one ``get q/t=<ms>`` per message: the
memcache port has no batched read that is not transactional
(monitor opens every item it sends), so a batch with plain gets is refused (``check``).

Outcomes: ``NOT_STORED``, ``CLIENT_ERROR``, ``ERROR`` and ``SERVER_ERROR`` (Kestrel's
"my status refuses this", e.g. quiescent) mean the server did not do it: ``Refused``. A
timeout or a cut connection leaves the outcome unknown and propagates; pymemcache closes
its socket on any error and reconnects on the next call (which aborts the connection's
open reads on the server, as Kestrel promises). The monitor client then drops its buffer:
those messages are back in the queue for any consumer; an ack of one it had already handed
out is refused (no read is left to confirm) and a release of one is done already.

gevent-safe: pymemcache looks up ``socket`` at call time, and Locust has monkey-patched it
by the time a user makes this client; the monitor stream is read with pymemcache's own
socket helpers on pymemcache's socket.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any, Literal, Mapping

from pymemcache.client.base import _readline
from pymemcache.exceptions import (MemcacheClientError, MemcacheServerError, MemcacheUnexpectedCloseError,
                                  MemcacheUnknownCommandError, MemcacheUnknownError)

from lab.backends.kestrel.client import KestrelMemcacheClient
from lab.design.load import LoadClient, LoadPart, Refused, Targets, target

NODE, PORT = "kestrel", "memcache"
GET_WAIT_MS = 10  # how long the server holds an empty get; ``get_wait_ms`` in options overrides (0: none)
DEFAULT_TIMEOUT = 1.0  # seconds, when the options carry no ``timeout``
# A monitor's wait is whole seconds (the server parses an integer), and 0 reads nothing: its
# deadline has passed before the first read, so the stream is a bare END even with items
# queued. One second is the shortest wait that reads at all: an empty queue holds the
# consumer that long, and a partly filled one until the batch fills or the second ends.
MONITOR_SECONDS = 1


# pymemcache's exception for each refusing reply (most specific first)
_REPLIES = ((MemcacheUnknownCommandError, "ERROR"), (MemcacheClientError, "CLIENT_ERROR"),
            (MemcacheServerError, "SERVER_ERROR"))


class _Refusals:
    """Turns the server's definite refusals into ``Refused``; anything else propagates."""

    __slots__ = ("what",)

    def __init__(self, what: str):
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> Literal[False]:
        if error is None or isinstance(error, MemcacheUnexpectedCloseError):
            return False  # a cut connection: the outcome is unknown
        for refusal, reply in _REPLIES:
            if isinstance(error, refusal):
                raise Refused(f"{self.what}: {reply}") from error
        return False


class _Guarded(_Refusals):
    """``_Refusals``, and a request cut short by a kill (GreenletExit at a run's end) closes
    the connection: pymemcache closes only on an ``Exception``, and a reply left unread would
    be taken for the next request's (a stale ``END`` for a confirm never checked)."""

    __slots__ = ("memcache",)

    def __init__(self, what: str, memcache: KestrelMemcacheClient):
        super().__init__(what)
        self.memcache = memcache

    def __exit__(self, kind, error, traceback) -> Literal[False]:
        if error is not None and not isinstance(error, Exception):
            self.memcache.close()
        return super().__exit__(kind, error, traceback)


def read_monitor(memcache: KestrelMemcacheClient, queue: str, seconds: int, max_items: int) -> list[bytes]:
    """``monitor <queue> <seconds> <max_items>``: the stream's items, oldest first, each now
    an open read of this connection. The stream is ``VALUE``/data/``END`` per item, then one
    more ``END``; an error line raises pymemcache's exception for it. Any failure closes the
    connection (the rest of the stream would be read as the next reply), which makes the
    server abort the reads it opened."""
    key = memcache.check_key(queue, b"")
    try:
        if memcache.sock is None:
            memcache._connect()
        sock = memcache.sock
        assert sock is not None
        sock.sendall(b"monitor %s %d %d\r\n" % (key, seconds, max_items))
        buf = b""
        bodies: list[bytes] = []
        while True:
            buf, line = _readline(sock, buf)
            memcache._raise_errors(line, b"monitor")
            if line == b"END":
                return bodies
            if not line.startswith(b"VALUE "):
                raise MemcacheUnknownError(line[:32])
            # pymemcache's value reader, with the Kestrel client's queue-name mapping
            _, body, buf = memcache._extract_value(False, line, buf, {key: queue}, [key])
            bodies.append(body)
            buf, line = _readline(sock, buf)  # each item is a whole get reply, with its own END
            if line != b"END":
                raise MemcacheUnknownError(line[:32])
    except BaseException:
        memcache.close()
        raise


class KestrelLoadClient(LoadClient):
    """One memcache connection; its open reads belong to it (a reconnect aborts them)."""

    def __init__(self, address: tuple[str, int], reliable: bool, timeout: float, wait_ms: int):
        self.reliable, self.wait_ms = reliable, wait_ms
        # the socket must outlast the server's wait on an empty get
        self.memcache = KestrelMemcacheClient(address, timeout=timeout + wait_ms / 1000)

    def put(self, queue: str, body: bytes) -> None:
        with _Refusals(f"set {queue}"):
            stored = self.memcache.set(queue, body, noreply=False)
        if not stored:
            raise Refused(f"set {queue}: NOT_STORED")

    def get(self, queue: str) -> tuple[bytes, Any] | None:
        with _Refusals(f"get {queue}"):
            body = self.memcache.take(queue, self.wait_ms, open=self.reliable)
        if body is None:
            return None
        return body, (queue if self.reliable else None)

    def ack(self, queue: str, token: Any) -> None:
        with _Refusals(f"get {queue}/close"):
            self.memcache.confirm(token)

    def release(self, queue: str, token: Any) -> None:
        with _Refusals(f"get {queue}/abort"):
            self.memcache.abort(token)

    def close(self) -> None:
        self.memcache.close()


class _OpenReads:
    """One queue's open reads on the connection, in the server's order (oldest first): the
    messages handed out and not yet settled, then the buffered ones."""

    __slots__ = ("sock", "out", "buffered")

    def __init__(self) -> None:
        self.sock: Any = None  # pymemcache's socket they were read on
        self.out: deque[int] = deque()  # tokens
        self.buffered: deque[bytes] = deque()


class KestrelBatchClient(KestrelLoadClient):
    """Reliable reads by ``monitor``/``confirm``: a buffer of up to ``batch`` open reads per
    queue, handed out one per get; ``buffered(queue)`` counts what is fetched and not yet
    handed out. A token is a number; acks and releases go oldest first."""

    def __init__(self, address: tuple[str, int], timeout: float, batch: int):
        # the socket must outlast a monitor that waits its whole time for items
        super().__init__(address, True, timeout + MONITOR_SECONDS, 0)
        self.batch = batch
        self._reads: dict[str, _OpenReads] = {}
        self._tokens = itertools.count(1)
        self._aborted: set[int] = set()  # handed out, then aborted by a closed connection

    def _open(self, queue: str) -> _OpenReads:
        """The queue's open reads, emptied if pymemcache has closed the connection they were
        read on since (and maybe opened another): the server aborted them on that close."""
        reads = self._reads.get(queue)
        if reads is None:
            reads = self._reads[queue] = _OpenReads()
        elif reads.sock is not self.memcache.sock and (reads.out or reads.buffered):
            self._aborted.update(reads.out)
            reads.out.clear()
            reads.buffered.clear()
        return reads

    def buffered(self, queue: str) -> int:
        return len(self._open(queue).buffered)

    def put(self, queue: str, body: bytes) -> None:
        with _Guarded(f"set {queue}", self.memcache):
            super().put(queue, body)

    def get(self, queue: str) -> tuple[bytes, Any] | None:
        reads = self._open(queue)
        if not reads.buffered:
            with _Guarded(f"monitor {queue}", self.memcache):
                bodies = read_monitor(self.memcache, queue, MONITOR_SECONDS, self.batch)
            reads.sock = self.memcache.sock  # the same socket as any reads still out: _open checked
            reads.buffered.extend(bodies)
            if not bodies:
                return None
        token = next(self._tokens)
        reads.out.append(token)
        return reads.buffered.popleft(), token

    def _oldest(self, queue: str, reads: _OpenReads, token: Any) -> None:
        if reads.out and reads.out[0] == token:
            return
        if token in reads.out:
            raise ValueError(f"kestrel settles a connection's oldest open read on {queue} first (confirm and "
                             f"/abort act on it): ack or release messages in the order get handed them out")
        raise ValueError(f"{token!r} is no unsettled read of {queue} on this client")

    def ack(self, queue: str, token: Any) -> None:
        reads = self._open(queue)
        if token in self._aborted:
            self._aborted.discard(token)
            raise Refused(f"confirm {queue}: the connection that read it was closed, which aborted the read "
                          f"(the message is back in the queue)")
        self._oldest(queue, reads, token)
        with _Guarded(f"confirm {queue} 1", self.memcache):
            reply = self.memcache.raw_command(f"confirm {queue} 1")
        if reply != b"END":
            self.memcache.close()  # out of step with the server: what it meant is unknown
            raise MemcacheUnknownError(reply[:32])
        reads.out.popleft()

    def release(self, queue: str, token: Any) -> None:
        reads = self._open(queue)
        if token in self._aborted:
            self._aborted.discard(token)
            return  # the closed connection aborted it: it is back in the queue already
        self._oldest(queue, reads, token)
        with _Guarded(f"get {queue}/abort", self.memcache):
            self.memcache.abort(queue)  # the oldest open read, i.e. this one, back at the queue's head
        reads.out.popleft()

    def close(self) -> None:
        self.memcache.close()  # the server aborts every read still open: buffered ones go back
        self._reads.clear()
        self._aborted.clear()


def check(options: Mapping[str, Any], reliable: bool, batch: int) -> None:
    """ValueError for a load this client cannot make (``lab load`` asks before it starts):
    a batch is a monitor's, which opens every item it reads, so it needs reliable reads and a
    ``maxOpenTransactions`` of at least the batch (the server caps every monitor at it)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"kestrel's batch is the most messages one monitor reads: a whole number >= 1, "
                         f"got {batch!r}")
    if batch > 1 and not reliable:
        raise ValueError(f"a batch of {batch} is a monitor, which opens every item it reads: it needs reliable "
                         "reads (kestrel's plain gets take one message per request)")
    most = options.get("maxOpenTransactions")
    if batch > 1 and most is not None and most < batch:
        raise ValueError(f"a batch of {batch} needs maxOpenTransactions >= {batch} (it is {most}): a monitor "
                         f"stops at the connection's limit of open reads per queue")


def make_client(targets: Targets, options: dict, reliable: bool, user: int, batch: int = 1) -> LoadClient:
    """A client of the ``kestrel`` node's ``memcache`` port (Kestrel has one server);
    ``batch > 1`` is the monitor/confirm consumer (``KestrelBatchClient``), as ``check`` allows."""
    check(options, reliable, batch)
    address = target(targets, NODE, PORT, "kestrel")
    timeout = float(options.get("timeout") or DEFAULT_TIMEOUT)
    if batch > 1:
        return KestrelBatchClient(address, timeout, batch)
    wait_ms = int(options.get("get_wait_ms", GET_WAIT_MS))
    return KestrelLoadClient(address, reliable, timeout, wait_ms)


# consumers read in batches: a monitor of up to ``batch`` messages, as ``check`` allows
LOAD = LoadPart(ports=(PORT,), make_client=make_client, batches=True, check=check)
