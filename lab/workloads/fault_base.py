"""What a fault kind is: the base ``Fault`` of a schedule entry, how a kind declares its own
fields (``own_field``), the verbs a world offers faults (``FaultWorld``), the run's nodes by
role (``Cast``) and where one fault lands (``Placement``), with the field checks the kinds
share. The kinds are in ``lab.workloads.fault_kinds``; the registry and the entry schema in
``lab.workloads.faults``.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Protocol, TypeGuard

from lab.design.runtime import Runtime

#: Undoes exactly what one fault did.
Heal = Callable[[], None]
Link = tuple[str, str]

ROLE_TARGETS = ("servers", "server", "clients", "all", "one", "minority", "majority")
#: A partition's shapes, and the links each cuts (the reference page shows them).
SHAPE_CUTS = {
    "isolate": "the targets from every other node",
    "one": "one target from the other targets",
    "minority": "a random minority of the targets ((n-1)//2) from the rest",
    "majority": "the targets in two random halves, the smaller one first",
    "halves": "the targets in two random halves, the smaller one first",
    "majorities-ring": "every target still sees a majority, no two the same one",
    "bridge": "two halves, and one target that talks to both",
    "clients": "every client from every server (takes no target)",
}
SHAPES = tuple(SHAPE_CUTS)
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

    def pause(self, node: str) -> None: ...
    def resume(self, node: str) -> None: ...
    def crash(self, node: str, tear: bool = False) -> None: ...
    def kill(self, node: str) -> object: ...  # the process dies, the page cache survives (what it returns: unread)
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


def own_field(default: Any, meaning: str, example: Any = None) -> Any:
    """One of a kind's own fields, declared on its class: its default, what it means, and for
    a field the kind cannot do without, the value the reference page's example entry gives it
    (None: the field is optional). The class is the one home of its fields: the registry's
    parser and the reference page (``lab.workloads.fault_reference``) read them from it."""
    return field(default=default, metadata={"meaning": meaning, "example": example})


@dataclass(frozen=True)
class Fault:
    """One schedule entry. A kind subclasses it with a docstring (what it does: the reference
    page shows it), its own fields (``own_field``), ``parse_fields``, ``place`` (optional) and
    ``start``."""

    kind: ClassVar[str] = ""
    #: the worlds that apply the kind, by name: the one answer to which kinds a world applies
    #: (``lab.workloads.faults.kinds_in``); a world may not import this layer to say so itself
    worlds: ClassVar[tuple[str, ...]] = ("sim", "live")
    #: it hits a node's process or machine, not its links: the live world applies it to
    #: server processes only, and refuses a target that may fall on a client
    hits_process: ClassVar[bool] = True
    #: its start stops the nodes' processes (every connection to them closes) and its heal
    #: restarts them, so their recovery runs (``lab.workloads.faults.RESTARTING``)
    restarts: ClassVar[bool] = False

    fault: str = field(init=False, default="")  # the kind, as the entry names it (manifests show it)
    at: float  # seconds from the start of the run; with ``at_to``, the start of a range
    duration: float
    target: tuple[str, ...] = ("servers",)
    at_to: float | None = None  # the end of the range a run draws its start from (None: ``at`` is fixed)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fault", self.kind)

    @classmethod
    def own_fields(cls) -> tuple[dataclasses.Field, ...]:
        """The kind's own fields, besides every entry's (``COMMON_FIELDS``), in the order its
        class declares them."""
        common = {f.name for f in dataclasses.fields(Fault)}
        return tuple(f for f in dataclasses.fields(cls) if f.name not in common)

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


def restarts(world: FaultWorld, nodes: Iterable[str]) -> Heal:
    """A crash's heal: each of ``nodes`` that is still down restarts."""

    def heal() -> None:
        for node in nodes:
            if not world.is_up(node):
                world.restart(node)

    return heal


def draw_time(rng: random.Random, low: float, high: float, digits: int = 6) -> float:
    """A time drawn uniformly from [``low``, ``high``] seconds, rounded to ``digits``
    decimals (microseconds by default: finer than any write path's steps, and readable in a
    manifest). A ranged fault's start (``Fault.timed``) and a swarm's fault times are drawn so."""
    return round(rng.uniform(low, high), digits)


def milliseconds(entry: dict[str, Any], key: str, what: str, required: bool = True) -> float:
    """A kind's field of milliseconds, checked (> 0 if ``required``, else >= 0 and 0 when absent)."""
    value = entry.get(key, None if required else 0)
    if required and not (is_number(value) and value > 0):
        raise FieldError(key, f"a {entry['fault']} needs '{key}' > 0 ({what}), got {value!r}")
    if not (is_number(value) and value >= 0):
        raise FieldError(key, f"a number of milliseconds >= 0, got {value!r}")
    return float(value)


def is_number(value: Any) -> TypeGuard[float]:
    """A finite int or float, and not a bool (YAML's true is no number of seconds)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)

