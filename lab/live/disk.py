"""Real files: the live world's disk, and the Store on plain files of the embeddable libraries.

Files are append-only plus truncate, the shape of every journal and segment log in the
lab. ``PlainFile`` is the one real file: appends go to the page cache (``os.write``),
a failed append is cut back so no partial record stays. Two users:

- ``LiveDisk`` (the Runtime's disk in the live world): paths relative to the node's
  root, anything that would escape it a ``ValueError``; ``LiveFile.fsync`` runs
  ``os.fsync`` on a worker thread so a slow disk stalls only the task that asked for
  durability, not the whole event loop.
- ``FileStore`` (the ``lab.storage.Store`` port on a plain folder, for the synchronous
  libraries — Queuefka's Writer and Reader, Kestrel's journal tools): fsync blocks.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from lab.worlds import checked_relative


class PlainFile:
    """A real file: appends through ``os.write`` (whole buffers, no partial-record splits)."""

    def __init__(self, real: Path, readonly: bool = False, path: str | None = None):
        self.path = str(real) if path is None else path
        self.fd = os.open(real, os.O_RDONLY) if readonly else os.open(real, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self._size = os.fstat(self.fd).st_size

    def append(self, data: bytes) -> int:
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


class LiveFile(PlainFile):
    """A file of a live node's disk: its fsync waits on a worker thread, then for as long as
    a disk-delay fault in force asks (``control``: the disk's control file)."""

    def __init__(self, path: str, real: Path, control: Path | None = None):
        super().__init__(real, path=path)
        self.control = control

    async def fsync(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, os.fsync, self.fd)
        extra = fsync_delay(self.control)
        if extra > 0:
            await asyncio.sleep(extra)


class LiveDisk:
    """The files of one live node, under ``root``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        # A fault hook of our own servers: the live world's disk-delay writes the extra
        # fsync time here (a real disk cannot be slowed from outside without root).
        self.control = fsync_delay_path(self.root)

    def _real(self, path: str) -> Path:
        return self.root / checked_relative(path)

    def open(self, path: str) -> LiveFile:
        real = self._real(path)
        real.parent.mkdir(parents=True, exist_ok=True)
        return LiveFile(checked_relative(path), real, self.control)

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

    def remove(self, path: str) -> None:
        os.remove(self._real(path))


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

    def fsync(self, handle: PlainFile) -> None:
        """Blocks until the file is on disk (returns None: nothing left to wait for)."""
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
