"""The narrow driver interface every design implements: ``Backend`` and ``QueueClient``.

In the spirit of OpenMessaging Benchmark's driver API: a ``Backend`` names the design's
server nodes, says what a node boots, and hands out ``QueueClient``s; a client can put,
get, ack and release — nothing else. Each design's folder holds its core (no I/O: only
the Runtime), its wire (sans-IO), its servers and this adapter.

A design never asks which world it is in: it describes each server node (``server``: a
``lab.design.world.ServerSpec``) and the world starts it (the boot on a simulated node, or
``lab serve NAME`` as a process of its own when live); a client finds its server through the
Runtime's network (``rt.net.connect(node, port)``: simulated links, or TCP through the
link's proxy). A design's further parts — its server entry, load client, planted bugs,
benchmark, tools, cluster command — are declared in one place, ``Backend.parts``. What is
not driving is declared beside the driver, each in a record with one job: ``about``
(``About``: how people see it), ``promised`` (``Promised``: what the judge holds it to, kept
in the design's own ``promises.py``) and ``cpu`` (``Cpu``: what its requests cost in the sim).

How a client reports outcomes, which the runner turns into sample outcomes:
returning is ``ok``; raising ``Rejected`` or ``Unreachable`` (or ``RemoteError``) is a
definite ``fail``; any other exception — ``CallTimeout`` and ``ConnectionLost`` above
all — is ``info``: the operation may or may not have happened. ``InternalError`` is ``info``
too, and more: the server said its own code raised, which the judge holds a broken promise
whatever the run's faults. An HTTP client turns a reply into these with ``http_body``.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

from lab.design.about import About
from lab.design.http import INTERNAL_ERROR
from lab.design.options import TIMEOUT, Checked, Option, check
from lab.design.promises import Promised, Promises
from lab.design.runtime import Boot, RemoteError, Runtime, Unreachable
from lab.design.service import Cpu
from lab.design.world import Reach, ServerSpec, World


#: what an older Backend declared on itself, and where it is declared now
MOVED = {"summary": "about = About(summary, colour=...)", "colour": "about = About(summary, colour=...)",
         "promises": "promised = Promised(rule, option_sets=...)",
         "promise_options": "promised = Promised(rule, option_sets=...)",
         "cpu_nodes": "cpu = Cpu(free=(nodes that cost no CPU,))",
         "calibration_path": "cpu = Cpu(calibration=file name)", "service_model": "a Cpu subclass's model"}


class UnknownBackend(ValueError):
    """No usable design by that name (never installed, or installed and refused: the message
    says which, and why), or one asked for in a world it does not run in."""


class Rejected(Exception):
    """The backend definitely refused the operation (full queue, bad request, ...)."""


class InternalError(RuntimeError):
    """The server answered that its own code raised while serving the request (the HTTP
    router's 500 ``internal error``): the outcome is unknown, and the design has a bug — its
    code must answer every request it takes, under faults too."""


def http_body(status: int, body: bytes, what: str) -> bytes:
    """The body of a 2xx reply to request ``what``; else raises what the runner classifies:
    ``Rejected`` for a 4xx (a definite refusal), ``InternalError`` for the router's 500
    ``internal error``, a ``RuntimeError`` (outcome unknown: a 503 from a server whose replica
    did not answer, say) for any other status."""
    if 200 <= status < 300:
        return body
    text = body[:200].decode(errors="replace")
    if 400 <= status < 500:
        raise Rejected(f"{what}: {status} {text}")
    if status == 500 and INTERNAL_ERROR in text:
        raise InternalError(f"{what}: HTTP 500 {text}")
    raise RuntimeError(f"{what}: HTTP {status} {text}")


def outcome_of(error: BaseException) -> str:
    """A client's exception as a sample outcome: ``fail`` when the operation certainly did
    not happen (``Unreachable``: never sent), ``info`` when it may have (``CallTimeout``,
    ``ConnectionLost``: sent, no whole reply)."""
    return "fail" if isinstance(error, (Rejected, Unreachable, RemoteError)) else "info"


@dataclass(frozen=True)
class Delivery:
    """A message a consumer got; ``token`` is what ack/release need (None if auto-acked)."""

    queue: str
    body: bytes
    token: Any = None


@dataclass(frozen=True)
class Parts:
    """A design's parts beyond its Backend, each the dotted name of a module (imported only
    when a command needs it), as pytest declares a plug-in's hooks: declared, never found by
    a module's name.

    - ``serve``: ``lab serve NAME``, its server as a process of its own (``serve(args)``,
      ``add_arguments(parser)``, ``PORTS``); without it the live world boots the design in
      the runner's process, and applies no process fault to it;
    - ``load``: its Locust client for ``lab load``: a module that declares ``LOAD =
      LoadPart(...)`` (``lab.design.load``);
    - ``mutants``: its planted bugs for ``lab mutants`` (``MUTANTS``);
    - ``bench``: ``lab bench NAME`` (``add_arguments``, ``run(args)``);
    - ``tools``: ``lab NAME TOOL ...`` (``add_arguments``, ``run(args)``);
    - ``cluster``: ``lab cluster NAME``, its servers on several machines (``run(args)``).
    """

    serve: str | None = None
    load: str | None = None
    mutants: str | None = None
    bench: str | None = None
    tools: str | None = None
    cluster: str | None = None

    def module(self, part: str) -> str | None:
        """The module declared for ``part`` (one of ``PARTS``); None if the design has none."""
        if part not in PARTS:
            raise ValueError(f"no part {part!r} (the parts are {', '.join(PARTS)})")
        module: str | None = asdict(self)[part]  # every field of Parts is a module name or None
        return module

    def declared(self) -> dict[str, str]:
        return {part: module for part, module in asdict(self).items() if module is not None}


PARTS = tuple(f.name for f in fields(Parts))


class QueueClient(ABC):
    """One producer's or consumer's connection to the design."""

    @abstractmethod
    async def put(self, queue: str, body: bytes) -> None: ...

    @abstractmethod
    async def get(self, queue: str, wait: float) -> Delivery | None:
        """The next message, waiting up to ``wait`` seconds; None if there is none."""

    async def ack(self, delivery: Delivery) -> None:
        raise Rejected(f"{type(self).__name__} has no reliable reads")

    async def release(self, delivery: Delivery) -> None:
        raise Rejected(f"{type(self).__name__} has no reliable reads")

    async def backlog(self, queue: str) -> int | None:
        """How many messages ``queue`` still holds, for the end of a run's drain; None if the
        design cannot say (then an empty get means an empty queue). A design whose empty get
        does not mean empty (messages leased to a client that is gone, or not yet visible)
        says so here."""
        return None

    async def close(self) -> None:  # noqa: B027 (a default hook: a client with nothing to close keeps it)
        pass


class Backend(ABC):
    """A design's driver, started in a world: its server nodes, what each boots, and a
    factory of clients. What it promises, how it is shown and what its requests cost in the
    sim are declared beside it, each in a record of its own: ``promised``, ``about``, ``cpu``."""

    name: ClassVar[str]
    #: how people see it: ``lab backends``' line and the charts' colour (``lab.design.About``)
    about: ClassVar[About]
    #: what it promises, and the option sets that change it (``lab.design.Promised``)
    promised: ClassVar[Promised] = Promised()
    #: what its requests cost in the sim world (``lab.design.Cpu``)
    cpu: ClassVar[Cpu] = Cpu()
    worlds: ClassVar[tuple[str, ...]] = ("sim", "live")
    #: its further parts (``Parts``): server entry, load client, planted bugs, benchmark, tools, cluster
    parts: ClassVar[Parts] = Parts()
    #: a real broker's own binary rather than a design of the lab's (``lab.design.peer.Peer``)
    is_peer: ClassVar[bool] = False
    #: the options this design takes (``lab run --option KEY=VALUE``), typed and ranged
    options_declared: ClassVar[tuple[Option, ...]] = (TIMEOUT,)
    #: the longest the design's own recovery may take before every acknowledged message is
    #: deliverable again — a lease that runs out, a repair pass — in seconds, with these
    #: options (set it in ``__init__`` where they change it). A message waiting for it may be
    #: invisible to a get and to ``QueueClient.backlog`` alike, so the runner's final drain
    #: ends, empty or not, only after this long without a delivery.
    recovery_s: float = 0.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        moved = [f"{old} (now {new})" for old, new in MOVED.items() if old in cls.__dict__]
        if moved:
            # an older plug-in: one error naming each change, raised as its module is imported
            raise TypeError(f"{cls.__qualname__}: declare these apart from the driver: {'; '.join(moved)} "
                            f"(docs/your-own-design.md)")
        if "name" in cls.__dict__ and not hasattr(cls, "about"):
            raise TypeError(f"{cls.__qualname__}: design {cls.name!r} declares no about = About(summary, colour=...)")
        # a design of its own name built on another inherits none of its parts: a part runs
        # under the name it was written for (the parent's `lab serve` starts the parent); a
        # subclass that keeps the name (a variant, a test's spy) is still that design
        if "name" in cls.__dict__ and "parts" not in cls.__dict__:
            cls.parts = Parts()

    def __init__(self, world: World, options: Mapping[str, Any] | None = None):
        if world.kind not in self.worlds:
            raise UnknownBackend(f"backend {self.name!r} does not run in the {world.kind} world (it runs in: "
                                 f"{', '.join(self.worlds)})")
        self.world = world
        # options a run checked at its door (``Checked``) are not checked again
        self.options = options if isinstance(options, Checked) else self.check_options(options, world.kind)

    @classmethod
    def check_options(cls, options: Mapping[str, Any] | None, world: str | None = None) -> Checked:
        """``options`` parsed, with defaults filled in (``world``'s own, where an option has
        one); BadOption names the first key this design lacks or the first value it cannot
        take (in ``world``), and what it allows."""
        return check(cls.name, cls.options_declared, options, world)

    @classmethod
    def promises(cls, options: Mapping[str, Any], reliable: bool) -> Promises:
        """What the design promises under ``options`` (checked) with reliable reads or plain
        gets: its ``promised`` rule, or Jepsen's total-queue rule where it declares none."""
        return cls.promised.under(options, reliable, cls.name)

    @property
    @abstractmethod
    def server_nodes(self) -> list[str]:
        """The names of the nodes this design runs on (fault targets)."""

    @abstractmethod
    def boot(self, node: str) -> Boot:
        """What server node ``node`` runs when it (re)starts on a node of this process (the
        sim world; the live world when the design has no ``lab serve``)."""

    def server(self, node: str) -> ServerSpec:
        """Server node ``node`` as a world starts it: its boot, whether it costs CPU time in
        the sim, and, live, the flags of its ``lab serve`` (when the design declares one)."""
        serve = partial(self.serve_args, node) if self.parts.serve is not None else None
        return ServerSpec(node, self.name, self.boot(node), node not in self.cpu.free, serve)

    def serve_args(self, node: str, data_dir: Path, reach: Reach) -> list[str]:
        """The flags of ``lab serve NAME`` that give node ``node`` these options (the live
        world runs it as a process over ``data_dir``). ``reach(peer, port)`` is where this
        server node reaches server node ``peer``'s port ``port``, as HOST:PORT (live: a proxy
        of the link, which faults cut; ``peer`` may not have started yet), for a design whose
        servers call each other (``--peers b=127.0.0.1:41234``)."""
        return []

    async def start(self) -> None:
        for node in self.server_nodes:
            await self.world.start_server(self.server(node))

    async def prepare(self, queues: Sequence[str]) -> None:  # noqa: B027 (a default hook, empty on purpose)
        """Create what the run's ``queues`` need before the load begins (OpenMessaging
        Benchmark's "create the topics"); a design whose queues appear on first use needs
        nothing here."""

    def for_consumer(self, own: Mapping[str, Any]) -> "Backend":
        """This design as one consumer with settings of its own sees it (``own``: values of
        options declared ``per_consumer``, checked by the run): the same servers, and
        ``options`` with ``own`` over them, which ``client`` reads."""
        view = copy.copy(self)
        view.options = self.check_options({**self.options, **own}, self.world.kind)
        return view

    @abstractmethod
    def client(self, rt: Runtime, reliable: bool) -> QueueClient:
        """A client on node ``rt``; ``reliable``: gets open a message that ack/release close."""

    async def stop(self) -> None:
        """Stop the server nodes cleanly (a live server fsyncs and closes its files)."""
        for node in self.server_nodes:
            await self.world.stop_server(node)
