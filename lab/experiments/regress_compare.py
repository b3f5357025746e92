"""The regression gate's comparison (``lab regress``, ``lab.experiments.regress`` runs it): the
figures of one gate run against the baseline's, row by row, and the table of the rows.

Sim figures must equal the baseline's exactly (``changed`` otherwise). Live metrics are
``LIVE_METRICS``: each with the way it gets worse, its tolerance factor, and the workloads
in which it gates (elsewhere it is reported: ``worse`` does not fail the gate); each is
judged on its per-round values, normalised by the median of the run's probes against
the baseline's (``lab.experiments.regress_stats``). An entry the baseline lacks is ``new``; one whose workload the
baseline knew with other fields is ``changed``. Both fail until the baseline is updated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any

from lab.experiments.regress_stats import (BROKE, CHANGED, FAILING, HIGHER, LOWER, NEW, OK, REGRESSED, SHOWED_NOTHING,
                                           Judgement, judge, normalised)
from lab.judge.findings import Verdict
from lab.judge.summary import format_ns

@dataclass
class Figures:
    """What one gate run measured: sim figures per key, live per-round figures per key."""

    sim: dict[str, dict[str, Any]] = field(default_factory=dict)
    live: dict[str, dict[str, Any]] = field(default_factory=dict)
    probes: list[dict[str, float]] = field(default_factory=list)  # the live rounds' probes, in order
    #: "world key" -> the verdict of each of its runs: the set has no fault, so each must be valid
    verdicts: dict[str, list[str]] = field(default_factory=dict)


ALPHA = 0.05  # a live change is significant below this one-sided p-value


@dataclass(frozen=True)
class Metric:
    name: str
    op: str
    column: str
    worse: str  # HIGHER (a latency) or LOWER (a throughput)
    factor: float  # where it is reported: past this (and significant) it is marked worse
    gate: tuple[tuple[str, float], ...] = ()  # (workload, factor) where it gates: REGRESSED past that factor

    def judged_by(self, workload: str) -> tuple[float, bool]:
        """The factor for ``workload``, and whether the metric gates there."""
        factor = dict(self.gate).get(workload)
        return (self.factor, False) if factor is None else (factor, True)


#: Gating: each design's put p50, in steady (below every design's capacity) by a factor,
#: in burst-reliable (closed loop: clients and servers share the cores, and the machine's
#: other work shows) by a wider one; burst's put throughput gates only on a collapse. End
#: to end (it waits behind a backlog that depends on the machine's load), the tails and
#: the throughput of a rate-limited workload (its rate) are reported. docs/regress.md has the run-to-run spread these factors were chosen from.
LIVE_METRICS = (
    Metric("put p50", "put", "p50_ns", HIGHER, 2.0, (("steady", 1.5), ("burst-reliable", 2.5))),
    Metric("e2e p50", "e2e", "p50_ns", HIGHER, 2.0),
    Metric("put p99", "put", "p99_ns", HIGHER, 2.0),
    Metric("e2e p99", "e2e", "p99_ns", HIGHER, 3.0),
    Metric("put/s p5", "put", "tput_p5", LOWER, 2.0),
    Metric("put/s p50", "put", "tput_p50", LOWER, 2.0, (("burst-reliable", 3.0),)),
    Metric("put/s p95", "put", "tput_p95", LOWER, 2.0),
    Metric("get/s p50", "get", "tput_p50", LOWER, 2.0),
)


@dataclass
class Row:
    design: str
    workload: str
    world: str
    metric: str
    baseline: Any
    now: Any
    ratio: float | None
    p: float | None
    status: str
    gates: bool = True

    def cells(self) -> list[str]:
        ratio = "-" if self.ratio is None or self.ratio != self.ratio else f"{self.ratio:.2f}x"
        p = "exact" if self.world == "sim" else ("-" if self.p is None or self.p != self.p else f"{self.p:.3f}")
        return [self.design, self.workload, self.world, self.metric + ("" if self.gates else " (report)"),
                _show(self.metric, self.baseline), _show(self.metric, self.now), ratio, p, self.status]


def _show(metric: str, value: Any) -> str:
    if value is None or isinstance(value, str):
        return value or "-"
    if "/s" in metric or "tput" in metric:
        return f"{value:,.0f}/s"
    if metric.endswith("_ns") or metric.split()[-1].startswith("p"):
        return format_ns(float(value))
    return f"{value:,.6g}"


def same_workload(before: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether a workload is the one the baseline ran: every field the baseline recorded is
    the same now (a field added to workloads since, at its default, changes no figure)."""
    return all(now.get(name) == value for name, value in before.items())


def _unknown(design: str, name: str, world: str, base: dict[str, Any] | None, entry: dict[str, Any]) -> Row | None:
    """The row of an entry the baseline cannot judge (``new``, or ``changed``: another workload); None if it can."""
    if base is None:
        return Row(design, name, world, "not in the baseline", None, None, None, None, NEW)
    if not same_workload(base["workload"], entry["workload"]):
        return Row(design, name, world, "its workload differs from the baseline's", None, None, None, None, CHANGED)
    return None


def compare(figures: Figures, baseline: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for k, entry in sorted(figures.sim.items()):
        name, design = k.split("/")
        base = baseline.get("sim", {}).get(k)
        if (unknown := _unknown(design, name, "sim", base, entry)) is not None:
            rows.append(unknown)
            continue
        old, new = base["figures"], entry["figures"]
        differ = [m for m in sorted(set(old) | set(new)) if old.get(m, "absent") != new.get(m, "absent")]
        if not differ:
            rows.append(Row(design, name, "sim", f"all {len(new)} figures", "=", "=", 1.0, None, OK))
        for m in differ:
            a, b = old.get(m), new.get(m)
            ratio = b / a if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a else None
            rows.append(Row(design, name, "sim", m, a, b, ratio, None, CHANGED))
    for k, entry in sorted(figures.live.items()):
        name, design = k.split("/")
        base = baseline.get("live", {}).get(k)
        if (unknown := _unknown(design, name, "live", base, entry)) is not None:
            rows.append(unknown)
            continue
        # each run's figures at the speed of its rounds' median probe: one round's probe is noisier
        # than the machine's speed changes within a run (which the interleaving spreads over all)
        reference, speed = median(base["probe_us"]), median(entry["probe_us"])
        for m in LIVE_METRICS:
            factor, gates = m.judged_by(name)
            old = [v for v in base["figures"].get(m.name, []) if v is not None]
            new = [v for v in entry["figures"][m.name] if v is not None]
            j: Judgement = judge(normalised(old, [reference] * len(old), reference, m.worse),
                                 normalised(new, [speed] * len(new), reference, m.worse), m.worse, factor, ALPHA, gates)
            rows.append(Row(design, name, "live", m.name, j.baseline, j.now, j.ratio, j.p, j.status, gates))
    for world_key, verdicts in sorted(figures.verdicts.items()):
        world, k = world_key.split(" ")
        name, design = k.split("/")
        judged = [v for v in verdicts if v != Verdict.VALID]  # the worst first: a broken promise, then no evidence
        worst = min(judged, key=lambda v: v != Verdict.INVALID, default=None)
        if worst is not None:  # figures of a run that broke a promise or showed nothing stand for nothing
            status = BROKE if worst == Verdict.INVALID else SHOWED_NOTHING if worst == Verdict.NO_EVIDENCE else OK
            rows.append(Row(design, name, world, "verdict", Verdict.VALID, f"{worst} ({len(judged)} of "
                            f"{len(verdicts)} runs)", None, None, status))
    return rows


HEADER = ["design", "workload", "world", "metric", "baseline", "now", "ratio", "p", "status"]


def text_table(rows: list[Row]) -> str:
    cells = [HEADER] + [r.cells() for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def failing(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.status in FAILING]


def verdict_lines(rows: list[Row], update: bool) -> list[str]:
    bad = failing(rows)
    if update:
        return ["baseline updated"]
    if not bad:
        return [f"PASS: nothing regressed ({len(rows)} rows)"]
    lines = [f"FAIL: {len(bad)} of {len(rows)} rows: " + ", ".join(
        f"{r.design} {r.workload} {r.world} {r.metric} {r.status}" for r in bad[:8]) + (" ..." if len(bad) > 8 else "")]
    if any(r.status == REGRESSED for r in bad):
        lines.append(f"REGRESSED: the median moved past the metric's factor and a one-sided Mann-Whitney U test over "
                     f"the rounds gives p < {ALPHA:g}")
    if any(r.status in (BROKE, SHOWED_NOTHING) for r in bad):
        lines.append("INVALID or NO EVIDENCE: a run of the set (no fault in it) broke a promise or delivered nothing; "
                     "its figures say nothing about speed until its verdict is valid again")
    if any(r.status in (CHANGED, NEW) for r in bad):
        lines.append("changed or new: the sim figures are deterministic, so any difference is a change; if it is "
                     "intended, run the gate again with --update --reason \"why\" and commit the baseline")
    return lines
