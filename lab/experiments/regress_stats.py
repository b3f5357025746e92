"""The regression gate's statistics (``lab regress``): the exact one-sided Mann–Whitney U
test, normalisation by the calibration probe, and the verdict on one live metric.

A live metric is judged as asv judges a benchmark: it regressed only when its ratio to the
baseline passes a tolerance factor *and* the difference is significant, so neither a small
steady drift nor one noisy round fails the gate. Here the ratio is of the medians of the
per-round values and the significance is a one-sided Mann–Whitney U test over those
values (each round one sample), exact: the null distribution of the rank sum is counted
over every way to split the pooled ranks (mid-ranks for ties), not approximated. With n
and m rounds the smallest p-value it can give is 1 / C(n + m, n) (0.05 for 3 against 3).

Normalisation: a live figure is scaled by the probe (``lab.experiments.regress.probe``, measured in
every round; ``lab.experiments.regress_compare`` passes the median of a run's rounds) against the
baseline's: a latency by baseline probe / probe now, a throughput by probe now / baseline
probe, so a machine that is uniformly faster or slower than the baseline's does not look
like a change of the design.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median
from typing import Sequence

import numpy as np

OK, IMPROVED, REGRESSED, WORSE, CHANGED, NEW = "ok", "improved", "REGRESSED", "worse", "changed", "new"
#: a run of the set broke a promise, or showed nothing about delivery (``lab.judge.findings.Verdict``)
BROKE, SHOWED_NOTHING = "INVALID", "NO EVIDENCE"
#: statuses that fail the gate (``worse``: past its factor and significant, on a report-only metric)
FAILING = (REGRESSED, CHANGED, NEW, BROKE, SHOWED_NOTHING)
HIGHER, LOWER = "higher", "lower"  # which way a metric gets worse: latency higher, throughput lower


def ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties sharing the mean of their places."""
    array = np.asarray(values, dtype=float)
    order = np.argsort(array, kind="mergesort")
    ranked = np.empty(len(array))
    ranked[order] = np.arange(1, len(array) + 1)
    for value in np.unique(array):
        tied = array == value
        if tied.sum() > 1:
            ranked[tied] = ranked[tied].mean()
    return ranked


def mann_whitney_u(x: Sequence[float], y: Sequence[float], alternative: str = "greater") -> tuple[float, float]:
    """U of ``x`` and the exact one-sided p-value that ``x`` tends to be greater than ``y``
    (``alternative="greater"``) or less (``"less"``); ties by mid-ranks, counted exactly."""
    if alternative not in ("greater", "less"):
        raise ValueError(f"alternative is greater or less, got {alternative!r}")
    n, m = len(x), len(y)
    if n == 0 or m == 0:
        raise ValueError("both samples need at least one value")
    doubled = np.rint(2 * ranks([*x, *y])).astype(np.int64)  # mid-ranks are halves: twice them are whole
    total = int(doubled.sum())
    # ways[k, s]: subsets of k of the pooled values whose doubled ranks sum to s
    ways = np.zeros((n + 1, total + 1))
    ways[0, 0] = 1.0
    for r in doubled:
        ways[1:, r:] += ways[:-1, :total + 1 - r]  # the right side is evaluated first: each value used once
    dist = ways[n] / ways[n].sum()
    observed = int(doubled[:n].sum())
    u = observed / 2 - n * (n + 1) / 2
    p = dist[observed:].sum() if alternative == "greater" else dist[:observed + 1].sum()
    return float(u), float(min(1.0, p))


def smallest_p(n: int, m: int) -> float:
    """The smallest one-sided p-value the exact test can give with n and m values."""
    return 1 / math.comb(n + m, n)


def normalised(values: Sequence[float], probes: Sequence[float], reference: float, worse: str) -> list[float]:
    """Per-round values at the speed of ``reference``: a latency (``worse`` = higher) times
    reference / its probe, a throughput times its probe / reference."""
    if len(values) != len(probes):
        raise ValueError(f"{len(values)} values but {len(probes)} probes")
    if worse == HIGHER:
        return [v * reference / p for v, p in zip(values, probes)]
    return [v * p / reference for v, p in zip(values, probes)]


@dataclass(frozen=True)
class Judgement:
    status: str
    ratio: float  # median now / median baseline (normalised)
    p: float  # one-sided p-value of the change the status names (worse, or better when improved)
    baseline: float  # medians, normalised to the baseline's probe
    now: float


def judge(baseline: Sequence[float], now: Sequence[float], worse: str, factor: float, alpha: float,
          gate: bool = True) -> Judgement:
    """The verdict on one metric from its normalised per-round values: REGRESSED (``worse``
    when the metric does not gate) if the median moved the bad way by ``factor`` or more
    and the one-sided test of that direction gives p < ``alpha``; improved likewise the good
    way; else ok. A median of 0 (or missing values) compares as nothing to judge: ok."""
    if factor < 1:
        raise ValueError(f"a tolerance factor is >= 1, got {factor}")
    base, cur = [v for v in baseline if v == v], [v for v in now if v == v]
    if not base or not cur:
        return Judgement(OK, math.nan, math.nan, median(base) if base else math.nan, median(cur) if cur else math.nan)
    b, c = median(base), median(cur)
    ratio = c / b if b else (math.inf if c else 1.0)
    bad = ratio if worse == HIGHER else (1 / ratio if ratio else math.inf)
    up, down = "greater", "less"
    p_worse = mann_whitney_u(cur, base, up if worse == HIGHER else down)[1]
    p_better = mann_whitney_u(cur, base, down if worse == HIGHER else up)[1]
    if bad >= factor and p_worse < alpha:
        return Judgement(REGRESSED if gate else WORSE, ratio, p_worse, b, c)
    if bad > 0 and 1 / bad >= factor and p_better < alpha:
        return Judgement(IMPROVED, ratio, p_better, b, c)
    return Judgement(OK, ratio, p_worse, b, c)
