"""A fault schedule: the registry of fault kinds, and a workload's entries parsed as them.
Each kind (``lab.workloads.fault_kinds``) parses its own fields, picks the nodes (and links)
it hits from the run's seed, and breaks a world in a way its heal undoes.

A workload's ``faults`` is a list of entries. Every entry has

    fault: partition        # the kind: a name of REGISTRY
    at: 1.0                 # seconds from the start of the run; or a range, at: [1.9, 2.1]:
                            # each run draws its time uniformly from it, from its seed and
                            # the fault's number (lab.workloads.nemesis.timed), so seeds strike
                            # different instants of the load; the run's manifest and its
                            # fault rows hold the drawn time
    duration: 0.5           # seconds until it heals
    target: servers         # whom it hits (below): one target or a list of them

and the fields of its kind (a field another kind uses is refused, by name). What each kind
does, its fields with their defaults and meanings, and the worlds that apply it are on its
class, and in the reference page generated from the classes (``lab.workloads.fault_reference``,
docs/reference/faults.md on the documentation site).

Targets are functions of the run's nodes: ``servers``, ``server`` (one server),
``clients``, ``all`` (servers and clients), ``one`` (one of all), ``minority`` /
``majority`` (a random minority / majority of all), or node names (``s0``, ``p1``).
Every random pick is drawn from the run's seed and the fault's number: the same seed
gives the same nodes, and adding a fault does not move the others.

Each kind names the worlds that apply it (``Fault.worlds``; ``kinds_in`` answers for a
world); a kind the chosen world cannot apply is refused before the run starts. Faults compose: two overlapping partitions each
mend only the links they cut, two pauses of one node (a ``pause`` and a ``gc`` pause among
them) end when both have.
"""

from __future__ import annotations

from typing import Any, Iterable

from lab.workloads.fault_base import COMMON_FIELDS, ROLE_TARGETS, Fault, FieldError, is_number
from lab.workloads.fault_kinds import (Crash, DiskDelay, DiskLoss, Gc, Kill, LateWrites, LinkDelay, Loss, Partition,
                                       Pause)

#: Every kind by the name an entry gives it, in the order errors and swarms list them.
REGISTRY: dict[str, type[Fault]] = {cls.kind: cls for cls in (Pause, Crash, Kill, Partition, LinkDelay, Loss, DiskDelay,
                                                               Gc, LateWrites, DiskLoss)}
#: the kinds that stop their nodes' processes and restart them at the heal
RESTARTING: frozenset[str] = frozenset(kind for kind, cls in REGISTRY.items() if cls.restarts)


def parse_fault(entry: Any) -> Fault:
    """One schedule entry (a mapping) as its kind's spec; a FieldError names a bad field."""
    if not isinstance(entry, dict):
        raise FieldError("", "each fault is a mapping with at least 'fault', 'at' and 'duration'")
    kind = entry.get("fault")
    cls = REGISTRY.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise FieldError("fault", f"must be one of {', '.join(REGISTRY)}, got {kind!r}")
    known = (*COMMON_FIELDS, *(f.name for f in cls.own_fields()))
    unknown = sorted(set(map(str, entry)) - set(known))
    if unknown:
        raise FieldError(unknown[0], f"unknown field for a {kind} fault (its fields: {', '.join(known)})")
    at, at_to = _start(entry.get("at"))
    if not (is_number(entry.get("duration")) and entry["duration"] >= 0):
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
        if len(at) != 2 or not all(map(is_number, at)):
            raise FieldError("at", f"a range is [from, to]: two numbers of seconds, got {list(at)!r}")
        low, high = float(at[0]), float(at[1])
        if low < 0:
            raise FieldError("at", f"range {list(at)!r}: from must be >= 0 seconds")
        if low > high:
            raise FieldError("at", f"range {list(at)!r}: from ({at[0]:g} s) is after to ({at[1]:g} s)")
        return low, (high if high > low else None)  # [t, t] is the fixed time t
    if not (is_number(at) and at >= 0):
        raise FieldError("at", f"required, a number of seconds >= 0 or a range [from, to] of them, got {at!r}")
    return float(at), None


def kinds_in(world: str) -> tuple[str, ...]:
    """The kinds the world named ``world`` (sim, live) applies, in the registry's order."""
    return tuple(kind for kind, cls in REGISTRY.items() if world in cls.worlds)


def supports(world_kinds: Iterable[str], faults: Iterable[Fault]) -> tuple[int, Fault] | None:
    """The first fault (number, spec) a world with ``world_kinds`` cannot apply, or None."""
    kinds = set(world_kinds)
    return next(((i, f) for i, f in enumerate(faults) if f.kind not in kinds), None)
