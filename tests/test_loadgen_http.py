"""The HTTP designs' load clients (``lab/backends/queuefka/load.py``, ``cassieq/load.py``,
``primer/load.py``) against their real servers (``lab serve …`` processes on free loopback
ports): each client's operations and refusals directly, then a short headless Locust load
(a subprocess: locust's gevent must not patch the test process) whose recorded samples are
checked — puts ok, only what was put delivered, acks ok, latencies in nanoseconds."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from lab.backends.cassieq import load as cassieq
from lab.backends.primer import load as primer
from lab.backends.queuefka import load as queuefka
from lab.design.load import Refused
from lab.design.message import encode
from lab.worlds.live.processes import ServerProcess
from loadgen.recording import read_worker_samples

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = {"timeout": 5.0}  # a busy machine is slow, never a hang
SESSION_S = 0.3  # Queuefka's session timeout in its direct test


def _start(processes: list[ServerProcess]) -> list[ServerProcess]:
    """Launch every process, then wait for each (their imports overlap); stop them all if one fails."""
    try:
        for process in processes:
            process.launch()
        for process in processes:
            process.wait_ready()
    except BaseException:
        _stop(processes)
        raise
    return processes


def _stop(processes: list[ServerProcess]) -> None:
    for process in processes:
        if process.proc is not None:
            process.stop()


# -- servers: a fresh one per test, so a load never reads what an earlier test left in q0 --------

@pytest.fixture
def queuefka_targets(tmp_path) -> Iterator[dict]:
    yield from _queuefka(tmp_path, [])


@pytest.fixture
def queuefka_short_session(tmp_path) -> Iterator[dict]:
    """Records fetched and not committed come back after a fraction of a second."""
    yield from _queuefka(tmp_path, ["--session-timeout", repr(SESSION_S)])


def _queuefka(tmp_path: Path, argv: list[str]) -> Iterator[dict]:
    processes = _start([ServerProcess("queuefka", tmp_path / "queuefka", argv)])
    yield {"queuefka-0": {"http": f"127.0.0.1:{processes[0].ports['http']}"}}
    _stop(processes)


@pytest.fixture
def cassieq_targets(tmp_path) -> Iterator[dict]:
    """Two API nodes over one SQLite file, as the live world runs CassieQ."""
    store = f"sqlite:///{tmp_path / 'cassieq.db'}"
    processes = _start([ServerProcess("cassieq", tmp_path / f"api-{i}",
                                      ["--store", store, "--node-index", str(i), "--nodes", "2"]) for i in range(2)])
    yield {f"api-{i}": {"http": f"127.0.0.1:{p.ports['http']}", "admin": f"127.0.0.1:{p.ports['admin']}"}
           for i, p in enumerate(processes)}
    _stop(processes)


def _free_ports(count: int) -> list[int]:
    import socket

    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.fixture
def primer_targets(tmp_path) -> Iterator[dict]:
    """Three nodes in a full mesh: the peers must know each other's peer ports up front."""
    names = ["n1", "n2", "n3"]
    peer_ports = dict(zip(names, _free_ports(3)))
    processes = []
    for name in names:
        peers = ",".join(f"{peer}=127.0.0.1:{port}" for peer, port in peer_ports.items() if peer != name)
        process = ServerProcess("primer", tmp_path / name, ["--node", name, "--peers", peers, "--replicas", "2"])
        process.ports = {"http": 0, "peer": peer_ports[name]}
        processes.append(process)
    _start(processes)
    yield {name: {"http": f"127.0.0.1:{p.ports['http']}"} for name, p in zip(names, processes)}
    _stop(processes)


# -- the clients directly ------------------------------------------------------------------------

def _body(n: int) -> bytes:
    return encode(f"t:{n}", 1, 40)


def test_queuefka_client_reads_in_the_group_and_commits(queuefka_short_session):
    reader = queuefka.make_client(queuefka_short_session, OPTIONS, True, 1)
    try:
        assert reader.get("direct") is None  # no topic yet: an empty get, not an error
        for n in range(3):
            reader.put("direct", _body(n))
        body, token = reader.get("direct")
        assert body == _body(0) and reader.buffered("direct") == 2  # one fetch, handed out one by one
        reader.ack("direct", token)
        with pytest.raises(Refused):  # beyond the end of the log
            reader.ack("direct", 10**9)
    finally:
        reader.close()
    # once the session is over, the group goes on from its commit: after record 0, not before
    time.sleep(SESSION_S * 2)
    other = queuefka.make_client(queuefka_short_session, {**OPTIONS, "prefetch": 1}, True, 2)
    try:
        assert other.get("direct")[0] == _body(1)
    finally:
        other.close()


def test_queuefka_plain_gets_commit_as_they_fetch(queuefka_targets):
    client = queuefka.make_client(queuefka_targets, {**OPTIONS, "prefetch": 1}, False, 1)
    try:
        client.put("plain", _body(0))
        client.put("plain", _body(1))
        assert client.get("plain")[0] == _body(0)
    finally:
        client.close()
    again = queuefka.make_client(queuefka_targets, {**OPTIONS, "prefetch": 1}, False, 2)
    try:
        assert again.get("plain")[0] == _body(1)  # record 0 is taken for good: at most once
        assert again.get("plain") is None
    finally:
        again.close()


def test_cassieq_client_leases_acks_and_releases(cassieq_targets):
    first = cassieq.make_client(cassieq_targets, OPTIONS, True, 0)
    second = cassieq.make_client(cassieq_targets, OPTIONS, True, 1)  # the other API node, the same account
    try:
        assert first.http.client.port != second.http.client.port
        first.put("direct", _body(0))
        body, receipt = second.get("direct")
        assert body == _body(0)
        assert first.get("direct") is None  # leased: invisible to others
        second.release("direct", receipt)  # visible again at once
        body, receipt = first.get("direct")
        assert body == _body(0)
        first.ack("direct", receipt)
        with pytest.raises(Refused):  # acked already: its receipt is spent
            first.ack("direct", receipt)
        assert second.get("direct") is None
    finally:
        first.close()
        second.close()


def test_primer_clients_spread_over_the_nodes_and_settle_with_receipts(primer_targets):
    clients = [primer.make_client(primer_targets, OPTIONS, True, user) for user in range(3)]
    try:
        assert len({c.http.client.port for c in clients}) == 3  # one node per user, every node used
        clients[0].put("direct", _body(0))
        body, token = clients[1].get("direct")  # a put on n1 read on n2
        assert body == _body(0) and token is not None
        clients[1].release("direct", token)
        body, token = clients[2].get("direct")
        assert body == _body(0)
        clients[2].ack("direct", token)
        with pytest.raises(Refused):
            clients[2].ack("direct", ("no-such-id", "no-such-receipt"))
    finally:
        for client in clients:
            client.close()


@pytest.mark.parametrize("module, targets", [(cassieq, "cassieq_targets"), (primer, "primer_targets")])
def test_a_plain_get_takes_the_message_for_good(request, module, targets):
    """CassieQ's plain get acks at once; Primer's is an at-most-once get."""
    client = module.make_client(request.getfixturevalue(targets), OPTIONS, False, 0)
    try:
        client.put("plain", _body(0))
        assert client.get("plain") == (_body(0), None)
        assert client.get("plain") is None
    finally:
        client.close()


@pytest.mark.parametrize("module, targets", [
    (queuefka, {"queuefka-0": {"http": "127.0.0.1:1"}}),
    (cassieq, {"api-0": {"http": "127.0.0.1:1", "admin": "127.0.0.1:1"}}),
    (primer, {"n1": {"http": "127.0.0.1:1"}}),
])
def test_unreachable_server_is_not_a_refusal(module, targets):
    client = module.make_client(targets, {"timeout": 0.5}, True, 0)
    try:
        with pytest.raises(Exception) as caught:
            client.put("q", b"x")
        assert not isinstance(caught.value, Refused)  # the outcome is unknown, not "did not happen"
    finally:
        client.close()


# -- short Locust loads --------------------------------------------------------------------------

def _locust(backend: str, targets: dict, run_dir: Path, ack: str, options: dict[str, Any] = OPTIONS) -> list[dict]:
    argv = [sys.executable, "-m", "locust", "-f", str(ROOT / "loadgen" / "locustfile.py"), "--headless",
            "-u", "4", "-r", "100", "-t", "3s", "--only-summary", "--exit-code-on-error", "0",
            "--stop-timeout", "5",  # as lab load runs it: a user finishes its request before it stops
            "--lab-backend", backend, "--lab-targets", json.dumps(targets), "--lab-options", json.dumps(options),
            "--lab-run-dir", str(run_dir), "--lab-queues", "2", "--lab-producers", "2", "--lab-consumers", "2",
            "--lab-ack", ack]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return read_worker_samples(run_dir).to_pylist()


def _check(rows: list[dict], reliable: bool) -> None:
    latencies = [r["latency_ns"] for r in rows]
    assert latencies and all(latency > 0 for latency in latencies)
    assert any(latency % 1_000_000 for latency in latencies), "latencies rounded to milliseconds"
    # a request cut short by the run's end is recorded, its outcome unknown (it may have been done)
    cut = [r for r in rows if r["outcome"] == "info" and (r["error"] or "").startswith("interrupted")]
    assert len(cut) <= 4  # one per user at most
    rows = [r for r in rows if r not in cut]
    puts = [r for r in rows if r["op"] == "put"]
    assert len(puts) > 20 and all(r["outcome"] == "ok" for r in puts), {r["error"] for r in puts}
    delivered = [r for r in rows if r["op"] == "get" and r["outcome"] == "ok"]
    assert len(delivered) > 20
    assert {r["msg_id"] for r in delivered} <= {r["msg_id"] for r in puts + cut}  # only what was put comes out
    gets = [r for r in rows if r["op"] == "get"]
    assert all(r["outcome"] in ("ok", "fail") and (r["outcome"] == "ok" or r["error"] == "empty") for r in gets)
    acks = [r for r in rows if r["op"] == "ack"]
    if reliable:
        assert all(r["outcome"] == "ok" for r in acks), {r["error"] for r in acks}
        # each delivery is acked, but a consumer stopped at the run's end may not have acked its last
        assert len(delivered) - 2 <= len(acks) <= len(delivered)
        assert {r["msg_id"] for r in acks} <= {r["msg_id"] for r in delivered}
    else:
        assert not acks and not [r for r in rows if r["op"] == "release"]
        ids = [r["msg_id"] for r in delivered]
        assert len(ids) == len(set(ids))  # at most once: no message twice


def test_queuefka_reliable_load(queuefka_targets, tmp_path):
    _check(_locust("queuefka", queuefka_targets, tmp_path / "run", "reliable"), reliable=True)


def test_cassieq_reliable_load(cassieq_targets, tmp_path):
    # two API nodes write one SQLite file: on a busy machine a request can wait out its busy
    # timeout past a 1 s client timeout (an unknown outcome), which is no fault of the client
    patient = {**OPTIONS, "timeout": 10.0}
    _check(_locust("cassieq", cassieq_targets, tmp_path / "run", "reliable", patient), reliable=True)


@pytest.mark.parametrize("ack", ["reliable", "auto"])
def test_primer_load(primer_targets, tmp_path, ack):
    _check(_locust("primer", primer_targets, tmp_path / "run", ack), reliable=ack == "reliable")
