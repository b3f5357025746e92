"""The live world: the Runtime port on asyncio, real files with fsync and loopback TCP."""

from lab.worlds.live.runtime import LiveRuntime
from lab.worlds.live.world import LiveWorld

__all__ = ["LiveRuntime", "LiveWorld"]
