"""Designs installed from outside the repository, for tests: a folder on the import path that
holds a package and the ``.dist-info`` a ``pip install`` would have written, with its entry
points in the ``queue_lab.designs`` group. The registry finds them exactly as it finds an
installed plug-in (``importlib.metadata``), in this process and in every process started with
``env()``.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from lab.design import registry


def write_distribution(root: Path, dist: str, version: str, entry_points: Mapping[str, str],
                       sources: Mapping[str, str]) -> Path:
    """Write the distribution ``dist`` into ``root``: ``sources`` (relative path → text) and
    its metadata declaring ``entry_points`` (design name → ``module:Class``); ``root``."""
    for relative, text in sources.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{registry.GROUP}]\n{lines}")
    return root


@contextmanager
def installed(root: Path) -> Iterator[dict[str, str]]:
    """``root``'s distributions installed in this process for the block; yields the
    environment a subprocess needs to see them too. Everything is undone on exit."""
    sys.path.insert(0, str(root))
    registry.refresh()
    before = set(sys.modules)
    try:
        yield env(root)
    finally:
        sys.path.remove(str(root))
        for name in set(sys.modules) - before:  # the fixture's own modules, so the next test imports afresh
            module = sys.modules.get(name)
            if module is not None and str(getattr(module, "__file__", "") or "").startswith(str(root)):
                del sys.modules[name]
        registry.refresh()


def env(root: Path) -> dict[str, str]:
    """This process's environment with ``root`` first on the import path."""
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}
