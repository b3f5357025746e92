"""Primer live: ``lab cluster primer`` runs three real ``lab serve primer`` processes on
loopback; a client (httpx) puts on one node and gets on another; a node killed with
kill -9 does not stop the others, and once restarted with the same flags it catches up;
SIGINT stops every node. Also: ``lab serve primer``'s bad flags are one-line errors, and
two embedded nodes in one asyncio program form a cluster."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from lab.backends.primer.embedded import addresses, primer_node

ROOT = Path(__file__).resolve().parents[1]
START_S = 30.0  # the nodes' imports on a busy machine


# -- helpers ------------------------------------------------------------------------------------

def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_base_port(count: int) -> int:
    """A port P with P..P+count-1 and P+100..P+100+count-1 free on loopback."""
    for _ in range(200):
        base = random.randrange(20000, 40000)
        if all(port_is_free(base + offset + i) for offset in (0, 100) for i in range(count)):
            return base
    raise RuntimeError("no free ports")


def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """``check()``'s first truthy value, polled until ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except (httpx.TransportError, OSError, ValueError):
            value = None
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout:g} s")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def lab(*argv: str, **popen: Any) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lab.cli", *argv], cwd=ROOT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, **popen)


class Cluster:
    """``lab cluster primer --nodes 3`` over ``data_dir``."""

    def __init__(self, data_dir: Path, *flags: str):
        self.data_dir = data_dir
        self.base = free_base_port(3)
        self.process = lab("cluster", "primer", "--nodes", "3", "--base-port", str(self.base),
                           "--data-dir", str(data_dir), *flags, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        manifest = data_dir / "cluster.json"
        until(lambda: manifest.exists() or self.process.poll() is not None, START_S, "cluster.json")
        assert self.process.poll() is None, self.process.communicate()
        self.manifest = json.loads(manifest.read_text())
        self.nodes = {n["name"]: n for n in self.manifest["nodes"]}
        self.http = {name: httpx.Client(base_url=n["url"], timeout=10.0) for name, n in self.nodes.items()}

    def stop(self) -> tuple[int, str, str]:
        """SIGINT, as Ctrl-C: the exit code and what it printed."""
        for client in self.http.values():
            client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        out, err = self.process.communicate(timeout=30)
        return self.process.returncode, out, err


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path / "cluster")
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.stop()
        for node in running.nodes.values():  # never leave a node behind, whatever failed
            if alive(node["pid"]):
                os.kill(node["pid"], signal.SIGKILL)


def put(client: httpx.Client, queue: str, payload: bytes) -> str:
    r = client.post(f"/queues/{queue}/messages", content=payload)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def get(client: httpx.Client, queue: str, wait: float = 5.0) -> dict[str, Any]:
    r = client.get(f"/queues/{queue}/messages", params={"wait": wait})
    assert r.status_code == 200, (r.status_code, r.text)
    got = r.json()
    got["payload"] = base64.b64decode(got["payload"])
    return got


def ack(client: httpx.Client, queue: str, got: dict[str, Any]) -> None:
    r = client.post(f"/queues/{queue}/messages/{got['id']}/ack", json={"receipt": got["receipt"]})
    assert r.status_code == 204, r.text


def states(client: httpx.Client) -> dict[str, str]:
    return {m["name"]: m["state"] for m in client.get("/cluster").json()["members"]}


# -- the cluster --------------------------------------------------------------------------------

def test_lab_cluster_primer_serves_three_nodes_and_sigint_stops_them_all(cluster: Cluster):
    base = cluster.base
    assert cluster.manifest == {"nodes": [
        {"name": f"n{i + 1}", "pid": cluster.nodes[f"n{i + 1}"]["pid"], "url": f"http://127.0.0.1:{base + i}",
         "peer": f"127.0.0.1:{base + 100 + i}"} for i in range(3)]}
    pids = [n["pid"] for n in cluster.manifest["nodes"]]
    assert len(set(pids)) == 3 and all(alive(pid) for pid in pids)
    assert sorted(p.name for p in cluster.data_dir.iterdir() if p.is_dir()) == ["n1", "n2", "n3"]

    until(lambda: states(cluster.http["n1"]) == {"n1": "self", "n2": "up", "n3": "up"}, 10, "n1 sees every member")
    message_id = put(cluster.http["n1"], "jobs", b"from n1")
    got = get(cluster.http["n3"], "jobs")
    assert (got["id"], got["payload"]) == (message_id, b"from n1")
    ack(cluster.http["n3"], "jobs", got)

    code, out, err = cluster.stop()
    assert code == 130 and err.rstrip().endswith("lab: interrupted"), err  # Ctrl-C ends every command so
    assert "stopped 3 nodes" in out
    assert [pid for pid in pids if alive(pid)] == []


def test_a_node_killed_with_kill_9_is_not_missed_and_catches_up_when_restarted(cluster: Cluster):
    n1, n3 = cluster.http["n1"], cluster.http["n3"]
    until(lambda: states(n1) == {"n1": "self", "n2": "up", "n3": "up"}, 10, "n1 sees every member")
    n2 = cluster.nodes["n2"]
    argv = Path(f"/proc/{n2['pid']}/cmdline").read_bytes().split(b"\0")[:-1]  # its very flags
    os.kill(n2["pid"], signal.SIGKILL)
    until(lambda: states(n1)["n2"] == "down" and states(n3)["n2"] == "down", 10, "n2 seen down")

    # puts and gets go on at n1 and n3
    for i in range(5):
        message_id = put(n1, "jobs", b"%d" % i)
        got = get(n3, "jobs")
        assert (got["id"], got["payload"]) == (message_id, b"%d" % i)
        ack(n3, "jobs", got)
    while_down = put(n1, "later", b"put while n2 was down")

    restarted = subprocess.Popen([a.decode() for a in argv], cwd=ROOT, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
    try:
        assert restarted.stdout.readline().startswith("ready primer http=")
        with httpx.Client(base_url=n2["url"], timeout=10.0) as again:
            until(lambda: states(again) == {"n1": "up", "n2": "self", "n3": "up"}, 10, "n2 sees every member")
            until(lambda: states(n1)["n2"] == "up", 10, "n1 sees n2 up again")
            until(lambda: again.get("/queues/later").json()["backlog"] == 1, 10, "n2 catches up")
            got = get(again, "later")
            assert (got["id"], got["payload"]) == (while_down, b"put while n2 was down")
            ack(again, "later", got)
        assert "n2" in cluster.stop()[2]  # the cluster said n2 had ended on its own
    finally:
        restarted.send_signal(signal.SIGTERM)
        assert restarted.wait(15) == 130  # stopped cleanly, and says it was interrupted


# -- lab serve primer's flags -------------------------------------------------------------------

@pytest.mark.parametrize("flags, said", [
    (["--peers", "n2"], "--peers entry 'n2': use NAME=HOST:PORT"),
    (["--peers", "n2=127.0.0.1"], "--peers entry"),
    (["--peers", "n2=127.0.0.1:70000"], "from 1 to 65535"),
    (["--peers", "n1=127.0.0.1:9102"], "n1 is this node"),
    (["--peers", "n2=h:1,n2=h:2"], "names n2 twice"),
    (["--port", "65536"], "--port 65536"),
    (["--peer-port", "-1"], "--peer-port -1"),
    (["--replication", "ring"], "replication"),
    (["--node", "a b"], "--node"),
])
def test_bad_serve_flags_are_one_line_errors(tmp_path: Path, flags: list[str], said: str):
    proc = lab("serve", "primer", "--data-dir", str(tmp_path / "d"), *flags, stdout=subprocess.PIPE,
               stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("lab: error: ") and said in err, err


def test_a_bad_rules_file_is_one_line_naming_its_line_and_column(tmp_path: Path):
    rules = tmp_path / "rules.txt"
    rules.write_text('route "a.*" to "b"\nroute "c" to\n')
    proc = lab("cluster", "primer", "--base-port", str(free_base_port(3)), "--data-dir", str(tmp_path / "c"),
               "--rules", str(rules), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and err.count("\n") == 1 and "line 2, column" in err and str(rules) in err, err
    assert not (tmp_path / "c" / "cluster.json").exists()


# -- embedded -----------------------------------------------------------------------------------

def test_two_embedded_nodes_in_one_program_form_a_cluster(tmp_path: Path):
    base = free_base_port(2)

    async def main() -> tuple[bytes, dict[str, str], int]:
        peer = {"a": ("127.0.0.1", base + 100), "b": ("127.0.0.1", base + 101)}
        async with primer_node("a", peer_port=base + 100, port=base, peers={"b": peer["b"]},
                               data_dir=tmp_path / "a", replicas=2) as a, \
                primer_node("b", peer_port=base + 101, peers={"a": peer["a"]}, data_dir=tmp_path / "b",
                            replicas=2) as b:
            assert addresses(a) == {"peer": peer["a"], "http": ("127.0.0.1", base)}
            assert addresses(b) == {"peer": peer["b"]}  # no port: no HTTP
            for _ in range(100):
                if {m["name"]: m["state"] for m in a.cluster()["members"]}.get("b") == "up":
                    break
                await asyncio.sleep(0.05)
            message_id = await b.put("jobs", b"embedded")
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{base}") as http:
                r = await http.get("/queues/jobs/messages", params={"wait": 5})
                got = r.json()
                assert got["id"] == message_id
                r = await http.post(f"/queues/jobs/messages/{message_id}/ack", json={"receipt": got["receipt"]})
            return base64.b64decode(got["payload"]), {m["name"]: m["state"] for m in b.cluster()["members"]}, \
                r.status_code

    payload, members, acked = asyncio.run(main())
    assert payload == b"embedded" and members == {"a": "up", "b": "self"} and acked == 204
    assert port_is_free(base) and port_is_free(base + 100)  # leaving the block closed the ports
