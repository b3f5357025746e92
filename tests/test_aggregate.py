"""The Spark pipeline against exact numbers: percentiles, end to end, throughput, merging, checks."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pyspark.sql import functions as F

from lab.aggregate.histograms import QUANTILES, percentiles
from lab.aggregate.pipeline import (CHECK_COLUMNS, SUMMARY_COLUMNS, aggregate, messages_pass, operations_pass,
                                    with_verdicts)
from lab.aggregate.runs import load_samples, run_manifests, single_run
from lab.judge.checker import check
from lab.history.record import ALPHA, Recorder, read_samples, write_samples
from lab.experiments.runner import run
from lab.workloads.spec import parse_workload
from tests.history import history


def write_run(path, run_id, rows, backend="hand", scenario="hand-made"):
    """rows: (op, client, msg_id, outcome, t_start_ns, latency_ns[, phase])."""
    rec = Recorder(run_id, "sim", backend, scenario)
    for op, client, msg_id, outcome, start, latency, *phase in rows:
        rec.record(node="n", client=client, op=op, queue="q0", msg_id=msg_id, t_start_ns=start, latency_ns=latency,
                   outcome=outcome, nbytes=10, phase=phase[0] if phase else "steady")
    path.mkdir(parents=True, exist_ok=True)
    write_samples(rec.table(), path / "samples.parquet")
    return path


def row(summary: pd.DataFrame, **match) -> pd.Series:
    found = summary
    for key, value in match.items():
        found = found[found[key] == value]
    assert len(found) == 1, f"{len(found)} rows match {match}"
    return found.iloc[0]


def test_percentiles_are_within_one_percent_of_exact_numpy(spark, tmp_path):
    rng = np.random.default_rng(7)
    latencies = {"put": np.round(rng.lognormal(12, 0.6, 120_000)),
                 "get": np.concatenate([np.round(rng.lognormal(13, 1.5, 80_000)), np.zeros(50)])}
    rows = [(op, "c0", None if op == "get" else f"p0:{i}", "ok", i * 1000, int(v), "steady")
            for op, values in latencies.items() for i, v in enumerate(values)]
    # gets need a message id to count as deliveries
    rows = [(op, c, m if m else f"p0:{t // 1000}", o, t, v, p) for op, c, m, o, t, v, p in rows]
    result = aggregate(spark, [write_run(tmp_path / "r", "r1", rows)], tmp_path / "out")
    for op, values in latencies.items():
        r = row(result.summary, op=op, phase="steady")
        assert r["count"] == len(values) and r["max_ns"] == values.max()
        for name, q in QUANTILES.items():
            exact = np.quantile(values, q, method="lower")
            assert abs(r[name] - exact) <= ALPHA * exact + 1e-9, (op, name, r[name], exact)
    assert list(result.summary.columns) == SUMMARY_COLUMNS
    assert json.loads((tmp_path / "out" / "summary.json").read_text())[0]["run_id"] == "r1"


def test_end_to_end_latency_joins_puts_and_deliveries(spark, tmp_path):
    rows = [
        ("put", "p0", "p0:0", "ok", 1_000, 100),
        ("put", "p0", "p0:1", "ok", 2_000, 100),
        ("put", "p0", "p0:2", "info", 3_000, 100),  # unknown outcome, delivered anyway
        ("get", "c0", "p0:0", "ok", 1_500, 500),  # delivered at 2_000: e2e 1_000
        ("get", "c0", "p0:1", "ok", 5_000, 1_000),  # delivered at 6_000: e2e 4_000
        ("get", "c0", "p0:2", "ok", 9_000, 1_000),  # delivered at 10_000: e2e 7_000
        ("get", "c0", None, "fail", 11_000, 50),  # empty: not a delivery
    ]
    summary = aggregate(spark, [write_run(tmp_path / "r", "r1", rows)], tmp_path / "out").summary
    e2e = row(summary, op="e2e", phase="steady")
    assert e2e["count"] == 3 and e2e["max_ns"] == 7_000
    assert e2e["p50_ns"] == pytest.approx(4_000, rel=ALPHA)
    get = row(summary, op="get", phase="steady")
    assert (get["count"], get["ok"], get["fail"]) == (4, 3, 1)


def test_per_second_throughput_series_fills_gaps_and_trims_partial_edges(spark, tmp_path):
    per_second = [5, 10, 0, 7, 3]  # completions in seconds 0..4; second 2 is a stall
    rows, n = [], 0
    for second, count in enumerate(per_second):
        for k in range(count):
            rows.append(("put", "p0", f"p0:{n}", "ok", second * 10**9 + k * 1000, 10))
            n += 1
    result = aggregate(spark, [write_run(tmp_path / "r", "r1", rows)], tmp_path / "out")
    series = result.throughput[(result.throughput.op == "put") & (result.throughput.phase == "steady")]
    assert series["second"].tolist() == [1, 2, 3] and series["ops"].tolist() == [10, 0, 7]
    put = row(result.summary, op="put", phase="steady")
    expected = np.percentile([10, 0, 7], [5, 50, 95])
    assert [put["tput_p5"], put["tput_p50"], put["tput_p95"]] == pytest.approx(expected)


def test_measured_rows_merge_steady_fault_and_heal_but_not_warmup_or_drain(spark, tmp_path):
    phases = ["warmup", "steady", "fault", "heal", "drain"]
    rows = [("put", "p0", f"p0:{i}", "ok", i * 10**6, 1000 * (i + 1), phases[i % 5]) for i in range(500)]
    summary = aggregate(spark, [write_run(tmp_path / "r", "r1", rows)], tmp_path / "out").summary
    measured = row(summary, op="put", phase="measured")
    parts = summary[(summary.op == "put") & summary.phase.isin(["steady", "fault", "heal"])]
    assert measured["count"] == parts["count"].sum() == 300
    assert measured["max_ns"] == parts["max_ns"].max()


def test_merging_two_runs_histograms_equals_aggregating_their_union(spark, tmp_path):
    rng = np.random.default_rng(3)
    a = [("put", "p0", f"p0:{i}", "ok", i, int(v)) for i, v in enumerate(rng.lognormal(10, 1, 20_000))]
    b = [("put", "p1", f"p1:{i}", "ok", i, int(v)) for i, v in enumerate(rng.lognormal(11, 0.5, 30_000))]
    runs = {name: write_run(tmp_path / name, f"run-{name}", rows) for name, rows in (("a", a), ("b", b), ("u", a + b))}
    hist = {name: aggregate(spark, [path], tmp_path / f"out-{name}").histograms for name, path in runs.items()}
    keys = ["backend", "world", "scenario", "op", "phase"]
    merged = percentiles(pd.concat([hist["a"], hist["b"]]), keys)
    union = percentiles(hist["u"], keys)
    pd.testing.assert_frame_equal(merged, union)
    assert len(merged) == 2  # put, in its steady phase and in "measured"
    saved = pd.read_parquet(tmp_path / "out-a" / "histograms.parquet")  # the mergeable artifact
    pd.testing.assert_frame_equal(saved, hist["a"])


def test_checker_totals_agree_with_the_python_checker_on_real_runs(spark, tmp_path):
    crash = parse_workload({"name": "crash", "producers": 4, "consumers": 1, "rate": 8000, "duration": 0.6,
                            "seed": 3, "faults": [{"fault": "crash", "at": 0.3, "duration": 0.1}]})
    clean = parse_workload({"name": "clean", "producers": 2, "consumers": 2, "rate": 2000, "duration": 0.5,
                            "ack": "reliable", "seed": 1})
    runs = [run(w, "ideal", "sim", out=tmp_path / w.name, progress=False) for w in (crash, clean)]
    result = aggregate(spark, [r.run_dir for r in runs], tmp_path / "out")
    totals = result.checks.set_index("run_id")
    for r in runs:
        # the in-process summary and the pipeline define end to end alike (first delivery)
        e2e = result.summary[(result.summary.run_id == r.run_id) & (result.summary.op == "e2e")
                             & (result.summary.phase != "measured")]
        assert e2e["count"].sum() == r.summary["e2e"]["count"]
        expected = check(read_samples(r.run_dir))
        got = totals.loc[r.run_id]
        fields = ("attempts", "enqueued", "dequeued", "ok", "lost", "unexpected", "duplicated", "recovered")
        assert {f: int(got[f]) for f in fields} == {f: getattr(expected.counts, f) for f in fields}
        assert bool(got["valid"]) == expected.valid
        # the same verdict as the checker's, from the run's manifest (design, options, faults)
        judged = check(read_samples(r.run_dir), r.check.facts)
        assert (got["verdict"], got["reason"]) == (judged.verdict, judged.reason) == (r.verdict, r.check.reason)
    assert totals.loc[runs[0].run_id, "lost"] > 0  # the crash really lost messages: the ideal allows it
    assert totals.loc[runs[0].run_id, "verdict"] == "allowed" and totals.loc[runs[1].run_id, "verdict"] == "valid"


def test_a_released_get_is_no_delivery_in_the_pipeline_as_in_the_checker(spark, tmp_path):
    samples = history(("put", "p0", "p0:0", "ok"), ("put", "p0", "p0:1", "fail"), ("put", "p0", "p0:2", "ok"),
                      ("get", "c0", "p0:0", "ok"), ("release", "c0", "p0:0", "ok"), ("get", "c1", "p0:0", "ok"),
                      ("get", "c0", "p0:2", "ok"), ("release", "c0", "p0:2", "info"), ("get", "c1", "p0:2", "ok"),
                      ("get", "c1", "p0:2", "ok"), ("get", "c1", "p0:1", "ok"), ("release", "c1", "p0:1", "ok"))
    (tmp_path / "run").mkdir()
    write_samples(samples, tmp_path / "run" / "samples.parquet")
    totals = aggregate(spark, [tmp_path / "run"], tmp_path / "out").checks.iloc[0]
    expected = check(samples)
    fields = ("attempts", "enqueued", "dequeued", "ok", "lost", "unexpected", "duplicated", "recovered")
    assert {f: int(totals[f]) for f in fields} == {f: getattr(expected.counts, f) for f in fields}
    assert (expected.counts.dequeued, expected.counts.duplicated, expected.counts.lost) == (3, 1, 0)  # p0:2 twice after its release


def test_checks_of_runs_without_a_manifest_are_judged_by_jepsens_rule():
    checks = pd.DataFrame([["r1", 2, 2, 2, 2, 0, 0, 1, 0], ["r2", 2, 2, 1, 1, 1, 0, 0, 0],
                           ["r3", 2, 2, 1, 1, 1, 0, 0, 0]], columns=CHECK_COLUMNS)
    manifest = {"run_id": "r3", "backend": "kestrel", "options": {}, "workload": {"ack": "reliable",
                "faults": [{"fault": "crash"}]}, "verdict": {"reordering": {"inversions": 0}}}
    judged = with_verdicts(checks, {"r3": manifest}).set_index("run_id")
    assert judged.verdict.to_dict() == {"r1": "valid", "r2": "invalid", "r3": "allowed"}
    assert judged.valid.to_dict() == {"r1": True, "r2": False, "r3": False}
    assert judged.reason["r3"].startswith("lost 1 acknowledged message under crash: allowed, syncJournal=never")


def test_run_manifests_are_found_beside_the_samples(tmp_path):
    path = write_run(tmp_path / "a", "run-a", [("put", "p0", "p0:0", "ok", 0, 5)])
    write_run(tmp_path / "b", "run-b", [("put", "p0", "p0:0", "ok", 0, 5)])
    (path / "manifest.json").write_text(json.dumps({"run_id": "run-a", "backend": "ideal"}))
    assert run_manifests([tmp_path / "a", tmp_path / "b"]) == {"run-a": {"run_id": "run-a", "backend": "ideal"}}


def test_missing_run_directories_are_a_clear_error(spark, tmp_path):
    with pytest.raises(FileNotFoundError, match="no samples"):
        aggregate(spark, [tmp_path / "nothing"], tmp_path / "out")


def _messages(spark, tmp_path, **kwargs) -> pd.DataFrame:
    """Pass 2 on two runs that reuse each other's msg_ids: lost, duplicated, unexpected."""
    rows = {
        "r1": [("put", "p0", "m0", "ok", 1_000, 100), ("get", "c0", "m0", "ok", 2_000, 100),
               ("get", "c0", "m0", "ok", 3_000, 100, "fault"),  # a duplicate, later
               ("put", "p0", "m1", "ok", 1_500, 100),  # lost
               ("get", "c0", "m9", "ok", 4_000, 100)],  # never put
        "r2": [("put", "p0", "m0", "info", 10_000, 100), ("get", "c0", "m0", "ok", 30_000, 5_000, "heal"),
               ("put", "p0", "m1", "ok", 10_500, 100), ("get", "c0", "m1", "ok", 20_000, 100)],
    }
    samples = load_samples(spark, [write_run(tmp_path / run_id, run_id, r) for run_id, r in rows.items()])
    grouped = messages_pass(samples, **kwargs)
    return grouped.sort_values(["run_id", "phase", "bucket", "second"], ignore_index=True)


def test_per_message_pass_on_hashed_keys_equals_exact_keys(spark, tmp_path):
    hashed, exact = _messages(spark, tmp_path), _messages(spark, tmp_path, exact=True)
    pd.testing.assert_frame_equal(hashed, exact)
    totals = exact[(exact.g_bucket == 1) & (exact.g_second == 1)].groupby("run_id")[
        ["attempts", "enqueued", "dequeued", "lost", "unexpected", "duplicated", "recovered"]].sum()
    assert totals.loc["r1"].tolist() == [2, 2, 3, 1, 1, 1, 0]
    assert totals.loc["r2"].tolist() == [2, 1, 2, 0, 0, 0, 1]  # m0's unknown put came through


def test_a_message_key_collision_is_detected_and_the_pass_runs_on_exact_keys(spark, tmp_path):
    # a "hash" that gives every message the same key: all of a run's messages collide
    collide = lambda *columns: F.lit(7).cast("long")  # noqa: E731
    pd.testing.assert_frame_equal(_messages(spark, tmp_path, key_hash=collide),
                                  _messages(spark, tmp_path, exact=True))


def _operations(spark, tmp_path, extra=(), **kwargs) -> pd.DataFrame:
    rng = np.random.default_rng(11)
    rows = [(op, "c0", f"m{i}", outcome, i * 1_000_000, int(rng.lognormal(12, 1)), phase)
            for i, (op, outcome, phase) in enumerate(
                (op, outcome, phase) for op in ("put", "get", "ack") for outcome in ("ok", "fail", "info")
                for phase in ("warmup", "steady", "drain") for _ in range(int(rng.integers(1, 30))))]
    samples = load_samples(spark, [write_run(tmp_path / "r1", "r1", [*rows, *extra])])
    grouped = operations_pass(samples, **kwargs)
    return grouped.sort_values(["op", "phase", "bucket", "second", "g_bucket", "g_second"], ignore_index=True)


def test_operations_pass_on_hashed_operations_equals_strings(spark, tmp_path):
    hashed, exact = _operations(spark, tmp_path), _operations(spark, tmp_path / "exact", exact=True)
    pd.testing.assert_frame_equal(hashed, exact)
    counts = exact[(exact.g_bucket == 1) & (exact.g_second == 1)]
    assert len(counts) == 9 and (counts[["ok", "fail", "info"]].sum(axis=1) == counts["rows"]).all()


def test_an_unknown_outcome_or_null_op_runs_the_operations_pass_on_strings(spark, tmp_path):
    odd = [("put", "c0", "x1", "timeout", 5, 100, "steady"), ("put", "c0", "x2", "timeout", 6, 100, "steady"),
           (None, "c0", "x3", "ok", 7, 100, "steady")]
    hashed = _operations(spark, tmp_path, extra=odd)
    pd.testing.assert_frame_equal(hashed, _operations(spark, tmp_path / "exact", extra=odd, exact=True))
    counts = hashed[(hashed.g_bucket == 1) & (hashed.g_second == 1)]
    put = counts[(counts.op == "put") & (counts.phase == "steady")].iloc[0]
    assert put["rows"] == put[["ok", "fail", "info"]].sum() + 2  # counted, but neither ok, fail nor info
    assert counts.op.isna().sum() == 1


def test_a_corrupted_samples_file_is_a_clear_error(spark, tmp_path):
    path = write_run(tmp_path / "r", "r1", [("put", "p0", "m0", "ok", 1_000, 100)]) / "samples.parquet"
    path.write_bytes(path.read_bytes()[:-20])  # a torn write: the footer is gone
    with pytest.raises(ValueError, match="samples.parquet: not a readable Parquet file"):
        aggregate(spark, [path.parent], tmp_path / "out")


def test_unknown_phases_are_a_clear_error(spark, tmp_path):
    path = write_run(tmp_path / "r", "r1", [("put", "p0", "m0", "ok", 1_000, 100, "cooldown")])
    with pytest.raises(ValueError, match="unknown phases.*cooldown"):
        aggregate(spark, [path], tmp_path / "out")


def test_files_that_mix_runs_or_lack_statistics_aggregate_like_one_file_per_run(spark, tmp_path):
    rng = np.random.default_rng(5)
    paths = {}
    for n, (run_id, backend) in enumerate([("r1", "ideal"), ("r2", "kestrel"), ("r3", "ideal")]):
        rows = [("put", "p0", f"m{i}", "ok", i * 10**6, int(v)) for i, v in enumerate(rng.lognormal(10, 1, 3_000))]
        rows += [("get", "c0", f"m{i}", "ok", i * 10**6 + 50_000, int(v))
                 for i, v in enumerate(rng.lognormal(11, 1, 2_900 + 50 * n))]  # some lost
        paths[run_id] = write_run(tmp_path / "apart" / run_id, run_id, rows, backend=backend) / "samples.parquet"
    assert single_run(pq.read_metadata(paths["r2"])) == ("r2", "kestrel", "sim", "hand-made")
    # r1 and r2 in one file (row groups of both runs); r3 written without statistics
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    pq.write_table(pa.concat_tables([pq.read_table(paths["r1"]), pq.read_table(paths["r2"])]),
                   mixed / "r1-r2.parquet", row_group_size=2_000)
    pq.write_table(pq.read_table(paths["r3"]), mixed / "r3.parquet", write_statistics=False)
    assert single_run(pq.read_metadata(mixed / "r1-r2.parquet")) is None
    assert single_run(pq.read_metadata(mixed / "r3.parquet")) is None

    apart = aggregate(spark, list(paths.values()), tmp_path / "out-apart")
    together = aggregate(spark, [mixed / "r1-r2.parquet", mixed / "r3.parquet"], tmp_path / "out-mixed")
    pd.testing.assert_frame_equal(together.summary, apart.summary)
    pd.testing.assert_frame_equal(together.checks, apart.checks)
    assert apart.checks["lost"].tolist() == [100, 50, 0]
    assert set(apart.summary.backend) == {"ideal", "kestrel"} and len(apart.checks) == 3
