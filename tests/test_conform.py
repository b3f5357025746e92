"""`lab conform`: each kind of failure is caught and names its line (fixture designs installed
as plug-ins, and the lab's own planted bugs); and, slow, every built-in design conforms
through the command line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

import pytest

from lab.experiments.conform import FAIL, PASS, SKIP, assert_conforms, conform
from lab.experiments.conform.report import Report
from lab.experiments.planting import plant

from tests.own_processes import own_processes
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


_CLIENT = "    def client(self, rt, reliable):\n        return _Bad(rt, self.server_nodes[0], reliable, self.options['timeout'])\n"
#: clients that break the Runtime's error contract, each in one way, and what the line must say
BAD_CLIENTS = {
    "swallows": ("""
    class _Bad(IdealClient):
        async def put(self, queue, body):
            try:
                await super().put(queue, body)
            except Exception:
                pass  # the bug: an error becomes an acknowledgement
    """, "crash: the put was acknowledged with no server to take it"),
    "raw-oserror": ("""
    class _Bad(IdealClient):
        async def put(self, queue, body):
            try:
                await super().put(queue, body)
            except TimeoutError as e:
                raise ConnectionResetError(str(e)) from None  # the bug: one world's own error
    """, "crash: raised ConnectionResetError"),
    "says-failed": ("""
    from lab.design import Unreachable

    class _Bad(IdealClient):
        async def put(self, queue, body):
            try:
                await super().put(queue, body)
            except TimeoutError as e:
                raise Unreachable(str(e)) from None  # the bug: a put that may have happened, called failed
    """, "crash: raised Unreachable"),
    "gives-up": ("""
    class _Bad(IdealClient):
        broken = False

        async def put(self, queue, body):
            if self.broken:
                raise ConnectionError("this client stopped after its first error")  # the bug: no reconnect
            try:
                await super().put(queue, body)
            except TimeoutError:
                self.broken = True
                raise
    """, "crash: once it cleared, the same client could not put again"),
}


@pytest.mark.parametrize("bug", sorted(BAD_CLIENTS))
def test_a_client_that_breaks_the_error_contract_fails_the_errors_line(tmp_path, bug):
    extra, words = BAD_CLIENTS[bug]
    with installed(_toy(tmp_path, extra=extra, body=_CLIENT)):
        report = conform("toyq", only=["errors"], **QUIET)
    line = report.line("sim: the client's errors")
    assert line.status == FAIL and words in line.reason, line.text()


def test_the_controls_client_meets_the_error_contract():
    line = conform("ideal", only=["errors"], **QUIET).line("sim: the client's errors")
    assert line.status == PASS and "crash: info CallTimeout" in line.reason, line.text()


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
                  (Patch(ToyBackend, "about", ToyBackend.about),))]
"""
    with installed(_toy(tmp_path, files={"toyq/mutants.py": mutants}, extra="from lab.design import Parts",
                        body='    parts = Parts(mutants="toyq.mutants")\n')):
        report = conform("toyq", only=["mutants"], **QUIET)
    line = report.line("mutants: toyq-harmless caught")
    assert line.status == FAIL and "NOT CAUGHT" in line.reason
    assert report.line("mutants: no false alarm").status == PASS


TOY_HARMLESS = """
from lab.design import Mutant, Patch
from toyq.driver import ToyBackend

MUTANTS = [Mutant("toyq-harmless", "toyq", "no loss", "changes nothing",
                  (Patch(ToyBackend, "about", ToyBackend.about),))]
"""


def test_a_seed_budget_sets_each_mutants_runs_and_a_miss_names_them(tmp_path):
    with installed(_toy(tmp_path, files={"toyq/mutants.py": TOY_HARMLESS}, extra="from lab.design import Parts",
                        body='    parts = Parts(mutants="toyq.mutants")\n')):
        report = conform("toyq", only=["mutants"], seeds=3, **QUIET)
    line = report.line("mutants: toyq-harmless caught")
    # no scenarios of its own: the swarm's base load once with no fault, then swarm seeds 1..3
    assert line.status == FAIL
    assert "NOT CAUGHT in 4 runs (base seed 1; swarm seeds 1-3; folders: " in line.reason
    assert "toyq-harmless" in line.reason.split("folders: ")[1]
    alarms = report.line("mutants: no false alarm")
    assert alarms.status == PASS and alarms.reason.startswith("4 control run(s), folders: ")


def test_a_seed_budget_sets_the_fault_matrix_seeds(tmp_path):
    report = conform("ideal", only=["fault-matrix"], seeds=2, keep=True, **QUIET)
    line = report.line("sim: promises honest over a short fault matrix")
    assert line.status == PASS and "seeds 1, 2 of " in line.reason
    folder = Path(line.reason.split("folders: ")[1].split(";")[0])
    assert folder.is_dir() and {p.name for p in folder.glob("*/*/seed-*")} == {"seed-1", "seed-2"}
    import shutil
    shutil.rmtree(folder.parent)


def test_a_seed_budget_below_one_is_refused():
    with pytest.raises(ValueError, match="seeds=0"):
        conform("ideal", only=["mutants"], seeds=0, **QUIET)


# -- the live server checks, on scaffolds with one fault planted ---------------------------------
# Each fixture is the package `lab new design` writes, with one file changed; `lab serve NAME` runs
# in a child process, which sees the plug-in through PYTHONPATH (the live world passes its own
# environment on to the servers it starts).

REFUSAL_HOOK = """

class _Planted(HttpServerConnection):
    \"\"\"The planted fault: what the connection does on bytes that are not HTTP.\"\"\"

    def __init__(self, queues: Queues, **kwargs):
        super().__init__(**kwargs)
        self.queues = queues

    def next_request(self):
        request = super().next_request()
        if type(request).__name__ == "_Refusal":
{fault}
        return request
"""
ACCEPT = "    return lambda: HttpServerConnection(router, max_body=MAX_BODY, header_timeout=header_timeout)\n"
PLANTED_ACCEPT = ("    return lambda: _Planted(queues, router=router, max_body=MAX_BODY, "
                  "header_timeout=header_timeout)\n")


def _scaffold(tmp_path: Path, name: str, plant_in: str, change: Callable[[str], str]) -> Path:
    """`lab new design NAME` into ``tmp_path``, ``change`` applied to its file ``plant_in``
    (relative to the package); the folder to install (it holds the package)."""
    from lab.cli.new import class_name, write_design

    folder = write_design(name, tmp_path)
    path = folder / name / plant_in
    text = path.read_text()
    planted = change(text)
    assert planted != text, f"the scaffold's {plant_in} no longer has what the fault is planted in"
    return write_distribution(folder, name, "0.1", {name: f"{name}.driver:{class_name(name)}Backend"},
                              {f"{name}/{plant_in}": planted})


def _wire_fault(fault: str) -> Callable[[str], str]:
    """Plant ``fault`` (indented code, ``self.queues`` in reach) where the wire refuses bad bytes."""
    def change(text: str) -> str:
        assert ACCEPT in text
        return text.replace(ACCEPT, PLANTED_ACCEPT) + REFUSAL_HOOK.format(fault=textwrap.indent(fault, " " * 12))
    return change


def _servers_left(name: str) -> list[str]:
    """The command lines of every `lab serve NAME` process this test started still running."""
    return [f"{pid}: {b' '.join(argv).decode(errors='replace')}"
            for pid, argv in own_processes(lambda argv: b"serve" in argv and name.encode() in argv).items()]


def _server_checks(root: Path, name: str, monkeypatch) -> Report:
    with installed(root) as env:
        monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])  # for the `lab serve NAME` children
        try:
            return conform(name, only=["server"], **QUIET)
        finally:
            assert not _servers_left(name), _servers_left(name)


def test_a_server_that_exits_on_malformed_bytes_fails_the_burst_line(tmp_path, monkeypatch):
    root = _scaffold(tmp_path, "toy_exits", "wire/http.py", _wire_fault("import os\nos._exit(3)"))
    report = _server_checks(root, "toy_exits", monkeypatch)
    assert report.line("live server: starts").status == PASS
    burst = report.line("live server: survives malformed bytes")
    assert burst.status == FAIL and "died after malformed bytes" in burst.reason and "exit 3" in burst.reason
    # restarted for them, it stops on each signal: only the burst's line fails
    assert [line.status for line in report.lines if line.check.startswith("live server: stops")] == [PASS, PASS]
    assert report.exit_code == 1


def test_a_server_that_forgets_acknowledged_messages_after_malformed_bytes_fails_the_burst_line(
        tmp_path, monkeypatch):
    root = _scaffold(tmp_path, "toy_forgets", "wire/http.py", _wire_fault("self.queues.queues.clear()"))
    report = _server_checks(root, "toy_forgets", monkeypatch)
    burst = report.line("live server: survives malformed bytes")
    assert burst.status == FAIL and "alive, but 40 of 40 acknowledged messages are gone" in burst.reason
    assert report.exit_code == 1


def test_a_server_deaf_to_sigterm_and_sigint_fails_both_lines_and_is_killed(tmp_path, monkeypatch):
    handler = "on_signals(asyncio.get_running_loop(), stop.set)"
    deaf = "[asyncio.get_running_loop().add_signal_handler(s, lambda: None) for s in (2, 15)]  # planted: deaf"
    root = _scaffold(tmp_path, "toy_deaf", "serve.py", lambda text: text.replace(handler, deaf))
    report = _server_checks(root, "toy_deaf", monkeypatch)  # no `lab serve toy_deaf` left: asserted there
    assert report.line("live server: survives malformed bytes").status == PASS
    for check in ("live server: stops on SIGTERM", "live server: stops on SIGINT"):
        line = report.line(check)
        assert line.status == FAIL and "not stopped within 5 s (killed)" in line.reason
    assert report.exit_code == 1


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
