"""Primer embedded: a node in your own asyncio program, as the original is an OTP
application in your own Erlang release.

``primer_node(...)`` runs a ``PrimerNode`` on the caller's event loop — a live world of
one node, its peer port open to the other members, its files in ``data_dir`` — and, if
``port`` is given, serves the client API over HTTP there too::

    async with primer_node("n1", peer_port=9101, peers={"n2": ("127.0.0.1", 9102)},
                           data_dir="data/n1", replicas=2) as node:
        message_id = await node.put("jobs", b"hello")
        got = await node.get("jobs", wait=1.0)
        await node.ack("jobs", got.id, got.receipt)

Leaving the block stops the node cleanly (its ticks stop, its files are flushed) and
closes its ports.
"""

from __future__ import annotations

import os
import random
import tempfile
import weakref
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Mapping

from lab.backends.primer.core.config import NodeConfig
from lab.backends.primer.core.errors import PrimerError
from lab.backends.primer.core.primer_node import Got, LogRecord, PrimerNode
from lab.backends.primer.node import boot_primer, start_node
from lab.design.worlds import LiveWorld

__all__ = ["primer_node", "addresses", "PrimerNode", "NodeConfig", "Got", "LogRecord"]

#: each running embedded node's world: where its ports are
_worlds: weakref.WeakKeyDictionary[PrimerNode, tuple[LiveWorld, str]] = weakref.WeakKeyDictionary()


@asynccontextmanager
async def primer_node(name: str, *, peers: Mapping[str, tuple[str, int]] | None = None, peer_port: int = 0,
                      port: int | None = None, host: str = "127.0.0.1", data_dir: str | os.PathLike | None = None,
                      routes: Any = None, **settings: Any) -> AsyncIterator[PrimerNode]:
    """A started node called ``name``, on this event loop, for the ``async with`` block.

    ``peers``: the other members' peer addresses, ``{name: (host, port)}``; ``peer_port``:
    this node's (0: any free port, see ``addresses``); ``port``: serve the HTTP client API
    there too (None: no HTTP); ``data_dir``: the node's folder (None: a temporary one,
    removed afterwards); ``routes``: a ``lab.backends.primer.core.routing.Routes``;
    ``settings``: ``NodeConfig``'s other fields (``replicas=``, ``persistence="aof"``, ...).
    ValueError for bad settings, OSError for a port in use."""
    peers = dict(peers or {})
    try:
        config = NodeConfig(name, peers=tuple(peers), **settings)
    except PrimerError as e:  # a bad node name: a bad setting like any other
        raise ValueError(str(e)) from None
    temporary = None
    if data_dir is None:
        temporary = tempfile.TemporaryDirectory(prefix="primer-")
        data_dir = temporary.name
    folder = Path(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    bind = {"peer": (host, peer_port)}
    if port is not None:
        bind["http"] = (host, port)
    # ids and receipts are drawn from the node's random: every embedding process its own
    world = LiveWorld(seed=random.SystemRandom().randrange(1 << 63), root=folder, disk_roots={name: folder},
                      bind=bind)
    world.addresses.update(peers)
    nodes: list[PrimerNode] = []

    async def boot(rt: Any) -> None:
        nodes.append(await (start_node(rt, config, routes) if port is None else boot_primer(rt, config, routes)))

    rt = world.node(name)
    try:
        await world.start(name, boot)
        _worlds[nodes[0]] = (world, name)
        yield nodes[0]
    finally:
        try:
            if nodes:
                await nodes[0].stop()
        finally:
            await rt.close()
            await world.links.close()
            if temporary is not None:
                temporary.cleanup()


def addresses(node: PrimerNode) -> dict[str, tuple[str, int]]:
    """Where an embedded node listens: ``{"peer": (host, port)[, "http": (host, port)]}``."""
    world, name = _worlds[node]
    return {port: (world.bind[port][0], number) for (owner, port), number in world.listening.items()
            if owner == name}
