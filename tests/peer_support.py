"""What the real brokers' tests share: the broker processes and the power-loss mounts on the
machine (to see that a run leaves none behind), a shortened live run of a standard
workload or scenario against a peer, what a run that lost nothing looks like, and a port
taken between the world's pick and the broker's bind."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from pathlib import Path
from typing import Any, Iterator

import pytest

from lab.experiments.runner import RunResult, run
from lab.workloads.spec import load_workload
from tests.own_processes import own_mounts, own_processes


def processes(binary: bytes) -> set[int]:
    """The running test's processes whose command is ``binary`` (its path's last part)."""
    return set(own_processes(lambda argv: argv[0].rsplit(b"/", 1)[-1] == binary))


def mounts(node: str, under: Path) -> set[str]:
    """Mount points of a node's data dir (the power-loss file system) below ``under``."""
    return own_mounts(under, f"/{node}/data")


def live(peer: str, workload: str, tmp_path: Path, duration: float | None = None, **options: Any) -> RunResult:
    """``workload`` (a name) against ``peer`` in the live world, with ``options``."""
    w = load_workload(workload)
    if duration is not None:
        w = dataclasses.replace(w, duration=duration)
    return run(w, peer, "live", out=tmp_path / workload, progress=False, options=options)


def nothing_lost(result: RunResult, *why: str) -> None:
    """Assert that a run lost nothing acknowledged: VALID, or ALLOWED only for what a kill
    may do beside losing (a delivery that comes again, later than newer ones), where one of
    ``why`` (the allowances' reasons) says why."""
    verdict = result.check
    assert verdict.verdict in ("valid", "allowed"), verdict.line()
    assert verdict.counts.lost == 0, verdict.line()
    if verdict.verdict == "allowed":
        assert any(reason in verdict.line() for reason in why), verdict.line()


@contextlib.contextmanager
def first_pick_taken(monkeypatch: pytest.MonkeyPatch, name: str, listen: bool = False) -> Iterator[list[dict[str, int]]]:
    """The live world's first pick of a broker's ports gives port ``name`` one that another
    socket holds (bound, or listening with ``listen``), as a process that took it after the
    pick would; yields the picks, in order."""
    from lab.worlds.live import external

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    if listen:
        held.listen()
    picked = external.free_ports
    picks: list[dict[str, int]] = []

    def first_one_taken(names: tuple[str, ...]) -> dict[str, int]:
        ports = picked(names)
        if not picks:
            ports[name] = held.getsockname()[1]
        picks.append(dict(ports))
        return ports

    monkeypatch.setattr(external, "free_ports", first_one_taken)
    try:
        yield picks
    finally:
        held.close()
