"""A fault schedule: the registry of fault kinds, and a workload's entries parsed as them.
Each kind (``lab.workloads.fault_kinds``) parses its own fields, picks the nodes (and links)
it hits from the run's seed, and breaks a world in a way its heal undoes.

A workload's ``faults`` is a list of entries. Every entry has

    fault: partition        # the kind: pause, crash, kill, partition, link-delay, loss, disk-delay,
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
    kill         the targets' processes die (kill -9) and their machines stay up: what was
                 written and not fsynced survives in the page cache; they restart when it heals
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

from typing import Any, Iterable

from lab.workloads.fault_base import COMMON_FIELDS, ROLE_TARGETS, Fault, FieldError, is_number
from lab.workloads.fault_kinds import (Crash, DiskDelay, DiskLoss, Gc, Kill, LateWrites, LinkDelay, Loss, Partition,
                                       Pause)

#: Every kind by the name an entry gives it, in the order errors and swarms list them.
REGISTRY: dict[str, type[Fault]] = {cls.kind: cls for cls in (Pause, Crash, Kill, Partition, LinkDelay, Loss, DiskDelay,
                                                               Gc, LateWrites, DiskLoss)}


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


def supports(world_kinds: Iterable[str], faults: Iterable[Fault]) -> tuple[int, Fault] | None:
    """The first fault (number, spec) a world with ``world_kinds`` cannot apply, or None."""
    kinds = set(world_kinds)
    return next(((i, f) for i, f in enumerate(faults) if f.kind not in kinds), None)
