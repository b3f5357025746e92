"""The type checker's findings: ``mypy`` over pyproject.toml's [tool.mypy] (lab, models and
loadgen; the design API and the judge under strict flags) finds none, and the package `lab new
design NAME` writes passes the strict flags the design API gets — a plug-in author starts from
code that type-checks as the lab's own API does.

Both run in one xdist group: each is up to a minute of a core, and one after the other they
leave the other core to the rest of the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from lab.cli import main

ROOT = Path(__file__).resolve().parents[1]
NAME = "typedq"

pytestmark = pytest.mark.xdist_group("mypy")


def _mypy(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=1200, env=env)


def design_api_flags() -> dict[str, object]:
    """The flags pyproject.toml's [tool.mypy] gives ``lab.design`` (its strict override)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    for override in config.get("overrides", []):
        modules = override["module"]
        if "lab.design" in (modules if isinstance(modules, list) else [modules]):
            return {key: value for key, value in override.items() if key != "module"}
    raise AssertionError("pyproject.toml's [tool.mypy] has no override for lab.design")


def test_mypy_finds_nothing():
    done = _mypy()
    assert done.returncode == 0, f"mypy failed ({done.returncode}):\n{done.stdout}{done.stderr}"


def test_the_new_design_package_passes_the_design_apis_strict_flags(tmp_path):
    assert main(["new", "design", NAME, "--dir", str(tmp_path)]) == 0
    project = tmp_path / NAME
    package = project / NAME
    assert (package / "__init__.py").is_file() and (package / "driver.py").is_file()
    flags = design_api_flags()
    assert flags.get("disallow_untyped_defs") is True  # the strict set, not an empty one
    # the flags on the package alone; the lab it imports is read, its findings are the other test's
    lines = ["[mypy]", "python_version = 3.11", "ignore_missing_imports = True", "follow_imports = silent", "",
             f"[mypy-{NAME},{NAME}.*]"]
    lines += [f"{key} = {value}" for key, value in flags.items()]
    config = tmp_path / "mypy.ini"
    config.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "MYPYPATH": str(project)}
    done = _mypy("--config-file", str(config), "--cache-dir", str(tmp_path / "mypy-cache"), str(package), env=env)
    assert done.returncode == 0, f"mypy on the new package failed ({done.returncode}):\n{done.stdout}{done.stderr}"
    assert "no issues found in" in done.stdout
