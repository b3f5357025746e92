"""Peers: real brokers the lab did not write (Redis, RabbitMQ, NATS, beanstalkd, or a plug-in's),
driven beside the designs through the same ``Backend`` interface — the design API's room for
them.

A peer has no core and no sim world. The live world runs the broker's own binary as a
process of its own (``lab.worlds.live.external``), on ports it picks at the first start
(again if one was taken: ``Launch.port_taken``) and keeps across restarts, in a folder of
its own (``Place``): ``launch`` says how (``Launch``: the command, its environment, the
files to write first, the process that faults signal, how to tell it is ready, what to stop
after it). The broker's data dir sits on the live world's power-loss
file system where FUSE is available, so a ``crash`` drops what the broker wrote and never
fsynced, as a machine that loses power would; a ``kill`` (kill -9) keeps the page cache.

Clients are the broker's real client libraries, reaching it through the link's proxy
(``address``), so partitions cut them as they cut a design's. ``prepare`` (the runner's
"create the topics" step, as in OpenMessaging Benchmark's driver) declares the run's
queues; the file system is then checkpointed, so the broker's first-boot files are not
what a crash judges.
"""

from __future__ import annotations

import shutil
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Mapping, Sequence

from lab.design.backend import Backend
from lab.design.runtime import Boot, Runtime
from lab.design.world import BrokerWorld, ServerSpec


class MissingBinary(RuntimeError):
    """The broker's binary is not installed: one line naming the package that has it."""


@dataclass(frozen=True)
class Place:
    """Where one broker node lives: ``home`` (config, pid file, log; ``HOME`` for tools that
    want one), ``data`` (its data dir: on the power-loss file system when it is mounted) and
    the loopback ports the world picked for it, by the peer's names for them."""

    node: str
    home: Path
    data: Path
    ports: Mapping[str, int]


@dataclass(frozen=True)
class Launch:
    """How the live world runs a broker node (``Peer.launch``)."""

    argv: Sequence[str]
    #: is it ready? Called again and again (on a worker thread) until it says True
    ready: Callable[[], bool]
    env: Mapping[str, str] = field(default_factory=dict)  # added to the lab's environment
    #: files written (relative to ``Place.home``) before every start: configuration
    files: Mapping[str, str] = field(default_factory=dict)
    #: a file (relative to ``Place.home``) holding the pid that pause and kill signal — the
    #: broker's real process (``beam.smp``), not a wrapper script; None: the command's own
    pid_file: str | None = None
    #: commands run after the broker stops or dies, whatever way: what it left running
    #: (an Erlang port mapper)
    after_stop: Sequence[Sequence[str]] = ()
    #: seconds it may take to be ready (a restart replays its log first)
    start_timeout: float = 60.0
    #: what its log says (lower case) when a start failed because one of its ports was
    #: taken: the world then starts it again, on fresh ports if it never was ready
    port_taken: Sequence[str] = ("address already in use", "eaddrinuse")


class Peer(Backend):
    """A real broker as a design of the live world."""

    worlds: ClassVar[tuple[str, ...]] = ("live",)
    is_peer: ClassVar[bool] = True
    world: BrokerWorld  # the live world, whose broker verbs a peer's set-up and clients use
    #: the broker's binary and the Debian package that installs it (the one-line error)
    binary: ClassVar[str]
    package: ClassVar[str]
    #: the names of the ports it listens on; the first is where clients go
    ports: ClassVar[tuple[str, ...]] = ("main",)
    #: a broker is one node here: the name faults target
    node: ClassVar[str] = ""

    @property
    def server_nodes(self) -> list[str]:
        return [self.node or f"{self.name}-0"]

    def boot(self, node: str) -> Boot:
        async def refuse(rt: Runtime) -> None:
            raise TypeError(f"{self.name} is a real broker: it runs as its own process in the live world only")

        return refuse

    def server(self, node: str) -> ServerSpec:
        """The broker's node: its own binary, which the world runs (``launch`` says how)."""
        return ServerSpec(node, self.name, self.boot(node), cpu=False, external=self)

    @classmethod
    def executable(cls) -> str:
        """The binary's path; MissingBinary (naming the package) if it is not installed."""
        # /usr/sbin: Debian installs some servers there, and a user's PATH may lack it
        found = shutil.which(cls.binary) or next((str(p) for p in (Path("/usr/sbin") / cls.binary,) if p.exists()),
                                                 None)
        if found is None:
            raise MissingBinary(f"{cls.name}: {cls.binary} is not installed: apt-get install {cls.package} "
                                f"(or `make brokers`)")
        return str(found)

    @abstractmethod
    def launch(self, place: Place) -> Launch:
        """How to run node ``place.node`` with this peer's options."""

    async def start(self) -> None:
        self.executable()  # the one-line error before anything starts
        await super().start()

    async def prepare(self, queues: Sequence[str]) -> None:
        """Declare the run's queues (streams, consumer groups ...), then checkpoint the
        power-loss file system: what is on disk now counts as durable."""
        await self.declare(queues)
        for node in self.server_nodes:
            await self.world.checkpoint(node)

    async def declare(self, queues: Sequence[str]) -> None:
        """Create what the queues need on the broker (default: nothing; a client creates it)."""

    def address(self, rt: Runtime | None, port: str | None = None) -> tuple[str, int]:
        """Where a client on node ``rt`` reaches the broker's ``port`` (default: the first):
        through that link's proxy; with ``rt`` None, directly (set-up, not a client)."""
        return self.world.address(self.server_nodes[0], port or self.ports[0], None if rt is None else rt.node)

    @classmethod
    def version(cls) -> str:
        """The broker's version as its Debian package has it (``7.0.15-1~deb12u6``), or why
        it cannot be told; what ``lab backends`` and a run's manifest record."""
        import subprocess

        try:
            done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", cls.package], capture_output=True,
                                  text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"unknown ({e})"
        return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "not installed"
