"""What every `lab` command costs before it does anything: building the parser must not import
the experiments' heavy modules. `lab serve` is a `lab` command, started once per server and
again on every restart after a crash, so what the parser imports is paid in each recovery."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pandas", "pyarrow", "pyspark", "matplotlib", "lab.experiments.runner", "lab.experiments.matrix",
         "lab.experiments.compare", "lab.judge.summary", "lab.history.record")

PROBE = """
import json, sys
from lab.cli import build_parser
build_parser().parse_args(["serve", "kestrel", "--data-dir", "x"])
print(json.dumps(sorted(sys.modules)))
"""


def test_the_parser_and_lab_serve_import_none_of_the_heavy_modules():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert "lab.cli.servers" in loaded  # the probe did build the whole parser
    assert sorted(set(HEAVY) & loaded) == []
