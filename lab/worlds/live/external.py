"""Servers the lab did not write: a real broker's own binary as a process of the live world
(``lab.design.peer``), with the verbs the world's faults use — the same as a ``lab serve``
process's (``lab.worlds.live.processes``), so the world treats both alike.

Each node has a folder of its own (config, pid file, log) and a data dir that sits on the
power-loss file system (``lab.worlds.live.powerfs``) where FUSE is available, so ``power_cut``
drops what the broker never fsynced. Its ports are picked when it first starts (again, if
the broker's log says one was taken before it bound it) and then kept, so a restart comes
back where its clients look. The broker runs in a session of its own: a kill -9 kills every
process of it (a wrapper script and the VM it started), a pause stops only the process the
peer names (``Launch.pid_file``: the VM, not the script), and a stop runs the peer's
``after_stop`` commands for what it leaves behind on purpose (an Erlang port mapper).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Sequence

from lab.design.peer import Launch, Place
from lab.worlds.live.processes import STOP_TIMEOUT, die_with_parent, log_since

log = logging.getLogger(__name__)

POLL_S = 0.05  # between readiness probes
AFTER_STOP_TIMEOUT = 5.0  # seconds an after_stop command may take (an `epmd -kill` takes milliseconds)


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
QUIET_FROM = 10000  # the lowest port picked: below it, well-known services' registered ports
QUIET_TRIES = 64


def quiet_ports() -> range | None:
    """The ports between ``QUIET_FROM`` and the kernel's ephemeral range, where it has a
    thousand or more; None elsewhere (then the kernel picks)."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return range(QUIET_FROM, low) if low - QUIET_FROM >= 1000 else None


def free_ports(names: tuple[str, ...]) -> dict[str, int]:
    """A free loopback port per name, all different (bound at once, then released for the
    broker to bind). Picked below the kernel's ephemeral range: the kernel gives a port of
    that range to every outgoing connection, and one could take a picked port in the
    seconds before a broker binds it (as a broker start that finds a port taken is started
    again on fresh ones, this makes that rare, not impossible)."""
    pool: Sequence[int] = quiet_ports() or ()  # a quiet range has a thousand ports or more
    pick = random.SystemRandom()  # never the seeded module generator: parallel runs would pick alike
    socks: list[socket.socket] = []
    try:
        for _ in names:
            for _attempt in range(QUIET_TRIES if pool else 0):
                s = socket.socket()
                try:
                    s.bind(("127.0.0.1", pick.choice(pool)))
                    break
                except OSError:
                    s.close()
            else:
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
            socks.append(s)
        return {name: s.getsockname()[1] for name, s in zip(names, socks)}
    finally:
        for s in socks:
            s.close()


class ExternalProcess:
    """One broker node of a peer (``lab.design.peer.Peer``) in folder ``home``."""

    def __init__(self, peer: Any, node: str, home: Path):
        self.peer = peer
        self.design = peer.name
        self.home = Path(home)
        self.data_dir = self.home / "data"
        self.log_path = self.home.parent / f"{self.home.name}.log"
        self.ports: dict[str, int] = free_ports(tuple(peer.ports))
        self.place = Place(node, self.home, self.data_dir, dict(self.ports))
        self.ready_once = False  # ready at least once: its ports are known to clients and proxies
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.target: int | None = None  # the pid that pause signals
        self._launch: Launch | None = None
        self._log_from = 0
        self._cleaned_up = False
        self.power: Any = None  # the power-loss file system under data_dir, once mounted
        self.no_power: str | None = None  # why there is none

    # ------------------------------------------------------------------ the disk

    def mount(self) -> None:
        """Put the data dir on the power-loss file system (or say why not, in ``no_power``)."""
        from lab.worlds.live.powerfs import PowerFs, unavailable

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.no_power = unavailable()
        if self.no_power is None:
            backing = self.home / "disk"
            backing.mkdir(parents=True, exist_ok=True)
            self.power = PowerFs(backing, self.data_dir)
            self.power.start()

    def checkpoint(self) -> None:
        """Everything written so far counts as durable (after the broker's boot and set-up)."""
        if self.power is not None:
            self.power.checkpoint()

    def power_cut(self, rng: random.Random, tear: bool = False) -> int:
        """The machine lost power (the process is dead): every write not fsynced is undone;
        the bytes undone. ``tear`` has no meaning here: no torn writes on this disk."""
        if self.power is None:
            raise RuntimeError(f"{self.design}: no power-loss file system ({self.no_power}): a crash cannot "
                               f"lose the page cache")
        undone, _files = self.power.crash()
        return undone

    def set_fsync_delay(self, ns: int) -> None:
        """Every fsync of the broker takes ``ns`` longer (the disk-delay fault)."""
        if self.power is None:
            raise RuntimeError(f"{self.design}: no power-loss file system ({self.no_power}): its fsyncs cannot "
                               f"be slowed")
        self.power.delay(ns)

    def destroy_disk(self) -> int:
        """Empty the data dir of a dead broker (a replaced disk); the bytes lost."""
        if (proc := self._alive()) is not None:
            raise RuntimeError(f"{self.design} is running (pid {proc.pid}); kill it before destroying its disk")
        lost = 0
        for child in list(self.data_dir.iterdir()):
            if child.is_dir() and not child.is_symlink():
                lost += sum(f.stat().st_size for f in child.rglob("*") if f.is_file() and not f.is_symlink())
                shutil.rmtree(child)
            else:
                lost += child.lstat().st_size
                child.unlink()
        if self.power is not None:
            self.power.checkpoint()  # the removals are what the new disk holds
        return lost

    def close(self) -> None:
        """Unmount the file system (after the broker stopped); idempotent."""
        if self.power is not None:
            self.power.stop()
            self.power = None

    # ------------------------------------------------------------------ starting

    def launch(self) -> None:
        """Start the broker and return at once (``wait_ready`` probes it)."""
        if (proc := self._alive()) is not None:
            raise RuntimeError(f"{self.design} is running (pid {proc.pid}); stop it first")
        self.home.mkdir(parents=True, exist_ok=True)
        if self.power is None and self.no_power is None:
            self.mount()
        self._launch = launch = self.peer.launch(self.place)
        for relative, text in launch.files.items():
            (self.home / relative).parent.mkdir(parents=True, exist_ok=True)
            (self.home / relative).write_text(text)
        if launch.pid_file:
            (self.home / launch.pid_file).unlink(missing_ok=True)
        self._log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                list(launch.argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.home,
                env={**os.environ, **launch.env}, preexec_fn=die_with_parent(),
                start_new_session=True)  # its own process group: kill -9 reaches every process of it
        self.paused = False
        self.target = None
        self._cleaned_up = False  # its after_stop commands have not run since this start

    def wait_ready(self, timeout: float | None = None) -> dict[str, int]:
        """Block until the peer's probe says ready; the ports. RuntimeError (with the log's
        tail) if the process ends first or the time runs out."""
        assert self.proc is not None and self._launch is not None
        launch = self._launch
        timeout = launch.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self._after_stop()
                raise RuntimeError(f"{self.design} did not start (exit code {code}):\n{self.log()[-2000:]}")
            if self.target is None:
                self.target = self._target_pid()
            try:
                ready = self.target is not None and launch.ready()
            except Exception:  # a probe that cannot connect yet
                ready = False
            if ready:
                self.ready_once = True
                return self.ports
            if time.monotonic() > deadline:
                self.stop(signal.SIGKILL)
                raise RuntimeError(f"{self.design} was not ready within {timeout:g} s:\n"
                                   f"{self.log()[-2000:]}")
            time.sleep(POLL_S)

    def _target_pid(self) -> int | None:
        assert self.proc is not None  # asked while it starts
        if self._launch is None or not self._launch.pid_file:
            return self.proc.pid
        try:
            return int((self.home / self._launch.pid_file).read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None  # not written yet

    def start(self, tries: int = 3) -> "ExternalProcess":
        """Launch and wait until ready; a first start that finds a port of it taken (another
        process bound it after ``free_ports`` released it) goes again on fresh ports."""
        for attempt in range(tries):
            self.launch()
            try:
                self.wait_ready()
                return self
            except RuntimeError:
                if attempt == tries - 1 or not self.port_was_taken():
                    raise
                log.warning("%s did not start: one of its ports %s was taken (its log says %r); starting "
                            "again on fresh ones", self.design, self.ports, self.taken_port_sign())
                self.repick_ports()
        return self

    def port_was_taken(self) -> bool:
        """Did the last start fail because one of its ports was in use (its log says so)?"""
        return self.taken_port_sign() is not None

    def taken_port_sign(self) -> str | None:
        """What in the last start's log says a port was taken (``Launch.port_taken``), if any."""
        text = self.log().lower()
        signs = self._launch.port_taken if self._launch is not None else Launch.port_taken
        return next((sign for sign in signs if sign in text), None)

    def repick_ports(self) -> None:
        """Fresh ports, for a broker that was never ready (none of its ports was handed out)."""
        if self.ready_once:
            raise RuntimeError(f"{self.design} was ready on {self.ports}: clients know them, they stay")
        self.ports = free_ports(tuple(self.peer.ports))
        self.place = Place(self.place.node, self.home, self.data_dir, dict(self.ports))

    # ------------------------------------------------------------------ signals

    @property
    def running(self) -> bool:
        return self._alive() is not None

    def _alive(self) -> subprocess.Popen | None:
        """The broker's process, if it is running."""
        return self.proc if self.proc is not None and self.proc.poll() is None else None

    @property
    def pid(self) -> int | None:
        return self.target or (self.proc.pid if self.proc is not None else None)

    @property
    def port(self) -> int:
        return next(iter(self.ports.values()))

    def pause(self) -> None:
        """SIGSTOP to the broker's real process: it stops where it is; sockets stay open."""
        if self.running and self.target is not None:
            os.kill(self.target, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.running and self.target is not None:
            os.kill(self.target, signal.SIGCONT)
        self.paused = False

    def signal_stop(self) -> None:
        """SIGTERM to every process of the broker, without waiting."""
        if self.running:
            self._group(signal.SIGTERM)
            if self.paused:
                self._group(signal.SIGCONT)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> str:
        """Stop the broker (SIGTERM: its own clean stop; SIGKILL: nothing more is written) and
        wait until no process of it is left; then run its ``after_stop`` commands."""
        if self.proc is not None:
            self._group(sig)
            if self.paused and sig != signal.SIGKILL:
                self._group(signal.SIGCONT)  # a stopped process acts on SIGTERM only once it runs
            if not self._gone(timeout):
                self._group(signal.SIGKILL)
                self._gone(STOP_TIMEOUT)
            self.proc.wait()
            self.paused = False
            if sig != signal.SIGKILL:
                self._after_stop()
        return self.log()

    def kill(self) -> str:
        """kill -9 every process of the broker: no clean-up, nothing more written."""
        return self.stop(signal.SIGKILL)

    def finish(self) -> None:
        """The run is over: whatever the broker left running goes too."""
        self._after_stop()

    def _group(self, sig: int) -> None:
        assert self.proc is not None  # signalled once started
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _gone(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for every process of the broker's group to end."""
        assert self.proc is not None  # waited for once started
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            self.proc.poll()  # reap the leader, or the group never empties
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def _after_stop(self) -> None:
        """Run the launch's ``after_stop`` commands, once per start; one that fails or hangs
        is logged, never raised: what follows (the unmount, the next start) must still happen."""
        if self._cleaned_up:
            return
        self._cleaned_up = True
        launch = self._launch
        if launch is None:
            return
        for argv in launch.after_stop:
            try:
                subprocess.run(list(argv), env={**os.environ, **launch.env}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=AFTER_STOP_TIMEOUT, check=False)
            except (OSError, subprocess.TimeoutExpired) as e:
                # e.g. `epmd -kill` on a port that another process's listener took
                log.warning("%s: after it stopped, %s failed: %s", self.design, " ".join(argv), e)

    def log(self) -> str:
        """What the broker wrote since its current start (stdout and stderr)."""
        return log_since(self.log_path, self._log_from)
