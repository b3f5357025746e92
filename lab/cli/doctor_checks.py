"""What each part of the lab needs from the machine, checked: one ``Check`` per item (Python,
Java, Chromium, FUSE, each real broker's server, free disk, the default ports), for
`lab doctor` to print.

Each check finds its item the way the part that uses it does, so the doctor cannot pass what
the part would then fail to find: a broker through its peer's own ``executable()``, FUSE
through the power-loss file system's ``unavailable()``, the results folder through
``lab.history.paths``, Java as PySpark's launcher does (``JAVA_HOME``, else the PATH). It
sits with the command rather than in a lower room because it reaches into all of them.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

MIN_PYTHON = (3, 11)
MIN_JAVA = 17
#: below this much free space where results go, the disk line warns: a `make compare` writes
#: tens of MB, but matrices, swarms and Spark's spills take gigabytes
LOW_DISK = 2 * 1024**3


@dataclass(frozen=True)
class Check:
    """One line of `lab doctor`: an item, whether it is there, and if not what to do."""

    item: str
    ok: bool
    found: str  # what was found (ok), or what is missing and why
    needed_by: str  # the part of the lab that needs it
    required: bool  # needed by `make compare`: a miss fails the doctor
    fix: str = ""  # the one command that installs it (or what to do)
    status: str = ""  # the word for a miss: missing, low, busy

    def line(self) -> str:
        need = "required" if self.required else "optional"
        if self.ok:
            for_whom = f" — {self.needed_by}" if self.needed_by else ""
            return f"{'ok':<8} {self.item:<11} {need:<9} {self.found}{for_whom}"
        return f"{self.status or 'missing':<8} {self.item:<11} {need:<9} {self.found} — {self.needed_by}: {self.fix}"


def python() -> Check:
    """The interpreter running the lab: new enough, and the lab installed in it (designs are
    found by the distribution's entry points), ideally the checkout's own .venv."""
    from importlib.metadata import PackageNotFoundError, version

    from lab.history.paths import REPO

    here = ".".join(map(str, sys.version_info[:3]))
    needed_by = "every command"
    if sys.version_info[:2] < MIN_PYTHON:
        return Check("python", False, f"Python {here} at {sys.executable}, older than 3.11", needed_by, True,
                     "sudo apt-get install -y python3 python3-venv (Debian 12's is 3.11), then make .venv/.installed")
    try:
        installed = f"queue-lab {version('queue-lab')} installed"
    except PackageNotFoundError:
        return Check("python", False, f"Python {here} at {sys.executable}, but queue-lab is not installed in it",
                     needed_by, True, "make .venv/.installed (the checkout's .venv with the lab installed)")
    venv = REPO / ".venv"
    where = ("the checkout's .venv" if Path(sys.prefix).resolve() == venv.resolve()
             else f"not the checkout's .venv ({venv})")
    return Check("python", True, f"Python {here} at {sys.executable} ({where}; {installed})", needed_by, True)


def java_path() -> str | None:
    """The java PySpark starts: ``$JAVA_HOME/bin/java`` when JAVA_HOME is set (Spark's launcher
    then uses no other), else the PATH's (``lab.aggregate.spark.check_java`` asks the same)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def java_version(java: str) -> tuple[int, str] | None:
    """The major version ``java -version`` prints, and the whole (``"17.0.15"`` → 17,
    ``"1.8.0_392"`` → 8); None if it does not run or names none."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "((\d+)(?:\.(\d+))?[^"]*)"', done.stderr + done.stdout)
    if found is None:
        return None
    major = int(found.group(2))
    return (int(found.group(3) or 0) if major == 1 else major), found.group(1)


def java() -> Check:
    needed_by, fix = "make compare (PySpark: the aggregation)", "sudo apt-get install -y openjdk-17-jre-headless"
    path = java_path()
    if path is None:
        return Check("java", False, "no java on PATH and no JAVA_HOME", needed_by, True, fix)
    version = java_version(path)
    if version is None:
        return Check("java", False, f"{path} does not run or names no version", needed_by, True, fix)
    major, whole = version
    if major < MIN_JAVA:
        return Check("java", False, f"Java {whole} at {path}; Spark needs {MIN_JAVA}+", needed_by, True,
                     f"{fix} (and point JAVA_HOME or the PATH at it)")
    return Check("java", True, f"Java {whole} at {path}", needed_by, True)


def chromium() -> Check:
    """Chromium and its ChromeDriver, on the PATH as `make browser` looks for them."""
    found = {name: shutil.which(name) for name in ("chromium", "chromedriver")}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        return Check("chromium", False, f"no {' and no '.join(missing)} on PATH", "the web-UI test (lab load --web)",
                     False, "sudo apt-get install -y chromium chromium-driver")
    return Check("chromium", True, f"{found['chromium']}, {found['chromedriver']}", "the web-UI test (lab load --web)",
                 False)


def fuse() -> Check:
    """/dev/fuse, fusermount3, libfuse3 and mfusepy: what the power-loss file system mounts with."""
    from lab.worlds.live.powerfs.mount import unavailable

    needed_by = "power-loss crashes of real brokers (powerfs)"
    why = unavailable()
    if why is None:
        return Check("fuse", True, f"/dev/fuse, {shutil.which('fusermount3')}, libfuse3, mfusepy", needed_by, False)
    if "/dev/fuse" in why:  # the kernel's or the container's, not a package
        fix = "sudo modprobe fuse (in a container: start it with --device /dev/fuse)"
    elif "mfusepy" in why:
        fix = "make .venv/.installed (mfusepy is a dependency of the lab)"
    else:
        fix = "sudo apt-get install -y fuse3"
    return Check("fuse", False, why, needed_by, False, fix)


def brokers() -> list[Check]:
    """Each real broker's server, looked up by its peer's own ``executable()``: the lookup
    that starts it."""
    from lab.design.peer import MissingBinary, Peer
    from lab.design.registry import backend_class, peers

    checks = []
    for name in peers():
        cls = backend_class(name)
        assert issubclass(cls, Peer)  # peers() names the designs that are (is_peer)
        needed_by = f"the {name} peer (lab brokers, live matrix)"
        try:
            checks.append(Check(name, True, cls.executable(), needed_by, False))
        except MissingBinary:
            checks.append(Check(name, False, f"no {cls.binary}", needed_by, False,
                                f"sudo apt-get install -y {cls.package}"))
    return checks


def disk() -> Check:
    """Free space where results go (``lab.history.paths.results_dir``: $QUEUE_LAB_RESULTS, the
    checkout's ``results/`` when working inside it, else ./results)."""
    from lab.history.paths import results_dir

    where = results_dir()
    probe = where
    while not probe.exists() and probe != probe.parent:  # not made yet: the disk it will be made on
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    found = f"{free / 1024**3:.1f} GiB free at {where}"
    if free < LOW_DISK:
        return Check("disk", False, f"only {found}", "runs, matrices and Spark's spills", False,
                     f"free space there or set QUEUE_LAB_RESULTS to a folder on a bigger disk "
                     f"(warns below {LOW_DISK / 1024**3:.0f} GiB)", status="low")
    return Check("disk", True, found, "", False)


def ports(defaults: Mapping[int, Sequence[str]]) -> list[Check]:
    """The fixed ports commands bind by default (port → the commands, with their flag): one
    line when every one is free, else one per port another process holds."""
    busy = [port for port in sorted(defaults) if not _free(port)]
    if not busy:
        return [Check("ports", True, "free: " + " ".join(map(str, sorted(defaults))),
                      "the defaults of lab serve and lab load", False)]
    checks = []
    for port in busy:
        commands = list(defaults[port])
        flags = sorted({command.rsplit("(", 1)[-1].rstrip(")") for command in commands if "(" in command})
        checks.append(Check(f"port {port}", False, f"taken by {_owner(port)}", ", ".join(commands), False,
                            f"give {' / '.join(flags) or 'another port'} another port, or stop that process",
                            status="busy"))
    return checks


def _free(port: int) -> bool:
    """Can a server bind 127.0.0.1:port now? SO_REUSEADDR as the lab's servers set it, so a
    closed connection's TIME_WAIT does not count, and a listener does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _owner(port: int) -> str:
    """The process listening on ``port`` ("python3 (pid 123)"), from /proc; "another process"
    when it cannot be told (not Linux, or another user's process)."""
    inodes = set(_listening_inodes(port))
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            for fd in (proc / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return f"{(proc / 'comm').read_text().strip()} (pid {proc.name})"
        except OSError:  # gone, or not ours to read
            continue
    return "another process"


def _listening_inodes(port: int) -> Iterable[str]:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local address "0100007F:1F91", state 0A = LISTEN, inode the tenth field
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                yield fields[9]


def every(default_ports: Mapping[int, Sequence[str]]) -> list[Check]:
    """Every check, in the order `lab doctor` prints them."""
    return [python(), java(), chromium(), fuse(), *brokers(), disk(), *ports(default_ports)]
