"""Where results go: ``results/`` of the checkout (or $QUEUE_LAB_RESULTS, or ./results)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def results_dir() -> Path:
    if "QUEUE_LAB_RESULTS" in os.environ:
        return Path(os.environ["QUEUE_LAB_RESULTS"])
    if (REPO / "pyproject.toml").exists():  # an editable install in a checkout
        return REPO / "results"
    return Path.cwd() / "results"


def runs_dir() -> Path:
    return results_dir() / "runs"
