"""Conformance, what every check is given: the design under test (its name and Backend
class), the temporary folder its runs go in, how many runs at a time, and where to say
progress; and the short workloads the checks run."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lab.design.backend import Backend

#: a short no-fault load: long enough for every operation to happen many times, short enough
#: to run a dozen times within the suite's budget
SHORT: dict[str, Any] = {"name": "conform", "queues": 2, "producers": 2, "consumers": 2, "message_size": 100,
                         "rate": 400, "duration": 1.0, "warmup": 0.2, "seed": 7}


def short_load(reliable: bool, **changes: Any) -> dict[str, Any]:
    """``SHORT`` with reliable reads (get, then ack) or plain gets, and ``changes``."""
    return {**SHORT, "ack": "reliable" if reliable else "auto", **changes}


def reads(reliable: bool) -> str:
    return "reliable reads" if reliable else "plain gets"


@dataclass
class Target:
    name: str
    cls: type[Backend]
    folder: Path  # temporary: removed when the suite ends
    jobs: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    echo: Callable[[str], None] = print
    #: `--seeds N`: seeds per mutant run kind and per fault line (None: each check's own default)
    seeds: int | None = None

    def seeds_or(self, default: int) -> int:
        """The seed budget asked for, else the check's own ``default``."""
        return default if self.seeds is None else self.seeds

    def out(self, *parts: str) -> Path:
        """A fresh path under the suite's folder for one run or experiment (not created)."""
        path = self.folder.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def option_sets(self) -> list[dict[str, Any]]:
        """The option sets that change what the design promises (its ``promised.option_sets``)."""
        return [dict(s) for s in self.cls.promised.option_sets] or [{}]


def label(options: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in options.items()) or "defaults"


def seed_list(seeds: list[int]) -> str:
    """Seeds as people read them: ``1``, ``1, 2`` or ``1-10``."""
    ordered = sorted(set(seeds))
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ", ".join(map(str, ordered))
