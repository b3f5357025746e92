"""Results go where the user works (lab.history.paths.results_dir): $QUEUE_LAB_RESULTS if set,
the checkout's results/ only when working inside the checkout, else ./results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lab.history.paths import REPO, in_checkout

WORKLOAD = """name: tiny
queues: 1
producers: 1
consumers: 1
message_size: 10
rate: 50
duration: 0.5
warmup: 0
ack: auto
seed: 1
"""


def _runs_in_checkout() -> set[str]:
    runs = REPO / "results" / "runs"
    return {p.name for p in runs.iterdir()} if runs.is_dir() else set()


def _lab_run(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (cwd / "tiny.yaml").write_text(WORKLOAD)
    return subprocess.run([sys.executable, "-m", "lab.cli", "run", "tiny.yaml", "--backend", "ideal",
                           "--world", "sim", "--no-progress"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_rule_for_folders() -> None:
    assert in_checkout(REPO) and in_checkout(REPO / "notebooks")
    assert not in_checkout(REPO.parent)


def test_a_run_outside_the_checkout_writes_under_the_current_folder(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "QUEUE_LAB_RESULTS"}
    before = _runs_in_checkout()
    done = _lab_run(tmp_path, env)
    assert done.returncode == 0, done.stderr
    runs = list((tmp_path / "results" / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "manifest.json").exists()
    assert _runs_in_checkout() == before  # nothing new in the checkout's results/


def test_queue_lab_results_wins(tmp_path: Path) -> None:
    where = tmp_path / "elsewhere"
    work = tmp_path / "work"
    work.mkdir()
    before = _runs_in_checkout()
    done = _lab_run(work, {**os.environ, "QUEUE_LAB_RESULTS": str(where)})
    assert done.returncode == 0, done.stderr
    assert len(list((where / "runs").iterdir())) == 1
    assert not (work / "results").exists()
    assert _runs_in_checkout() == before
