"""What a live node's runtime and network read of the world they run in: the ``Host``.

``LiveWorld`` is the one host; its runtimes (``runtime``) and networks (``net``) are written
against this protocol, so the world can make them without the three rooms importing each
other in a circle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Host(Protocol):
    seed: int  # the run's seed: each node's random source is drawn from it
    root: Path  # the folder the nodes' disks live under, unless ``disk_roots`` names another
    disk_roots: dict[str, Path]
    epoch_ns: int  # wall-clock and monotonic readings taken together: a node's clock is epoch + elapsed
    mono_ns: int
    addresses: dict[str, tuple[str, int]]  # the address book: a node's peer port, by name
    bind: dict[str, tuple[str, int]]  # where this process's servers listen, by port name
    listening: dict[tuple[str, str], int]  # (node, port name) -> the port bound in this process
    stretched: dict[str, float]  # the slowdown test hook: a node's requests take this many times longer

    def address(self, node: str, port: str, source: str | None = None) -> tuple[str, int]:
        """Where ``source`` reaches ``node``'s ``port`` (through the link's proxy, if it has one)."""
        ...
