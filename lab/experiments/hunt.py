"""`lab mutants`: the lab's power to catch a planted bug, measured. This room runs each
mutant (``lab.design.mutants``) through the runs most likely to expose it, stops at the first run
the checker calls invalid, shrinks that run's fault schedule, and runs every one of the
mutant's runs again with the design unmutated — the control, where invalid is a false
alarm, as bad as a miss.

- **A mutant's runs**, in order: each of its ``scenarios`` at seeds 1..K, ``lab.experiments.swarm``'s
  base workload once with no fault, then K swarm seeds (that workload with the seed's drawn
  fault mix), all with the mutant's options; a run the world cannot apply to the design
  (live faults on a design with no server process) is skipped and reported. One run of a mutant is in flight at a time, so "runs to first
  detection" counts exactly the runs it took; different mutants' runs share the workers.
- **Caught** means a run's verdict is invalid, or no evidence (nothing acknowledged or
  delivered) in a run without faults: the design did nothing where nothing stood in its
  way, and its control shows it does. An error is no detection (it is reported as one),
  nor is no evidence under faults (they may have stopped everything). The catching run's schedule is shrunk with ``lab.experiments.swarm_shrink.Shrinker`` (at most
  ``shrink_runs`` runs; a catch with no fault is already as small as it gets).
- **The control**: the same workload and seed without the mutant, once per distinct run
  (mutants of one design and options share them).
- **Passed** when every mutant was caught and no control run was invalid, raised or gave no
  evidence (a control that shows nothing cannot show the catch was no false alarm).
- **Generated mutants** (``generate``, sim only: ``lab.experiments.generated``) are hunted the same
  way (they have no scenarios), and each run's history digest is held to its control's:
  ``generated.md`` / ``generated.csv`` say which mutants changed any history at all.
- **A budget** (wall seconds) stops new mutant and shrinking runs once spent; the controls of
  the runs made still run. A hunt it stopped is reported as not caught, "out of budget".

The folder holds ``<mutant>/<run>/`` (its runs), ``control/<design>/<run>/``,
``<mutant>-shrunk.yaml`` for each shrunk catch, and ``mutants.md`` / ``mutants.csv``.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, TextIO

import yaml

from lab.worlds import interrupt
from lab.experiments import hunt_report, planting as planted
from lab.design.registry import REGISTRY, UnknownBackend, backend_class
from lab.design.mutants import Mutant
from lab.experiments.planting import UnknownMutant, catalogue, mutant
from lab.experiments.generated import report as generated_report
from lab.experiments.generated.compare import screened
from lab.experiments.generated.plan import Generate, Plan, plan
from lab.history.paths import make_empty_folder
from lab.experiments.swarm import progress_bar, say, write_workload
from lab.experiments.swarm_draw import base_workload, draw_seed, schedule_line
from lab.experiments.swarm_shrink import Shrinker
from lab.experiments.swarm_worker import ERROR, InProcess, SeedRun, in_worker, process_pool, run_seed, seed_run
from lab.judge.findings import Verdict
from lab.workloads.spec import load_workload


@dataclass(frozen=True)
class Trial:
    """One run a mutant's hunt plans: a workload (a mapping) at a seed, and its label."""

    label: str  # "crash-one seed 2", "swarm seed 3"
    workload: dict[str, Any]
    seed: int

    @property
    def folder(self) -> str:
        """The run's folder under the hunt's: one name, even for a scenario given by path
        (whose slashes would otherwise make it a folder beside the scenario's file)."""
        return _slug(self.label).strip("-")


@dataclass
class Hunt:
    """One mutant's hunt: its trials, the runs so far, the catch and its shrinking."""

    mutant: Mutant
    trials: Iterator[Trial]
    runs: list[tuple[Trial, SeedRun]] = field(default_factory=list)
    caught: tuple[Trial, SeedRun] | None = None
    shrinker: Shrinker | None = None
    shrunk: str | None = None  # the shrunk catch's fault schedule, in words
    errors: int = 0
    refused: list[str] = field(default_factory=list)  # trials the world cannot apply to this design, and why
    out_of_budget: bool = False  # stopped by the budget before it was caught or ran every trial

    @property
    def runs_to_catch(self) -> int:
        """The runs it took: up to and including the catching one (all of them if none caught)."""
        return len(self.runs) if self.caught is None else self.runs.index(self.caught) + 1

    @property
    def seconds(self) -> float:
        """The wall seconds of those runs."""
        return sum(run.wall_seconds for _, run in self.runs[:self.runs_to_catch])

    def shrinking(self) -> tuple[Shrinker, Trial]:
        """The shrinker of the catch and the trial that caught it (a hunt being shrunk has both)."""
        if self.shrinker is None or self.caught is None:
            raise RuntimeError(f"{self.mutant.name} is not being shrunk")
        return self.shrinker, self.caught[0]


@dataclass
class HuntResult:
    directory: Path
    world: str
    seeds: int
    hunts: list[Hunt]
    controls: dict[str, SeedRun]  # a control run's key -> its run
    control_keys: dict[str, list[str]]  # mutant -> the keys of its controls
    wall_seconds: float
    interrupted: bool = False
    generated: Plan | None = None  # what ``generate`` drew, when the mutants are generated ones

    def control_runs(self, name: str) -> list[SeedRun]:
        return [self.controls[key] for key in self.control_keys.get(name, []) if key in self.controls]

    @property
    def false_alarms(self) -> list[SeedRun]:
        return [run for run in self.controls.values() if run.verdict in (Verdict.INVALID, ERROR)]

    @property
    def without_evidence(self) -> list[SeedRun]:
        """Control runs that showed nothing about delivery (``Verdict.NO_EVIDENCE``)."""
        return [run for run in self.controls.values() if run.verdict == Verdict.NO_EVIDENCE]

    @property
    def passed(self) -> bool:
        return (not self.interrupted and all(h.caught for h in self.hunts) and not self.false_alarms
                and not self.without_evidence)


def chosen_mutants(designs: Iterable[str] | None = None, names: Iterable[str] | None = None) -> list[Mutant]:
    """The mutants to hunt: ``names`` (each must exist), else every mutant of ``designs``
    (default: every registered design)."""
    if designs is not None:
        for design in designs:
            if design not in REGISTRY:
                raise UnknownBackend(f"unknown backend {design!r}; registered: {', '.join(REGISTRY)}")
    if names is not None:
        found = [mutant(name) for name in names]
        if designs is not None:
            found = [m for m in found if m.design in set(designs)]
        return found
    chosen = list(catalogue(designs).values())
    if not chosen:
        raise UnknownMutant(f"no mutants for {', '.join(designs or REGISTRY)}")
    return chosen


def trials(m: Mutant, seeds: int, world: str) -> Iterator[Trial]:
    """The runs of ``m``'s hunt, in order: its scenarios at seeds 1..``seeds``, the swarm's
    base load with no fault, then ``seeds`` swarm seeds. Drawn lazily: a mutant caught at
    once never draws a swarm schedule."""
    for scenario in m.scenarios:
        for seed in range(1, seeds + 1):
            yield Trial(f"{scenario} seed {seed}", scenario_mapping(scenario, seed), seed)
    base = base_workload(None)
    yield Trial("base seed 1", {**base, "seed": 1}, 1)  # the swarm's load with no fault: a bug that needs none
    for seed in range(1, seeds + 1):
        yield Trial(f"swarm seed {seed}", draw_seed(base, seed, m.design, m.options, world), seed)


def scenario_mapping(name: str, seed: int) -> dict[str, Any]:
    """A scenario or standard workload (by name or path) as the mapping a run at ``seed`` is
    made from: a fault whose start is a range at the time that seed draws (the same run,
    row for row; and a fixed time is what the shrinker halves and the table shows)."""
    workload = load_workload(name)
    data = yaml.safe_load(Path(workload.source).read_text(encoding="utf-8"))
    for entry, fault in zip(data.get("faults") or [], workload.with_seed(seed).faults):
        entry["at"] = fault.at
    return data


def run_planted(name: str | None, workload: dict[str, Any], design: str, options: dict[str, Any], seed: int,
                out: str, world: str) -> SeedRun:
    """One run with mutant ``name`` planted (None: the design as it is). Runs in a worker."""
    if name is None:
        return run_seed(workload, design, options, seed, out, world)
    with planted.plant(name):
        return run_seed(workload, design, options, seed, out, world)


def hunt(designs: Iterable[str] | None = None, names: Iterable[str] | None = None, *, seeds: int = 3,
         world: str = "sim", jobs: int | None = None, shrink_runs: int = 6, out: str | Path | None = None,
         progress: bool | TextIO = True, echo=print, generate: Generate | None = None,
         budget: float | None = None) -> HuntResult:
    """Hunt every chosen mutant (with ``generate``: the generated ones of ``designs`` instead)
    and run its controls; every mistake in the arguments fails before anything is written."""
    started = time.monotonic()
    generated = None
    if generate is not None:
        chosen_mutants(designs, [])  # an unknown design fails here
        generated = plan(generate, designs, world)
        chosen = generated.mutants
    else:
        chosen = chosen_mutants(designs, names)
    for m in chosen:
        backend_class(m.design).check_options(dict(m.options), world)
        for scenario in m.scenarios:
            load_workload(scenario)  # a missing scenario fails now, not in a worker
    directory = make_empty_folder(out, f"mutants-{{time}}-{world}")

    jobs = jobs or (len(os.sched_getaffinity(0)) if world == "sim" else 1)
    hunts = [Hunt(m, trials(m, seeds, world)) for m in chosen]
    result = HuntResult(directory, world, seeds, hunts, {}, {}, 0.0, generated=generated)
    executor: Executor = InProcess() if jobs == 1 else process_pool(jobs)
    try:
        deadline = None if budget is None else started + budget
        _Scheduler(result, executor, jobs, shrink_runs, progress, echo, deadline).run()
    except KeyboardInterrupt:
        result.interrupted = True
        raise
    finally:
        # lab.worlds.interrupt: interrupted, the runs in flight are cut short (their folders removed), not left
        # to a shutdown that does not wait (their workers' exits then raced the pool's own clean-up)
        interrupt.stop_pool(executor, interrupted=result.interrupted)
        if result.interrupted:
            interrupt.mark_interrupted(result.directory, "mutants")
        result.wall_seconds = time.monotonic() - started
        hunt_report.write(result)
        if generated is not None:
            generated_report.write(result)
    return result


class _Scheduler:
    """Keeps the workers busy: each hunt's next trial (one in flight per hunt), its
    shrinking candidates, and the control runs, in the order they became ready."""

    def __init__(self, result: HuntResult, executor: Executor, jobs: int, shrink_runs: int,
                 progress: bool | TextIO, echo, deadline: float | None = None) -> None:
        self.result, self.executor, self.jobs, self.shrink_runs = result, executor, jobs, shrink_runs
        self.deadline = deadline  # time.monotonic() past which no mutant or shrinking run starts
        self.echo = echo
        self.ready: deque[tuple[str, Any]] = deque(("hunt", h) for h in result.hunts)
        self.inflight: dict[Future, tuple[str, Any, str]] = {}
        self.pending_controls: set[str] = set()
        self.bar = progress_bar(len(result.hunts), f"mutants ({result.world})", "mutant", progress)
        self.settled = 0

    def run(self) -> None:
        while self.ready or self.inflight:
            while self.ready and len(self.inflight) < self.jobs:
                self._submit(*self.ready.popleft())
            if not self.inflight:
                continue
            done, _ = wait(self.inflight, return_when=FIRST_COMPLETED)
            for future in done:
                kind, subject, out = self.inflight.pop(future)
                getattr(self, f"_{kind}_done")(subject, future.result(), out)
        self.bar.close()

    # ---------------------------------------------------------------- submitting

    def _submit(self, kind: str, subject: Any) -> None:
        directory = self.result.directory
        spent = self.deadline is not None and time.monotonic() >= self.deadline
        if kind == "hunt" and spent:
            subject.out_of_budget = True
            self._settle(subject, f"{subject.mutant.name}: out of budget after {len(subject.runs)} runs")
        elif kind == "shrink" and spent:
            self._shrunk(subject)  # the smallest catch so far
        elif kind == "hunt":
            h: Hunt = subject
            trial = next(h.trials, None)
            while trial is not None and (why := _refusal(trial, h.mutant.design, self.result.world)):
                h.refused.append(f"{trial.label}: {why}")
                trial = next(h.trials, None)
            if trial is None:
                self._settle(h, f"{h.mutant.name}: NOT CAUGHT in {len(h.runs)} runs")
                return
            out = str(directory / h.mutant.name / trial.folder)
            self._go(kind, (h, trial), out, h.mutant.name, trial.workload, h.mutant, trial.seed)
        elif kind == "shrink":
            h = subject
            shrinker, caught_by = h.shrinking()
            candidate = shrinker.next()
            if candidate is None:
                self._shrunk(h)
                return
            out = str(directory / h.mutant.name / "shrinking" / f"try-{shrinker.runs + 1}")
            self._go(kind, (h, candidate), out, h.mutant.name, candidate, h.mutant, caught_by.seed)
        else:  # control
            key, trial, m = subject
            out = str(directory / "control" / _slug(m.label) / trial.folder)
            self._go(kind, subject, out, None, trial.workload, m, trial.seed)

    def _go(self, kind: str, subject: Any, out: str, name: str | None, workload: dict[str, Any], m: Mutant,
            seed: int) -> None:
        future = self.executor.submit(in_worker, run_planted, name, workload, m.design, dict(m.options), seed, out,
                                      self.result.world)
        self.inflight[future] = (kind, subject, out)

    # ---------------------------------------------------------------- outcomes

    def _hunt_done(self, subject: tuple[Hunt, Trial], outcome: Any, out: str) -> None:
        h, trial = subject
        run = seed_run(outcome, trial.seed, trial.workload, out)
        h.runs.append((trial, run))
        self._control(h.mutant, trial)
        if run.verdict == ERROR:
            h.errors += 1
        if not _caught(trial, run):
            if self._screened(h):
                self._settle(h, f"{h.mutant.name}: likely equivalent: its first {len(h.runs)} runs matched their "
                                "controls")
            else:
                self.ready.append(("hunt", h))
            return
        h.caught = h.runs[-1]
        say(self.bar, self.echo, f"  {h.mutant.name}: caught by {trial.label} after {len(h.runs)} run(s) "
                                 f"({run.reason})")
        faults = trial.workload.get("faults") or []
        if not faults or self.shrink_runs < 1:
            h.shrunk = schedule_line(faults)
            self._settle(h)
            return
        h.shrinker = Shrinker(copy.deepcopy(trial.workload), run.broken, self.shrink_runs)
        self.ready.append(("shrink", h))

    def _screened(self, h: Hunt) -> bool:
        """A generated mutant's equivalence screen (``Generate.screen``) says stop."""
        generated = self.result.generated
        if generated is None or not generated.spec.screen:
            return False
        keys = self.result.control_keys.get(h.mutant.name, [])
        pairs = [(run, self.result.controls.get(key)) for (_, run), key in zip(h.runs, keys)]
        return screened(pairs, generated.spec.screen)

    def _shrink_done(self, subject: tuple[Hunt, dict[str, Any]], outcome: Any, out: str) -> None:
        h, candidate = subject
        shrinker, caught_by = h.shrinking()
        shrinker.feed(seed_run(outcome, caught_by.seed, candidate, out))
        self.ready.append(("shrink", h))

    def _shrunk(self, h: Hunt) -> None:
        s, _ = h.shrinking()
        h.shrunk = schedule_line(s.best["faults"])
        if s.kept and s.best_run is not None:  # a kept candidate is the best run
            write_workload(self.result.directory / f"{h.mutant.name}-shrunk.yaml", s.best,
                           f"lab mutants: {h.mutant.name}, shrunk in {s.runs} runs: INVALID ({s.best_run.reason})")
        shutil.rmtree(self.result.directory / h.mutant.name / "shrinking", ignore_errors=True)
        self._settle(h)

    def _control(self, m: Mutant, trial: Trial) -> None:
        key = json.dumps([m.design, dict(m.options), trial.workload, trial.seed], sort_keys=True, default=str)
        self.result.control_keys.setdefault(m.name, []).append(key)
        if key not in self.result.controls and key not in self.pending_controls:
            self.pending_controls.add(key)
            # ahead of the other mutants' next runs: a run is judged against its control (the
            # screen, a false alarm), so a control never waits behind a round of every mutant
            self.ready.appendleft(("control", (key, trial, m)))

    def _control_done(self, subject: tuple[str, Trial, Mutant], outcome: Any, out: str) -> None:
        key, trial, m = subject
        run = seed_run(outcome, trial.seed, trial.workload, out)
        self.pending_controls.discard(key)
        self.result.controls[key] = run
        if run.verdict in (Verdict.INVALID, ERROR):
            say(self.bar, self.echo, f"  FALSE ALARM: {m.label} unmutated, {trial.label}: {run.verdict.upper()} "
                                     f"({run.reason})")
        elif run.verdict == Verdict.NO_EVIDENCE:
            say(self.bar, self.echo, f"  NO EVIDENCE: {m.label} unmutated, {trial.label}: {run.reason}")

    def _settle(self, h: Hunt, line: str | None = None) -> None:
        if line:
            say(self.bar, self.echo, f"  {line}")
        self.settled += 1
        self.bar.update(1)
        self.bar.set_postfix_str(f"caught {sum(1 for x in self.result.hunts if x.caught)}/{self.settled}")


def _caught(trial: Trial, run: SeedRun) -> bool:
    """A run that catches its mutant: invalid, or with no evidence in a run without faults —
    the design did nothing a client asked of it where nothing stood in its way (the run's
    control, unmutated, shows what it does there: a control with no evidence fails the hunt)."""
    return run.verdict == Verdict.INVALID or (run.verdict == Verdict.NO_EVIDENCE and not trial.workload.get("faults"))


def _refusal(trial: Trial, design: str, world: str) -> str | None:
    """Why ``world`` cannot run ``trial`` against ``design`` (the live world applies faults
    only to server processes), or None: such a trial is skipped, not counted as a miss."""
    from lab.experiments.runner import fault_refusal
    from lab.workloads.spec import parse_workload

    return fault_refusal(parse_workload(dict(trial.workload), trial.label), world, design)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_=." else "-" for c in text)
