"""The live world's node-to-node messages keep the Runtime port's error set when a peer's
connection has just closed: a call or send on it is ``Unreachable`` (not sent), never the
event loop's own RuntimeError for a closed transport, which a design's handler would pass on
as an internal error (Primer's put, when a replica crashed, answered HTTP 500 so)."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from lab.design.runtime import Unreachable
from lab.worlds.live.net import _Connection


async def _closed_connection() -> _Connection:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
    conn = _Connection(reader, writer)
    writer.transport.abort()  # the peer reset it: the transport is closed
    server.close()
    await asyncio.sleep(0.01)  # uvloop closes the handle on its next turn
    return conn


def test_a_write_on_a_closed_connection_is_unreachable_and_the_connection_is_not_reused():
    async def main() -> None:
        conn = await _closed_connection()
        assert not conn.alive  # the next call opens a new connection
        with pytest.raises(Unreachable, match="closed before the request was sent"):
            conn.write(b"frame", "n2")
        conn.reader_task.cancel()

    uvloop.run(main())
