"""The simulated world: the Runtime port on SimPy, with pauses, crashes and restarts.

Design cores are ``async def`` code. Here each awaitable a core receives yields a SimPy
event, and a small driver process (``_drive``) sends the event's value back into the
coroutine — so the same core that serves real TCP in the live world runs in simulated
time. The driver is also where a node's stop-the-world pause lives: after any event
fires, no process of a paused node resumes until the pause ends, while messages to the
node keep queueing (they are delivered, and wait at the gate).

Simulated time is integer nanoseconds since the Unix epoch, starting at ``SIM_EPOCH_NS``:
the live world's clock has the same origin, so a core (Kestrel's absolute expiry times,
for one) reads either clock the same way. Every random draw comes from the world's seed:
one stream per node incarnation, one for the network, one for the disks.

The network is in ``models.network``, the disk in ``models.disk``; the fault verbs that
``lab.workloads.faults`` applies (pause, crash, destroy a disk, cut, lose, delay, late writes) are
public methods of ``SimWorld``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

import random
import simpy
from simpy.events import Event as SimPyEvent

from lab.design.runtime import Boot, Cancelled, NodeDown
from lab.worlds.shared import as_coroutine, node_random
from lab.design.service import ServiceModel
from models.awaitables import NS, Await, to_ns
from models.cpu import Cores, NodeCpu
from models.disk import DiskModel, SimDisk, SimDiskStore
from models.network import LatencyModel, SimNetwork, SimNetPort

T = TypeVar("T")

#: The sim world's clock at its start: 2023-11-14 22:13:20 UTC, in ns since the epoch.
SIM_EPOCH_NS = 1_700_000_000 * NS

class _Crash:
    """Interrupt cause: the node crashed; drop the coroutine without resuming it."""


class _Cancel:
    """Interrupt cause: the task was cancelled; raise Cancelled inside it."""


_CRASH = _Crash()
_CANCEL = _Cancel()
_CANCELLED = object()  # a driver's return value for a coroutine that ended by Cancelled
_CRASHED = object()  # ... and for one whose node crashed under it


class SimEvent:
    """The Event port on a SimPy event."""

    __slots__ = ("_event",)

    def __init__(self, env: simpy.Environment):
        self._event = env.event()

    def set(self, value: Any = None) -> None:
        if not self._event.triggered:
            self._event.succeed(value)

    def is_set(self) -> bool:
        return self._event.triggered

    def wait(self) -> Await:
        return Await(self._event)


class SimTask:
    """The Task port on a SimPy process running ``_drive``."""

    __slots__ = ("process",)

    def __init__(self, process: simpy.Process):
        self.process = process

    def cancel(self) -> None:
        if self.process.is_alive:
            self.process.interrupt(_CANCEL)

    def done(self) -> bool:
        return not self.process.is_alive

    def __await__(self):
        value = yield self.process
        if value is _CANCELLED:
            raise Cancelled()
        if value is _CRASHED:
            raise NodeDown("the task's node crashed")
        return value


@dataclass
class SimConfig:
    """The world's physical parameters (all overridable per run)."""

    latency: LatencyModel = field(default_factory=LatencyModel)
    loss: float = 0.0  # probability that a message is dropped
    fifo_links: bool = True  # messages on one (src, dst) link arrive in order, as over TCP
    disk: DiskModel = field(default_factory=DiskModel)
    #: server nodes' CPU: False for none; else the service times of ``service`` (a
    #: calibration file), or of the design's committed calibration when ``service`` is None
    cpu: bool = True
    service: ServiceModel | None = None
    cores: int | None = None  # cores per server node (None: the calibration's)
    latency_calibrated: bool = False  # links take the calibration's loopback latency (and its fsync)
    fsync_given: bool = False  # the workload set the fsync latency itself

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "SimConfig":
        """From a workload's ``sim`` mapping: latency (a mapping, or ``calibrated``), loss,
        fifo_links, fsync, cores, calibration (a file, or ``none`` for no CPU model)."""
        config = cls()
        if spec.get("latency") == "calibrated":
            config.latency_calibrated = True
        elif "latency" in spec:
            config.latency = LatencyModel.from_spec(_mapping(spec["latency"], "latency"))
        if "cores" in spec:
            cores = spec["cores"]
            if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
                raise ValueError(f"cores must be a whole number >= 1, got {cores!r}")
            config.cores = cores
        if "calibration" in spec:
            calibration = spec["calibration"]
            if calibration == "none":
                config.cpu = False
            elif isinstance(calibration, str) and calibration:
                config.service = ServiceModel.load(calibration)
            else:
                raise ValueError(f"calibration must be a calibration file or none, got {calibration!r}")
        if "fsync" in spec:
            config.disk = DiskModel(fsync=LatencyModel.from_spec(_mapping(spec["fsync"], "fsync")))
            config.fsync_given = True
        if "loss" in spec:
            loss = spec["loss"]
            if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 0 <= loss < 1:
                raise ValueError(f"loss must be a probability in [0, 1), got {loss!r}")
            config.loss = float(loss)
        if "fifo_links" in spec:
            if not isinstance(spec["fifo_links"], bool):
                raise ValueError(f"fifo_links must be true or false, got {spec['fifo_links']!r}")
            config.fifo_links = spec["fifo_links"]
        return config


def _mapping(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a mapping like {{dist: lognormal, ms: 0.1, sigma: 0.5}}, got {value!r}")
    return value


class SimNode:
    """What survives a crash: the name, the disk, the pause state and the boot function."""

    def __init__(self, world: "SimWorld", name: str):
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


class SimRuntime:
    """The Runtime port of one incarnation of a simulated node."""

    def __init__(self, world: "SimWorld", node: SimNode):
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
        self.processes: dict[simpy.Process, None] = {}  # insertion-ordered: deterministic

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
        return self.env.now

    def sleep(self, seconds: float) -> Await:
        return Await(self.env.timeout(to_ns(seconds)))

    # tasks and events
    def spawn(self, coro: Awaitable[T], name: str = "") -> SimTask:
        coro = as_coroutine(coro)
        if not self.alive:
            coro.close()
            raise NodeDown(f"{self.node} has crashed; it cannot spawn {name or 'a task'}")
        process = self.env.process(self._drive(coro))
        self.processes[process] = None
        return SimTask(process)

    def event(self) -> SimEvent:
        return SimEvent(self.env)

    async def wait(self, event: SimEvent, timeout: float | None) -> bool:
        if event.is_set():
            return True
        if timeout is None:
            await event.wait()
            return True
        return await Await(self.first_of(event._event, to_ns(timeout)))

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
        process = self.env.process(self._drive(coro, event))
        self.processes[process] = None
        return SimTask(process)

    # the driver: runs a coroutine on SimPy events, behind the node's pause gate
    def _drive(self, coro: Coroutine, first: SimPyEvent | None = None):
        """``first``: the event the coroutine already waits on (``start`` ran its first step)."""
        node = self.state
        me = self.env.active_process  # the generator starts inside its own process
        value: Any = None
        error: BaseException | None = None
        try:
            while True:
                if first is not None:
                    event, first = first, None
                else:
                    try:
                        while node.paused:
                            yield node.resumed
                        if error is None:
                            event = coro.send(value)
                        else:
                            event, error = coro.throw(error), None
                    except StopIteration as stop:
                        return stop.value
                    except Cancelled:
                        return _CANCELLED
                    except simpy.Interrupt as interrupt:  # cancelled or crashed while at the gate
                        if interrupt.cause is _CRASH:
                            return self._drop(coro)
                        error, value = Cancelled(), None
                        continue
                try:
                    value = yield event
                    if not self.alive:  # the event won a race with the crash interrupt
                        return self._drop(coro)
                except simpy.Interrupt as interrupt:
                    if interrupt.cause is _CRASH:
                        return self._drop(coro)
                    error, value = Cancelled(), None
                except Exception as e:  # the awaited event failed: raise it in the core
                    error, value = e, None
        finally:
            self.processes.pop(me, None)

    @staticmethod
    def _drop(coro: Coroutine) -> object:
        # A crashed process runs no more of its code; its finally blocks may run here
        # but anything they try on disk or network is refused (the runtime is dead).
        try:
            coro.close()
        except BaseException:
            pass
        return _CRASHED

    def kill(self) -> None:
        """Crash this incarnation: every process stops where it is."""
        self.alive = False
        for process in list(self.processes):
            if process.is_alive:
                process.interrupt(_CRASH)
        self.processes.clear()


class Deadlines:
    """Timeouts that seldom fire: ``add(delay, event, value)`` succeeds ``event`` with
    ``value`` ``delay`` ns from now unless something else triggered it first.

    A call's or a wait's timeout is nearly always beaten by its reply, so instead of one
    SimPy timeout per deadline (each pushed on and popped off the event heap), the
    deadlines of one length wait in arrival order — which is deadline order — behind a
    single timer, armed for the earliest one not yet answered. Each expires at its exact
    instant, as its own timeout would."""

    __slots__ = ("env", "queues")

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.queues: dict[int, deque] = {}  # delay -> (deadline, event, value), while its timer is armed

    def add(self, delay_ns: int, event: SimPyEvent, value: Any) -> None:
        queue = self.queues.get(delay_ns)
        if queue is not None:
            queue.append((self.env.now + delay_ns, event, value))
            return
        self.queues[delay_ns] = deque([(self.env.now + delay_ns, event, value)])
        self.env.timeout(delay_ns, delay_ns).callbacks.append(self._expire)

    def _expire(self, timer: SimPyEvent) -> None:
        delay = timer.value
        queue = self.queues[delay]
        now = self.env.now
        while queue and (queue[0][0] <= now or queue[0][1].triggered):
            _, event, value = queue.popleft()
            if not event.triggered:
                event.succeed(value)
        if queue:
            self.env.timeout(queue[0][0] - now, delay).callbacks.append(self._expire)
        else:
            del self.queues[delay]


class SimWorld:
    """Simulated nodes on one SimPy clock, with a simulated network and disks."""

    kind = "sim"
    #: the fault kinds this world applies (lab.workloads.faults): all of them
    fault_kinds = ("pause", "crash", "partition", "link-delay", "loss", "disk-delay", "gc", "late-writes",
                   "disk-loss")

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

    async def start_server(self, node: str, design: Any) -> None:
        """A design's server node: its CPU (``design.service_model()``, unless the config
        names a calibration or none) and its boot, on a simulated node."""
        config = self.config
        service = (config.service or design.service_model()) if config.cpu else None
        self.server_names.add(node)
        if config.latency_calibrated:
            if service is None or not service.network:
                raise ValueError(f"latency: calibrated needs a calibration with a network latency; "
                                 f"{design.name} has {'none' if service is None else 'none in ' + service.source}")
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
        if service is not None and node in design.cpu_nodes:
            self.node(node)
            self.nodes[node].install_cpu(service, config.cores or service.cores)
        await self.start(node, design.boot(node))

    async def stop_server(self, node: str) -> None:
        """Nothing to stop: the simulation ends with the run."""

    def run(self, main: Callable[[SimRuntime], Awaitable[T]], until: float | None = None) -> T:
        """Run ``main`` on the control node until it returns; return its result."""
        control = self.node("control")
        task = control.spawn(main(control), name="main")
        self.env.run(until=task.process if until is None else self.env.now + to_ns(until))
        if task.process.is_alive:
            raise TimeoutError(f"main did not finish within {until} simulated seconds")
        value = task.process.value
        if value is _CANCELLED or value is _CRASHED:
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
            node.paused = False
            node.resumed.succeed()

    def crash(self, name: str, tear: bool = False) -> None:
        """Kill -9 ``name``: its processes stop, its memory is gone, unsynced bytes are lost.

        With ``tear``, a random prefix of each file's unsynced tail survives (a torn write).
        """
        node = self.nodes[name]
        node.crashes += 1
        if not node.up:
            return
        node.up = False
        node.runtime.kill()
        node.disk.crash(tear)
        if node.paused:  # a crash ends every pause: the next incarnation starts running
            node.pauses = 0
            node.paused = False
            node.resumed.succeed()

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
