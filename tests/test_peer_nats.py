"""NATS JetStream as a peer: nats-server 2.9.10's own process in the live world, judged by
its promises — a power loss takes publishes it acknowledged within its fixed 2-minute sync
(allowed, naming it), a kill -9 takes none but may undo consumer acks (duplicates,
allowed); the options 2.9.10 lacks are refused naming its version; the Locust client's
round trip, in a gevent-patched subprocess."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lab.design import BadOption
from lab.design.peer import MissingBinary
from lab.experiments.runner import run
from lab.peers.nats.driver import NatsPeer, server_version
from lab.workloads.spec import load_workload
from tests.own_processes import own_mounts, own_processes

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("nats-server") is None and not Path("/usr/sbin/nats-server").exists(),
                                reason="nats-server is not installed (apt-get install nats-server)")


def leftovers(marker: str) -> list[str]:
    """Command lines of the test's live processes that run nats-server or name ``marker`` (a run's folder)."""
    return [f"{pid}: {b' '.join(argv).decode(errors='replace')}"
            for pid, argv in own_processes(lambda argv: any(b"nats-server" in a or marker.encode() in a
                                                            for a in argv)).items()]


def fuse_mounts(under: Path) -> set[str]:
    """Power-loss file systems of a nats node still mounted below ``under``."""
    return own_mounts(under, "/nats/data")


def shortened(name: str, duration: float | None = None):
    workload = load_workload(name)
    return workload if duration is None else dataclasses.replace(workload, duration=duration)


# ---------------------------------------------------------------- options the binary lacks


def test_options_2_9_10_lacks_are_refused_in_one_line_naming_the_version():
    if server_version(NatsPeer.executable()) >= (2, 10):
        pytest.skip("this nats-server has sync_interval and pull AckNone")
    for option, word in (({"sync_interval": "always"}, "sync_interval"), ({"sync_interval": "1s"}, "sync_interval"),
                         ({"ack": "none"}, "pull consumer without acks")):
        with pytest.raises(BadOption) as refused:
            NatsPeer.check_options(option, "live")
        assert "v2.9.10" in str(refused.value) and word in str(refused.value) and "\n" not in str(refused.value)
    assert NatsPeer.check_options({"sync_interval": "2m"}, "live")["sync_interval"] == "2m"  # the default passes
    with pytest.raises(BadOption, match="must be always or a duration"):
        NatsPeer.check_options({"sync_interval": "often"}, "live")


def test_a_missing_binary_is_one_line_naming_the_package(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(Path, "exists", lambda self: False)  # nor in /usr/sbin
    with pytest.raises(MissingBinary) as missing:
        NatsPeer.executable()
    assert "apt-get install nats-server" in str(missing.value) and "\n" not in str(missing.value)


# ---------------------------------------------------------------- runs


def test_a_no_fault_run_is_valid_and_leaves_no_process_or_mount(tmp_path: Path):
    result = run(shortened("steady", 2.0), "nats", "live", out=tmp_path / "r", progress=False)
    assert result.verdict == "valid", result.check.line()
    assert result.check.counts.lost == 0 and result.check.counts.ok > 1000
    assert leftovers(str(tmp_path)) == [] and fuse_mounts(tmp_path) == set()


def test_a_power_loss_with_the_fixed_2_minute_sync_loses_acknowledged_publishes_allowed(tmp_path: Path):
    # 2.9.10 has no sync_interval: always, so the safest setting it has is its only one, and
    # a crash is allowed to lose what its 2-minute sync had not reached
    result = run(shortened("crash"), "nats", "live", out=tmp_path / "r", progress=False)
    verdict = result.check
    assert verdict.verdict == "allowed", verdict.line()
    assert verdict.counts.lost > 0 and "sync_interval=2m" in verdict.line()
    assert leftovers(str(tmp_path)) == [] and fuse_mounts(tmp_path) == set()


def test_kill_9_loses_no_acknowledged_publish_but_may_redeliver_acked_messages(tmp_path: Path):
    result = run(shortened("kill"), "nats", "live", out=tmp_path / "r", progress=False)
    verdict = result.check
    assert verdict.verdict in ("valid", "allowed"), verdict.line()
    assert verdict.counts.lost == 0, verdict.line()
    if verdict.verdict == "allowed":  # only the consumer acks the kill undid may be
        assert "lost" not in verdict.line().split(":")[0] and "undo consumer acks" in verdict.line()
    # the drain found the queue empty (the consumer's backlog, not the stream's)
    assert not any("drain" in w for w in result.warnings), result.warnings


def test_a_gc_pause_is_valid_or_a_redelivery_after_ack_wait(tmp_path: Path):
    result = run(shortened("gc-pause", 3.0), "nats", "live", out=tmp_path / "r", progress=False)
    verdict = result.check
    assert verdict.counts.lost == 0 and verdict.counts.duplicated == 0, verdict.line()
    assert verdict.verdict in ("valid", "allowed"), verdict.line()
    if verdict.verdict == "allowed":  # a fetch the pause outlasted: leased to nobody until AckWait
        assert "AckWait" in verdict.line()


# ---------------------------------------------------------------- the Locust client

ROUND_TRIP = textwrap.dedent("""
    import gevent.monkey
    gevent.monkey.patch_all()
    import json, sys, gevent
    from lab.peers.nats import load

    targets = json.loads(sys.argv[1])
    users = [load.make_client(targets, {"timeout": 2.0}, True, i) for i in range(2)]
    producer, consumer = users
    producer.put("q0", b"first")
    producer.put("q0", b"second")
    body, token = consumer.get("q0")
    consumer.release("q0", token)             # nak: back at the head
    again, token2 = consumer.get("q0")
    consumer.ack("q0", token2)
    # two greenlets at once through the one loop
    jobs = [gevent.spawn(u.get, "q0") for u in users]
    gevent.joinall(jobs, timeout=10)
    got = [j.value for j in jobs]
    for (b, t), u in [(g, u) for g, u in zip(got, users) if g is not None]:
        u.ack("q0", t)
    empty = consumer.get("q0")
    for u in users:
        u.close()
    print(json.dumps({"first": body.decode(), "again": again.decode(),
                      "next": sorted(g[0].decode() for g in got if g is not None), "empty": empty}))
""")


def test_the_locust_client_puts_gets_releases_and_acks_under_gevent(tmp_path: Path):
    from lab.design.registry import backend_class
    from lab.experiments.load import CLIENT, _targets
    from lab.worlds.live import LiveWorld

    world = LiveWorld(root=tmp_path)
    peer = backend_class("nats")(world, {})

    async def main(control):
        await peer.start()
        try:
            await peer.prepare(["q0"])
            targets = _targets(world, peer.server_nodes)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", ROUND_TRIP, json.dumps(targets), cwd=ROOT, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            return proc.returncode, out.decode(), err.decode()
        finally:
            await peer.stop()

    code, out, err = world.run(main)
    assert code == 0, err[-2000:]
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen == {"first": "first", "again": "first", "next": ["second"], "empty": None}
    assert CLIENT == "locust"
