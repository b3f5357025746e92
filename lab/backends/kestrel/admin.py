"""Kestrel's admin HTTP port (the original's ostrich admin): ``/stats.json`` and
``/stats.txt``, every global and per-queue counter, for ``lab serve kestrel``.

The queue ports themselves are the node's (``lab.backends.kestrel.node``), served by the
world: a live world over TCP (``lab.worlds.live.streams``), the sim world over simulated links.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lab.backends.kestrel.core.collection import QueueCollection


class KestrelAdmin:
    """The admin port of one collection; ``start()`` binds, ``stop()`` closes."""

    def __init__(self, collection: QueueCollection):
        self.collection = collection
        self.runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> int:
        """Bind ``host:port`` (0 = any free one); the bound port."""
        self.runner = web.AppRunner(self._admin_app(), access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def _admin_app(self) -> web.Application:
        app = web.Application()
        app.add_routes([web.get("/stats.json", self._stats_json), web.get("/stats.txt", self._stats_txt)])
        return app

    def stats(self) -> dict[str, Any]:
        """Global and per-queue stats, named as the original's ostrich admin port."""
        c = self.collection
        out: dict[str, Any] = {k: _number(v) for k, v in c.global_stats()}
        out["cmd_monitor"] = c.stats.cmd_monitor
        out["cmd_monitor_get"] = c.stats.cmd_monitor_get
        out["status"] = c.status
        for name in c.names():
            for key, value in c.queue_stats(name):
                out[f"q/{name}/{key}"] = _number(value)
        for alias in sorted(c.config.aliases):
            for key, value in c.queue_stats(alias):
                out[f"q/{alias}/{key}"] = _number(value)
        return out

    async def _stats_json(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _stats_txt(self, request: web.Request) -> web.Response:
        lines = [f"{k}: {v}" for k, v in self.stats().items()]
        return web.Response(text="\n".join(lines) + "\n")

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def _number(value: str) -> Any:
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return value


__all__ = ["KestrelAdmin"]
