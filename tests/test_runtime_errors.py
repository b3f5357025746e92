"""The Runtime port's network errors are one set, the same in both worlds: a server that
closes a connection after reading the request is ``ConnectionLost`` at the client's
exchange, a port nobody serves is ``Unreachable``, a reply that never comes is ``CallTimeout``."""

from __future__ import annotations

import pytest

from lab.design import CallTimeout, ConnectionLost, Unreachable, outcome_of
from lab.worlds.live import LiveWorld
from models.world import SimWorld
from tests.line_protocol import LineConnection


@pytest.fixture(params=["sim", "live"])
def world(request, tmp_path):
    if request.param == "sim":
        return SimWorld(seed=3)
    return LiveWorld(seed=3, root=tmp_path)


class _Crashy(LineConnection):
    """A line protocol: ``crash`` is read and the connection closed with no reply (a server
    that dies mid-request); ``hang`` never answers; anything else is echoed."""

    def __init__(self, rt):
        self.rt = rt

    async def handle(self, request: str, send) -> bool:
        if request == "crash":
            return False
        if request == "hang":
            await self.rt.sleep(30)
        await send(request.encode() + b"\n")
        return True

    def lost(self) -> None:
        pass


def _until(end: bytes):
    """A reply reader: the reply, stripped, once the bytes so far end with ``end``."""
    buffer: list[bytes] = []

    def receive(chunk: bytes):
        buffer.append(chunk)
        got = b"".join(buffer)
        return got.decode().strip() if got.endswith(end) else None

    return receive


def test_the_same_events_raise_the_same_documented_errors(world):
    async def body(control):
        async def boot(node):
            await node.net.listen("lines", lambda: _Crashy(node))

        await world.start("server", boot)
        client = world.node("client")
        conn = client.net.connect("server", "lines")
        seen = [await conn.exchange(b"hello\n", _until(b"\n"), 2.0)]
        with pytest.raises(ConnectionLost) as lost:
            await conn.exchange(b"crash\n", _until(b"\n"), 2.0)
        seen.append(type(lost.value))
        seen.append(await conn.exchange(b"again\n", _until(b"\n"), 2.0))  # a new connection
        with pytest.raises(CallTimeout):
            await conn.exchange(b"hang\n", _until(b"\n"), 0.1)
        with pytest.raises(Unreachable):
            await client.net.connect("server", "nobody-serves").exchange(b"x\n", _until(b"\n"), 0.5)
        with pytest.raises(Unreachable):
            await client.net.connect("no-such-node", "lines").exchange(b"x\n", _until(b"\n"), 0.5)
        await conn.close()
        return seen

    assert world.run(body) == ["hello", ConnectionLost, "again"]


def test_the_set_is_classified_and_a_lost_connection_is_still_a_reset():
    assert issubclass(ConnectionLost, ConnectionResetError)
    assert outcome_of(Unreachable("x")) == "fail"
    assert outcome_of(ConnectionLost("x")) == "info"
    assert outcome_of(CallTimeout("x")) == "info"


def test_a_crashed_server_resets_its_connections_alike_in_both_worlds(world):
    """A server process killed mid-request (kill -9, its machine up) resets the connections it
    had: the client's read ends at once with ConnectionLost, not at its timeout; while it is
    down, a request is reset again (live, the link's proxy closes it); once it is back the
    same connection object reconnects. A real design's server: Kestrel's memcache port."""
    from lab.design.registry import backend_class

    design = backend_class("kestrel")(world)

    async def body(control):
        await design.start()
        node = design.server_nodes[0]
        client = world.node("client")
        conn = client.net.connect(node, "memcache")
        assert await conn.exchange(b"get q\r\n", _until(b"END\r\n"), 5.0) == "END"
        waiting = client.spawn(conn.exchange(b"get q/t=5000\r\n", _until(b"END\r\n"), 10.0))  # blocks in the server
        await client.sleep(0.3)
        crashed = client.now()
        world.crash(node)
        with pytest.raises(ConnectionLost):
            await waiting
        reset_after = client.now() - crashed
        with pytest.raises(ConnectionLost):
            await conn.exchange(b"get q\r\n", _until(b"END\r\n"), 5.0)
        world.restart(node)
        await world.settle()
        for _ in range(50):  # the restarted server takes a moment to listen again
            try:
                answer = await conn.exchange(b"get q\r\n", _until(b"END\r\n"), 5.0)
                break
            except (ConnectionLost, Unreachable):
                await client.sleep(0.1)
        await conn.close()
        await design.stop()
        return reset_after, answer

    reset_after, answer = world.run(body)
    assert reset_after < 1.0, f"the reset came {reset_after:.2f} s after the crash: the client waited for a timeout"
    assert answer == "END"


def test_a_connection_says_it_broke_when_its_server_restarts_without_a_request_of_its_own(world):
    """``Connection.broken``: False before the first exchange and while the connection is
    open; True once the server's crash has reset it, though the client sent nothing since
    (a consumer pausing with records it fetched); False again once an exchange reopened it."""
    from lab.design.registry import backend_class

    design = backend_class("kestrel")(world)

    async def body(control):
        await design.start()
        node = design.server_nodes[0]
        client = world.node("client")
        conn = client.net.connect(node, "memcache")
        seen = [conn.broken]
        assert await conn.exchange(b"get q\r\n", _until(b"END\r\n"), 5.0) == "END"
        seen.append(conn.broken)
        world.crash(node)
        await client.sleep(0.3)  # the reset reaches the client, which sends nothing
        seen.append(conn.broken)
        world.restart(node)
        await world.settle()
        for _ in range(50):
            try:
                await conn.exchange(b"get q\r\n", _until(b"END\r\n"), 5.0)
                break
            except (ConnectionLost, Unreachable):
                await client.sleep(0.1)
        seen.append(conn.broken)
        await conn.close()
        await design.stop()
        return seen

    assert world.run(body) == [False, False, True, False]
