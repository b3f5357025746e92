"""Kestrel's core in the sim world (deterministic, simulated disk and crashes), its
configuration file, the sans-IO protocol parsers, and the runner in both worlds."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.backends.kestrel.config import ConfigError, ServerConfig, config_from_mapping, load_config
from lab.backends.kestrel.core.collection import QueueCollection
from lab.backends.kestrel.wire.protocol import MemcacheParser, ProtocolDrop, TextParser
from lab.experiments.runner import run
from lab.design.storage import RuntimeStore
from lab.workloads.spec import parse_workload
from models.world import SimWorld


# ---------------------------------------------------------------- configuration


def test_config_inheritance_default_queue_master_child(tmp_path: Path):
    path = tmp_path / "k.toml"
    path.write_text('maxOpenTransactions = 100\nqueuePath = "x"\n[default]\nmaxItems = 100\nsyncJournal = "100ms"\n'
                    '[queues.foo]\nmaxItemSize = "1KB"\n[queues."foo+audit"]\nmaxItems = 7\n'
                    '[aliases]\nwx = "weather"\n')
    config = load_config(path)
    assert config.max_open_transactions == 100 and config.queue_path == "x"
    foo = config.resolve("foo")
    assert (foo.max_items, foo.max_item_size, foo.sync_journal) == (100, 1024, 0.1)
    child = config.resolve("foo+audit")
    assert (child.max_items, child.max_item_size) == (7, 1024)  # the master's, then its own
    assert config.resolve("bar").max_item_size == 2**63 - 1
    assert config.aliases == {"wx": ["weather"]}


@pytest.mark.parametrize("text, message", [
    ("maxItemz = 3\n", "unknown option 'maxItemz'"),
    ("[default]\nmaxAge = \"soon\"\n", "is not a duration"),
    ("[default]\nmaxItems = -1\n", "whole number"),
    ("memcacheListenPort = 70000\n", "is not a port"),
    ("[default\n", "not valid TOML"),
])
def test_config_errors_name_the_problem(tmp_path: Path, text: str, message: str):
    path = tmp_path / "k.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


# ---------------------------------------------------------------- parsers


def test_memcache_parser_frames_across_partial_reads():
    p = MemcacheParser()
    for chunk in (b"se", b"t q 0 0 5\r", b"\nhel", b"lo\r\nGET q/open\n"):
        p.feed(chunk)
    first = p.next_request()
    assert (first.command, first.args, first.data) == ("set", ["q", "0", "0", "5"], b"hello")
    second = p.next_request()
    assert (second.command, second.args, second.data) == ("get", ["q/open"], None)
    assert p.next_request() is None


def test_java_split_keeps_inner_empty_tokens_and_drops_trailing_ones():
    p = MemcacheParser()
    p.feed(b"get  q   \r\n")
    assert p.next_request().args == ["", "q"]


@pytest.mark.parametrize("line", [b"set q 0 0\r\n", b"set q 0 0 abc\r\n", b"set q 0 0 -1\r\n", b"set q 0 0 999999999999\r\n"])
def test_memcache_parser_refuses_unframeable_storage_lines(line: bytes):
    p = MemcacheParser()
    p.feed(line)
    with pytest.raises(ProtocolDrop):
        p.next_request()


def test_text_parser_multi_item_put():
    p = TextParser()
    p.feed(b"put q:\none\ntwo\n\nGET q 100\n")
    put = p.next_request()
    assert (put.command, put.args, put.items) == ("put", ["q"], [b"one", b"two"])
    get = p.next_request()
    assert (get.command, get.args) == ("get", ["q", "100"])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(1, 50))
def test_memcache_parser_never_crashes_on_random_bytes(data: bytes, chunk: int):
    p = MemcacheParser(max_value=1 << 16)
    try:
        for i in range(0, len(data), chunk):
            p.feed(data[i:i + chunk])
            while p.next_request() is not None:
                pass
    except ProtocolDrop:
        pass


# ---------------------------------------------------------------- the core in the sim world


def _sim(body, config: ServerConfig | None = None, seed: int = 1):
    """Run ``body(world, collection, restart)`` on a sim node; returns what it returns."""
    world = SimWorld(seed=seed)
    config = config or ServerConfig(max_open_transactions=10)
    made: list[QueueCollection] = []

    async def boot(rt):
        made.append(QueueCollection(rt, config, RuntimeStore(rt, "queues")))

    async def main(control):
        await world.start("k", boot)

        async def restart(tear: bool = False):
            world.crash("k", tear=tear)
            await control.sleep(0.01)
            world.restart("k")
            await control.sleep(0.01)
            return made[-1]

        return await body(control, made[-1], restart)

    return world.run(main)


def test_sim_restart_rolls_back_open_transactions_in_xid_order():
    async def body(rt, c, restart):
        for item in (b"one", b"two", b"three", b"four", b"five"):
            c.add("q", item)
        xids = [(await c.remove("q", transaction=True))[0] for _ in range(4)]
        c.confirm_remove("q", xids[1])
        c.confirm_remove("q", xids[3])
        await c.settle()
        c.queues["q"].journal.close()  # fsync, as a clean shutdown would (syncJournal never)
        await c.settle()
        c = await restart()
        return [(await c.remove("q"))[1].data for _ in range(3)], await c.remove("q")

    got, after = _sim(body)
    assert got == [b"one", b"three", b"five"] and after is None


def test_sim_crash_loses_unsynced_items_unless_sync_journal_is_every_write():
    def lost(sync: str | None) -> int:
        config = config_from_mapping({"default": {"syncJournal": sync}} if sync else {})

        async def body(rt, c, restart):
            for i in range(100):
                c.add("q", b"%03d" % i)
                await c.settle()  # what the server does before answering STORED
            c = await restart()
            return 100 - c.queues["q"].length

        return _sim(body, config)

    assert lost("always") == 0
    assert lost(None) > 0  # never fsynced: the simulated crash drops the unsynced tail


def test_sim_blocking_get_is_woken_by_an_add_and_times_out_deterministically():
    async def body(rt, c, restart):
        waiter = rt.spawn(c.remove("q", timeout_ms=500))
        await rt.sleep(0.1)
        c.add("q", b"late")
        got = await waiter
        start = rt.now()
        none = await c.remove("q", timeout_ms=250)
        return got[1].data, none, round(rt.now() - start, 3)

    assert _sim(body) == (b"late", None, 0.25)


def test_sim_runs_are_deterministic():
    async def body(rt, c, restart):
        for i in range(20):
            c.add("q", b"%d" % i)
        c = await restart(tear=True)
        return c.queues["q"].length, c.queues["q"].journal.size

    assert _sim(body, seed=5) == _sim(body, seed=5)


# ---------------------------------------------------------------- the runner


RELIABLE = {"name": "k", "queues": 2, "producers": 2, "consumers": 2, "message_size": 100, "rate": 1000,
            "duration": 1.0, "warmup": 0.2, "ack": "reliable", "seed": 4}


@pytest.mark.parametrize("world", ["sim", "live"])
@pytest.mark.parametrize("ack", ["auto", "reliable"])
def test_runner_valid_in_both_worlds(tmp_path: Path, world: str, ack: str):
    result = run(parse_workload({**RELIABLE, "ack": ack}), "kestrel", world, out=tmp_path / world, progress=False)
    assert result.check.valid, result.check.line()
    assert result.check.counts.ok == result.check.counts.attempts > 500
    assert result.check.counts.duplicated == 0


# One consumer behind two producers: a backlog sits in the queue when the server dies.
CRASH = {**RELIABLE, "consumers": 1, "rate": 4000, "duration": 2.0,
         "faults": [{"fault": "crash", "at": 1.0, "duration": 0.2, "target": "servers"}]}


def test_runner_crash_loses_stored_items_unless_every_write_is_synced(tmp_path: Path):
    never = run(parse_workload(CRASH), "kestrel", "sim", out=tmp_path / "never", progress=False)
    always = run(parse_workload(CRASH), "kestrel", "sim", out=tmp_path / "always", progress=False,
                 options={"syncJournal": "always"})
    assert not never.check.valid and never.check.counts.lost > 0
    assert always.check.valid and always.check.counts.lost == 0


def test_sim_a_big_queue_restarts_in_read_behind_with_fifo_kept():
    config = config_from_mapping({"default": {"maxMemorySize": 1024, "syncJournal": "always"}})
    items = [bytes([65 + i]) * 128 for i in range(12)]

    async def body(rt, c, restart):
        for item in items:
            c.add("q", item)
        (await c.remove("q"))  # one removed while in read-behind: memory refills from the journal
        await c.settle()
        c = await restart()
        q = c.queues["q"]
        counts = (q.length, len(q.memory), q.mem_bytes)
        got = [(await c.remove("q"))[1].data for _ in range(11)]
        return counts, got, q.read_behind is None

    counts, got, caught_up = _sim(body, config)
    assert counts == (11, 8, 1024)
    assert got == items[1:] and caught_up


def test_sim_a_settled_put_through_an_alias_and_fanout_survives_a_crash():
    """settle(name) waits for every journal a put reaches (alias destinations and their
    fanout children), not only the queue named — and not for unrelated queues."""
    config = config_from_mapping({"default": {"syncJournal": "always"},
                                  "aliases": {"wx": ["wx_a", "wx_b"]}})

    async def body(rt, c, restart):
        c.queue("wx_a+audit")  # a fanout child of wx_a
        c.add("other", b"unrelated")  # its fsync is requested, and not waited for below
        c.add("wx", b"storm")
        await c.settle("wx")
        c = await restart()  # a crash: only what was fsynced is left
        return [(await c.remove(q) or (0, None))[1] for q in ("wx_a", "wx_b", "wx_a+audit")]

    got = _sim(body, config)
    assert [item.data if item else None for item in got] == [b"storm"] * 3
