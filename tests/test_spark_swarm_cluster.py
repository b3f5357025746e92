"""Scale-out (slow tier, `make test-slow`): `lab swarm --spark spark://...` on a standalone
cluster — one master, two one-core workers on this machine, sharing its venv and disk — finds
the same invalid seeds and the same verdict counts as the process pool over the same 50 seeds
(the sim world is deterministic, so it must). In a subprocess: a process has one
SparkSession, and the test run's own is local.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lab.experiments import swarm

pytestmark = pytest.mark.slow

SEEDS = range(1, 51)
SCRIPT = """
import json, sys
from lab.aggregate.spark_cluster import standalone_cluster
from lab.experiments.swarm import swarm

with standalone_cluster(workers=2, cores=1, memory="1g") as url:
    result = swarm("kestrel", range(1, 51), out=sys.argv[1], progress=False, spark=url, echo=lambda _: None)
print(json.dumps({"runs": [[r.seed, r.verdict, r.reason, r.lost, r.duplicated] for r in result.runs],
                  "invalid": [f.run.seed for f in result.findings], "counts": dict(result.counts)}))
"""


def test_a_50_seed_swarm_on_a_standalone_cluster_finds_what_the_pool_finds(tmp_path, results):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "cluster")], capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    cluster = json.loads(done.stdout.strip().splitlines()[-1])
    pool = swarm.swarm("kestrel", SEEDS, out=tmp_path / "pool", progress=False, echo=lambda _: None)
    assert cluster["invalid"] == [f.run.seed for f in pool.findings]
    assert cluster["counts"] == dict(pool.counts) and sum(cluster["counts"].values()) == len(SEEDS)
    assert cluster["runs"] == [[r.seed, r.verdict, r.reason, r.lost, r.duplicated] for r in pool.runs]
    assert pool.counts["error"] == 0  # every seed ran to a verdict, on both
