"""Real files: the live world's disk, and the Store on plain files of the embeddable libraries.

Files are append-only plus truncate, the shape of every journal and segment log in the
lab. ``PlainFile`` is the one real file: appends go to the page cache (``os.write``),
a failed append is cut back so no partial record stays. Two users:

- ``LiveDisk`` (the Runtime's disk in the live world): paths relative to the node's
  root, anything that would escape it a ``ValueError``; ``LiveFile.fsync`` runs
  ``os.fsync`` on a worker thread so a slow disk stalls only the task that asked for
  durability, not the whole event loop.
- ``FileStore`` (the ``lab.design.storage.Store`` port on a plain folder, for the synchronous
  libraries — Queuefka's Writer and Reader, Kestrel's journal tools): fsync blocks.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import weakref
from pathlib import Path
from typing import Any

from lab.design.runtime import BytesLike, Handle
from lab.worlds.shared import checked_relative


class PlainFile:
    """A real file: appends through ``os.write`` (whole buffers, no partial-record splits)."""

    def __init__(self, real: Path, readonly: bool = False, path: str | None = None):
        self.path = str(real) if path is None else path
        self.fd = os.open(real, os.O_RDONLY) if readonly else os.open(real, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self._size = os.fstat(self.fd).st_size

    def append(self, data: BytesLike) -> int:
        """Append ``data``; returns the offset it starts at."""
        offset = self._size
        done = 0
        try:
            while done < len(data):
                # No memoryview: an export alive in a traceback would pin the caller's bytearray.
                done += os.write(self.fd, data[done:] if done else data)
        except OSError:
            # A short write would leave a torn record: cut the file back, so the caller's
            # buffer (which it keeps) is still the exact continuation of the file.
            os.ftruncate(self.fd, offset)
            raise
        self._size = offset + len(data)
        return offset

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def size(self) -> int:
        # Another process (or another handle) may be appending: ask the OS.
        return os.fstat(self.fd).st_size

    def truncate(self, size: int) -> None:
        if size < 0 or size > self.size():
            raise ValueError(f"{self.path}: cannot truncate {self.size()} bytes to {size}")
        os.ftruncate(self.fd, size)
        self._size = size

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def fsync_delay_path(root: Path) -> Path:
    """The live world's disk-delay control file of the disk at ``root``: beside it, so no
    design lists it among its files."""
    return root.parent / f"{root.name}.fsync-delay"


def fsync_delay(control: Path | None) -> float:
    """Seconds the live world's disk-delay fault adds to every fsync (0 without one)."""
    if control is None:
        return 0.0
    try:
        return int(control.read_text() or 0) / 1e9
    except (OSError, ValueError):
        return 0.0


def durable_ledger_path(root: Path) -> Path:
    """The ledger of what the disk at ``root`` has made durable: beside it, as the control file."""
    return root.parent / f"{root.name}.durable"


class DurableLedger:
    """What a power cut would leave of a live node's files, written as the node goes: one
    JSON line per event — ``["S", path, size]`` for each file there at start (durable, as a
    previous crash left it), ``["F", path, size]`` when an fsync of the first ``size`` bytes
    returns, ``["T", path, size]`` for a truncate, ``["R", src, dst]``, ``["D", path]``.

    A kill -9 keeps the page cache, so it loses nothing a process wrote; a machine that
    crashes loses what was not fsynced. The live world's ``crash`` replays this ledger
    (``power_cut``) after the kill, so a crash means what it means in the sim world
    (``models.disk``: data durable at fsync, metadata at once). The line is written with one
    ``os.write`` after the fsync: a kill between the two only makes the cut stricter.
    """

    def __init__(self, root: Path):
        self.root = root
        self.fd = -1
        # The files there now are durable (as a previous crash left them); the ledger file
        # itself is written at the first event, so a node that never writes leaves none.
        self.start = [json.dumps(["S", str(p.relative_to(root)), p.stat().st_size])
                      for p in sorted(root.rglob("*")) if p.is_file()] if root.is_dir() else []

    def _open(self) -> None:
        self.fd = os.open(durable_ledger_path(self.root), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        if self.start:
            os.write(self.fd, ("\n".join(self.start) + "\n").encode())

    def record(self, *event: Any) -> None:
        if self.fd < 0:
            self._open()
        os.write(self.fd, (json.dumps(event) + "\n").encode())


def durable_sizes(root: Path) -> dict[str, int]:
    """Each file's durable length by the ledger of the disk at ``root`` (a torn last line is
    ignored: its event had not finished)."""
    durable: dict[str, int] = {}
    try:
        text = durable_ledger_path(root).read_text()
    except FileNotFoundError:
        return durable
    for line in text.splitlines():
        try:
            op, *args = json.loads(line)
        except ValueError:
            continue
        if op in ("S", "F"):
            durable[args[0]] = max(durable.get(args[0], 0), args[1]) if op == "F" else args[1]
        elif op == "T":
            durable[args[0]] = min(durable.get(args[0], 0), args[1])
        elif op == "R":
            durable[args[1]] = durable.pop(args[0], 0)
        elif op == "D":
            durable.pop(args[0], None)
    return durable


def power_cut(root: Path, rng: random.Random, tear: bool = False) -> int:
    """Cut every file under ``root`` back to its durable length (``tear``: a random prefix of
    its unsynced tail survives, as a torn write leaves it); the bytes cut. For a node whose
    process is dead: the page cache the crash of its machine would have lost."""
    durable = durable_sizes(root)
    cut = 0
    if not root.is_dir():
        return cut
    for real in sorted(root.rglob("*")):
        if not real.is_file():
            continue
        size = real.stat().st_size
        keep = durable.get(str(real.relative_to(root)), 0)
        if size > keep:
            if tear:
                keep += rng.randrange(size - keep + 1)
            os.truncate(real, keep)
            cut += size - keep
    return cut


def destroy(root: Path) -> int:
    """Destroy the disk at ``root``: every file and folder under it gone, synced or not, and
    its ledger with it, as on a machine whose disk was replaced; ``root`` stays, empty (the
    folder a replacement machine is set up with). The bytes lost. For a node whose process
    is dead (the live world's ``disk-loss``). The disk-delay control file beside it stays:
    it is the fault hook, not the node's data."""
    import shutil

    lost = 0
    if root.is_dir():
        for real in root.rglob("*"):
            if real.is_file() and not real.is_symlink():
                lost += real.stat().st_size
        shutil.rmtree(root)
    durable_ledger_path(root).unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    return lost


class LiveFile(PlainFile):
    """A file of a live node's disk: its fsync waits on a worker thread, then for as long as
    a disk-delay fault in force asks (``control``: the disk's control file); what it made
    durable goes in the disk's ledger, under the name the file has when the fsync returns (the
    disk moves ``path`` along with a rename, as an fd follows its inode; ``ledger`` None once
    no name leads to the file: its fsyncs make nothing a crash could keep)."""

    def __init__(self, path: str, real: Path, control: Path | None = None, ledger: DurableLedger | None = None):
        super().__init__(real, path=path)
        self.control = control
        self.ledger = ledger

    async def fsync(self) -> None:
        size = self._size  # what was written before the fsync was asked for is durable after it
        await asyncio.get_running_loop().run_in_executor(None, os.fsync, self.fd)
        if self.ledger is not None:
            self.ledger.record("F", self.path, size)
        extra = fsync_delay(self.control)
        if extra > 0:
            await asyncio.sleep(extra)

    def truncate(self, size: int) -> None:
        super().truncate(size)
        if self.ledger is not None:
            self.ledger.record("T", self.path, size)


class LiveDisk:
    """The files of one live node, under ``root``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        # A fault hook of our own servers: the live world's disk-delay writes the extra
        # fsync time here (a real disk cannot be slowed from outside without root).
        self.control = fsync_delay_path(self.root)
        self.ledger = DurableLedger(self.root)
        self._handles: weakref.WeakSet[LiveFile] = weakref.WeakSet()  # open files: a rename moves them

    def _real(self, path: str) -> Path:
        return self.root / checked_relative(path)

    def open(self, path: str) -> LiveFile:
        real = self._real(path)
        real.parent.mkdir(parents=True, exist_ok=True)
        handle = LiveFile(checked_relative(path), real, self.control, self.ledger)
        self._handles.add(handle)
        return handle

    def exists(self, path: str) -> bool:
        return self._real(path).exists()

    def list(self, directory: str = "") -> list[str]:
        base = self._real(directory) if directory else self.root
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir())

    def rename(self, src: str, dst: str) -> None:
        target = self._real(dst)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self._real(src), target)
        src, dst = checked_relative(src), checked_relative(dst)
        self._unlink(dst)  # the file it replaced
        for handle in list(self._handles):
            if handle.path == src:
                handle.path = dst  # a later fsync of it makes the new name's bytes durable
        self.ledger.record("R", src, dst)

    def remove(self, path: str) -> None:
        os.remove(self._real(path))
        self._unlink(checked_relative(path))
        self.ledger.record("D", checked_relative(path))

    def _unlink(self, path: str) -> None:
        """The handles still open on a file no name leads to any more: their fsyncs (one may
        be under way) must not count for whatever file takes that name next."""
        for handle in list(self._handles):
            if handle.path == path:
                handle.ledger = None


class FileStore:
    """The Store port on a real folder: its files (not its subfolders), blocking fsync."""

    def __init__(self, directory: str | os.PathLike, create: bool = False):
        self.path = Path(directory)
        self.location = str(self.path)
        if create:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)

    def names(self) -> list[str]:
        try:
            return sorted(entry.name for entry in os.scandir(self.path) if entry.is_file())
        except FileNotFoundError:
            return []

    def open(self, name: str) -> PlainFile:
        return PlainFile(self.path / name)

    def open_read(self, name: str) -> PlainFile:
        return PlainFile(self.path / name, readonly=True)

    def size(self, name: str) -> int:
        return os.stat(self.path / name).st_size

    def exists(self, name: str) -> bool:
        return (self.path / name).exists()

    def remove(self, name: str) -> None:
        os.remove(self.path / name)

    def rename(self, src: str, dst: str) -> None:
        os.replace(self.path / src, self.path / dst)

    def fsync(self, handle: Handle) -> None:
        """Blocks until the file is on disk (returns None: nothing left to wait for)."""
        assert isinstance(handle, PlainFile)  # a handle this store opened (the Store port's rule)
        os.fsync(handle.fd)

    def sync_names(self) -> None:
        """Make created, renamed and removed names durable (fsync the folder)."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def age(self, name: str) -> float:
        """Seconds since the file was last written."""
        return time.time() - os.stat(self.path / name).st_mtime

    def lock(self) -> Any:
        """Hold an exclusive lock on the folder for one writer (released by ``unlock``)."""
        import fcntl

        fd = os.open(self.path / ".writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"{self.location}: another Writer has this topic open") from None
        return fd

    def unlock(self, token: Any) -> None:
        os.close(token)
