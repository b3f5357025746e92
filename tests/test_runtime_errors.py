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


def _line(chunk_buffer: list[bytes]):
    def receive(chunk: bytes):
        chunk_buffer.append(chunk)
        got = b"".join(chunk_buffer)
        return got.decode().strip() if got.endswith(b"\n") else None

    return receive


def test_the_same_events_raise_the_same_documented_errors(world):
    async def body(control):
        async def boot(node):
            await node.net.listen("lines", lambda: _Crashy(node))

        await world.start("server", boot)
        client = world.node("client")
        conn = client.net.connect("server", "lines")
        seen = [await conn.exchange(b"hello\n", _line([]), 2.0)]
        with pytest.raises(ConnectionLost) as lost:
            await conn.exchange(b"crash\n", _line([]), 2.0)
        seen.append(type(lost.value))
        seen.append(await conn.exchange(b"again\n", _line([]), 2.0))  # a new connection
        with pytest.raises(CallTimeout):
            await conn.exchange(b"hang\n", _line([]), 0.1)
        with pytest.raises(Unreachable):
            await client.net.connect("server", "nobody-serves").exchange(b"x\n", _line([]), 0.5)
        with pytest.raises(Unreachable):
            await client.net.connect("no-such-node", "lines").exchange(b"x\n", _line([]), 0.5)
        await conn.close()
        return seen

    assert world.run(body) == ["hello", ConnectionLost, "again"]


def test_the_set_is_classified_and_a_lost_connection_is_still_a_reset():
    assert issubclass(ConnectionLost, ConnectionResetError)
    assert outcome_of(Unreachable("x")) == "fail"
    assert outcome_of(ConnectionLost("x")) == "info"
    assert outcome_of(CallTimeout("x")) == "info"
