"""Quick summaries of one run: per-op counts, throughput, latency percentiles, end to end.

This is the one-screen view that ``lab run`` prints and ``manifest.json`` keeps,
computed in-process from the run's samples with the log-bucket histogram. The Spark
pipeline (``lab.aggregate``) is the big, many-run version of the same numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lab.record import LogHistogram, ok_ops

PERCENTILES = {"p50": 0.50, "p99": 0.99, "p999": 0.999}


def summarize(samples: pa.Table) -> dict[str, Any]:
    """``{op: {count, ok, fail, info, ops_per_s, p50_ns, p99_ns, p999_ns, max_ns}}`` plus ``e2e``."""
    result: dict[str, Any] = {}
    for op in ("put", "get", "ack", "release"):
        rows = samples.filter(pc.equal(samples.column("op"), op))
        if rows.num_rows == 0:
            continue
        ok = ok_ops(rows, op)
        outcome = rows.column("outcome")
        entry: dict[str, Any] = {
            "count": rows.num_rows,
            "ok": ok.num_rows,
            "fail": int(pc.sum(pc.equal(outcome, "fail")).as_py() or 0),
            "info": int(pc.sum(pc.equal(outcome, "info")).as_py() or 0),
            "ops_per_s": _throughput(ok_ops(rows, op, measured_only=True)),
        }
        entry.update(_percentiles(ok.column("latency_ns").to_numpy()))
        result[op] = entry
    e2e = end_to_end_ns(samples)
    if e2e.size:
        result["e2e"] = {"count": int(e2e.size), **_percentiles(e2e)}
    delays = samples.column("delay_ns").drop_null().to_numpy()
    if delays.size:  # how late scheduled puts started: large when a stall held producers back
        result["delay"] = {"count": int(delays.size), **_percentiles(np.maximum(delays, 0))}
    return result


def end_to_end_ns(samples: pa.Table) -> np.ndarray:
    """Put start to first delivery, for every delivered message whose put is in the run
    (as the Spark pipeline defines it; redeliveries are the checker's duplicates)."""
    puts = samples.filter(pc.equal(samples.column("op"), "put"))
    put_start: dict[str, int] = {}
    for msg_id, start in zip(puts.column("msg_id").to_pylist(), puts.column("t_start_ns").to_pylist()):
        put_start[msg_id] = min(start, put_start.get(msg_id, start))
    gets = ok_ops(samples, "get")
    first: dict[str, int] = {}
    done = pc.add(gets.column("t_start_ns"), gets.column("latency_ns")).to_pylist()
    for msg_id, d in zip(gets.column("msg_id").to_pylist(), done):
        if msg_id in put_start and d < first.get(msg_id, d + 1):
            first[msg_id] = d
    return np.asarray([d - put_start[m] for m, d in first.items()], dtype=np.int64)


def _percentiles(latencies: np.ndarray) -> dict[str, float]:
    h = LogHistogram()
    h.add_many(latencies)
    out = {f"{name}_ns": h.quantile(q) for name, q in PERCENTILES.items()}
    out["max_ns"] = h.max if h.count else float("nan")
    return out


def _throughput(rows: pa.Table) -> float:
    """Operations per second over the span they cover."""
    if rows.num_rows < 2:
        return float("nan")
    start = pc.min(rows.column("t_start_ns")).as_py()
    end = pc.max(pc.add(rows.column("t_start_ns"), rows.column("latency_ns"))).as_py()
    return rows.num_rows / ((end - start) / 1e9) if end > start else float("nan")


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
    lines = [f"{'op':<8}{'count':>9}{'ok':>9}{'fail':>7}{'info':>7}{'ok/s':>10}{'p50':>11}{'p99':>11}{'p99.9':>11}{'max':>11}"]
    for op, s in summary.items():
        rate = s.get("ops_per_s", float("nan"))
        derived = "ok" not in s  # e2e and delay rows: counts of values, not operations
        lines.append(
            f"{op:<8}{s['count']:>9}{'-' if derived else s['ok']:>9}{'-' if derived else s['fail']:>7}"
            f"{'-' if derived else s['info']:>7}"
            f"{'-' if rate != rate else f'{rate:,.0f}':>10}"
            f"{format_ns(s['p50_ns']):>11}{format_ns(s['p99_ns']):>11}{format_ns(s['p999_ns']):>11}{format_ns(s['max_ns']):>11}"
        )
    return "\n".join(lines)


def format_spark_summary(summary) -> str:
    """The phase="measured" rows of a Spark summary, for people."""
    rows = summary[summary["phase"] == "measured"]
    header = f"{'run':<44}{'op':<6}{'count':>9}{'ok':>9}{'tput p50':>10}{'p50':>10}{'p99':>10}{'p99.9':>10}{'p99.99':>10}"
    lines = [header]
    for _, r in rows.iterrows():
        lines.append(f"{r['run_id'][:43]:<44}{r['op']:<6}{r['count']:>9}{r['ok']:>9}{r['tput_p50']:>10,.0f}"
                     + "".join(f"{format_ns(r[c]):>10}" for c in ("p50_ns", "p99_ns", "p999_ns", "p9999_ns")))
    return "\n".join(lines)
