"""What a `primary_backup` server node boots, in either world: the node (``core/queue.py``), which
answers its peer through ``rt.net.serve``, and its HTTP front on the node's ``http`` port. The
sim world runs it on a simulated node; ``lab serve primary_backup`` on a live one."""

from __future__ import annotations

from lab.design import Runtime
from primary_backup.core.queue import Node
from primary_backup.wire.http import accept_http

PORT = "http"  # the node's client port (the ready line and the clients name it)
NODES = ("a", "b")  # the two server nodes; "a" leads the first epoch


def peer_of(name: str) -> str:
    if name not in NODES:
        raise ValueError(f"node {name!r}: the nodes are {', '.join(NODES)}")
    return NODES[1 - NODES.index(name)]


async def boot_node(rt: Runtime, name: str, max_length: int = 0) -> Node:
    """Start node ``name`` on ``rt`` (joining: it asks its peer how things stand) and listen for HTTP."""
    node = Node(rt, name, peer_of(name), max_length)
    await node.start()
    await rt.net.listen(PORT, accept_http(node))
    return node
