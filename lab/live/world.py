"""The live world: nodes in one asyncio process, talking over loopback TCP, each with a
disk folder; and the event-loop runner that also works inside Jupyter's running loop."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

from lab.live.runtime import LiveRuntime
from lab.runtime import Boot

T = TypeVar("T")


class LiveWorld:
    """Nodes in one asyncio process, talking over loopback TCP, each with a disk folder."""

    kind = "live"

    def __init__(self, seed: int = 0, root: str | os.PathLike | None = None,
                 disk_roots: dict[str, str | os.PathLike] | None = None):
        """Node ``n``'s files live in ``root/n`` unless ``disk_roots`` names a folder for it
        (a server's ``--data-dir``)."""
        import tempfile

        self.seed = seed
        self.disk_roots = {name: Path(path) for name, path in (disk_roots or {}).items()}
        self._tmp = None if root is not None else tempfile.TemporaryDirectory(prefix="queue-lab-")
        self.root = Path(root if root is not None else self._tmp.name)
        self.addresses: dict[str, tuple[str, int]] = {}
        self.nodes: dict[str, LiveRuntime] = {}
        self.epoch_ns = time.time_ns()
        self.mono_ns = time.monotonic_ns()

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

    def run(self, main: Callable[[LiveRuntime], Awaitable[T]]) -> T:
        return _run_event_loop(self._main(main))

    async def _main(self, main: Callable[[LiveRuntime], Awaitable[T]]) -> T:
        control = self.node("control")
        try:
            return await main(control)
        finally:
            for rt in list(self.nodes.values()):
                await rt.close()
            if self._tmp is not None:
                self._tmp.cleanup()


def _run_event_loop(coro: Coroutine[Any, Any, T]) -> T:
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
