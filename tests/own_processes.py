"""What on the machine belongs to the running test: its processes (they carry the test's tag,
set by conftest, in their environment: a server, the broker a peer starts, its epmd, all
inherit it) and its mounts (under the test's own folders). Tests run in parallel, so a
check that a run left nothing behind must not count another test's broker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

TAG = "QUEUE_LAB_TEST_TAG"  # its value: this test's, in os.environ (conftest)


def _environ_has_tag(pid: str, tag: bytes) -> bool:
    try:
        return tag in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # ended meanwhile, or not ours to read
        return False


def own_processes(match: Callable[[list[bytes]], bool] = lambda argv: True) -> dict[int, list[bytes]]:
    """The live (not zombie) processes this test started whose argv ``match``es, with their argv."""
    tag = f"{TAG}={os.environ[TAG]}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if argv != [b""] and state != "Z" and match(argv) and _environ_has_tag(entry, tag):
            found[int(entry)] = argv
    return found


def own_mounts(under: Path, contains: str) -> set[str]:
    """Mount points below ``under`` (the test's folder) whose path contains ``contains``."""
    root = str(under)
    return {point for point in (line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines())
            if point.startswith(root) and contains in point}
