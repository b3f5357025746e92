"""Kestrel clients over the memcache protocol: pymemcache with Kestrel's queue verbs, and
the original's loosely ordered cluster (servers that never talk to each other; each
operation goes to a server picked at random).

A Kestrel ``get q/open`` answers ``VALUE q ...`` — the bare queue name, not the key sent —
which pymemcache would refuse; ``KestrelMemcacheClient`` maps the reply back to the key.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from pymemcache.client.base import Client


class KestrelMemcacheClient(Client):
    """A pymemcache client that speaks Kestrel's queue verbs."""

    def __init__(self, server: tuple[str, int], timeout: float = 5.0, **kw: Any):
        super().__init__(server, connect_timeout=timeout, timeout=timeout, no_delay=True, **kw)

    def _extract_value(self, expect_cas, line, buf, remapped_keys, prefixed_keys):  # type: ignore[override]
        # Kestrel names the queue in VALUE lines; the key sent carried /options too.
        remapped = dict(remapped_keys)
        for key, original in remapped_keys.items():
            remapped.setdefault(key.split(b"/", 1)[0], original)
        return super()._extract_value(expect_cas, line, buf, remapped, prefixed_keys)

    def put(self, queue: str, data: bytes, expiry: int = 0) -> bool:
        """``set``: True if STORED, False if NOT_STORED (full, too large, closed)."""
        return bool(self.set(queue, data, expire=expiry, noreply=False))

    def take(self, queue: str, timeout_ms: int = 0, open: bool = False, close: bool = False,
             peek: bool = False) -> bytes | None:
        """``get queue[/t=ms][/close][/open][/peek]``: the item, or None."""
        key = queue + (f"/t={timeout_ms}" if timeout_ms else "") + ("/close" if close else "") \
            + ("/open" if open else "") + ("/peek" if peek else "")
        return self.get(key)

    def confirm(self, queue: str) -> None:
        """Close (confirm) the oldest open read on ``queue``."""
        self.get(queue + "/close")

    def abort(self, queue: str) -> None:
        """Abort the oldest open read on ``queue``: the item goes back to the head."""
        self.get(queue + "/abort")


class KestrelCluster:
    """Servers that share nothing: each put or get goes to one picked at random.

    An open read is confirmed or aborted on the server that handed it out.
    """

    def __init__(self, servers: Sequence[tuple[str, int]], timeout: float = 5.0, seed: int | None = None):
        if not servers:
            raise ValueError("a cluster needs at least one server")
        self.clients = [KestrelMemcacheClient(s, timeout) for s in servers]
        self.random = random.Random(seed)
        self._open: dict[str, list[KestrelMemcacheClient]] = {}

    def _pick(self) -> KestrelMemcacheClient:
        return self.random.choice(self.clients)

    def put(self, queue: str, data: bytes, expiry: int = 0) -> bool:
        return self._pick().put(queue, data, expiry)

    def take(self, queue: str, timeout_ms: int = 0, open: bool = False) -> bytes | None:
        client = self._pick()
        item = client.take(queue, timeout_ms, open=open)
        if item is not None and open:
            self._open.setdefault(queue, []).append(client)
        return item

    def confirm(self, queue: str) -> None:
        self._open[queue].pop(0).confirm(queue)

    def abort(self, queue: str) -> None:
        self._open[queue].pop(0).abort(queue)

    def close(self) -> None:
        for client in self.clients:
            client.close()
