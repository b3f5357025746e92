"""What the four fault notebooks share (``notebooks/03``–``06``): one fault family, every
design, fault phase against healed phase.

A family is a set of fault kinds (``FAMILIES``); its scenarios are the scenario files
(``lab/workloads/scenarios/``) with faults of those kinds (one that mixes families joins the first of
``PRECEDENCE`` it has a fault of), so a scenario joins its family by being written. ``run_family`` runs them through ``lab.experiments.matrix.run_matrix`` (every design
and its promise-changing option sets, over seeds, in the sim world); the matrix's Spark
pass (``lab.aggregate.pipeline``, the process's one session) writes the summaries, which are read
back here from its ``summary/`` folder. Then, per design (a row of the matrix: design and
options):

- ``phase_latency``: put and end-to-end p50/p99/p99.9 per phase (steady, fault, heal),
  the histograms merged over the family's scenarios and seeds (never averaged percentiles);
- ``phase_throughput``: ok puts and deliveries per second per phase: the pipeline's ok
  counts over the phase's length in the run's schedule (warm-up end, fault starts and
  heals, end of the load), summed over scenarios and seeds;
- ``verdicts``: the worst verdict and lost/duplicated per scenario (the matrix's rows);
- ``answer``: the notebook's last cell, in words, from those tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from lab.aggregate.histograms import percentiles
from lab.experiments.matrix import Matrix, run_matrix
from lab.judge.summary import format_ns
from lab.judge.findings import Verdict, worst as worst_verdict
from lab.workloads.spec import load_workload, scenario_files

FAMILIES: dict[str, tuple[str, ...]] = {
    "net-splits": ("partition",),
    "gc-pauses": ("gc", "pause"),
    "delayed-writes": ("late-writes", "disk-delay", "link-delay"),
    "crashes": ("crash", "kill", "disk-loss"),  # a kill is a crash the page cache survives; a disk loss one that also destroys the disk
}
#: A scenario that mixes families belongs to the first of these it has a fault of: the most
#: drastic fault is what it shows (a crash during a slow disk is a crash scenario).
PRECEDENCE = ("crashes", "net-splits", "gc-pauses", "delayed-writes")
PHASES = ("steady", "fault", "heal")


def family_of(kinds: Iterable[str]) -> str | None:
    """The family of a scenario with faults of ``kinds`` (``PRECEDENCE``); None if fault-free."""
    present = set(kinds)
    return next((family for family in PRECEDENCE if present & set(FAMILIES[family])), None)


def family_scenarios(family: str) -> list[str]:
    """The names of the scenarios of ``family`` (``family_of`` their fault kinds)."""
    if family not in FAMILIES:
        raise ValueError(f"no fault family {family!r}; there are: {', '.join(FAMILIES)}")
    return [w.name for w in map(load_workload, scenario_files()) if family_of(f.fault for f in w.faults) == family]


@dataclass
class FamilyRun:
    family: str
    matrix: Matrix
    runs: pd.DataFrame  # a row per run: run_id, label, backend, options, scenario, seed, run_dir, verdict, ...
    summary: pd.DataFrame  # the Spark pipeline's tables, read back from the matrix's summary/ folder
    histograms: pd.DataFrame
    checks: pd.DataFrame

    @property
    def cells(self) -> pd.DataFrame:
        """The matrix's rows (a row per design x options x scenario), with a ``label``."""
        frame = pd.DataFrame(self.matrix.rows)
        frame.insert(0, "label", [_label(r.backend, r.options) for r in frame.itertuples()])
        return frame


def _label(backend: str, options: str) -> str:
    return " ".join(filter(None, [backend, options]))


def run_family(family: str, scenarios: Iterable[str] | None = None, backends: Iterable[str] | None = None,
               seeds: int = 3, out: str | Path | None = None, jobs: int | None = None) -> FamilyRun:
    """The family's scenarios (or ``scenarios``, which must belong to it) on every design
    (or ``backends``) over ``seeds`` seeds, as ``lab matrix`` runs them."""
    members = family_scenarios(family)
    if isinstance(scenarios, str):  # papermill -p scenarios split-one: one name, not its letters
        scenarios = [scenarios]
    if isinstance(backends, str):
        backends = [backends]
    chosen = list(scenarios) if scenarios else members
    strangers = [s for s in chosen if s not in members]
    if strangers:
        raise ValueError(f"{', '.join(strangers)}: not among the {family} scenarios ({', '.join(members)})")
    matrix = run_matrix(backends=backends, scenarios=chosen, seeds=seeds, out=out, jobs=jobs, progress=False,
                        echo=lambda line: None)
    runs = pd.DataFrame([{"run_id": r.run_id, "label": cell.row, "backend": cell.backend,
                          "options": " ".join(f"{k}={v}" for k, v in cell.options), "scenario": cell.scenario,
                          "seed": r.seed, "run_dir": r.run_dir, "verdict": r.verdict, "lost": r.lost,
                          "duplicated": r.duplicated, "inversions": r.inversions, "recover_s": r.recover_s}
                         for cell, rs in matrix.cells.items() for r in rs])
    folder = matrix.directory / "summary"
    tables = {name: pd.read_parquet(folder / f"{name}.parquet") for name in ("summary", "histograms", "checks")}
    return FamilyRun(family, matrix, runs, tables["summary"], tables["histograms"], tables["checks"])


def phase_latency(result: FamilyRun, ops: Sequence[str] = ("put", "e2e")) -> pd.DataFrame:
    """label, op, phase -> p50/p99/p99.9 (ns): histograms merged over scenarios and seeds."""
    h = result.histograms
    h = h[h.op.isin(ops) & h.phase.isin(PHASES)].merge(result.runs[["run_id", "label"]], on="run_id")
    table = percentiles(h, ["label", "backend", "op", "phase"])
    return _ordered(table, result)[["label", "backend", "op", "phase", "p50_ns", "p99_ns", "p999_ns", "max_ns"]]


def phase_seconds(manifest_workload: dict) -> dict[str, float]:
    """Seconds of each measured phase in a run's schedule (``lab.history.phases``'s rules): steady
    from the warm-up's end to the first fault, fault while one is in force, heal after the
    first heal while none is, up to the end of the load."""
    start = float(manifest_workload["warmup"])
    end = start + float(manifest_workload["duration"] or 0.0)
    spans = sorted((float(f["at"]), float(f["at"]) + float(f["duration"])) for f in manifest_workload["faults"])
    union: list[list[float]] = []
    for a, b in spans:
        if union and a <= union[-1][1]:
            union[-1][1] = max(union[-1][1], b)
        else:
            union.append([a, b])

    def clipped(a: float, b: float) -> float:
        return max(0.0, min(b, end) - max(a, start))

    fault = sum(clipped(a, b) for a, b in union)
    if not union:
        return {"steady": clipped(start, end), "fault": 0.0, "heal": 0.0}
    steady = clipped(start, union[0][0])
    first_heal = union[0][1]
    return {"steady": steady, "fault": fault, "heal": clipped(first_heal, end) - sum(
        clipped(max(a, first_heal), b) for a, b in union if b > first_heal)}


def phase_throughput(result: FamilyRun, ops: Sequence[str] = ("put", "get")) -> pd.DataFrame:
    """label, op, phase -> ok operations per second of that phase (gets: deliveries),
    summed over the family's scenarios and seeds."""
    from lab.aggregate.runs import run_manifests

    manifests = run_manifests(result.runs.run_dir)
    seconds = pd.DataFrame([{"run_id": run_id, "phase": phase, "seconds": s}
                            for run_id, m in manifests.items() for phase, s in phase_seconds(m["workload"]).items()])
    s = result.summary
    s = s[s.op.isin(ops) & s.phase.isin(PHASES)][["run_id", "op", "phase", "ok"]]
    # every (run, op, phase) with a length counts, a phase without an ok operation as zero
    grid = seconds.merge(pd.DataFrame({"op": list(ops)}), how="cross")
    rows = grid.merge(s, on=["run_id", "op", "phase"], how="left").fillna({"ok": 0})
    rows = rows.merge(result.runs[["run_id", "label", "backend"]], on="run_id")
    table = rows.groupby(["label", "backend", "op", "phase"], as_index=False).agg(ok=("ok", "sum"),
                                                                               seconds=("seconds", "sum"))
    table = table[table.seconds > 0]
    table["ops_per_s"] = table.ok / table.seconds
    return _ordered(table, result)


def _ordered(table: pd.DataFrame, result: FamilyRun) -> pd.DataFrame:
    order = {label: i for i, label in enumerate(dict.fromkeys(result.runs.label))}
    return (table.assign(_l=table.label.map(order), _p=table.phase.map({p: i for i, p in enumerate(PHASES)}))
            .sort_values(["_l", "op", "_p"]).drop(columns=["_l", "_p"]).reset_index(drop=True))


def verdict_cells(result: FamilyRun) -> dict[tuple[str, str], tuple[str, str]]:
    """(label, scenario) -> (worst verdict over the seeds, "lost/duplicated"), for
    ``lab.present.plots_verdict.verdict_heatmap``."""
    return {(r["label"], r["scenario"]): (r["verdict"], f"{r['lost']}/{r['duplicated']}"
                                          + ("\nlate" if r["recovered_in_time"] is False else ""))
            for r in result.cells.to_dict("records")}


def wide_latency(latency: pd.DataFrame) -> pd.DataFrame:
    """The latency table as people read it: a row per design and op, p50/p99 per phase."""
    frame = latency.assign(p50=latency.p50_ns.map(_fmt), p99=latency.p99_ns.map(_fmt))
    wide = frame.pivot_table(index=["label", "op"], columns="phase", values=["p50", "p99"], aggfunc="first", sort=False)
    wide = wide.reindex(columns=[(q, p) for q in ("p50", "p99") for p in PHASES if (q, p) in wide.columns])
    return wide


def wide_throughput(throughput: pd.DataFrame) -> pd.DataFrame:
    frame = throughput.assign(rate=throughput.ops_per_s.map(lambda v: f"{v:,.0f}"))
    wide = frame.pivot_table(index=["label", "op"], columns="phase", values="rate", aggfunc="first", sort=False)
    return wide.reindex(columns=[p for p in PHASES if p in wide.columns])


def _times(ratio: float) -> str:
    return f"{ratio:,.0f}×" if ratio >= 10 else f"{ratio:.2g}×"


def _fmt(ns: float) -> str:
    return "-" if ns != ns else format_ns(ns)


def timeline_run(result: FamilyRun, backend: str | None, scenario: str | None) -> dict:
    """The run to draw over time (its row of ``result.runs``): the lowest seed's of
    (backend, scenario) if both ran, else the first run of what did."""
    runs = result.runs.sort_values("seed", kind="stable")
    pick = runs
    if backend is not None:
        pick = pick[pick.backend == backend] if (pick.backend == backend).any() else pick
    if scenario is not None:
        pick = pick[pick.scenario == scenario] if (pick.scenario == scenario).any() else pick
    return pick.iloc[0].to_dict()


def answer(result: FamilyRun, latency: pd.DataFrame, throughput: pd.DataFrame) -> str:
    """The notebook's answer in words, from its tables (Markdown)."""
    cells = result.cells
    seeds = int(result.runs.seed.nunique())
    scenarios = list(dict.fromkeys(result.runs.scenario))
    lines = [f"**{result.family}** ({', '.join(f'`{s}`' for s in scenarios)}; {seeds} seed(s) each, sim world):", ""]
    # delivery
    totals = cells.groupby("label", sort=False).agg(n_lost=("lost", "sum"), n_dup=("duplicated", "sum"),
                                                    n_inv=("inversions", "sum"),
                                                    worst=("verdict", worst_verdict))
    invalid = totals[totals.worst == Verdict.INVALID]
    if len(invalid):
        lines.append("- **Broken promises**: " + "; ".join(
            f"{label} ({'; '.join(sorted(set(cells[(cells.label == label) & (cells.verdict == Verdict.INVALID)].reason)))})"
            for label in invalid.index) + ".")
    else:
        lines.append("- **No broken promise**: no run's verdict is invalid.")
    losers = totals[totals.n_lost > 0]
    lines.append("- **Lost**: " + ("nothing, on every design." if losers.empty else "; ".join(
        f"{label} {int(r.n_lost):,} ({r.worst})" for label, r in losers.iterrows()) + "; every other design nothing."))
    dups = totals[totals.n_dup > 0]
    lines.append("- **Duplicated**: " + ("nothing." if dups.empty else "; ".join(
        f"{label} {int(r.n_dup):,}" for label, r in dups.iterrows()) + "."))
    reordered = totals[totals.n_inv > 0]
    if len(reordered):
        lines.append("- **Reordered** (inversions): " + "; ".join(
            f"{label} {int(r.n_inv):,}" for label, r in reordered.iterrows()) + ".")
    late = cells[cells.recovered_in_time == False]  # noqa: E712 (None: no budget)
    if len(late):
        lines.append("- **Late to recover** (past the scenario's budget): " + "; ".join(
            f"{label} in {', '.join(f'`{s}`' for s in rows.scenario)}"
            for label, rows in late.groupby("label", sort=False)) + ".")
    # latency: fault against heal
    e2e = latency[latency.op == "e2e"].pivot_table(index="label", columns="phase", values="p99_ns", sort=False)
    if {"fault", "heal"} <= set(e2e.columns):
        e2e = e2e.dropna(subset=["fault", "heal"])
        if len(e2e) == 1:
            only = e2e.index[0]
            lines.append(f"- **End-to-end p99, fault phase against healed phase**: only {only} delivered in the "
                         f"fault phase, {_fmt(e2e.loc[only, 'fault'])} against {_fmt(e2e.loc[only, 'heal'])}.")
        elif len(e2e):
            ratio = (e2e["fault"] / e2e["heal"]).sort_values(ascending=False)
            worst, best = ratio.index[0], ratio.index[-1]
            lines.append(f"- **End-to-end p99, fault phase against healed phase**: the highest ratio is "
                         f"{worst}'s, {_fmt(e2e.loc[worst, 'fault'])} against {_fmt(e2e.loc[worst, 'heal'])} "
                         f"({_times(ratio.iloc[0])}), the lowest {best}'s ({_fmt(e2e.loc[best, 'fault'])} against "
                         f"{_fmt(e2e.loc[best, 'heal'])}, {_times(ratio.iloc[-1])})"
                         + ("; below 1×, the backlog the fault built up is delivered after the heal." if
                            ratio.iloc[-1] < 1 else "."))
    if "steady" in e2e.columns and "heal" in e2e.columns:
        back = e2e.dropna(subset=["steady", "heal"]) if len(e2e) else e2e
        slow = back[back["heal"] > 2 * back["steady"]] if len(back) else back
        if len(back):
            lines.append("- **After the heal**, end-to-end p99 is " + (
                "back within 2× of the steady phase on every design." if slow.empty else
                "still above 2× the steady phase's on " + ", ".join(
                    f"{label} ({_fmt(r.heal)} against {_fmt(r.steady)})" for label, r in slow.iterrows()) + "."))
    put = latency[latency.op == "put"].pivot_table(index="label", columns="phase", values="p99_ns", sort=False)
    if "fault" in put.columns and put["fault"].notna().any():
        done = put["fault"].dropna()
        if len(done) == 1:
            lines.append(f"- **Put p99 in the fault phase**: only {done.index[0]} completed puts "
                         f"({_fmt(done.iloc[0])}).")
        else:
            lines.append(f"- **Put p99 in the fault phase**: fastest {done.idxmin()} ({_fmt(done.min())}), "
                         f"slowest {done.idxmax()} ({_fmt(done.max())})"
                         + (f"; no put completed on {', '.join(put.index[put['fault'].isna()])}" if
                            put["fault"].isna().any() else "") + ".")
    # throughput
    gets = throughput[throughput.op == "get"].pivot_table(index="label", columns="phase", values="ops_per_s",
                                                          sort=False)
    if {"fault", "heal"} <= set(gets.columns):
        gets = gets.dropna(subset=["fault", "heal"])
        stopped = gets.index[gets["fault"] == 0]
        if len(stopped) == len(gets) and len(gets):
            lines.append("- **Deliveries in the fault phase**: none, on every design; after the heal "
                         + ", ".join(f"{label} {rate:,.0f}/s" for label, rate in gets["heal"].items()) + ".")
        elif len(gets):
            if len(stopped):
                lines.append(f"- **Deliveries in the fault phase**: none on {', '.join(stopped)}.")
            going = gets.drop(stopped)
            kept = (going["fault"] / going["heal"].where(going["heal"] > 0)).dropna().sort_values()
            if len(kept):
                lines.append("- **Deliveries per second, fault phase against healed phase**: "
                             + ("the lowest share " if len(kept) > 1 else "")
                             + f"{kept.index[0]}'s, {kept.iloc[0]:.0%} ({going.loc[kept.index[0], 'fault']:,.0f}/s "
                             f"against {going.loc[kept.index[0], 'heal']:,.0f}/s)"
                             + (f", the highest {kept.index[-1]}'s, {kept.iloc[-1]:.0%} "
                                f"({going.loc[kept.index[-1], 'fault']:,.0f}/s against "
                                f"{going.loc[kept.index[-1], 'heal']:,.0f}/s)" if len(kept) > 1 else "")
                             + ".")
    return "\n".join(lines)
