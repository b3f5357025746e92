"""The power-loss file system's undo log: what a machine crash would take back.

Every write to a file that is not yet durable leaves a record here, per file (keyed by the
inode of the backing descriptor, ``(st_dev, st_ino)``, so renames and hard links do not
matter): the file's size before it was first dirtied and the bytes each later write or
truncate overwrote. An ``fsync``/``fdatasync`` of any descriptor of the file makes it
durable and its log is forgotten; ``rollback`` (the crash) puts every dirty file back the
way it was at its last sync; ``checkpoint`` declares everything so far durable.

The I/O on the backing files happens here, under the log's one lock, so that recording the
old bytes and writing the new ones are one step even when the file system serves several
requests at once.

Simplifications, compared with a disk losing power (and with Jepsen's LazyFS):

- Writes through an O_SYNC/O_DSYNC descriptor count as synced, and they make the whole file
  durable (its earlier unsynced writes included), as an fsync right after them would.
- Create, unlink, rename, mkdir, rmdir, link and symlink are durable at once: a crash never
  loses a directory entry, only file contents and sizes.
- No torn writes: a write is undone whole or kept whole.
- No writeback: a real kernel writes dirty pages back after about thirty seconds, so a
  long-unsynced file would mostly survive; here it is lost however old it is.
- Shared writable mmap is not tracked (the mount uses direct I/O, which refuses it).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

#: Flags that make a descriptor unfit for replaying old bytes at their offsets.
_REOPEN_FLAGS = os.O_APPEND | getattr(os, "O_DIRECT", 0) | os.O_SYNC | os.O_DSYNC


@dataclass
class _Dirty:
    """One file's undo log since its last sync."""

    fd: int  # an O_RDWR descriptor of our own: the writer's may be write-only or closed by then
    base: int  # the size at the last sync: what a rollback truncates back to
    records: list[tuple[int, bytes]] = field(default_factory=list)  # (offset, old bytes), oldest first
    dirty_bytes: int = 0  # bytes written or cut since the last sync


def _inode(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _own_rw_fd(fd: int) -> int:
    """An O_RDWR descriptor of the file behind ``fd`` that pwrite places at its offset."""
    import fcntl  # Linux-only module: imported where used so the docs still import this one

    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    if flags & (os.O_ACCMODE | _REOPEN_FLAGS) == os.O_RDWR:
        return os.dup(fd)
    # A dup shares the writer's access mode and O_APPEND; reopening through /proc gives a
    # fresh open file description of the same inode (it works for an unlinked file too).
    return os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)


def _pread_all(fd: int, length: int, offset: int) -> bytes:
    chunks = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        chunks.append(chunk)
        length -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _pwrite_all(fd: int, data: bytes, offset: int) -> int:
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
    return done


class UndoLog:
    """Undo logs of every dirty file, and the writes and truncates that fill them.

    ``synced=True`` on ``write``/``truncate`` means the descriptor is O_SYNC or O_DSYNC."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dirty: dict[tuple[int, int], _Dirty] = {}

    # -- the changes ----------------------------------------------------------------------

    def write(self, fd: int, data: bytes, offset: int, *, append: bool = False, synced: bool = False) -> int:
        """Write ``data`` at ``offset`` of ``fd`` (at its end if ``append``: the descriptor is
        O_APPEND), undoably unless ``synced``. Returns the bytes written."""
        with self._lock:
            key = _inode(fd)
            if append:
                offset = os.fstat(fd).st_size
            if synced:
                written = _pwrite_all(fd, data, offset) if not append else os.write(fd, data)
                self._forget(key)
                return written
            self._record(key, fd, offset, len(data))
            written = _pwrite_all(fd, data, offset) if not append else os.write(fd, data)
            self._dirty[key].dirty_bytes += written
            return written

    def truncate(self, fd: int, length: int, *, synced: bool = False) -> None:
        """Set the size of the file behind ``fd`` to ``length``, undoably unless ``synced``."""
        with self._lock:
            key = _inode(fd)
            size = os.fstat(fd).st_size
            if not synced:
                # The bytes a shrink cuts; growing cuts nothing (the new bytes are zeros that
                # the final truncate to the old size removes again).
                self._record(key, fd, length, max(0, size - length))
                self._dirty[key].dirty_bytes += max(0, size - length)
            os.ftruncate(fd, length)
            if synced:
                self._forget(key)

    def overwrite(self, fd: int, offset: int, length: int) -> None:
        """Record the bytes an operation other than a write is about to change in place (a
        fallocate that punches a hole or zeroes a range)."""
        with self._lock:
            key = _inode(fd)
            self._record(key, fd, offset, length)
            self._dirty[key].dirty_bytes += length

    def _record(self, key: tuple[int, int], fd: int, offset: int, length: int) -> None:
        dirty = self._dirty.get(key)
        if dirty is None:
            own = _own_rw_fd(fd)
            dirty = self._dirty[key] = _Dirty(fd=own, base=os.fstat(own).st_size)
        # Only bytes below the base size need keeping: a rollback ends by truncating the file
        # to the base size, which drops everything above it (appends record nothing).
        end = min(offset + length, dirty.base)
        if end > offset:
            old = _pread_all(dirty.fd, end - offset, offset)
            if old:
                dirty.records.append((offset, old))

    # -- durability -----------------------------------------------------------------------

    def sync(self, fd: int) -> None:
        """An fsync or fdatasync of ``fd``: its file is durable, its log forgotten."""
        with self._lock:
            self._forget(_inode(fd))

    def checkpoint(self) -> None:
        """Everything written so far is durable."""
        with self._lock:
            for key in list(self._dirty):
                self._forget(key)

    def rollback(self) -> tuple[int, int]:
        """The crash: every dirty file back to its state at its last sync. Returns (bytes
        undone, files touched)."""
        undone = files = 0
        with self._lock:
            for key, dirty in list(self._dirty.items()):
                # Newest first: each record holds what was there before its change, so the
                # oldest record, applied last, leaves the bytes of the last sync.
                for offset, old in reversed(dirty.records):
                    _pwrite_all(dirty.fd, old, offset)
                os.ftruncate(dirty.fd, dirty.base)
                undone += dirty.dirty_bytes
                files += 1
                self._forget(key)
        return undone, files

    def stats(self) -> tuple[int, int]:
        """(dirty files, dirty bytes)."""
        with self._lock:
            return len(self._dirty), sum(d.dirty_bytes for d in self._dirty.values())

    def close(self) -> None:
        """Let go of the descriptors kept for rollback (the log is forgotten)."""
        self.checkpoint()

    def _forget(self, key: tuple[int, int]) -> None:
        dirty = self._dirty.pop(key, None)
        if dirty is not None:
            os.close(dirty.fd)
