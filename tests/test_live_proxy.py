"""The live world's link proxy against a real echo server: forwarding, a partition that holds
bytes until the heal, added delay, and loss as retransmission stalls."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from lab.live.proxy import DOWN, RETRANSMIT, UP, LinkProxy


async def echo_server() -> tuple[asyncio.Server, int]:
    async def echo(reader, writer):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def round_trip(reader, writer, data: bytes, timeout: float = 5.0) -> float:
    start = time.monotonic()
    writer.write(data)
    await writer.drain()
    assert await asyncio.wait_for(reader.readexactly(len(data)), timeout) == data
    return time.monotonic() - start


def run(coro):
    return asyncio.run(coro)


def test_bytes_pass_both_ways_and_end_of_stream_closes_the_link():
    async def main():
        server, port = await echo_server()
        proxy = LinkProxy(("127.0.0.1", port))
        reader, writer = await asyncio.open_connection("127.0.0.1", await proxy.start())
        assert await round_trip(reader, writer, b"x" * 200_000) < 2.0
        writer.write_eof()  # the client is done: the server sees it and closes; so does the link
        assert await asyncio.wait_for(reader.read(), 2.0) == b""
        await proxy.close()
        server.close()

    run(main())


@pytest.mark.parametrize("direction", [UP, DOWN])
def test_a_blocked_direction_holds_bytes_until_it_heals(direction):
    async def main():
        server, port = await echo_server()
        proxy = LinkProxy(("127.0.0.1", port))
        reader, writer = await asyncio.open_connection("127.0.0.1", await proxy.start())
        await round_trip(reader, writer, b"before")
        proxy.block(direction)
        writer.write(b"during")
        await writer.drain()
        with pytest.raises(asyncio.TimeoutError):  # nothing comes back while the link is cut
            await asyncio.wait_for(reader.readexactly(6), 0.3)
        proxy.unblock(direction)
        # held, not lost: the same connection goes on after the heal
        assert await asyncio.wait_for(reader.readexactly(6), 2.0) == b"during"
        assert await round_trip(reader, writer, b"after") < 1.0
        await proxy.close()
        server.close()

    run(main())


def test_delay_is_added_per_direction_and_order_is_kept():
    async def main():
        server, port = await echo_server()
        proxy = LinkProxy(("127.0.0.1", port), rng=random.Random(1))
        reader, writer = await asyncio.open_connection("127.0.0.1", await proxy.start())
        fast = await round_trip(reader, writer, b"a")
        proxy.set_delay(UP, 0.05, jitter=0.02)
        proxy.set_delay(DOWN, 0.05)
        slow = await round_trip(reader, writer, b"b")
        assert slow >= 0.1 and slow > fast
        for i in range(20):  # jittered chunks still arrive in the order sent
            writer.write(b"%03d" % i)
            await writer.drain()
        got = await asyncio.wait_for(reader.readexactly(60), 5.0)
        assert got == b"".join(b"%03d" % i for i in range(20))
        await proxy.close()
        server.close()

    run(main())


def test_loss_stalls_a_chunk_by_a_retransmission_timeout():
    async def main():
        server, port = await echo_server()
        proxy = LinkProxy(("127.0.0.1", port), rng=random.Random(2))
        reader, writer = await asyncio.open_connection("127.0.0.1", await proxy.start())
        proxy.set_loss(UP, 1.0)
        assert await round_trip(reader, writer, b"lost once") >= RETRANSMIT
        proxy.set_loss(UP, 0.0)
        assert await round_trip(reader, writer, b"not lost") < RETRANSMIT
        with pytest.raises(ValueError):
            proxy.set_loss(UP, 1.5)
        await proxy.close()
        server.close()

    run(main())


def test_a_link_to_a_server_that_is_down_is_closed():
    async def main():
        server, port = await echo_server()
        server.close()
        await server.wait_closed()
        proxy = LinkProxy(("127.0.0.1", port))
        reader, writer = await asyncio.open_connection("127.0.0.1", await proxy.start())
        assert await asyncio.wait_for(reader.read(), 2.0) == b""
        await proxy.close()

    run(main())
