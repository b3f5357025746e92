"""The parent side of the power-loss file system: ``PowerFs`` mounts a backing folder at a
mount point through the child process of ``__main__.py``, talks to its control socket
(``checkpoint``, ``crash``, ``stats``) and takes the mount down again, whatever state the
child is in; ``unavailable`` says in one line why FUSE cannot be used on this machine.

The child must never outlive the lab, nor its mount: it gets the parent-death signal, and
``stop`` unmounts lazily whatever mount the child left behind (a child killed with -9
leaves one whose every access fails with "Transport endpoint is not connected").
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.worlds.live.processes import die_with_parent

START_TIMEOUT = 20.0  # seconds the child has to mount (imports on a busy 2-core machine)
STOP_TIMEOUT = 10.0  # seconds the child has to unmount and exit on SIGTERM before it is killed
CONTROL_TIMEOUT = 60.0  # seconds a control request may take (a rollback of many dirty files)
_ROOT = Path(__file__).resolve().parents[4]  # the folder holding the ``lab`` package


def unavailable() -> str | None:
    """Why FUSE cannot be used here, in one line, or None when it can."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse: the kernel's FUSE device is missing (modprobe fuse, or give the container /dev/fuse)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 on PATH: apt-get install fuse3"
    library = ctypes.util.find_library("fuse3")
    try:
        ctypes.CDLL(library or "libfuse3.so.3")
    except OSError:
        return "libfuse3 is not loadable: apt-get install fuse3"
    if importlib.util.find_spec("mfusepy") is None:
        return "the Python package mfusepy is missing: pip install mfusepy"
    return None


def mounted(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a mount point in this mount namespace, dead or alive (a dead FUSE
    mount fails every stat, so ``os.path.ismount`` says no)."""
    # The parent's real path, not the mount's own: a stat of a dead mount fails.
    target = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            # /proc/self/mounts writes a space in a path as \040 (and a tab, newline, backslash).
            point = fields[1].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
            if point.replace("\\134", "\\") == target:
                return True
    return False


def lazy_unmount(path: str | os.PathLike) -> None:
    """Detach the mount at ``path`` now, even if busy or dead (``fusermount3 -u -z``)."""
    tool = shutil.which("fusermount3")
    argv = [tool, "-u", "-z", str(path)] if tool else ["umount", "-l", str(path)]
    subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=STOP_TIMEOUT)


class PowerFs:
    """``backing`` mounted at ``mountpoint`` through the power-loss file system.

    ``start`` mounts; ``checkpoint`` makes every write so far durable; ``crash`` rolls back
    every write not fsynced since and returns ``(bytes undone, files touched)``; ``stats``
    returns ``(dirty files, dirty bytes)``; ``stop`` unmounts and ends the child."""

    def __init__(self, backing: Path, mountpoint: Path):
        self.backing = Path(backing)
        self.mountpoint = Path(mountpoint)
        self.proc: subprocess.Popen | None = None
        self._home: str | None = None  # the socket's and log's folder: short, since a socket path is

    @property
    def control(self) -> str:
        assert self._home is not None, "PowerFs is not started"
        return os.path.join(self._home, "control.sock")

    @property
    def log_path(self) -> str:
        assert self._home is not None, "PowerFs is not started"
        return os.path.join(self._home, "powerfs.log")

    def start(self) -> "PowerFs":
        reason = unavailable()
        if reason is not None:
            raise RuntimeError(f"power-loss file system unavailable: {reason}")
        if self.proc is not None:
            raise RuntimeError(f"PowerFs at {self.mountpoint} is already started")
        if mounted(self.mountpoint):
            lazy_unmount(self.mountpoint)  # a dead mount left by a child killed with its parent
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self._home = tempfile.mkdtemp(prefix="powerfs-")
        argv = [sys.executable, "-m", "lab.worlds.live.powerfs", str(self.backing), str(self.mountpoint),
                "--control", self.control]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))}
        with open(self.log_path, "wb") as log:  # a file, not a pipe: a pipe nobody reads would block
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=env, preexec_fn=die_with_parent(),
                                         start_new_session=True)  # a terminal's Ctrl-C reaches the parent
        deadline = time.monotonic() + START_TIMEOUT
        while not (os.path.ismount(self.mountpoint) and os.path.exists(self.control)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                why = "exited" if self.proc.poll() is not None else f"did not mount within {START_TIMEOUT:.0f} s"
                tail = self._log_tail()
                self.stop()
                raise RuntimeError(f"power-loss file system at {self.mountpoint} {why}: {tail}")
            time.sleep(0.02)
        return self

    def _log_tail(self, lines: int = 8) -> str:
        try:
            text = Path(self.log_path).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    def _ask(self, request: str) -> list[str]:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"power-loss file system at {self.mountpoint} is not running")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONTROL_TIMEOUT)
            conn.connect(self.control)
            with conn.makefile("rwb", buffering=0) as stream:
                stream.write(request.encode() + b"\n")
                reply = stream.readline().decode().split()
        if not reply or reply[0] != "ok":
            raise RuntimeError(f"power-loss file system: {request} failed: {' '.join(reply) or 'no reply'}")
        return reply[1:]

    def checkpoint(self) -> None:
        """Everything written so far is durable (after a server's boot and set-up)."""
        self._ask("checkpoint")

    def crash(self) -> tuple[int, int]:
        """Lose every write not fsynced: ``(bytes undone, files touched)``."""
        undone, files = self._ask("crash")
        return int(undone), int(files)

    def stats(self) -> tuple[int, int]:
        """``(dirty files, dirty bytes)``: what a crash now would take back."""
        files, dirty = self._ask("stats")
        return int(files), int(dirty)

    def delay(self, ns: int) -> None:
        """Every sync from now on takes ``ns`` nanoseconds longer (0: the disk's own speed)."""
        self._ask(f"delay {max(0, int(ns))}")

    def stop(self) -> None:
        """Unmount and end the child; leaves no mount and no process, however the child is."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGTERM)  # libfuse's handler ends its loop and unmounts
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            else:
                proc.wait()
        # Busy at SIGTERM, or the child died (-9): the mount is still there, dead or alive.
        if mounted(self.mountpoint):
            lazy_unmount(self.mountpoint)
        if self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None

    def __enter__(self) -> "PowerFs":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
