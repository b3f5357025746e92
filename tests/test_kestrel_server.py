"""Kestrel's server through real sockets: the 25 must-pass behaviours of the original's
test suite (numbered as in the spec's 7.2), the malformed-input matrix, GET options,
monitor/confirm, limits, expiry, read-behind, fanout, aliases, restarts and stats."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from lab.backends.kestrel.client import KestrelMemcacheClient
from lab.backends.kestrel.dump import render
from lab.backends.kestrel.core.journal_records import iter_records
from tests.kestrel_support import KestrelProcess, Raw, server_fixtures, stats, wait_for

CONFIG = """
maxOpenTransactions = 2
[queues.limited]
maxItemSize = 128
[queues.one]
maxItems = 1
[queues.sized]
maxSize = 510
[queues.weather]
maxItems = 3
discardOldWhenFull = true
[queues.aged]
maxAge = "1s"
[queues.rb]
maxMemorySize = "1KB"
[queues.rotating]
maxJournalSize = "16KB"
[queues.jobs_pending]
maxAge = "500ms"
expireToQueue = "jobs_ready"
[aliases]
wx = ["wx_a", "wx_b"]
"""


server, raw = server_fixtures(CONFIG)


def q(name: str, request: pytest.FixtureRequest) -> str:
    """A queue name unique to the test (the module shares one server)."""
    return f"{name}_{request.node.name.replace('[', '_').replace(']', '').replace('-', '_')}"[:120]


# ---------------------------------------------------------------- 1, 3: set/get, binary


def test_01_set_and_get_one_entry_with_pymemcache(server, request):
    name = q("work", request)
    client = KestrelMemcacheClient(("127.0.0.1", server.port))
    assert client.get(name) is None
    assert client.put(name, b"hello")
    assert client.get(name) == b"hello"
    assert client.get(name) is None
    client.close()


def test_03_binary_values_round_trip_exactly(raw, request):
    name = q("bin", request)
    data = bytes(range(256)) * 4 + b"\r\nEND\r\n\x00"
    c = raw()
    assert c.set(name, data) == "STORED"
    assert c.get(name) == data


# ---------------------------------------------------------------- 2: exptime


def test_02_absolute_and_relative_exptime(raw, request):
    name = q("exp", request)
    c = raw()
    assert c.set(name, "soon", exptime=int(time.time())) == "STORED"  # absolute: now
    assert c.set(name, "later", exptime=100) == "STORED"  # relative seconds
    time.sleep(1.1)
    assert c.get(name) == b"later"


# ---------------------------------------------------------------- 4-8: reliable reads


def test_04_open_hides_the_item_and_close_commits(server, raw, request):
    name = q("tx", request)
    c = raw()
    c.set(name, "one")
    assert c.get(f"{name}/open") == b"one"
    s = stats(server.port)
    assert (s[f"queue_{name}_items"], s[f"queue_{name}_bytes"], s[f"queue_{name}_open_transactions"]) == ("0", "0", "1")
    assert c.get(f"{name}/close") is None
    s = stats(server.port)
    assert s[f"queue_{name}_open_transactions"] == "0" and s[f"queue_{name}_total_items"] == "1"
    c.close()
    time.sleep(0.1)
    assert stats(server.port)[f"queue_{name}_items"] == "0"  # the disconnect changes nothing


def test_05_abort_puts_the_item_back_at_the_head(server, raw, request):
    name = q("ab", request)
    c = raw()
    c.set(name, "one")
    c.set(name, "two")
    assert c.get(f"{name}/open") == b"one"
    assert c.get(f"{name}/abort") is None
    s = stats(server.port)
    assert s[f"queue_{name}_items"] == "2" and s[f"queue_{name}_bytes"] == "6"
    assert s[f"queue_{name}_canceled_transactions"] == "1"
    assert c.get(name) == b"one"


def test_06_a_disconnect_rolls_back_open_reads(raw, request):
    name = q("dc", request)
    a, b = raw(), raw()
    a.set(name, "precious")
    assert a.get(f"{name}/open") == b"precious"
    assert b.get(name) is None  # hidden while open
    a.close()
    assert wait_for(lambda: b.get(f"{name}/peek") == b"precious")
    assert b.get(f"{name}/open") == b"precious"


def test_07_an_item_skips_a_disconnected_waiter(raw, request):
    name = q("handoff", request)
    first, second, producer = raw(), raw(), raw()
    first.send(f"get {name}/t=3000/open\r\n")
    time.sleep(0.2)
    second.send(f"get {name}/t=3000/open\r\n")
    time.sleep(0.2)
    first.close()
    time.sleep(0.2)
    assert producer.set(name, "item") == "STORED"
    assert second.line() == f"VALUE {name} 0 4"
    assert second.line() == "item" and second.line() == "END"


def test_cancelled_long_poll_leaves_no_waiter(server, raw, request):
    name = q("poll", request)
    c = raw()
    c.send(f"get {name}/t=5000\r\n")
    assert wait_for(lambda: stats(server.port).get(f"queue_{name}_waiters") == "1")
    c.close()
    assert wait_for(lambda: stats(server.port)[f"queue_{name}_waiters"] == "0")


def test_08_close_open_consumer_loop(server, raw, request):
    name = q("loop", request)
    c = raw()
    for item in ("one", "two", "three"):
        c.set(name, item)
    assert c.get(f"{name}/open") == b"one"
    assert c.get(f"{name}/close/open") == b"two"
    assert c.get(f"{name}/close/open") == b"three"
    c.close()
    d = raw()
    assert wait_for(lambda: stats(server.port)[f"queue_{name}_items"] == "1")
    assert d.get(name) == b"three"
    assert stats(server.port)[f"queue_{name}_total_items"] == "3"


def test_spec_transcript(raw, request):
    name = q("work", request)
    c = raw()
    assert c.set(name, "hello") == "STORED" and c.set(name, "world") == "STORED"
    assert c.get(f"{name}/open") == b"hello"
    c.send(f"get {name}\r\n")
    assert c.line() == "ERROR" and c.closed()
    d = raw()
    assert wait_for(lambda: d.get(f"{name}/peek") == b"hello")
    assert d.get(f"{name}/close/open") == b"hello"
    assert d.get(f"{name}/close/open") == b"world"
    assert d.get(f"{name}/close") is None
    start = time.monotonic()
    assert d.get(f"{name}/t=250") is None
    assert 0.2 <= time.monotonic() - start < 2.0


# ---------------------------------------------------------------- 9, 11: peek and option rules


def test_09_peek_is_non_destructive(raw, request):
    name = q("peek", request)
    c = raw()
    c.set(name, "look")
    assert c.get(f"{name}/peek") == b"look"
    assert c.get(f"{name}/peek") == b"look"
    assert c.get(name) == b"look"
    assert c.get(f"{name}/peek") is None


@pytest.mark.parametrize("options", ["peek/open", "open/peek", "close/peek", "open/abort", "close/abort", "peek/abort"])
def test_11_forbidden_option_combinations(raw, request, options):
    c = raw()
    c.send(f"get {q('combo', request)}/{options}\r\n")
    assert c.line() == "CLIENT_ERROR" and c.closed()


def test_11_empty_queue_name_is_a_client_error(raw):
    c = raw()
    c.send("get /close/open\r\n")
    assert c.line() == "CLIENT_ERROR" and c.closed()


# ---------------------------------------------------------------- 12-14: monitor, several opens, limits


def test_12_monitor_streams_items_then_end(raw, request):
    name = q("mon", request)
    c = raw()
    for item in ("a", "b", "c"):
        c.set(name, item)
    c.send(f"monitor {name} 1 2\r\n")  # max 2 = this server's maxOpenTransactions
    for item in ("a", "b"):
        assert c.line() == f"VALUE {name} 0 1" and c.line() == item and c.line() == "END"
    assert c.line() == "END"
    c.send(f"confirm {name} 2\r\n")
    assert c.line() == "END"
    start = time.monotonic()
    c.send(f"monitor {name} 1\r\n")
    assert c.line() == f"VALUE {name} 0 1" and c.line() == "c" and c.line() == "END"
    assert c.line() == "END"  # the time limit passed with nothing more
    assert 0.8 < time.monotonic() - start < 3


def test_confirm_errors_and_partial_confirm(raw, request):
    name = q("conf", request)
    c = raw()
    c.set(name, "x")
    c.send(f"confirm {name} 1\r\n")
    assert c.line() == "ERROR"  # nothing open: kept open
    c.send(f"confirm {name} 0\r\n")
    assert c.line() == "ERROR"
    assert c.get(f"{name}/open") == b"x"
    c.send(f"confirm {name} 1\r\n")
    assert c.line() == "END"


def test_13_several_open_reads_close_and_abort_the_oldest(raw, request):
    name = q("multi", request)
    c = raw()
    for item in ("one", "two", "three"):
        c.set(name, item)
    assert c.get(f"{name}/open") == b"one"
    assert c.get(f"{name}/open") == b"two"
    assert c.get(f"{name}/abort") is None  # oldest: one goes back to the head
    assert c.get(f"{name}/open") == b"one"
    assert c.get(f"{name}/close") is None  # confirms two, the oldest open
    assert c.get(f"{name}/open") == b"three"
    assert c.get(f"{name}/abort") is None  # aborts one
    assert c.get(f"{name}/close") is None  # confirms three
    assert c.get(f"{name}/open") == b"one"


def test_14_open_read_limit_is_an_error(raw, request):
    name = q("limit", request)
    c = raw()
    for item in ("a", "b", "c"):
        c.set(name, item)
    assert c.get(f"{name}/open") == b"a" and c.get(f"{name}/open") == b"b"
    c.send(f"get {name}/open\r\n")
    assert c.line() == "ERROR" and c.closed()
    d = raw()
    assert wait_for(lambda: d.get(f"{name}/peek") == b"b")  # newest first after the rollback


# ---------------------------------------------------------------- 10, 15: journal sizes


def test_10_journal_sizes_and_rewrite_of_an_empty_queue(server, raw):
    c = raw()
    item = b"x" * 8192
    assert c.set("rotating", item) == "STORED"
    assert stats(server.port)["queue_rotating_logsize"] == "8213"
    assert c.get("rotating") == item
    assert stats(server.port)["queue_rotating_logsize"] == "8214"
    c.set("rotating", item)
    c.get("rotating")  # over 16 KB of journal with an empty queue: rewritten
    s = stats(server.port)
    assert s["queue_rotating_logsize"] == "0" and s["queue_rotating_journal_rewrites"] == "1"
    assert sorted(p.name for p in server.data_dir.iterdir() if p.name.startswith("rotating")) == ["rotating"]


# ---------------------------------------------------------------- 16-19: limits and age


def test_16_max_item_size_boundary(raw):
    c = raw()
    assert c.set("limited", b"x" * 127) == "STORED"
    assert c.set("limited", b"x" * 128) == "STORED"
    assert c.set("limited", b"x" * 129) == "NOT_STORED"


def test_17_max_items_and_max_size(raw):
    c = raw()
    assert c.set("one", "a") == "STORED" and c.set("one", "b") == "NOT_STORED"
    assert c.set("sized", b"x" * 256) == "STORED" and c.set("sized", b"x" * 256) == "STORED"
    assert c.set("sized", b"x" * 256) == "NOT_STORED"  # 512 >= 510 before the add


def test_18_discard_old_when_full(server, raw):
    c = raw()
    for item in ("sunny", "rainy", "cloudy", "snowy"):
        assert c.set("weather", item) == "STORED"
    assert stats(server.port)["queue_weather_discarded"] == "1"
    assert c.get("weather") == b"rainy"


def test_19_max_age(raw):
    c = raw()
    c.set("aged", "old")
    time.sleep(1.2)
    c.set("aged", "new")
    assert c.get("aged") == b"new"


def test_20_blocking_get_gets_a_later_item(raw, request):
    name = q("block", request)
    waiter, producer = raw(), raw()
    waiter.send(f"get {name}/t=3000\r\n")
    time.sleep(0.3)
    producer.set(name, "late")
    assert waiter.line() == f"VALUE {name} 0 4" and waiter.line() == "late" and waiter.line() == "END"


def test_pipelined_requests_answer_in_order_around_one_that_waits(raw, request):
    """Requests sent in one write run in order, also after one that had to wait (the
    blocking get) — and another connection is served while that one waits."""
    name = q("pipe", request)
    c, other = raw(), raw()
    sets = "".join(f"set {name} 0 0 2\r\nv{i}\r\n" for i in range(10))
    c.send(f"get {name}_late/t=500\r\n" + sets + f"get {name}\r\n" * 10)
    assert other.set(name + "_other", "x") == "STORED"  # not stuck behind c's wait
    assert c.line() == "END"  # the blocking get timed out first
    assert [c.line() for _ in range(10)] == ["STORED"] * 10
    got = []
    for _ in range(10):
        assert c.line().startswith(f"VALUE {name} 0 2")
        got.append(c.line())
        assert c.line() == "END"
    assert got == [f"v{i}" for i in range(10)]


def test_many_connections_waiting_on_the_same_fsync(tmp_path: Path):
    """With syncJournal = every write, concurrent sets share one fsync: each waits for it
    and every one is answered STORED (and its item is there to read)."""
    server = KestrelProcess(tmp_path / "q", '[default]\nsyncJournal = "always"\n').start()
    failures: list[BaseException] = []

    def client(i: int) -> None:
        try:
            c = KestrelMemcacheClient(("127.0.0.1", server.port), timeout=10)
            for n in range(40):
                assert c.put(f"fs{i}", b"%d" % n)
                assert c.take(f"fs{i}") == b"%d" % n
            c.close()
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    try:
        threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
    finally:
        err = server.stop()
    assert "ERROR" not in err


def test_client_timeout_closes_idle_connections_only(tmp_path: Path):
    server = KestrelProcess(tmp_path / "q", 'clientTimeout = "300ms"\n').start()
    try:
        idle, busy = Raw(server.port), Raw(server.port)
        busy.send("get slow/t=800\r\n")  # blocked longer than the timeout: not idle
        time.sleep(0.6)
        assert idle.sock.recv(10) == b""  # closed by the server
        assert busy.line() == "END"
        assert busy.set("slow", "x") == "STORED"
    finally:
        server.stop()


# ---------------------------------------------------------------- 23-25


def test_23_read_behind_accounting_and_order(server, raw):
    c = raw()
    items = [bytes([65 + i]) * 128 for i in range(10)]
    for item in items:
        assert c.set("rb", item) == "STORED"
    s = stats(server.port)
    assert (s["queue_rb_items"], s["queue_rb_mem_items"], s["queue_rb_mem_bytes"]) == ("10", "8", "1024")
    assert [c.get("rb") for _ in range(10)] == items
    s = stats(server.port)
    assert (s["queue_rb_items"], s["queue_rb_mem_items"], s["queue_rb_mem_bytes"]) == ("0", "0", "0")


def test_24_fanout_children_get_only_later_items(raw, request):
    master = q("jobs", request)
    c = raw()
    c.set(master, "before")
    assert c.get(f"{master}+audit") is None  # creates the child
    c.set(master, "after")
    assert c.get(f"{master}+audit") == b"after"
    assert c.get(f"{master}+audit") is None
    assert c.get(master) == b"before" and c.get(master) == b"after"


def test_25_expired_items_move_to_the_expire_queue(raw):
    c = raw()
    for item in ("one", "two", "three"):
        c.set("jobs_pending", item)
    time.sleep(0.7)
    assert c.get("jobs_pending") is None
    assert [c.get("jobs_ready") for _ in range(3)] == [b"one", b"two", b"three"]


def test_aliases_deliver_to_every_destination_and_read_empty(raw):
    c = raw()
    assert c.set("wx", "storm") == "STORED"
    assert c.get("wx") is None
    assert c.get("wx_a") == b"storm" and c.get("wx_b") == b"storm"


# ---------------------------------------------------------------- malformed input


@pytest.mark.parametrize("line", [b"set q 0 0\r\n", b"set q 0 0 abc\r\n", b"set q 0 0 -1\r\n",
                                  b"set q 0 x 5\r\nhello\r\n", b"set a.b 0 0 1\r\nx\r\n",
                                  b"get q/t=abc\r\n", b"monitor q abc\r\n", b"confirm q abc\r\n"])
def test_malformed_input_drops_the_connection(raw, line):
    c = raw()
    c.send(line)
    assert c.closed() and c.buf == b""


@pytest.mark.parametrize("line", [b"get\r\n", b"monitor q\r\n", b"confirm q\r\n", b"delete\r\n",
                                  b"flush\r\n", b"flush_expired\r\n"])
def test_a_missing_argument_is_a_client_error_and_keeps_the_connection(raw, line):
    c = raw()
    c.send(line)
    assert c.line() == "CLIENT_ERROR"
    c.send("version\r\n")
    assert c.line().startswith("VERSION ")


@pytest.mark.parametrize("line", [b"\r\n", b"incr q 1\r\n", b"dump_config\r\n", b"add q 0 0 1\r\nx\r\n"])
def test_unknown_commands_are_client_errors_that_close(raw, line):
    c = raw()
    c.send(line)
    assert c.line() == "CLIENT_ERROR" and c.closed()


def test_framing_quirks(raw, request):
    name = q("frame", request)
    c = raw()
    c.send(f"set {name} x 0 5\r\nhello\r\n")
    assert c.line() == "CLIENT_ERROR"  # bad flags: kept open
    c.send(f"SET {name} 0 0 5\r\nhello\r\n")  # command case-insensitive (a bad terminator:
    assert c.line() == "STORED"  # test_kestrel_hardening.py)
    c.send(f"Get {name}/bogus\n")  # bare LF, unknown option ignored
    assert c.line() == f"VALUE {name} 0 5" and c.line() == "hello" and c.line() == "END"
    c.send(f"get {name} other\r\n")  # only the first key counts
    assert c.line() == "END"


def test_admin_commands(server, raw, request):
    name = q("adm", request)
    c = raw()
    c.set(name, "x")
    c.send(f"flush {name}\r\n")
    assert c.line() == "END"
    c.send(f"delete {name}\r\n")
    assert c.line() == "DELETED"
    c.send("delete never_made\r\n")
    assert c.line() == "DELETED"
    c.send(f"flush_expired {name}\r\n")
    assert c.line() == "0"
    c.send("status\r\n")
    assert c.line() == "UP"
    c.send("status sideways\r\n")
    assert c.line() == "CLIENT_ERROR" and c.closed()
    s = stats(server.port)
    for key in ("uptime", "time", "version", "curr_items", "total_items", "bytes", "curr_connections",
                "total_connections", "cmd_get", "cmd_set", "cmd_peek", "get_hits", "get_misses",
                "bytes_read", "bytes_written", "queue_creates", "queue_deletes", "queue_expires"):
        assert key in s
    assert f"queue_{name}_items" not in s  # a deleted queue's stats are gone


def test_dump_stats_and_admin_http(server, raw, request):
    name = q("dump", request)
    c = raw()
    c.set(name, "abc")
    c.send(f"dump_stats {name}\r\n")
    block = c.until(b"END\r\n").decode()
    assert block.startswith(f"queue '{name}' {{\r\n  items=1\r\n  bytes=3\r\n")
    with urllib.request.urlopen(f"http://127.0.0.1:{server.ports['admin']}/stats.json") as r:
        data = json.load(r)
    assert data[f"q/{name}/items"] == 1 and data["cmd_set"] >= 1
    with urllib.request.urlopen(f"http://127.0.0.1:{server.ports['admin']}/stats.txt") as r:
        assert f"q/{name}/bytes: 3" in r.read().decode()


def test_text_protocol(server, request):
    name = q("text", request)
    c = Raw(server.ports["text"])
    c.send(f"put {name}:\nalpha\nbeta\n\n")
    assert c.line() == "+2"
    c.send(f"get {name}\n")
    assert c.line() == ":alpha"
    c.send(f"get {name}\n")  # confirms alpha, opens beta
    assert c.line() == ":beta"
    c.send(f"confirm {name} 1\n")
    assert c.line() == "+1"
    c.send(f"get {name} 100\n")
    assert c.line() == "*"
    c.send("frobnicate\n")
    assert c.line() == "-Unknown command: frobnicate"
    c.send("get\n")
    assert c.line() == "-Queue name required."
    c.close()


# ---------------------------------------------------------------- restarts (own servers)


def test_22_restart_rolls_back_open_reads_in_xid_order(tmp_path: Path):
    server = KestrelProcess(tmp_path / "q", "maxOpenTransactions = 10\n").start()
    try:
        c = Raw(server.port)
        for item in ("one", "two", "three", "four", "five"):
            c.set("work", item)
        assert [c.get("work/open") for _ in range(4)] == [b"one", b"two", b"three", b"four"]
        c.send("confirm work 1\r\n")  # confirms one... the spec's test confirms two and four:
        assert c.line() == "END"
    finally:
        server.kill()  # kill -9: open reads two, three, four stay open in the journal
    server = KestrelProcess(tmp_path / "q", "maxOpenTransactions = 10\n").start()
    try:
        c = Raw(server.port)
        assert [c.get("work") for _ in range(5)] == [b"two", b"three", b"four", b"five", None]
    finally:
        server.stop()


def test_21_journal_op_sequence_of_open_abort_confirm_with_xids_1_and_2(tmp_path: Path):
    server = KestrelProcess(tmp_path / "q", "maxOpenTransactions = 2\n").start()
    try:
        c = Raw(server.port)
        c.set("tx", "one")
        c.set("tx", "two")
        assert c.get("tx/open") == b"one" and c.get("tx/open") == b"two"  # xids 1 and 2
        assert c.get("tx/abort") is None  # the oldest, xid 1: one goes back to the head
        assert c.get("tx/close") is None  # the oldest still open: xid 2
        assert c.get("tx") == b"one"
        journal = (server.data_dir / "tx").read_bytes()  # syncJournal never: written, not synced
        assert render(r for _, r in iter_records(journal, 0)) == (
            "add(3:0:one), add(3:0:two), remove-tentative(1), remove-tentative(2), unremove(1), "
            "confirm-remove(2), remove")
    finally:
        server.stop()
    server.start()  # replay: the queue is empty
    try:
        assert Raw(server.port).get("tx") is None
    finally:
        server.stop()


def test_reload_changes_queue_configuration(tmp_path: Path):
    server = KestrelProcess(tmp_path / "q", "[queues.w]\nmaxItems = 1\n").start()
    try:
        c = Raw(server.port)
        assert c.set("w", "a") == "STORED" and c.set("w", "b") == "NOT_STORED"
        server.config_path.write_text("[queues.w]\nmaxItems = 5\n")
        c.send("reload\r\n")
        assert c.line() == "Reloaded config."
        assert c.set("w", "b") == "STORED"
    finally:
        server.stop()


@pytest.mark.slow
def test_kill_9_cycles_lose_no_stored_item_with_sync_journal_always():
    from lab.backends.kestrel.bench import crash_cycles

    totals = crash_cycles(5, seed=2, min_stored=200)
    assert totals["stored"] >= 5 * 200 and totals["lost"] == 0, totals
    assert totals["open_not_recovered"] == 0


# ---------------------------------------------------------------- protocol fuzz

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# every command but the ones whose job is to touch everyone (flush_all, status, shutdown)
_WORDS = ["set", "get", "gets", "monitor", "confirm", "delete", "flush", "flush_expired", "stats",
          "dump_stats", "version", "add", "cas", "quit", "SET", "GeT"]
_TOKENS = st.one_of(st.sampled_from(["fz", "fz/open", "fz/close/open", "fz/t=10", "fz/abort", "fz/peek", "0", "-1",
                                     "5", "abc", "99999999999", "", "a.b", "fz+kid"]),
                    st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=8))
_LINES = st.builds(lambda w, args, end: (" ".join([w, *args]) + end).encode("latin-1", "replace"),
                   st.sampled_from(_WORDS), st.lists(_TOKENS, max_size=5), st.sampled_from(["\r\n", "\n", ""]))
_INPUT = st.one_of(st.binary(max_size=200), st.lists(st.one_of(_LINES, st.binary(max_size=20)), max_size=6)
                   .map(b"".join))


@pytest.fixture(scope="module")
def bystander(server):
    """A connection holding an open read, which no other client's garbage may disturb."""
    c = Raw(server.port)
    c.set("bystander", "mine")
    c.set("bystander", "next")
    assert c.get("bystander/open") == b"mine"
    yield c
    c.close()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_INPUT)
def test_protocol_fuzz_never_crashes_the_server_nor_disturbs_others(server, bystander, data):
    c = Raw(server.port, timeout=2)
    try:
        c.send(data)
        c.closed(wait=0.03)  # read whatever comes back, briefly
    except OSError:
        pass  # the server may close on us mid-send: that is an allowed answer
    finally:
        c.close()
    assert server.proc.poll() is None, "the server died"
    s = stats(server.port)
    assert s["queue_bystander_open_transactions"] == "1" and s["queue_bystander_items"] == "1"


def test_cluster_client_spreads_operations_over_servers_that_share_nothing(tmp_path: Path):
    from lab.backends.kestrel.client import KestrelCluster

    servers = [KestrelProcess(tmp_path / f"s{i}", "maxOpenTransactions = 5\n").start() for i in range(2)]
    try:
        cluster = KestrelCluster([("127.0.0.1", s.port) for s in servers], seed=3)
        items = [b"m%02d" % i for i in range(40)]
        assert all(cluster.put("jobs", item) for item in items)
        counts = [stats(s.port)["queue_jobs_items"] for s in servers]
        assert all(int(c) > 5 for c in counts) and sum(map(int, counts)) == 40  # both got a share
        got = []
        for _ in range(200):
            item = cluster.take("jobs", open=True)
            if item is not None:
                got.append(item)
                cluster.confirm("jobs")  # on the server that handed it out
            if len(got) == 40:
                break
        assert sorted(got) == items  # every item once; order only per server (loosely ordered)
        assert [stats(s.port)["queue_jobs_open_transactions"] for s in servers] == ["0", "0"]
        cluster.close()
    finally:
        for s in servers:
            s.stop()
