"""Runs as Spark tasks: the executor `lab swarm --spark` and `lab matrix --spark` hand their
runs to, in place of their process pool.

``SparkRuns`` is a ``concurrent.futures.Executor``: each ``submit`` is one Spark job of one
task, which runs the function in an executor's Python (the same function the pool's worker
would run) and writes the run's folder — samples as Parquet, manifest beside them — under the
output folder, where the aggregation reads it; only the small summary the function returns
comes back to the driver. A job per run, not one job for all of them, because Spark aborts a
whole job when one task has failed ``spark.task.maxFailures`` times: here a run that failed
twice ends only its own job, and comes back as that run's failure (``on_failure``), while the
other runs go on. The swarm's and matrix's own loops keep deciding what runs when (a budget,
shrinking one candidate per seed), so a run's results are the same as the pool's.

``spark_context`` gives the SparkContext for ``--spark MASTER`` (``local[N]`` or
``spark://HOST:PORT``) with the retry setting, and stops the session it started on the way out
(Ctrl-C included: the jobs in flight are cancelled first, by ``SparkRuns.shutdown``).
"""

from __future__ import annotations

import re
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator

from lab.worlds import interrupt

#: a failed task runs once more: a worker that died (killed, out of memory) gets a second
#: chance; a run that raises is its own verdict inside the task and is not retried
MAX_FAILURES = 2
#: seconds an interrupted swarm waits for its cancelled jobs before stopping the session
STOP_GRACE = 5.0
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

    started = spark._session is None
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
