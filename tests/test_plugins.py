"""Designs as plug-ins: a distribution that declares an entry point in ``queue_lab.designs``
is a design like the lab's own; one that cannot be used is named in one line and refused by
what asks for it, and every other design goes on working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab.cli import main
from lab.design import registry
from lab.design.registry import REGISTRY, UnknownBackend, backend_class, colour
from lab.experiments.planting import catalogue
import json
from tests.plugins import installed, write_distribution

SMALL = "name: small\nproducers: 2\nconsumers: 1\nrate: 1000\nduration: 0.5\nseed: 3\n"
IDEAL = Path(__file__).resolve().parents[1] / "lab" / "backends" / "ideal"


def outside_design(root: Path, name: str = "outside", dist: str = "outside-queue", version: str = "1.2") -> Path:
    """A real design living outside the repository: the ideal queue's core and adapter, copied
    into a package of its own under another name (no import of the lab's designs)."""
    package = name.replace("-", "_")
    driver = (IDEAL / "driver.py").read_text().replace("lab.backends.ideal.core", f"{package}.core")
    driver = driver.replace("lab.backends.ideal.promises", f"{package}.promises")
    driver = driver.replace('name = "ideal"', f'name = "{name}"').replace('colour="#7f7f7f"', "colour=None")
    driver = driver.replace('SERVER = "ideal-0"', f'SERVER = "{name}-0"')
    assert f"{package}.core" in driver and f"{package}.promises" in driver and f'name = "{name}"' in driver
    assert "colour=None" in driver
    return write_distribution(root, dist, version, {name: f"{package}.driver:IdealBackend"},
                              {f"{package}/__init__.py": "", f"{package}/core.py": (IDEAL / "core.py").read_text(),
                               f"{package}/promises.py": (IDEAL / "promises.py").read_text(),
                               f"{package}/driver.py": driver})


def test_the_lab_own_designs_come_by_entry_point_like_any_other():
    assert registry.own() == ["ideal", "kestrel", "queuefka", "cassieq", "primer"]
    for name in registry.own():
        assert REGISTRY[name].origin == "queue-lab" and "(built in)" in REGISTRY[name].where
        assert backend_class(name).name == name
    assert registry.problems() == []


@pytest.fixture
def small(tmp_path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    return path


def test_an_installed_design_is_listed_with_its_distribution_and_runs(tmp_path, small, capsys):
    with installed(outside_design(tmp_path / "site")):
        assert list(REGISTRY)[-1] == "outside" and registry.own()[-1] == "primer"
        assert main(["backends"]) == 0
        listing = capsys.readouterr().out
        assert "outside: in-memory FIFO" in listing and "from: outside-queue 1.2\n" in listing
        assert colour("outside") in registry.SPARE_COLOURS  # declares none: a spare, not another design's
        for world in ("sim", "live"):
            out = tmp_path / world
            assert main(["run", str(small), "--backend", "outside", "--world", world, "--no-progress",
                         "--out", str(out)]) == 0
            manifest = json.loads((out / "manifest.json").read_text())
            assert manifest["backend"] == "outside" and manifest["verdict"]["verdict"] == "valid"
    assert "outside" not in REGISTRY  # uninstalled with the block


def test_a_plugin_that_fails_to_import_is_one_line_and_breaks_nothing_else(tmp_path, small, capsys):
    root = write_distribution(tmp_path / "site", "broken-queue", "0.3", {"broken": "broken_queue.driver:Backend"},
                              {"broken_queue/__init__.py": "", "broken_queue/driver.py": "import no_such_module\n"})
    with installed(root):
        assert main(["backends"]) == 0
        out = capsys.readouterr().out
        refused = [line for line in out.splitlines() if "broken" in line]
        assert refused == ["  broken (broken-queue 0.3): refused: cannot be imported: "
                           "ModuleNotFoundError: No module named 'no_such_module'"]
        for name in registry.own():  # every other design is listed whole
            assert f"\n{name}: " in "\n" + out
        assert main(["run", str(small), "--backend", "broken", "--no-progress", "--out", str(tmp_path / "runs")]) == 2
        err = capsys.readouterr().err
        assert "broken (broken-queue 0.3): refused: cannot be imported" in err
        assert not (tmp_path / "runs").exists()  # a refused request writes nothing
        # what runs every design when not told which leaves it out, and goes on
        assert registry.usable() == registry.own() and "broken" in REGISTRY
        assert len(catalogue()) >= 17  # every design's planted bugs, the broken one's none


OLD_STYLE = """from lab.backends.ideal.driver import IdealBackend
from lab.design.promises import total_queue

class OldBackend(IdealBackend):
    name = "old"
    summary = "a design written before the driver was split"
    colour = "#123456"

    @classmethod
    def promises(cls, options, reliable):
        return total_queue("old")
"""


def test_a_plugin_written_before_the_split_is_refused_with_what_to_change(tmp_path, small, capsys):
    """Summary, colour and promises declared on the Backend itself: one line naming each change,
    and the run refused before it writes anything."""
    root = write_distribution(tmp_path / "site", "old-queue", "0.1", {"old": "old_queue.driver:OldBackend"},
                              {"old_queue/__init__.py": "", "old_queue/driver.py": OLD_STYLE})
    with installed(root):
        with pytest.raises(UnknownBackend, match="declare these apart from the driver"):
            backend_class("old")
        (problem,) = [p.line() for p in registry.problems() if p.name == "old"]
        assert "summary (now about = About(summary, colour=...))" in problem
        assert "promises (now promised = Promised(rule, option_sets=...))" in problem
        assert "docs/your-own-design.md" in problem
        assert main(["run", str(small), "--backend", "old", "--no-progress", "--out", str(tmp_path / "runs")]) == 2
        assert "declare these apart from the driver" in capsys.readouterr().err
        assert not (tmp_path / "runs").exists()


def test_a_design_without_about_and_a_bad_colour_are_refused_as_they_are_declared():
    from lab.design import About, Backend

    with pytest.raises(TypeError, match="declares no about"):
        type("Nameless", (Backend,), {"name": "nameless"})
    with pytest.raises(ValueError, match="not #rrggbb"):
        About("a queue", colour="red")
    with pytest.raises(ValueError, match="summary is empty"):
        About(" ")


def test_a_name_clash_refuses_the_newcomers_and_keeps_the_lab_own(tmp_path, capsys):
    site = tmp_path / "site"
    outside_design(site, "twin", "twin-a", "1.0")
    outside_design(site / "b", "twin", "twin-b", "2.0")  # the same name from a second distribution
    write_distribution(site, "kestrel-fork", "9.9", {"kestrel": "twin.driver:IdealBackend"}, {})
    with installed(site), installed(site / "b"):
        lines = [p.line() for p in registry.problems()]
        assert "kestrel (kestrel-fork 9.9): refused: 'kestrel' is the lab's own design" in lines
        assert sum("twin (twin-" in line and "declared by twin-" in line for line in lines) == 2
        assert backend_class("kestrel").__module__ == "lab.backends.kestrel.driver"
        with pytest.raises(UnknownBackend, match="twin .*declared by twin-a 1.0 and twin-b 2.0"):
            backend_class("twin")
        assert main(["backends"]) == 0
        assert "refused" in capsys.readouterr().out


def test_an_entry_point_that_is_no_backend_or_misnamed_is_refused(tmp_path):
    root = write_distribution(tmp_path / "site", "odd-queue", "0.1",
                              {"notabackend": "odd_queue.driver:VALUE", "misnamed": "odd_queue.driver:IdealBackend",
                               "Bad Name": "odd_queue.driver:IdealBackend"},
                              {"odd_queue/__init__.py": "",
                               "odd_queue/driver.py": "from lab.backends.ideal.driver import IdealBackend\nVALUE = 3\n"})
    with installed(root):
        with pytest.raises(UnknownBackend, match="odd_queue.driver:VALUE is not a Backend class"):
            backend_class("notabackend")
        with pytest.raises(UnknownBackend, match="its Backend calls itself 'ideal', not 'misnamed'"):
            backend_class("misnamed")
        assert any(p.name == "Bad Name" and "lower-case" in p.reason for p in registry.problems())
        assert backend_class("ideal").name == "ideal"


def test_a_subprocess_finds_a_design_installed_on_its_path(tmp_path):
    """The live world's servers, pool workers and Locust run as processes: they find a plug-in
    as the parent does."""
    with installed(outside_design(tmp_path / "site")) as env:
        out = subprocess.run([sys.executable, "-m", "lab.cli", "backends"], env=env, capture_output=True, text=True,
                             timeout=120)
    assert out.returncode == 0 and "from: outside-queue 1.2" in out.stdout


def test_an_install_that_declares_no_design_says_to_reinstall(monkeypatch):
    """A venv installed before designs were entry points finds none: the error says the cure."""
    monkeypatch.setattr(REGISTRY, "_entries", {})
    monkeypatch.setattr(REGISTRY, "_problems", [])
    with pytest.raises(UnknownBackend, match="no design is installed.*reinstall queue-lab"):
        backend_class("kestrel")


def test_an_entry_point_may_be_a_registration_with_its_own_colour(tmp_path):
    site = outside_design(tmp_path / "site", "regd", "regd-queue", "0.5")
    (site / "regd" / "design.py").write_text(
        'from lab.design import Registration\n'
        'DESIGN = Registration("regd", "regd.driver:IdealBackend", colour="#123456")\n')
    write_distribution(site, "regd-queue", "0.5", {"regd": "regd.design:DESIGN"}, {})
    with installed(site):
        assert backend_class("regd").name == "regd" and backend_class("regd").__module__ == "regd.driver"
        assert colour("regd") == "#123456" and REGISTRY["regd"].where == "regd-queue 0.5"
