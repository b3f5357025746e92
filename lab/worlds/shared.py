"""What the two worlds share to implement the Runtime port: disk path checks, coroutine
wrapping for ``spawn``, and the seeded random source of a node.

Only the worlds (``lab.worlds.live``, ``models``) import this; cores see the port alone.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import PurePosixPath
from typing import Any, Awaitable, Coroutine, TypeVar

T = TypeVar("T")


def checked_relative(path: str) -> str:
    """Normalise a disk path, refusing absolute paths and ``..``."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"disk path must be a non-empty string, got {path!r}")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"disk path must stay under the node's root: {path!r}")
    return str(pure)


def as_coroutine(awaitable: Awaitable[T]) -> Coroutine[Any, Any, T]:
    """A coroutine for any awaitable, so ``spawn`` takes ``rt.sleep(1)`` as well as ``f()``."""
    if asyncio.iscoroutine(awaitable):
        return awaitable

    async def wrapper() -> T:
        return await awaitable

    return wrapper()


def node_random(seed: int, node: str, incarnation: int = 0) -> random.Random:
    """The seeded random source of one node incarnation (string seeds hash stably)."""
    return random.Random(f"{seed}:{node}:{incarnation}")
