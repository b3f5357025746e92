"""The simulated disk: a page cache that fsync makes durable, and that a crash empties.

Each file keeps its bytes (what the node reads back) and how many of them are durable.
``fsync`` takes simulated time, drawn from the disk's latency model and served one at a
time in order (one device queue), and then makes durable every byte that was written
before it was called. A crash cuts every file back to its durable length; with
``tear``, a random prefix of the unsynced tail survives, as a torn write would leave it.
A destroyed disk (``destroy``: the machine replaced, its disk gone) keeps nothing at all.

Simplifications, on purpose: files are append-only plus truncate (the shape of every
journal and segment log in the lab); creating, truncating, renaming and removing files
are durable at once (metadata journaling), so only data can be lost.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
import simpy
from simpy.core import SimTime

from lab.design.runtime import BytesLike, NodeDown
from lab.worlds.shared import checked_relative
from models.awaitables import Await
from models.host import NodeRuntime
from models.latency import LatencyModel


@dataclass
class DiskModel:
    """How long an fsync takes (default: median 1 ms, an SSD's flush)."""

    fsync: LatencyModel = field(default_factory=lambda: LatencyModel(dist="lognormal", ms=1.0, sigma=0.3))


class _FileData:
    __slots__ = ("data", "durable")

    def __init__(self) -> None:
        self.data = bytearray()
        self.durable = 0


class SimDiskStore:
    """A node's disk contents; it outlives the node's incarnations."""

    def __init__(self, env: simpy.Environment, model: DiskModel, rng: random.Random):
        self.env = env
        self.model = model
        self.rng = rng
        self.files: dict[str, _FileData] = {}
        self.busy_until: SimTime = 0  # on SimPy's clock
        self.extra_delay_ns = 0  # what "disk-delay" faults add to every fsync, in total
        self.fsyncs = 0

    def add_fsync_delay(self, ns: int) -> None:
        """Every fsync takes ``ns`` longer until ``remove_fsync_delay(ns)`` (delays add up)."""
        self.extra_delay_ns += ns

    def remove_fsync_delay(self, ns: int) -> None:
        self.extra_delay_ns = max(0, self.extra_delay_ns - ns)

    def schedule_fsync(self, file: _FileData) -> simpy.Event:
        """An event that fires when an fsync issued now completes."""
        target = len(file.data)
        start = max(self.env.now, self.busy_until)
        self.busy_until = start + self.model.fsync.sample_ns(self.rng) + self.extra_delay_ns
        done = self.env.timeout(self.busy_until - self.env.now)

        def persist(_: simpy.Event) -> None:
            file.durable = max(file.durable, min(target, len(file.data)))

        done.callbacks.append(persist)
        self.fsyncs += 1
        return done

    def crash(self, tear: bool) -> None:
        for file in self.files.values():
            keep = file.durable
            unsynced = len(file.data) - file.durable
            if tear and unsynced > 0:
                keep += self.rng.randrange(unsynced + 1)
            del file.data[keep:]
            file.durable = len(file.data)
        self.busy_until = self.env.now

    def destroy(self) -> int:
        """Every file gone, durable or not (the machine and its disk were replaced); the
        bytes lost. For a node that is down: its next incarnation starts on an empty disk.
        Open files of the dead incarnation keep their old data objects, which no lookup
        reaches any more."""
        lost = sum(len(file.data) for file in self.files.values())
        self.files.clear()
        self.busy_until = self.env.now  # a new device: no fsync of the old one is queued on it
        return lost


class SimFile:
    """An open file of one node incarnation."""

    __slots__ = ("path", "_data", "_disk")

    def __init__(self, path: str, data: _FileData, disk: "SimDisk"):
        self.path = path
        self._data = data
        self._disk = disk

    def append(self, data: BytesLike) -> int:
        self._disk.check_alive()
        offset = len(self._data.data)
        self._data.data += data
        return offset

    def read(self, offset: int, size: int) -> bytes:
        self._disk.check_alive()
        return bytes(self._data.data[offset : offset + size])

    def size(self) -> int:
        return len(self._data.data)

    def truncate(self, size: int) -> None:
        self._disk.check_alive()
        if size < 0 or size > len(self._data.data):
            raise ValueError(f"{self.path}: cannot truncate {len(self._data.data)} bytes to {size}")
        del self._data.data[size:]
        self._data.durable = min(self._data.durable, size)

    def fsync(self) -> Await:
        self._disk.check_alive()
        return Await(self._disk.store.schedule_fsync(self._data))

    def close(self) -> None:
        pass


class SimDisk:
    """The Disk port of one node incarnation, over the node's durable store."""

    def __init__(self, store: SimDiskStore, runtime: NodeRuntime):
        self.store = store
        self.rt = runtime

    def check_alive(self) -> None:
        if not self.rt.alive:
            raise NodeDown(f"{self.rt.node} has crashed; its disk is not reachable")

    def open(self, path: str) -> SimFile:
        self.check_alive()
        path = checked_relative(path)
        data = self.store.files.get(path)
        if data is None:
            data = self.store.files[path] = _FileData()
        return SimFile(path, data, self)

    def exists(self, path: str) -> bool:
        path = checked_relative(path)
        return path in self.store.files or any(p.startswith(path + "/") for p in self.store.files)

    def list(self, directory: str = "") -> list[str]:
        prefix = checked_relative(directory) + "/" if directory else ""
        names = {p[len(prefix) :].split("/", 1)[0] for p in self.store.files if p.startswith(prefix)}
        return sorted(names)

    def rename(self, src: str, dst: str) -> None:
        self.check_alive()
        src, dst = checked_relative(src), checked_relative(dst)
        if src not in self.store.files:
            raise FileNotFoundError(src)
        self.store.files[dst] = self.store.files.pop(src)

    def remove(self, path: str) -> None:
        self.check_alive()
        path = checked_relative(path)
        if path not in self.store.files:
            raise FileNotFoundError(path)
        del self.store.files[path]
