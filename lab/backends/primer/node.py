"""What a Primer node boots, in either world: the node (which answers its peers through
``rt.net.serve``) and its client API on the node's ``http`` port (``lab.design.http``).
The sim world runs it on a simulated node; ``lab serve primer`` and the embedded node on
a live one."""

from __future__ import annotations

from typing import Any

from lab.backends.primer.core.config import NodeConfig
from lab.backends.primer.core.primer_node import PrimerNode
from lab.backends.primer.wire.api import api_router
from lab.design import Runtime
from lab.design import HttpServerConnection

HEADER_TIMEOUT = 10.0
MAX_BODY = 8 * 1024 * 1024  # one message or log record


async def start_node(rt: Runtime, config: NodeConfig, routes: Any = None) -> PrimerNode:
    """The node, started: its files recovered, answering its peers, its ticks running."""
    node = PrimerNode(rt, config, routes)
    await node.start()
    return node


async def boot_primer(rt: Runtime, config: NodeConfig, routes: Any = None, *, max_body: int = MAX_BODY,
                      header_timeout: float = HEADER_TIMEOUT) -> PrimerNode:
    """Start the node, then serve its client API on the ``http`` port; ``routes``: a
    ``lab.backends.primer.core.routing.Routes`` applied to every put (None: none)."""
    node = await start_node(rt, config, routes)
    router = api_router(node)
    await rt.net.listen("http", lambda: HttpServerConnection(router, max_body=max_body,
                                                             header_timeout=header_timeout))
    return node
