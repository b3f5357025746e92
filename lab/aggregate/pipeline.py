"""The Spark pipeline: samples of any number of runs in, summaries out.

Reads the Parquet samples of run directories (the runner's, Locust's: one schema) and
writes, as Parquet and JSON:

- ``summary``: one row per (run_id, backend, world, scenario, op, phase): counts
  (ok / fail / info and their rates, bytes), latency percentiles p50 … p99.99 and max of
  the ok operations (for gets: deliveries, not empty polls), and throughput percentiles
  p5 / p50 / p95 of the per-second series. End-to-end latency — put start to a message's
  first delivery — is a row with ``op = "e2e"``, in the phase of that delivery. Rows with
  ``phase = "measured"`` merge steady, fault and heal (all but warm-up and the drain).
  A fault's start and heal rows (``op = "fault"``, ``lab.history.phases``) are no operations:
  no summary counts them.
- ``throughput``: the per-second series (ok completions in each whole second; a second
  with none inside a group's span is a zero — a stall is a zero, not a gap; the partial
  first and last seconds of a span of three or more are dropped).
- ``checks``: the checker's totals per run (Jepsen total-queue, as ``lab.judge.checker``) and
  its verdict (``valid``, ``verdict``, ``reason``: ``lab.judge.verdict.judge_run``, the checker's
  function), judged with the design, options and faults of the run's ``manifest.json``
  beside its samples, and the inversions, explanations of anomalies (``lab.judge.attribution``)
  and failed operations the runner's checker found there (this pass counts, it does not
  order deliveries or attribute them); a run without a manifest gets Jepsen's rule.
- ``histograms``: the log-bucket counts behind every percentile — mergeable: adding the
  counts of any groups (seeds, runs, phases) gives the histogram of their union.

How the work divides. Reading the runs is ``lab.aggregate.runs``; reading the small results
(histograms to percentiles, the throughput series) is ``lab.aggregate.histograms``; this room
is the Spark passes and the summaries they add up to. Every row carries its run as one int
(``load_samples``: read per run from the Parquet footers), so no pass hashes run_id, backend, world and scenario per
row. Spark does everything that touches samples, in two passes: (1) the operations,
hash-aggregated by (run, one hash of op, phase and outcome, latency bucket, completion
second) and that small result grouped three ways (GROUPING SETS): counts per group, bucket
counts per group, completions per group and second; (2) puts and deliveries grouped per
message — the join that gives end-to-end latency and the checker's per-message counts —
shuffled once as narrow fixed-width rows and aggregated once, then grouped like pass 1.
What comes back is small (groups x buckets, groups x seconds); merging phases, walking
cumulative counts to quantiles and filling the throughput series happen on that in pandas,
with ``lab.history.record.LogHistogram`` — the same quantile code as every in-process summary.

Each latency maps to bucket ceil(ln(v) / ln(GAMMA)) (``lab.history.record``; 1 % relative error).
Counts are exact, so results are the same on every run (unlike Spark's KLL sketches),
and the aggregation stays hash-based at any number of groups (unlike percentile_approx).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lab.aggregate.histograms import KEYS, QUANTILES, THROUGHPUT, ZERO_BUCKET, fill_series, percentiles, \
    throughput_percentiles, with_measured
from lab.aggregate.runs import Samples, load_samples, run_manifests
from lab.judge.findings import Counts, explanations_from_manifest
from lab.judge.verdict import RunFacts, judge_run
from lab.history.record import FAULT_OP, HANDING_BACK, LOG_GAMMA, OPS, OUTCOMES, PHASES

SUMMARY_COLUMNS = ["run_id", "backend", "world", "scenario", "op", "phase", "count", "ok", "fail", "info", "bytes",
                   *QUANTILES, "max_ns", *THROUGHPUT, "ok_rate", "fail_rate", "info_rate"]
CHECK_COLUMNS = ["run_id", "attempts", "enqueued", "dequeued", "ok", "lost", "unexpected", "duplicated", "recovered"]
NS_PER_SECOND = 1_000_000_000


def _named(grouped: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Run indexes -> RUN_KEYS columns, first."""
    named = runs.iloc[grouped.pop("run").astype("int64")].reset_index(drop=True)
    return pd.concat([named, grouped.reset_index(drop=True)], axis=1)


# ----------------------------------------------------------------------------- Spark passes


def _bucket(latency: Column) -> Column:
    return F.when(latency > 0, F.ceil(F.log(latency) / F.lit(LOG_GAMMA)).cast("int")).otherwise(F.lit(ZERO_BUCKET))


def _grouped(df: DataFrame, keys: list[str], keep: Column, latency: Column, done: Column,
             sums: dict[str, Column]) -> pd.DataFrame:
    """Rows grouped by keys, keys+bucket and keys+second; ``keep`` marks the rows whose
    latency and completion second count (all rows count in ``rows`` and ``sums``).

    Two levels, because grouping-sets over the rows themselves (an Expand: every row three
    times through the hash map) cost twice as much: first one hash aggregation by
    (keys, bucket, second) — at most buckets x seconds rows per group come out, so it
    shrinks at once — then the three groupings over that small result.
    """
    fine = (df.select(*keys, F.when(keep, _bucket(latency)).alias("bucket"),
                      F.when(keep, F.floor(done / F.lit(NS_PER_SECOND)).cast("long")).alias("second"),
                      F.when(keep, latency).alias("latency"), *[column.alias(name) for name, column in sums.items()])
            .groupBy(*keys, "bucket", "second")
            .agg(F.count(F.lit(1)).alias("rows"), F.min("latency").alias("lo"), F.max("latency").alias("hi"),
                 *[F.sum(name).alias(name) for name in sums]))
    return (fine.groupingSets([keys, [*keys, "bucket"], [*keys, "second"]], *keys, "bucket", "second")
            .agg(F.sum("rows").alias("rows"), F.min("lo").alias("lo"), F.max("hi").alias("hi"),
                 *[F.sum(name).alias(name) for name in sums],
                 F.grouping("bucket").alias("g_bucket"), F.grouping("second").alias("g_second"))
            .toPandas())


OPERATION = ["op", "phase", "outcome"]


def operation_codes(spark: SparkSession) -> pd.DataFrame:
    """xxhash64(op, phase, outcome) of every operation lab.history.record knows, as Spark computes it."""
    known = spark.createDataFrame([(o, p, c) for o in OPS for p in PHASES for c in OUTCOMES], OPERATION)
    return known.select(*OPERATION, F.xxhash64(*OPERATION).alias("code")).toPandas()


def operations_pass(samples: Samples, exact: bool = False) -> pd.DataFrame:
    """Pass 1: per group counts, per group+bucket latency counts, per group+second completions.

    Rows are grouped by one 64-bit hash of (op, phase, outcome) unless ``exact``: three
    short strings compared per row in the hash map cost 25 % of the pass (100 M samples,
    alternating: 12.5 s against 16.7 s). The hashes of every known triple come from
    Spark itself and are distinct; a group whose hash is not among them (an unknown
    phase, outcome or op, or a null) makes the pass run again on the strings themselves,
    so only an unknown triple whose hash equals a known one's could be misread (2^-64 each).
    """
    outcome, latency = F.col("outcome"), F.col("latency_ns")
    # An ok get always carries a message (an empty get is "fail"/"empty", lab.history.record), so
    # this pass never reads msg_id: the one column that is unique per row and costly to scan.
    delivered = outcome == "ok"
    frame = samples.frame.filter(~F.col("op").eqNullSafe(FAULT_OP))  # a fault's start or heal is no operation
    keys = ["run", *OPERATION] if exact else ["run", "code"]
    if not exact:
        frame = frame.withColumn("code", F.xxhash64(*OPERATION))
    grouped = _grouped(frame, keys, delivered, latency, F.col("t_start_ns") + latency, {"bytes": F.col("bytes")})
    if not exact:
        codes = operation_codes(frame.sparkSession)
        if not (codes["code"].is_unique and grouped["code"].isin(codes["code"]).all()):
            return operations_pass(samples, exact=True)
        grouped = grouped.merge(codes, on="code", how="left").drop(columns="code")
    # One group per outcome -> ok / fail / info counts per (run, op, phase).
    for name in OUTCOMES:
        grouped[name] = grouped["rows"].where(grouped["outcome"] == name, 0)
    by = ["run", "op", "phase", "bucket", "second", "g_bucket", "g_second"]
    grouped = grouped.groupby(by, dropna=False, as_index=False).agg(
        rows=("rows", "sum"), lo=("lo", "min"), hi=("hi", "max"), bytes=("bytes", "sum"),
        **{name: (name, "sum") for name in OUTCOMES})
    return _named(grouped, samples.runs)


# Pass 2 shuffles two rows per message and keeps a hash-map entry per message, and every
# column of a row and every aggregate buffer costs time at that scale (pass 2 alone on
# 100 M samples, alternating: 64 and 44 s with rows packed like this, 73 and 61 s with
# a column and a buffer per field: 12 buffers, 7 here). So:
# - "puts": one sum counts puts (low 32 bits), ok puts (bits 32-47) and releases (bits 48
#   and up; a get its consumer handed back is no delivery, as lab.judge.checker says): a message
#   would need 65,536 ok puts or 32,768 releases to overflow it;
# - "sized": a delivery's bytes << 3 | its phase's index in PHASES (from 1); null on puts;
# - "run_check": the run's index << 32 | a 32-bit hash of (run, msg_id), min and max per
#   message: two different values mean two messages share a key.
OK_PUT = 1 + (1 << 32)
RELEASE = 1 << 48


def messages_pass(samples: Samples, exact: bool = False,
                  key_hash: Callable[..., Column] = F.xxhash64) -> pd.DataFrame:
    """Pass 2: puts and deliveries grouped per message, then like pass 1.

    Per message: attempts, ok puts, deliveries, put start, and the first delivery's time,
    phase and size; grouped by (run, phase of the first delivery) with e2e latency =
    first delivery - put start, and the checker's per-message counts summed.

    A message is keyed by a 64-bit hash of (run, msg_id) unless ``exact``: a fixed-width
    key keeps ~2 rows per message off string hashing and makes the shuffle smaller. A
    32-bit hash of a different family travels along; if two messages ever share a
    64-bit hash, their group holds two different 32-bit hashes, and the pass runs again
    on exact keys.
    """
    op, ok = F.col("op"), F.col("outcome") == "ok"
    # a release that failed (``fail``: it did not happen) hands nothing back, as in the checker
    is_put, is_get, is_release = op == "put", (op == "get") & ok, op.isin(*HANDING_BACK) & (F.col("outcome") != "fail")
    phase = F.array_position(F.array(*map(F.lit, PHASES)), F.col("phase"))
    if exact:
        keys, check = [F.col("run").alias("exact_run"), F.col("msg_id").alias("message")], F.lit(0)
    else:
        keys, check = [key_hash("run", "msg_id").alias("message")], F.hash("run", "msg_id").cast("long") + 2**31
    rows = (samples.frame.filter(F.col("msg_id").isNotNull() & (is_put | is_get | is_release))
            .select(*keys, (F.shiftleft(F.col("run").cast("long"), 32) + check).alias("run_check"),
                    F.when(is_put, F.when(ok, F.lit(OK_PUT)).otherwise(F.lit(1)))
                     .when(is_release, F.lit(RELEASE)).alias("puts"),
                    F.when(is_get, F.coalesce(F.col("bytes"), F.lit(0)) * 8 + phase).alias("sized"),
                    F.when(is_put, F.col("t_start_ns")).otherwise(F.col("t_start_ns") + F.col("latency_ns")).alias("t")))
    key_names = [k for k in rows.columns if k in ("exact_run", "message")]
    sized, t = F.col("sized"), F.col("t")
    delivered_at = F.when(sized.isNotNull(), t)
    per_message = (rows
                   # Almost every message is its own group, so a partial aggregation before
                   # the shuffle saves little and costs a big hash map: shuffle the rows, then
                   # aggregate once (combineAdjacentAggregation). Every buffer is fixed-width,
                   # so this stays a hash aggregation (a min over a struct would sort).
                   .repartition(*key_names)
                   .groupBy(*key_names)
                   .agg(F.sum("puts").alias("puts"), F.count(sized).alias("gets"),
                        F.min(F.when(F.col("puts") < RELEASE, t)).alias("put_ns"),
                        F.min(delivered_at).alias("done_ns"),
                        F.min_by(sized, delivered_at).alias("sized"),
                        F.min("run_check").alias("first"), F.max("run_check").alias("last"))
                   .select(F.shiftright("first", 32).alias("run"), F.col("puts").bitwiseAND(2**32 - 1).alias("att"),
                           F.shiftright("puts", 32).bitwiseAND(2**16 - 1).alias("enq"),
                           (F.col("gets") - F.coalesce(F.shiftright("puts", 48), F.lit(0))).alias("deq"),
                           "put_ns", "done_ns",
                           F.col("sized").bitwiseAND(7).alias("phase"), F.shiftright("sized", 3).alias("bytes"),
                           (F.col("first") != F.col("last")).cast("long").alias("collision")))
    att, enq, deq = F.coalesce(F.col("att"), F.lit(0)), F.coalesce(F.col("enq"), F.lit(0)), F.col("deq")
    delivered = F.least(deq, att)
    has_e2e = (deq > 0) & F.col("put_ns").isNotNull()
    grouped = _grouped(
        per_message, ["run", "phase"], has_e2e, F.col("done_ns") - F.col("put_ns"), F.col("done_ns"),
        {"ok": has_e2e.cast("long"), "bytes": F.when(has_e2e, F.col("bytes")),
         "attempts": att, "enqueued": enq, "dequeued": deq, "delivered": delivered,
         "lost": F.greatest(enq - deq, F.lit(0)),
         "unexpected": F.when(att == 0, deq).otherwise(0),
         "duplicated": F.when(att > 0, F.greatest(deq - att, F.lit(0))).otherwise(0),
         "recovered": F.greatest(delivered - enq, F.lit(0)), "collisions": F.col("collision")})
    if grouped["collisions"].sum() > 0:
        return messages_pass(samples, exact=True)
    return _named(grouped.drop(columns="collisions"), samples.runs)


def e2e_rows(grouped: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pass 2's groups -> (e2e rows in pass 1's layout, the checker's totals per run)."""
    # Checks are per run: every message counts, delivered or not (phase is null for those).
    per_run = grouped[(grouped.g_bucket == 1) & (grouped.g_second == 1)].groupby("run_id", as_index=False)[
        ["attempts", "enqueued", "dequeued", "delivered", "lost", "unexpected", "duplicated", "recovered"]].sum()
    checks = per_run.rename(columns={"delivered": "ok"})[CHECK_COLUMNS]
    rows = grouped[grouped.phase.notna()].copy()
    rows["phase"] = [PHASES[int(i) - 1] for i in rows["phase"]]  # array_position counts from 1
    rows["op"] = "e2e"
    rows["rows"] = rows["ok"]
    rows["fail"] = 0
    rows["info"] = 0
    return rows, checks.sort_values("run_id", ignore_index=True)




def with_verdicts(checks: pd.DataFrame, manifests: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """``checks`` with valid, verdict and reason per run: ``lab.judge.verdict.judge_run`` on the
    totals, with the facts of the run's manifest and what its checker found message by
    message — inversions, the explanation of each anomaly, failed operations (no
    manifest: Jepsen's rule)."""
    judged = []
    for row in checks.itertuples(index=False):
        manifest = manifests.get(row.run_id)
        facts = RunFacts.from_manifest(manifest) if manifest else None
        checked = (manifest.get("verdict") or {}) if manifest else {}
        counts = Counts(attempts=row.attempts, enqueued=row.enqueued, dequeued=row.dequeued, ok=row.ok,
                        lost=row.lost, unexpected=row.unexpected, duplicated=row.duplicated,
                        recovered=row.recovered, inversions=(checked.get("reordering") or {}).get("inversions"),
                        failed=checked.get("failed") or {})
        judged.append(judge_run(facts, counts, explanations_from_manifest(checked)))
    return checks.assign(valid=[j.valid for j in judged], verdict=[str(j.verdict) for j in judged],
                         reason=[j.reason for j in judged])


# ----------------------------------------------------------------------------- the passes' results


def _split(grouped: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Grouped rows -> (counts per KEYS, histograms per KEYS+bucket, series per KEYS+second)."""
    counts = grouped[(grouped.g_bucket == 1) & (grouped.g_second == 1)]
    counts = counts.rename(columns={"rows": "count"})[[*KEYS, "count", "ok", "fail", "info", "bytes"]]
    hist = grouped[(grouped.g_bucket == 0) & grouped.bucket.notna()]
    hist = hist.rename(columns={"rows": "n"})[[*KEYS, "bucket", "n", "lo", "hi"]]
    series = grouped[(grouped.g_second == 0) & grouped.second.notna()]
    series = series.rename(columns={"rows": "ops"})[[*KEYS, "second", "ops"]]
    return counts, hist.astype({"bucket": "int64"}), series.astype({"second": "int64"})


# ----------------------------------------------------------------------------- the pipeline


@dataclass
class Aggregation:
    directory: Path
    summary: pd.DataFrame
    throughput: pd.DataFrame
    checks: pd.DataFrame
    histograms: pd.DataFrame


def summarize(samples: Samples, manifests: Mapping[str, Mapping[str, Any]] | None = None) -> Aggregation:
    """Every summary of the samples of any number of runs (nothing written); ``manifests``
    (run_id -> manifest.json) give the checks their verdicts."""
    ops_counts, ops_hist, ops_series = _split(operations_pass(samples))
    unknown = set(ops_counts.phase) - set(PHASES)
    if unknown:
        raise ValueError(f"samples with unknown phases {sorted(unknown)} (known: {', '.join(PHASES)})")
    e2e_grouped, checks = e2e_rows(messages_pass(samples))
    checks = with_verdicts(checks, manifests or {})
    e2e_counts, e2e_hist, e2e_series = _split(e2e_grouped)

    counts = with_measured(pd.concat([ops_counts, e2e_counts], ignore_index=True),
                           {c: "sum" for c in ("count", "ok", "fail", "info", "bytes")}, [])
    histograms = with_measured(pd.concat([ops_hist, e2e_hist], ignore_index=True),
                               {"n": "sum", "lo": "min", "hi": "max"}, ["bucket"])
    series = fill_series(with_measured(pd.concat([ops_series, e2e_series], ignore_index=True),
                                       {"ops": "sum"}, ["second"]))
    summary = (counts.merge(percentiles(histograms), on=KEYS, how="left")
               .merge(throughput_percentiles(series), on=KEYS, how="left"))
    for name in ("ok", "fail", "info"):
        summary[f"{name}_rate"] = summary[name] / summary["count"]
    for name in ("count", "ok", "fail", "info", "bytes"):
        summary[name] = summary[name].fillna(0).astype("int64")
    summary = summary[SUMMARY_COLUMNS].sort_values(KEYS, ignore_index=True)
    histograms = histograms.sort_values([*KEYS, "bucket"], ignore_index=True)
    return Aggregation(Path(), summary, series, checks, histograms)


def aggregate(spark: SparkSession, paths: Iterable[str | Path], out: str | Path) -> Aggregation:
    """Run the pipeline over ``paths``; write its tables as Parquet and JSON under ``out``."""
    paths = list(paths)
    result = summarize(load_samples(spark, paths), run_manifests(paths))
    result.directory = Path(out)
    result.directory.mkdir(parents=True, exist_ok=True)
    for name in ("summary", "throughput", "checks", "histograms"):
        frame = getattr(result, name)
        frame.to_parquet(result.directory / f"{name}.parquet", index=False)
        frame.to_json(result.directory / f"{name}.json", orient="records", indent=1)  # NaN -> null
    return result
