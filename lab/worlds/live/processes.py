"""Server processes of the live world: ``lab serve <design>`` as a child process on free
loopback ports, with its own data dir, that the live world stops, kills, pauses and restarts
(and whose data dir it empties when a ``disk-loss`` destroys the disk).

Every design's ``serve.py`` prints one ready line on stdout once its ports are open:

    ready <design> <name>=<port> ...        e.g. ``ready kestrel memcache=41012 text=41013 admin=41014``

and declares ``PORTS``, the flag that sets each named port (``{"memcache": "--port", ...}``):
a first start asks for port 0 (any free one), a restart for the ports the first start got,
so clients reconnect to the same address. Logging goes to stderr, which is kept in a log
file beside the data dir (a pipe nobody reads would block a chatty server).

A child must never outlive the lab: it gets the parent-death signal (Linux
``PR_SET_PDEATHSIG``: SIGKILL when the thread that started it ends), and the live world
stops every process it started when its run ends, however it ends.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Mapping, Sequence

from lab.design.registry import design_module
from lab.worlds.live.disk import destroy, fsync_delay_path, power_cut

READY = re.compile(r"^ready (\S+)((?: \S+=\d+)+)\s*$")
START_TIMEOUT = 30.0  # seconds a server has to print its ready line (imports on a busy 2-core machine)
STOP_TIMEOUT = 15.0  # seconds a server has to stop on SIGTERM before it is killed
RESTART_TRIES = 20  # a restart's ports may still be held for a moment (a client took one as its own)

_PR_SET_PDEATHSIG = 1


def ready_line(design: str, ports: Mapping[str, int]) -> str:
    """The one line a ``lab serve`` prints when it is ready."""
    return f"ready {design} " + " ".join(f"{name}={port}" for name, port in ports.items())


def parse_ready(line: str) -> tuple[str, dict[str, int]] | None:
    """``(design, ports)`` of a ready line, or None if ``line`` is not one."""
    m = READY.match(line)
    if m is None:
        return None
    return m.group(1), {name: int(port) for name, port in (part.split("=") for part in m.group(2).split())}


def log_since(path: Path, offset: int) -> str:
    """What a server's log file holds from ``offset`` on (its current start's part)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def die_with_parent():
    """A preexec_fn that sets the parent-death signal, or None off Linux. libc is looked up
    here, before the fork: the child runs only the foreign call."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return preexec


class ServerProcess:
    """``lab serve <design> <argv>`` over ``data_dir`` on free loopback ports.

    ``start`` waits for the ready line; ``stop`` (SIGTERM: a clean stop), ``kill`` (kill -9),
    ``pause``/``resume`` (SIGSTOP/SIGCONT) and ``restart`` (same data dir, same ports)."""

    def __init__(self, design: str, data_dir: str | os.PathLike, argv: Sequence[str] = ()):
        serve = design_module(design, "serve")
        if serve is None:
            raise ValueError(f"design {design!r} has no server (no serve.py): it cannot run as a process")
        self.design = design
        self.port_flags: dict[str, str] = dict(serve.PORTS)
        self.data_dir = Path(data_dir)
        self.argv = list(argv)
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"
        self.proc: subprocess.Popen | None = None
        self.ports: dict[str, int] = {}
        self.paused = False
        self._log_from = 0

    # ------------------------------------------------------------------ starting

    def command(self) -> list[str]:
        ports = [arg for name, flag in self.port_flags.items() for arg in (flag, str(self.ports.get(name, 0)))]
        return [sys.executable, "-m", "lab.cli", "serve", self.design, "--data-dir", str(self.data_dir),
                *ports, *self.argv]

    def launch(self) -> None:
        """Start the process and return at once (``wait_ready`` reads its ready line)."""
        if self.running:
            raise RuntimeError(f"{self.design} server is running (pid {self.pid}); stop it first")
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=die_with_parent(),
                start_new_session=True)  # a terminal's Ctrl-C reaches the runner, which stops its servers
        self.paused = False

    def wait_ready(self, timeout: float = START_TIMEOUT) -> dict[str, int]:
        """Block until the ready line; the ports. RuntimeError (with the log's tail) if the
        process ends or says something else first."""
        assert self.proc is not None and self.proc.stdout is not None
        line = _readline(self.proc.stdout, timeout)
        parsed = parse_ready(line or "")
        if parsed is None or parsed[0] != self.design:
            if line == "":  # its stdout closed: it is exiting
                try:
                    self.proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    pass
            code = self.proc.poll()
            self._reap(signal.SIGKILL)
            said = (f"no ready line within {timeout:g} s" if line is None else
                    f"it printed {line.strip()!r}" if line else f"exit code {code}")
            raise RuntimeError(f"{self.design} server did not start ({said}):\n{self.log()[-2000:]}")
        self.ports = parsed[1]
        return self.ports

    def start(self) -> "ServerProcess":
        """Start and wait for the ready line; once it has ports, on the same ports (``restart``)."""
        if self.ports:
            return self.restart()
        self.launch()
        self.wait_ready()
        return self

    def restart(self) -> "ServerProcess":
        """Start again on the same data dir and ports (after ``stop`` or ``kill``)."""
        if self.running:
            raise RuntimeError(f"{self.design} server is running (pid {self.pid}); crash or stop it first")
        for attempt in range(RESTART_TRIES):
            self.launch()
            try:
                self.wait_ready()
                return self
            except RuntimeError:
                if attempt == RESTART_TRIES - 1 or not self.port_was_taken():
                    raise
                time.sleep(0.1)
        return self

    def port_was_taken(self) -> bool:
        """Did the last start fail because one of its ports was in use?"""
        return "address already in use" in self.log().lower()

    # ------------------------------------------------------------------ signals

    @property
    def running(self) -> bool:
        return self._alive() is not None

    def _alive(self) -> subprocess.Popen | None:
        """The process, if it is running."""
        return self.proc if self.proc is not None and self.proc.poll() is None else None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def port(self) -> int:
        """The first port of the ready line (the design's main one)."""
        return next(iter(self.ports.values()))

    def pause(self) -> None:
        """SIGSTOP: the process stops where it is; connections stay open, nothing is answered."""
        if (proc := self._alive()) is not None:
            os.kill(proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if (proc := self._alive()) is not None:
            os.kill(proc.pid, signal.SIGCONT)
        self.paused = False

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> str:
        """Stop the server (SIGTERM: it closes its files cleanly); what it wrote to stderr
        since it started. A server that does not stop within ``timeout`` seconds is killed."""
        if self.proc is not None:
            self._reap(sig, timeout)
        return self.log()

    def signal_stop(self) -> None:
        """SIGTERM without waiting (``stop`` waits): several servers stop side by side."""
        if (proc := self._alive()) is not None:
            proc.send_signal(signal.SIGTERM)
            if self.paused:
                os.kill(proc.pid, signal.SIGCONT)

    def kill(self) -> str:
        """kill -9: no clean-up, no fsync."""
        return self.stop(signal.SIGKILL)

    def destroy_disk(self) -> int:
        """Empty the data dir of a dead server (``lab.worlds.live.disk.destroy``: a replaced disk),
        so its next start begins with no files; the bytes lost. Refused while it runs: a
        live process would keep writing into files that are no longer there."""
        if self.running:
            raise RuntimeError(f"{self.design} server is running (pid {self.pid}); kill it before "
                               f"destroying its disk")
        return destroy(self.data_dir)

    def power_cut(self, rng: random.Random, tear: bool = False) -> int:
        """The machine lost power (the process is dead): its files cut back to what its
        disk fsynced (``lab.worlds.live.disk.power_cut``), with ``tear`` a random prefix of
        each unsynced tail kept; the bytes lost."""
        return power_cut(self.data_dir, rng, tear)

    def set_fsync_delay(self, ns: int) -> None:
        """Every fsync of the server takes ``ns`` longer: its disk reads the control file
        beside its data dir at each fsync."""
        fsync_delay_path(self.data_dir).write_text(str(ns))

    def checkpoint(self) -> None:
        """Nothing to do: the lab's disk knows what was fsynced (a peer's file system does not)."""

    def finish(self) -> None:
        """Nothing is left behind by a ``lab serve``."""

    close = finish

    def _reap(self, sig: int, timeout: float = STOP_TIMEOUT) -> None:
        proc = self.proc
        assert proc is not None  # its callers reap a process they started
        if proc.poll() is None:
            proc.send_signal(sig)
            if self.paused and sig != signal.SIGKILL:
                os.kill(proc.pid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once it runs
            try:
                proc.wait(timeout=max(0.0, timeout))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        self.paused = False

    def log(self) -> str:
        """What the current (or last) process wrote to stderr."""
        return log_since(self.log_path, self._log_from)


def _readline(stdout: IO[str], timeout: float) -> str | None:
    """The process's next stdout line: "" if its stdout closes first, None if ``timeout`` passes."""
    import selectors

    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(stdout, selectors.EVENT_READ)
        # in short waits: a run interrupted while its server starts stops the server and closes this
        # pipe from another thread, and a closed pipe never wakes a select (the lab would hang on
        # until the start timeout, waiting for this thread)
        while (left := deadline - time.monotonic()) > 0:
            if stdout.closed:
                return ""
            if sel.select(min(left, 0.1)):
                try:
                    return stdout.readline()
                except ValueError:  # closed meanwhile
                    return ""
    return None
