"""Kestrel's wire protocol, hardened (issue 14): what a typo, a wrong byte count, a huge
line, a bad queue name or a binary-protocol client meets, fanoutOnly masters and their
children, and openTransactionTimeout on an empty queue — each through real sockets to a
real `lab serve kestrel` process."""

from __future__ import annotations

import json
import re
import struct
import time
import urllib.request
from pathlib import Path

import pytest

from lab.backends.kestrel.core.collection import MAX_NAME_LENGTH
from lab.backends.kestrel.core.journal import queue_of_file
from lab.backends.kestrel.wire.protocol import MAX_LINE
from tests.kestrel_support import KestrelProcess, Raw, server_fixtures, stats

CONFIG = """
maxOpenTransactions = 2
[queues.lz]
openTransactionTimeout = "300ms"
[queues.jobs]
fanoutOnly = true
[queues.fromage]
fanoutOnly = true
[queues.formaggio]
fanoutOnly = true
[aliases]
nom-de-guerre = ["fromage", "formaggio"]
"""


server, raw = server_fixtures(CONFIG)


# ---------------------------------------------------------------- 7: a version clients parse


def test_version_is_digits_and_dots_as_memcache_clients_expect(server, raw):
    c = raw()
    c.send("version\r\n")
    version = c.line()
    assert re.fullmatch(r"VERSION \d+\.\d+\.\d+", version), version
    assert stats(server.port)["version"] == version.split(" ")[1]
    t = raw(server.ports["text"])
    t.send("version\n")
    assert t.line() == ":" + version.split(" ")[1]


# ---------------------------------------------------------------- 1: get q/opne


def test_an_unknown_get_option_is_a_plain_get_and_is_counted(server, raw):
    """As the original, ``get q/opne`` ignores the typo and removes the item for good;
    the ``get_unknown_option`` stat lets an operator see it happen."""
    before = int(stats(server.port)["get_unknown_option"])
    c = raw()
    c.set("typo", "precious")
    assert c.get("typo/opne") == b"precious"  # a plain get: not an open read
    assert c.get("typo/peek") is None  # gone for good
    assert c.get("typo/t=10/close/open") is None  # known options only: not counted
    assert int(stats(server.port)["get_unknown_option"]) == before + 1
    admin = f"http://127.0.0.1:{server.ports['admin']}"
    with urllib.request.urlopen(f"{admin}/stats.json") as r:
        assert json.load(r)["get_unknown_option"] == before + 1
    with urllib.request.urlopen(f"{admin}/stats.txt") as r:
        assert f"get_unknown_option: {before + 1}\n" in r.read().decode()


# ---------------------------------------------------------------- 2: the bytes after a data block


@pytest.mark.parametrize("sent", [b"set {q} 0 0 2\r\nhello\r\n", b"set {q} 0 0 5\r\nhelloXY"])
def test_a_data_block_not_followed_by_crlf_stores_nothing(raw, request, sent):
    name = f"long{request.node.callspec.indices['sent']}"
    c = raw()
    c.send(sent.replace(b"{q}", name.encode()))
    assert c.line() == "CLIENT_ERROR" and c.closed()
    assert raw().get(f"{name}/peek") is None  # nothing stored, not even "he"


def test_unchecked_data_terminator_keeps_the_originals_framing(tmp_path: Path):
    server = KestrelProcess(tmp_path / "q", "uncheckedDataTerminator = true\n").start()
    try:
        c = Raw(server.port)
        c.send("set q 0 0 5\r\nhelloXY")  # the original skips the two bytes unchecked
        assert c.line() == "STORED"
        assert c.get("q") == b"hello"
    finally:
        server.stop()


# ---------------------------------------------------------------- 3: the text port's line cap


@pytest.mark.parametrize("port", ["text", "memcache"])
@pytest.mark.parametrize("newline", [False, True])
def test_a_command_line_longer_than_the_cap_drops_the_connection(server, raw, port, newline):
    c = raw(server.ports[port])
    c.send(b"get " + b"x" * MAX_LINE + (b"\n" if newline else b""))
    assert c.closed() and c.buf == b""  # dropped, as the memcache port drops a line that long


def test_a_text_put_item_may_be_as_large_as_a_memcache_value(server, raw):
    c = raw(server.ports["text"])
    item = b"v" * (MAX_LINE * 2)  # an item line is a value, not a command line
    c.send(b"put bigtext:\n" + item + b"\n\n")
    assert c.line() == "+1"
    c.send("get bigtext\n")
    assert c.line() == ":" + item.decode()


# ---------------------------------------------------------------- 4: fanoutOnly masters and their children


def test_a_fanout_only_master_stores_nothing_and_its_child_stores(server, raw):
    """A child inherits fanoutOnly from its master, but only a queue that is no fanout
    child passes items through (the original: ``config.fanoutOnly && !isFanout``)."""
    c = raw()
    assert c.get("jobs+c1") is None  # creates the child
    total = int(stats(server.port)["total_items"])
    assert c.set("jobs", "job1") == "STORED"
    assert c.get("jobs") is None
    s = stats(server.port)
    assert s["queue_jobs+c1_items"] == "1" and s["queue_jobs_items"] == "0"
    assert int(s["total_items"]) == total + 1  # the child's copy; the master stored nothing
    assert (server.data_dir / "jobs+c1").stat().st_size == 21 + 4  # the child's journal: one ADDX
    assert not (server.data_dir / "jobs").exists()  # the master writes no journal
    assert c.get("jobs+c1") == b"job1"


def test_an_alias_to_fanout_only_masters_reaches_their_children(raw):
    c = raw()
    assert c.get("fromage+brie") is None and c.get("formaggio+gorgonzola") is None  # create the children
    assert c.set("nom-de-guerre", "cheez whiz") == "STORED"
    assert c.get("fromage+brie") == b"cheez whiz"
    assert c.get("formaggio+gorgonzola") == b"cheez whiz"
    assert c.get("fromage") is None and c.get("formaggio") is None


def test_a_fanout_only_master_passes_through_to_a_preloaded_child(tmp_path: Path):
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "jobs+client1").touch()  # the child exists before the server starts
    server = KestrelProcess(tmp_path / "q", "[queues.jobs]\nfanoutOnly = true\n").start()
    try:
        c = Raw(server.port)
        assert c.set("jobs", "job1") == "STORED" and c.set("jobs", "job2") == "STORED"
        assert c.get("jobs") is None
        assert c.get("jobs+client1") == b"job1"
    finally:
        server.stop()
    server.start()  # the child's journal kept its item
    try:
        assert Raw(server.port).get("jobs+client1") == b"job2"
    finally:
        server.stop()


# ---------------------------------------------------------------- 5: openTransactionTimeout


def test_an_overdue_open_read_stays_open_until_a_remove_finds_an_item(server, raw):
    """The original has no timer: a remove on an empty queue answers END before it looks
    at the open reads; one that finds an item first times out the oldest overdue read,
    which it then hands out (openTransactionTimeout is 300 ms on ``lz``)."""
    owner, other = raw(), raw()
    owner.set("lz", "one")
    assert owner.get("lz/open") == b"one"
    time.sleep(0.5)
    assert other.get("lz") is None  # empty: END, and the overdue read stays open
    assert stats(server.port)["queue_lz_open_transactions"] == "1"
    other.set("lz", "two")
    assert other.get("lz") == b"one"  # the overdue item comes back first
    assert other.get("lz") == b"two"
    assert owner.get("lz/close") is None  # the owner's late confirm is silently ignored
    s = stats(server.port)
    assert (s["queue_lz_open_transactions"], s["queue_lz_canceled_transactions"], s["queue_lz_items"]) == ("0", "1", "0")


# ---------------------------------------------------------------- 6: queue names


@pytest.fixture(scope="module")
def small_journals(tmp_path_factory):
    """A server whose journals rotate and rewrite after one item (long names must survive that)."""
    proc = KestrelProcess(tmp_path_factory.mktemp("names") / "q",
                          "[default]\nmaxMemorySize = 64\ndefaultJournalSize = 64\n").start()
    yield proc
    assert "Traceback" not in proc.stop()


@pytest.mark.parametrize("name", [b"x" * 5000, b"x" * (MAX_NAME_LENGTH + 1), "caf\u00e9".encode(), b"a\tb",
                                  b"a\x00b", b"a.b", b"a~b", b"ok+a.b"])
@pytest.mark.parametrize("command", [b"set %s 0 0 1\r\nx\r\n", b"get %s/open\r\n"])
def test_an_illegal_queue_name_drops_the_connection_and_creates_nothing(small_journals, name, command):
    c = Raw(small_journals.port)
    c.send(command % name)
    assert c.closed() and c.buf == b""  # the original's answer to an illegal name
    c.close()
    made = {queue_of_file(p.name) for p in small_journals.data_dir.iterdir()}
    assert made <= {"alive", "fine", "n" * MAX_NAME_LENGTH}  # the other tests' queues
    assert Raw(small_journals.port).set("alive", "yes") == "STORED"
    assert Raw(small_journals.port).get("alive") == b"yes"


def test_a_name_of_the_longest_length_rotates_and_rewrites_its_journal(small_journals):
    name = "n" * MAX_NAME_LENGTH
    c = Raw(small_journals.port)
    for item in (b"a" * 100, b"b" * 100):
        assert c.set(name, item) == "STORED"
    assert c.get(name) == b"a" * 100 and c.get(name) == b"b" * 100
    s = stats(small_journals.port)
    assert int(s[f"queue_{name}_journal_rotations"]) >= 1 and int(s[f"queue_{name}_journal_rewrites"]) >= 1
    assert all(line.isascii() for line in s)  # python-memcached reads stats as ASCII
    c.send(f"delete {name}\r\n")
    assert c.line() == "DELETED"


def test_the_text_port_refuses_an_illegal_queue_name_with_an_error_line(small_journals):
    c = Raw(small_journals.ports["text"])
    c.send("put caf\u00e9:\nx\n\n".encode())
    assert c.line().startswith("-illegal queue name")
    c.send("put fine:\nx\n\n")
    assert c.line() == "+1"


# ---------------------------------------------------------------- 8: binary-protocol clients


@pytest.mark.parametrize("split", [False, True])
def test_a_binary_protocol_request_gets_unknown_command_and_a_close(raw, split):
    # a memcache binary-protocol GET of key "q" (memjs speaks this), opaque 0xDEADBEEF
    request = struct.pack(">BBHBBHIIQ", 0x80, 0x00, 1, 0, 0, 0, 1, 0xDEADBEEF, 0) + b"q"
    c = raw()
    if split:  # the header in two writes: the answer waits for the whole header
        c.send(request[:10])
        time.sleep(0.1)
    c.send(request[10:] if split else request)
    header = c.until(b"Unknown command")
    magic, opcode, key_len, extras, _, status, body, opaque, cas = struct.unpack(">BBHBBHIIQ", header[:24])
    assert (magic, opcode, key_len, extras, status, opaque, cas) == (0x81, 0x00, 0, 0, 0x0081, 0xDEADBEEF, 0)
    assert header[24:] == b"Unknown command" and body == len(b"Unknown command")
    assert c.closed() and c.buf == b""
