"""The live world: the Runtime port on asyncio, real files with fsync and loopback TCP."""

from lab.live.runtime import LiveRuntime
from lab.live.world import LiveWorld

__all__ = ["LiveRuntime", "LiveWorld"]
