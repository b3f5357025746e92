"""Conformance, the running order: each check in turn on one design, into a temporary folder
removed afterwards, a progress line as each starts and ends, and the report. A check that
raises is a FAIL naming the exception (the suite goes on); Ctrl-C and SIGTERM stop it
(``KeyboardInterrupt`` passes through, the folder is removed on the way)."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from lab.experiments.conform import errors, live, mutants, sim, static
from lab.experiments.conform.report import FAIL, PASS, Line, Report
from lab.experiments.conform.target import Target


@dataclass(frozen=True)
class Check:
    name: str  # what --only takes
    run: Callable[[Target], list[Line]]
    quick: bool  # part of --quick


def _purity(target: Target) -> list[Line]:
    from lab.design.registry import backend_class, registration

    check = "static: core/ and wire/ reach no clock, random, disk or network but through the Runtime"
    # the folder of the module the Backend came from, not a search by name: run from the folder
    # that holds the project, `python -m` would find the project folder as a namespace package
    backend = sys.modules[backend_class(target.name).__module__]
    assert backend.__file__ is not None  # a Backend's module is a file, not a namespace package
    files, chains = static.purity(registration(target.name).package, Path(backend.__file__).parent)
    if not files:
        return [Line(check, FAIL, "the design has no core/ (or core.py) to hold to the rule")]
    if chains:
        return [Line(check, FAIL, "; ".join(chains))]
    return [Line(check, PASS, f"{len(files)} module(s) walked")]


CHECKS: tuple[Check, ...] = (
    Check("purity", _purity, True),
    Check("determinism", sim.determinism, True),
    Check("no-fault-sim", sim.no_fault, True),
    Check("options", sim.options, True),
    Check("errors", errors.client_errors, True),
    Check("no-fault-live", live.live_no_fault, True),
    Check("server", live.server, True),
    Check("fault-matrix", sim.fault_matrix, False),
    Check("swarm", sim.swarm, False),
    Check("mutants", mutants.mutants, False),
)
QUICK = tuple(c.name for c in CHECKS if c.quick)


def conform(name: str, quick: bool = False, only: Iterable[str] | None = None, jobs: int | None = None,
            echo: Callable[[str], None] = print, seeds: int | None = None, keep: bool = False) -> Report:
    """Run the checks on design ``name`` (``quick``: the static, determinism, no-fault and
    server checks only; ``only``: those checks by name; ``seeds``: the seed budget of the
    mutant, fault-matrix and swarm lines, None for their own; ``keep``: leave the runs'
    folder, named in the report, instead of removing it) and return the checklist.
    UnknownBackend for a design that is not installed, or a real broker (it has no core to
    hold to the two worlds: ``tests/test_peer_*.py`` check the brokers); ValueError for an
    unknown check."""
    from lab.design.registry import UnknownBackend, backend_class, is_peer

    cls = backend_class(name)
    if is_peer(name):
        raise UnknownBackend(f"{name} is a real broker, not a design: lab conform holds a design's core to both "
                             f"worlds; run a broker with lab run --world live, lab brokers or lab matrix --world live")
    if seeds is not None and seeds < 1:
        raise ValueError(f"seeds={seeds}: use 1 or more")
    chosen = _chosen(quick, only)
    report = Report(name, quick=quick)
    started = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix=f"lab-conform-{name}-"))
    target = Target(name, cls, folder, echo=echo, seeds=seeds, **({"jobs": jobs} if jobs else {}))
    try:
        for number, check in enumerate(chosen, 1):
            echo(f"[{number}/{len(chosen)}] {check.name} ...")
            began = time.monotonic()
            try:
                lines = check.run(target)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 (a check that raises is a finding, and the suite goes on)
                lines = [Line(check.name, FAIL, f"raised {type(e).__name__}: {e}".splitlines()[0])]
            seconds = time.monotonic() - began
            lines = [Line(line.check, line.status, line.reason, seconds) for line in lines]
            report.lines += lines
            for line in lines:
                echo(f"    {line.text()}")
            echo(f"[{number}/{len(chosen)}] {check.name}: {_worst(lines)} in {seconds:.1f} s")
    finally:
        if keep:
            echo(f"runs kept in {folder}")
        else:  # the lines name the runs' folders: say they are gone
            shutil.rmtree(folder, ignore_errors=True)
            echo(f"runs' folder {folder} removed (keep it: --keep)")
        report.seconds = time.monotonic() - started
    return report


def assert_conforms(name: str, **kwargs) -> Report:
    """``conform(name, **kwargs)``, for pytest: AssertionError listing the failing lines."""
    report = conform(name, **kwargs)
    if report.failures:
        raise AssertionError(f"{name} does not conform:\n" + "\n".join(line.text() for line in report.failures))
    return report


def _chosen(quick: bool, only: Iterable[str] | None) -> list[Check]:
    if only is not None:
        names = list(only)
        unknown = [n for n in names if n not in {c.name for c in CHECKS}]
        if unknown:
            raise ValueError(f"no check {', '.join(unknown)} (there are: {', '.join(c.name for c in CHECKS)})")
        return [c for c in CHECKS if c.name in names]
    return [c for c in CHECKS if c.quick or not quick]


def _worst(lines: list[Line]) -> str:
    statuses = {line.status for line in lines}
    return FAIL if FAIL in statuses else PASS if PASS in statuses else next(iter(statuses), PASS)
