"""The Spark pipeline: samples of any number of runs in, summaries out.

Reads the Parquet samples of run directories (the runner's, Locust's: one schema) and
computes, on the PySpark DataFrame API:

- ``summary``: one row per (run_id, backend, world, scenario, op, phase) with counts
  (ok / fail / info and their rates, bytes), latency percentiles p50 … p99.99 and max of
  the ok operations, and throughput percentiles p5 / p50 / p95 over the per-second
  series. End-to-end latency (put start to delivery, puts and ok gets joined on msg_id)
  is a row with ``op = "e2e"``. Rows with ``phase = "measured"`` merge steady, fault and
  heal (everything but warm-up and the final drain).
- ``throughput``: the per-second series itself (ok operations completed in each second
  since the run's first operation; seconds with none are zeros).
- ``checks``: the checker's totals per run (Jepsen total-queue, as ``lab.checker``).

Percentiles come from log-bucket histograms: each latency maps to bucket
ceil(ln(v) / ln(GAMMA)) (``lab.record``'s mapping, 1 % relative error); Spark counts
(group, bucket) pairs, and merging groups — phases into "measured", runs into one — is
adding counts. A quantile is the first bucket whose cumulative count passes the rank.
Counts are exact and the result is the same on every run (unlike KLL sketches), and the
aggregation stays hash-based whatever the number of groups (unlike percentile_approx).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

if TYPE_CHECKING:
    import pandas as pd

from lab.record import GAMMA, LOG_GAMMA, MEASURED_PHASES, SAMPLE_SCHEMA

KEYS = ["run_id", "backend", "world", "scenario", "op", "phase"]
QUANTILES = {"p50_ns": 0.50, "p75_ns": 0.75, "p90_ns": 0.90, "p95_ns": 0.95, "p99_ns": 0.99,
             "p999_ns": 0.999, "p9999_ns": 0.9999}
THROUGHPUT = {"tput_p5": 0.05, "tput_p50": 0.50, "tput_p95": 0.95}
SUMMARY_COLUMNS = ["run_id", "backend", "world", "scenario", "op", "phase", "count", "ok", "fail", "info", "bytes",
                   *QUANTILES, "max_ns", *THROUGHPUT, "ok_rate", "fail_rate", "info_rate"]
ZERO_BUCKET = -(2**31)  # latencies of 0 ns (below every log bucket)
MEASURED = "measured"


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


# ----------------------------------------------------------------------------- histograms


def with_bucket(df: DataFrame, column: str = "latency_ns") -> DataFrame:
    value = F.col(column)
    return df.withColumn("bucket", F.when(value > 0, F.ceil(F.log(value) / F.lit(LOG_GAMMA)).cast("int"))
                         .otherwise(F.lit(ZERO_BUCKET)))


def bucket_counts(values: DataFrame) -> DataFrame:
    """KEYS + bucket -> n, lo, hi (count and exact extremes of each bucket)."""
    return (with_bucket(values).groupBy(*KEYS, "bucket")
            .agg(F.count(F.lit(1)).alias("n"), F.min("latency_ns").alias("lo"), F.max("latency_ns").alias("hi")))


def with_measured(df: DataFrame, sums: dict[str, str], by: list[str]) -> DataFrame:
    """Add phase "measured" rows: the steady, fault and heal rows merged (sum/min/max)."""
    keys = [k for k in KEYS if k != "phase"] + by
    merged = (df.filter(F.col("phase").isin(*MEASURED_PHASES)).groupBy(*keys)
              .agg(*[getattr(F, how)(col).alias(col) for col, how in sums.items()])
              .withColumn("phase", F.lit(MEASURED)))
    return df.unionByName(merged)


def merge_buckets(buckets: DataFrame, keys: list[str]) -> DataFrame:
    """Merge histograms over everything not in ``keys`` (runs, seeds, phases): add counts."""
    return buckets.groupBy(*keys, "bucket").agg(F.sum("n").alias("n"), F.min("lo").alias("lo"),
                                                F.max("hi").alias("hi"))


def percentiles(buckets: DataFrame, keys: list[str] = KEYS) -> DataFrame:
    """keys -> p50_ns … p9999_ns, max_ns, from bucket counts (one histogram per key)."""
    group = Window.partitionBy(*keys)
    running = (buckets
               .withColumn("cum", F.sum("n").over(group.orderBy("bucket").rowsBetween(Window.unboundedPreceding, 0)))
               .withColumn("total", F.sum("n").over(group)))
    firsts = [F.min(F.when(F.col("cum") > F.lit(q) * (F.col("total") - 1), F.col("bucket"))).alias(name)
              for name, q in QUANTILES.items()]
    per_group = running.groupBy(*keys).agg(*firsts, F.min("lo").alias("lo"), F.max("hi").alias("max_ns"))
    for name in QUANTILES:
        estimate = F.lit(2.0) * F.pow(F.lit(GAMMA), F.col(name)) / F.lit(GAMMA + 1.0)
        clamped = F.least(F.greatest(estimate, F.col("lo").cast("double")), F.col("max_ns").cast("double"))
        per_group = per_group.withColumn(name, F.when(F.col(name) == ZERO_BUCKET, F.lit(0.0)).otherwise(clamped))
    return per_group.drop("lo")


# ----------------------------------------------------------------------------- throughput


def throughput_series(completions: DataFrame, run_start: DataFrame) -> DataFrame:
    """KEYS + second -> ops: ok completions per whole second since the run's first op.

    Seconds with no completion inside a group's span count as zero — a stall is a
    zero, not a gap. The first and last second of a span are partial, so a span of
    three or more seconds drops them.
    """
    counted = (completions.join(run_start, "run_id")
               .withColumn("second", F.floor((F.col("done_ns") - F.col("run_t0")) / F.lit(1e9)).cast("long"))
               .groupBy(*KEYS, "second").agg(F.count(F.lit(1)).alias("ops")))
    counted = with_measured(counted, {"ops": "sum"}, ["second"])
    spans = counted.groupBy(*KEYS).agg(F.min("second").alias("first"), F.max("second").alias("last"))
    trimmed = (spans.withColumn("first", F.when(F.col("last") - F.col("first") >= 2, F.col("first") + 1)
                                .otherwise(F.col("first")))
               .withColumn("last", F.when(F.col("last") - F.col("first") >= 2, F.col("last") - 1)
                           .otherwise(F.col("last"))))
    grid = trimmed.select(*KEYS, F.explode(F.sequence("first", "last")).alias("second"))
    return (grid.join(counted, [*KEYS, "second"], "left").fillna(0, subset=["ops"])
            .withColumn("ops", F.col("ops").cast("long")))


def throughput_percentiles(series: DataFrame) -> DataFrame:
    """KEYS -> tput_p5, tput_p50, tput_p95 (exact percentiles of the per-second ops)."""
    quantiles = F.percentile(F.col("ops").cast("double"), F.array(*[F.lit(q) for q in THROUGHPUT.values()]))
    out = series.groupBy(*KEYS).agg(quantiles.alias("q"))
    for i, name in enumerate(THROUGHPUT):
        out = out.withColumn(name, F.col("q")[i])
    return out.drop("q")


# ----------------------------------------------------------------------------- the pipeline


def prepare(samples: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(ok operations and e2e deliveries as KEYS + latency_ns + done_ns + bytes, run starts)."""
    ops = samples.withColumn("done_ns", F.col("t_start_ns") + F.col("latency_ns"))
    run_start = ops.groupBy("run_id").agg(F.min("t_start_ns").alias("run_t0"))
    ok = ops.filter((F.col("outcome") == "ok") & ((F.col("op") != "get") | F.col("msg_id").isNotNull()))
    puts = (ops.filter((F.col("op") == "put") & F.col("msg_id").isNotNull())
            .groupBy("run_id", "msg_id").agg(F.min("t_start_ns").alias("put_ns")))
    deliveries = ok.filter(F.col("op") == "get")
    e2e = (deliveries.join(puts, ["run_id", "msg_id"])
           .withColumn("op", F.lit("e2e"))
           .withColumn("latency_ns", F.col("done_ns") - F.col("put_ns")))
    columns = [*KEYS, "latency_ns", "done_ns", "bytes"]
    return ok.select(*columns).unionByName(e2e.select(*columns)), run_start


def counts(samples: DataFrame, e2e: DataFrame) -> DataFrame:
    """KEYS -> count, ok, fail, info, bytes (operations) and the same for e2e rows."""
    outcome = F.col("outcome")
    per_op = samples.groupBy(*KEYS).agg(
        F.count(F.lit(1)).alias("count"),
        F.sum(((outcome == "ok") & ((F.col("op") != "get") | F.col("msg_id").isNotNull())).cast("long")).alias("ok"),
        F.sum((outcome == "fail").cast("long")).alias("fail"),
        F.sum((outcome == "info").cast("long")).alias("info"),
        F.sum("bytes").alias("bytes"))
    per_e2e = e2e.groupBy(*KEYS).agg(F.count(F.lit(1)).alias("count"), F.count(F.lit(1)).alias("ok"),
                                     F.lit(0).cast("long").alias("fail"), F.lit(0).cast("long").alias("info"),
                                     F.sum("bytes").alias("bytes"))
    both = per_op.unionByName(per_e2e)
    return with_measured(both, {c: "sum" for c in ("count", "ok", "fail", "info", "bytes")}, [])


def summarize(samples: DataFrame) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """(summary, per-second throughput series) of the samples of any number of runs.

    The heavy work — bucketing, joining, counting — runs in Spark; its three small
    results (counts, percentiles, throughput, one row per group) are joined in pandas.
    Intermediate results are cached: each is read by more than one job.
    """
    completed, run_start = prepare(samples)
    completed = completed.cache()
    series = throughput_series(completed, run_start).cache()
    try:
        buckets = with_measured(bucket_counts(completed), {"n": "sum", "lo": "min", "hi": "max"}, ["bucket"])
        latency = percentiles(buckets).toPandas()
        tput = throughput_percentiles(series).toPandas()
        totals = counts(samples, completed.filter(F.col("op") == "e2e")).toPandas()
        series_pd = series.orderBy(*KEYS, "second").toPandas()
    finally:
        series.unpersist()
        completed.unpersist()
    summary = totals.merge(latency, on=KEYS, how="left").merge(tput, on=KEYS, how="left")
    for name in ("ok", "fail", "info"):
        summary[f"{name}_rate"] = summary[name] / summary["count"]
    summary = summary[SUMMARY_COLUMNS].sort_values(KEYS, ignore_index=True)
    return summary, series_pd


def checks(samples: DataFrame) -> DataFrame:
    """Per run: Jepsen total-queue totals (attempts, enqueued, dequeued, ok, lost, ...)."""
    op, ok = F.col("op"), F.col("outcome") == "ok"
    per_message = (samples.filter(F.col("msg_id").isNotNull() & ((op == "put") | ((op == "get") & ok)))
                   .groupBy("run_id", "msg_id")
                   .agg(F.sum((op == "put").cast("long")).alias("att"),
                        F.sum(((op == "put") & ok).cast("long")).alias("enq"),
                        F.sum((op == "get").cast("long")).alias("deq")))
    att, enq, deq = F.col("att"), F.col("enq"), F.col("deq")
    delivered = F.least(deq, att)
    totals = per_message.groupBy("run_id").agg(
        F.sum(att).alias("attempts"), F.sum(enq).alias("enqueued"), F.sum(deq).alias("dequeued"),
        F.sum(delivered).alias("ok"),
        F.sum(F.greatest(enq - deq, F.lit(0))).alias("lost"),
        F.sum(F.when(att == 0, deq).otherwise(0)).alias("unexpected"),
        F.sum(F.when(att > 0, F.greatest(deq - att, F.lit(0))).otherwise(0)).alias("duplicated"),
        F.sum(F.greatest(delivered - enq, F.lit(0))).alias("recovered"))
    return totals.withColumn("valid", (F.col("lost") == 0) & (F.col("unexpected") == 0)).orderBy("run_id")


@dataclass
class Aggregation:
    directory: Path
    summary: "pd.DataFrame"
    throughput: "pd.DataFrame"
    checks: "pd.DataFrame"


def aggregate(spark: SparkSession, paths: Iterable[str | Path], out: str | Path) -> Aggregation:
    """Run the pipeline over ``paths``; write summary/throughput/checks as Parquet and JSON."""
    samples = load_samples(spark, paths).cache()
    try:
        summary, series = summarize(samples)
        totals = checks(samples).toPandas()
    finally:
        samples.unpersist()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in (("summary", summary), ("throughput", series), ("checks", totals)):
        frame.to_parquet(out / f"{name}.parquet", index=False)
        records = json.loads(frame.to_json(orient="records"))  # NaN -> null
        (out / f"{name}.json").write_text(json.dumps(records, indent=1) + "\n")
    return Aggregation(out, summary, series, totals)
