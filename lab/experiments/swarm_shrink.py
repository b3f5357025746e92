"""The swarm's shrinker: a failing workload made smaller one change at a time, while its
run still breaks a promise the seed broke. ``Shrinker`` tries removing each fault, halving
each fault's duration and then its start, then halving the load (duration, rate, clients,
warm-up) and making it plainer (each client's own plan dropped, then the clients' timeout); a change is kept when the run is invalid and breaks one of the promises still being
chased (``lab.judge.verdict.Judgement.broken``: lost, duplicated, reordered, unexpected,
refused). It runs nothing itself: the swarm driver runs its candidates and feeds back their outcomes.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Generator, Iterable

from lab.experiments.swarm_draw import MIN_FAULT
from lab.experiments.swarm_worker import SeedRun
from lab.judge.findings import Verdict
from lab.workloads.errors import WorkloadError
from lab.workloads.spec import parse_workload


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
        kept = run.verdict == Verdict.INVALID and bool(self.target & set(run.broken))
        if kept:
            assert self._candidate is not None  # run is the outcome of the candidate next() gave
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
                candidate = self._changed(lambda w: w["faults"].pop(i))  # noqa: B023 (_changed calls it at once)
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
            for change in [*self._load_changes(), *self._client_changes()]:  # a lighter, plainer load
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

    def _client_changes(self) -> list[Callable[[dict[str, Any]], Any]]:
        """Each client's own plan dropped (it does what the others do), then the clients' timeout."""
        def drop(name: str) -> Callable[[dict[str, Any]], Any]:
            return lambda w: (w.get("clients") or {}).pop(name, None)

        return [*(drop(name) for name in self.best.get("clients") or {}), lambda w: w.pop("timeout", None)]

    def _changed(self, change: Callable[[dict[str, Any]], Any]) -> dict[str, Any] | None:
        """``best`` with ``change`` applied, or None if that changes nothing or makes a
        workload that does not parse (a fault past the end of a shorter load)."""
        candidate = copy.deepcopy(self.best)
        change(candidate)
        _prune_clients(candidate)
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


def _prune_clients(workload: dict[str, Any]) -> None:
    """The plans of clients a smaller count removed go with them (and an empty block)."""
    clients = workload.get("clients")
    if clients is None:
        return
    counts = {"p": workload.get("producers", 1), "c": workload.get("consumers", 1)}
    for name in [n for n in clients if int(n[1:]) >= counts[n[0]]]:
        del clients[name]
    if not clients:
        del workload["clients"]
