"""Fault kinds as registered classes: each parses its own schedule entry, picks the nodes
(and links) it hits from the run's seed, and breaks a world in a way its heal undoes.

A workload's ``faults`` is a list of entries. Every entry has

    fault: partition        # the kind: pause, crash, partition, link-delay, loss, disk-delay
    at: 1.0                 # seconds from the start of the run
    duration: 0.5           # seconds until it heals
    target: servers         # whom it hits (below): one target or a list of them

and the fields of its kind (a field another kind uses is refused, by name):

    pause        stop the world on the targets (a GC pause): none of their code runs,
                 messages to them wait
    crash        the targets' machines crash (kill -9, and what was not fsynced is lost); they restart on the same disk when it heals
      tear: false           a random prefix of each file's unsynced tail survives
    partition    cut links (Jepsen's grudges)
      shape: isolate        the targets from every other node (the default), or one of
                            Jepsen's shapes over the targets:
        one                 one target from the other targets
        minority            a random minority of the targets ((n-1)//2) from the rest
        majority, halves    the targets in two random halves (the smaller one first)
        majorities-ring     every target still sees a majority, no two the same one
        bridge              two halves, and one target that talks to both
        clients             every client from every server (takes no target)
      mode: isolate         both ways; one-way-in / one-way-out: only the messages into /
                            out of the cut-off side (shapes with one: isolate, one,
                            minority, majority, halves, clients)
      flap: 0               seconds: the cut switches off and on every ``flap`` seconds
                            while the fault lasts (0: it holds)
    link-delay   every message on a link to or from a target takes longer
      ms: 50                added delay (required, > 0)
      jitter_ms: 0          plus a uniform 0..jitter_ms more, per message
    loss         drop each message on a link to or from a target
      p: 0.1                with this probability (required, in (0, 1])
    disk-delay   every fsync on the targets takes longer (delayed writes)
      ms: 20                added to each fsync (required, > 0)

Targets are functions of the run's nodes: ``servers``, ``server`` (one server),
``clients``, ``all`` (servers and clients), ``one`` (one of all), ``minority`` /
``majority`` (a random minority / majority of all), or node names (``s0``, ``p1``).
Every random pick is drawn from the run's seed and the fault's number: the same seed
gives the same nodes, and adding a fault does not move the others.

Each world names the kinds it applies (``fault_kinds``: the sim world all of them); a
kind the chosen world cannot apply is refused before the run starts. Faults compose:
two overlapping partitions each mend only the links they cut, two pauses of one node
end when both have.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Protocol

from lab.runtime import Runtime

#: Undoes exactly what one fault did.
Heal = Callable[[], None]
Link = tuple[str, str]

ROLE_TARGETS = ("servers", "server", "clients", "all", "one", "minority", "majority")
SHAPES = ("isolate", "one", "minority", "majority", "halves", "majorities-ring", "bridge", "clients")
SIDED_SHAPES = ("isolate", "one", "minority", "majority", "halves", "clients")
MODES = ("isolate", "one-way-in", "one-way-out")
COMMON_FIELDS = ("fault", "at", "duration", "target")


class FieldError(ValueError):
    """A schedule entry's field that cannot be used: ``field`` names it, ``problem`` says why."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field, self.problem = field, problem


class FaultWorld(Protocol):
    """The verbs a world offers faults (``models.world.SimWorld`` has them all). Each has
    its undo, and undoing one of two overlapping faults leaves the other in force."""

    fault_kinds: tuple[str, ...]

    def pause(self, node: str) -> None: ...
    def resume(self, node: str) -> None: ...
    def crash(self, node: str, tear: bool = False) -> None: ...
    def restart(self, node: str) -> Any: ...
    def is_up(self, node: str) -> bool: ...
    def block(self, source: str, destination: str) -> None: ...
    def unblock(self, source: str, destination: str) -> None: ...
    def add_loss(self, source: str, destination: str, p: float) -> None: ...
    def remove_loss(self, source: str, destination: str, p: float) -> None: ...
    def add_delay(self, source: str, destination: str, extra_ns: int, jitter_ns: int = 0) -> None: ...
    def remove_delay(self, source: str, destination: str, extra_ns: int, jitter_ns: int = 0) -> None: ...
    def add_fsync_delay(self, node: str, ns: int) -> None: ...
    def remove_fsync_delay(self, node: str, ns: int) -> None: ...


@dataclass(frozen=True)
class Cast:
    """The nodes of a run a fault may hit, by role."""

    servers: tuple[str, ...]
    clients: tuple[str, ...] = ()

    @property
    def all(self) -> tuple[str, ...]:
        return self.servers + self.clients

    def resolve(self, targets: Iterable[str], rng: random.Random) -> list[str]:
        """The nodes ``targets`` name, in a stable order (random picks from ``rng``)."""
        nodes: list[str] = []
        everyone = list(self.all)
        for target in targets:
            if target == "servers":
                nodes += self.servers
            elif target == "server":
                nodes.append(rng.choice(self.servers))
            elif target == "clients":
                nodes += self.clients
            elif target == "all":
                nodes += everyone
            elif target == "one":
                nodes.append(rng.choice(everyone))
            elif target == "minority":
                nodes += rng.sample(everyone, (len(everyone) - 1) // 2)
            elif target == "majority":
                nodes += rng.sample(everyone, len(everyone) // 2 + 1)
            elif target in everyone:
                nodes.append(target)
            else:
                known = ", ".join([*ROLE_TARGETS, *everyone])
                raise FieldError("target", f"fault target {target!r} is not a node of this run (known: {known})")
        return list(dict.fromkeys(nodes))


@dataclass(frozen=True)
class Placement:
    """Whom one fault hits in one run: its nodes, the links it acts on, and a line for the history."""

    nodes: tuple[str, ...]
    links: tuple[Link, ...] = ()
    detail: str = ""


REGISTRY: dict[str, type["Fault"]] = {}


def register(cls: type["Fault"]) -> type["Fault"]:
    REGISTRY[cls.kind] = cls
    return cls


@dataclass(frozen=True)
class Fault:
    """One schedule entry. A kind subclasses it with its own fields, ``parse_fields``,
    ``place`` (optional) and ``start``."""

    kind: ClassVar[str] = ""
    FIELDS: ClassVar[tuple[str, ...]] = ()  # the kind's own fields, besides COMMON_FIELDS

    fault: str = field(init=False, default="")  # the kind, as the entry names it (manifests show it)
    at: float
    duration: float
    target: tuple[str, ...] = ("servers",)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fault", self.kind)

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        """The kind's own fields of ``entry``, checked; a FieldError names a bad one."""
        return {}

    def place(self, cast: Cast, rng: random.Random) -> Placement:
        """The nodes this fault hits in a run with ``cast``, drawn from ``rng``."""
        nodes = tuple(cast.resolve(self.target, rng))
        return Placement(nodes, detail=" ".join(nodes))

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        """Break ``world`` as placed; return what mends exactly that."""
        raise NotImplementedError


def parse_fault(entry: Any) -> Fault:
    """One schedule entry (a mapping) as its kind's spec; a FieldError names a bad field."""
    if not isinstance(entry, dict):
        raise FieldError("", "each fault is a mapping with at least 'fault', 'at' and 'duration'")
    kind = entry.get("fault")
    cls = REGISTRY.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise FieldError("fault", f"must be one of {', '.join(REGISTRY)}, got {kind!r}")
    known = (*COMMON_FIELDS, *cls.FIELDS)
    unknown = sorted(set(map(str, entry)) - set(known))
    if unknown:
        raise FieldError(unknown[0], f"unknown field for a {kind} fault (its fields: {', '.join(known)})")
    for key in ("at", "duration"):
        if not (_is_number(entry.get(key)) and entry[key] >= 0):
            raise FieldError(key, f"required, a number of seconds >= 0, got {entry.get(key)!r}")
    target = entry.get("target", "servers")
    targets = (target,) if isinstance(target, str) else target
    if not isinstance(targets, (list, tuple)) or not targets or not all(isinstance(t, str) and t for t in targets):
        raise FieldError("target", f"one of {', '.join(ROLE_TARGETS)} or a list of node names, got {target!r}")
    return cls(at=float(entry["at"]), duration=float(entry["duration"]), target=tuple(targets),
               **cls.parse_fields(entry))


def supports(world_kinds: Iterable[str], faults: Iterable[Fault]) -> tuple[int, Fault] | None:
    """The first fault (number, spec) a world with ``world_kinds`` cannot apply, or None."""
    kinds = set(world_kinds)
    return next(((i, f) for i, f in enumerate(faults) if f.kind not in kinds), None)


# ----------------------------------------------------------------------------- the kinds


@register
@dataclass(frozen=True)
class Pause(Fault):
    kind: ClassVar[str] = "pause"

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        for node in placement.nodes:
            world.pause(node)
        return lambda: [world.resume(node) for node in placement.nodes]


@register
@dataclass(frozen=True)
class Crash(Fault):
    kind: ClassVar[str] = "crash"
    FIELDS: ClassVar[tuple[str, ...]] = ("tear",)
    tear: bool = False

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        tear = entry.get("tear", False)
        if not isinstance(tear, bool):
            raise FieldError("tear", f"must be true or false, got {tear!r}")
        return {"tear": tear}

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        for node in placement.nodes:
            world.crash(node, tear=self.tear)
        return lambda: [world.restart(node) for node in placement.nodes if not world.is_up(node)]


@register
@dataclass(frozen=True)
class Partition(Fault):
    kind: ClassVar[str] = "partition"
    FIELDS: ClassVar[tuple[str, ...]] = ("shape", "mode", "flap")
    shape: str = "isolate"
    mode: str = "isolate"
    flap: float = 0.0

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        shape, mode, flap = entry.get("shape", "isolate"), entry.get("mode", "isolate"), entry.get("flap", 0)
        if shape not in SHAPES:
            raise FieldError("shape", f"must be one of {', '.join(SHAPES)}, got {shape!r}")
        if mode not in MODES:
            raise FieldError("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
        if mode != "isolate" and shape not in SIDED_SHAPES:
            raise FieldError("mode", f"{mode} needs a shape with one cut-off side ({', '.join(SIDED_SHAPES)}), "
                                     f"not {shape}")
        if shape == "clients" and "target" in entry:
            raise FieldError("target", "shape clients cuts every client from every server: it takes no target")
        if not (_is_number(flap) and flap >= 0):
            raise FieldError("flap", f"seconds between switches (0: no flapping), a number >= 0, got {flap!r}")
        return {"shape": shape, "mode": mode, "flap": float(flap)}

    def place(self, cast: Cast, rng: random.Random) -> Placement:
        if self.shape == "clients":
            return self._sides(list(cast.clients), list(cast.servers))
        nodes = cast.resolve(self.target, rng)
        if self.shape == "isolate":
            return self._sides(nodes, [n for n in cast.all if n not in nodes])
        shuffled = rng.sample(nodes, len(nodes))  # the grudge falls on random nodes (Jepsen shuffles)
        n = len(shuffled)
        if self.shape == "one":
            return self._sides(shuffled[:1], shuffled[1:])
        if self.shape == "minority":
            return self._sides(shuffled[: (n - 1) // 2], shuffled[(n - 1) // 2:])
        if self.shape in ("majority", "halves"):
            return self._sides(shuffled[: n // 2], shuffled[n // 2:])
        if self.shape == "bridge":
            left, bridge, right = shuffled[: n // 2], shuffled[n // 2: n // 2 + 1], shuffled[n // 2 + 1:]
            links = _between(left, right) + _between(right, left)
            return self._placement(links, f"{' '.join(left)} | {' '.join(right)}, bridged by {' '.join(bridge)}")
        # majorities-ring: on a ring, each node keeps the nodes within k steps: itself and 2k
        # neighbours make a majority, and no two nodes keep the same one.
        k = math.ceil((n // 2) / 2)
        links = [(a, b) for i, a in enumerate(shuffled) for j, b in enumerate(shuffled)
                 if min((i - j) % n, (j - i) % n) > k]
        return self._placement(links, "ring " + " ".join(shuffled) + f", each node sees {2 * k + 1}")

    def _sides(self, side: list[str], other: list[str]) -> Placement:
        links = []
        if self.mode in ("isolate", "one-way-in"):
            links += _between(other, side)
        if self.mode in ("isolate", "one-way-out"):
            links += _between(side, other)
        arrow = {"isolate": "|", "one-way-in": "<-/-", "one-way-out": "-/->"}[self.mode]
        return self._placement(links, f"{' '.join(side)} {arrow} {' '.join(other)}")

    def _placement(self, links: list[Link], detail: str) -> Placement:
        if not links:
            raise FieldError("shape", f"shape {self.shape} cuts no link between these nodes ({detail})")
        nodes = tuple(dict.fromkeys(node for link in links for node in link))
        return Placement(nodes, tuple(links), detail)

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        cut = [False]

        def switch(on: bool) -> None:
            if on != cut[0]:
                for link in placement.links:
                    (world.block if on else world.unblock)(*link)
                cut[0] = on

        switch(True)
        flapper = rt.spawn(self._flap(rt, switch, cut), name="flap") if self.flap else None

        def heal() -> None:
            if flapper is not None:
                flapper.cancel()
            switch(False)

        return heal

    async def _flap(self, rt: Runtime, switch: Callable[[bool], None], cut: list[bool]) -> None:
        while True:
            await rt.sleep(self.flap)
            switch(not cut[0])


def _between(sources: list[str], destinations: list[str]) -> list[Link]:
    return [(a, b) for a in sources for b in destinations if a != b]


def _links_of(nodes: Iterable[str], cast: Cast) -> tuple[Link, ...]:
    """Every link to or from one of ``nodes``, both ways."""
    nodes = list(nodes)
    return tuple(dict.fromkeys(link for node in nodes for other in cast.all if other != node
                               for link in ((node, other), (other, node))))


@register
@dataclass(frozen=True)
class LinkDelay(Fault):
    kind: ClassVar[str] = "link-delay"
    FIELDS: ClassVar[tuple[str, ...]] = ("ms", "jitter_ms")
    ms: float = 0.0
    jitter_ms: float = 0.0

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        return {"ms": _milliseconds(entry, "ms", "added to every message on the links"),
                "jitter_ms": _milliseconds(entry, "jitter_ms", "", required=False)}

    def place(self, cast: Cast, rng: random.Random) -> Placement:
        nodes = cast.resolve(self.target, rng)
        return Placement(tuple(nodes), _links_of(nodes, cast), " ".join(nodes))

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        extra, jitter = round(self.ms * 1e6), round(self.jitter_ms * 1e6)
        for link in placement.links:
            world.add_delay(*link, extra, jitter)
        return lambda: [world.remove_delay(*link, extra, jitter) for link in placement.links]


@register
@dataclass(frozen=True)
class Loss(Fault):
    kind: ClassVar[str] = "loss"
    FIELDS: ClassVar[tuple[str, ...]] = ("p",)
    p: float = 0.0

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        p = entry.get("p")
        if not (_is_number(p) and 0 < p <= 1):
            raise FieldError("p", f"a loss fault needs a probability 'p' in (0, 1], got {p!r}")
        return {"p": float(p)}

    def place(self, cast: Cast, rng: random.Random) -> Placement:
        nodes = cast.resolve(self.target, rng)
        return Placement(tuple(nodes), _links_of(nodes, cast), " ".join(nodes))

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        for link in placement.links:
            world.add_loss(*link, self.p)
        return lambda: [world.remove_loss(*link, self.p) for link in placement.links]


@register
@dataclass(frozen=True)
class DiskDelay(Fault):
    kind: ClassVar[str] = "disk-delay"
    FIELDS: ClassVar[tuple[str, ...]] = ("ms",)
    ms: float = 0.0

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        return {"ms": _milliseconds(entry, "ms", "added to every fsync")}

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        extra = round(self.ms * 1e6)
        for node in placement.nodes:
            world.add_fsync_delay(node, extra)
        return lambda: [world.remove_fsync_delay(node, extra) for node in placement.nodes]


def _milliseconds(entry: dict[str, Any], key: str, what: str, required: bool = True) -> float:
    value = entry.get(key, None if required else 0)
    if required and not (_is_number(value) and value > 0):
        raise FieldError(key, f"a {entry['fault']} needs '{key}' > 0 ({what}), got {value!r}")
    if not (_is_number(value) and value >= 0):
        raise FieldError(key, f"a number of milliseconds >= 0, got {value!r}")
    return float(value)


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
