"""Kestrel's load client (``lab/backends/kestrel/load.py``) against a real ``lab serve kestrel``:
its refusals and reads directly, the monitor/confirm consumer (``batch > 1``) directly, then
short headless Locust loads (a subprocess: locust's gevent must not patch the test process)
whose recorded samples are checked; and ``lab bench loadgen``'s output."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from lab.backends.kestrel.load import KestrelBatchClient, KestrelLoadClient, make_client, read_monitor
from lab.design.load import Refused
from lab.worlds.live.processes import ServerProcess
from loadgen.recording import read_worker_samples

ROOT = Path(__file__).resolve().parents[1]
CONFIG = '[queues.tiny]\nmaxItems = 1\n'  # a queue whose second put is NOT_STORED
BATCH_CONFIG = 'maxOpenTransactions = 8\n'  # a monitor stops at the connection's open reads per queue


def _serve(tmp_path_factory, config: str):
    folder = tmp_path_factory.mktemp("kestrel")
    (folder / "kestrel.toml").write_text(config)
    process = ServerProcess("kestrel", folder / "queues", ["--config", str(folder / "kestrel.toml")]).start()
    yield process
    process.stop()


@pytest.fixture
def kestrel(tmp_path_factory):
    """A fresh server per test: a load must not read what an earlier test left in q0."""
    yield from _serve(tmp_path_factory, CONFIG)


@pytest.fixture
def kestrel_batch(tmp_path_factory):
    """A fresh server whose connections may hold 8 open reads per queue (the default is 1)."""
    yield from _serve(tmp_path_factory, BATCH_CONFIG)


def _targets(kestrel: ServerProcess) -> dict:
    return {"kestrel": {"memcache": f"127.0.0.1:{kestrel.ports['memcache']}"}}


def _client(kestrel: ServerProcess, reliable: bool):
    return make_client(_targets(kestrel), {"timeout": 5.0}, reliable, 1)


def test_put_get_ack_release_and_refusals(kestrel):
    client = _client(kestrel, reliable=True)
    try:
        client.put("direct", b"one")
        client.put("direct", b"two")
        body, token = client.get("direct")
        assert body == b"one" and token is not None
        client.release("direct", token)  # back at the head
        body, token = client.get("direct")
        assert body == b"one"
        client.ack("direct", token)
        body, token = client.get("direct")
        assert body == b"two"
        client.ack("direct", token)
        assert client.get("direct") is None  # empty after the short server-side wait

        client.put("tiny", b"fits")
        with pytest.raises(Refused, match="NOT_STORED"):
            client.put("tiny", b"over maxItems")
        assert client.get("tiny")[0] == b"fits"
        with pytest.raises(Refused, match="ERROR"):  # a second open read (maxOpenTransactions = 1)
            client.get("tiny")
        assert client.get("tiny")[0] == b"fits"  # the server dropped that connection: its read came back
    finally:
        client.close()


def test_plain_get_takes_for_good(kestrel):
    client = _client(kestrel, reliable=False)
    try:
        client.put("plain", b"once")
        assert client.get("plain") == (b"once", None)
        assert client.get("plain") is None
    finally:
        client.close()


def test_unreachable_server_is_not_a_refusal(tmp_path):
    client = make_client({"kestrel": {"memcache": "127.0.0.1:1"}}, {"timeout": 0.5}, True, 1)
    with pytest.raises(Exception) as caught:
        client.put("q", b"x")
    assert not isinstance(caught.value, Refused)  # the outcome is unknown, not "did not happen"


# ---------------------------------------------------------------- the monitor/confirm consumer

def _batch_client(kestrel: ServerProcess, batch: int = 3) -> KestrelBatchClient:
    client = make_client(_targets(kestrel), {"timeout": 5.0}, True, 1, batch=batch)
    assert isinstance(client, KestrelBatchClient)
    return client


def _drain(kestrel: ServerProcess, queue: str, expect: int = 0) -> list[bytes]:
    """What ``queue`` holds, taken for good by another client: ``expect`` messages waited for
    (a closed connection's reads come back once the server has seen it close), then whatever
    else is there now."""
    got: list[bytes] = []
    for wait_ms, limit in ((2000, expect), (10, None)):
        client = make_client(_targets(kestrel), {"timeout": 5.0, "get_wait_ms": wait_ms}, False, 1)
        try:
            while limit is None or len(got) < limit:
                item = client.get(queue)
                if item is None:
                    break
                got.append(item[0])
        finally:
            client.close()
    return got


def test_monitor_reads_in_order_and_confirms_each_ack(kestrel_batch):
    client = _batch_client(kestrel_batch)
    sent = [b"m%d" % i for i in range(7)]
    try:
        for body in sent:
            client.put("batch", body)
        got, buffered = [], []
        while (item := client.get("batch")) is not None:
            got.append(item[0])
            buffered.append(client.buffered("batch"))
            client.ack("batch", item[1])
        assert got == sent  # every message once, in order
        assert buffered == [2, 1, 0, 2, 1, 0, 0]  # monitors of 3, 3, then the one left
    finally:
        client.close()
    assert _drain(kestrel_batch, "batch") == []  # all confirmed: a new connection finds nothing


def test_monitor_waits_whole_seconds_and_zero_reads_nothing(kestrel_batch):
    """Why the consumer's monitor waits a second: with 0 its deadline has passed before the
    first read, and the stream is a bare END even with an item queued."""
    client = _batch_client(kestrel_batch)
    try:
        client.put("zero", b"a")
        assert read_monitor(client.memcache, "zero", 0, 3) == []
        started = time.monotonic()
        assert read_monitor(client.memcache, "zero", 1, 1) == [b"a"]  # at most 1: no wait for more
        assert time.monotonic() - started < 0.9  # not the second a monitor waits for more
        assert client.memcache.raw_command("confirm zero 1") == b"END"
    finally:
        client.close()


def test_release_puts_the_message_back_for_another_client(kestrel_batch):
    client, other = _batch_client(kestrel_batch), _client(kestrel_batch, reliable=True)
    try:
        for body in (b"a", b"b", b"c"):
            client.put("rel", body)
        body, token = client.get("rel")
        assert body == b"a" and client.buffered("rel") == 2
        client.release("rel", token)  # get rel/abort: the oldest open read, which is a's
        with pytest.raises(ValueError):
            client.ack("rel", token)  # released: no confirm (it would confirm b)
        body, other_token = other.get("rel")
        assert body == b"a"  # back at the head, while b and c stay in the buffer
        other.ack("rel", other_token)
        for expected in (b"b", b"c"):
            body, token = client.get("rel")
            assert body == expected
            client.ack("rel", token)
    finally:
        client.close()
        other.close()
    assert _drain(kestrel_batch, "rel") == []


def test_acks_and_releases_go_oldest_first(kestrel_batch):
    client = _batch_client(kestrel_batch, batch=2)
    try:
        client.put("order", b"a")
        client.put("order", b"b")
        (_, first), (_, second) = client.get("order"), client.get("order")
        with pytest.raises(ValueError, match="oldest"):
            client.ack("order", second)  # confirm would close a's read
        with pytest.raises(ValueError, match="oldest"):
            client.release("order", second)
        with pytest.raises(ValueError, match="no unsettled read"):
            client.ack("order", "not a token")
        client.ack("order", first)
        client.ack("order", second)
    finally:
        client.close()
    assert _drain(kestrel_batch, "order") == []


def test_a_cut_connection_empties_the_buffer_and_loses_nothing(kestrel_batch):
    client = _batch_client(kestrel_batch)
    try:
        for body in (b"a", b"b", b"c"):
            client.put("cut", body)
        body, token = client.get("cut")
        assert body == b"a" and client.buffered("cut") == 2
        client.memcache.sock.shutdown(socket.SHUT_RDWR)  # the connection dies under the client
        with pytest.raises(Exception) as caught:
            client.ack("cut", token)
        assert not isinstance(caught.value, Refused)  # the outcome is unknown
        assert client.buffered("cut") == 0  # b and c went back with the connection
        with pytest.raises(Refused, match="aborted"):
            client.ack("cut", token)  # no read is left to confirm
    finally:
        client.close()
    assert sorted(_drain(kestrel_batch, "cut", 3)) == [b"a", b"b", b"c"]  # all three, to another client


def test_a_connection_closed_by_another_request_aborts_what_was_handed_out(kestrel_batch):
    client = _batch_client(kestrel_batch)
    try:
        for body in (b"a", b"b", b"c"):
            client.put("gone", body)
        (_, first), (_, second) = client.get("gone"), client.get("gone")
        with pytest.raises(Exception) as caught:
            client.put("bad.name", b"x")  # an illegal queue name: the server drops the connection
        assert not isinstance(caught.value, Refused)
        assert client.buffered("gone") == 0
        with pytest.raises(Refused, match="aborted"):
            client.ack("gone", first)  # nothing sent: a confirm on the new connection would be ERROR
        client.release("gone", second)  # back in the queue already: done
    finally:
        client.close()
    assert sorted(_drain(kestrel_batch, "gone", 3)) == [b"a", b"b", b"c"]


def test_a_monitor_cut_short_hands_out_nothing(kestrel_batch):
    client = _batch_client(kestrel_batch)
    try:
        client.put("slow", b"a")  # connects
        client.memcache.sock.settimeout(0.3)  # shorter than the monitor's second of waiting for 2 more
        with pytest.raises(Exception) as caught:
            client.get("slow")  # a arrives in the stream, then the read times out before the final END
        assert not isinstance(caught.value, Refused)
        assert client.buffered("slow") == 0 and client.memcache.sock is None
    finally:
        client.close()
    assert _drain(kestrel_batch, "slow", 1) == [b"a"]


def test_monitor_and_confirm_refusals(kestrel_batch):
    client, admin = _batch_client(kestrel_batch, batch=2), _batch_client(kestrel_batch)
    try:
        client.put("no", b"a")
        client.put("no", b"b")
        _, token = client.get("no")
        admin.put("no", b"c")
        assert client.memcache.raw_command("confirm no 2") == b"END"  # a and b, behind the client's back
        with pytest.raises(Refused, match="confirm no 1: ERROR"):
            client.ack("no", token)  # none open: ERROR, and pymemcache closes the connection
        assert client.buffered("no") == 0
        assert admin.memcache.raw_command("status quiescent") == b"END"
        with pytest.raises(Refused, match="monitor no: SERVER_ERROR"):
            client.get("no")
        assert admin.memcache.raw_command("status up") == b"END"
    finally:
        client.close()
        admin.close()
    assert _drain(kestrel_batch, "no") == [b"c"]


@pytest.mark.parametrize("batch", [0, -1, 2.5, True, "3"])
def test_bad_batch_values(batch):
    with pytest.raises(ValueError, match="batch is the most messages one monitor reads"):
        make_client({"kestrel": {"memcache": "127.0.0.1:1"}}, {}, True, 1, batch=batch)


def test_batch_picks_the_client_and_needs_as_many_open_reads():
    targets = {"kestrel": {"memcache": "127.0.0.1:1"}}  # no connection is made here
    assert type(make_client(targets, {}, True, 1)) is KestrelLoadClient
    assert type(make_client(targets, {}, True, 1, batch=1)) is KestrelLoadClient
    with pytest.raises(ValueError, match="needs reliable reads"):
        make_client(targets, {}, False, 1, batch=4)  # plain gets: one per request
    assert type(make_client(targets, {"maxOpenTransactions": 4}, True, 1, batch=4)) is KestrelBatchClient
    with pytest.raises(ValueError, match="needs maxOpenTransactions >= 4"):
        make_client(targets, {"maxOpenTransactions": 1}, True, 1, batch=4)


def _locust(kestrel: ServerProcess, run_dir: Path, ack: str, *more: str) -> list[dict]:
    argv = [sys.executable, "-m", "locust", "-f", str(ROOT / "loadgen" / "locustfile.py"), "--headless",
            "-u", "4", "-r", "100", "-t", "3s", "--only-summary", "--exit-code-on-error", "0",
            "--lab-backend", "kestrel", "--lab-targets", json.dumps(_targets(kestrel)),
            "--lab-options", json.dumps({"timeout": 5.0}), "--lab-run-dir", str(run_dir),
            "--lab-queues", "2", "--lab-producers", "2", "--lab-consumers", "2", "--lab-ack", ack, *more]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return read_worker_samples(run_dir).to_pylist()


def _check_common(rows: list[dict]) -> tuple[set[str], list[dict]]:
    latencies = [r["latency_ns"] for r in rows]
    assert all(latency > 0 for latency in latencies)
    assert any(latency % 1_000_000 for latency in latencies), "latencies rounded to milliseconds"
    # a request cut short by the run's end is recorded, its outcome unknown (it may have been done)
    cut = [r for r in rows if r["outcome"] == "info" and (r["error"] or "").startswith("interrupted")]
    assert len(cut) <= 4  # one per user at most
    puts = [r for r in rows if r["op"] == "put"]
    assert len(puts) > 100 and all(r["outcome"] == "ok" for r in puts if r not in cut)
    put_ids = {r["msg_id"] for r in puts}
    delivered = [r for r in rows if r["op"] == "get" and r["outcome"] == "ok"]
    assert len(delivered) > 100
    assert {r["msg_id"] for r in delivered} <= put_ids  # only what was put comes out (or cut putting it)
    # fail = empty, never unknown but for the cut
    assert all(r["outcome"] in ("ok", "fail") for r in rows if r["op"] == "get" and r not in cut)
    return put_ids, delivered


def test_reliable_load_puts_delivers_and_acks(kestrel, tmp_path):
    rows = _locust(kestrel, tmp_path, "reliable")
    _, delivered = _check_common(rows)
    acks = [r for r in rows if r["op"] == "ack" and not (r["error"] or "").startswith("interrupted")]
    assert all(r["outcome"] == "ok" for r in acks)
    # each delivery is acked, but a consumer stopped at the run's end may not have acked its last
    assert len(delivered) - 2 <= len(acks) <= len(delivered)
    assert {r["msg_id"] for r in acks} <= {r["msg_id"] for r in delivered}


def test_plain_load_delivers_each_message_once(kestrel, tmp_path):
    rows = _locust(kestrel, tmp_path, "auto")
    _, delivered = _check_common(rows)
    ids = [r["msg_id"] for r in delivered]
    assert len(ids) == len(set(ids))  # plain gets take for good: no message twice
    assert not [r for r in rows if r["op"] in ("ack", "release")]


def test_monitor_load_delivers_each_message_once_and_acks_it(kestrel_batch, tmp_path):
    rows = _locust(kestrel_batch, tmp_path, "reliable", "--lab-batch", "4")
    _, delivered = _check_common(rows)
    ids = [r["msg_id"] for r in delivered]
    assert len(ids) == len(set(ids))  # nothing released, no connection lost: no message twice
    acks = [r for r in rows if r["op"] == "ack" and not (r["error"] or "").startswith("interrupted")]
    assert all(r["outcome"] == "ok" for r in acks)
    # a consumer stopped at the run's end may not have acked its last (what it held goes back)
    assert len(delivered) - 2 <= len(acks) <= len(delivered)
    assert {r["msg_id"] for r in acks} <= set(ids)
    with urllib.request.urlopen(f"http://127.0.0.1:{kestrel_batch.ports['admin']}/stats.json", timeout=5) as reply:
        stats = json.load(reply)
    assert stats["cmd_monitor_get"] >= len(delivered)  # every delivery came from a monitor stream
    assert stats["cmd_monitor_get"] > 2 * stats["cmd_monitor"]  # in batches, not one item per monitor


@pytest.mark.skipif(shutil.which("memcached") is None and shutil.which("apt-get") is None,
                    reason="no memcached and no apt-get to install it")
def test_bench_loadgen_prints_both_rates_and_their_ratio(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "lab.cli", "bench", "loadgen", "--duration", "2", "--repeats", "1",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "minimal pymemcache user:" in done.stdout and "lab's user (samples on):" in done.stdout
    assert "ratio lab / minimal:" in done.stdout
    results = json.loads(out.read_text())["results"]
    assert results["minimal_rps"] > 0 and results["lab_rps"] > 0
    assert results["ratio"] == pytest.approx(results["lab_rps"] / results["minimal_rps"])
    assert results["runs"]["lab_samples"][0] > 0  # the lab's run recorded its samples
