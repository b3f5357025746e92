"""Scale-out (slow tier, `make test-slow`): the pipeline on a standalone Spark cluster.

A master and two one-core workers started from the pyspark package's own launcher, the
same job run on them, and its summaries equal to the local run's. In a subprocess: a
process has one SparkSession, and the test run's own is local.
"""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from lab.experiments.runner import run
from lab.workloads.spec import parse_workload

pytestmark = pytest.mark.slow

SCRIPT = """
import sys
from lab.aggregate.pipeline import aggregate
from lab.aggregate.spark import spark_session, stop_session
from lab.aggregate.spark_cluster import standalone_cluster

with standalone_cluster(workers=2, cores=1, memory="1g") as url:
    spark = spark_session(url)
    assert spark.sparkContext.master == url
    aggregate(spark, [sys.argv[1]], sys.argv[2])
    print("executors:", spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1)  # minus the driver
    stop_session()
"""


def test_the_pipeline_on_a_standalone_cluster_matches_local(spark, tmp_path):
    from lab.aggregate.pipeline import aggregate

    w = parse_workload({"name": "cluster", "producers": 2, "consumers": 2, "rate": 3000, "duration": 2.0,
                        "ack": "reliable", "seed": 4})
    result = run(w, "ideal", "sim", out=tmp_path / "run", progress=False)
    local = aggregate(spark, [result.run_dir], tmp_path / "local")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(result.run_dir), str(tmp_path / "cluster")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "executors: 2" in done.stdout
    for table in ("summary", "checks", "histograms", "throughput"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "cluster" / f"{table}.parquet"),
                                      getattr(local, table).reset_index(drop=True), check_dtype=False)
