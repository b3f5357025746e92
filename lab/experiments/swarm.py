"""`lab swarm`: random fault mixes, one per seed, against one design — in the manner of
TigerBeetle's VOPR. This room draws the schedules, runs them through ``lab.experiments.runner`` in
worker processes, writes every run under one swarm folder (and nothing outside it), and
for each seed that breaks a promise writes a workload file that replays it exactly and a
shrunk one that still breaks it.

- **The draw** (``draw_schedule``) is a pure function of the seed, the base workload, the
  fault kinds the world applies and the design's nodes: 1..``faults_max`` faults, each a
  kind from ``lab.workloads.faults.REGISTRY`` that the world lists, its target and fields from
  ``FIELD_DRAWS``, its start and length inside the load window and clear of its last
  quarter, which stays healed. A kind the world applies and ``FIELD_DRAWS`` lacks stops
  the swarm before anything runs (``UndrawableKind``), so a new kind fails its test
  rather than being skipped in silence. A design joins by registering: its server nodes
  come from its ``Backend``.
- **A seed's run** is ``lab.experiments.runner.run`` of the base workload with that schedule and seed
  (so ``lab run seed-S.yaml --backend B --seed S`` gives the same samples, row for row).
- **Shrinking** (``Shrinker``) tries, one change at a time: removing each fault, halving
  each fault's duration and then its start, then halving the load (duration, rate,
  clients, warm-up); a change is kept when the run still breaks one of the promises the
  seed broke (the anomaly, ``broken_promises``: lost, duplicated, reordered, unexpected).
  Runs of different seeds' shrinkers share the workers.
- **A run that raises** is the seed's ``error`` verdict, with the real exception's type and
  message, its traceback in ``seed-<S>.error.txt``: each job runs through ``in_worker``,
  so what a worker raises crosses back as text, whatever the exception's class (one whose
  constructor takes arguments of its own would not unpickle, and would break the pool).

The swarm folder holds ``seed-<S>/`` (each seed's run folder), ``seed-<S>.yaml`` and
``seed-<S>-shrunk.yaml`` (+ ``seed-<S>-shrunk/``) for an invalid seed, ``seed-<S>.error.txt``
for a run that raised, and ``swarm.md`` / ``swarm.csv``.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import math
import os
import random
import shlex
import shutil
import time
import traceback
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator, Iterable, Mapping, Sequence, TextIO

import yaml

from lab.workloads import faults

from lab.worlds import interrupt
from lab.design.registry import backend_class
from lab.workloads.faults import ROLE_TARGETS, SHAPES, SIDED_SHAPES, Cast, FieldError, draw_time, parse_fault
from lab.history.paths import make_empty_folder
from lab.judge.verdict import ALLOWED, INVALID, VALID, judge_run
from lab.workloads.spec import WorkloadError, load_workload, parse_workload

#: The base workload when none is given: a few seconds of reliable load at a modest rate.
DEFAULT_WORKLOAD: dict[str, Any] = {
    "name": "swarm", "queues": 1, "producers": 2, "consumers": 2, "message_size": 100, "rate": 1000, "duration": 3,
    "warmup": 0.5, "ack": "reliable",
}
FIRST = 0.1  # faults start after this fraction of the load ...
HEALED = 0.25  # ... and have healed before its last quarter: the design must show it recovers
MIN_FAULT = 0.05  # seconds: a shorter fault hardly touches a run
DRAW_TRIES = 50  # redraws of one fault whose placement cuts nothing (a shape on too few nodes)
ERROR = "error"  # the verdict class of a run that raised instead of finishing
VERDICTS = (VALID, ALLOWED, INVALID, ERROR)
COLUMNS = ("seed", "faults", "verdict", "reason", "lost", "duplicated", "unexpected", "inversions", "run_dir")


class UndrawableKind(LookupError):
    """A fault kind the world applies that the swarm cannot draw yet (no ``FIELD_DRAWS`` entry)."""


# ----------------------------------------------------------------------------- the draw

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
    from lab.experiments.runner import world_class

    applies = set(getattr(world_class(world), "fault_kinds", ()))
    kinds = [kind for kind in faults.REGISTRY if kind in applies]
    missing = [kind for kind in kinds if kind not in FIELD_DRAWS]
    if missing:
        raise UndrawableKind(f"the swarm cannot draw a {missing[0]!r} fault yet (the {world} world applies it): "
                             f"add how to draw its target and fields to lab.experiments.swarm.FIELD_DRAWS")
    return kinds


def load_window(workload: Mapping[str, Any]) -> tuple[float, float]:
    """(first start, last heal) in seconds from the start of the run, for ``workload`` (a
    mapping); WorkloadError if the length of its load is not known beforehand."""
    end = parse_workload(dict(workload), workload.get("name", "<workload>")).load_seconds
    if end is None:
        raise WorkloadError(f"{workload.get('name')}: the swarm needs a load of known length "
                            "(`duration`, or `messages` with a `rate`) to place faults in it")
    return round(FIRST * end, 3), round((1 - HEALED) * end, 3)


def draw_schedule(seed: int, window: tuple[float, float], kinds: Sequence[str], cast: Cast,
                  faults_max: int = 3) -> list[dict[str, Any]]:
    """The fault entries (workload form) of ``seed``: a pure function of its arguments."""
    rng = random.Random(f"swarm:{seed}")
    entries = [_draw_fault(rng, rng.choice(list(kinds)), window, cast) for _ in range(rng.randint(1, faults_max))]
    return sorted(entries, key=lambda e: e["at"])


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
    """The server nodes ``backend`` runs on with ``options``, as its Backend names them."""
    from lab.experiments.runner import make_world

    return tuple(backend_class(backend)(make_world("sim", 0), options).server_nodes)


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
    """A workload's load in a few words: ``2 producers, 2 consumers, 1000 msg/s for 3 s``."""
    length = f"for {workload['duration']:g} s" if workload.get("duration") else f"{workload.get('messages')} messages"
    rate = f"{workload['rate']:g} msg/s" if workload.get("rate") else "closed loop"
    return (f"{workload.get('producers', 1)} producer(s), {workload.get('consumers', 1)} consumer(s), "
            f"{rate} {length}")


def schedule_line(entries: Iterable[Mapping[str, Any]]) -> str:
    return "; ".join(fault_line(e) for e in entries) or "no faults"


# ----------------------------------------------------------------------------- one run


@dataclass
class SeedRun:
    """What the swarm keeps of one run (it crosses from a worker process)."""

    seed: int
    faults: str
    verdict: str  # valid, allowed, invalid or error
    reason: str
    broken: tuple[str, ...] = ()  # the promises it broke (``broken_promises``)
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    inversions: int = 0
    run_dir: str = ""
    wall_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)


def broken_promises(verdict: Any) -> tuple[str, ...]:
    """The anomalies that make a checker ``Verdict`` invalid, each judged alone against the
    run's promises with the checker's explanations: lost, duplicated, reordered,
    unexpected, refused (puts refused with no fault); or "no evidence"."""
    if verdict.verdict != INVALID:
        return ()
    if verdict.problem:
        return ("no evidence",)
    counts = {"lost": verdict.lost, "duplicated": verdict.duplicated, "reordered": verdict.reordering.inversions,
              "unexpected": verdict.unexpected, "refused": verdict.failed.get("put", 0)}
    broken = []
    for anomaly, count in counts.items():
        alone = {name: (count if name == anomaly else 0) for name in counts}
        if count and judge_run(verdict.facts, attempts=verdict.attempts, enqueued=verdict.enqueued,
                               dequeued=verdict.dequeued, lost=alone["lost"], unexpected=alone["unexpected"],
                               duplicated=alone["duplicated"], inversions=alone["reordered"],
                               explained=verdict.explained, failed={"put": alone["refused"]}).verdict == INVALID:
            broken.append(anomaly)
    return tuple(broken)


def run_seed(workload: dict[str, Any], backend: str, options: dict[str, Any], seed: int, out: str,
             world: str = "sim") -> SeedRun:
    """One run of ``workload`` (a mapping) into ``out``, as a ``SeedRun``; a run that raises is
    verdict ``error``, its traceback beside the run folder. Runs in a worker process."""
    from lab.experiments.runner import run

    schedule = schedule_line(workload.get("faults") or [])
    log = io.StringIO()  # a design's log lines (a warning on recovery) go beside its run, not over the bar
    try:
        with contextlib.redirect_stderr(log):
            result = run(parse_workload(workload, f"{out}.yaml"), backend, world, seed=seed, out=out,
                         progress=False, options=options)
    except Exception as e:
        Path(f"{out}.error.txt").write_text(log.getvalue() + traceback.format_exc())
        return SeedRun(seed, schedule, ERROR, f"{type(e).__name__}: {e}".splitlines()[0])
    if log.getvalue():
        (result.run_dir / "stderr.txt").write_text(log.getvalue())
    v = result.verdict
    return SeedRun(seed, schedule, v.verdict, v.reason, broken_promises(v), v.lost, v.duplicated, v.unexpected,
                   v.reordering.inversions, str(result.run_dir), result.wall_seconds, list(result.warnings))


@dataclass(frozen=True)
class WorkerError:
    """What a worker raised, as text: its type's name, its message and its traceback. An
    exception object crosses back from a worker process only if it unpickles, and one whose
    constructor takes arguments of its own does not (the pool would report a TypeError about
    that constructor instead, and break); text always does."""

    type: str
    message: str
    traceback: str

    @property
    def reason(self) -> str:
        return f"{self.type}: {self.message}".splitlines()[0]


def in_worker(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, as every job of the swarm runs in a worker: what it raises (whatever
    its class) comes back as a ``WorkerError``, never as the exception itself."""
    try:
        return interrupt.worker_call(fn, *args)  # interrupted, a worker ends once fn has cleaned up
    except BaseException as e:  # noqa: BLE001 (all of it crosses back as text)
        if isinstance(e, KeyboardInterrupt):
            raise
        return WorkerError(type(e).__name__, str(e), traceback.format_exc())


def seed_run(outcome: SeedRun | WorkerError, seed: int, workload: Mapping[str, Any], out: str) -> SeedRun:
    """A job's outcome as a ``SeedRun``: a worker's error is the seed's ``error`` verdict, its
    traceback in ``<out>.error.txt`` (unless the run wrote its own there)."""
    if isinstance(outcome, SeedRun):
        return outcome
    path = Path(f"{out}.error.txt")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(outcome.traceback)
    return SeedRun(seed, schedule_line(workload.get("faults") or []), ERROR, outcome.reason)


class _InProcess(Executor):
    """``--jobs 1``: runs in this process, one at a time (a design registered at run time is seen)."""

    def submit(self, fn, /, *args, **kwargs):  # noqa: ANN001 (Executor's signature)
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 (handed to whoever reads the future)
            if isinstance(e, KeyboardInterrupt):
                raise
            future.set_exception(e)
        return future


# ----------------------------------------------------------------------------- shrinking


class Shrinker:
    """Shrinks one failing workload (a mapping): ``next()`` gives the next candidate to run
    (None when done), ``feed(run)`` its outcome. A candidate is kept when its run is invalid
    and breaks one of the promises still being chased (``target``)."""

    def __init__(self, workload: dict[str, Any], broken: Iterable[str], max_runs: int):
        self.best = copy.deepcopy(workload)
        self.target = frozenset(broken)
        self.max_runs, self.runs, self.kept = max_runs, 0, 0
        self.best_run: SeedRun | None = None
        self._steps = self._plan()
        self._candidate: dict[str, Any] | None = None
        self._answer: bool | None = None

    def next(self) -> dict[str, Any] | None:
        if self.runs >= self.max_runs:
            return None
        try:
            self._candidate = self._steps.send(self._answer) if self._answer is not None else next(self._steps)
        except StopIteration:
            return None
        self._answer = None
        return self._candidate

    def feed(self, run: SeedRun) -> bool:
        self.runs += 1
        kept = run.verdict == INVALID and bool(self.target & set(run.broken))
        if kept:
            self.best, self.best_run, self.kept = self._candidate, run, self.kept + 1
            self.target &= set(run.broken)  # chase what both broke: never drift to another promise
        self._answer = kept
        return kept

    def _plan(self) -> Generator[dict[str, Any], bool, None]:
        """Passes of single changes, each tried on the smallest failing workload so far,
        until a pass keeps none."""
        while True:
            kept_any = False
            i = 0
            while i < len(self.best["faults"]):  # drop each fault
                candidate = self._changed(lambda w: w["faults"].pop(i))
                if candidate is not None and (yield candidate):
                    kept_any = True
                else:
                    i += 1
            for i in range(len(self.best["faults"])):  # shorter, then earlier
                for key, floor in (("duration", MIN_FAULT), ("at", 0.0)):
                    while self.best["faults"][i][key] / 2 >= max(floor, 0.01):
                        candidate = self._changed(_halve_fault_field(i, key))
                        if candidate is None or not (yield candidate):
                            break
                        kept_any = True
            for change in self._load_changes():  # a lighter load
                while True:
                    candidate = self._changed(change)
                    if candidate is None or not (yield candidate):
                        break
                    kept_any = True
            if not kept_any:
                return

    @staticmethod
    def _load_changes() -> list[Callable[[dict[str, Any]], Any]]:
        def halve(key: str, floor: float, whole: bool = False) -> Callable[[dict[str, Any]], Any]:
            def change(w: dict[str, Any]) -> None:
                if w.get(key) and w[key] / 2 >= floor:
                    w[key] = int(w[key] // 2) if whole else round(w[key] / 2, 3)
            return change

        return [halve("duration", 0.2), halve("messages", 20, whole=True), halve("rate", 20),
                halve("producers", 1, whole=True), halve("consumers", 1, whole=True), halve("warmup", 0.05),
                lambda w: w.pop("warmup", None)]

    def _changed(self, change: Callable[[dict[str, Any]], Any]) -> dict[str, Any] | None:
        """``best`` with ``change`` applied, or None if that changes nothing or makes a
        workload that does not parse (a fault past the end of a shorter load)."""
        candidate = copy.deepcopy(self.best)
        change(candidate)
        if candidate == self.best:
            return None
        try:
            parse_workload(candidate)
        except WorkloadError:
            return None
        return candidate


def _halve_fault_field(number: int, key: str) -> Callable[[dict[str, Any]], None]:
    def change(workload: dict[str, Any]) -> None:
        fault = workload["faults"][number]
        fault[key] = round(fault[key] / 2, 3)

    return change


# ----------------------------------------------------------------------------- the swarm


@dataclass
class Finding:
    """An invalid (or error) seed: its run, its replay file and command, and its shrunk form."""

    run: SeedRun
    file: Path
    command: str
    shrunk_file: Path | None = None
    shrunk_command: str | None = None
    shrunk: SeedRun | None = None
    shrunk_load: dict[str, Any] = field(default_factory=dict)  # the shrunk workload
    shrink_runs: int = 0


@dataclass
class SwarmResult:
    directory: Path
    backend: str
    options: dict[str, Any]
    seeds_asked: int
    runs: list[SeedRun]
    findings: list[Finding]
    wall_seconds: float
    stopped_by_budget: bool

    @property
    def counts(self) -> Counter:
        return Counter(r.verdict for r in self.runs)

    @property
    def markdown_path(self) -> Path:
        return self.directory / "swarm.md"

    @property
    def csv_path(self) -> Path:
        return self.directory / "swarm.csv"


def parse_seeds(text: str) -> range:
    """``A..B`` (both included) or one seed ``N``; ValueError says what is wrong."""
    first, sep, last = text.partition("..")
    try:
        low, high = int(first), int(last) if sep else int(first)
    except ValueError:
        raise ValueError(f"--seeds takes A..B (say 1..200) or one seed N, got {text!r}") from None
    if high < low:
        raise ValueError(f"--seeds {text}: the last seed is before the first")
    return range(low, high + 1)


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


def seed_workload(base: Mapping[str, Any], seed: int, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {**copy.deepcopy(dict(base)), "name": f"{base['name']}-s{seed}",
            "description": f"seed {seed} of a lab swarm over {base['name']}", "seed": seed, "faults": entries}


def replay_command(path: Path, backend: str, seed: int, options: Mapping[str, Any]) -> str:
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(path)
    words = ["lab", "run", shown, "--backend", backend, "--seed", str(seed)]
    for key, value in options.items():
        words += ["--option", f"{key}={value}"]
    return shlex.join(words)


def swarm(backend: str, seeds: Sequence[int], *, budget: float | None = None, jobs: int | None = None,
          options: Mapping[str, Any] | None = None, workload: str | Path | None = None,
          out: str | Path | None = None, shrink: bool = True, faults_max: int = 3, shrink_runs: int = 40,
          progress: bool | TextIO = True, echo: Callable[[str], None] = print) -> SwarmResult:
    """Run ``seeds`` against ``backend``; every mistake in the arguments fails before
    anything is written. ``budget``: wall seconds for the whole swarm, shrinking included
    (runs in flight then finish; the rest are not started)."""
    started = time.monotonic()
    deadline = started + budget if budget else None
    options = dict(options or {})
    backend_class(backend).check_options(options, "sim")  # BadOption, UnknownBackend before anything runs
    if faults_max < 1 or shrink_runs < 1:
        raise ValueError("faults_max and shrink_runs must be >= 1")
    base = base_workload(workload)
    window = load_window(base)
    kinds = world_kinds("sim")
    cast = cast_of(backend, options, base)
    schedules = {seed: seed_workload(base, seed, draw_schedule(seed, window, kinds, cast, faults_max))
                 for seed in seeds}
    directory = make_empty_folder(out, f"swarm-{{time}}-{backend}")

    jobs = jobs or len(os.sched_getaffinity(0))
    executor: Executor = _InProcess() if jobs == 1 else _pool(jobs)
    runs: list[SeedRun] = []
    findings: list[Finding] = []
    completed = interrupted = False
    try:
        stopped = _search(executor, jobs, schedules, backend, options, directory, deadline, progress, echo,
                          runs, findings)
        if shrink and findings:
            stopped |= _shrink_all(executor, jobs, findings, schedules, backend, options, directory, deadline,
                                   shrink_runs, progress, echo)
        completed = True
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        # interrupted (Ctrl-C, SIGTERM) or failed: the runs in flight are cut short, not waited for
        interrupt.stop_pool(executor, interrupted=not completed)
        if interrupted:  # after the pool: its workers have removed the run folders they had begun
            interrupt.mark_interrupted(directory, "swarm", backend=backend, seeds_run=len(runs),
                                       findings=[f.run.seed for f in findings])
    runs.sort(key=lambda r: r.seed)
    findings.sort(key=lambda f: f.run.seed)
    result = SwarmResult(directory, backend, options, len(schedules), runs, findings,
                         time.monotonic() - started, stopped)
    _write_csv(result)
    result.markdown_path.write_text(markdown(result) + "\n")
    return result


def _pool(jobs: int) -> Executor:
    import multiprocessing

    # forkserver: workers start from a clean process, not a copy of one that may hold threads
    # interrupt.worker_init: a worker dies with its parent, and a signal ends its run cleanly, then it
    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("forkserver"),
                               initializer=interrupt.worker_init)


def _bar(total: int, desc: str, unit: str, progress: bool | TextIO):
    from tqdm import tqdm

    if progress is True:
        return tqdm(total=total, desc=desc, unit=unit, disable=None, leave=False)
    if progress is False:
        return tqdm(total=total, disable=True)
    return tqdm(total=total, desc=desc, unit=unit, file=progress, mininterval=0, leave=True)


def _search(executor: Executor, jobs: int, schedules: dict[int, dict[str, Any]], backend: str,
            options: dict[str, Any], directory: Path, deadline: float | None, progress: bool | TextIO,
            echo: Callable[[str], None], runs: list[SeedRun], findings: list[Finding]) -> bool:
    """Run every seed (at most ``jobs`` at a time) until done or past ``deadline``; True if
    the deadline stopped it."""
    todo = iter(schedules)
    inflight: dict[Future, int] = {}
    stopped = False
    bar = _bar(len(schedules), f"swarm {backend}", "seed", progress)
    while True:
        while len(inflight) < jobs and not (stopped := stopped or _past(deadline)):
            seed = next(todo, None)
            if seed is None:
                break
            inflight[executor.submit(in_worker, run_seed, schedules[seed], backend, options, seed,
                                     str(directory / f"seed-{seed}"))] = seed
        if not inflight:
            break
        done, _ = wait(inflight, return_when=FIRST_COMPLETED)
        for future in done:
            seed = inflight.pop(future)
            run = seed_run(future.result(), seed, schedules[seed], str(directory / f"seed-{seed}"))
            runs.append(run)
            if run.verdict in (INVALID, ERROR):
                findings.append(_finding(run, schedules[seed], backend, options, directory))
                _say(bar, echo, f"  seed {seed}: {run.verdict.upper()} ({run.reason})\n"
                                f"    faults: {run.faults}\n    replay: {findings[-1].command}")
            bar.update(1)
            bar.set_postfix_str(", ".join(f"{k} {n}" for k, n in sorted(Counter(r.verdict for r in runs).items())))
    bar.close()
    return stopped


def _say(bar: Any, echo: Callable[[str], None], text: str) -> None:
    """A line above a live bar (tqdm's own write keeps the bar whole), else through ``echo``."""
    if bar.disable:
        echo(text)
    else:
        bar.write(text, file=bar.fp)


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _finding(run: SeedRun, workload: dict[str, Any], backend: str, options: dict[str, Any],
             directory: Path) -> Finding:
    path = directory / f"seed-{run.seed}.yaml"
    _write_workload(path, workload, f"lab swarm: seed {run.seed} of {backend}: {run.verdict.upper()} ({run.reason})")
    return Finding(run, path, replay_command(path, backend, run.seed, options))


def _write_workload(path: Path, workload: dict[str, Any], headline: str) -> None:
    body = yaml.safe_dump(workload, sort_keys=False, default_flow_style=None, width=200)
    path.write_text(f"# {headline}\n{body}")


def _shrink_all(executor: Executor, jobs: int, findings: list[Finding], schedules: dict[int, dict[str, Any]],
                backend: str, options: dict[str, Any], directory: Path, deadline: float | None, max_runs: int,
                progress: bool | TextIO, echo: Callable[[str], None]) -> bool:
    """Shrink every invalid seed, one candidate per seed in flight; True if the deadline stopped it."""
    shrinkers = {f.run.seed: Shrinker(schedules[f.run.seed], f.run.broken, max_runs)
                 for f in findings if f.run.verdict == INVALID}
    for s in shrinkers.values():
        s.best["name"] += "-shrunk"
        s.best["description"] += ", shrunk"
    trials = directory / "shrinking"
    waiting = list(shrinkers)
    inflight: dict[Future, tuple[int, Path, dict[str, Any]]] = {}
    bar = _bar(len(shrinkers) * max_runs, f"shrinking {len(shrinkers)} seed(s)", "run", progress)
    stopped = False
    while True:
        while waiting and len(inflight) < jobs and not (stopped := stopped or _past(deadline)):
            seed = waiting.pop(0)
            shrinker = shrinkers[seed]
            candidate = shrinker.next()
            if candidate is None:
                bar.update(max_runs - shrinker.runs)  # done early: its share of the bar
                _say(bar, echo, f"  seed {seed}: shrunk in {shrinker.runs} runs to "
                                f"{schedule_line(shrinker.best['faults']) if shrinker.kept else 'nothing smaller'}")
                continue
            out = trials / f"seed-{seed}-try-{shrinker.runs + 1}"
            inflight[executor.submit(in_worker, run_seed, candidate, backend, options, seed, str(out))] = \
                (seed, out, candidate)
        if not inflight:
            break
        done, _ = wait(inflight, return_when=FIRST_COMPLETED)
        for future in done:
            seed, out, candidate = inflight.pop(future)
            previous = shrinkers[seed].best_run
            if shrinkers[seed].feed(seed_run(future.result(), seed, candidate, str(out))) and previous is not None:
                shutil.rmtree(previous.run_dir, ignore_errors=True)  # superseded by a smaller one
            elif shrinkers[seed].best_run is None or shrinkers[seed].best_run.run_dir != str(out):
                shutil.rmtree(out, ignore_errors=True)
            waiting.append(seed)
            bar.update(1)
    bar.close()
    for finding in findings:
        shrinker = shrinkers.get(finding.run.seed)
        if shrinker is None:
            continue
        finding.shrink_runs = shrinker.runs
        if shrinker.best_run is not None:
            seed = finding.run.seed
            target = directory / f"seed-{seed}-shrunk"
            shutil.move(shrinker.best_run.run_dir, target)
            shrinker.best_run.run_dir = str(target)
            finding.shrunk = shrinker.best_run
            finding.shrunk_load = shrinker.best
            finding.shrunk_file = directory / f"seed-{seed}-shrunk.yaml"
            _write_workload(finding.shrunk_file, shrinker.best,
                            f"lab swarm: seed {seed} of {backend}, shrunk in {shrinker.runs} runs: "
                            f"INVALID ({finding.shrunk.reason})")
            finding.shrunk_command = replay_command(finding.shrunk_file, backend, seed, options)
    shutil.rmtree(trials, ignore_errors=True)
    return stopped


# ----------------------------------------------------------------------------- the report


def report_lines(result: SwarmResult) -> list[str]:
    """What `lab swarm` prints at the end."""
    counts = result.counts
    opts = " ".join(f"{k}={v}" for k, v in result.options.items()) or "default options"
    lines = [f"swarm of {result.backend} ({opts}): {len(result.runs)} of {result.seeds_asked} seeds ran in "
             f"{result.wall_seconds:.0f} s wall" + (" (the budget was spent)" if result.stopped_by_budget else ""),
             "verdicts: " + ", ".join(f"{v} {counts.get(v, 0)}" for v in VERDICTS)]
    for f in result.findings:
        lines += [f"seed {f.run.seed}: {f.run.verdict.upper()} ({f.run.reason})",
                  f"  faults: {f.run.faults}", f"  replay: {f.command}"]
        if f.shrunk is not None:
            lines += [f"  shrunk in {f.shrink_runs} runs to: {f.shrunk.faults}; {load_line(f.shrunk_load)} "
                      f"({f.shrunk.lost} lost, {f.shrunk.duplicated} duplicated, {f.shrunk.inversions} inversions)",
                      f"  replay: {f.shrunk_command}"]
        elif f.run.verdict == INVALID:
            lines.append(f"  not shrunk (tried {f.shrink_runs} runs)" if f.shrink_runs else "  not shrunk")
        else:
            lines.append(f"  traceback: {f.file.with_suffix('.error.txt')}")
    lines.append(f"summary: {result.markdown_path} and {result.csv_path}")
    return lines


def markdown(result: SwarmResult) -> str:
    lines = ["# lab swarm", "", *(f"    {line}" for line in report_lines(result)[:-1]), "",
             "| seed | faults | verdict | reason | lost | dup | unexp | inversions |", "|---|" * 8]
    for r in result.runs:
        verdict = f"**{r.verdict}**" if r.verdict in (INVALID, ERROR) else r.verdict
        lines.append(f"| {r.seed} | {r.faults} | {verdict} | {r.reason.replace('|', '/')} | {r.lost} | "
                     f"{r.duplicated} | {r.unexpected} | {r.inversions} |")
    return "\n".join(lines)


def _write_csv(result: SwarmResult) -> None:
    with result.csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(asdict(r) for r in result.runs)
