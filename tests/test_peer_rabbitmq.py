"""RabbitMQ as a peer: the Debian package's server, live, under no fault, a power loss and a
kill -9, judged by the promises its options make; it stops with nothing of it left (no
beam.smp, no erl_child_setup, no private epmd, no FUSE mount); its Locust client does a
round trip against a real node."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

import pytest

from lab.design.peer import MissingBinary
from lab.experiments.runner import run
from lab.peers.rabbitmq import driver
from lab.peers.rabbitmq.driver import RabbitmqPeer
from lab.workloads.spec import load_workload
from tests.own_processes import own_mounts, own_processes
from tests.peer_support import first_pick_taken, nothing_lost

pytestmark = [pytest.mark.skipif(not (driver.BIN / "rabbitmq-server").exists(),
                                 reason="rabbitmq-server is not installed (make brokers)"),
              pytest.mark.xdist_group("rabbitmq")]  # one node at a time: a boot is seconds of both cores

ERLANG = ("beam.smp", "erl_child_setup", "epmd", "rabbitmq")
# what a crash or kill may do besides losing: an ack it undid, or a delivery its channel's
# close handed back, comes again (a quorum queue's at the tail)
REDELIVERED = ("an ack the broker had not yet made durable", "a delivery handed back", "a nacked message goes back")


def workload(name: str, **changes):
    return dataclasses.replace(load_workload(name), **changes)  # a standard workload or a scenario, by name


def erlang_processes() -> dict[int, str]:
    """The running test's live processes of an Erlang VM, its helpers or a rabbitmq script,
    with their command line and, for an epmd, its port (a private one has ERL_EPMD_PORT)."""
    found = {}
    for pid, argv in own_processes(lambda argv: any(word in b" ".join(argv).decode(errors="replace")
                                                     for word in ERLANG)).items():
        cmdline = b" ".join(argv).decode(errors="replace")
        if "epmd" in cmdline:
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            port = next((v.split(b"=", 1)[1].decode() for v in environ.split(b"\0") if v.startswith(b"ERL_EPMD_PORT=")),
                        None)
            cmdline += f" [epmd port {port}]" if port else ""
        found[pid] = cmdline
    return found


def mounts(under: Path) -> set[str]:
    """The power-loss file systems of rabbitmq nodes still mounted below ``under``."""
    return own_mounts(under, "/rabbitmq/data")


def left_behind(before: dict[int, str]) -> list[str]:
    """What a run started and did not stop: lab node VMs, their helpers, private epmds
    (another engineer's system broker, if any, was there before)."""
    return [cmd for pid, cmd in erlang_processes().items()
            if pid not in before and ("rabbit" in cmd or "@localhost" in cmd or "epmd port" in cmd
                                      or "erl_child_setup" in cmd)]


def test_the_options_take_on_and_off_as_the_option_parser_gives_them():
    options = RabbitmqPeer.check_options({"confirms": False, "persistent": True, "queue_type": "quorum"}, "live")
    assert options["confirms"] == "off" and options["persistent"] == "on" and options["prefetch"] == 1
    with pytest.raises(Exception, match="queue_type"):
        RabbitmqPeer.check_options({"queue_type": "stream"}, "live")


def test_the_promises_follow_the_settings():
    safe = RabbitmqPeer.promises(RabbitmqPeer.check_options({"queue_type": "quorum"}, "live"), True)
    assert not [a for a in safe.allowances if a.anomaly == "lost" and a.covers("crash")]
    assert safe.hands_back_on_close and safe.lease_s is None
    fast = RabbitmqPeer.promises(RabbitmqPeer.check_options({"confirms": "off"}, "live"), True)
    assert any(a.covers("kill") and "confirms=off" in a.why for a in fast.allowances if a.anomaly == "lost")
    transient = RabbitmqPeer.promises(RabbitmqPeer.check_options({"persistent": "off"}, "live"), True)
    assert any("persistent=off" in a.why for a in transient.allowances if a.covers("kill"))
    # a quorum queue persists every message, whatever the delivery mode
    quorum = RabbitmqPeer.promises(RabbitmqPeer.check_options({"queue_type": "quorum", "persistent": "off"}, "live"),
                                   True)
    assert not [a for a in quorum.allowances if "persistent=off" in a.why]


def test_a_missing_binary_is_one_line_naming_the_package(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(driver, "BIN", tmp_path / "none")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingBinary) as error:
        RabbitmqPeer.executable()
    assert "apt-get install rabbitmq-server" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(MissingBinary):
        run(workload("steady", duration=1.0, warmup=0.0), "rabbitmq", "live", out=tmp_path / "r", progress=False)


def test_a_no_fault_run_is_valid_and_leaves_nothing_running(tmp_path: Path):
    before = erlang_processes()
    # a client timeout well past a busy machine's stalls: with the default 1 s, a put that a
    # loaded CI machine held past it made a no-fault run "allowed", not a fault of the broker's
    result = run(workload("steady", duration=2.0, warmup=0.5), "rabbitmq", "live", out=tmp_path / "r",
                 progress=False, options={"timeout": 5.0})
    assert result.verdict == "valid" and result.check.counts.lost == 0, result.check.line()
    assert result.check.counts.ok > 500
    assert left_behind(before) == []
    assert mounts(tmp_path) == set()


def test_a_power_loss_with_quorum_queues_and_confirms_loses_nothing_confirmed(tmp_path: Path):
    result = run(workload("crash"), "rabbitmq", "live", out=tmp_path / "r", progress=False,
                 options={"queue_type": "quorum"})
    nothing_lost(result, *REDELIVERED)
    assert result.check.counts.ok > 100


def test_a_power_loss_without_confirms_loses_some_and_is_allowed_by_that_setting(tmp_path: Path):
    result = run(workload("crash"), "rabbitmq", "live", out=tmp_path / "r", progress=False,
                 options={"confirms": "off"})
    assert result.verdict == "allowed" and result.check.counts.lost > 0, result.check.line()
    assert "confirms=off" in result.check.line()


def test_a_kill_9_of_a_classic_queue_with_confirms_loses_nothing(tmp_path: Path):
    before = erlang_processes()
    result = run(workload("kill"), "rabbitmq", "live", out=tmp_path / "r", progress=False)
    nothing_lost(result, *REDELIVERED)
    assert left_behind(before) == []  # the restarted node, and the epmd it reused, are gone too


def test_a_sigstop_of_beam_is_valid_or_allowed(tmp_path: Path):
    result = run(workload("gc-pause", duration=3.0), "rabbitmq", "live", out=tmp_path / "r", progress=False)
    verdict = result.check
    assert verdict.verdict in ("valid", "allowed"), verdict.line()
    assert verdict.counts.lost == 0  # a pause takes nothing: the node and its connections live on
    if verdict.verdict == "allowed":  # a get cut by the client's timeout comes back after its channel closes
        assert "reorder" in verdict.line() or "duplicat" in verdict.line(), verdict.line()


def test_the_locust_client_puts_gets_acks_and_releases_on_a_real_node():
    from lab.design.load import Refused
    from lab.peers.rabbitmq import load
    from lab.worlds.live import LiveWorld

    world = LiveWorld(seed=1)
    peer = RabbitmqPeer(world, {})

    def round_trip(targets) -> list:
        client = load.make_client(targets, dict(peer.options), True, 0)
        seen = []
        try:
            client.put("q0", b"one")
            client.put("q0", b"two")
            body, token = client.get("q0")
            seen.append(body)
            client.release("q0", token)  # back at the head of a classic queue
            body, token = client.get("q0")
            seen.append(body)
            client.ack("q0", token)
            body, token = client.get("q0")
            seen.append(body)
            client.ack("q0", token)
            seen.append(client.get("q0"))
            with pytest.raises(Refused):
                client.put("nowhere", b"x")  # unroutable (mandatory): the broker returns it
        finally:
            client.close()
        return seen

    async def main(control):
        await peer.start()
        await peer.prepare(["q0"])
        host, port = world.address(peer.server_nodes[0], "amqp", "locust")
        return await asyncio.get_running_loop().run_in_executor(
            None, round_trip, {"rabbitmq": {"amqp": f"{host}:{port}"}})

    assert world.run(main) == [b"one", b"one", b"two", None]
    assert os.environ.get("GEVENT_SUPPORT") is None  # this process never loaded gevent's patches


def test_a_node_whose_port_mapper_port_was_taken_starts_again_on_fresh_ports(monkeypatch, caplog):
    """Another socket holds the port picked for the node's port mapper between the pick and
    the boot (an outgoing connection's can; a CI run once failed so): the boot's net_kernel
    says only ``nodistribution`` and the VM exits 0. The node starts again on fresh ports and
    a client's round trip works. (A squatter that *listens* there is another matter: the
    boot may wait on it, or even come up with its probe unable to reach the port mapper.)"""
    from lab.worlds.live import LiveWorld

    world = LiveWorld(seed=1)
    peer = RabbitmqPeer(world, {})
    before = erlang_processes()

    async def main(control):
        await peer.start()
        await peer.prepare(["q0"])
        queue = peer.client(control, False)
        try:
            await queue.put("q0", b"after the clash")
            got = await queue.get("q0", 5.0)
        finally:
            await queue.close()
        return world.processes["rabbitmq"].ports, world.root, got

    with first_pick_taken(monkeypatch, "epmd") as picks:
        ports, root, got = world.run(main)
    assert len(picks) == 2 and ports == picks[1] and ports["epmd"] != picks[0]["epmd"]
    assert got is not None and got.body == b"after the clash"
    assert any("was taken (its log says 'nodistribution')" in r.getMessage() for r in caplog.records)
    assert left_behind(before) == []
    assert mounts(root) == set()
