"""Queuefka's HTTP front, hardened: refused requests write nothing, unknown topics are 404s,
groups are created and deleted explicitly, every error is JSON, slow headers are cut off.

Each test serves a real core on the live world behind the real aiohttp front on loopback
and talks to it with httpx (or a raw socket)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Awaitable, Callable

import httpx

from lab.backends.queuefka.core import Config, QueuefkaCore
from lab.backends.queuefka.http_front import start_http
from lab.runtime import LiveWorld

Exercise = Callable[[httpx.AsyncClient, QueuefkaCore, int], Awaitable[Any]]


def serve(tmp_path: Path, exercise: Exercise, config: Config | None = None, **http: Any) -> Any:
    """Run ``exercise(client, core, port)`` against a fresh server over ``tmp_path/data``."""
    world = LiveWorld(root=tmp_path, disk_roots={"q": tmp_path / "data"})

    async def main(_control):
        cores: list[QueuefkaCore] = []

        async def boot(rt):
            cores.append(QueuefkaCore(rt, config or Config()))

        await world.start("q", boot)
        runner, port = await start_http(cores[0], **http)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                return await exercise(client, cores[0], port)
        finally:
            await runner.cleanup()
            cores[0].close()

    return world.run(main)


def files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


# -- 1. a refused commit writes nothing ----------------------------------------------------------

def test_a_refused_commit_writes_nothing(tmp_path: Path):
    data = tmp_path / "data"

    async def exercise(http: httpx.AsyncClient, core: QueuefkaCore, port: int) -> None:
        assert (await http.post("/topics/t/messages", content=b"one")).status_code == 201
        before = files(data)
        for address in (999, 5, -1):  # past the end, inside a record, negative
            r = await http.post("/topics/t/groups/billing/commit", json={"address": address})
            assert r.status_code == 400, r.text
        r = await http.post("/topics/nosuch/groups/billing/commit", json={"address": 0})
        assert r.status_code == 404 and "no topic" in r.json()["error"]
        assert files(data) == before  # no billing.group, no nosuch/ folder
        assert "billing" not in core.topics["t"].groups  # nor a group in memory
        assert (await http.get("/topics/t")).json()["groups"] == {}

    serve(tmp_path, exercise)
