"""The live world: nodes in one asyncio process, talking over loopback TCP, each with a
disk folder; server nodes as processes of their own (``lab serve``, ``lab.worlds.live.processes``)
and the faults it applies to them; and the event-loop runner that also works inside
Jupyter's running loop.

Faults (the ``lab.workloads.fault_base.FaultWorld`` verbs) hit server processes only: ``pause`` (and
each pause of a ``gc`` fault) is SIGSTOP until ``resume`` sends SIGCONT, ``crash`` is
kill -9 with the page cache lost (files cut back to what was fsynced), ``disk-loss`` is
kill -9 with the data dir emptied (``destroy_disk``: a replaced machine), and ``restart``
starts the server again on the same data dir and ports; ``disk-delay`` slows a server's
fsyncs. Links (partition, delay, loss) are the proxies in this process (``lab.worlds.live.proxy``)
between clients and servers, and between server processes that call each other: a design
passes each server the address of a proxy per peer (``reach``, given to
``Backend.serve_args``), so a partition can split the servers into any shape. Clients run
in this process: a process fault aimed at them is refused before the run (``refusal``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import shutil
import time
from pathlib import Path
from functools import partial
from typing import Any, Awaitable, Callable, Coroutine, Sequence, TypeVar

from lab.worlds.live.external import ExternalProcess
from lab.worlds.live.processes import RESTART_TRIES, STOP_TIMEOUT, ServerProcess
from lab.worlds.live.proxy import LiveLinks
from lab.worlds.live.runtime import LiveRuntime
from lab.worlds.live.slowdown import injected
from lab.design.runtime import Boot
from lab.design.world import ServerSpec, Targeted

log = logging.getLogger(__name__)

T = TypeVar("T")


INTERRUPT_GRACE = 2.0  # seconds an interrupted run's servers have to stop on SIGTERM before kill -9


class LiveWorld:
    """Nodes in one asyncio process, talking over loopback TCP, each with a disk folder."""

    kind = "live"
    #: targets that may fall on a client, which runs in the runner's own process
    CLIENT_TARGETS = ("clients", "all", "one", "minority", "majority")

    def __init__(self, seed: int = 0, root: str | os.PathLike | None = None,
                 disk_roots: dict[str, str | os.PathLike] | None = None,
                 bind: dict[str, tuple[str, int]] | None = None):
        """Node ``n``'s files live in ``root/n`` unless ``disk_roots`` names a folder for it
        (a server's ``--data-dir``). ``bind`` gives the host and number a node's named port
        listens on (a server's flags); any other port gets a free loopback port."""
        import tempfile

        self.seed = seed
        self.disk_roots = {name: Path(path) for name, path in (disk_roots or {}).items()}
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="queue-lab-")
            root = self._tmp.name
        self.root = Path(root)
        self.addresses: dict[str, tuple[str, int]] = {}
        self.bind = dict(bind or {})
        self.listening: dict[tuple[str, str], int] = {}  # (node, port name) -> bound port, in this process
        self.nodes: dict[str, LiveRuntime] = {}
        self.processes: dict[str, ServerProcess | ExternalProcess] = {}  # server nodes that are processes
        self.remote: dict[str, dict[str, tuple[str, int]]] = {}  # server nodes this world did not start: their ports
        self._pauses: dict[str, int] = {}  # pauses in force per node: it resumes after the last
        self._crashes: dict[str, int] = {}  # crashes in force per node: it restarts after the last
        self._tears = 0  # crashes so far: each draws its torn tails from its own seeded random
        #: the test hook QUEUE_LAB_INJECT_SLOWDOWN (lab.worlds.live.slowdown): design -> factor, and the
        #: server nodes of those designs this world started (their clients' requests are stretched)
        self.slowdown = injected()
        self.stretched: dict[str, float] = {}
        self._starting: set[asyncio.Task] = set()
        #: each restart after a crash or kill: (node, when it was launched, when it was ready or
        #: None), on the runtimes' clock — a restart that outlasts the load leaves nothing put
        #: after the crash to check (the runner says so)
        self.restarts: list[tuple[str, int, int | None]] = []
        self.links = LiveLinks(seed)  # a proxy per link into a server process, made on first use
        self._fsync_delays: dict[str, int] = {}  # ns added to a server's fsyncs, all disk-delays in force
        self.epoch_ns = time.time_ns()
        self.mono_ns = time.monotonic_ns()
        #: where each server process's log is copied when the world ends (a run's folder keeps
        #: them: the root is temporary); None: nowhere
        self.logs_to: Path | None = None

    def node(self, name: str) -> LiveRuntime:
        """The node called ``name``, created on first use."""
        if name not in self.nodes:
            self.nodes[name] = LiveRuntime(self, name)
        return self.nodes[name]

    async def start(self, name: str, boot: Boot) -> LiveRuntime:
        """Create node ``name`` and run its boot function to completion."""
        rt = self.node(name)
        await boot(rt)
        return rt

    async def start_process(self, node: str, design: str, argv: Sequence[str] = ()) -> ServerProcess:
        """Start node ``node`` as ``lab serve <design> <argv>`` over ``root/node``; return once
        it is ready. Its ports are in ``address``."""
        if node in self.processes:
            raise ValueError(f"node {node!r} is already a server process")
        proc = self.processes[node] = ServerProcess(design, self.root / node, argv)
        proc.launch()  # forked from the loop's thread: the parent-death signal follows this thread
        await asyncio.get_running_loop().run_in_executor(None, proc.wait_ready)
        return proc

    async def start_server(self, server: ServerSpec) -> None:
        """A design's server node: ``lab serve NAME`` as a process of its own, a real broker's
        binary, or, for a design without a server entry (the in-memory control), its boot on
        a node of this process."""
        node = server.node
        if server.design in self.slowdown:  # a test hook, empty unless QUEUE_LAB_INJECT_SLOWDOWN is set
            self.stretched[node] = self.slowdown[server.design]
        if server.external is not None:
            await self.start_external(node, server.external)
        elif server.serve_args is None:
            await self.start(node, server.boot)
        else:
            argv = server.serve_args(self.root / node, partial(self.reach, node))
            await self.start_process(node, server.design, argv)

    async def start_external(self, node: str, peer: Any) -> ExternalProcess:
        """Start server node ``node`` of a real broker (``lab.design.peer.Peer``) in
        ``root/node``, its data dir on the power-loss file system where FUSE is available;
        return once its probe says it is ready."""
        if node in self.processes:
            raise ValueError(f"node {node!r} is already a server process")
        proc = self.processes[node] = ExternalProcess(peer, node, self.root / node)
        # on a worker thread: the mount waits for the file system, the probe for the broker
        await asyncio.get_running_loop().run_in_executor(None, proc.start)
        return proc

    async def checkpoint(self, node: str) -> None:
        """What server ``node`` has written so far counts as durable (a peer's set-up done)."""
        await asyncio.get_running_loop().run_in_executor(None, self._process(node).checkpoint)

    def reach(self, node: str, peer: str, port: str) -> str:
        """Where server node ``node`` reaches server node ``peer``'s port ``port``, as HOST:PORT:
        the proxy of that link, listening now; it finds ``peer`` when a connection comes, so
        ``peer`` may start later (until then a connection is closed at once). The proxy
        stays for the run, so a restarted server keeps its flags."""
        host, number = self.links.address(node, peer, port, lambda: self.address(peer, port))
        return f"{host}:{number}"

    async def stop_server(self, node: str) -> None:
        """SIGTERM a server process and wait for it (its files are fsynced and closed)."""
        proc = self.processes.get(node)
        if proc is not None and proc.running:
            await asyncio.get_running_loop().run_in_executor(None, proc.stop)

    def address(self, node: str, port: str, source: str | None = None) -> tuple[str, int]:
        """Where a client reaches server process ``node``'s port called ``port`` (its ready line's
        name); from client node ``source``, through that link's proxy, which faults can cut."""
        if node in self.remote:
            ports: dict[str, Any] = self.remote[node]
        else:
            proc = self.processes.get(node)
            ports = proc.ports if proc is not None else {p: n for (owner, p), n in self.listening.items() if owner == node}
        if port not in ports:
            raise ValueError(f"{node} has no port {port!r} (it has {', '.join(ports) or 'none yet'})")
        target = ports[port] if node in self.remote else ("127.0.0.1", ports[port])
        return target if source is None else self.links.address(source, node, port, target)

    def add_remote(self, node: str, ports: dict[str, tuple[str, int]]) -> None:
        """Server node ``node`` runs elsewhere (somebody else's server, ``lab load --host``):
        its named ports' addresses. Clients reach it through their links' proxies as any
        node; it is no process of this world, so it cannot be paused or crashed."""
        if node in self.processes:
            raise ValueError(f"node {node!r} is already a server process")
        self.remote[node] = dict(ports)

    def _process(self, node: str) -> ServerProcess | ExternalProcess:
        proc = self.processes.get(node)
        if proc is None:
            raise ValueError(f"the live world applies faults to server processes only; {node!r} is not one "
                             f"(server processes: {', '.join(self.processes) or 'none'})")
        return proc

    @classmethod
    def refusal(cls, fault: "Targeted") -> str | None:
        """Why this world cannot apply ``fault`` whatever the design (one line), or None."""
        if not fault.hits_process:  # the kind says (lab.workloads.fault_base.Fault)
            return None  # a link fault: its proxies (to servers, between servers) are in the runner's process
        for target in fault.target:
            if target in cls.CLIENT_TARGETS or (target[:1] in ("p", "c") and target[1:].isdigit()):
                return (f"target {target} may hit a client, and clients run in the runner's own process: "
                        f"the live world pauses, crashes and slows the disks of server processes only (target servers, server "
                        f"or a server's name)")
        return None

    # ------------------------------------------------------------ fault verbs (lab.workloads.fault_base.FaultWorld)

    def pause(self, node: str) -> None:
        """SIGSTOP: the server's process stops; its connections stay open, unanswered."""
        proc = self._process(node)
        self._pauses[node] = self._pauses.get(node, 0) + 1
        if self._pauses[node] == 1 and self.is_up(node):
            proc.pause()

    def resume(self, node: str) -> None:
        """End one pause; SIGCONT when none is left."""
        proc = self._process(node)
        self._pauses[node] = max(0, self._pauses.get(node, 0) - 1)
        if self._pauses[node] == 0:
            proc.resume()

    def crash(self, node: str, tear: bool = False) -> None:
        """The machine of server ``node`` crashes: kill -9, then its files are cut back to what
        its disk had fsynced (``lab.worlds.live.disk.power_cut``; a kill alone would keep the page
        cache), with ``tear`` a random prefix of each unsynced tail kept — as in the sim world."""
        proc = self._process(node)
        self._crashes[node] = self._crashes.get(node, 0) + 1
        if self._crashes[node] == 1:
            proc.kill()
            self._tears += 1
            cut = proc.power_cut(random.Random(f"{self.seed}:tear:{node}:{self._tears}"), tear)
            log.info("%s crashed: %d unsynced bytes lost", node, cut)
            self._pauses[node] = 0  # a crash ends every pause, as in the sim world

    def kill(self, node: str) -> None:
        """The process of server ``node`` dies (kill -9) and its machine stays up: what it
        wrote and did not fsync survives in the page cache. ``restart`` ends it."""
        proc = self._process(node)
        self._crashes[node] = self._crashes.get(node, 0) + 1
        if self._crashes[node] == 1:
            proc.kill()
            self._pauses[node] = 0

    def destroy_disk(self, node: str) -> int:
        """The machine of server ``node`` crashes (as ``crash``: kill -9) and its disk is
        destroyed: its data dir emptied, every file gone, fsynced or not. ``restart`` starts
        it again on the empty dir and the same ports. The bytes lost; a server already down
        (another crash holds it) loses its disk all the same."""
        proc = self._process(node)
        self._crashes[node] = self._crashes.get(node, 0) + 1
        if self._crashes[node] == 1:
            proc.kill()  # no power cut to replay: nothing of the disk is kept
            self._pauses[node] = 0  # a crash ends every pause, as in the sim world
        lost = proc.destroy_disk()
        log.info("%s lost its disk: %d bytes gone", node, lost)
        return lost

    def restart(self, node: str) -> ServerProcess | ExternalProcess:
        """End one crash; when none is left, start the server again on the same data dir and
        ports. It returns at once: clients find the ports closed until the server is ready."""
        proc = self._process(node)
        if self.is_up(node):
            raise RuntimeError(f"{node} is running; crash it before restarting it")
        self._crashes[node] -= 1
        if self._crashes[node] == 0:
            proc.launch()
            task = asyncio.get_running_loop().create_task(self._until_ready(node, proc, self.now_ns()))
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)
        return proc

    async def settle(self) -> None:
        """Wait until every server restarting now is ready (or has given up): a drain that
        began before a slow restart finished would count what the server holds as lost."""
        while self._starting:
            await asyncio.gather(*list(self._starting), return_exceptions=True)

    def now_ns(self) -> int:
        """Now, on the clock of this world's nodes (``LiveRuntime.now_ns``)."""
        return self.epoch_ns + (time.monotonic_ns() - self.mono_ns)

    async def _until_ready(self, node: str, proc: ServerProcess | ExternalProcess, launched: int) -> None:
        loop = asyncio.get_running_loop()
        for attempt in range(RESTART_TRIES):
            try:
                await loop.run_in_executor(None, proc.wait_ready)
                self.restarts.append((node, launched, self.now_ns()))
                return
            except RuntimeError as e:
                if not self.is_up(node):
                    return  # crashed again while it was starting: the next heal starts it
                if attempt == RESTART_TRIES - 1 or not proc.port_was_taken():
                    log.error("%s did not restart: %s", node, e)
                    self.restarts.append((node, launched, None))
                    return
            await asyncio.sleep(0.1)
            proc.launch()

    # Link faults: the proxies from clients to servers and between servers (lab.worlds.live.proxy.LiveLinks).
    def block(self, source: str, destination: str) -> None:
        self.links.block(source, destination)

    def unblock(self, source: str, destination: str) -> None:
        self.links.unblock(source, destination)

    def add_loss(self, source: str, destination: str, p: float) -> None:
        self.links.add_loss(source, destination, p)

    def remove_loss(self, source: str, destination: str, p: float) -> None:
        self.links.remove_loss(source, destination, p)

    def add_delay(self, source: str, destination: str, extra_ns: int, jitter_ns: int = 0) -> None:
        self.links.add_delay(source, destination, extra_ns, jitter_ns)

    def remove_delay(self, source: str, destination: str, extra_ns: int, jitter_ns: int = 0) -> None:
        self.links.remove_delay(source, destination, extra_ns, jitter_ns)

    def add_fsync_delay(self, node: str, ns: int) -> None:
        """Every fsync of server process ``node`` takes ``ns`` longer (its disk reads the
        control file beside its data dir at each fsync)."""
        proc = self._process(node)
        self._fsync_delays[node] = self._fsync_delays.get(node, 0) + ns
        proc.set_fsync_delay(self._fsync_delays[node])

    def remove_fsync_delay(self, node: str, ns: int) -> None:
        proc = self._process(node)
        self._fsync_delays[node] = max(0, self._fsync_delays.get(node, 0) - ns)
        proc.set_fsync_delay(self._fsync_delays[node])

    # Late and ghost writes are a simulated store's, the sim world's only: a live run refuses the
    # fault before it starts (its kind names the worlds that apply it), so these are never reached.
    def add_late_writes(self, node: str, late_p: float, late_s: float, ghost_p: float) -> None:
        raise ValueError(f"the live world cannot apply late-writes (to {node}): the sim world's only")

    def remove_late_writes(self, node: str, late_p: float, late_s: float, ghost_p: float) -> None:
        raise ValueError(f"the live world cannot apply late-writes (to {node}): the sim world's only")

    def is_up(self, node: str) -> bool:
        return self._crashes.get(node, 0) == 0

    def stop_processes(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop every server process, all at once (SIGTERM; kill -9 for one still there after
        ``timeout`` seconds); the run's end, however it ends."""
        for task in self._starting:
            task.cancel()
        for proc in self.processes.values():
            proc.signal_stop()
        deadline = time.monotonic() + timeout
        for proc in self.processes.values():
            if proc.proc is not None:
                proc.stop(timeout=deadline - time.monotonic())

    def run(self, main: Callable[[LiveRuntime], Awaitable[T]]) -> T:
        return run_event_loop(self._main(main))

    async def _main(self, main: Callable[[LiveRuntime], Awaitable[T]]) -> T:
        control = self.node("control")
        interrupted = True  # until main returns or raises an error of its own
        try:
            result = await main(control)
            interrupted = False
            return result
        except Exception:
            interrupted = False
            raise
        finally:
            if interrupted:  # Ctrl-C, SIGTERM or a cancel: clients stop first, so none spins against
                for rt in list(self.nodes.values()):  # a stopped server, and the servers get no
                    for task in list(rt._tasks):  # more than the interrupt's grace to stop
                        task.cancel()
            self.stop_processes(INTERRUPT_GRACE if interrupted else STOP_TIMEOUT)  # before the temporary
            # root goes: their data dirs are in it
            for proc in self.processes.values():
                try:
                    proc.finish()  # what a broker leaves running (a port mapper), then its file system
                finally:
                    proc.close()
            if not interrupted:
                self._copy_logs()
            await self.links.close()
            for rt in list(self.nodes.values()):
                await rt.close()
            if self._tmp is not None:
                self._tmp.cleanup()


    def keep_logs(self, folder: Path) -> None:
        """Copy every server process's log into ``folder`` when the world ends (a run's
        folder keeps them: the world's root is temporary)."""
        self.logs_to = folder

    def recorded(self) -> dict[str, Any]:
        """Nothing of its own: the live world's links and processes are the machine's."""
        return {}

    def _copy_logs(self) -> None:
        """Copy every server process's log (its stderr, all its starts) to ``logs_to``."""
        if self.logs_to is None or not self.processes:
            return
        self.logs_to.mkdir(parents=True, exist_ok=True)
        for node, proc in self.processes.items():
            if proc.log_path.exists():
                shutil.copyfile(proc.log_path, self.logs_to / f"{node}.log")


def run_event_loop(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run (on uvloop when installed), also from inside a running loop.

    Jupyter kernels already run an event loop in the main thread; there the live world
    gets a fresh loop on a thread of its own, and the caller waits for it.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-world") as pool:
        return pool.submit(_run_here, coro).result()


def _run_here(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)
