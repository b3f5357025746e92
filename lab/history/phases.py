"""Faults in the history, and the phases derived from them.

Each fault's start and heal is one sample row (``lab.history.record`` schema): ``op = "fault"``,
``client = "nemesis"``, ``node`` the nodes it hits (comma-separated), ``outcome = "info"``
(as Jepsen's nemesis operations), ``latency_ns = 0``, and in ``error`` one line:

    start faults[1] partition: s1 s0 | s4 s3 s2
    heal faults[1] partition: s1 s0 | s4 s3 s2

The phase of every row is a function of those rows and two instants of the run: before
the warm-up ends, ``warmup``; from the start of the drain, ``drain``; otherwise ``fault``
while at least one fault has started and not healed, ``heal`` once one has healed and none
is in force, ``steady`` before any fault. ``phases_of`` is that function; the runner sets
the phase column with it, and the checker or the Spark pipeline can read the fault rows
with ``fault_events`` / ``fault_kinds``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lab.history.record import FAULT_OP

NEMESIS = "nemesis"  # the client column of fault rows
START, HEAL = "start", "heal"
_TEXT = re.compile(r"^(start|heal) faults\[(\d+)\] (\S+)(?:: (.*))?$")


def fault_text(event: str, number: int, kind: str, detail: str) -> str:
    """The ``error`` column of a fault row."""
    return f"{event} faults[{number}] {kind}: {detail}"


@dataclass(frozen=True)
class FaultEvent:
    """One fault row, read back."""

    t_ns: int
    event: str  # "start" or "heal"
    number: int  # the entry's index in the workload's fault schedule
    kind: str
    nodes: tuple[str, ...]
    detail: str


def fault_rows(samples: pa.Table) -> pa.Table:
    return samples.filter(pc.equal(samples.column("op"), FAULT_OP))


def fault_events(samples: pa.Table) -> list[FaultEvent]:
    """The fault rows of ``samples``, in time order (starts before heals at one instant)."""
    events = []
    rows = fault_rows(samples)
    for t, node, text in zip(rows.column("t_start_ns").to_pylist(), rows.column("node").to_pylist(),
                             rows.column("error").to_pylist()):
        match = _TEXT.match(text or "")
        if match is None:
            raise ValueError(f"a fault row's error column is not 'start|heal faults[N] kind: ...': {text!r}")
        event, number, kind, detail = match.groups()
        events.append(FaultEvent(t, event, int(number), kind, tuple(filter(None, (node or "").split(","))),
                                 detail or ""))
    return sorted(events, key=lambda e: (e.t_ns, e.event != START, e.number))


def fault_kinds(samples: pa.Table) -> frozenset[str]:
    """The kinds of fault that started in a run (what the verdict judges loss under)."""
    return frozenset(e.kind for e in fault_events(samples) if e.event == START)


def phases_of(samples: pa.Table, warmup_end_ns: int, drain_start_ns: int | None) -> pa.Array:
    """The phase of every row of ``samples`` at its ``t_start_ns`` (rules in the module doc)."""
    t = samples.column("t_start_ns").to_numpy(zero_copy_only=False)
    return phases_at(t, fault_events(samples), warmup_end_ns, drain_start_ns)


def phases_at(t_start_ns: np.ndarray, events: list[FaultEvent], warmup_end_ns: int,
              drain_start_ns: int | None) -> pa.Array:
    """The phase at each of the instants ``t_start_ns``, given a run's fault ``events`` (all
    of them: a run's samples may be phased a batch at a time)."""
    starts = np.array([e.t_ns for e in events if e.event == START], dtype=np.int64)
    heals = np.array([e.t_ns for e in events if e.event == HEAL], dtype=np.int64)
    t = np.asarray(t_start_ns).astype(np.int64, copy=False)
    healed = np.searchsorted(heals, t, side="right")
    active = np.searchsorted(starts, t, side="right") - healed
    codes = np.where(active > 0, 2, np.where(healed > 0, 3, 1)).astype(np.int8)
    codes[t < warmup_end_ns] = 0
    if drain_start_ns is not None:
        codes[t >= drain_start_ns] = 4
    return pa.DictionaryArray.from_arrays(codes, _PHASE_NAMES).cast(pa.string())


_PHASE_NAMES = pa.array(["warmup", "steady", "fault", "heal", "drain"])


def with_phases(samples: pa.Table, warmup_end_ns: int, drain_start_ns: int | None) -> pa.Table:
    """``samples`` with its phase column set by ``phases_of``."""
    index = samples.schema.get_field_index("phase")
    return samples.set_column(index, "phase", phases_of(samples, warmup_end_ns, drain_start_ns))
