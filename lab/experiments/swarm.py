"""`lab swarm`: random fault mixes, one per seed, against one design — in the manner of
TigerBeetle's VOPR. This room drives the swarm: it draws each seed's schedule
(``lab.experiments.swarm_draw``), runs them through ``lab.experiments.runner`` in worker
processes (``lab.experiments.swarm_worker``), writes every run under one swarm folder (and
nothing outside it), and for each seed that breaks a promise writes a workload file that
replays it exactly and a shrunk one that still breaks it (``lab.experiments.swarm_shrink``).

- **A seed's run** is ``lab.experiments.runner.run`` of the base workload with that schedule and seed
  (so ``lab run seed-S.yaml --backend B --seed S`` gives the same samples, row for row).
- **Shrinking**: runs of different seeds' shrinkers share the workers.
- **A run that raises** is the seed's ``error`` verdict, with the real exception's type and
  message, its traceback in ``seed-<S>.error.txt``.
- **On Spark** (``spark=MASTER``): every run, shrinking's included, is a Spark task
  (``lab.experiments.spark_runs``) instead of a pool's job, so the verdicts are the same: the
  seeds as one job of a task per seed, each shrinking candidate as a job of its own; a task whose
  worker died twice is that seed's ``error`` verdict.

The swarm folder holds ``seed-<S>/`` (each seed's run folder), ``seed-<S>.yaml`` and
``seed-<S>-shrunk.yaml`` (+ ``seed-<S>-shrunk/``) for an invalid seed, ``seed-<S>.error.txt``
for a run that raised, and ``swarm.md`` / ``swarm.csv``.
"""

from __future__ import annotations

import contextlib
import csv
import os
import shlex
import shutil
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TextIO

import yaml

from lab.worlds import interrupt
from lab.design.registry import backend_class
from lab.experiments.swarm_draw import base_workload, draw_seed, load_line, schedule_line
from lab.experiments.swarm_shrink import Shrinker
from lab.experiments.swarm_worker import (ERROR, InProcess, SeedRun, WorkerError, in_worker, process_pool, run_seed,
                                          seed_run)
from lab.history.paths import make_empty_folder
from lab.judge.findings import Verdict

VERDICTS = (*Verdict, ERROR)  # no evidence among them: counted apart, neither a pass nor a finding
COLUMNS = ("seed", "load", "faults", "verdict", "reason", "lost", "duplicated", "unexpected", "inversions", "run_dir")


@dataclass
class SeedFinding:
    """An invalid (or error) seed: its run, its replay file and command, and its shrunk form."""

    run: SeedRun
    file: Path
    command: str
    shrunk_file: Path | None = None
    shrunk_command: str | None = None
    shrunk: SeedRun | None = None
    shrunk_load: dict[str, Any] = field(default_factory=dict)  # the shrunk workload
    shrink_runs: int = 0
    load: str = ""  # the seed's load in words


@dataclass
class SwarmResult:
    directory: Path
    backend: str
    options: dict[str, Any]
    seeds_asked: int
    runs: list[SeedRun]
    findings: list[SeedFinding]
    wall_seconds: float
    stopped_by_budget: bool
    loads: dict[int, str] = field(default_factory=dict)  # each seed's load, in words

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


def replay_command(path: Path, backend: str, seed: int, options: Mapping[str, Any]) -> str:
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(path)
    words = ["lab", "run", shown, "--backend", backend, "--seed", str(seed)]
    for key, value in options.items():
        words += ["--option", f"{key}={value}"]
    return shlex.join(words)


def swarm(backend: str, seeds: Sequence[int], *, budget: float | None = None, jobs: int | None = None,
          options: Mapping[str, Any] | None = None, workload: str | Path | None = None,
          out: str | Path | None = None, shrink: bool = True, faults_max: int = 3, shrink_runs: int = 40,
          progress: bool | TextIO = True, echo: Callable[[str], None] = print,
          spark: str | None = None, load: bool | None = None) -> SwarmResult:
    """Run ``seeds`` against ``backend``; every mistake in the arguments fails before
    anything is written. ``budget``: wall seconds for the whole swarm, shrinking included
    (runs in flight then finish; the rest are not started). ``spark``: a Spark master
    (``local[N]``, ``spark://HOST:PORT``) whose tasks run the seeds, ``jobs`` at a time
    (default: twice the cluster's cores). ``load``: draw each seed's load as well as its
    faults (default: with the default base workload, not with one given)."""
    started = time.monotonic()
    options = dict(options or {})
    if shrink_runs < 1:
        raise ValueError("shrink_runs must be >= 1")
    schedules = draws(backend, seeds, options=options, workload=workload, faults_max=faults_max, load=load)
    deadline = time.monotonic() + budget if budget else None  # the runs' budget: drawing every seed comes first
    if spark is not None:
        from lab.experiments.spark_runs import check_master

        check_master(spark)  # ValueError before the folder is made
    directory = make_empty_folder(out, f"swarm-{{time}}-{backend}")

    stack = contextlib.ExitStack()  # the Spark session this swarm starts, if any
    if spark is not None:
        from lab.experiments.spark_runs import spark_context, SparkRuns

        sc = stack.enter_context(spark_context(spark))
        # twice the cores in flight: a job's own start (a quarter second here) overlaps another's run,
        # so no core waits for it; the order of the seeds' runs does not change what each finds
        jobs = jobs or 2 * sc.defaultParallelism
        executor: Executor = SparkRuns(sc, jobs, on_failure=_task_failed)
    else:
        jobs = jobs or len(os.sched_getaffinity(0))
        executor = InProcess() if jobs == 1 else process_pool(jobs)
    runs: list[SeedRun] = []
    findings: list[SeedFinding] = []
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
        stack.close()  # Spark's session stopped: its Python workers with it
        if interrupted:  # after the pool: its workers have removed the run folders they had begun
            if spark is not None:  # a Spark task's worker is killed, not left to clean up
                from lab.experiments.spark_runs import remove_cut_runs

                remove_cut_runs(directory)
            interrupt.mark_interrupted(directory, "swarm", backend=backend, seeds_run=len(runs),
                                       findings=[f.run.seed for f in findings])
    runs.sort(key=lambda r: r.seed)
    findings.sort(key=lambda f: f.run.seed)
    result = SwarmResult(directory, backend, options, len(schedules), runs, findings,
                         time.monotonic() - started, stopped, {seed: load_line(w) for seed, w in schedules.items()})
    _write_csv(result)
    result.markdown_path.write_text(markdown(result) + "\n")
    return result


def draws(backend: str, seeds: Sequence[int], *, options: Mapping[str, Any] | None = None,
          workload: str | Path | None = None, faults_max: int = 3, load: bool | None = None) -> dict[int, dict[str, Any]]:
    """Each seed's workload (a mapping) as ``swarm`` would run it, drawn and nothing run;
    BadOption, UnknownBackend or WorkloadError first."""
    backend_class(backend).check_options(dict(options or {}), "sim")
    if faults_max < 1:
        raise ValueError("faults_max must be >= 1")
    base = base_workload(workload)
    drawn = workload is None if load is None else load
    return {seed: draw_seed(base, seed, backend, options, "sim", faults_max, load=drawn) for seed in seeds}


def draw_lines(seed: int, workload: Mapping[str, Any]) -> list[str]:
    """One seed's draw as `lab swarm` prints it: its load, its faults, and what was timed against what."""
    timed = workload.get("description", "").partition("; timed: ")[2]
    return [f"seed {seed}: {load_line(workload)}", f"  faults: {schedule_line(workload.get('faults') or [])}",
            *([f"  timed: {timed}"] if timed else [])]


def _task_failed(failed: Exception) -> WorkerError:
    """A seed whose Spark task failed twice: its ``error`` verdict, as a worker's error is."""
    from lab.experiments.spark_runs import MAX_FAILURES

    message = f"its Spark task failed {MAX_FAILURES} times: {failed}"
    return WorkerError(type(failed).__name__, message, message + "\n")


def progress_bar(total: int, desc: str, unit: str, progress: bool | TextIO):
    from tqdm import tqdm

    if progress is True:
        return tqdm(total=total, desc=desc, unit=unit, disable=None, leave=False)
    if progress is False:
        return tqdm(total=total, disable=True)
    return tqdm(total=total, desc=desc, unit=unit, file=progress, mininterval=0, leave=True)


def _search(executor: Executor, jobs: int, schedules: dict[int, dict[str, Any]], backend: str,
            options: dict[str, Any], directory: Path, deadline: float | None, progress: bool | TextIO,
            echo: Callable[[str], None], runs: list[SeedRun], findings: list[SeedFinding]) -> bool:
    """Run every seed (at most ``jobs`` at a time) until done or past ``deadline``; True if
    the deadline stopped it."""
    bar = progress_bar(len(schedules), f"swarm {backend}", "seed", progress)

    def finished(seed: int, future: Future) -> None:
        run = seed_run(future.result(), seed, schedules[seed], str(directory / f"seed-{seed}"))
        runs.append(run)
        if run.verdict in (Verdict.INVALID, ERROR):
            findings.append(_finding(run, schedules[seed], backend, options, directory))
            say(bar, echo, f"  seed {seed}: {run.verdict.upper()} ({run.reason})\n"
                           f"    load: {load_line(schedules[seed])}\n"
                           f"    faults: {run.faults}\n    replay: {findings[-1].command}")
        bar.update(1)
        bar.set_postfix_str(", ".join(f"{k} {n}" for k, n in sorted(Counter(r.verdict for r in runs).items())))

    calls = [(seed, (run_seed, schedules[seed], backend, options, seed, str(directory / f"seed-{seed}")))
             for seed in schedules]
    if hasattr(executor, "run_all"):  # on Spark: every seed a task of one job, not a job each
        with contextlib.closing(executor.run_all(in_worker, calls, directory, deadline)) as results:
            for seed, future in results:
                finished(seed, future)
        bar.close()
        return len(runs) < len(schedules) and _past(deadline)
    todo = iter(calls)
    inflight: dict[Future, int] = {}
    stopped = False
    while True:
        while len(inflight) < jobs and not (stopped := stopped or _past(deadline)):
            call = next(todo, None)
            if call is None:
                break
            inflight[executor.submit(in_worker, *call[1])] = call[0]
        if not inflight:
            break
        done, _ = wait(inflight, return_when=FIRST_COMPLETED)
        for future in done:
            finished(inflight.pop(future), future)
    bar.close()
    return stopped


def say(bar: Any, echo: Callable[[str], None], text: str) -> None:
    """A line above a live bar (tqdm's own write keeps the bar whole), else through ``echo``."""
    if bar.disable:
        echo(text)
    else:
        bar.write(text, file=bar.fp)


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _finding(run: SeedRun, workload: dict[str, Any], backend: str, options: dict[str, Any],
             directory: Path) -> SeedFinding:
    path = directory / f"seed-{run.seed}.yaml"
    write_workload(path, workload, f"lab swarm: seed {run.seed} of {backend}: {run.verdict.upper()} ({run.reason})")
    return SeedFinding(run, path, replay_command(path, backend, run.seed, options), load=load_line(workload))


def write_workload(path: Path, workload: dict[str, Any], headline: str) -> None:
    body = yaml.safe_dump(workload, sort_keys=False, default_flow_style=None, width=200)
    path.write_text(f"# {headline}\n{body}")


def _shrink_all(executor: Executor, jobs: int, findings: list[SeedFinding], schedules: dict[int, dict[str, Any]],
                backend: str, options: dict[str, Any], directory: Path, deadline: float | None, max_runs: int,
                progress: bool | TextIO, echo: Callable[[str], None]) -> bool:
    """Shrink every invalid seed, one candidate per seed in flight; True if the deadline stopped it."""
    shrinkers = {f.run.seed: Shrinker(schedules[f.run.seed], f.run.broken, max_runs)
                 for f in findings if f.run.verdict == Verdict.INVALID}
    for s in shrinkers.values():
        s.best["name"] += "-shrunk"
        s.best["description"] += ", shrunk"
    trials = directory / "shrinking"
    waiting = list(shrinkers)
    inflight: dict[Future, tuple[int, Path, dict[str, Any]]] = {}
    bar = progress_bar(len(shrinkers) * max_runs, f"shrinking {len(shrinkers)} seed(s)", "run", progress)
    stopped = False
    while True:
        while waiting and len(inflight) < jobs and not (stopped := stopped or _past(deadline)):
            seed = waiting.pop(0)
            shrinker = shrinkers[seed]
            candidate = shrinker.next()
            if candidate is None:
                bar.update(max_runs - shrinker.runs)  # done early: its share of the bar
                say(bar, echo, f"  seed {seed}: shrunk in {shrinker.runs} runs to "
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
            fed = shrinkers[seed]
            previous = fed.best_run
            if fed.feed(seed_run(future.result(), seed, candidate, str(out))) and previous is not None:
                shutil.rmtree(previous.run_dir, ignore_errors=True)  # superseded by a smaller one
            elif fed.best_run is None or fed.best_run.run_dir != str(out):
                shutil.rmtree(out, ignore_errors=True)
            waiting.append(seed)
            bar.update(1)
    bar.close()
    for finding in findings:
        if finding.run.seed not in shrinkers:
            continue
        shrinker = shrinkers[finding.run.seed]
        finding.shrink_runs = shrinker.runs
        if shrinker.best_run is not None:
            seed = finding.run.seed
            target = directory / f"seed-{seed}-shrunk"
            shutil.move(shrinker.best_run.run_dir, target)
            shrinker.best_run.run_dir = str(target)
            finding.shrunk = shrinker.best_run
            finding.shrunk_load = shrinker.best
            finding.shrunk_file = directory / f"seed-{seed}-shrunk.yaml"
            write_workload(finding.shrunk_file, shrinker.best,
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
    if counts.get(Verdict.NO_EVIDENCE):  # neither a pass nor a finding: which seeds, so that they can be looked at
        lines.append("no evidence (nothing acknowledged or delivered): seeds "
                     + ", ".join(str(r.seed) for r in result.runs if r.verdict == Verdict.NO_EVIDENCE))
    for f in result.findings:
        lines += [f"seed {f.run.seed}: {f.run.verdict.upper()} ({f.run.reason})",
                  f"  load: {f.load}", f"  faults: {f.run.faults}", f"  replay: {f.command}"]
        if f.shrunk is not None:
            lines += [f"  shrunk in {f.shrink_runs} runs to: {f.shrunk.faults}; {load_line(f.shrunk_load)} "
                      f"({f.shrunk.lost} lost, {f.shrunk.duplicated} duplicated, {f.shrunk.inversions} inversions)",
                      f"  replay: {f.shrunk_command}"]
        elif f.run.verdict == Verdict.INVALID:
            lines.append(f"  not shrunk (tried {f.shrink_runs} runs)" if f.shrink_runs else "  not shrunk")
        else:
            lines.append(f"  traceback: {f.file.with_suffix('.error.txt')}")
    lines.append(f"summary: {result.markdown_path} and {result.csv_path}")
    return lines


def markdown(result: SwarmResult) -> str:
    lines = ["# lab swarm", "", *(f"    {line}" for line in report_lines(result)[:-1]), "",
             "| seed | load | faults | verdict | reason | lost | dup | unexp | inversions |", "|---|" * 9]
    for r in result.runs:
        verdict = f"**{r.verdict}**" if r.verdict in (Verdict.INVALID, ERROR) else r.verdict
        lines.append(f"| {r.seed} | {result.loads.get(r.seed, '')} | {r.faults} | {verdict} | {r.reason.replace('|', '/')} | {r.lost} | "
                     f"{r.duplicated} | {r.unexpected} | {r.inversions} |")
    return "\n".join(lines)


def _write_csv(result: SwarmResult) -> None:
    with result.csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**asdict(r), "load": result.loads.get(r.seed, "")} for r in result.runs)
