"""Primer's failure detector (``suspect_after``): a declared option, checked before anything
runs, that reaches the sim node and every ``lab serve primer`` process; and, on a machine
whose cores are all busy, fault-free live runs whose puts it never refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.compute as pc
import pytest

from lab.design.options import BadOption
from lab.backends.primer.core.config import HEARTBEAT_S, SUSPECT_AFTER_S, NodeConfig
from lab.backends.primer.core.errors import Unavailable
from lab.backends.primer.driver import PrimerBackend
from lab.backends.primer.serve import add_arguments, node_config
from lab.cli import main
from lab.history.record import read_samples
from lab.experiments.runner import run
from lab.judge.findings import Verdict
from lab.workloads.spec import parse_workload
from models.world import SimWorld


def _workload(**fields):
    base = {"name": "primer-fd", "queues": 1, "producers": 2, "consumers": 2, "message_size": 100, "rate": 300,
            "duration": 1.0, "warmup": 0.5, "ack": "reliable", "seed": 31}
    base.update(fields)
    return parse_workload(base)


# ----------------------------------------------------------------------------- declared and checked


def test_the_option_is_declared_with_its_default_and_listed(capsys):
    option = {o.name: o for o in PrimerBackend.options_declared}["suspect_after"]
    assert option.default == SUSPECT_AFTER_S == NodeConfig("n1").suspect_after  # one default for both worlds
    assert PrimerBackend.check_options(None)["suspect_after"] == SUSPECT_AFTER_S
    assert PrimerBackend.check_options({"suspect_after": 3})["suspect_after"] == 3.0
    assert main(["backends"]) == 0
    listed = [line.strip() for line in capsys.readouterr().out.splitlines() if "suspect_after:" in line]
    assert listed == [f"suspect_after: {option.describe()}"] and f"(default {SUSPECT_AFTER_S})" in listed[0]


@pytest.mark.parametrize("bad", [HEARTBEAT_S, 0.05, 0, -1, "1s", float("inf"), True])
def test_a_bad_value_is_a_clear_error_before_anything_runs(bad, tmp_path):
    with pytest.raises(BadOption, match=r"option suspect_after=.*: must be a number of seconds > 0\.1$"):
        PrimerBackend.check_options({"suspect_after": bad})
    with pytest.raises(BadOption, match="suspect_after"):
        run(_workload(), "primer", "sim", out=tmp_path / "run", progress=False, options={"suspect_after": bad})
    assert not (tmp_path / "run").exists()  # nothing written


def test_the_command_line_refuses_a_bad_value_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "steady", "--backend", "primer", "--option", "suspect_after=0.05", "--out", str(out)]) == 2
    assert "option suspect_after=0.05: must be a number of seconds > 0.1" in capsys.readouterr().err
    assert not out.exists()


# ----------------------------------------------------------------------------- where it goes


def test_the_sim_nodes_use_it_a_peer_counts_as_down_only_after_it():
    """W=3 with n3 crashed: before ``suspect_after`` n1 still counts n3 as up and its put
    waits for n3's copy until the peer call times out; after it, n1 refuses at once."""
    world = SimWorld(seed=5)
    backend = PrimerBackend(world, {"replicas": 3, "suspect_after": 2.5})

    async def main_(rt):
        for node in backend.nodes:
            await world.start(node, backend.boot(node))
        assert {node.config.suspect_after for node in backend.booted} == {2.5}
        n1 = backend.booted[0]
        await rt.sleep(0.5)
        world.crash("n3")
        await rt.sleep(1.5)  # silent for 1.5 s: past the old 0.5 s, within 2.5 s
        assert n1.membership.up("n3")
        with pytest.raises(Unavailable, match="did not store"):  # tried n3: the call timed out
            await n1.put("q", b"early")
        await rt.sleep(1.5)  # now silent for 3 s and more
        assert not n1.membership.up("n3")
        started = rt.now()
        with pytest.raises(Unavailable, match="replicas=3, but only 2 members are up"):
            await n1.put("q", b"late")
        assert rt.now() == started  # refused without a call
        assert n1.membership.view()[2]["state"] == "down"

    world.run(main_, until=30)


def test_the_server_processes_get_it_as_a_flag(tmp_path):
    backend = PrimerBackend(SimWorld(seed=1), {"suspect_after": 1.75})
    argv = backend.serve_args("n1", tmp_path / "n1", lambda peer, port: f"127.0.0.1:{9100 + int(peer[1:])}")
    assert argv[argv.index("--suspect-after") + 1] == "1.75"
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config, peers = node_config(parser.parse_args([*argv, "--data-dir", str(tmp_path / "n1")]))
    assert config.suspect_after == 1.75 and set(peers) == {"n2", "n3"}
    default, _ = node_config(parser.parse_args(["--data-dir", str(tmp_path / "d")]))
    assert default.suspect_after == SUSPECT_AFTER_S  # `lab serve primer` alone: the lab's default
    with pytest.raises(ValueError, match=r"suspect_after 0\.05: use more seconds than the heartbeat"):
        node_config(parser.parse_args(["--data-dir", str(tmp_path / "d"), "--suspect-after", "0.05"]))


def test_a_live_server_process_runs_with_it(tmp_path):
    """A real ``lab serve primer`` process started by the live world reports the value in
    its view of the cluster (``GET /cluster``)."""
    from lab.worlds.live import LiveWorld

    world = LiveWorld(seed=1, root=tmp_path)
    backend = PrimerBackend(world, {"nodes": 1, "replicas": 1, "suspect_after": 1.25})

    async def main_(control):
        from lab.design.http_client import ResponseReader, encode_request

        try:
            await backend.start()
            conn = control.net.connect("n1", "http")
            reply = await conn.exchange(encode_request("GET", "/cluster", "primer", b""), ResponseReader("GET"), 10.0)
            await conn.close()
            return json.loads(reply.body)
        finally:
            await backend.stop()

    view = world.run(main_)
    assert view["suspect_after"] == 1.25


def _views(control, nodes) -> dict:
    """Each node's ``GET /cluster``, by node."""
    from lab.design.http_client import ResponseReader, encode_request

    async def one(node):
        conn = control.net.connect(node, "http")
        try:
            reply = await conn.exchange(encode_request("GET", "/cluster", "primer"), ResponseReader("GET"), 10.0)
            return json.loads(reply.body)
        finally:
            await conn.close()

    return one


def test_a_live_run_starts_once_every_node_has_heard_every_other(tmp_path):
    """The last node's beats reach the first node 2 s late (a delay on that link): the first
    node's trust in it, from its own boot, runs out before they come. ``start`` returns only
    once the first node has heard it, so a run's first put finds every node up (without the
    wait, n1 would count n3 down right then and refuse a W=3 put)."""
    from lab.worlds.live import LiveWorld

    world = LiveWorld(seed=1, root=tmp_path)
    backend = PrimerBackend(world, {"replicas": 3})
    world.add_delay("n3", "n1", 2_000_000_000)  # kept for the n3 -> n1 proxy made when n3 starts

    async def main_(control):
        view = _views(control, backend.nodes)
        try:
            await backend.start()
            return {node: await view(node) for node in backend.nodes}
        finally:
            await backend.stop()

    views = world.run(main_)
    states = {node: {m["name"]: m["state"] for m in v["members"]} for node, v in views.items()}
    assert all(state != "down" for s in states.values() for state in s.values()), states
    assert views["n1"]["members"][2]["longest_silence_s"] < 1.0  # n3's beats came on time since the first


# ----------------------------------------------------------------------------- on a busy machine


@pytest.fixture
def busy_cores():
    """One busy process per core (at least two), killed however the test ends."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(2, os.cpu_count() or 2))]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


@pytest.mark.slow  # about 6 min: 20 live runs of three server processes each, on a machine kept busy
def test_no_put_refused_in_fault_free_live_runs_on_busy_cores(busy_cores, tmp_path):
    """Every other run with W=3, where one peer counted down refuses a put; the others with
    the design's defaults (W=2)."""
    for i in range(20):
        options = {"replicas": 3} if i % 2 else {}
        result = run(_workload(seed=100 + i), "primer", "live", out=tmp_path / f"run{i}", progress=False,
                     options=options)
        samples = read_samples(result.run_dir, ["op", "outcome", "error", "phase"])
        puts = samples.filter(pc.equal(samples["op"], "put"))
        refused = puts.filter(pc.not_equal(puts["outcome"], "ok"))  # in any phase, warm-up and drain too
        assert refused.num_rows == 0, (i, options, refused.to_pylist()[:5])
        assert puts.num_rows > 300
        v = result.check
        assert v.judgement.verdict == Verdict.VALID and v.counts.lost == 0, (i, v.judgement.reason)
        assert all(hog.poll() is None for hog in busy_cores)  # the cores were busy all along
