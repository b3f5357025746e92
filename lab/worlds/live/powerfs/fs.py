"""The power-loss file system's operations: a passthrough to a backing folder whose writes
and truncates go through the undo log (``undo.py``), so that a crash can take back whatever
was not fsynced.

A file handle is the backing file's own descriptor; the flags it was opened with are kept
beside it, because whether a write is already durable depends on them (O_SYNC, O_DSYNC) and
so does where it lands (O_APPEND). Directory entries are passed through as they are, durable
at once (the simplification ``undo.py`` names).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from typing import Any, Iterator

import mfusepy

from lab.worlds.live.powerfs.undo import UndoLog

_SYNC_FLAGS = os.O_SYNC | os.O_DSYNC
#: Stripped before opening the backing file: O_DIRECT's alignment rules would apply to our
#: buffers, and the kernel already sends every request here (the mount uses direct I/O).
_BACKING_DROP = getattr(os, "O_DIRECT", 0)
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_FALLOC_FL_ZERO_RANGE = 0x10
_UTIME_NOW = (1 << 30) - 1
_UTIME_OMIT = (1 << 30) - 2
_STAT_KEYS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks", "st_rdev")


def _fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    """fallocate(2) with a mode (``os.posix_fallocate`` takes none)."""
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.fallocate(fd, ctypes.c_int(mode), ctypes.c_int64(offset), ctypes.c_int64(length)) != 0:
        raise mfusepy.FuseOSError(ctypes.get_errno())


class PowerLossOperations(mfusepy.Operations):
    """Passthrough operations over ``backing`` that record every unsynced write in ``log``."""

    use_ns = True  # utimens and getattr in nanoseconds (mfusepy's float seconds are deprecated)

    def __init__(self, backing: str | os.PathLike, log: UndoLog | None = None):
        self.backing = os.path.realpath(backing)
        self.log = log if log is not None else UndoLog()
        self._flags: dict[int, int] = {}  # fh (backing fd) -> the flags it was opened with
        self._flags_lock = threading.Lock()
        #: what the live world's disk-delay fault adds to every sync (an fsync, an O_SYNC write)
        self.sync_delay_s = 0.0

    def _full(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    # -- files ----------------------------------------------------------------------------

    def _open(self, path: str, flags: int, mode: int = 0o644) -> int:
        truncate = flags & os.O_TRUNC
        fd = os.open(self._full(path), (flags & ~(_BACKING_DROP | os.O_TRUNC)) | os.O_CLOEXEC, mode)
        with self._flags_lock:
            self._flags[fd] = flags
        if truncate:
            # O_TRUNC cuts the file's bytes: undoable like any truncate. Done through a
            # descriptor of our own since the caller's may be read-only (O_RDONLY|O_TRUNC).
            try:
                self._truncate_path(path, 0, synced=bool(flags & _SYNC_FLAGS))
            except OSError:
                self.release(path, fd)
                raise
        return fd

    def open(self, path: str, flags: int) -> int:
        return self._open(path, flags)

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        flags = fi if isinstance(fi, int) else os.O_WRONLY
        return self._open(path, flags | os.O_CREAT, mode)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        flags = self._flags.get(fh, 0)
        if flags & _SYNC_FLAGS and self.sync_delay_s:
            time.sleep(self.sync_delay_s)  # a slow disk: this write waits for it (other requests go on)
        return self.log.write(fh, data, offset, append=bool(flags & os.O_APPEND), synced=bool(flags & _SYNC_FLAGS))

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if fh is not None and self._flags.get(fh, 0) & os.O_ACCMODE != os.O_RDONLY:
            self.log.truncate(fh, length, synced=bool(self._flags[fh] & _SYNC_FLAGS))
        else:
            self._truncate_path(path, length, synced=False)
        return 0

    def _truncate_path(self, path: str, length: int, *, synced: bool) -> None:
        fd = os.open(self._full(path), os.O_RDWR | os.O_CLOEXEC)
        try:
            self.log.truncate(fd, length, synced=synced)
        finally:
            os.close(fd)

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        if mode & ~(_FALLOC_FL_KEEP_SIZE | _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_ZERO_RANGE):
            # Collapse and insert shift bytes around: no undo record covers that.
            raise mfusepy.FuseOSError(errno.EOPNOTSUPP)
        if mode & (_FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_ZERO_RANGE):
            self.log.overwrite(fh, offset, size)
        elif offset + size > os.fstat(fh).st_size and not mode & _FALLOC_FL_KEEP_SIZE:
            self.log.overwrite(fh, offset, 0)  # a growth: the file's size is to be undone
        _fallocate(fh, mode, offset, size)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        # The real sync too, so a server's fsync costs what it costs on the backing disk.
        if self.sync_delay_s:
            time.sleep(self.sync_delay_s)  # a slow disk: this sync waits for it (other requests go on)
        (os.fdatasync if datasync else os.fsync)(fh)
        self.log.sync(fh)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # close(2) of one duplicate: not a sync

    def release(self, path: str, fh: int) -> int:
        with self._flags_lock:
            self._flags.pop(fh, None)
        os.close(fh)
        return 0

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._full(path))
        attrs: dict[str, Any] = {key: getattr(st, key) for key in _STAT_KEYS}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    # -- directories and names: durable at once -----------------------------------------

    def opendir(self, path: str) -> int:
        return os.open(self._full(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def releasedir(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    def readdir(self, path: str, fh: int) -> Iterator[tuple[str, dict[str, int], int]]:
        # Each entry carries its inode: with use_ino an entry of inode 0 is one that libc's
        # readdir skips, and only the mode's type bits and the inode reach the kernel.
        full = self._full(path)
        for name in (".", ".."):
            st = os.lstat(os.path.join(full, name))
            yield name, {"st_mode": st.st_mode, "st_ino": st.st_ino}, 0
        with os.scandir(full) as entries:
            for entry in entries:
                kind = (stat.S_IFLNK if entry.is_symlink() else stat.S_IFDIR if entry.is_dir(follow_symlinks=False)
                        else stat.S_IFREG if entry.is_file(follow_symlinks=False)
                        else stat.S_IFMT(entry.stat(follow_symlinks=False).st_mode))
                yield entry.name, {"st_mode": kind, "st_ino": entry.inode()}, 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        os.fsync(fh)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._full(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._full(path))
        return 0

    def unlink(self, path: str) -> int:
        os.unlink(self._full(path))
        return 0

    def rename(self, old: str, new: str) -> int:
        os.rename(self._full(old), self._full(new))
        return 0

    def link(self, target: str, source: str) -> int:
        os.link(self._full(source), self._full(target))
        return 0

    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self._full(target))
        return 0

    def readlink(self, path: str) -> str:
        return os.readlink(self._full(path))

    def mknod(self, path: str, mode: int, dev: int) -> int:
        os.mknod(self._full(path), mode, dev)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._full(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._full(path), uid, gid, follow_symlinks=False)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        full = self._full(path)
        if times is None:
            os.utime(full, follow_symlinks=False)
            return 0
        # libfuse passes utimensat's UTIME_NOW / UTIME_OMIT as the nanoseconds of a zero time.
        st, now = os.lstat(full), time.time_ns()
        old = (st.st_atime_ns, st.st_mtime_ns)
        atime, mtime = (now if t == _UTIME_NOW else was if t == _UTIME_OMIT else t
                        for t, was in zip(times, old))
        os.utime(full, ns=(atime, mtime), follow_symlinks=False)
        return 0

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._full(path), amode):
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._full(path))
        return {key: getattr(st, key) for key in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                  "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def destroy(self, path: str) -> None:
        self.log.close()
