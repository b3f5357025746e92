"""Conformance, the lab's power over the design: where the design plants bugs (its
``mutants.py``), the hunt (``lab.experiments.hunt``, as `lab mutants` runs it, on a small
budget) still catches each one, and the same runs without the bug raise no false alarm."""

from __future__ import annotations

from lab.design.registry import design_module
from lab.experiments.conform.report import FAIL, PASS, SKIP, Line
from lab.experiments.conform.target import Target

SEEDS = 2  # per scenario, and swarm seeds, per mutant (`lab mutants` takes 3)
SHRINK_RUNS = 0  # the catch is what counts here, not its smallest form


def mutants(target: Target) -> list[Line]:
    from lab.experiments.hunt import hunt

    module = design_module(target.name, "mutants")
    if module is None or not getattr(module, "MUTANTS", None):
        return [Line("mutants", SKIP, "the design plants no bugs (no mutants.py)")]
    result = hunt(designs=[target.name], seeds=SEEDS, world="sim", jobs=target.jobs, shrink_runs=SHRINK_RUNS,
                  out=target.out("mutants"), progress=False, echo=lambda line: None)
    lines = []
    for h in result.hunts:
        check = f"mutants: {h.mutant.name} caught"
        if h.caught:
            trial, run = h.caught
            lines.append(Line(check, PASS, f"by {trial.label} after {h.runs_to_catch} run(s): {run.reason}"))
        else:
            lines.append(Line(check, FAIL, f"NOT CAUGHT in {len(h.runs)} runs ({h.mutant.promise}: "
                                           f"{h.mutant.mistake})"))
    alarms = result.false_alarms
    check = "mutants: no false alarm in the unmutated runs"
    lines.append(Line(check, FAIL, "; ".join(f"{r.verdict.upper()} {r.reason}" for r in alarms)) if alarms else
                 Line(check, PASS, f"{len(result.controls)} control run(s) valid or allowed"))
    return lines
