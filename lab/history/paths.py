"""Where results go, and the making of a run's folder.

Results go where the user works, never into the lab's install. ``results_dir()`` is, in
this order:

1. ``$QUEUE_LAB_RESULTS``, if it is set;
2. the checkout's ``results/``, if the current folder is inside the lab's own checkout (so
   ``make compare``, ``notebooks/`` and the test suite find their runs where they always did);
3. ``./results`` of the current folder otherwise — a user's design folder, even when the lab
   is an editable install of a checkout elsewhere.

docs/run.md and docs/settings.md say the same to the user.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def in_checkout(folder: Path | None = None) -> bool:
    """Whether ``folder`` (the current folder by default) is inside the lab's own checkout:
    an editable install's source tree, not a wheel's site-packages."""
    if not (REPO / "pyproject.toml").exists():  # installed from a wheel: no checkout at all
        return False
    here = (folder if folder is not None else Path.cwd()).resolve()
    return here == REPO or REPO in here.parents


def results_dir() -> Path:
    """Where results go (the module's docstring gives the rule)."""
    if "QUEUE_LAB_RESULTS" in os.environ:
        return Path(os.environ["QUEUE_LAB_RESULTS"])
    # The checkout's results/ only for work inside the checkout: an editable install used
    # from a user's own design folder must not write into the lab's source tree.
    if in_checkout():
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
