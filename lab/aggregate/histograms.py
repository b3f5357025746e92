"""The small results: log-bucket histograms read as percentiles, per-second series filled.

What comes back from the Spark passes (``lab.aggregate.pipeline``) is small, and this room
reads it in pandas, with no Spark: the measured rows (steady, fault and heal merged),
a group's ``LogHistogram`` from its bucket counts (``lab.history.record``: the same quantile
code as every in-process summary), percentiles of histograms merged over any keys (seeds,
runs, phases: adding counts gives the histogram of the union), and the throughput series
with a zero for every empty second, and its percentiles.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lab.history.record import MEASURED_PHASES, LogHistogram

KEYS = ["run_id", "backend", "world", "scenario", "op", "phase"]
QUANTILES = {"p50_ns": 0.50, "p75_ns": 0.75, "p90_ns": 0.90, "p95_ns": 0.95, "p99_ns": 0.99,
             "p999_ns": 0.999, "p9999_ns": 0.9999}
THROUGHPUT = {"tput_p5": 5.0, "tput_p50": 50.0, "tput_p95": 95.0}
ZERO_BUCKET = -(2**31)  # latencies of 0 ns, below every log bucket
MEASURED = "measured"


def with_measured(df: pd.DataFrame, sums: dict[str, str], by: list[str]) -> pd.DataFrame:
    """Add phase "measured" rows: steady, fault and heal merged (counts add up)."""
    measured = df[df.phase.isin(MEASURED_PHASES)]
    if measured.empty:
        return df
    keys = [k for k in KEYS if k != "phase"] + by
    merged = measured.groupby(keys, as_index=False).agg(sums)
    merged["phase"] = MEASURED
    return pd.concat([df, merged[df.columns]], ignore_index=True)


def histogram(rows: pd.DataFrame) -> LogHistogram:
    """The LogHistogram of one group's bucket rows."""
    h = LogHistogram()
    zero = rows.bucket == ZERO_BUCKET
    h.zeros = int(rows.n[zero].sum())
    h.counts = dict(zip(rows.bucket[~zero].tolist(), rows.n[~zero].tolist()))
    h.count = int(rows.n.sum())
    h.min, h.max = float(rows.lo.min()), float(rows.hi.max())
    return h


def percentiles(histograms: pd.DataFrame, keys: list[str] = KEYS) -> pd.DataFrame:
    """keys -> p50_ns … p9999_ns, max_ns: histograms merged over everything not in keys."""
    merged = histograms.groupby([*keys, "bucket"], as_index=False).agg(n=("n", "sum"), lo=("lo", "min"),
                                                                      hi=("hi", "max"))
    out = []
    for key, rows in merged.groupby(keys, sort=True):
        h = histogram(rows)
        out.append({**dict(zip(keys, key)), **{name: h.quantile(q) for name, q in QUANTILES.items()},
                    "max_ns": h.max})
    return pd.DataFrame(out, columns=[*keys, *QUANTILES, "max_ns"])


def fill_series(series: pd.DataFrame) -> pd.DataFrame:
    """Per group, every whole second of its span (zeros included), partial edges trimmed;
    seconds counted from the run's first second."""
    filled = []
    run_start = series.groupby("run_id")["second"].min()
    for key, rows in series.groupby(KEYS, sort=True):
        first, last = int(rows.second.min()), int(rows.second.max())
        if last - first >= 2:
            first, last = first + 1, last - 1
        seconds = np.arange(first, last + 1)
        ops = rows.groupby("second")["ops"].sum().reindex(seconds, fill_value=0)
        frame = pd.DataFrame({"second": seconds - run_start[key[0]], "ops": ops.to_numpy(dtype=np.int64)})
        for k, v in zip(KEYS, key):
            frame[k] = v
        filled.append(frame)
    if not filled:
        return pd.DataFrame(columns=[*KEYS, "second", "ops"])
    return pd.concat(filled, ignore_index=True)[[*KEYS, "second", "ops"]]


def throughput_percentiles(series: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for key, group in series.groupby(KEYS, sort=True):
        values = np.percentile(group.ops.to_numpy(dtype=float), list(THROUGHPUT.values()))
        rows.append({**dict(zip(KEYS, key)), **dict(zip(THROUGHPUT, values))})
    return pd.DataFrame(rows, columns=[*KEYS, *THROUGHPUT])
