"""Design cores reach time, randomness, disk and network only through the Runtime: a walk
of the imports proves it.

For every module of a ``lab/backends/*/core/`` package (and a single-file ``core.py``),
and of a ``wire/`` package (sans-IO: the same rule holds for protocol handlers),
the walk follows each import through the project's own modules (``lab.*``), including
the packages Python runs on the way (``lab/__init__.py``, ``lab/backends/__init__.py``,
...), lazy imports inside functions too, and refuses any module named in ``FORBIDDEN``
reached directly or through another project module. Imports under ``if TYPE_CHECKING:``
are skipped: they never run; so is a package's module-level ``__getattr__`` (PEP 562),
which runs only when a caller asks for a name it loads lazily (Queuefka's package loads
its plain-file library that way). Third-party and standard-library modules are not walked
into (``logging`` uses threads; a core may log).

``lab.design.runtime`` is the port and is walked like any module, with one exception: its
``from asyncio import CancelledError`` (the name of cancellation both worlds raise).
"""

from __future__ import annotations

from pathlib import Path

import pytest

# the walk is the conformance suite's (``lab conform``): the test and the suite share it
from lab.experiments.conform.static import (BACKENDS, FORBIDDEN, ROOT, core_files, forbidden_chains,
                                            imports_of, purity)


def test_there_are_cores_to_scan():
    designs = {p.parent.parent.name if p.parent.name in ("core", "wire") else p.parent.name
               for p in core_files() if BACKENDS in p.parents}
    assert {"kestrel", "queuefka", "ideal"} <= designs


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_core_reaches_no_os_clock_or_world(path):
    assert forbidden_chains(path) == []


def test_the_port_is_walked_and_allows_only_the_name_of_cancellation():
    runs = [(i.module, i.names) for i in imports_of(ROOT / "lab" / "design" / "runtime.py", "lab.design.runtime")
            if i.module.split(".")[0] in FORBIDDEN]
    assert runs == [("asyncio", ("CancelledError",))]
    assert forbidden_chains(ROOT / "lab" / "design" / "runtime.py") == []


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "lab" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_walk_catches_an_indirect_import(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "backends/__init__.py": "",
        "backends/toy/__init__.py": "",
        "backends/toy/core/__init__.py": "",
        "backends/toy/core/queue.py": "from lab.backends.toy.core.journal import Journal\n",
        "backends/toy/core/journal.py": "from . import clock\nclass Journal: pass\n",
        "backends/toy/core/clock.py": "def now():\n    import time\n    return time.time()\n",
    })
    assert forbidden_chains(root / "lab/backends/toy/core/queue.py", root) == [
        "toy/core/queue.py -> lab.backends.toy.core.journal -> lab.backends.toy.core.clock -> time (line 2)"]


def test_the_walk_catches_a_package_run_on_the_way_and_models(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "import random\n",
        "backends/__init__.py": "",
        "backends/toy/__init__.py": "",
        "backends/toy/core/__init__.py": "",
        "backends/toy/core/queue.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import os\n"
                                      "from lab import helpers\n",
        "helpers.py": "from models.world import SimWorld\n",
    })
    assert forbidden_chains(root / "lab/backends/toy/core/queue.py", root) == [
        "toy/core/queue.py -> lab -> random (line 1)",
        "toy/core/queue.py -> lab.helpers -> models.world (line 1)",
    ]


def test_the_exception_is_one_import_of_the_port_only(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "design/__init__.py": "",
        "design/runtime.py": "from asyncio import CancelledError, sleep\n",
        "backends/__init__.py": "",
        "backends/toy/__init__.py": "",
        "backends/toy/core/__init__.py": "from asyncio import CancelledError\nfrom lab.design import runtime\n",
    })
    assert forbidden_chains(root / "lab/backends/toy/core/__init__.py", root) == [
        "toy/core/__init__.py -> asyncio (line 1)",
        "toy/core/__init__.py -> lab.design.runtime -> asyncio (line 1)",
    ]


def test_a_design_outside_the_lab_is_walked_through_its_own_package_and_the_lab(tmp_path):
    """A plug-in design lives in a folder of its own: its imports are walked through its own
    package as through the lab's."""
    files = {
        "toyq/__init__.py": "",
        "toyq/core/__init__.py": "",
        "toyq/core/queue.py": "from lab.design.runtime import Runtime\nfrom toyq.core import clock\n",
        "toyq/core/clock.py": "def now():\n    import time\n    return time.time()\n",
        "toyq/wire/__init__.py": "from lab.design.http import Request\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    walked, chains = purity("toyq", tmp_path / "toyq")
    assert [p.relative_to(tmp_path).as_posix() for p in walked] == [
        "toyq/core/__init__.py", "toyq/core/clock.py", "toyq/core/queue.py", "toyq/wire/__init__.py"]
    assert chains == ["toyq/core/clock.py -> time (line 2)",
                      "toyq/core/queue.py -> toyq.core.clock -> time (line 2)"]
