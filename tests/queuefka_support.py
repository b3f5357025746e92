"""Test support for Queuefka: a broker core booted on one sim node, for core-level tests."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from lab.backends.queuefka.core.broker import QueuefkaCore
from lab.backends.queuefka.core.broker_api import Config
from models.world import SimWorld


def on_a_node(body: Callable[..., Awaitable[Any]], config: Config, seed: int = 1) -> Any:
    """``await body(world, control, cores)`` with a Queuefka core booted on sim node "q"
    (``cores[-1]``: the current incarnation's)."""
    world = SimWorld(seed=seed)
    cores: list[QueuefkaCore] = []

    async def boot(rt):
        cores.append(QueuefkaCore(rt, config))

    async def main(control):
        await world.start("q", boot)
        return await body(world, control, cores)

    return world.run(main)
