"""Kestrel's load client (``loadgen/designs/kestrel.py``) against a real ``lab serve kestrel``:
its refusals and reads directly, then short headless Locust loads (a subprocess: locust's
gevent must not patch the test process) whose recorded samples are checked; and
``lab bench loadgen``'s output."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.live.processes import ServerProcess
from loadgen.client import Refused
from loadgen.designs.kestrel import make_client
from loadgen.recording import read_worker_samples

ROOT = Path(__file__).resolve().parents[1]
CONFIG = '[queues.tiny]\nmaxItems = 1\n'  # a queue whose second put is NOT_STORED


@pytest.fixture
def kestrel(tmp_path_factory):
    """A fresh server per test: a load must not read what an earlier test left in q0."""
    folder = tmp_path_factory.mktemp("kestrel")
    (folder / "kestrel.toml").write_text(CONFIG)
    process = ServerProcess("kestrel", folder / "queues", ["--config", str(folder / "kestrel.toml")]).start()
    yield process
    process.stop()


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


def _locust(kestrel: ServerProcess, run_dir: Path, ack: str) -> list[dict]:
    argv = [sys.executable, "-m", "locust", "-f", str(ROOT / "loadgen" / "locustfile.py"), "--headless",
            "-u", "4", "-r", "100", "-t", "3s", "--only-summary", "--exit-code-on-error", "0",
            "--lab-backend", "kestrel", "--lab-targets", json.dumps(_targets(kestrel)),
            "--lab-options", json.dumps({"timeout": 5.0}), "--lab-run-dir", str(run_dir),
            "--lab-queues", "2", "--lab-producers", "2", "--lab-consumers", "2", "--lab-ack", ack]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return read_worker_samples(run_dir).to_pylist()


def _check_common(rows: list[dict]) -> tuple[set[str], list[dict]]:
    latencies = [r["latency_ns"] for r in rows]
    assert all(latency > 0 for latency in latencies)
    assert any(latency % 1_000_000 for latency in latencies), "latencies rounded to milliseconds"
    puts = [r for r in rows if r["op"] == "put"]
    assert len(puts) > 100 and all(r["outcome"] == "ok" for r in puts)
    put_ids = {r["msg_id"] for r in puts}
    delivered = [r for r in rows if r["op"] == "get" and r["outcome"] == "ok"]
    assert len(delivered) > 100
    assert {r["msg_id"] for r in delivered} <= put_ids  # only what was put comes out
    assert all(r["outcome"] in ("ok", "fail") for r in rows if r["op"] == "get")  # fail = empty, never unknown
    return put_ids, delivered


def test_reliable_load_puts_delivers_and_acks(kestrel, tmp_path):
    rows = _locust(kestrel, tmp_path, "reliable")
    _, delivered = _check_common(rows)
    acks = [r for r in rows if r["op"] == "ack"]
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
