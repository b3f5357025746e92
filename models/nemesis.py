"""The nemesis: applies a workload's fault schedule to a simulated world, then heals it.

Each fault is a small task on the control node: sleep until ``at``, break something,
sleep ``duration``, mend it. Faults compose (two overlapping partitions each remove
only the links they cut). ``heal_all`` mends whatever is still broken, which the
runner calls before it drains the queues — Jepsen's final heal before the drain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from lab.runtime import Runtime
from lab.workload import FaultSpec, WorkloadError

if TYPE_CHECKING:
    from models.world import SimWorld


class Nemesis:
    def __init__(self, world: "SimWorld", servers: list[str], clients: list[str]):
        self.world = world
        self.servers = servers
        self.clients = clients
        self.active: dict[int, Callable[[], None]] = {}  # fault number -> its heal
        self.healed = 0
        self.started: set[int] = set()  # fault numbers that were applied
        self._tasks = []

    def resolve(self, fault: FaultSpec, rt: Runtime) -> list[str]:
        nodes: list[str] = []
        for target in fault.target:
            if target == "servers":
                nodes += self.servers
            elif target == "server":
                nodes.append(rt.random.choice(self.servers))
            elif target == "clients":
                nodes += self.clients
            elif target in self.world.nodes:
                nodes.append(target)
            else:
                known = ", ".join(["servers", "server", "clients", *sorted(self.world.nodes)])
                raise WorkloadError(f"fault target {target!r} is not a node of this run (known: {known})")
        return list(dict.fromkeys(nodes))

    def start(self, rt: Runtime, faults: tuple[FaultSpec, ...]) -> None:
        for number, fault in enumerate(faults):
            nodes = self.resolve(fault, rt)  # resolve now: a bad target fails the run at once
            self._tasks.append(rt.spawn(self._run(rt, number, fault, nodes), name=f"fault {number}"))

    async def _run(self, rt: Runtime, number: int, fault: FaultSpec, nodes: list[str]) -> None:
        await rt.sleep(fault.at)
        self.started.add(number)
        self.active[number] = self._apply(fault, nodes)
        await rt.sleep(fault.duration)
        self._heal(number)

    def _heal(self, number: int) -> None:
        heal = self.active.pop(number, None)
        if heal is not None:
            heal()
            self.healed += 1

    def heal_all(self) -> None:
        for task in self._tasks:
            task.cancel()
        for number in list(self.active):
            self._heal(number)

    @property
    def faulted(self) -> bool:
        return bool(self.active)

    def _apply(self, fault: FaultSpec, nodes: list[str]) -> Callable[[], None]:
        world, net = self.world, self.world.net
        if fault.fault == "pause":
            for node in nodes:
                world.pause(node)
            return lambda: [world.resume(node) for node in nodes]
        if fault.fault == "crash":
            for node in nodes:
                world.crash(node, tear=fault.tear)
            return lambda: [world.restart(node) for node in nodes if not world.nodes[node].up]
        if fault.fault == "partition":
            links = []
            others = [n for n in world.nodes if n not in nodes]
            for node in nodes:
                for other in others:
                    if fault.mode in ("isolate", "one-way-in"):
                        links.append((other, node))
                    if fault.mode in ("isolate", "one-way-out"):
                        links.append((node, other))
            for link in links:
                net.block(*link)
            return lambda: [net.unblock(*link) for link in links]
        if fault.fault == "disk-delay":
            extra = round(fault.ms * 1_000_000)
            for node in nodes:
                world.nodes[node].disk.extra_delay_ns += extra

            def heal_disks() -> None:
                for node in nodes:
                    world.nodes[node].disk.extra_delay_ns -= extra

            return heal_disks
        if fault.fault == "loss":
            for node in nodes:
                net.lossy[node] = fault.p
            return lambda: [net.lossy.pop(node, None) for node in nodes]
        raise ValueError(f"unknown fault {fault.fault!r}")
