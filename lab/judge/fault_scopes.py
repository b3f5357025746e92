"""Which faults of a run could have hurt a message, by an allowance's scope: the run's
faults read from its fault rows (``Fault``, ``faults_of``), and the checks of ``HOLDERS`` (a
fault struck the servers holding it, within the unsynced window), ``IN_FORCE`` (a fault in
force while it lived, with a grace after its heal), ``DEGRADED`` (acknowledged while a fault
had taken copies out, then a fault struck the rest) and an ordered combination (``after``).
``lab.judge.attribution`` asks them message by message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lab.design.promises import DEGRADED, HOLDERS, IN_FORCE, Allowance
from lab.history.phases import HEAL, START, fault_events
from lab.judge.findings import Cause, Explanation

NEVER = np.iinfo(np.int64).max

@dataclass(frozen=True)
class Fault:
    """One fault of the run, from its start and heal rows."""

    kind: str
    nodes: frozenset[str]
    start: int  # ns
    heal: int  # ns; NEVER if it never healed
    #: a partition's sides, as its row names them (``a b | c``); empty where it names none
    #: (a ring, another kind)
    sides: tuple[frozenset[str], ...] = ()


#: how a partition's row separates its two sides (``lab.workloads.fault_kinds``)
_SIDE_MARKS = re.compile(r" (?:\||<-/-|-/->) ")


def sides_of(detail: str) -> tuple[frozenset[str], ...]:
    """The two sides a partition's row names (``a b | c d``, one-way cuts, ``…, bridged by
    e``), or none for a detail of another form (a ring)."""
    parts = _SIDE_MARKS.split(detail.split(",", 1)[0])
    if len(parts) != 2:
        return ()
    return tuple(frozenset(p.split()) for p in parts)


def faults_of(samples: pa.Table) -> list[Fault]:
    """The run's faults, each with its start and heal (``lab.history.phases`` rows)."""
    events = fault_events(samples)
    heals = {e.number: e.t_ns for e in events if e.event == HEAL}
    return [Fault(e.kind, frozenset(e.nodes), e.t_ns, heals.get(e.number, NEVER),
                  sides_of(e.detail) if e.kind == "partition" else ()) for e in events if e.event == START]


def hurt(a: Allowance, faults: list[Fault], clients: set[str], made: int, synced_from: int,
          until: int) -> Explanation | None:
    """Allowance ``a``'s explanation if one of its faults could have hurt a message written
    at ``made`` (the write acknowledged at ``synced_from``), up to ``until``; else None."""
    if a.scope == IN_FORCE:
        for f in faults:
            if a.covers(f.kind) and f.start <= until and plus(f.heal, a.grace_s) >= made:
                before = before_it(a, faults, f)
                if before is not None:
                    return under(before + (f.kind,), a)
        return None
    if a.scope == HOLDERS:
        struck: set[str] = set()
        kinds: list[str] = []
        firsts: list[str] = []
        window = None if a.window_s is None else round(a.window_s * 1e9)
        for f in faults:
            servers = f.nodes - clients
            if (a.covers(f.kind) and servers and made <= f.start <= until
                    and (window is None or f.start - synced_from <= window)):
                before = before_it(a, faults, f)
                if before is None:
                    continue
                struck |= servers
                kinds.append(f.kind)
                firsts += before
        if len(struck) >= a.copies:
            return under(tuple(sorted(set(firsts))) + tuple(sorted(set(kinds))), a)
        return None
    if a.scope == DEGRADED:
        return _degraded(a, faults, clients, made, synced_from, until)
    return None


def before_it(a: Allowance, faults: list[Fault], f: Fault) -> tuple[str, ...] | None:
    """For an ordered combination (``a.after``), the kind of a fault in force when ``f``
    began — () when ``a`` orders nothing; None when nothing of ``a.after`` was in force then."""
    if not a.after:
        return ()
    for g in faults:
        if g is not f and g.kind in a.after and g.start <= f.start <= plus(g.heal, a.grace_s):
            return (g.kind,)
    return None


def _degraded(a: Allowance, faults: list[Fault], clients: set[str], put_start: int, put_end: int,
              until: int) -> Explanation | None:
    """A degraded acknowledgement: while the put was acknowledged (``put_start`` to
    ``put_end``) a fault of ``a.after`` had taken out server nodes, and afterwards, up to
    ``until``, faults of ``a``'s kinds struck ``a.copies`` of the server nodes it had not."""
    for g in faults:
        # in force at some instant of the put; a heal is not followed by grace here: once healed,
        # the copies exist again, and a put acknowledged after that had all of them
        if g.kind not in a.after or not (g.start <= put_end and g.heal >= put_start):
            continue
        for taken in _taken_out(g, clients):
            struck: set[str] = set()
            kinds: list[str] = []
            for f in faults:
                left = (f.nodes - clients) - taken
                if f is not g and a.covers(f.kind) and left and put_start <= f.start <= until:
                    struck |= left
                    kinds.append(f.kind)
            if len(struck) >= a.copies:
                return under((g.kind,) + tuple(sorted(set(kinds))), a)
    return None


def _taken_out(g: Fault, clients: set[str]) -> list[frozenset[str]]:
    """The server nodes fault ``g`` took away from a put's acknowledgement, for each node
    that may have acknowledged it. A crash or a pause takes its own nodes out. A partition
    takes nobody out; it cuts each side off from the other, so a node on one side that
    acknowledged a put did so without the servers on the other side (which side the put
    reached is not in the history: each is tried). A partition that names no sides (a ring)
    is taken as cutting each of its servers off from the rest."""
    servers = g.nodes - clients
    if g.kind != "partition":
        return [servers] if servers else []
    sides = g.sides or tuple(frozenset({node}) for node in servers)
    return [taken for side in sides if (taken := servers - side)]


def plus(t: int, seconds: float) -> int:
    return NEVER if t == NEVER else t + round(seconds * 1e9)


def under(kinds: tuple[str, ...], a: Allowance) -> Explanation:
    return Explanation(a.anomaly, Cause.FAULT, kinds, a.why)
