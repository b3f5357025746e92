"""The linter's findings: ``ruff check lab models loadgen tests`` (its config in pyproject.toml) finds none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "lab", "models", "loadgen", "tests"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"ruff check failed ({done.returncode}):\n{done.stdout}{done.stderr}"
