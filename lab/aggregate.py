"""The Spark pipeline: samples of any number of runs in, summaries out.

Reads the Parquet samples of run directories (the runner's, Locust's: one schema) and
writes, as Parquet and JSON:

- ``summary``: one row per (run_id, backend, world, scenario, op, phase): counts
  (ok / fail / info and their rates, bytes), latency percentiles p50 … p99.99 and max of
  the ok operations (for gets: deliveries, not empty polls), and throughput percentiles
  p5 / p50 / p95 of the per-second series. End-to-end latency — put start to a message's
  first delivery — is a row with ``op = "e2e"``, in the phase of that delivery. Rows with
  ``phase = "measured"`` merge steady, fault and heal (all but warm-up and the drain).
- ``throughput``: the per-second series (ok completions in each whole second; a second
  with none inside a group's span is a zero — a stall is a zero, not a gap; the partial
  first and last seconds of a span of three or more are dropped).
- ``checks``: the checker's totals per run (Jepsen total-queue, as ``lab.checker``).
- ``histograms``: the log-bucket counts behind every percentile — mergeable: adding the
  counts of any groups (seeds, runs, phases) gives the histogram of their union.

How the work divides. Spark does everything that touches samples, in two passes:
(1) one scan grouped three ways at once (GROUPING SETS): counts per group, bucket counts
per group, completions per group and second; (2) puts and deliveries co-grouped by
(run_id, msg_id) — the join that gives end-to-end latency and the checker's per-message
counts — then grouped the same ways. What comes back is small (groups × buckets,
groups × seconds); merging phases, walking cumulative counts to quantiles and filling
the throughput series happen on that in pandas, with ``lab.record.LogHistogram`` — the
same quantile code as every in-process summary.

Each latency maps to bucket ceil(ln(v) / ln(GAMMA)) (``lab.record``; 1 % relative error).
Counts are exact, so results are the same on every run (unlike Spark's KLL sketches),
and the aggregation stays hash-based at any number of groups (unlike percentile_approx).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lab.record import LOG_GAMMA, MEASURED_PHASES, SAMPLE_SCHEMA, LogHistogram

KEYS = ["run_id", "backend", "world", "scenario", "op", "phase"]
RUN_KEYS = ["run_id", "backend", "world", "scenario"]
QUANTILES = {"p50_ns": 0.50, "p75_ns": 0.75, "p90_ns": 0.90, "p95_ns": 0.95, "p99_ns": 0.99,
             "p999_ns": 0.999, "p9999_ns": 0.9999}
THROUGHPUT = {"tput_p5": 5.0, "tput_p50": 50.0, "tput_p95": 95.0}
SUMMARY_COLUMNS = ["run_id", "backend", "world", "scenario", "op", "phase", "count", "ok", "fail", "info", "bytes",
                   *QUANTILES, "max_ns", *THROUGHPUT, "ok_rate", "fail_rate", "info_rate"]
CHECK_COLUMNS = ["run_id", "attempts", "enqueued", "dequeued", "ok", "lost", "unexpected", "duplicated", "recovered"]
ZERO_BUCKET = -(2**31)  # latencies of 0 ns, below every log bucket
MEASURED = "measured"
NS_PER_SECOND = 1_000_000_000


def spark_schema() -> T.StructType:
    """The sample schema (lab.record) as Spark types."""
    kinds = {"string": T.StringType(), "int64": T.LongType()}
    return T.StructType([T.StructField(f.name, kinds[str(f.type)], True) for f in SAMPLE_SCHEMA])


def sample_files(paths: Iterable[str | Path]) -> list[str]:
    """Parquet files of the given run directories, compare folders or files."""
    files: list[str] = []
    for path in map(Path, paths):
        if path.is_file() and path.suffix == ".parquet":
            files.append(str(path))
        elif (path / "samples.parquet").exists():
            files.append(str(path / "samples.parquet"))
        elif path.is_dir() and (found := sorted(path.glob("*/samples.parquet"))):
            files += [str(p) for p in found]  # a compare folder: one run per subfolder
        else:
            raise FileNotFoundError(f"no samples in {path} (expected a run directory with samples.parquet)")
    return files


def load_samples(spark: SparkSession, paths: Iterable[str | Path]) -> DataFrame:
    return spark.read.schema(spark_schema()).parquet(*sample_files(paths))


# ----------------------------------------------------------------------------- Spark passes


def _bucket(latency: Column) -> Column:
    return F.when(latency > 0, F.ceil(F.log(latency) / F.lit(LOG_GAMMA)).cast("int")).otherwise(F.lit(ZERO_BUCKET))


def _three_ways(df: DataFrame, keep: Column, *aggregates: Column) -> DataFrame:
    """Group by KEYS, KEYS+bucket and KEYS+second in one pass; ``keep`` marks the rows
    whose latency/second count (others still count in the per-group aggregates)."""
    df = (df.withColumn("bucket", F.when(keep, _bucket(F.col("latency_ns"))))
          .withColumn("second", F.when(keep, F.floor(F.col("done_ns") / F.lit(NS_PER_SECOND)).cast("long"))))
    return (df.groupingSets([[*KEYS], [*KEYS, "bucket"], [*KEYS, "second"]], *KEYS, "bucket", "second")
            .agg(F.count(F.lit(1)).alias("rows"),
                 F.min(F.when(keep, F.col("latency_ns"))).alias("lo"),
                 F.max(F.when(keep, F.col("latency_ns"))).alias("hi"),
                 *aggregates,
                 F.grouping("bucket").alias("g_bucket"), F.grouping("second").alias("g_second")))


def operations_pass(samples: DataFrame) -> pd.DataFrame:
    """Pass 1: per group counts, per group+bucket latency counts, per group+second completions."""
    outcome = F.col("outcome")
    # An ok get always carries a message (an empty get is "fail"/"empty", lab.record), so
    # this pass never reads msg_id: the one column that is unique per row and costly to scan.
    delivered = outcome == "ok"
    df = samples.withColumn("done_ns", F.col("t_start_ns") + F.col("latency_ns"))
    return _three_ways(df, delivered,
                       F.sum(delivered.cast("long")).alias("ok"),
                       F.sum((outcome == "fail").cast("long")).alias("fail"),
                       F.sum((outcome == "info").cast("long")).alias("info"),
                       F.sum("bytes").alias("bytes")).toPandas()


def messages_pass(samples: DataFrame, runs: DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pass 2: puts and deliveries co-grouped by (run_id, msg_id).

    Per message: attempts, ok puts, deliveries, put start and first delivery. From these,
    the checker's totals per run and the e2e rows grouped like pass 1. ``runs`` maps
    run_id to backend, world and scenario.
    """
    op, ok = F.col("op"), F.col("outcome") == "ok"
    is_put, is_get = op == "put", (op == "get") & ok
    # min of a struct orders by its first field: the earliest delivery, with its phase and size
    first_delivery = F.struct((F.col("t_start_ns") + F.col("latency_ns")).alias("done"), F.col("phase").alias("phase"),
                              F.col("bytes").alias("bytes"))
    per_message = (samples.filter(F.col("msg_id").isNotNull() & (is_put | is_get))
                   .groupBy("run_id", "msg_id")
                   .agg(F.sum(is_put.cast("long")).alias("att"),
                        F.sum((is_put & ok).cast("long")).alias("enq"),
                        F.sum(is_get.cast("long")).alias("deq"),
                        F.min(F.when(is_put, F.col("t_start_ns"))).alias("put_ns"),
                        F.min(F.when(is_get, first_delivery)).alias("first")))
    att, enq, deq = F.col("att"), F.col("enq"), F.col("deq")
    delivered = F.least(deq, att)
    has_e2e = (deq > 0) & F.col("put_ns").isNotNull()
    # backend, world and scenario follow from run_id: join them back on a run-sized table
    # rather than carry three strings through the shuffle.
    e2e = (per_message.join(F.broadcast(runs), "run_id")
           .withColumn("op", F.lit("e2e"))
           .withColumn("phase", F.col("first.phase"))
           .withColumn("done_ns", F.col("first.done"))
           .withColumn("latency_ns", F.col("done_ns") - F.col("put_ns")))
    grouped = _three_ways(
        e2e, has_e2e,
        F.sum(has_e2e.cast("long")).alias("ok"),
        F.sum(F.when(has_e2e, F.col("first.bytes"))).alias("bytes"),
        F.sum(att).alias("attempts"), F.sum(enq).alias("enqueued"), F.sum(deq).alias("dequeued"),
        F.sum(delivered).alias("delivered"),
        F.sum(F.greatest(enq - deq, F.lit(0))).alias("lost"),
        F.sum(F.when(att == 0, deq).otherwise(0)).alias("unexpected"),
        F.sum(F.when(att > 0, F.greatest(deq - att, F.lit(0))).otherwise(0)).alias("duplicated"),
        F.sum(F.greatest(delivered - enq, F.lit(0))).alias("recovered")).toPandas()
    # Checks are per run: every message counts, delivered or not (phase is null for those).
    per_run = grouped[(grouped.g_bucket == 1) & (grouped.g_second == 1)].groupby("run_id", as_index=False)[
        ["attempts", "enqueued", "dequeued", "delivered", "lost", "unexpected", "duplicated", "recovered"]].sum()
    checks = per_run.rename(columns={"delivered": "ok"})[CHECK_COLUMNS]
    checks["valid"] = (checks["lost"] == 0) & (checks["unexpected"] == 0)
    e2e_rows = grouped[grouped.phase.notna()].copy()
    e2e_rows["rows"] = e2e_rows["ok"]
    e2e_rows["fail"] = 0
    e2e_rows["info"] = 0
    return e2e_rows, checks.sort_values("run_id", ignore_index=True)


# ----------------------------------------------------------------------------- small results


def _split(grouped: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Grouped rows -> (counts per KEYS, histograms per KEYS+bucket, series per KEYS+second)."""
    counts = grouped[(grouped.g_bucket == 1) & (grouped.g_second == 1)]
    counts = counts.rename(columns={"rows": "count"})[[*KEYS, "count", "ok", "fail", "info", "bytes"]]
    hist = grouped[(grouped.g_bucket == 0) & grouped.bucket.notna()]
    hist = hist.rename(columns={"rows": "n"})[[*KEYS, "bucket", "n", "lo", "hi"]]
    series = grouped[(grouped.g_second == 0) & grouped.second.notna()]
    series = series.rename(columns={"rows": "ops"})[[*KEYS, "second", "ops"]]
    return counts, hist.astype({"bucket": "int64"}), series.astype({"second": "int64"})


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


# ----------------------------------------------------------------------------- the pipeline


@dataclass
class Aggregation:
    directory: Path
    summary: pd.DataFrame
    throughput: pd.DataFrame
    checks: pd.DataFrame
    histograms: pd.DataFrame


def summarize(samples: DataFrame) -> Aggregation:
    """Every summary of the samples of any number of runs (nothing written)."""
    ops_counts, ops_hist, ops_series = _split(operations_pass(samples))
    runs = samples.sparkSession.createDataFrame(ops_counts[RUN_KEYS].drop_duplicates())
    e2e_grouped, checks = messages_pass(samples, runs)
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
    result = summarize(load_samples(spark, paths))
    result.directory = Path(out)
    result.directory.mkdir(parents=True, exist_ok=True)
    for name in ("summary", "throughput", "checks", "histograms"):
        frame = getattr(result, name)
        frame.to_parquet(result.directory / f"{name}.parquet", index=False)
        records = json.loads(frame.to_json(orient="records"))  # NaN -> null
        (result.directory / f"{name}.json").write_text(json.dumps(records, indent=1) + "\n")
    return result
