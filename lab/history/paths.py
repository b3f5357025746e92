"""Where results go: ``results/`` of the checkout (or $QUEUE_LAB_RESULTS, or ./results), and
the making of a run's folder."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def results_dir() -> Path:
    if "QUEUE_LAB_RESULTS" in os.environ:
        return Path(os.environ["QUEUE_LAB_RESULTS"])
    if (REPO / "pyproject.toml").exists():  # an editable install in a checkout
        return REPO / "results"
    return Path.cwd() / "results"


def runs_dir() -> Path:
    return results_dir() / "runs"


class BadRunDir(ValueError):
    """A run's folder that cannot hold it: a file, or a folder that holds a run already."""


def make_empty_folder(out: str | os.PathLike | None, default: str) -> Path:
    """The folder of a command that writes many runs (a swarm, a hunt): ``out``, or
    ``results/runs/<default>-<UTC time>``; made now, and refused (BadRunDir) if it is a file
    or a folder with something in it already."""
    from datetime import datetime, timezone

    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    directory = Path(out) if out is not None else runs_dir() / default.replace("{time}", stamp)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BadRunDir(f"{directory}: exists and is not an empty folder (give --out a new folder)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadRunDir(f"{directory}: cannot make the folder: {e.strerror or e}") from None
    return directory


def make_run_dir(run_dir: Path) -> bool:
    """Make the run's folder; True if this call created it. Refuses a file, or a folder that
    already holds a run (it would be overwritten)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise BadRunDir(f"{run_dir}: exists and is not a folder (give --out a new folder)")
    if (run_dir / "samples.parquet").exists() or (run_dir / "manifest.json").exists():
        raise BadRunDir(f"{run_dir}: holds a run already (give --out a new folder)")
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadRunDir(f"{run_dir}: cannot make the run folder: {e.strerror or e}") from None
    return created
