"""Fault kinds as registered classes: each parses its own schedule entry, picks the nodes
(and links) it hits from the run's seed, and breaks a world in a way its heal undoes.

A workload's ``faults`` is a list of entries. Every entry has

    fault: partition        # the kind: pause, crash, partition, link-delay, loss, disk-delay,
                            # gc, late-writes, disk-loss
    at: 1.0                 # seconds from the start of the run; or a range, at: [1.9, 2.1]:
                            # each run draws its time uniformly from it, from its seed and
                            # the fault's number (lab.workloads.nemesis.timed), so seeds strike
                            # different instants of the load; the run's manifest and its
                            # fault rows hold the drawn time
    duration: 0.5           # seconds until it heals
    target: servers         # whom it hits (below): one target or a list of them

and the fields of its kind (a field another kind uses is refused, by name):

    pause        stop the world on the targets (a GC pause): none of their code runs,
                 messages to them wait
    crash        the targets' machines crash (kill -9, and what was not fsynced is lost); they restart on the same disk when it heals
      tear: false           a random prefix of each file's unsynced tail survives
    disk-loss    the targets' machines crash (as crash) and their disks are destroyed: every
                 file gone, synced or not, as on a replaced machine; they restart on an
                 empty disk when it heals and rejoin as their design allows
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
    gc           stop-the-world pauses on each target, drawn per node while the fault
                 lasts (a garbage-collected runtime): young-generation pauses come at
                 gaps drawn uniformly from 0.5 to 1.5 times ``young_every`` seconds (a
                 generation fills at the allocation rate: roughly periodic), the first
                 at a random phase within one ``young_every``, and last a lognormal time
                 of median ``young_ms`` and shape ``sigma``; full pauses likewise
                 (``full_every``, ``full_ms``), so a fault as long as ``full_every`` has
                 at least one. A pause that comes while another holds the node starts
                 when it ends (one collector); the heal ends any pause in force. A class
                 with ``*_every: 0`` never happens.
      preset: jvm           the defaults of the fields below; jvm: young_every 0.3,
                            young_ms 12, full_every 2, full_ms 400, sigma 0.4 (young
                            pauses every 0.15-0.45 s, 90% of them 6-23 ms long; full
                            ones every 1-3 s, 90% of them 200-800 ms long)
      young_every, young_ms, full_every, full_ms, sigma   override the preset's
    late-writes  the simulated store on a target (CassieQ's Cassandra node, sim world)
                 applies each message write late or never, as its design options
                 ``cassandra_late_write_p`` ... do for a whole run; a target that runs
                 no simulated store is untouched
      late_p: 0.1           probability that a write is applied and answered late_s later
      late_s: 1.0           seconds (> 0)
      ghost_p: 0            probability that a write is never applied nor answered
                            (a ghost monoton); late_p + ghost_p in (0, 1]

Targets are functions of the run's nodes: ``servers``, ``server`` (one server),
``clients``, ``all`` (servers and clients), ``one`` (one of all), ``minority`` /
``majority`` (a random minority / majority of all), or node names (``s0``, ``p1``).
Every random pick is drawn from the run's seed and the fault's number: the same seed
gives the same nodes, and adding a fault does not move the others.

Each world names the kinds it applies (``fault_kinds``: the sim world all of them, the
live world all but ``late-writes``); a kind the chosen world cannot apply is refused
before the run starts. Faults compose: two overlapping partitions each mend only the
links they cut, two pauses of one node (a ``pause`` and a ``gc`` pause among them) end
when both have. A ``gc`` fault's pauses are drawn when it is placed, from the same
seeded source as its nodes, one stream per node: its ``Placement`` lists them.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Protocol

from lab.design.runtime import Runtime

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
    def destroy_disk(self, node: str) -> Any: ...  # crash, and every file of the node's disk gone
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
    # the sim world's only: a simulated store's late and ghost writes (late-writes)
    def add_late_writes(self, node: str, late_p: float, late_s: float, ghost_p: float) -> None: ...
    def remove_late_writes(self, node: str, late_p: float, late_s: float, ghost_p: float) -> None: ...


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
    at: float  # seconds from the start of the run; with ``at_to``, the start of a range
    duration: float
    target: tuple[str, ...] = ("servers",)
    at_to: float | None = None  # the end of the range a run draws its start from (None: ``at`` is fixed)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fault", self.kind)

    @property
    def latest(self) -> float:
        """The latest time this fault may start: ``at``, or the end of its range."""
        return self.at if self.at_to is None else self.at_to

    def timed(self, rng: random.Random) -> "Fault":
        """This fault at a fixed time: itself, or with a time drawn from its range by ``rng``."""
        if self.at_to is None:
            return self
        return dataclasses.replace(self, at=draw_time(rng, self.at, self.at_to), at_to=None)

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
    at, at_to = _start(entry.get("at"))
    if not (_is_number(entry.get("duration")) and entry["duration"] >= 0):
        raise FieldError("duration", f"required, a number of seconds >= 0, got {entry.get('duration')!r}")
    target = entry.get("target", "servers")
    targets = (target,) if isinstance(target, str) else target
    if not isinstance(targets, (list, tuple)) or not targets or not all(isinstance(t, str) and t for t in targets):
        raise FieldError("target", f"one of {', '.join(ROLE_TARGETS)} or a list of node names, got {target!r}")
    return cls(at=at, at_to=at_to, duration=float(entry["duration"]), target=tuple(targets),
               **cls.parse_fields(entry))


def _start(at: Any) -> tuple[float, float | None]:
    """An entry's ``at``: (the time, None), or (from, to) of a range; a FieldError names it."""
    if isinstance(at, (list, tuple)):
        if len(at) != 2 or not all(map(_is_number, at)):
            raise FieldError("at", f"a range is [from, to]: two numbers of seconds, got {list(at)!r}")
        low, high = float(at[0]), float(at[1])
        if low < 0:
            raise FieldError("at", f"range {list(at)!r}: from must be >= 0 seconds")
        if low > high:
            raise FieldError("at", f"range {list(at)!r}: from ({at[0]:g} s) is after to ({at[1]:g} s)")
        return low, (high if high > low else None)  # [t, t] is the fixed time t
    if not (_is_number(at) and at >= 0):
        raise FieldError("at", f"required, a number of seconds >= 0 or a range [from, to] of them, got {at!r}")
    return float(at), None


def draw_time(rng: random.Random, low: float, high: float, digits: int = 6) -> float:
    """A time drawn uniformly from [``low``, ``high``] seconds, rounded to ``digits``
    decimals (microseconds by default: finer than any write path's steps, and readable in a
    manifest). A ranged fault's start (``Fault.timed``) and a swarm's fault times are drawn so."""
    return round(rng.uniform(low, high), digits)


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


#: gc presets: the defaults of a gc fault's fields (a field the entry gives overrides its preset's)
GC_PRESETS: dict[str, dict[str, float]] = {
    # A JVM under a generational collector: minor collections several times a second, a
    # few ms to a few tens of ms each; a full (old-generation) collection every few seconds,
    # hundreds of ms. Lognormal lengths give the long tail a collector's pauses have.
    "jvm": {"young_every": 0.3, "young_ms": 12.0, "full_every": 2.0, "full_ms": 400.0, "sigma": 0.4},
}
GC_FIELDS = {"young_every": "the mean gap between young pauses, in seconds (0: none)",
             "young_ms": "the median young pause, in milliseconds",
             "full_every": "the mean gap between full pauses, in seconds (0: none)",
             "full_ms": "the median full pause, in milliseconds",
             "sigma": "the lognormal shape of the pause lengths"}


@dataclass(frozen=True)
class GcPause:
    """One drawn stop-the-world pause: ``start`` seconds after the fault starts, for ``length`` seconds."""

    node: str
    start: float
    length: float
    kind: str  # "young" or "full"


@dataclass(frozen=True)
class GcPlacement(Placement):
    """A gc fault's placement: its nodes and every pause it will hold on them, in time order."""

    pauses: tuple[GcPause, ...] = ()


@register
@dataclass(frozen=True)
class Gc(Fault):
    kind: ClassVar[str] = "gc"
    FIELDS: ClassVar[tuple[str, ...]] = ("preset", *GC_FIELDS)
    preset: str = "jvm"
    young_every: float = 0.0
    young_ms: float = 0.0
    full_every: float = 0.0
    full_ms: float = 0.0
    sigma: float = 0.0

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        preset = entry.get("preset", "jvm")
        if preset not in GC_PRESETS:
            raise FieldError("preset", f"must be one of {', '.join(GC_PRESETS)}, got {preset!r}")
        fields = {"preset": preset}
        for key in GC_FIELDS:
            value = entry.get(key, GC_PRESETS[preset][key])
            positive = key.endswith("_ms")  # a pause that takes no time is no pause
            if not (_is_number(value) and (value > 0 if positive else value >= 0)):
                raise FieldError(key, f"{GC_FIELDS[key]}: a number {'>' if positive else '>='} 0, got {value!r}")
            fields[key] = float(value)
        if not fields["young_every"] and not fields["full_every"]:
            raise FieldError("young_every", "young_every and full_every are both 0: the fault would pause nothing")
        return fields

    def place(self, cast: Cast, rng: random.Random) -> GcPlacement:
        nodes = tuple(cast.resolve(self.target, rng))
        base = rng.getrandbits(64)  # after the targets' picks: a node's pauses do not depend on the others'
        pauses = sorted((p for node in nodes for p in self._draw(node, random.Random(f"{base}:gc:{node}"))),
                        key=lambda p: (p.start, p.node))
        full = sum(p.kind == "full" for p in pauses)
        longest = max((p.length for p in pauses), default=0.0)
        detail = f"{' '.join(nodes)}: {len(pauses) - full} young and {full} full pauses, longest {longest * 1e3:.0f} ms"
        return GcPlacement(nodes, detail=detail, pauses=tuple(pauses))

    def _draw(self, node: str, rng: random.Random) -> list[GcPause]:
        """One node's pauses over the fault's duration (the rules in the module doc): each
        class at uniform gaps around its mean, from a random phase, with lognormal lengths; a
        pause that comes while the collector is busy waits for it, and the last one ends
        with the fault. (Not Poisson arrivals: with a handful of full pauses per run, their
        count would vary more between seeds than between designs.)"""
        arrivals = []
        for kind, every, median_ms in (("young", self.young_every, self.young_ms),
                                       ("full", self.full_every, self.full_ms)):
            if not every:
                continue
            t = rng.uniform(0, every)
            while t < self.duration:
                arrivals.append((t, kind, rng.lognormvariate(math.log(median_ms / 1e3), self.sigma)))
                t += rng.uniform(0.5 * every, 1.5 * every)
        pauses: list[GcPause] = []
        busy_until = 0.0
        for t, kind, length in sorted(arrivals):
            start = max(t, busy_until)
            if start >= self.duration:
                break
            busy_until = min(start + length, self.duration)
            pauses.append(GcPause(node, start, busy_until - start, kind))
        return pauses

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        pauses = placement.pauses if isinstance(placement, GcPlacement) else ()
        holding: set[str] = set()  # nodes a pause of this fault holds now
        healed = [False]

        async def collect(node: str, mine: list[GcPause]) -> None:
            t0 = rt.now()
            for pause in mine:
                await rt.sleep(max(0.0, t0 + pause.start - rt.now()))
                if healed[0]:
                    return
                world.pause(node)
                holding.add(node)
                await rt.sleep(pause.length)
                if healed[0]:
                    return  # the heal resumed it
                holding.discard(node)
                world.resume(node)

        tasks = [rt.spawn(collect(node, [p for p in pauses if p.node == node]), name=f"gc {node}")
                 for node in placement.nodes]

        def heal() -> None:
            healed[0] = True
            for task in tasks:
                task.cancel()
            for node in sorted(holding):
                world.resume(node)
            holding.clear()

        return heal


@register
@dataclass(frozen=True)
class LateWrites(Fault):
    kind: ClassVar[str] = "late-writes"
    FIELDS: ClassVar[tuple[str, ...]] = ("late_p", "late_s", "ghost_p")
    late_p: float = 0.1
    late_s: float = 1.0
    ghost_p: float = 0.0

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        fields = {}
        for key, default in (("late_p", cls.late_p), ("ghost_p", cls.ghost_p)):
            value = entry.get(key, default)
            if not (_is_number(value) and 0 <= value <= 1):
                raise FieldError(key, f"a probability from 0 to 1, got {value!r}")
            fields[key] = float(value)
        chance = fields["late_p"] + fields["ghost_p"]
        if not 0 < chance <= 1:
            raise FieldError("late_p", f"late_p + ghost_p must be in (0, 1], got {chance:g}")
        late_s = entry.get("late_s", cls.late_s)
        if not (_is_number(late_s) and late_s > 0):
            raise FieldError("late_s", f"seconds a late write lands after it was sent, a number > 0, got {late_s!r}")
        return {**fields, "late_s": float(late_s)}

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        args = (self.late_p, self.late_s, self.ghost_p)
        for node in placement.nodes:
            world.add_late_writes(node, *args)
        return lambda: [world.remove_late_writes(node, *args) for node in placement.nodes]


def _milliseconds(entry: dict[str, Any], key: str, what: str, required: bool = True) -> float:
    value = entry.get(key, None if required else 0)
    if required and not (_is_number(value) and value > 0):
        raise FieldError(key, f"a {entry['fault']} needs '{key}' > 0 ({what}), got {value!r}")
    if not (_is_number(value) and value >= 0):
        raise FieldError(key, f"a number of milliseconds >= 0, got {value!r}")
    return float(value)


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


@register
@dataclass(frozen=True)
class DiskLoss(Fault):
    """A crash that also destroys the targets' disks (a machine replaced): nothing the node
    wrote survives, fsynced or not, so only a copy on another node can save a message. The
    history's fault rows name the nodes (``lab.history.phases``): which disks were lost, and when."""

    kind: ClassVar[str] = "disk-loss"

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        for node in placement.nodes:
            world.destroy_disk(node)
        # as a crash's heal: each restart ends this fault's hold; one still held down by
        # another crash restarts when that one heals (on the empty disk all the same)
        return lambda: [world.restart(node) for node in placement.nodes if not world.is_up(node)]
