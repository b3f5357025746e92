"""What the real brokers' tests share: the broker processes and the power-loss mounts on the
machine (to see that a run leaves none behind), and a shortened live run of a standard
workload or scenario against a peer."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from lab.experiments.runner import RunResult, run
from lab.workloads.spec import load_workload


def processes(binary: bytes) -> set[int]:
    """Every process on the machine whose command is ``binary`` (its path's last part)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:  # gone meanwhile
                continue
            if argv and argv[0].rsplit(b"/", 1)[-1] == binary:
                pids.add(int(entry.name))
    return pids


def mounts(node: str) -> set[str]:
    """Mount points of a node's data dir (the power-loss file system) on the machine."""
    return {line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
            if f"/{node}/data" in line.split()[1]}


def live(peer: str, workload: str, tmp_path: Path, duration: float | None = None, **options: Any) -> RunResult:
    """``workload`` (a name) against ``peer`` in the live world, with ``options``."""
    w = load_workload(workload)
    if duration is not None:
        w = dataclasses.replace(w, duration=duration)
    return run(w, peer, "live", out=tmp_path / workload, progress=False, options=options)
