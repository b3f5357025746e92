"""`lab swarm --spark` and `lab matrix --spark`: each run a Spark task on ``local[2]`` (the seeds
one job), with the same verdicts, counts and invalid seeds as the process pool (the sim world is
deterministic); a seed whose task's worker dies twice reported by seed while the others run on;
the master URL checked and given its retries. The standalone cluster's 50-seed swarm is the slow tier's
``test_spark_swarm_cluster``.

A process has one SparkSession: these tests share the test run's (``local[2]``) when it has
started, else start and stop their own (``lab.experiments.spark_runs.spark_context``).
"""

from __future__ import annotations

import os
import sys

import pytest
import yaml
from pyspark import cloudpickle

from lab.cli import main
from lab.experiments import matrix, spark_runs, swarm
from lab.experiments.swarm_worker import run_seed

#: a short base load: each run takes a fraction of a second of wall time
TINY = {"name": "tiny", "producers": 2, "consumers": 2, "rate": 400, "duration": 1.5, "warmup": 0.2,
        "ack": "reliable"}
FIELDS = ("seed", "faults", "verdict", "reason", "broken", "lost", "duplicated", "unexpected", "inversions")


pytestmark = pytest.mark.usefixtures("results")  # runs go to the test's own folder (conftest)


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def outcomes(result: swarm.SwarmResult) -> list[tuple]:
    return [tuple(getattr(r, f) for f in FIELDS) for r in result.runs]


def test_a_local_master_gets_its_retries_and_a_bad_master_is_refused():
    assert spark_runs.with_retries("local[2]") == "local[2,2]"
    assert spark_runs.with_retries("local[*]") == "local[*,2]"
    assert spark_runs.with_retries("spark://127.0.0.1:7077") == "spark://127.0.0.1:7077"
    with pytest.raises(ValueError, match="local\\[N\\]"):
        spark_runs.check_master("yarn")


def test_a_bad_master_is_a_one_line_error_that_writes_nothing(results, capsys):
    assert main(["swarm", "--backend", "ideal", "--spark", "mesos://x"]) == 2
    assert "use local[N]" in capsys.readouterr().err
    assert not results.exists()


def test_the_swarm_on_spark_gives_the_pools_verdicts_seed_for_seed(tmp_path, tiny):
    seeds = range(1, 9)
    pool = swarm.swarm("kestrel", seeds, jobs=2, workload=tiny, out=tmp_path / "pool", progress=False)
    on_spark = swarm.swarm("kestrel", seeds, workload=tiny, out=tmp_path / "spark", progress=False,
                           spark="local[2]")
    assert outcomes(on_spark) == outcomes(pool)
    assert on_spark.counts == pool.counts and sum(on_spark.counts.values()) == len(seeds)
    assert on_spark.counts["error"] == 0 and on_spark.counts["invalid"] == 0  # kestrel keeps its promises
    assert [f.run.seed for f in on_spark.findings] == [f.run.seed for f in pool.findings]
    for run in on_spark.runs:  # each task wrote its run where the aggregation reads it
        assert (tmp_path / "spark" / f"seed-{run.seed}" / "samples.parquet").is_file()
        assert (tmp_path / "spark" / f"seed-{run.seed}" / "manifest.json").is_file()


def dies_on_seed_2(workload, backend, options, seed, out, world="sim"):
    """A seed's run whose worker dies at seed 2 (as one killed or out of memory would)."""
    if seed == 2:
        os._exit(3)
    return run_seed(workload, backend, options, seed, out, world)


def test_a_seed_whose_task_dies_twice_is_reported_by_seed_and_the_others_run(monkeypatch, tmp_path, tiny):
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the task's function, shipped whole
    try:
        monkeypatch.setattr(swarm, "run_seed", dies_on_seed_2)
        result = swarm.swarm("ideal", [1, 2, 3], workload=tiny, out=tmp_path / "sw", progress=False,
                             spark="local[2]")
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    verdicts = {r.seed: r.verdict for r in result.runs}
    # seeds 1 and 3 ran as any seed does: the ideal design is never invalid
    assert verdicts[2] == "error" and {verdicts[1], verdicts[3]} <= {"valid", "allowed"}, verdicts
    (error,) = [r for r in result.runs if r.seed == 2]
    assert error.reason.startswith("TaskFailed: its Spark task failed 2 times")
    assert [f.run.seed for f in result.findings] == [2]
    assert (tmp_path / "sw" / "seed-2.error.txt").is_file()
    # the one job's summaries folder is gone, and no killed task's half-written run folder is left
    assert not (tmp_path / "sw" / spark_runs.SUMMARIES).exists()
    assert all((tmp_path / "sw" / f"seed-{s}" / "manifest.json").is_file() for s in (1, 3))


def test_one_job_runs_every_call_and_a_past_deadline_starts_none(tmp_path):
    with spark_runs.spark_context("local[2]") as sc:
        runs = spark_runs.SparkRuns(sc, 2)
        got = dict((key, future.result()) for key, future in
                   runs.run_all(pow, [(n, (n, 2)) for n in range(6)], tmp_path))
        skipped = list(runs.run_all(pow, [(n, (n, 2)) for n in range(3)], tmp_path, deadline=0.0))
        runs.shutdown()
    assert got == {n: n * n for n in range(6)}
    assert skipped == []  # past the deadline: no run started, none reported
    assert not (tmp_path / spark_runs.SUMMARIES).exists()


def test_the_matrix_on_spark_gives_the_pools_table(tmp_path):
    args = dict(backends=["kestrel"], scenarios=["crash-one"], seeds=2, progress=False, echo=lambda _: None)
    pool = matrix.run_matrix(**args, jobs=2, out=tmp_path / "pool")
    on_spark = matrix.run_matrix(**args, out=tmp_path / "spark", spark="local[2]")
    same = [c for c in matrix.COLUMNS if c != "run_ids" and not c.endswith("_ns")]
    assert [{c: r[c] for c in same} for r in on_spark.rows] == [{c: r[c] for c in same} for r in pool.rows]
    assert {r["verdict"] for r in on_spark.rows} <= {"valid", "allowed"}  # kestrel keeps its promises
    assert all(r["put_steady_p99_ns"] for r in on_spark.rows)  # the latencies aggregated from the tasks' files
