"""Kestrel's load client: pymemcache on one connection to the ``kestrel`` node's
``memcache`` port, with Kestrel's queue verbs.

put is ``set q 0 0 <n>``; a reliable get is ``get q/t=<ms>/open`` (one open read per
connection and queue: the token is the queue), its ack ``get q/close`` and its release
``get q/abort``; a plain get is ``get q/t=<ms>`` and takes the item for good (token None).
The short ``/t=`` wait lets the server hold an empty get instead of the consumer spinning.

Outcomes: ``NOT_STORED``, ``CLIENT_ERROR``, ``ERROR`` and ``SERVER_ERROR`` (Kestrel's
"my status refuses this", e.g. quiescent) mean the server did not do it: ``Refused``. A
timeout or a cut connection leaves the outcome unknown and propagates; pymemcache closes
its socket on any error and reconnects on the next call (which aborts the connection's
open reads on the server, as Kestrel promises).

gevent-safe: pymemcache looks up ``socket`` at call time, and Locust has monkey-patched it
by the time a user makes this client. Kestrel's ``monitor``/``confirm`` stream is not used:
the lab's consumer takes one message per get, which ``get q/open`` already is.
"""

from __future__ import annotations

from typing import Any

from pymemcache.exceptions import (MemcacheClientError, MemcacheServerError, MemcacheUnexpectedCloseError,
                                  MemcacheUnknownCommandError)

from lab.backends.kestrel.client import KestrelMemcacheClient
from loadgen.client import LoadClient, Refused, Targets, split_address

NODE, PORT = "kestrel", "memcache"
PORTS = (PORT,)  # a server node's ports the client uses
GET_WAIT_MS = 10  # how long the server holds an empty get; ``get_wait_ms`` in options overrides (0: none)
DEFAULT_TIMEOUT = 1.0  # seconds, when the options carry no ``timeout``


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

    def __exit__(self, kind, error, traceback) -> bool:
        if error is None or isinstance(error, MemcacheUnexpectedCloseError):
            return False  # a cut connection: the outcome is unknown
        for refusal, reply in _REPLIES:
            if isinstance(error, refusal):
                raise Refused(f"{self.what}: {reply}") from error
        return False


class KestrelLoadClient:
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


def make_client(targets: Targets, options: dict, reliable: bool, user: int) -> LoadClient:
    """A client of the ``kestrel`` node's ``memcache`` port (Kestrel has one server)."""
    try:
        address = targets[NODE][PORT]
    except KeyError:
        raise ValueError(f"kestrel's load client needs targets {{{NODE!r}: {{{PORT!r}: host:port}}}}, "
                         f"got {dict(targets)!r}") from None
    timeout = float(options.get("timeout") or DEFAULT_TIMEOUT)
    wait_ms = int(options.get("get_wait_ms", GET_WAIT_MS))
    return KestrelLoadClient(split_address(address), reliable, timeout, wait_ms)
