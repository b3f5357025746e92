"""`lab load --master` and `lab load --worker` on one machine, as on several: the workers
are started without the run's settings (they come from the master), send their rows to
the master over Locust's channel, and the run is one run folder, checked; `--host` loads
servers that `lab load` did not start."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pyarrow.compute as pc
import pytest
from pymemcache.client.base import Client

from lab.cli import main
from lab.worlds.live.processes import ServerProcess
from lab.experiments.load import run_load
from lab.history.record import read_samples
from lab.judge.findings import Verdict


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lab(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lab.cli", "load", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_a_master_and_two_workers_make_one_checked_run(tmp_path):
    """The workers reach the master and the servers' proxies at the advertised address,
    127.0.0.2: a socket bound to 127.0.0.1 does not take connections to it, one bound to
    every interface does — as a worker on another machine needs."""
    port = _free_port()
    run_dir = tmp_path / "run"
    master = _lab("kestrel", "--master", "--workers", "2", "--master-bind-port", str(port), "--advertise", "127.0.0.2",
                  "--users", "6", "--spawn-rate", "50", "--duration", "3s", "--out", str(run_dir))
    workers = [_lab("--worker", "--master-host", "127.0.0.2", "--master-port", str(port)) for _ in range(2)]
    try:
        out, _ = master.communicate(timeout=180)
        assert master.returncode == 0, out
        for worker in workers:
            worker.wait(timeout=60)  # the master's end ends them
            assert worker.returncode == 0, worker.stdout.read()
    finally:
        for process in (master, *workers):
            process.kill()
    assert "waiting for 2 worker(s)" in out and "--master-host 127.0.0.2" in out and "VALID" in out
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["verdict"]["verdict"] == Verdict.VALID
    samples = read_samples(run_dir)
    locust = samples.filter(pc.equal(samples["node"], "locust"))
    senders = {name.split("-")[1] for name in (p.name for p in (run_dir / "locust").glob("samples-*.parquet"))}
    assert len(senders) == 2  # each worker's rows reached the master, under its own name
    processes = {client[1:].split("x")[0] for client in locust["client"].to_pylist()}
    assert processes == senders
    puts = locust.filter(pc.equal(locust["op"], "put"))
    assert puts.num_rows > 200 and pc.all(pc.greater(puts["latency_ns"], 0)).as_py()
    assert (run_dir / "locust" / "locust_stats.csv").is_file()


@pytest.fixture
def kestrel(tmp_path):
    process = ServerProcess("kestrel", tmp_path / "queues", ["--port", "0"]).start()
    yield process
    process.stop()


def test_host_loads_a_server_lab_load_did_not_start_in_queues_of_its_own(kestrel, tmp_path):
    address = f"127.0.0.1:{kestrel.ports['memcache']}"
    client = Client(("127.0.0.1", kestrel.ports["memcache"]))
    client.set("q0", b"left by somebody else", noreply=False)  # not this run's: its queues are named after the run
    result = run_load("kestrel", users=4, spawn_rate=50, duration=2, hosts=[address], out=tmp_path / "run",
                      echo=lambda *_: None)
    v = result.check
    assert v.judgement.verdict == Verdict.VALID and v.counts.lost == 0 and v.counts.unexpected == 0, v.judgement.reason
    assert v.counts.enqueued > 200
    samples = read_samples(result.run_dir)
    queues = set(samples.filter(pc.equal(samples["op"], "put"))["queue"].to_pylist())
    assert len(queues) == 1 and queues.pop().endswith("-q0")
    assert kestrel.running  # lab load leaves the server it did not start alone
    assert client.get("q0") == b"left by somebody else"
    client.close()


@pytest.mark.parametrize("argv, words", [
    (["load", "kestrel", "--host", "nowhere"], "use HOST:PORT"),
    (["load", "kestrel", "--host", "127.0.0.1:1", "--host", "127.0.0.1:2"], "all given already"),
    (["load", "kestrel", "--host", "n9=127.0.0.1:1"], "server nodes are kestrel"),
    (["load", "kestrel", "--host", "127.0.0.1:1"], "kestrel.memcache at 127.0.0.1:1 takes no connection"),
    (["load", "kestrel", "--host", "kestrel.text=127.0.0.1:1"], "uses the ports memcache"),
    (["load", "primer", "--host", "127.0.0.1:9001"], "needs n2.http, n3.http too"),
    (["load", "cassieq", "--host", "127.0.0.1:8080"], "admin"),
    (["load", "kestrel", "--host", "127.0.0.1:1", "--faults", "{faults}"], "with --host the servers are yours"),
    (["load", "--worker"], "needs --master-host"),
    (["load", "kestrel", "--worker", "--master-host", "h"], "takes no BACKEND"),
    (["load", "--users", "3"], "needs a BACKEND"),
    (["load", "kestrel", "--workers", "3"], "go with --master"),
    (["load", "kestrel", "--master", "--workers", "0"], "--workers must be at least 1"),
    (["load", "kestrel", "--master", "--processes", "2"], "not --processes"),
    (["load", "kestrel", "--master-host", "h"], "goes with --worker"),
    (["load", "primer", "--batch", "5"], "primer's consumers read one message per request"),
    (["load", "kestrel", "--batch", "0"], "--batch 0: use 1 or more"),
    (["load", "kestrel", "--batch", "4"], "needs maxOpenTransactions >= 4 (it is 1)"),
    (["load", "kestrel", "--batch", "4", "--ack", "auto", "--option", "maxOpenTransactions=4"], "needs reliable reads"),
    (["load", "queuefka", "--release-p", "0.1"], "queuefka's consumers cannot hand a message back"),
])
def test_bad_distributed_and_host_arguments_are_one_line_errors(capsys, tmp_path, argv, words):
    faults = tmp_path / "faults.yaml"
    faults.write_text("- {fault: pause, at: 1, duration: 1, target: servers}\n")
    argv = [a.replace("{faults}", str(faults)) for a in argv]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
