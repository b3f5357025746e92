"""`lab new design NAME`: the scaffold refuses what it must and writes a package that works —
its core pure, its files Python — and, installed from outside the repository into a
temporary environment layered on the project's, is a design like the lab's own: listed by
`lab backends`, VALID in `lab run` in both worlds, no invalid verdict in `lab matrix` and
`lab swarm`, and put under load by `lab load`.

The install is pip's own (``pip install -e``, building in isolation as a user's would), into a
virtual environment whose ``.pth`` adds the project's site-packages.
"""

from __future__ import annotations

import csv
import json
import os
import py_compile
import subprocess
import tomllib
from pathlib import Path

import pytest

from lab.cli import main
from lab.cli.new import class_name, files
from lab.design.registry import GROUP
from lab.experiments.conform.static import purity
from tests.layered_venv import layered_venv

NAME = "toyq"


def _write(tmp_path: Path, name: str = NAME) -> Path:
    assert main(["new", "design", name, "--dir", str(tmp_path)]) == 0
    return tmp_path / name


@pytest.mark.parametrize("name, says", [
    ("Bad", "lower-case Python identifier"),
    ("my-queue", "lower-case Python identifier"),
    ("9lives", "lower-case Python identifier"),
    ("class", "lower-case Python identifier"),
    ("ideal", "taken by an installed design"),
    ("lab", "shadow a package of the lab"),
])
def test_a_bad_name_is_a_usage_error_and_nothing_is_written(tmp_path, capsys, name, says):
    assert main(["new", "design", name, "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lab: error:") and says in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_an_existing_folder_with_files_is_refused_and_left_alone(tmp_path, capsys):
    (tmp_path / NAME).mkdir()
    (tmp_path / NAME / "mine.txt").write_text("keep me")
    assert main(["new", "design", NAME, "--dir", str(tmp_path)]) == 2
    assert "already there and not empty" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / NAME).iterdir()] == ["mine.txt"]


def test_an_empty_folder_is_filled(tmp_path):
    (tmp_path / NAME).mkdir()
    assert (_write(tmp_path) / "pyproject.toml").is_file()


def test_the_package_compiles_names_itself_and_declares_its_entry_point(tmp_path):
    root = _write(tmp_path, "my_queue")
    written = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert written == sorted(str(p) for p in files("my_queue"))
    assert {"my_queue/core/queue.py", "my_queue/wire/http.py", "my_queue/node.py", "my_queue/serve.py",
            "my_queue/driver.py", "my_queue/load.py", "tests/test_my_queue.py", "README.md"} <= set(written)
    for path in root.rglob("*.py"):
        py_compile.compile(str(path), doraise=True)
        assert "{{" not in path.read_text(), path  # every stand-in filled in
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["name"] == "my_queue" and "queue-lab" in project["dependencies"]
    assert project["entry-points"][GROUP] == {"my_queue": "my_queue.driver:MyQueueBackend"}
    assert class_name("my_queue") == "MyQueue"


def test_the_generated_core_and_wire_are_pure(tmp_path):
    root = _write(tmp_path)
    checked, chains = purity(NAME, root / NAME)
    assert {p.name for p in checked} >= {"queue.py", "http.py"} and chains == []


# -- installed from outside the repository --------------------------------------------------

def _installed(tmp_path: Path, package: Path) -> Path:
    """A virtual environment layered on the project's, with ``package`` installed into it by
    pip (editable, built in isolation, as a user installs it); its python."""
    bin_dir = layered_venv(tmp_path / "venv")
    # --no-deps: queue-lab and its dependencies are the project's, seen through the layer
    subprocess.run([str(bin_dir / "pip"), "install", "--quiet", "--no-deps", "-e", str(package)], check=True,
                   timeout=600)
    return bin_dir / "python"


def _lab(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what the venv itself sees
    out = subprocess.run([str(python), "-m", "lab.cli", *args], capture_output=True, text=True, cwd=cwd, env=env,
                         timeout=600)
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    return out


@pytest.mark.slow
def test_a_scaffolded_design_installed_outside_the_repository_runs_in_every_command(tmp_path):
    python = _installed(tmp_path, _write(tmp_path))
    cwd = tmp_path  # not the repository: nothing found by being beside it

    out = _lab(python, "backends", cwd=cwd)
    assert out.returncode == 0 and f"\n{NAME}: " in out.stdout and f"from: {NAME} 0.1.0" in out.stdout
    assert "\nrefused (" not in out.stdout  # no design refused, this one or another

    for world in ("sim", "live"):
        run = tmp_path / f"run-{world}"
        out = _lab(python, "run", "steady", "--backend", NAME, "--world", world, "--out", str(run), "--no-progress",
                   cwd=cwd)
        verdict = json.loads((run / "manifest.json").read_text())["verdict"]
        assert out.returncode == 0 and "checker: VALID" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
        assert verdict["verdict"] == "valid" and verdict["lost"] == 0 and verdict["enqueued"] > 1000

    # from the folder that holds the project (`python -m` puts it on the path, where the project
    # folder looks like a namespace package of the design's name): the walk finds the real one
    out = _lab(python, "conform", NAME, "--quick", cwd=cwd)
    assert out.returncode == 0 and f"lab conform {NAME} --quick: conforms" in out.stdout, out.stdout[-3000:]
    assert "FAIL" not in out.stdout

    out = _lab(python, "matrix", "--backends", NAME, "--seeds", "2", "--out", str(tmp_path / "matrix"),
               "--no-progress", cwd=cwd)
    rows = list(csv.DictReader((tmp_path / "matrix" / "matrix.csv").open()))
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(rows) > 10 and {r["backend"] for r in rows} == {NAME}
    assert {r["verdict"] for r in rows} <= {"valid", "allowed"}, [r for r in rows if r["verdict"] != "valid"]

    out = _lab(python, "swarm", "--backend", NAME, "--seeds", "1..20", "--out", str(tmp_path / "swarm"),
               "--no-progress", cwd=cwd)
    seeds = list(csv.DictReader((tmp_path / "swarm" / "swarm.csv").open()))
    assert out.returncode == 0 and "invalid 0, no evidence 0, error 0" in out.stdout, out.stdout[-2000:]
    assert len(seeds) == 20 and {s["verdict"] for s in seeds} <= {"valid", "allowed"}

    out = _lab(python, "load", NAME, "--duration", "5s", "--out", str(tmp_path / "load"), cwd=cwd)
    verdict = json.loads((tmp_path / "load" / "manifest.json").read_text())["verdict"]
    assert out.returncode == 0, out.stderr[-2000:]
    assert verdict["verdict"] == "valid" and verdict["enqueued"] > 100 and verdict["dequeued"] == verdict["enqueued"]
