"""Conformance, the lab's power over the design: where the design plants bugs (its
``mutants.py``), the hunt (``lab.experiments.hunt``, as `lab mutants` runs it, on a small
budget) still catches each one, and the same runs without the bug raise no false alarm."""

from __future__ import annotations

from lab.design.registry import design_module
from lab.experiments.conform.report import FAIL, PASS, SKIP, Line
from lab.experiments.conform.target import Target, seed_list

SEEDS = 2  # per scenario, and swarm seeds, per mutant (`lab mutants` takes 3); --seeds N overrides
SHRINK_RUNS = 0  # the catch is what counts here, not its smallest form


def mutants(target: Target) -> list[Line]:
    from lab.experiments.hunt import hunt

    module = design_module(target.name, "mutants")
    if module is None or not getattr(module, "MUTANTS", None):
        return [Line("mutants", SKIP, "the design plants no bugs (no mutants.py)")]
    seeds = target.seeds_or(SEEDS)
    result = hunt(designs=[target.name], seeds=seeds, world="sim", jobs=target.jobs, shrink_runs=SHRINK_RUNS,
                  out=target.out("mutants"), progress=False, echo=lambda line: None)
    lines = []
    for h in result.hunts:
        check = f"mutants: {h.mutant.name} caught"
        # the runs it made, named: a miss in 4 runs is a different finding from a miss in 40
        made = f"{_runs(h.runs)}; folders: {result.directory / h.mutant.name}"
        if h.caught:
            trial, run = h.caught
            lines.append(Line(check, PASS, f"by {trial.label} after {h.runs_to_catch} run(s): {run.reason} ({made})"))
        else:
            lines.append(Line(check, FAIL, f"NOT CAUGHT in {len(h.runs)} runs ({made}) — {h.mutant.promise}: "
                                           f"{h.mutant.mistake}; more seeds: lab conform {target.name} --seeds "
                                           f"{max(10, seeds * 3)}"))
    alarms = result.false_alarms
    check = "mutants: no false alarm in the unmutated runs"
    controls = f"{len(result.controls)} control run(s), folders: {result.directory / 'control'}"
    lines.append(Line(check, FAIL, "; ".join(f"{r.verdict.upper()} {r.reason}" for r in alarms) + f" ({controls})")
                 if alarms else Line(check, PASS, f"{controls}: valid or allowed"))
    return lines


def _runs(runs: list) -> str:
    """``[(trial, run)]`` as the seeds of each kind of run: ``base seed 1; swarm seeds 1-3``."""
    kinds: dict[str, list[int]] = {}
    for trial, _ in runs:
        kinds.setdefault(trial.label.rsplit(" seed ", 1)[0], []).append(trial.seed)
    return "; ".join(f"{kind} seed{'s' if len(seeds) > 1 else ''} {seed_list(seeds)}" for kind, seeds in kinds.items())
