"""The swarm's draw: each seed's workload (``draw_seed``), a pure function of the seed, the
base workload, the design and its options — its load (``lab.experiments.swarm_load``), then
its faults (``draw_faults``): the fault kinds the world applies, each switched on or off for
the seed, 1..``faults_max`` faults of those left on, each with its target and fields from
``FIELD_DRAWS``, its start and length inside the load window and clear of its last quarter,
which stays healed; then sequences timed against earlier faults and the load (a restart
struck again, a fault just after the clients' timeout ran out, during a late consumer's
backlog, while reads are held open), each with its reason in the seed's description; then,
in some seeds, a consumer that dies holding a read (``swarm_load.draw_deaths``), and
consumers with their own values of the design's per-consumer options (a prefetch:
``swarm_load.draw_own_options``), among values that leave its promises as they are. A kind
the world applies and ``FIELD_DRAWS`` lacks stops the swarm before anything runs
(``UndrawableKind``), so a new kind fails its test rather than being skipped in silence. A
design joins by registering: its server nodes come from its ``Backend``. Also the one-line
forms of a fault, a schedule and a load the reports print.
"""

from __future__ import annotations

import copy
import functools
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import yaml

from lab.workloads import faults

from lab.design.options import TIMEOUT
from lab.design.registry import backend_class
from lab.experiments.swarm_load import Shape, draw_deaths, draw_load, draw_own_options, shape_of
from lab.workloads.fault_base import ROLE_TARGETS, SHAPES, SIDED_SHAPES, Cast, FieldError, draw_time
from lab.workloads.faults import RESTARTING, parse_fault
from lab.workloads.errors import WorkloadError
from lab.workloads.spec import load_workload, parse_workload

#: The base workload when none is given: a few seconds of reliable load at a modest rate.
DEFAULT_WORKLOAD: dict[str, Any] = {
    "name": "swarm", "queues": 1, "producers": 2, "consumers": 2, "message_size": 100, "rate": 1000, "duration": 3,
    "warmup": 0.5, "ack": "reliable",
}
FIRST = 0.1  # faults start after this fraction of the load ...
HEALED = 0.25  # ... and have healed before its last quarter: the design must show it recovers
MIN_FAULT = 0.05  # seconds: a shorter fault hardly touches a run
DRAW_TRIES = 50  # redraws of one fault whose placement cuts nothing (a shape on too few nodes)


class UndrawableKind(LookupError):
    """A fault kind the world applies that the swarm cannot draw yet (no ``FIELD_DRAWS`` entry)."""


#: What one fault of a kind hits and its own fields: (rng, cast) -> the entry's ``target``
#: (absent where the kind takes none) and its kind's fields.
FieldDraw = Callable[[random.Random, Cast], dict[str, Any]]


def _servers(rng: random.Random, cast: Cast) -> str:
    # role targets minority/majority/one/all may fall on a client: a crashed client's
    # producer would end the run, and a client has no disk to slow
    return rng.choice(["servers", "server", *cast.servers])


def _anyone(rng: random.Random, cast: Cast) -> str:
    return rng.choice([*ROLE_TARGETS, *cast.all])


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _partition(rng: random.Random, cast: Cast) -> dict[str, Any]:
    shape = rng.choice(SHAPES)
    entry: dict[str, Any] = {}
    if shape == "isolate":
        entry["target"] = rng.choice(["server", "servers", "clients", "one", "minority", "majority", *cast.all])
    elif shape != "clients":  # a Jepsen grudge over a group: the servers where there are enough of them
        entry["target"] = "servers" if len(cast.servers) >= 3 and rng.random() < 0.7 else "all"
    entry["shape"] = shape
    if shape in SIDED_SHAPES and rng.random() < 0.3:
        entry["mode"] = rng.choice(["one-way-in", "one-way-out"])
    if rng.random() < 0.2:
        entry["flap"] = round(rng.uniform(0.05, 0.5), 2)
    return entry


def _link_delay(rng: random.Random, cast: Cast) -> dict[str, Any]:
    ms = round(_log_uniform(rng, 1, 1500), 1)  # past the clients' 1 s timeout sometimes
    entry = {"target": _anyone(rng, cast), "ms": ms}
    if rng.random() < 0.5:
        entry["jitter_ms"] = round(rng.uniform(0, ms), 1)
    return entry


def _gc(rng: random.Random, cast: Cast) -> dict[str, Any]:
    entry: dict[str, Any] = {"target": rng.choice(["servers", "server", "clients", "one", *cast.all])}
    if rng.random() < 0.5:  # a heavier old generation than the preset's: full pauses past a client's timeout
        entry["full_every"] = round(_log_uniform(rng, 0.2, 4), 2)
        entry["full_ms"] = round(_log_uniform(rng, 50, 1500))
    return entry


def _late_writes(rng: random.Random, cast: Cast) -> dict[str, Any]:
    entry: dict[str, Any] = {"target": _servers(rng, cast), "late_p": rng.choice((0.01, 0.1, 0.5)),
                             "late_s": round(_log_uniform(rng, 0.05, 3), 2)}
    if rng.random() < 0.3:
        entry["ghost_p"] = rng.choice((0.01, 0.1))
    return entry


FIELD_DRAWS: dict[str, FieldDraw] = {
    "pause": lambda rng, cast: {"target": rng.choice(["servers", "server", "clients", "all", "one", *cast.all])},
    "crash": lambda rng, cast: {"target": _servers(rng, cast), **({"tear": True} if rng.random() < 0.3 else {})},
    "kill": lambda rng, cast: {"target": _servers(rng, cast)},
    "partition": _partition,
    "link-delay": _link_delay,
    "loss": lambda rng, cast: {"target": _anyone(rng, cast), "p": rng.choice((0.01, 0.05, 0.1, 0.3, 0.6, 1.0))},
    "disk-delay": lambda rng, cast: {"target": _servers(rng, cast), "ms": round(_log_uniform(rng, 1, 500), 1)},
    "gc": _gc,
    "late-writes": _late_writes,
    "disk-loss": lambda rng, cast: {"target": _servers(rng, cast)},  # as a crash: server nodes only
}


def world_kinds(world: str = "sim") -> list[str]:
    """The registered fault kinds ``world`` applies, in registration order; UndrawableKind
    names one the swarm has no ``FIELD_DRAWS`` entry for."""
    kinds = list(faults.kinds_in(world))
    missing = [kind for kind in kinds if kind not in FIELD_DRAWS]
    if missing:
        raise UndrawableKind(f"the swarm cannot draw a {missing[0]!r} fault yet (the {world} world applies it): "
                             f"add how to draw its target and fields to lab.experiments.swarm_draw.FIELD_DRAWS")
    return kinds


def load_window(workload: Mapping[str, Any]) -> tuple[float, float]:
    """(first start, last heal) in seconds from the start of the run, for ``workload`` (a
    mapping); WorkloadError if the length of its load is not known beforehand."""
    return window_of(load_end(workload))


def load_end(workload: Mapping[str, Any]) -> float:
    """When ``workload``'s producers stop, in seconds from the start of the run; WorkloadError
    if that is not known beforehand."""
    end = parse_workload(dict(workload), workload.get("name", "<workload>")).load_seconds
    if end is None:
        raise WorkloadError(f"{workload.get('name')}: the swarm needs a load of known length "
                            "(`duration`, or `messages` with a `rate`) to place faults in it")
    return end


def window_of(end: float) -> tuple[float, float]:
    """(first start, last heal) of a load that ends at ``end``."""
    return round(FIRST * end, 3), round((1 - HEALED) * end, 3)


def draw_schedule(seed: int, window: tuple[float, float], kinds: Sequence[str], cast: Cast,
                  faults_max: int = 3, shape: Shape | None = None) -> list[dict[str, Any]]:
    """The fault entries (workload form) of ``seed``: a pure function of its arguments."""
    return draw_faults(seed, window, kinds, cast, faults_max, shape)[0]


def draw_faults(seed: int, window: tuple[float, float], kinds: Sequence[str], cast: Cast, faults_max: int = 3,
                shape: Shape | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """``seed``'s fault entries, and a note for each that was timed against the run: the kinds
    this seed switches on (each with an even chance, one at least), 1..``faults_max`` faults of
    them at random, then sequences — a crash again soon after its restart, a fault just after
    the clients gave up on what an earlier one stalled, a fault while a late consumer drains
    the backlog or a slow one holds its reads open (``shape``: the load's timings)."""
    rng = random.Random(f"swarm:{seed}")
    kinds = list(kinds)
    enabled = [kind for kind in kinds if rng.random() < 0.5] or [rng.choice(kinds)]
    entries = [_draw_fault(rng, rng.choice(enabled), window, cast) for _ in range(rng.randint(1, faults_max))]
    notes: list[str] = []
    if shape is not None:
        _draw_sequences(rng, entries, notes, enabled, window, cast, shape)
    return sorted(entries, key=lambda e: e["at"]), notes


STALLING = ("partition", "pause", "gc", "link-delay", "loss", "disk-delay")  # kinds a client may time out in
SEQUENCE_P = 0.35  # the chance of each follow-up a sequence may add


def _draw_sequences(rng: random.Random, entries: list[dict[str, Any]], notes: list[str], enabled: list[str],
                    window: tuple[float, float], cast: Cast, shape: Shape) -> None:
    """Follow-ups timed against the first draw's faults and the load (added to ``entries``)."""
    def add(kind: str, at: float, why: str, like: Mapping[str, Any] | None = None) -> None:
        entry = _timed_fault(rng, kind, at, window, cast, like)
        if entry is not None:
            entries.append(entry)
            notes.append(f"{fault_line(entry)}: {why}")

    for first in list(entries):
        heal = first["at"] + first["duration"]
        if first["fault"] in RESTARTING and rng.random() < SEQUENCE_P:  # a recovery that must survive its own
            gap = round(_log_uniform(rng, 0.005, 1.0), 3)
            add(first["fault"], heal + gap, f"the same again {gap:g} s after its restart", like=first)
        if first["fault"] in STALLING and rng.random() < SEQUENCE_P:  # the clients gave up on what it stalled
            late = round(rng.uniform(0, 0.05), 3)
            add(rng.choice(enabled), first["at"] + shape.timeout + late,
                f"{late:g} s after the clients' {shape.timeout:g} s timeout ran out on what {first['fault']} stalled")
    for start in shape.late_starts:
        if rng.random() < SEQUENCE_P:
            later = round(rng.uniform(0, 0.3), 3)
            add(rng.choice(enabled), start + later, f"{later:g} s after a late consumer began on the backlog")
    for start in shape.slow_readers:
        if rng.random() < SEQUENCE_P:
            add(rng.choice(enabled), rng.uniform(start, window[1]), "while a slow consumer holds reads open")


def _timed_fault(rng: random.Random, kind: str, at: float, window: tuple[float, float], cast: Cast,
                 like: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """A ``kind`` fault at ``at`` (``like``'s target and fields, else drawn), or None if it
    would not fit the window or cuts nothing."""
    start, end = window
    at = round(max(at, start), 3)
    if at > end - MIN_FAULT:
        return None
    fields = {k: v for k, v in like.items() if k not in ("at", "duration")} if like is not None else \
        {"fault": kind, **FIELD_DRAWS[kind](rng, cast)}
    entry = {"fault": kind, "at": at, "duration": round(_log_uniform(rng, MIN_FAULT, end - at), 3), **fields}
    try:
        parse_fault(entry).place(cast, random.Random(0))
    except FieldError:
        return None
    return entry


def _draw_fault(rng: random.Random, kind: str, window: tuple[float, float], cast: Cast) -> dict[str, Any]:
    start, end = window
    for _ in range(DRAW_TRIES):
        at = draw_time(rng, start, end - MIN_FAULT, 3)
        entry = {"fault": kind, "at": at, "duration": round(_log_uniform(rng, MIN_FAULT, end - at), 3),
                 **FIELD_DRAWS[kind](rng, cast)}
        try:
            fault = parse_fault(entry)
        except FieldError as e:  # the table drew what the kind refuses: a bug here, not bad luck
            raise ValueError(f"lab.experiments.swarm drew a {kind} fault its kind refuses ({e}): {entry}") from None
        try:
            fault.place(cast, random.Random(0))  # whether it cuts anything depends on node counts only
        except FieldError:
            continue
        return entry
    raise ValueError(f"lab.experiments.swarm drew no {kind} fault that acts on the nodes {', '.join(cast.all)}")


def design_servers(backend: str, options: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The server nodes ``backend`` runs on with ``options``, as its Backend names them (on
    a sim world that never runs: a design names its nodes when it is made; one that does
    not run in the sim world says so, as UnknownBackend)."""
    return _servers_of(backend, tuple(sorted((options or {}).items(), key=lambda kv: kv[0])))


@functools.lru_cache(maxsize=64)
def _servers_of(backend: str, options: tuple[tuple[str, Any], ...]) -> tuple[str, ...]:
    # made once per design and options: every seed's draw asks (a swarm of many seeds draws them all first)
    from models.world import SimWorld

    return tuple(backend_class(backend)(SimWorld(0), dict(options)).server_nodes)


@functools.lru_cache(maxsize=64)
def _brings_back(backend: str, options: tuple[tuple[str, Any], ...], world: str, reliable: bool) -> bool:
    """Whether a dead consumer's read comes back under ``backend``'s promises (a consumer may
    die in the draw only then: ``lab.workloads.clients.refuse_deaths``); plain gets hold none."""
    design = backend_class(backend)
    return not reliable or design.promises(design.check_options(dict(options), world), reliable).brings_back


@functools.lru_cache(maxsize=64)
def _own_values(backend: str, options: tuple[tuple[str, Any], ...], world: str,
                reliable: bool) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """The values each of ``backend``'s ``per_consumer`` options may be drawn from for one
    consumer: those under which the design promises what the run's options give it (the run is
    judged by one set of promises: ``lab.experiments.run_spec``)."""
    design = backend_class(backend)
    checked = design.check_options(dict(options), world)
    judged_by = design.promises(checked, reliable)
    values = []
    for option in design.options_declared:
        kept = tuple(v for v in option.per_consumer
                     if design.promises(design.check_options({**checked, option.name: v}, world), reliable) == judged_by)
        if kept:
            values.append((option.name, kept))
    return tuple(values)


def cast_of(backend: str, options: Mapping[str, Any] | None, workload: Mapping[str, Any]) -> Cast:
    clients = [f"p{i}" for i in range(workload.get("producers", 1))]
    clients += [f"c{i}" for i in range(workload.get("consumers", 1))]
    return Cast(design_servers(backend, options), tuple(clients))


def fault_line(entry: Mapping[str, Any]) -> str:
    """One fault entry in a few words: ``partition halves all one-way-in @1.2+0.5s``."""
    fields = [f"{k}={v}" for k, v in entry.items() if k not in ("fault", "at", "duration", "target", "shape", "mode")]
    words = [entry["fault"], *(str(entry[k]) for k in ("shape", "target", "mode") if k in entry), *fields]
    return f"{' '.join(words)} @{entry['at']:g}+{entry['duration']:g}s"


def load_line(workload: Mapping[str, Any]) -> str:
    """A workload's load in a few words: ``2 producer(s), 2 consumer(s), 1000 msg/s for 3 s``,
    then what it draws beyond that (queues, sizes, arrivals, timeout, each client's own plan)."""
    length = f"for {workload['duration']:g} s" if workload.get("duration") else f"{workload.get('messages')} messages"
    rate = f"{workload['rate']:g} msg/s" if workload.get("rate") else "closed loop"
    words = [f"{workload.get('producers', 1)} producer(s), {workload.get('consumers', 1)} consumer(s), "
             f"{rate} {length}"]
    if workload.get("arrivals") == "poisson":
        words.append("poisson arrivals")
    if workload.get("queues", 1) > 1:
        words.append(f"{workload['queues']} queues")
    if workload.get("message_size", 100) != 100:
        words.append(f"{workload['message_size']} B")
    if workload.get("timeout"):
        words.append(f"timeout {workload['timeout']:g} s")
    for name, plan in (workload.get("clients") or {}).items():
        words.append(f"{name} " + " ".join(_plan_words(plan)))
    return "; ".join(words)


def _plan_words(plan: Mapping[str, Any]) -> list[str]:
    words = []
    if "start" in plan or "stop" in plan:
        words.append(f"{plan.get('start', 0):g}-{plan['stop']:g} s" if "stop" in plan else f"from {plan['start']:g} s")
    words += [f"{plan['rate']:g} msg/s"] if "rate" in plan else []
    words += [f"{plan['message_size']} B"] if "message_size" in plan else []
    words += [f"on {plan['queue']}"] if "queue" in plan else []
    words += [f"reads {','.join(plan['queues'])}"] if "queues" in plan else []
    words += [f"works {plan['work_ms']:g} ms"] if "work_ms" in plan else []
    for key, verb in (("pauses", "pauses"), ("dies", "dies")):
        words += [f"{verb} {' '.join(f'@{at:g}+{length:g}s' for at, length in plan[key])}"] if key in plan else []
    words += [f"{key}={value}" for key, value in (plan.get("options") or {}).items()]
    return words


def schedule_line(entries: Iterable[Mapping[str, Any]]) -> str:
    return "; ".join(fault_line(e) for e in entries) or "no faults"


def base_workload(source: str | Path | None) -> dict[str, Any]:
    """The base workload as a mapping: the default, or a workload file / standard name (its
    own faults are replaced by each seed's)."""
    if source is None:
        return copy.deepcopy(DEFAULT_WORKLOAD)
    workload = load_workload(source)  # validates it, and finds a standard workload by name
    data = yaml.safe_load(Path(workload.source).read_text(encoding="utf-8"))
    data.pop("faults", None)
    data.pop("seed", None)
    return data


def draw_seed(base: Mapping[str, Any], seed: int, backend: str, options: Mapping[str, Any] | None = None,
              world: str = "sim", faults_max: int = 3, load: bool = True) -> dict[str, Any]:
    """The workload (a mapping) seed ``seed`` of a swarm over ``base`` runs against
    ``backend`` with ``options``: its load drawn (``lab.experiments.swarm_load``; ``load=False``
    keeps ``base``'s), then its faults against that load, then maybe a consumer's deaths
    against those faults (where the design's promises bring a dead consumer's read back).
    A pure function of its arguments,
    so the same seed draws the same run everywhere (``lab swarm``, ``lab mutants``' swarm
    trials, the tests)."""
    workload = draw_load(random.Random(f"swarm-load:{seed}"), base) if load else copy.deepcopy(dict(base))
    end = load_end(workload)  # WorkloadError for a load of unknown length, first
    timeout = (options or {}).get("timeout") or workload.get("timeout") or TIMEOUT.default
    shape = replace(shape_of(workload, end), timeout=timeout)
    entries, notes = draw_faults(seed, window_of(end), world_kinds(world), cast_of(backend, options, workload), faults_max,
                                 shape)
    reliable = parse_workload(dict(workload), workload.get("name", "<workload>")).reliable
    if load and _brings_back(backend, tuple(sorted((options or {}).items())), world, reliable):
        strikes = [(e["at"], fault_line(e)) for e in entries if e["fault"] in RESTARTING]
        deaths = draw_deaths(random.Random(f"swarm-deaths:{seed}"), workload, strikes, window_of(end))
    else:
        deaths = []
    if load and (values := _own_values(backend, tuple(sorted((options or {}).items())), world, reliable)):
        draw_own_options(random.Random(f"swarm-own-options:{seed}"), workload, dict(values))
    drawn = seed_workload(workload, seed, entries)
    if notes:
        drawn["description"] += "; timed: " + "; ".join(notes)
    if deaths:
        drawn["description"] += "; deaths: " + "; ".join(deaths)
    return drawn


def seed_workload(base: Mapping[str, Any], seed: int, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {**copy.deepcopy(dict(base)), "name": f"{base['name']}-s{seed}",
            "description": f"seed {seed} of a lab swarm over {base['name']}", "seed": seed, "faults": entries}
