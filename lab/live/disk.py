"""The live world's disk: real files under a node's root folder, real fsync.

Files are append-only plus truncate, the shape of every journal and segment log in
the lab. Appends go to the page cache (``os.write``); ``fsync`` runs ``os.fsync`` on a
worker thread so a slow disk stalls only the task that asked for durability, not the
whole event loop. Paths are relative to the root; anything that would escape it is a
``ValueError``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from lab.worlds import checked_relative


class LiveFile:
    """An open file: append, positional read, truncate, fsync."""

    def __init__(self, path: str, real: Path):
        self.path = path
        self._fd = os.open(real, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size

    def append(self, data: bytes) -> int:
        """Append ``data``; returns the offset it starts at."""
        offset = self._size
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(data)
        return offset

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def size(self) -> int:
        return self._size

    def truncate(self, size: int) -> None:
        if size < 0 or size > self._size:
            raise ValueError(f"{self.path}: cannot truncate {self._size} bytes to {size}")
        os.ftruncate(self._fd, size)
        self._size = size

    async def fsync(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, os.fsync, self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class LiveDisk:
    """The files of one live node, under ``root``."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _real(self, path: str) -> Path:
        return self.root / checked_relative(path)

    def open(self, path: str) -> LiveFile:
        real = self._real(path)
        real.parent.mkdir(parents=True, exist_ok=True)
        return LiveFile(checked_relative(path), real)

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
