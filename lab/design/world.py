"""The world a run is driven on, as the runner and a design see it: the ``World`` protocol
with every capability declared, and the ``ServerSpec`` a design hands a world to start one
of its server nodes.

Both worlds (``models.world.SimWorld``, ``lab.worlds.live.LiveWorld``) implement every
member, the sim world's being no-ops where it has nothing to do (no server restarts in
another process, no logs to keep): so the runner asks a world, never whether it has a
member. A world never calls back into a design: what it needs of a server node comes down
to it in the node's ``ServerSpec``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol, Sequence, TypeVar, runtime_checkable

from lab.design.runtime import Boot, Runtime

T = TypeVar("T")

#: where a server node reaches server node ``peer``'s port ``port``, as HOST:PORT
Reach = Callable[[str, str], str]


@dataclass(frozen=True)
class ServerSpec:
    """One server node of a design, as a world starts it (``Backend.server`` makes it)."""

    node: str
    design: str  # the design's name: ``lab serve NAME`` in the live world
    boot: Boot  # what the node runs on a node of the runner's process (the sim world; live without ``serve``)
    #: its requests cost CPU time in the sim world (``models.cpu``); False for a node that
    #: stands for something the sim models otherwise (a simulated store)
    cpu: bool = True
    #: live: the flags of ``lab serve NAME`` for this node over its data dir, given where it
    #: reaches its peers; None: the design has no server entry and boots in the runner's process
    serve_args: Callable[[Path, Reach], list[str]] | None = None
    #: live: a real broker's own binary (a ``lab.design.peer.Peer``), run by the world
    external: Any = None


class Targeted(Protocol):
    """What a world reads of a fault it is asked about (a ``lab.workloads`` Fault): read-only,
    so a Fault's class-wide kind and its tuple of targets fill it in."""

    @property
    def kind(self) -> str: ...
    @property
    def target(self) -> Sequence[str]: ...
    @property
    def hits_process(self) -> bool: ...  # it strikes a node's process (pause, crash ...), not only its links


@runtime_checkable
class World(Protocol):
    """A set of nodes sharing one clock: what the runner drives."""

    kind: str  # "sim" or "live"
    seed: int

    def node(self, name: str) -> Runtime: ...
    async def start(self, name: str, boot: Boot) -> Runtime: ...
    async def start_server(self, server: ServerSpec) -> None:
        """Start a design's server node: its boot here, or its ``lab serve`` (or a broker's
        binary) as a process of its own; return once it is ready."""
    async def stop_server(self, node: str) -> None: ...
    def run(self, main: Callable[[Runtime], Awaitable[T]]) -> T: ...

    # ---- what the runner asks of a world, declared
    @classmethod
    def refusal(cls, fault: Targeted) -> str | None:
        """Why this world cannot apply ``fault`` whatever the design (one line), or None."""
    async def settle(self) -> None:
        """After the faults are healed: wait until servers still restarting are ready."""
    @property
    def restarts(self) -> Sequence[tuple[str, int, int | None]]:
        """Each restart after a crash: (node, launched, ready or None), on the nodes' clock."""
    def keep_logs(self, folder: Path) -> None:
        """Copy each server process's log into ``folder`` when the world ends."""
    def recorded(self) -> dict[str, Any]:
        """What a run's manifest records of the world itself (the sim: the network's counts)."""


class BrokerWorld(World, Protocol):
    """The live world as a real broker's driver (``lab.design.peer``) uses it."""

    async def checkpoint(self, node: str) -> None:
        """What server ``node`` has written so far counts as durable (its set-up done)."""
    def address(self, node: str, port: str, source: str | None = None) -> tuple[str, int]:
        """Where a client on node ``source`` (None: directly) reaches ``node``'s ``port``."""
