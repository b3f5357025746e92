"""What a design gives the load generator: a gevent-safe blocking client of its real wire
protocol (``LoadClient``), made by its module in ``loadgen/designs/`` from the addresses of
the servers under load.

Each design module ``loadgen/designs/<name>.py`` defines

    PORTS: tuple[str, ...]  # the named ports of a server node its client uses, the main one first
    RELEASES: bool = True   # optional: False when a consumer cannot hand a message back (a log)
    def make_client(targets: Targets, options: dict, reliable: bool, user: int[, batch: int]) -> LoadClient

(a design whose consumers can read several messages per request takes ``batch``, and is
only given it when it is more than 1), and optionally ``check(options, reliable, batch)``,
a ValueError for a load its client cannot make.

``targets`` maps each server node to its named ports' addresses (``{"n1": {"http":
"127.0.0.1:41234"}}``); ``options`` are the design's checked options (``lab backends``);
``user`` numbers the Locust user (a client may spread its users over the nodes). The
client raises ``Refused`` when the server definitely did not do the operation (a 4xx, a
memcache ``CLIENT_ERROR``/``NOT_STORED``) and anything else when the outcome is unknown (a
timeout, a cut connection, a 5xx), as the runner's clients do.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any, Mapping, Protocol

Targets = Mapping[str, Mapping[str, str]]


class Refused(Exception):
    """The server definitely did not do it: the sample's outcome is ``fail``."""


class LoadClient(Protocol):
    def put(self, queue: str, body: bytes) -> None: ...

    def get(self, queue: str) -> tuple[bytes, Any] | None:
        """A message's body and what ``ack``/``release`` need (None when it was taken for
        good, at most once); None when there is none now."""

    def ack(self, queue: str, token: Any) -> None: ...

    def release(self, queue: str, token: Any) -> None: ...

    def close(self) -> None: ...

    # optional: ``buffered(queue) -> int``, messages fetched and not yet handed out, which a
    # consumer hands out before it stops (Queuefka's prefetch)


def _design(backend: str) -> ModuleType:
    try:
        return importlib.import_module(f"loadgen.designs.{backend}")
    except ModuleNotFoundError:
        from pathlib import Path

        have = sorted(p.stem for p in (Path(__file__).parent / "designs").glob("*.py")
                      if p.stem not in ("__init__", "http"))
        raise ValueError(f"no load generator for {backend!r} (there is one for: {', '.join(have)})") from None


def client_factory(backend: str):
    """The design's ``make_client``; ValueError naming the designs that have one."""
    return _design(backend).make_client


def client_ports(backend: str) -> tuple[str, ...]:
    """The named ports of each server node the design's load client uses, the main one first."""
    return tuple(_design(backend).PORTS)


def releases(backend: str) -> bool:
    """Whether the design's consumers can hand a message back for another (``release``)."""
    return bool(getattr(_design(backend), "RELEASES", True))


def check_load(backend: str, options: dict[str, Any], reliable: bool, batch: int) -> None:
    """ValueError for a load the design's client cannot make, from its optional
    ``check(options, reliable, batch)``: asked before Locust starts, where it would fail
    each user on its own."""
    check = getattr(_design(backend), "check", None)
    if check is not None:
        check(options, reliable, batch)


def reads_in_batches(backend: str) -> bool:
    """Whether the design's consumers can read several messages per request (``batch``)."""
    return "batch" in inspect.signature(client_factory(backend)).parameters


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)
