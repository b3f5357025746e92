"""Liveness after a fault: how long after the last heal every message acknowledged before
it was delivered (Jepsen's "recovery" question, per run, from its samples alone).

A message counts if its put was acknowledged (outcome ok) by the time the last fault
healed; it is delivered by its first ok get. The time to recover is the latest first
delivery among those messages, less the heal (0 when all of them were delivered before
it). A message that counts and was never delivered makes the run unrecovered: its time
is None, and ``undelivered`` says how many.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lab.history.phases import HEAL, fault_events
from lab.history.record import ok_ops


@dataclass(frozen=True)
class Recovery:
    heal_ns: int | None  # the last heal (None: the run had no fault that healed)
    seconds: float | None  # None: no heal, or something acknowledged before it was never delivered
    undelivered: int = 0

    def within(self, budget: float | None) -> bool | None:
        """Whether the run recovered within ``budget`` seconds (None: no budget or no heal)."""
        if budget is None or self.heal_ns is None:
            return None
        return self.seconds is not None and self.seconds <= budget


def time_to_recover(samples: pa.Table) -> Recovery:
    heals = [e.t_ns for e in fault_events(samples) if e.event == HEAL]
    if not heals:
        return Recovery(None, None)
    heal = max(heals)
    puts = ok_ops(samples, "put")
    acked = pc.add(puts.column("t_start_ns"), puts.column("latency_ns"))
    before = set(puts.filter(pc.less_equal(acked, heal)).column("msg_id").to_pylist())
    before.discard(None)
    if not before:
        return Recovery(heal, 0.0)
    gets = ok_ops(samples, "get")
    gets = gets.filter(pc.is_in(gets.column("msg_id"), value_set=pa.array(sorted(before), pa.string())))
    done = pc.add(gets.column("t_start_ns"), gets.column("latency_ns")).to_numpy(zero_copy_only=False)
    ids = np.asarray(gets.column("msg_id").to_pylist(), dtype=object)
    first: dict[str, int] = {}
    for msg_id, t in zip(ids[np.argsort(done, kind="stable")].tolist(), np.sort(done, kind="stable").tolist()):
        first.setdefault(msg_id, t)
    undelivered = len(before) - len(first)
    if undelivered:
        return Recovery(heal, None, undelivered)
    return Recovery(heal, max(0, max(first.values()) - heal) / 1e9)
