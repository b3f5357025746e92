"""The live world's server-to-server links: frames that cannot run code, a node's message
port as a named port, and calls between nodes through link proxies whose target is found
when a connection comes, which one-way partitions cut."""

from __future__ import annotations

import asyncio
import os
import pickle
import time
from pathlib import Path

import pytest

from lab.backends.ideal.core import Put
from lab.worlds.live.net import BadFrame, encode_frame, read_frame, safe_loads
from lab.worlds.live.proxy import DOWN, UP
from lab.worlds.live.world import LiveWorld
from lab.design.runtime import CallTimeout, RemoteError


def run(world: LiveWorld, body):
    return world.run(lambda control: body(world))


class Exploit:
    """A payload whose unpickling calls whatever ``__reduce__`` names."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def malicious_frame(payload) -> bytes:
    body = pickle.dumps(("call", 1, "mallory", payload), protocol=pickle.HIGHEST_PROTOCOL)
    return len(body).to_bytes(4, "big") + body


# ---------------------------------------------------------------- safe frames


def test_a_frame_naming_code_is_refused_before_it_runs(tmp_path: Path):
    import lab.cli

    marker = tmp_path / "pwned"
    refused = [Exploit(os.system, f"touch {marker}"), Exploit(eval, f"open({str(marker)!r}, 'w')"),
               Exploit(lab.cli.main, ["--help"]), Exploit(encode_frame, "call", 1, "x", None),
               Exploit(Path, str(marker))]  # a class, but not the lab's
    for exploit in refused:
        with pytest.raises(BadFrame, match="which frames may not carry"):
            safe_loads(pickle.dumps(exploit))
    assert not marker.exists()


def test_plain_data_builtin_exceptions_and_the_labs_dataclasses_and_exceptions_pass():
    payload = ({1, 2}, frozenset({3}), bytearray(b"ab"), 1 + 2j, slice(1, 5, 2), range(3),
               {"k": [b"v", 1.5, None, True]}, Put("q", b"body"), CallTimeout("late"), KeyError("k"),
               ConnectionRefusedError(111, "refused"))
    assert repr(safe_loads(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))) == repr(payload)


def test_a_server_closes_the_connection_of_a_malicious_frame_and_serves_the_others(tmp_path: Path):
    marker = tmp_path / "pwned"

    async def body(w: LiveWorld):
        server = w.node("server")

        async def handler(source, message):
            if message == "raise-foreign":
                raise pickle.PicklingError("an exception from outside the lab")  # the caller may not build it
            return ("echo", message)

        await server.net.serve(handler)
        client = w.node("client")
        assert await client.net.call("server", "before", timeout=2.0) == ("echo", "before")

        reader, writer = await asyncio.open_connection(*w.addresses["server"])
        writer.write(malicious_frame(Exploit(os.system, f"touch {marker}")))
        await writer.drain()
        closed = await asyncio.wait_for(reader.read(), 2.0)  # the server hangs up on it

        # the client's connection, open all along, is untouched; so are new ones
        after = await client.net.call("server", "after", timeout=2.0)
        with pytest.raises(RemoteError) as foreign:
            await client.net.call("server", "raise-foreign", timeout=2.0)
        still = await client.net.call("server", "still", timeout=2.0)
        return closed, after, foreign.value.error, still

    closed, after, foreign_error, still = run(LiveWorld(root=tmp_path), body)
    assert closed == b""
    assert not marker.exists()
    assert after == ("echo", "after") and still == ("echo", "still")
    # an exception the caller may not build reaches it as a RuntimeError naming it, on the same connection
    assert isinstance(foreign_error, RuntimeError) and "_pickle.PicklingError" in str(foreign_error)


# ---------------------------------------------------------------- the message port


def test_a_nodes_message_port_is_the_named_port_peer_on_the_bound_address(tmp_path: Path):
    async def body(w: LiveWorld):
        async def handler(source, message):
            return message

        node = w.node("a")
        await node.net.serve(handler)
        port = w.listening[("a", "peer")]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode_frame("call", 7, "outsider", "hello"))
        frame = await asyncio.wait_for(read_frame(reader), 2.0)
        writer.close()
        found = w.address("a", "peer"), w.addresses["a"]
        await node.net.close()
        return port, frame, found, ("a", "peer") in w.listening

    import socket

    with socket.socket() as probe:  # a free port to bind to, as ``lab serve --peer-port`` would
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    port, frame, found, still_listed = run(LiveWorld(root=tmp_path, bind={"peer": ("127.0.0.1", free)}), body)
    assert port == free
    assert frame == ("ok", 7, "a", "hello")
    assert found == (("127.0.0.1", free), ("127.0.0.1", free))
    assert not still_listed


# ---------------------------------------------------------------- calls through link proxies


async def peer_nodes(w: LiveWorld, names: tuple[str, ...], received: dict[str, list]) -> None:
    """Nodes that answer ``(name, message)`` and note what they get."""
    for name in names:
        node = w.node(name)
        received[name] = []

        def handler(name):
            async def handle(source, message):
                received[name].append((source, message))
                return (name, message)

            return handle

        await node.net.serve(handler(name))


def route(w: LiveWorld, source: str, destination: str) -> None:
    """``source`` reaches ``destination`` through the proxy of their link (``LiveWorld.reach``),
    as a ``lab serve --peers`` would. The nodes of one process share an address book, so
    ``destination``'s entry is that proxy for every caller: each test routes one caller a peer."""
    host, port = w.reach(source, destination, "peer").split(":")
    w.addresses[destination] = (host, int(port))


def test_a_one_way_block_cuts_the_requests_or_the_replies_of_a_link_and_the_heal_lets_held_bytes_through(
        tmp_path: Path):
    async def body(w: LiveWorld):
        received: dict[str, list] = {}
        await peer_nodes(w, ("a", "b"), received)
        a, b = w.node("a"), w.node("b")
        route(w, "a", "b")
        route(w, "b", "a")
        assert await a.net.call("b", "hi", timeout=2.0) == ("b", "hi")
        assert await b.net.call("a", "hi", timeout=2.0) == ("a", "hi")

        # the proxies' gates: a -> b is UP of a's proxy to b and DOWN of b's proxy to a
        w.block("a", "b")
        ab, ba = w.links.proxies[("a", "b", "peer")], w.links.proxies[("b", "a", "peer")]
        gates = {(key, d): proxy.directions[d].gate.is_set()
                 for key, proxy in (("ab", ab), ("ba", ba)) for d in (UP, DOWN)}

        # a's request to b is held: b never sees it
        with pytest.raises(CallTimeout):
            await a.net.call("b", "a-during-a-b-block", timeout=0.3)
        held_at_b = list(received["b"])
        # b's request reaches a, but a's reply to b is held
        with pytest.raises(CallTimeout):
            await b.net.call("a", "b-during-a-b-block", timeout=0.3)
        reached_a = list(received["a"])
        b.net.send("a", "b-sends-during-a-b-block")  # one way, b -> a: open
        await asyncio.sleep(0.2)
        sent_to_a = list(received["a"])

        w.unblock("a", "b")
        for _ in range(200):  # the held request flows once the link heals (TCP retransmits it)
            if ("a", "a-during-a-b-block") in received["b"]:
                break
            await asyncio.sleep(0.01)
        late_at_b = list(received["b"])
        healed = await a.net.call("b", "after", timeout=2.0), await b.net.call("a", "after", timeout=2.0)

        # the other direction: b -> a cut; a's request reaches b, b's reply is held
        w.block("b", "a")
        before = len(received["b"])
        with pytest.raises(CallTimeout):
            await a.net.call("b", "a-during-b-a-block", timeout=0.3)
        reached_b = received["b"][before:]
        w.unblock("b", "a")
        return gates, held_at_b, reached_a, sent_to_a, late_at_b, healed, reached_b, \
            await a.net.call("b", "last", timeout=2.0)

    gates, held_at_b, reached_a, sent_to_a, late_at_b, healed, reached_b, last = \
        run(LiveWorld(root=tmp_path), body)
    assert gates == {("ab", UP): False, ("ab", DOWN): True, ("ba", UP): True, ("ba", DOWN): False}
    assert ("a", "a-during-a-b-block") not in held_at_b
    assert ("b", "b-during-a-b-block") in reached_a
    assert ("b", "b-sends-during-a-b-block") in sent_to_a
    # held, not dropped: the request a gave up on is applied at b after the heal
    assert ("a", "a-during-a-b-block") in late_at_b
    assert healed == (("b", "after"), ("a", "after"))
    assert reached_b == [("a", "a-during-b-a-block")]
    assert last == ("b", "last")


def test_a_block_placed_before_the_link_exists_applies_to_its_proxy(tmp_path: Path):
    async def body(w: LiveWorld):
        w.block("a", "b")
        received: dict[str, list] = {}
        await peer_nodes(w, ("a", "b"), received)
        route(w, "a", "b")
        with pytest.raises(CallTimeout):
            await w.node("a").net.call("b", "x", timeout=0.3)
        w.unblock("a", "b")
        return await w.node("a").net.call("b", "y", timeout=2.0)

    assert run(LiveWorld(root=tmp_path), body) == ("b", "y")


def test_a_peer_not_started_yet_fails_the_call_fast_and_the_next_call_after_it_starts_works(tmp_path: Path):
    async def body(w: LiveWorld):
        a = w.node("a")
        route(w, "a", "b")  # the proxy listens now; b has no port yet
        start = time.monotonic()
        # the proxy accepts, finds no target and hangs up: the caller sees a connection lost
        # before the reply (the request may have been sent: not Unreachable)
        with pytest.raises(CallTimeout, match="connection lost"):
            await a.net.call("b", "too early", timeout=5.0)
        failed_after = time.monotonic() - start

        received: dict[str, list] = {"b": []}

        async def handle(source, message):
            received["b"].append(message)
            return ("b", message)

        real = w.addresses["b"]
        await w.node("b").net.serve(handle)  # b's serve writes its own address: a goes on using the proxy
        w.addresses["b"] = real
        return failed_after, await a.net.call("b", "now", timeout=2.0), received["b"]

    failed_after, reply, received = run(LiveWorld(root=tmp_path), body)
    assert failed_after < 1.0
    assert reply == ("b", "now")
    assert received == ["now"]


# ---------------------------------------------------------------- a server process's reach


def test_start_server_hands_a_design_proxies_to_its_peers_that_stay_across_a_restart(tmp_path: Path):
    from lab.backends.kestrel.driver import KestrelBackend

    class Reaching(KestrelBackend):
        reached: list[str] = []

        def serve_args(self, node, data_dir, reach):
            self.reached.append(reach("other", "peer"))
            return super().serve_args(node, data_dir, reach)

    async def body(w: LiveWorld):
        other = w.node("other")  # a peer in this process, started after the server was given its address

        design = Reaching(w)
        await design.start()
        proc = w.processes["kestrel"]
        argv = list(proc.argv)

        async def handle(source, message):
            return ("other", source, message)

        await other.net.serve(handle)
        host, port = design.reached[0].split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(encode_frame("call", 1, "kestrel", "via the proxy"))
        reply = await asyncio.wait_for(read_frame(reader), 2.0)
        writer.close()

        w.crash("kestrel")
        w.restart("kestrel")
        for _ in range(300):  # until the restarted server answers on its port
            try:
                _, probe = await asyncio.open_connection("127.0.0.1", proc.ports["memcache"])
                probe.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        return reply, argv, proc.command(), list(w.links.proxies)

    reply, argv, command_after_restart, proxies = run(LiveWorld(root=tmp_path), body)
    assert reply == ("ok", 1, "other", ("other", "kestrel", "via the proxy"))
    assert command_after_restart[-len(argv):] == argv
    assert ("kestrel", "other", "peer") in proxies
