"""Design cores reach time, randomness, disk and network only through the Runtime."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FORBIDDEN = {"asyncio", "simpy", "socket", "time", "random", "uvloop", "selectors", "threading"}
BACKENDS = Path(__file__).resolve().parents[1] / "lab" / "backends"


def core_files() -> list[Path]:
    """Every backend's core: core.py, core_*.py, and any module of a core/ package."""
    files = sorted(BACKENDS.glob("*/core.py")) + sorted(BACKENDS.glob("*/core_*.py"))
    files += sorted(BACKENDS.glob("*/core/*.py"))
    return files


def forbidden_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        found += [f"{path.name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    return found


def test_there_are_cores_to_scan():
    assert any(p.parent.name == "ideal" for p in core_files())


@pytest.mark.parametrize("path", core_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_core_imports_nothing_that_does_io_or_keeps_time(path):
    assert forbidden_imports(path) == []


def test_the_scan_catches_a_forbidden_import(tmp_path):
    bad = tmp_path / "core.py"
    bad.write_text("import os\nfrom time import monotonic\nimport asyncio.tasks\n")
    assert forbidden_imports(bad) == ["core.py:2 imports time", "core.py:3 imports asyncio.tasks"]
