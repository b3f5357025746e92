"""Quick summaries of one run: per-op counts, throughput, latency percentiles, end to end.

This is the one-screen view that ``lab run`` prints and ``manifest.json`` keeps,
computed in-process from the run's samples with the log-bucket histogram. The Spark
pipeline (``lab.aggregate.pipeline``) is the big, many-run version of the same numbers.

Every row says which phases it covers: the top-level entries cover the whole run (every
phase, as the checker counts), ``summary["measured"]`` the measured phases (steady, fault,
heal) — the same rows as the Spark pipeline's ``phase = "measured"``, which ``lab compare``
tables and charts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import pyarrow as pa

from lab.history.record import MEASURED_PHASES, LogHistogram, mask, message_codes

if TYPE_CHECKING:
    import pandas as pd  # a Spark summary's frame (pandas is the aggregate extra's)

PERCENTILES = {"p50": 0.50, "p99": 0.99, "p999": 0.999}
MEASURED = "measured"  # the key of the measured-phases rows, as lab.aggregate.histograms names them
PHASES_NOTE = ("all = every phase (warmup to drain); measured = steady, fault, heal, as `lab compare` and "
               "the Spark pipeline report. e2e = put start to first delivery, in the phase of that delivery.")


def summarize(samples: pa.Table) -> dict[str, Any]:
    """``{op: {count, ok, fail, info, ops_per_s, p50_ns, p99_ns, p999_ns, max_ns}}`` plus ``e2e``
    and ``delay``, over the whole run, and ``measured``: the same op and ``e2e`` entries over
    the measured phases. Works on numpy masks and columns (string columns may be
    dictionary-encoded): a long run's summary copies no table."""
    columns = _Columns(samples)
    result = _by_op(columns)
    delays = samples.column("delay_ns").drop_null().to_numpy()
    if delays.size:  # how late scheduled puts started: large when a stall held producers back
        result["delay"] = {"count": int(delays.size), **_percentiles(np.maximum(delays, 0))}
    result[MEASURED] = _by_op(columns, MEASURED_PHASES)
    return result


class _Columns:
    """The columns a summary reads, as numpy arrays and masks."""

    def __init__(self, samples: pa.Table):
        self.samples = samples
        self.start = samples.column("t_start_ns").to_numpy()
        self.latency = samples.column("latency_ns").to_numpy()
        self.ok = mask(samples, "outcome", "ok")
        self.ids, self.codes = message_codes(samples)

    def phase_in(self, phases: Iterable[str]) -> np.ndarray:
        return mask(self.samples, "phase", *phases)


def _by_op(columns: _Columns, phases: Iterable[str] | None = None) -> dict[str, Any]:
    """Per op and e2e: counts, ok throughput and latency of the rows in ``phases`` (None: all)."""
    result: dict[str, Any] = {}
    samples = columns.samples
    within = columns.phase_in(phases) if phases is not None else None
    for op in ("put", "get", "ack", "release"):
        rows = mask(samples, "op", op)
        if within is not None:
            rows &= within
        count = int(rows.sum())
        if count == 0:
            continue
        ok = rows & columns.ok
        if op == "get":
            ok &= columns.codes >= 0  # deliveries, not empty polls
        entry: dict[str, Any] = {
            "count": count,
            "ok": int(ok.sum()),
            "fail": int((rows & mask(samples, "outcome", "fail")).sum()),
            "info": int((rows & mask(samples, "outcome", "info")).sum()),
            "ops_per_s": _throughput(columns.start[ok], columns.latency[ok]),
        }
        entry.update(_percentiles(columns.latency[ok]))
        result[op] = entry
    e2e = _end_to_end(columns, phases)  # all samples: a put may lie outside the phases
    if e2e.size:
        result["e2e"] = {"count": int(e2e.size), **_percentiles(e2e)}
    return result


def end_to_end_ns(samples: pa.Table, phases: Iterable[str] | None = None) -> np.ndarray:
    """Put start to first delivery, for every delivered message whose put is in the run
    (as the Spark pipeline defines it; redeliveries are the checker's duplicates).

    With ``phases``, only messages whose first delivery falls in one of them: the pipeline
    counts a message's end-to-end latency in the phase of that delivery."""
    return _end_to_end(_Columns(samples), phases)


def _end_to_end(columns: _Columns, phases: Iterable[str] | None) -> np.ndarray:
    samples, codes = columns.samples, columns.codes
    put = mask(samples, "op", "put") & (codes >= 0)
    put_start = np.full(len(columns.ids), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(put_start, codes[put], columns.start[put])
    rows = np.flatnonzero(mask(samples, "op", "get") & columns.ok & (codes >= 0))
    rows = rows[put_start[codes[rows]] != np.iinfo(np.int64).max]  # delivered, and put in the run
    done = columns.start[rows] + columns.latency[rows]
    order = np.argsort(done, kind="stable")  # completion order; ties keep record order
    rows, done = rows[order], done[order]
    _, first = np.unique(codes[rows], return_index=True)  # each message's first delivery
    rows, done = rows[first], done[first]
    e2e: np.ndarray = done - put_start[codes[rows]]  # numpy's stubs type this Any
    if phases is not None:
        e2e = e2e[columns.phase_in(phases)[rows]]
    return e2e


def _percentiles(latencies: np.ndarray) -> dict[str, float]:
    h = LogHistogram()
    h.add_many(latencies)
    out = {f"{name}_ns": h.quantile(q) for name, q in PERCENTILES.items()}
    out["max_ns"] = h.max if h.count else float("nan")
    return out


def _throughput(start: np.ndarray, latency: np.ndarray) -> float:
    """Operations per second over the span they cover."""
    if start.size < 2:
        return float("nan")
    first, last = int(start.min()), int((start + latency).max())
    return start.size / ((last - first) / 1e9) if last > first else float("nan")


def format_ns(ns: float) -> str:
    """A latency for people: 850 ns, 12.3 µs, 4.56 ms, 1.20 s."""
    if ns != ns:  # NaN
        return "-"
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.3g} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.3g} ms"
    return f"{ns / 1e9:.3g} s"


def format_table(summary: dict[str, Any]) -> str:
    """The summary for people: the whole run's rows, then the measured phases', each row
    naming its phases, and a line saying what the phases are."""
    lines = [f"{'op':<8}{'phases':<10}{'count':>9}{'ok':>9}{'fail':>7}{'info':>7}{'ok/s':>10}"
             f"{'p50':>11}{'p99':>11}{'p99.9':>11}{'max':>11}"]
    blocks = [("all", {k: v for k, v in summary.items() if k != MEASURED}), (MEASURED, summary.get(MEASURED, {}))]
    for phases, rows in blocks:
        for op, s in rows.items():
            rate = s.get("ops_per_s", float("nan"))
            derived = "ok" not in s  # e2e and delay rows: counts of values, not operations
            lines.append(
                f"{op:<8}{phases:<10}{s['count']:>9}{'-' if derived else s['ok']:>9}"
                f"{'-' if derived else s['fail']:>7}{'-' if derived else s['info']:>7}"
                f"{'-' if rate != rate else f'{rate:,.0f}':>10}"
                f"{format_ns(s['p50_ns']):>11}{format_ns(s['p99_ns']):>11}{format_ns(s['p999_ns']):>11}"
                f"{format_ns(s['max_ns']):>11}"
            )
    lines.append(PHASES_NOTE)
    return "\n".join(lines)


def format_spark_summary(summary: pd.DataFrame) -> str:
    """The phase="measured" rows of a Spark summary, for people, under a line naming the phases."""
    rows = summary[summary["phase"] == MEASURED]
    header = f"{'run':<44}{'op':<6}{'count':>9}{'ok':>9}{'tput p50':>10}{'p50':>10}{'p99':>10}{'p99.9':>10}{'p99.99':>10}"
    lines = [f"{MEASURED} phases ({', '.join(MEASURED_PHASES)}; not warm-up or drain):", header]
    for _, r in rows.iterrows():
        lines.append(f"{r['run_id'][:43]:<44}{r['op']:<6}{r['count']:>9}{r['ok']:>9}{r['tput_p50']:>10,.0f}"
                     + "".join(f"{format_ns(r[c]):>10}" for c in ("p50_ns", "p99_ns", "p999_ns", "p9999_ns")))
    return "\n".join(lines)
