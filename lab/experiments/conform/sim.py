"""Conformance in the sim world: the same seed gives the same samples; runs with no fault are
VALID with reliable reads and plain gets; every declared option refuses bad values before
anything is written; and the promises are honest — no ``invalid`` verdict over a short fault
matrix (one scenario per fault kind the matrix uses, one seed) and a small swarm. The runs
are the runner's, the swarm's and the matrix's own functions, into the suite's folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lab.design.options import BadOption
from lab.experiments.conform.report import FAIL, PASS, SKIP, Line
from lab.experiments.conform.target import Target, label, reads, seed_list, short_load
from lab.judge.findings import Verdict

WORLD = "sim"
#: values no option of a design should take: at least one must be refused
BAD_VALUES: tuple[Any, ...] = ("not-a-number", -1, "", 1e300, {"a": 1})
SWARM_SEEDS = 3  # per option set (--seeds N overrides)
MATRIX_SEEDS = 1  # per scenario and option set (--seeds N overrides)
SWARM_LOAD = {"name": "conform-swarm", "queues": 1, "producers": 2, "consumers": 2, "message_size": 100,
              "rate": 500, "duration": 2, "warmup": 0.3, "ack": "reliable"}


def _run(target: Target, data: dict[str, Any], world: str, options: dict[str, Any], out: Path):
    from lab.experiments.runner import run
    from lab.workloads.spec import parse_workload

    return run(parse_workload(data, f"conform:{data['name']}"), target.name, world, out=out, progress=False,
               options=options)


def _worlds_skip(target: Target, world: str, check: str) -> Line | None:
    if world not in target.cls.worlds:
        return Line(check, SKIP, f"{target.name} runs in the {' and '.join(target.cls.worlds)} world(s) only")
    return None


def determinism(target: Target) -> list[Line]:
    """Two runs at one seed write the same samples, row for row (all but the run's id)."""
    from lab.history.record import read_samples

    check = "sim: determinism (same seed, same samples)"
    if (skip := _worlds_skip(target, WORLD, check)) is not None:
        return [skip]
    tables = []
    for attempt in (1, 2):
        result = _run(target, short_load(True), WORLD, {}, target.out("determinism", f"run{attempt}"))
        tables.append(read_samples(result.run_dir).drop_columns(["run_id"]))
    first, second = tables
    if first.num_rows != second.num_rows:
        return [Line(check, FAIL, f"seed {short_load(True)['seed']}: {first.num_rows} rows, then {second.num_rows}")]
    for column in first.column_names:
        a, b = first.column(column).to_pylist(), second.column(column).to_pylist()
        if a != b:
            row = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            return [Line(check, FAIL, f"column {column} differs first at row {row}: {a[row]!r} then {b[row]!r} "
                                      f"(a wall clock, an unseeded random or a set's order in the design?)")]
    return [Line(check, PASS, f"{first.num_rows:,} rows equal")]


def no_fault(target: Target, world: str = WORLD) -> list[Line]:
    """A short load with no fault is VALID with reliable reads and with plain gets; in the sim
    world under each option set that changes a promise, live under the defaults."""
    lines = []
    sets = target.option_sets() if world == WORLD else [{}]
    for reliable in (True, False):
        check = f"{world}: no fault, {reads(reliable)}"
        if (skip := _worlds_skip(target, world, check)) is not None:
            lines.append(skip)
            continue
        bad = []
        for options in sets:
            out = target.out(f"no-fault-{world}", f"{label(options)}-{'reliable' if reliable else 'plain'}")
            result = _run(target, short_load(reliable), world, options, out)
            if result.verdict is not Verdict.VALID:
                bad.append(f"{label(options)}: {result.check.line()}")
        shown = ", ".join(label(o) for o in sets)
        lines.append(Line(check, FAIL, "; ".join(bad)) if bad else Line(check, PASS, f"VALID ({shown})"))
    return lines


def options(target: Target) -> list[Line]:
    """Each declared option refuses at least one plainly bad value, as a usage error
    (``BadOption``) raised before the run writes anything."""
    lines = []
    world = WORLD if WORLD in target.cls.worlds else target.cls.worlds[0]
    for option in target.cls.options_declared:
        check = f"options: {option.name}"
        refused, taken, broken = [], [], []
        for number, value in enumerate(BAD_VALUES):
            try:
                target.cls.check_options({option.name: value}, world)
                taken.append(value)  # not run: a value the design takes may make a run hang
                continue
            except BadOption:
                refused.append(value)
            except Exception as e:  # noqa: BLE001 (a traceback where a usage error belongs is the finding)
                broken.append(f"{value!r} raised {type(e).__name__}: {e}".splitlines()[0])
                continue
            out = target.out("options", f"{option.name}-{number}")
            try:  # the runner refuses it too, before it writes anything
                _run(target, short_load(False, duration=0.1, warmup=0.0), world, {option.name: value}, out)
                broken.append(f"{value!r} is refused by check_options but the runner ran it")
            except BadOption:
                pass
            if out.exists():
                broken.append(f"{value!r} was refused but the run wrote {out.name}")
        if broken:
            lines.append(Line(check, FAIL, "; ".join(broken)))
        elif not refused:
            lines.append(Line(check, FAIL, f"took every bad value: {', '.join(map(repr, taken))} "
                                           f"(its parser checks nothing? it says it takes {option.allowed})"))
        else:
            lines.append(Line(check, PASS, f"refuses {', '.join(map(repr, refused))}"))
    return lines or [Line("options", SKIP, "the design declares no option")]


def fault_scenarios() -> list[str]:
    """One scenario per fault kind the matrix uses: the first (by name) with a fault of it."""
    from lab.workloads.spec import load_workload, scenario_files

    chosen: dict[str, str] = {}
    for path in scenario_files():
        for fault in load_workload(path).faults:
            chosen.setdefault(fault.kind, path.stem)
    return list(dict.fromkeys(chosen[kind] for kind in sorted(chosen)))


def fault_matrix(target: Target) -> list[Line]:
    """Each of ``fault_scenarios`` at seeds 1..N (``MATRIX_SEEDS``, or ``--seeds``) under each
    option set: no ``invalid`` verdict (allowed is what the design promises under the fault),
    no run that raises."""
    from lab.experiments.hunt import scenario_mapping
    from lab.experiments.runner import fault_refusal
    from lab.experiments.swarm_worker import ERROR, run_seed, seed_run
    from lab.workloads.spec import load_workload

    check = "sim: promises honest over a short fault matrix"
    if (skip := _worlds_skip(target, WORLD, check)) is not None:
        return [skip]
    seeds = list(range(1, target.seeds_or(MATRIX_SEEDS) + 1))
    work, refused = [], []
    for scenario in fault_scenarios():
        if (why := fault_refusal(load_workload(scenario), WORLD, target.name)) is not None:
            refused.append(f"{scenario} ({why})")
            continue
        for options in target.option_sets():
            for seed in seeds:
                out = str(target.out("matrix", label(options), scenario, f"seed-{seed}"))
                work.append((scenario, options, seed, scenario_mapping(scenario, seed), out))
    outcomes = _in_pool(target, [(run_seed, data, target.name, options, seed, out, WORLD)
                                 for scenario, options, seed, data, out in work])
    bad = []
    for (scenario, options, seed, data, out), outcome in zip(work, outcomes):
        run = seed_run(outcome, seed, data, out)
        if run.verdict in (Verdict.INVALID, Verdict.NO_EVIDENCE, ERROR):  # no evidence: nothing shown honest
            bad.append(f"{scenario} seed {seed} with {label(options)}: {run.verdict.upper()} {run.reason}")
    note = f"; not applied: {', '.join(refused)}" if refused else ""
    made = (f"{len(work)} runs: seed{'s' if len(seeds) > 1 else ''} {seed_list(seeds)} of "
            f"{', '.join(fault_scenarios())} x {len(target.option_sets())} option set(s); "
            f"folders: {target.folder / 'matrix'}")
    if bad:
        return [Line(check, FAIL, "; ".join(bad) + f" ({made}){note}")]
    return [Line(check, PASS, f"{made}; none invalid or without evidence{note}")]


def swarm(target: Target) -> list[Line]:
    """A few swarm seeds per option set (a random fault mix each, a short load): none invalid."""
    from lab.experiments.swarm import swarm as run_swarm

    seeds = list(range(1, target.seeds_or(SWARM_SEEDS) + 1))
    check = f"sim: promises honest over a small swarm ({len(seeds)} seeds per option set)"
    if (skip := _worlds_skip(target, WORLD, check)) is not None:
        return [skip]
    base = target.out("swarm-load.yaml")
    base.write_text(yaml.safe_dump(SWARM_LOAD))
    bad, runs = [], 0
    for options in target.option_sets():
        result = run_swarm(target.name, seeds, jobs=target.jobs, options=options,
                           workload=base, out=target.out("swarm", label(options)), shrink=False, progress=False,
                           echo=lambda line: None)
        runs += len(result.runs)
        shown_nothing = [r for r in result.runs if r.verdict == Verdict.NO_EVIDENCE]
        for r in [finding.run for finding in result.findings] + shown_nothing:
            bad.append(f"{label(options)} seed {r.seed}: {r.verdict.upper()} {r.reason} (faults: {r.faults}; "
                       f"replay: lab swarm --backend {target.name} --seeds {r.seed}"
                       + "".join(f" --option {k}={v}" for k, v in options.items()) + ")")
    made = f"{runs} runs: seeds {seed_list(seeds)} x {len(target.option_sets())} option set(s); " \
           f"folders: {target.folder / 'swarm'}"
    if bad:
        return [Line(check, FAIL, "; ".join(bad) + f" ({made})")]
    return [Line(check, PASS, f"{made}; none invalid")]


def _in_pool(target: Target, jobs: list[tuple]) -> list[Any]:
    """Each job ``(fn, *args)`` run as the swarm runs them (``in_worker``: a worker's error
    comes back as a value), ``target.jobs`` at a time; the outcomes in order."""
    from lab.experiments.swarm_worker import InProcess, in_worker, process_pool
    from lab.worlds import interrupt

    executor = InProcess() if target.jobs == 1 else process_pool(min(target.jobs, max(1, len(jobs))))
    completed = False
    try:
        futures = [executor.submit(in_worker, *job) for job in jobs]
        outcomes = [f.result() for f in futures]
        completed = True
        return outcomes
    finally:
        interrupt.stop_pool(executor, interrupted=not completed)
