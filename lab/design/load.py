"""The design API's room for Locust (``lab load``): what a design's load client is, and the
pieces the lab lends it. A design author imports ``from lab.design.load import ...``; the
package ``lab.design`` does not import this module, so that a process that never runs Locust
never loads gevent's client on the way.

A design that can be put under load has a module ``load.py`` in its package
(``lab/backends/<name>/load.py`` for the lab's own; ``<package>/load.py`` for a plug-in,
declared in its Backend's ``parts`` and imported through the registry as
``design_module(name, "load")``). Everything the lab reads from it is one declaration, the
module's ``LOAD``:

    LOAD = LoadPart(ports=("http",), make_client=make_client)  # releases=True, batches=False, check=None
    def make_client(targets: Targets, options: dict, reliable: bool, user: int[, batch: int]) -> LoadClient

``ports`` are the named ports of a server node its client uses, the main one first;
``releases`` False when a consumer cannot hand a message back (a log); ``batches`` True when
its consumers can read several messages per request — then ``make_client`` takes ``batch``,
and is only given it when it is more than 1; ``check(options, reliable, batch)``, a
ValueError for a load its client cannot make (asked before Locust starts, where it would fail
each user on its own).

``targets`` maps each server node to its named ports' addresses (``{"n1": {"http":
"127.0.0.1:41234"}}``); ``options`` are the design's checked options (``lab backends``);
``user`` numbers the Locust user (a client may spread its users over the nodes). The client
subclasses ``LoadClient`` and must be gevent-safe (Locust has monkey-patched the standard library by the time a user makes
one). It raises ``Refused`` when the server definitely did not do the operation (a 4xx, a
memcache ``CLIENT_ERROR``/``NOT_STORED``) and anything else when the outcome is unknown (a
timeout, a cut connection, a 5xx), as the runner's clients do.

``Http`` is the HTTP designs' shared piece: one keep-alive geventhttpclient connection and
the lab's reading of a status.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from geventhttpclient import HTTPClient

__all__ = ["Http", "LoadClient", "LoadPart", "Refused", "Targets", "split_address", "target"]

#: each server node's named ports and their ``host:port`` addresses
Targets = Mapping[str, Mapping[str, str]]


class Refused(Exception):
    """The server definitely did not do it: the sample's outcome is ``fail``."""


# A base class rather than a Protocol: ``buffered`` is optional for a design (most clients
# hold nothing between gets), so its default lives here once, and the load generator calls
# it on every client without asking whether it exists; and a client that misses one of the
# verbs fails when it is made (an abstract method), not in the middle of a load.
class LoadClient(ABC):
    """A gevent-safe blocking client of a design's real wire protocol, one per Locust user."""

    @abstractmethod
    def put(self, queue: str, body: bytes) -> None: ...

    @abstractmethod
    def get(self, queue: str) -> tuple[bytes, Any] | None:
        """A message's body and what ``ack``/``release`` need (None when it was taken for
        good, at most once); None when there is none now."""

    @abstractmethod
    def ack(self, queue: str, token: Any) -> None: ...

    @abstractmethod
    def release(self, queue: str, token: Any) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    def buffered(self, queue: str) -> int:
        """Messages of ``queue`` fetched and not yet handed out, which a consumer hands out
        before it stops (a log's group commit would skip them for good: Queuefka's prefetch,
        Kestrel's monitor); none unless the client buffers."""
        return 0


@dataclass(frozen=True)
class LoadPart:
    """What a design's load module declares (``LOAD = LoadPart(...)``): all the lab reads
    from it."""

    #: the named ports of a server node the client uses, the main one first
    ports: tuple[str, ...]
    #: ``make_client(targets, options, reliable, user[, batch]) -> LoadClient``, one per Locust user
    make_client: Callable[..., LoadClient]
    #: whether a consumer can hand a message back for another (False for a log)
    releases: bool = True
    #: whether consumers can read several messages per request: then ``make_client`` takes
    #: ``batch`` (given only when it is more than 1)
    batches: bool = False
    #: ``check(options, reliable, batch)``: ValueError for a load the client cannot make
    check: Callable[[Mapping[str, Any], bool, int], None] | None = None

    def __post_init__(self) -> None:
        # the lab starts each server node's ports from this tuple: a string would be its letters
        if isinstance(self.ports, str) or not self.ports or not all(isinstance(p, str) for p in self.ports):
            raise ValueError(f"a LoadPart's ports are a non-empty tuple of port names, got {self.ports!r}")


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` as ``(host, port)``."""
    host, _, port = address.rpartition(":")
    return host, int(port)


def target(targets: Targets, node: str, port: str, design: str) -> tuple[str, int]:
    """Where node ``node``'s ``port`` is, as ``(host, port)``: a design with one server node
    reads it thus; ValueError, naming what it needs, when ``targets`` lacks it."""
    try:
        return split_address(targets[node][port])
    except KeyError:
        raise ValueError(f"{design}'s load client needs targets {{{node!r}: {{{port!r}: host:port}}}}, "
                         f"got {dict(targets)!r}") from None


class Http:
    """One keep-alive HTTP connection (geventhttpclient, gevent-safe): a 2xx is done, a 4xx a
    refusal (``Refused``), a 5xx or anything unexpected an unknown outcome, as the runner's
    HTTP clients say. ``wait`` is how long the server may hold a request (a long poll), added
    to the read timeout."""

    def __init__(self, address: str, timeout: float, wait: float = 0.0):
        self.address, self.timeout, self.wait = address, timeout, wait
        self.client = self._connect()

    def _connect(self) -> HTTPClient:
        # imported here: only a Locust user makes one, and gevent stays out of other processes
        from geventhttpclient import HTTPClient

        host, port = split_address(self.address)
        return HTTPClient(host, port, connection_timeout=self.timeout, network_timeout=self.timeout + self.wait,
                          concurrency=1)

    def call(self, method: str, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None,
             ok_statuses: tuple[int, ...] = ()) -> tuple[int, bytes]:
        """``(status, body)`` of a 2xx (or of a status in ``ok_statuses``); else Refused or RuntimeError."""
        try:
            response = self.client.request(method, path, body=body, headers=dict(headers or {}))
            data = response.read()
        except BaseException as e:
            if not isinstance(e, Exception):
                # interrupted (Locust stopping the user): the one connection is mid-reply and
                # never goes back to the pool, so a later request would wait for it forever
                self.client.close()
                self.client = self._connect()
            raise
        status = response.status_code
        if 200 <= status < 300 or status in ok_statuses:
            return status, data
        if 400 <= status < 500:
            raise Refused(f"{method} {path}: {status} {data[:200]!r}")
        raise RuntimeError(f"{method} {path}: HTTP {status} {data[:200]!r}")

    def close(self) -> None:
        self.client.close()
