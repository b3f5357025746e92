"""What ``lab mutants --generate`` prints and writes: per design, the sites generated, those
that could be planted, those whose runs changed any history (**differing**), those the lab
caught (**killed**), the kill rate among the differing, and each survivor with its change and
whether it differed or is likely equivalent; ``generated.md`` and ``generated.csv`` (one row
per generated site) in the hunt's folder.

It reads a finished hunt (``lab.experiments.hunt.HuntResult``) through the hunt report's
protocol (``lab.experiments.hunt_report.HuntResult``) and the two fields a generated hunt adds:
the hunt calls this room, so this room does not import the hunt.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from lab.experiments.generated import compare
from lab.experiments.generated.plan import Plan
from lab.experiments.generated.sites import Site
from lab.experiments.hunt_report import HuntResult

COLUMNS = ("design", "mutant", "where", "operator", "change", "status", "runs", "differing_runs", "caught_by",
           "verdicts", "why_not_planted")


class _Result(HuntResult, Protocol):  # lab.experiments.hunt.HuntResult, read only: a generated hunt's too
    @property
    def control_keys(self) -> Mapping[str, list[str]]: ...
    @property
    def generated(self) -> Plan | None: ...


@dataclass(frozen=True)
class Row:
    site: Site
    change: str
    status: str
    runs: int = 0
    differing_runs: int = 0
    caught_by: str = ""
    verdicts: str = ""
    why_not_planted: str = ""
    out_of_budget: bool = False


def rows(result: _Result) -> list[Row]:
    """One row per generated site, in the plan's order."""
    plan = result.generated
    if plan is None:
        return []
    hunts = {h.mutant.name: h for h in result.hunts}
    out = []
    for design_sites in plan.sites.values():
        for site in design_sites:
            h = hunts.get(site.name)
            if h is None:
                out.append(Row(site, "", "cannot be planted", why_not_planted=plan.unplantable.get(site.name, "")))
                continue
            keys = result.control_keys.get(site.name, [])
            pairs = [(run, result.controls.get(key)) for (_, run), key in zip(h.runs, keys)]
            judged = compare.judge(pairs, killed=h.caught is not None)
            verdicts = Counter(run.verdict for _, run in h.runs)
            caught_by = h.caught[0].label if h.caught else next(
                (f"{trial.label} (raised)" for (trial, run), (_, control) in zip(h.runs, pairs)
                 if compare.raised(run, control)), "")
            out.append(Row(site, h.mutant.mistake.split(": ", 1)[-1], judged.status, judged.runs, judged.differing,
                           caught_by,
                           ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items())), "", h.out_of_budget))
    return out


def lines(result: _Result) -> list[str]:
    """The report: a head line, then per design its figures and survivors."""
    table = rows(result)
    plan = result.generated
    screen = f", screened after {plan.spec.screen} matching runs" if plan is not None and plan.spec.screen else ""
    out = [f"lab mutants --generate (sim, base load + {result.seeds} swarm seeds per mutant{screen}): "
           f"{len(result.false_alarms)} false alarm(s) in {len(result.controls)} control run(s), "
           f"{result.wall_seconds:.0f} s wall" + (" — INTERRUPTED" if result.interrupted else "")]
    designs = list(dict.fromkeys(r.site.design for r in table))
    for design in designs:
        mine = [r for r in table if r.site.design == design]
        planted = [r for r in mine if r.status != "cannot be planted"]
        out += ["", f"{design}: {figures(mine)}"]
        for r in planted:
            if r.status != compare.KILLED:
                budget = ", out of budget" if r.out_of_budget else ""
                out.append(f"  {r.status.removeprefix('survivor: ')}: {r.site.where} {r.site.operator}: {r.change} "
                           f"({r.differing_runs} of {r.runs} runs differed; {r.verdicts or 'no run'}{budget})")
        unplanted = [r for r in mine if r.status == "cannot be planted"]
        if unplanted:
            out.append(f"  cannot be planted: {len(unplanted)} (e.g. {unplanted[0].site.name}: "
                       f"{unplanted[0].why_not_planted})")
    if len(designs) > 1:
        out += ["", f"all {len(designs)} designs: {figures(table)}"]
    for run in result.false_alarms:
        out.append(f"FALSE ALARM: {run.verdict.upper()} {run.reason} ({run.run_dir})")
    out.append(f"results: {result.directory}")
    return out


def figures(table: Sequence[Row]) -> str:
    """Generated, plantable, differing, killed, and the kill rate among the differing, in words."""
    planted = [r for r in table if r.status != "cannot be planted"]
    differing = [r for r in planted if r.differing_runs]
    killed = [r for r in planted if r.status == compare.KILLED]
    caught = sum(1 for r in differing if r.status == compare.KILLED)
    rate = f"{100 * caught / len(differing):.0f}% ({caught}/{len(differing)})" if differing else "-"
    return (f"generated {len(table)}, plantable {len(planted)}, differing {len(differing)}, killed {len(killed)}, "
            f"kill rate among differing {rate}")


def write(result: _Result) -> None:
    """``generated.md`` and ``generated.csv`` in the hunt's folder."""
    table = rows(result)
    with open(result.directory / "generated.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        for r in table:
            writer.writerow({"design": r.site.design, "mutant": r.site.name, "where": r.site.where,
                             "operator": r.site.operator, "change": r.change,
                             "status": r.status + (" (out of budget)" if r.out_of_budget else ""), "runs": r.runs,
                             "differing_runs": r.differing_runs, "caught_by": r.caught_by, "verdicts": r.verdicts,
                             "why_not_planted": r.why_not_planted})
    state = "interrupted: the hunt was stopped before it ended\n\n" if result.interrupted else ""
    body = ["| mutant | where | operator | change | status | runs | differed | caught by |", "|" + "---|" * 8]
    for r in table:
        change = (r.change or r.why_not_planted).replace("|", "\\|")
        body.append(f"| `{r.site.name}` | {r.site.where} | {r.site.operator} | `{change}` | {r.status} | {r.runs} | "
                    f"{r.differing_runs} | {r.caught_by or '-'} |")
    text = "\n".join(f"    {line}" for line in lines(result))
    (result.directory / "generated.md").write_text(f"# lab mutants --generate\n\n{state}{text}\n\n" + "\n".join(body)
                                                   + "\n")
