"""The nemesis: drives a workload's fault schedule on any world, and writes each fault's
start and heal into the history.

Each fault is a small task on the control node: sleep until ``at``, start it (the kind's
class in ``lab.workloads.faults`` breaks the world), sleep ``duration``, heal it. Where each fault
falls (its nodes, its links) is placed when the nemesis is made, from the run's seed and
the fault's number, so a bad target fails the run before any load. So is when a fault
whose ``at`` is a range starts (``timed``): drawn from the seed and the fault's number,
in a stream of its own, so a seed strikes its own instant of the load — a load at a
constant rate repeats every few milliseconds, and a fixed time hits the same step of
every design's write path whatever the seed — and retargeting a fault does not move it.
``heal_all`` mends whatever is still broken; the runner calls it before it drains the
queues — Jepsen's final heal before the drain.
"""

from __future__ import annotations

import random
from typing import Sequence

from lab.workloads.fault_base import Cast, Fault, FaultWorld, FieldError, Heal, Placement
from lab.history.phases import HEAL, NEMESIS, START, fault_text
from lab.history.record import FAULT_OP, Recorder
from lab.design.runtime import Runtime
from lab.workloads.errors import WorkloadError


def timed(faults: Sequence[Fault], seed: int) -> tuple[Fault, ...]:
    """``faults`` as a run with ``seed`` strikes them: each one whose start is a range at a
    time drawn from it (``Fault.timed``), the others as they are, in the same order (a
    fault's number names it in the history)."""
    return tuple(fault.timed(random.Random(f"{seed}:fault:{number}:at")) for number, fault in enumerate(faults))


class Nemesis:
    def __init__(self, world: FaultWorld, cast: Cast, faults: Sequence[Fault], seed: int, recorder: Recorder,
                 source: str = "<workload>"):
        self.world = world
        self.faults = list(timed(faults, seed))  # a fixed time each (the runner's are fixed already)
        self.recorder = recorder
        self.placements: list[Placement] = []
        for number, fault in enumerate(self.faults):
            try:
                self.placements.append(fault.place(cast, random.Random(f"{seed}:fault:{number}")))
            except FieldError as e:
                raise WorkloadError(f"{source}: field 'faults[{number}].{e.field}': {e.problem}") from None
        self.active: dict[int, Heal] = {}  # fault number -> its heal
        self.started: set[int] = set()  # fault numbers that were applied
        self._tasks: list = []

    def start(self, rt: Runtime) -> None:
        for number, fault in enumerate(self.faults):
            self._tasks.append(rt.spawn(self._run(rt, number, fault), name=f"fault {number}"))

    async def _run(self, rt: Runtime, number: int, fault: Fault) -> None:
        await rt.sleep(fault.at)
        self.started.add(number)
        self.active[number] = fault.start(self.world, self.placements[number], rt)
        self._record(rt, START, number)
        await rt.sleep(fault.duration)
        self._heal(rt, number)

    def _heal(self, rt: Runtime, number: int) -> None:
        heal = self.active.pop(number, None)
        if heal is not None:
            heal()
            self._record(rt, HEAL, number)

    def heal_all(self, rt: Runtime) -> None:
        for task in self._tasks:
            task.cancel()
        for number in list(self.active):
            self._heal(rt, number)

    def _record(self, rt: Runtime, event: str, number: int) -> None:
        placement = self.placements[number]
        self.recorder.record(node=",".join(placement.nodes), client=NEMESIS, op=FAULT_OP, queue=None,
                             t_start_ns=rt.now_ns(), latency_ns=0, outcome="info",
                             error=fault_text(event, number, self.faults[number].kind, placement.detail))
