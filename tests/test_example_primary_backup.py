"""examples/primary_backup, installed the way a user would: a virtual environment layered on the
project's (``tests/layered_venv.py``), ``pip install -e examples/primary_backup`` into it, and
that environment's ``lab``: a sim crash of one node must not be INVALID, and ``lab mutants``
must catch the planted "acknowledge before the backup confirms" (exit 0).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.layered_venv import kill_leftovers, layered_venv, user_env

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "primary_backup"


def _run(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_primary_backup_installs_survives_a_crash_and_its_mutant_is_caught():
    with tempfile.TemporaryDirectory(prefix="primary-backup-") as tmp:
        root = Path(tmp)
        venv = root / "venv"
        bin_dir = layered_venv(venv)
        results = root / "results"
        env = user_env(venv, results)
        lab = str(bin_dir / "lab")
        try:
            done = _run([str(bin_dir / "pip"), "install", "-q", "-e", str(EXAMPLE)], env, root, timeout=300)
            assert done.returncode == 0, done.stdout + done.stderr

            done = _run([lab, "run", "crash-one", "--backend", "primary_backup"], env, EXAMPLE)
            said = done.stdout + done.stderr
            assert done.returncode == 0, said
            verdicts = [line for line in said.splitlines() if line.startswith("checker:")]
            assert verdicts and not verdicts[-1].startswith("checker: INVALID"), said
            manifests = list((results / "runs").glob("*crash-one-primary_backup-sim*/manifest.json"))
            assert len(manifests) == 1, manifests
            verdict = json.loads(manifests[0].read_text())["verdict"]
            assert verdict["verdict"] != "invalid", verdict

            done = _run([lab, "mutants", "--backends", "primary_backup"], env, EXAMPLE)
            said = done.stdout + done.stderr
            assert done.returncode == 0, said  # every mutant caught
            assert "primary_backup-ack-before-backup" in said, said
        finally:
            left = kill_leftovers(venv)
        assert not left, f"processes left running: {left}"
