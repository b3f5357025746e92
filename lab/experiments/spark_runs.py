"""Runs as Spark tasks: the executor `lab swarm --spark` and `lab matrix --spark` hand their
runs to, in place of their process pool.

``SparkRuns`` is a ``concurrent.futures.Executor``. A task runs the function in an executor's
Python (the same function the pool's worker would run) and writes the run's folder — samples as
Parquet, manifest beside them — under the output folder, where the aggregation reads it; only
the small summary the function returns comes back to the driver. Two ways in:

- ``run_all``: many runs known up front (the swarm's seeds, the matrix's runs) as ONE job with a
  task per run, so the job's scheduling is paid once, not per run. Each task also leaves its
  summary in the output folder (``.spark-tasks/``), which the driver reads as tasks end — the
  progress, and what survives when Spark aborts the whole job because one task failed
  ``spark.task.maxFailures`` times: the runs with no summary then go again, each as its own job
  (``submit``), so the run that fails twice is that run's failure and the others go on.
- ``submit``: one Spark job of one task (shrinking, where the next run depends on the last; and
  ``run_all``'s second chance). A job that fails comes back as ``on_failure(TaskFailed)``.

``spark_context`` gives the SparkContext for ``--spark MASTER`` (``local[N]`` or
``spark://HOST:PORT``) with the retry setting, and stops the session it started on the way out
(Ctrl-C included: the jobs in flight are cancelled first, by ``SparkRuns.shutdown``).
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import time
import uuid
from concurrent.futures import Executor, Future, ThreadPoolExecutor, as_completed
from concurrent.futures import wait as wait_for
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator, Sequence

from lab.worlds import interrupt

#: a failed task runs once more: a worker that died (killed, out of memory) gets a second
#: chance; a run that raises is its own verdict inside the task and is not retried
MAX_FAILURES = 2
#: seconds an interrupted swarm waits for its cancelled jobs before stopping the session
STOP_GRACE = 5.0
#: seconds between the driver's looks for the summaries ``run_all``'s tasks have left
POLL = 0.2
#: the folder, inside the output folder, where ``run_all``'s tasks leave their summaries
SUMMARIES = ".spark-tasks"
#: seconds Spark leaves a cancelled task's Python worker before killing it (spark.python.task.killTimeout)
KILL_TIMEOUT = 2.0
_LOCAL = re.compile(r"^local\[(\d+|\*)\]$")


def with_retries(master: str) -> str:
    """``local[N]`` as ``local[N,MAX_FAILURES]``: local mode ignores spark.task.maxFailures and
    takes its retries from the master URL instead; any other master is returned as is."""
    match = _LOCAL.match(master.strip())
    return f"local[{match.group(1)},{MAX_FAILURES}]" if match else master.strip()


def check_master(master: str) -> str:
    """``master`` if it is ``local``, ``local[...]`` or ``spark://HOST:PORT``; ValueError otherwise."""
    if master == "local" or master.startswith("local[") or re.match(r"^spark://[^:/]+:\d+$", master):
        return master
    raise ValueError(f"--spark {master!r}: use local[N] (N cores on this machine) or spark://HOST:PORT "
                     "(a standalone cluster's master)")


@contextmanager
def spark_context(master: str) -> Iterator[Any]:
    """The SparkContext to run tasks on, on ``master`` (a process's one session: one already
    started is used as it is); the session this call started is stopped on the way out."""
    from lab.aggregate import spark

    started = not spark.session_started()
    session = spark.spark_session(with_retries(check_master(master)),
                                  {"spark.task.maxFailures": str(MAX_FAILURES)})
    try:
        yield session.sparkContext
    finally:
        if started:
            spark.stop_session()


class TaskFailed(RuntimeError):
    """A run's Spark task failed ``MAX_FAILURES`` times (its worker died each time)."""


def _task(fn: Callable[..., Any], args: tuple, init: Callable[[], None] | None, _: Any) -> Any:
    """In an executor's Python: ``fn(*args)``, after ``init`` (once per task: cheap and idempotent)."""
    if init is not None:
        init()
    return fn(*args)


class Skipped:
    """A ``run_all`` task that started after the deadline: its run was not started."""


def _batch_task(fn: Callable[..., Any], init: Callable[[], None] | None, folder: str, deadline: float | None,
                item: tuple[int, tuple]) -> int:
    """In an executor's Python: run ``item``'s call (unless past ``deadline``, wall-clock seconds)
    and leave its summary as ``<folder>/<index>.pkl``, whole or not at all (renamed into place)."""
    index, args = item
    if deadline is not None and time.time() >= deadline:
        result: Any = Skipped()
    else:
        if init is not None:
            init()
        result = fn(*args)
    path = Path(folder) / f"{index}.pkl"
    part = path.with_name(f"{index}.{uuid.uuid4().hex}.part")  # a retried attempt writes its own
    part.write_bytes(pickle.dumps(result))
    os.replace(part, path)
    return index


def _resolved(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class SparkRuns(Executor):
    """Each ``submit(fn, *args)``: a Spark job of one task running ``fn(*args)`` on the cluster,
    at most ``slots`` at a time (threads on the driver wait on the jobs). A job that fails —
    its task failed ``MAX_FAILURES`` times — resolves to ``on_failure(TaskFailed)``, or raises
    it when ``on_failure`` is None."""

    def __init__(self, sc: Any, slots: int, init: Callable[[], None] | None = None,
                 on_failure: Callable[[TaskFailed], Any] | None = None) -> None:
        self._sc = sc
        self.slots = max(1, slots)
        self._init = init
        self._on_failure = on_failure
        self._threads = ThreadPoolExecutor(self.slots, thread_name_prefix="spark-run")

    def submit(self, fn, /, *args, **kwargs) -> Future:  # noqa: ANN001 (Executor's signature)
        if kwargs:
            fn = partial(fn, **kwargs)
        return self._threads.submit(self._job, fn, args)

    def _job(self, fn: Callable[..., Any], args: tuple) -> Any:
        try:
            return self._sc.parallelize([0], 1).map(partial(_task, fn, args, self._init)).collect()[0]
        except Exception as e:  # Py4JJavaError: the job aborted (or was cancelled)
            failed = TaskFailed(_first_line(e))
            if self._on_failure is None:
                raise failed from e
            return self._on_failure(failed)

    def run_all(self, fn: Callable[..., Any], calls: Sequence[tuple[Hashable, tuple]], out: str | Path,
                deadline: float | None = None) -> Iterator[tuple[Hashable, Future]]:
        """``fn(*args)`` for every ``(key, args)`` of ``calls``, as one Spark job of a task per
        call, in order; yields ``(key, future)`` as each run ends (the future already resolved,
        except for a second chance's). ``out``: the output folder every worker and the driver
        see. ``deadline`` (``time.monotonic()``): a task that starts after it runs nothing and
        yields nothing — the runs in flight finish, the rest are not started."""
        folder = Path(out) / SUMMARIES
        folder.mkdir(parents=True, exist_ok=True)
        keys = [key for key, _ in calls]
        # the executors' clocks are wall clocks: the deadline as one, for the task to check
        wall = None if deadline is None else time.time() + (deadline - time.monotonic())
        group = f"run-all-{uuid.uuid4().hex}"
        job = self._threads.submit(self._batch_job, fn, [(i, args) for i, (_, args) in enumerate(calls)],
                                   str(folder), wall, group)
        seen: set[int] = set()
        try:
            while True:
                ended = job.done()  # before the look: a look after the job's end sees every summary
                for index, result in self._new_summaries(folder, seen):
                    if not isinstance(result, Skipped):
                        yield keys[index], _resolved(result)
                if ended:
                    break
                wait_for([job], timeout=POLL)
            if job.exception() is None:
                return
            # Spark aborted the job: one task failed MAX_FAILURES times, and the others in flight
            # were killed with it. Once they are gone, each run without a summary goes again alone.
            self._settle(group)
            for index, result in self._new_summaries(folder, seen):  # ended during the abort
                if not isinstance(result, Skipped):
                    yield keys[index], _resolved(result)
            interrupt.remove_unfinished_runs(out)  # the killed tasks' half-written run folders
            again = {}
            for index in (i for i in range(len(calls)) if i not in seen):
                if deadline is not None and time.monotonic() >= deadline:
                    break
                again[self.submit(fn, *calls[index][1])] = index
            for future in as_completed(again):
                yield keys[again[future]], future
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _batch_job(self, fn: Callable[..., Any], items: list[tuple[int, tuple]], folder: str,
                   deadline: float | None, group: str) -> None:
        self._sc.setJobGroup(group, "lab runs", interruptOnCancel=True)
        task = partial(_batch_task, fn, self._init, folder, deadline)
        # a partition per run: Spark hands them out in order, a core at a time, as the pool does
        self._sc.parallelize(items, max(1, len(items))).map(task).count()

    @staticmethod
    def _new_summaries(folder: Path, seen: set[int]) -> Iterator[tuple[int, Any]]:
        for path in folder.glob("*.pkl"):
            index = int(path.stem)
            if index not in seen:
                seen.add(index)
                yield index, pickle.loads(path.read_bytes())

    def _settle(self, group: str) -> None:
        """Wait (at most STOP_GRACE) until the aborted job's tasks have stopped running, then as
        long again as Spark gives a killed task's Python worker, so that none still writes."""
        tracker = self._sc.statusTracker()
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline:
            stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup(group)
                      for s in (getattr(tracker.getJobInfo(j), "stageIds", None) or [])]
            if not any(stage is not None and stage.numActiveTasks for stage in stages):
                break
            time.sleep(POLL)
        time.sleep(KILL_TIMEOUT)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if not wait:
            self._sc.cancelAllJobs()  # the runs in flight end now (their Python workers killed)
        self._threads.shutdown(wait=wait, cancel_futures=cancel_futures)
        if not wait:
            # the cancelled jobs end within Spark's task-kill timeout; a session stopped under them
            # logs its own teardown as errors (a broadcast block gone), which says nothing here
            deadline = time.monotonic() + STOP_GRACE
            for thread in list(getattr(self._threads, "_threads", ())):
                thread.join(max(0.0, deadline - time.monotonic()))
            self._sc.setLogLevel("OFF")


def remove_cut_runs(directory: str | Path) -> None:
    """After an interrupt, once the session has stopped: the run folders whose task was killed
    (a pool's worker removes its own; a killed Spark worker cannot) — those with samples but no
    manifest, then the folders left empty, deepest first."""
    interrupt.remove_unfinished_runs(directory)
    folders = sorted((p for p in Path(directory).rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
    for folder in folders:
        if not any(folder.iterdir()):
            folder.rmdir()


def _first_line(error: BaseException) -> str:
    """What a failed job says, briefly: the task's own exception line when Spark gives it."""
    text = str(error)
    for line in text.splitlines():
        if "Error:" in line or "Exception:" in line:
            return line.strip()[:300]
    return (text.splitlines() or [type(error).__name__])[0][:300]
