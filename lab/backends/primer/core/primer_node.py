"""A Primer node: the façade the wire, the embedding program and the tests use.

It composes the node's rooms — membership and liveness (``membership``), the Plumtree
broadcast (``broadcast``), the replicated cluster metadata (``metadata``), the replicated
queues (``queues``) and the log queues (``logs``) — and answers the peers' messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.backends.primer.core.config import NodeConfig
from lab.runtime import Runtime


@dataclass(frozen=True)
class Got:
    """A message a get returned: ``receipt`` is what ack and release need (None: at-most-once,
    already deleted)."""

    id: str
    payload: bytes
    receipt: str | None


@dataclass(frozen=True)
class LogRecord:
    offset: int
    payload: bytes


class PrimerNode:
    """One member of a Primer cluster, on a Runtime."""

    def __init__(self, rt: Runtime, config: NodeConfig, routes: Any = None):
        """``routes``: a ``lab.backends.primer.core.routing.Routes`` applied to every put (None: none)."""
        raise NotImplementedError

    async def start(self) -> None:
        """Recover the node's files (persistence aof), answer peers, start the ticks."""

    async def put(self, queue: str, payload: bytes) -> str:
        """Store ``payload`` on W replicas (this node and W-1 live peers, shuffled); the new
        message's id once they all hold it. The routes may send it to another queue (or drop
        it: the id is returned all the same). BadRequest (a bad name), Unavailable (fewer than
        W members reachable, or a replica did not answer in time: the message may exist)."""

    async def get(self, queue: str, wait: float = 0.0, at_most_once: bool = False) -> Got | None:
        """The oldest message this node knows of in ``queue``, leased for ``config.lease``
        seconds (``at_most_once``: deleted at once); None if none came within ``wait`` s."""

    async def ack(self, queue: str, message_id: str, receipt: str) -> None:
        """Delete a leased message on its replicas and broadcast the ACK. BadRequest (a
        malformed receipt), NotFound (no such message known), Unavailable (no replica reachable)."""

    async def release(self, queue: str, message_id: str, receipt: str) -> None:
        """End a lease early: the message can be got again at once. Errors as ``ack``."""

    def backlog(self, queue: str) -> int:
        """Messages of ``queue`` this node knows of and has not seen acknowledged."""

    async def create_log(self, name: str, retention_s: float) -> bool:
        """Create log ``name`` (True), or find it made with the same retention (False).
        Conflict if it exists with another retention; BadRequest for a bad name or retention."""

    async def append(self, name: str, payload: bytes) -> int:
        """Append to the log's current range along its chain; the record's offset once the
        chain's tail holds it. NotFound (no such log), Unavailable (the chain is cut)."""

    async def read(self, name: str, group: str, max_records: int) -> list[LogRecord]:
        """The group's next records on this node, up to the high watermark (what every replica
        of the chain holds), at most ``max_records``."""

    async def checkpoint(self, name: str, group: str, offset: int) -> None:
        """Record that ``group`` has processed the log up to ``offset`` (replicated metadata:
        the highest checkpoint wins). BadRequest for an offset beyond the high watermark."""

    def cluster(self) -> dict[str, Any]:
        """The node's view, for ``GET /cluster``: ``{"node", "members": [{"name", "state",
        "last_seen_s"}], "queues": {name: backlog}, "logs": {name: {...}}, "routes": [...]}``;
        a member's state is ``self``, ``up`` or ``down``."""

    async def stop(self) -> None:
        """Stop the ticks and flush the files (a clean stop)."""
