"""One seed's run as the swarm's worker processes run it: ``run_seed`` (a run of
``lab.experiments.runner`` kept as a ``SeedRun``, with the promises it broke), ``in_worker``
(what a job raises crosses back as a ``WorkerError`` of text, whatever the exception's class:
one whose constructor takes arguments of its own would not unpickle, and would break the
pool), ``seed_run`` (a job's outcome as a ``SeedRun``), and the executors that run the jobs:
a forkserver pool, or this process for ``--jobs 1``. Workers pickle these functions by
module path, so they stay top-level names of this module.
"""

from __future__ import annotations

import contextlib
import io
import traceback
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, ParamSpec, TypeVar

from lab.worlds import interrupt
from lab.experiments.swarm_draw import schedule_line
from lab.workloads.spec import parse_workload

P = ParamSpec("P")
T = TypeVar("T")

ERROR = "error"  # the verdict class of a run that raised instead of finishing


@dataclass
class SeedRun:
    """What the swarm keeps of one run (it crosses from a worker process)."""

    seed: int
    faults: str
    verdict: str  # valid, allowed, invalid, no evidence (``lab.judge.findings.Verdict``) or error
    reason: str
    broken: tuple[str, ...] = ()  # what it broke: lost, duplicated, reordered, unexpected, refused
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    inversions: int = 0
    run_dir: str = ""
    wall_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    #: a sim run's history in 16 hex digits (``history_digest``): equal for the same workload, seed,
    #: options and code, whatever the run's id or folder; "" for a live run or one that raised
    digest: str = ""


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
    c = result.check
    digest = history_digest(result.run_dir / "samples.parquet") if world == "sim" else ""
    return SeedRun(seed, schedule, str(c.verdict), c.reason, c.judgement.broken, c.counts.lost, c.counts.duplicated,
                   c.counts.unexpected, c.reordering.inversions, str(result.run_dir), result.wall_seconds,
                   list(result.warnings), digest)


def history_digest(samples: Path) -> str:
    """A digest of a run's samples, every row in order, over the columns that say what
    happened (not the run's id, world, design or scenario name, the same on every row): two
    sim runs that did the same thing have the same digest. "" if there are no samples."""
    import hashlib

    import pandas as pd
    import pyarrow.parquet as pq

    from lab.history.record import SAMPLE_SCHEMA

    if not samples.exists():
        return ""
    per_run = {"run_id", "world", "backend", "scenario"}
    table = pq.read_table(samples, columns=[n for n in SAMPLE_SCHEMA.names if n not in per_run])
    rows = pd.util.hash_pandas_object(table.to_pandas(), index=False).to_numpy()
    return hashlib.sha256(rows.tobytes()).hexdigest()[:16]


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


class InProcess(Executor):
    """``--jobs 1``: runs in this process, one at a time (a design registered at run time is seen)."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:  # Executor's signature
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 (handed to whoever reads the future)
            if isinstance(e, KeyboardInterrupt):
                raise
            future.set_exception(e)
        return future


def process_pool(jobs: int) -> Executor:
    import multiprocessing

    # forkserver: workers start from a clean process, not a copy of one that may hold threads
    # interrupt.worker_init: a worker dies with its parent, and a signal ends its run cleanly, then it
    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("forkserver"),
                               initializer=interrupt.worker_init)
