"""What the sim world's lower rooms read of the node and the world they run in.

A node's disk (``models.disk``), its network port and the network (``models.network``) and
its byte streams (``models.streams``) are written against these protocols, and the
runtime and the world (``models.runtime``, ``models.world``) fill them in, so arrows go one
way: world → runtime → network → streams → host. Each protocol lists only what those rooms
read; a member they read and never set is a read-only property, so the world's own types
(a ``SimNetPort`` for a ``NetPort``) fill it in.
"""

from __future__ import annotations

from typing import Any, Coroutine, Mapping, Protocol

import simpy

from lab.design.runtime import Handler
from models.cpu import NodeCpu
from models.latency import LatencyModel
from models.tasks import Deadlines, SimTask


class NodeRuntime(Protocol):
    """One incarnation of a node (``models.runtime.SimRuntime``)."""

    node: str  # the node's name
    incarnation: int
    alive: bool  # False once this incarnation crashed: its disk and sends are refused
    env: simpy.Environment
    cpu: NodeCpu | None  # the node's CPU (None: no CPU model)

    @property
    def net(self) -> NetPort: ...  # read-only here: a runtime's own port type fills it in

    def start(self, coro: Coroutine, name: str = "") -> SimTask | None:
        """Run ``coro`` at once up to its first wait (a message's arrival); the task that
        drives the rest, or None if it finished."""
        ...


class NetPort(Protocol):
    """A node incarnation's network port (``models.network.SimNetPort``), as the network
    delivers to it and a stream connection sends through it."""

    rt: NodeRuntime
    handler: Handler | None
    pending: dict[int, Any]  # request id -> the SimPy event its reply succeeds
    connections: dict[str, Any]  # this node's open client connections (``models.streams.SimConnection``)

    @property
    def network(self) -> Network: ...

    @property
    def streams(self) -> Listeners: ...

    def answer(self, handler: Handler, source: str, kind: str, request_id: int, payload: Any) -> Coroutine:
        ...

    def send(self, peer: str, message: Any, reliable: bool = False) -> None:
        ...

    def stream(self, peer: str, frame: Any, reliable: bool = False) -> None:
        ...

    def new_connection_id(self) -> str:
        ...

    def reply_work(self) -> Coroutine[Any, Any, None] | None:
        ...


class Listeners(Protocol):
    """The ports a node listens on (``models.streams.SimListeners``), as the network hands them frames."""

    def accepts(self, message: Any) -> bool:
        ...

    def arrived(self, message: Any) -> None:
        ...

    def waiting(self, message: Any, task: SimTask) -> None:
        ...

    async def handle(self, source: str, message: Any) -> None:
        ...


class Network(Protocol):
    """All links of the world (``models.network.SimNetwork``), as a stream connection reads it."""

    world: SimHost

    def transmit(self, source: NodeRuntime, destination: str, kind: str, request_id: int, payload: Any,
                 reliable: int = 0) -> None:
        ...


class HostNode(Protocol):
    """A node across its incarnations (``models.world.SimNode``), as the network delivers to it."""

    up: bool

    @property
    def runtime(self) -> NodeRuntime: ...


class SimHost(Protocol):
    """The world (``models.world.SimWorld``), as the network and a node's port read it."""

    env: simpy.Environment
    deadlines: Deadlines  # the timeouts of calls and exchanges
    client_cpu: NodeCpu | None  # the load generator's process (latency: calibrated)
    server_names: set[str]  # nodes started as a design's servers; the rest are clients

    @property
    def nodes(self) -> Mapping[str, HostNode]: ...


class NetConfig(Protocol):
    """The network's part of the world's parameters (``models.config.SimConfig``)."""

    latency: LatencyModel
    loss: float
    fifo_links: bool
