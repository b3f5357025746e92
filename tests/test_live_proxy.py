"""The live world's link proxy against a real echo server: forwarding, a partition that holds
bytes until the heal, added delay, and loss as retransmission stalls."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from lab.worlds.live.proxy import DOWN, RETRANSMIT, UP, LinkProxy


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


def test_live_links_route_clients_through_proxies_and_faults_compose_per_link():
    from lab.worlds.live.proxy import LiveLinks

    async def main():
        server, port = await echo_server()
        links = LiveLinks(seed=3)
        links.block("c0", "s")  # a fault placed before the client connects applies when it does
        host, proxied = links.address("c0", "s", "memcache", ("127.0.0.1", port))
        assert links.address("c0", "s", "memcache", ("127.0.0.1", port)) == (host, proxied)  # one proxy a link
        reader, writer = await asyncio.open_connection(host, proxied)
        writer.write(b"held")
        await writer.drain()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(reader.readexactly(4), 0.3)
        links.block("c0", "s")  # two overlapping partitions: the link opens after both heal
        links.unblock("c0", "s")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(reader.readexactly(4), 0.2)
        links.unblock("c0", "s")
        assert await asyncio.wait_for(reader.readexactly(4), 2.0) == b"held"
        # another client's link is its own
        other = links.address("c1", "s", "memcache", ("127.0.0.1", port))
        links.add_delay("s", "c1", 100_000_000)  # server -> c1: the DOWN direction of c1's proxy
        r1, w1 = await asyncio.open_connection(*other)
        assert await round_trip(r1, w1, b"slow") >= 0.1
        assert await round_trip(reader, writer, b"fast") < 0.1
        links.remove_delay("s", "c1", 100_000_000)
        assert await round_trip(r1, w1, b"fast") < 0.1
        await links.close()
        server.close()

    run(main())


def test_a_server_that_resets_ends_the_client_connection_at_once():
    """A killed server's socket resets: the client through the proxy must see its connection
    end, not hold it open waiting for a reply that never comes (a consumer would wait forever)."""
    import socket
    import struct

    async def main():
        accepted = asyncio.Event()
        held = []

        async def reset_later(reader, writer):
            held.append(writer)
            accepted.set()

        server = await asyncio.start_server(reset_later, "127.0.0.1", 0)
        proxy = LinkProxy(("127.0.0.1", server.sockets[0].getsockname()[1]))
        reader, writer = await asyncio.open_connection("127.0.0.1", await proxy.start())
        writer.write(b"a request")  # unread by the server: its close is a reset
        await writer.drain()
        await asyncio.wait_for(accepted.wait(), 2.0)
        await asyncio.sleep(0.05)
        sock = held[0].get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close as RST
        held[0].transport.abort()
        with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(reader.readexactly(1), 2.0)
        writer.close()
        await proxy.close()
        server.close()

    run(main())
