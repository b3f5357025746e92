"""Quick summaries of one run: per-op counts, throughput, latency percentiles, end to end.

This is the one-screen view that ``lab run`` prints and ``manifest.json`` keeps,
computed in-process from the run's samples with the log-bucket histogram. The Spark
pipeline (``lab.aggregate``) is the big, many-run version of the same numbers.

Every row says which phases it covers: the top-level entries cover the whole run (every
phase, as the checker counts), ``summary["measured"]`` the measured phases (steady, fault,
heal) — the same rows as the Spark pipeline's ``phase = "measured"``, which ``lab compare``
tables and charts.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lab.record import MEASURED_PHASES, LogHistogram, ok_ops

PERCENTILES = {"p50": 0.50, "p99": 0.99, "p999": 0.999}
MEASURED = "measured"  # the key of the measured-phases rows, as lab.aggregate names them
PHASES_NOTE = ("all = every phase (warmup to drain); measured = steady, fault, heal, as `lab compare` and "
               "the Spark pipeline report. e2e = put start to first delivery, in the phase of that delivery.")


def summarize(samples: pa.Table) -> dict[str, Any]:
    """``{op: {count, ok, fail, info, ops_per_s, p50_ns, p99_ns, p999_ns, max_ns}}`` plus ``e2e``
    and ``delay``, over the whole run, and ``measured``: the same op and ``e2e`` entries over
    the measured phases."""
    result = _by_op(samples)
    delays = samples.column("delay_ns").drop_null().to_numpy()
    if delays.size:  # how late scheduled puts started: large when a stall held producers back
        result["delay"] = {"count": int(delays.size), **_percentiles(np.maximum(delays, 0))}
    result[MEASURED] = _by_op(samples, MEASURED_PHASES)
    return result


def _by_op(samples: pa.Table, phases: Iterable[str] | None = None) -> dict[str, Any]:
    """Per op and e2e: counts, ok throughput and latency of the rows in ``phases`` (None: all)."""
    result: dict[str, Any] = {}
    rows_in = samples
    if phases is not None:
        rows_in = samples.filter(pc.is_in(samples.column("phase"), value_set=pa.array(list(phases))))
    for op in ("put", "get", "ack", "release"):
        rows = rows_in.filter(pc.equal(rows_in.column("op"), op))
        if rows.num_rows == 0:
            continue
        ok = ok_ops(rows, op)
        outcome = rows.column("outcome")
        entry: dict[str, Any] = {
            "count": rows.num_rows,
            "ok": ok.num_rows,
            "fail": int(pc.sum(pc.equal(outcome, "fail")).as_py() or 0),
            "info": int(pc.sum(pc.equal(outcome, "info")).as_py() or 0),
            "ops_per_s": _throughput(ok),
        }
        entry.update(_percentiles(ok.column("latency_ns").to_numpy()))
        result[op] = entry
    e2e = end_to_end_ns(samples, phases)  # all samples: a put may lie outside the phases
    if e2e.size:
        result["e2e"] = {"count": int(e2e.size), **_percentiles(e2e)}
    return result


def end_to_end_ns(samples: pa.Table, phases: Iterable[str] | None = None) -> np.ndarray:
    """Put start to first delivery, for every delivered message whose put is in the run
    (as the Spark pipeline defines it; redeliveries are the checker's duplicates).

    With ``phases``, only messages whose first delivery falls in one of them: the pipeline
    counts a message's end-to-end latency in the phase of that delivery."""
    puts = samples.filter(pc.equal(samples.column("op"), "put"))
    put_ids = puts.column("msg_id").cast(pa.string())
    ids = pc.unique(put_ids.drop_null())
    put_codes = pc.index_in(put_ids, value_set=ids).to_numpy(zero_copy_only=False)
    starts = puts.column("t_start_ns").to_numpy(zero_copy_only=False)
    known = ~np.isnan(put_codes) if put_codes.dtype.kind == "f" else np.ones(put_codes.size, bool)
    put_start = np.full(len(ids), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(put_start, put_codes[known].astype(np.int64), starts[known].astype(np.int64))
    gets = ok_ops(samples, "get")
    done = pc.add(gets.column("t_start_ns"), gets.column("latency_ns")).to_numpy(zero_copy_only=False)
    codes = pc.index_in(gets.column("msg_id").cast(pa.string()), value_set=ids).to_numpy(zero_copy_only=False)
    delivered = ~np.isnan(codes) if codes.dtype.kind == "f" else np.ones(codes.size, bool)
    rows = np.flatnonzero(delivered)
    rows = rows[np.argsort(done[rows], kind="stable")]  # completion order; ties keep record order
    code = codes[rows].astype(np.int64)
    _, first = np.unique(code, return_index=True)  # each message's first delivery
    rows = rows[first]
    e2e = done[rows].astype(np.int64) - put_start[codes[rows].astype(np.int64)]
    if phases is not None:
        phase = gets.column("phase").take(pa.array(rows, pa.int64()))
        e2e = e2e[pc.is_in(phase, value_set=pa.array(list(phases))).to_numpy(zero_copy_only=False)]
    return e2e


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


def format_spark_summary(summary) -> str:
    """The phase="measured" rows of a Spark summary, for people, under a line naming the phases."""
    rows = summary[summary["phase"] == MEASURED]
    header = f"{'run':<44}{'op':<6}{'count':>9}{'ok':>9}{'tput p50':>10}{'p50':>10}{'p99':>10}{'p99.9':>10}{'p99.99':>10}"
    lines = [f"{MEASURED} phases ({', '.join(MEASURED_PHASES)}; not warm-up or drain):", header]
    for _, r in rows.iterrows():
        lines.append(f"{r['run_id'][:43]:<44}{r['op']:<6}{r['count']:>9}{r['ok']:>9}{r['tput_p50']:>10,.0f}"
                     + "".join(f"{format_ns(r[c]):>10}" for c in ("p50_ns", "p99_ns", "p999_ns", "p9999_ns")))
    return "\n".join(lines)
