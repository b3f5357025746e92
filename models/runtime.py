"""The Runtime port of one simulated node incarnation: its clock, tasks, disk, network and CPU.

Design cores are ``async def`` code. Here each awaitable a core receives yields a SimPy
event, and a driver (``models.driver.Drive``) sends the event's value back into the
coroutine — so the same core that serves real TCP in the live world runs in simulated
time. The driver is also where a node's stop-the-world pause lives: after any event
fires, no coroutine of a paused node resumes until the pause ends, while messages to the
node keep queueing (they are delivered, and wait at the gate). A crash (``kill``) stops
every coroutine of the incarnation where it is.

The runtime reads the world and the node it belongs to through the small protocols below
(``Machine``, ``NodeState``), which ``models.world`` fills in.
"""

from __future__ import annotations

import random
from typing import Awaitable, Coroutine, Protocol, TypeVar, cast

import simpy
from simpy.events import Event as SimPyEvent

from lab.design.runtime import Event, NodeDown
from lab.design.service import ServiceModel
from lab.worlds.shared import as_coroutine, node_random
from models.awaitables import NS, Await, to_ns
from models.cpu import Cores, NodeCpu
from models.disk import SimDisk, SimDiskStore
from models.network import SimNetPort, SimNetwork
from models.driver import Drive
from models.tasks import CRASH, Deadlines, SimEvent, SimTask

T = TypeVar("T")


class Machine(Protocol):
    """What a runtime reads of its world (``models.world.SimWorld``)."""

    seed: int  # every random source of a node incarnation is drawn from it
    env: simpy.Environment
    net: SimNetwork
    deadlines: Deadlines
    host_cores: Cores | None  # the one machine's cores (latency: calibrated)


class NodeState(Protocol):
    """What a runtime reads of its node across incarnations (``models.world.SimNode``)."""

    name: str
    incarnation: int
    disk: SimDiskStore
    paused: bool  # the pause gate: no process resumes while it is set ...
    resumed: SimPyEvent | None  # ... until this fires
    service: ServiceModel | None  # the CPU's service times (None: no CPU model)
    cores: int
    late_writes: list[tuple[float, float, float]]  # (late_p, late_s, ghost_p) of the late-writes faults in force


class SimRuntime:
    """The Runtime port of one incarnation of a simulated node."""

    def __init__(self, world: Machine, node: NodeState):
        self.world = world
        self.env = world.env
        self.state = node
        self.node = node.name
        self.incarnation = node.incarnation
        self.random = node_random(world.seed, node.name, node.incarnation)
        self.disk = SimDisk(node.disk, self)
        self.net = SimNetPort(world.net, self)
        self.cpu = self.new_cpu()
        self.alive = True
        self.processes: dict[Drive, None] = {}  # its live coroutines, insertion-ordered: deterministic

    def new_cpu(self) -> NodeCpu | None:
        node = self.state
        if node.service is None:
            return None
        rng = random.Random(f"{self.world.seed}:cpu:{node.name}:{node.incarnation}")
        return NodeCpu(self.env, node.cores, node.service, rng, self.world.host_cores)

    # clock
    def now(self) -> float:
        return self.env.now / NS

    def now_ns(self) -> int:
        return cast(int, self.env.now)  # SimPy types its clock int | float; the sim world's is integer ns

    def sleep(self, seconds: float) -> Await:
        return Await(self.env.timeout(to_ns(seconds)))

    # tasks and events
    def spawn(self, coro: Awaitable[T], name: str = "") -> SimTask:
        coro = as_coroutine(coro)
        if not self.alive:
            coro.close()
            raise NodeDown(f"{self.node} has crashed; it cannot spawn {name or 'a task'}")
        return SimTask(Drive(self, coro))

    def event(self) -> SimEvent:
        return SimEvent(self.env)

    async def wait(self, event: Event, timeout: float | None) -> bool:
        if event.is_set():
            return True
        if timeout is None:
            await event.wait()
            return True
        # a core waits on the events its runtime made (``event()``): here, SimEvents; the
        # Runtime port does not tie its events' type to the runtime's
        return await Await(self.first_of(cast(SimEvent, event)._event, to_ns(timeout)))

    def first_of(self, event: SimPyEvent, timeout_ns: int) -> SimPyEvent:
        """An event that succeeds with True when ``event`` fires, or False at the timeout.

        Cheaper than SimPy's AnyOf condition, and the loser is simply ignored; the timeout
        is a deadline (``Deadlines``), not an event of its own.
        """
        done = self.env.event()

        def fired(_: SimPyEvent) -> None:
            if not done.triggered:
                done.succeed(True)

        event.callbacks.append(fired)
        self.world.deadlines.add(timeout_ns, done, False)
        return done

    def start(self, coro: Coroutine, name: str = "") -> SimTask | None:
        """Run ``coro`` at once, up to its first wait, inside the caller (a message's arrival):
        None if it finished without waiting, else the task that drives the rest (as
        ``spawn``'s). Most requests a server answers never wait, and so cost no process."""
        if self.state.paused or not self.alive:
            return self.spawn(coro, name)
        try:
            event = coro.send(None)
        except StopIteration:
            return None
        return SimTask(Drive(self, coro, event))

    def kill(self) -> None:
        """Crash this incarnation: every process stops where it is."""
        self.alive = False
        for process in list(self.processes):
            if process.is_alive:
                process.interrupt(CRASH)
        self.processes.clear()
