"""The simulated world: its nodes on one SimPy clock, their starts, and the fault verbs.

A ``SimNode`` is what survives a crash (its disk, its pause state, its boot function); each
incarnation runs on a fresh ``SimRuntime`` (``models.runtime``, where the driver and its pause
gate live). ``SimWorld`` starts nodes and design servers, runs the control node's main, and
offers the fault verbs that ``lab.workloads.faults`` applies (pause, crash, destroy a disk,
restart, cut, lose, delay, late writes) as public methods.

Simulated time is integer nanoseconds since the Unix epoch, starting at ``SIM_EPOCH_NS``:
the live world's clock has the same origin, so a core (Kestrel's absolute expiry times,
for one) reads either clock the same way. Every random draw comes from the world's seed:
one stream per node incarnation, one for the network, one for the disks.

The world's parameters are ``models.config.SimConfig``; the network is in ``models.network``,
the disk in ``models.disk``.

``run_events`` copies SimPy's own loop, so pyproject.toml pins SimPy to the releases it was
checked against (4.1.0 to 4.1.2; tests/test_simpy_boundary.py).
"""

from __future__ import annotations

import random
from heapq import heappop
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import simpy
from simpy.core import URGENT, SimTime
from simpy.events import Event as SimPyEvent

from lab.design.runtime import Boot
from lab.design.world import ServerSpec, Targeted
from lab.design.service import ServiceModel
from models.awaitables import NS, to_ns
from models.config import SimConfig
from models.cpu import Cores, NodeCpu
from models.disk import DiskModel, SimDiskStore
from models.latency import LatencyModel
from models.network import SimNetwork
from models.runtime import SimRuntime
from models.tasks import CANCELLED, CRASHED, Deadlines

T = TypeVar("T")

#: The sim world's clock at its start: 2023-11-14 22:13:20 UTC, in ns since the epoch.
SIM_EPOCH_NS = 1_700_000_000 * NS


def run_events(env: simpy.Environment, until: SimPyEvent | None = None, at: SimTime | None = None) -> None:
    """``env.run(until)``'s loop, inlined: process events in SimPy's order (time, priority,
    id) until ``until`` has been processed, the clock would pass ``at``, or none is left.

    The same events run in the same order as under ``env.run``; the loop only saves
    ``step``'s call and attribute lookups per event, which at millions of events is a
    visible share of a run.
    """
    # Mirrors simpy.core.Environment.run and .step (SimPy 4.1.2): the heap entries are
    # (time, priority, eid, event), callbacks set to None marks an event processed, and a
    # failure nobody defused (_ok False, no _defused) crashes the run with a copy of it.
    queue = env._queue
    pop = heappop
    stop = [False]

    def stopped(_: SimPyEvent) -> None:
        # Where run's StopSimulation.callback raises; the rest of this event's callbacks run
        # now, as 4.1.2's step would run them first on a later run (4.1.0/4.1.1 dropped them).
        stop[0] = True

    if until is not None:
        if until.callbacks is None:  # processed already
            return
        until.callbacks.append(stopped)
    if at is not None:
        # env.run's own mark for a time limit (Environment.run, 4.1.2): an urgent event at
        # ``at``, before any other then; unlike run, ``at`` <= now is not refused
        mark = SimPyEvent(env)
        mark._ok, mark._value = True, None
        mark.callbacks.append(stopped)
        env.schedule(mark, URGENT, at - env._now)
    while queue and not stop[0]:
        env._now, _, _, event = pop(queue)
        # None marks the event processed, as SimPy's own step does; SimPy's stubs type callbacks a list
        callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
        for callback in callbacks:
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):  # a failed event nobody handled: as step()
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc
    if until is not None and not stop[0]:
        raise RuntimeError(f'No scheduled events left but "until" event was not triggered: {until}')


class SimNode:
    """What survives a crash: the name, the disk, the pause state and the boot function."""

    def __init__(self, world: SimWorld, name: str):
        self.world = world
        self.name = name
        self.disk = SimDiskStore(world.env, world.config.disk, world.disk_random)
        self.paused = False
        self.pauses = 0  # pauses in force: a node paused by two faults resumes after both
        self.resumed: SimPyEvent | None = None
        self.incarnation = 0
        self.up = True
        self.crashes = 0  # crashes in force: it restarts when the last one ends
        self.boot: Boot | None = None
        self.late_writes: list[tuple[float, float, float]] = []  # (late_p, late_s, ghost_p) of faults in force
        self.service: ServiceModel | None = None  # the CPU's service times (None: no CPU model)
        self.cores = 1
        self.runtime = SimRuntime(world, self)

    def install_cpu(self, service: ServiceModel, cores: int) -> None:
        """Give the node ``cores`` cores serving with ``service``, from this incarnation on."""
        self.service, self.cores = service, cores
        self.runtime.cpu = self.runtime.new_cpu()


class SimWorld:
    """Simulated nodes on one SimPy clock, with a simulated network and disks."""

    kind = "sim"

    def __init__(self, seed: int = 0, config: SimConfig | None = None):
        self.seed = seed
        self.config = config or SimConfig()
        self.env = simpy.Environment(initial_time=SIM_EPOCH_NS)
        self.deadlines = Deadlines(self.env)
        self.disk_random = random.Random(f"{seed}:disk")
        self.net = SimNetwork(self, random.Random(f"{seed}:net"), self.config)
        self.nodes: dict[str, SimNode] = {}
        self.server_names: set[str] = set()  # nodes started as a design's servers; the rest are clients
        self.client_cpu: NodeCpu | None = None  # the load generator's process (latency: calibrated)
        self.host_cores: Cores | None = None  # the one machine's cores (latency: calibrated)

    def node(self, name: str) -> SimRuntime:
        """The current incarnation of node ``name``, created on first use."""
        if name not in self.nodes:
            self.nodes[name] = SimNode(self, name)
        return self.nodes[name].runtime

    async def start(self, name: str, boot: Boot) -> SimRuntime:
        """Create node ``name`` and run its boot function (again at every restart)."""
        rt = self.node(name)
        self.nodes[name].boot = boot
        await rt.spawn(boot(rt), name=f"boot {name}")
        return rt

    async def start_server(self, server: ServerSpec) -> None:
        """A design's server node: its CPU (the config's service times: the run's calibration,
        resolved at the runner's door) and its boot, on a simulated node."""
        config, node = self.config, server.node
        service = config.service if config.cpu else None
        self.server_names.add(node)
        if config.latency_calibrated:
            if service is None or not service.network:
                raise ValueError(f"latency: calibrated needs a calibration with a network latency; "
                                 f"{server.design} has {'none' if service is None else 'none in ' + service.source}")
            self.net.latency = LatencyModel.from_spec(dict(service.network))
            if service.fsync and not config.fsync_given and self.host_cores is None:  # once: the machine's disk
                config.disk = DiskModel(fsync=LatencyModel.from_spec(dict(service.fsync)))
                for existing in self.nodes.values():
                    existing.disk.model = config.disk
            if self.host_cores is None:
                cpus = (service.measured.get("machine") or {}).get("cpus")
                self.host_cores = Cores(self.env, cpus if isinstance(cpus, int) and cpus > 0 else 1)
            if service.client is not None and self.client_cpu is None:
                self.client_cpu = NodeCpu(self.env, 1, ServiceModel.uniform(service.client, service.source),
                                          random.Random(f"{self.seed}:cpu:clients"), self.host_cores)
        if service is not None and server.cpu:
            self.node(node)
            self.nodes[node].install_cpu(service, config.cores or service.cores)
        await self.start(node, server.boot)

    async def stop_server(self, node: str) -> None:
        """Nothing to stop: the simulation ends with the run."""

    # ------------------------------------------------------------ what the runner asks (lab.design.world)

    @classmethod
    def refusal(cls, fault: Targeted) -> str | None:
        """None: the sim world applies every fault to any node, clients' included."""
        return None

    async def settle(self) -> None:
        """Nothing to wait for: a simulated restart is ready when its boot returns."""

    #: no restart outlasts anything here: a simulated node boots in no time of its own
    restarts: tuple[tuple[str, int, int | None], ...] = ()

    def keep_logs(self, folder: Path) -> None:
        """No server process, no log."""

    def recorded(self) -> dict[str, Any]:
        """The network's counts: messages delivered and dropped, by why."""
        return {"network": {"delivered": self.net.delivered, "dropped": dict(sorted(self.net.dropped.items()))}}

    def run(self, main: Callable[[SimRuntime], Awaitable[T]], until: float | None = None) -> T:
        """Run ``main`` on the control node until it returns; return its result."""
        control = self.node("control")
        task = control.spawn(main(control), name="main")
        run_events(self.env, task.process if until is None else None,
                   None if until is None else self.env.now + to_ns(until))
        if task.process.is_alive:
            raise TimeoutError(f"main did not finish within {until} simulated seconds")
        value = task.process.value
        if value is CANCELLED or value is CRASHED:
            raise RuntimeError("the main task was cancelled or its node crashed")
        return value

    # ------------------------------------------------------------ fault verbs
    # What lab.workloads.faults applies (the FaultWorld protocol). Every verb has its undo, and
    # undoing one of two overlapping faults leaves the other in force.

    def pause(self, name: str) -> None:
        """Stop the world on ``name``: none of its processes resume until ``resume``."""
        node = self.nodes[name]
        node.pauses += 1
        if not node.paused:
            node.paused = True
            node.resumed = self.env.event()

    def resume(self, name: str) -> None:
        """End one pause; the node runs again when no pause is left."""
        node = self.nodes[name]
        node.pauses = max(0, node.pauses - 1)
        if node.paused and node.pauses == 0:
            assert node.resumed is not None  # set with paused (pause)
            node.paused = False
            node.resumed.succeed()

    def crash(self, name: str, tear: bool = False) -> None:
        """Kill -9 ``name``: its processes stop, its memory is gone, unsynced bytes are lost.

        With ``tear``, a random prefix of each file's unsynced tail survives (a torn write).
        """
        if self.kill(name):
            self.nodes[name].disk.crash(tear)

    def kill(self, name: str) -> bool:
        """Kill -9 ``name`` and keep its machine up: its memory is gone, and what it wrote
        and did not fsync survives (the page cache), so the next incarnation reads it.
        Whether it was up (a node already down is only held down longer)."""
        node = self.nodes[name]
        node.crashes += 1
        if not node.up:
            return False
        node.up = False
        node.runtime.kill()
        node.runtime.net.streams.reset_all()
        if node.paused:  # a crash ends every pause: the next incarnation starts running
            assert node.resumed is not None  # set with paused (pause)
            node.pauses = 0
            node.paused = False
            node.resumed.succeed()
        return True

    def destroy_disk(self, name: str) -> int:
        """The machine of ``name`` crashes (as ``crash``) and its disk is destroyed: every
        file gone, synced or not, as on a replacement machine. ``restart`` ends it, and the
        next incarnation boots on the empty disk (it rejoins as its design allows). Returns
        the bytes lost; a node already down loses its disk all the same."""
        self.crash(name)
        return self.nodes[name].disk.destroy()

    def restart(self, name: str) -> SimRuntime:
        """End one crash; when none is left, start a fresh incarnation and run its boot
        function. Returns the node's current runtime (still the dead one while another
        crash holds it down)."""
        node = self.nodes[name]
        if node.up:
            raise RuntimeError(f"{name} is running; crash it before restarting it")
        node.crashes = max(0, node.crashes - 1)
        if node.crashes:
            return node.runtime
        node.incarnation += 1
        node.up = True
        node.runtime = SimRuntime(self, node)
        if node.boot is not None:
            node.runtime.spawn(node.boot(node.runtime), name=f"boot {name}")
        return node.runtime

    def is_up(self, name: str) -> bool:
        return self.nodes[name].up

    def block(self, source: str, destination: str) -> None:
        """Cut the one-way link: messages from ``source`` to ``destination`` are dropped."""
        self.net.block(source, destination)

    def unblock(self, source: str, destination: str) -> None:
        self.net.unblock(source, destination)

    def add_loss(self, source: str, destination: str, p: float) -> None:
        self.net.add_loss(source, destination, p)

    def remove_loss(self, source: str, destination: str, p: float) -> None:
        self.net.remove_loss(source, destination, p)

    def add_delay(self, source: str, destination: str, extra_ns: int, jitter_ns: int = 0) -> None:
        self.net.add_delay(source, destination, extra_ns, jitter_ns)

    def remove_delay(self, source: str, destination: str, extra_ns: int, jitter_ns: int = 0) -> None:
        self.net.remove_delay(source, destination, extra_ns, jitter_ns)

    def add_fsync_delay(self, name: str, ns: int) -> None:
        self.nodes[name].disk.add_fsync_delay(ns)

    def remove_fsync_delay(self, name: str, ns: int) -> None:
        self.nodes[name].disk.remove_fsync_delay(ns)

    def add_late_writes(self, name: str, late_p: float, late_s: float, ghost_p: float) -> None:
        """A simulated store on ``name`` (``models.cassandra``) applies each message write
        late (``late_p``, ``late_s`` seconds) or never (``ghost_p``), besides what its own
        model draws, until ``remove_late_writes``. A node with no such store ignores it."""
        self.nodes[name].late_writes.append((late_p, late_s, ghost_p))

    def remove_late_writes(self, name: str, late_p: float, late_s: float, ghost_p: float) -> None:
        self.nodes[name].late_writes.remove((late_p, late_s, ghost_p))
