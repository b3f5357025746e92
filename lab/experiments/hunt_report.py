"""What `lab mutants` prints and writes for a hunt: a row per mutant (caught, by which run,
after how many, its shrunk schedule, its controls), the lines the command prints, and
``mutants.md`` / ``mutants.csv`` in the hunt's folder.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from lab.design.mutants import Mutant
from lab.judge.findings import Verdict
from lab.experiments.swarm_worker import ERROR, SeedRun


class HuntView(Protocol):  # lab.experiments.hunt.Hunt, read only (the hunt calls this room)
    @property
    def mutant(self) -> Mutant: ...
    @property
    def runs(self) -> list[tuple[Any, SeedRun]]: ...
    @property
    def caught(self) -> tuple[Any, SeedRun] | None: ...
    @property
    def shrunk(self) -> str | None: ...
    @property
    def errors(self) -> int: ...
    @property
    def refused(self) -> list[str]: ...
    @property
    def out_of_budget(self) -> bool: ...

    @property
    def runs_to_catch(self) -> int: ...
    @property
    def seconds(self) -> float: ...


class HuntResult(Protocol):  # lab.experiments.hunt.HuntResult, read only
    @property
    def directory(self) -> Path: ...
    @property
    def world(self) -> str: ...
    @property
    def seeds(self) -> int: ...
    @property
    def hunts(self) -> Sequence[HuntView]: ...
    @property
    def controls(self) -> dict[str, SeedRun]: ...
    @property
    def wall_seconds(self) -> float: ...
    @property
    def interrupted(self) -> bool: ...

    def control_runs(self, name: str) -> list[SeedRun]: ...
    @property
    def false_alarms(self) -> list[SeedRun]: ...
    @property
    def without_evidence(self) -> list[SeedRun]: ...

COLUMNS = ("mutant", "design", "promise", "caught", "caught_by", "runs", "seconds", "shrunk", "control_runs",
           "control_invalid", "errors")


def rows(result: HuntResult) -> list[dict[str, Any]]:
    out = []
    for h in result.hunts:
        controls = result.control_runs(h.mutant.name)
        out.append({
            "mutant": h.mutant.name, "design": h.mutant.label, "promise": h.mutant.promise,
            "caught": "yes" if h.caught else "no",
            "caught_by": h.caught[0].label if h.caught else "",
            "runs": h.runs_to_catch,
            "seconds": round(h.seconds, 1),
            "shrunk": h.shrunk if h.caught else "",
            "control_runs": len(controls),
            "control_invalid": sum(1 for r in controls if r.verdict in (Verdict.INVALID, ERROR)),
            "errors": h.errors,
        })
    return out


def report_lines(result: HuntResult) -> list[str]:
    table = rows(result)
    caught = sum(1 for r in table if r["caught"] == "yes")
    alarms = result.false_alarms
    lines = [f"lab mutants ({result.world}, {result.seeds} seeds): caught {caught} of {len(table)}, "
             f"{len(alarms)} false alarm(s) in {len(result.controls)} control run(s), "
             f"{result.wall_seconds:.0f} s wall" + (" — INTERRUPTED" if result.interrupted else ""), ""]
    lines += markdown_table(table)
    for h in result.hunts:
        if not h.caught:
            lines.append(f"NOT CAUGHT: {h.mutant.name} ({h.mutant.promise}: {h.mutant.mistake}) in {len(h.runs)} runs"
                         + (" (out of budget)" if h.out_of_budget else ""))
        if h.refused:
            lines.append(f"skipped {len(h.refused)} run(s) of {h.mutant.name}: {h.refused[0]}")
    for run in alarms:
        lines.append(f"FALSE ALARM: {run.verdict.upper()} {run.reason} ({run.run_dir})")
    for run in result.without_evidence:
        lines.append(f"NO EVIDENCE in a control run: {run.reason} ({run.run_dir})")
    lines.append(f"results: {result.directory}")
    return lines


def markdown_table(table: Sequence[Mapping[str, Any]]) -> list[str]:
    head = ("mutant", "promise it breaks", "caught", "first caught by", "runs", "s", "shrunk fault schedule",
            "control (invalid/runs)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table:
        lines.append("| " + " | ".join(str(x) for x in (
            r["mutant"], r["promise"], r["caught"], r["caught_by"] or "-", r["runs"], f"{r['seconds']:.1f}",
            r["shrunk"] or "-", f"{r['control_invalid']}/{r['control_runs']}")) + " |")
    return lines


def write(result: HuntResult) -> None:
    table = rows(result)
    with open(result.directory / "mutants.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    state = "interrupted: the hunt was stopped before it ended\n\n" if result.interrupted else ""
    (result.directory / "mutants.md").write_text(f"# lab mutants\n\n{state}" + "\n".join(report_lines(result)) + "\n")
