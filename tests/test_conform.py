"""`lab conform`: each kind of failure is caught and names its line (fixture designs installed
as plug-ins, and the lab's own planted bugs); and, slow, every built-in design conforms
through the command line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lab.experiments.conform import FAIL, PASS, SKIP, assert_conforms, conform
from lab.experiments.planting import plant

from tests.plugins import installed, write_distribution

ROOT = Path(__file__).resolve().parents[1]
QUIET = dict(jobs=1, echo=lambda line: None)

# A toy design: the control under another name, with one thing changed per test.
DRIVER = """
from lab.backends.ideal.driver import IdealBackend, IdealClient
from lab.design import Option, TIMEOUT
{extra}

class ToyBackend(IdealBackend):
    name = "toyq"
{body}
"""


def _toy(tmp_path: Path, *, core: str = "from lab.design.runtime import Runtime\n", extra: str = "",
         body: str = "    pass\n", files: dict[str, str] | None = None) -> Path:
    return write_distribution(tmp_path / "site", "toyq", "0.1", {"toyq": "toyq.driver:ToyBackend"}, {
        "toyq/__init__.py": "", "toyq/core.py": core,
        "toyq/driver.py": DRIVER.format(extra=textwrap.dedent(extra), body=body), **(files or {})})


def test_a_core_that_imports_socket_fails_the_purity_line(tmp_path):
    with installed(_toy(tmp_path, core="import socket\nfrom lab.design.runtime import Runtime\n")):
        report = conform("toyq", only=["purity"], **QUIET)
    line = report.line("static:")
    assert line.status == FAIL and "toyq/core.py -> socket (line 1)" in line.reason
    assert report.exit_code == 1


def test_a_core_that_reads_the_clock_through_its_own_package_fails_the_purity_line(tmp_path):
    files = {"toyq/clock.py": "import time\n"}
    with installed(_toy(tmp_path, core="from toyq import clock\n", files=files)):
        report = conform("toyq", only=["purity"], **QUIET)
    assert report.line("static:").status == FAIL
    assert "toyq/core.py -> toyq.clock -> time" in report.line("static:").reason


def test_the_control_passes_the_quick_checks_it_can_run(tmp_path):
    report = assert_conforms("ideal", only=["purity", "determinism", "no-fault-sim", "options", "server"], **QUIET)
    assert {line.status for line in report.lines} == {PASS, SKIP}
    assert all(line.status == SKIP and "no lab serve" in line.reason for line in report.lines
               if line.check.startswith("live server"))


def test_an_unseeded_random_fails_the_determinism_line(tmp_path):
    extra = """
    import random as _random

    class _Jittery(IdealClient):
        async def put(self, queue, body):
            await self.rt.sleep(_random.random() / 1000)  # the bug: a random the seed does not give
            return await super().put(queue, body)
    """
    body = "    def client(self, rt, reliable):\n        return _Jittery(rt, self.server_nodes[0], reliable, self.options['timeout'])\n"
    with installed(_toy(tmp_path, extra=extra, body=body)):
        report = conform("toyq", only=["determinism"], **QUIET)
    line = report.line("sim: determinism")
    assert line.status == FAIL and "differs first at row" in line.reason


def test_an_option_that_takes_anything_or_raises_fails_its_line(tmp_path):
    body = ("    options_declared = (TIMEOUT, Option('anything', 'takes anything', 'anything', lambda v: v),\n"
            "                        Option('fragile', 'a word', 'a word', lambda v: v.upper()))\n")
    with installed(_toy(tmp_path, body=body)):
        report = conform("toyq", only=["options"], **QUIET)
    assert report.line("options: timeout").status == PASS
    assert report.line("options: anything").status == FAIL
    assert "took every bad value" in report.line("options: anything").reason
    fragile = report.line("options: fragile")
    assert fragile.status == FAIL and "raised AttributeError" in fragile.reason


def test_a_planted_duplicate_fails_the_no_fault_line_with_reliable_reads():
    with plant("ideal-ack-redelivers"):  # one ack in 40 puts its message back: a duplicate with no fault
        report = conform("ideal", only=["no-fault-sim"], **QUIET)
    reliable, plain = report.line("sim: no fault, reliable reads"), report.line("sim: no fault, plain gets")
    assert reliable.status == FAIL and "INVALID" in reliable.reason.upper() and "duplicat" in reliable.reason
    assert plain.status == PASS  # plain gets never ack


def test_a_planted_duplicate_fails_the_fault_matrix_line():
    with plant("ideal-ack-redelivers"):
        report = conform("ideal", only=["fault-matrix"], **QUIET)
    line = report.line("sim: promises honest over a short fault matrix")
    assert line.status == FAIL and "INVALID" in line.reason


def test_a_mutant_the_hunt_cannot_catch_fails_its_line(tmp_path):
    mutants = """
from lab.design import Mutant, Patch
from toyq.driver import ToyBackend

MUTANTS = [Mutant("toyq-harmless", "toyq", "no loss", "changes nothing",
                  (Patch(ToyBackend, "summary", ToyBackend.summary),))]
"""
    with installed(_toy(tmp_path, files={"toyq/mutants.py": mutants})):
        report = conform("toyq", only=["mutants"], **QUIET)
    line = report.line("mutants: toyq-harmless caught")
    assert line.status == FAIL and "NOT CAUGHT" in line.reason
    assert report.line("mutants: no false alarm").status == PASS


def test_an_unknown_check_is_a_usage_error():
    result = subprocess.run([sys.executable, "-m", "lab.cli", "conform", "ideal", "--only", "nonsense"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "no check nonsense" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("design", ["ideal", "kestrel", "queuefka", "cassieq", "primer"])
def test_every_built_in_design_conforms(design):
    result = subprocess.run([sys.executable, "-m", "lab.cli", "conform", design], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    checklist = [line for line in result.stdout.splitlines() if line.startswith((PASS, FAIL, SKIP))]
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert checklist and all(line.startswith((PASS, SKIP)) for line in checklist)
    assert any(line.startswith(f"{PASS}  sim: promises honest") for line in checklist)
