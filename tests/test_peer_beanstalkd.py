"""beanstalkd as a peer (``lab.peers.beanstalkd``): its options and promises, live runs of the
real ``beanstalkd`` judged by them (no fault, power loss under each fsync setting, kill -9,
a pause), a clean stop, the one-line error for a missing binary, and the Locust client's
round trip against a running broker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from lab.design import BadOption, message
from lab.design.peer import MissingBinary
from lab.peers.beanstalkd.driver import BeanstalkdPeer, fsync_flags
from tests import peer_support

# what a fault may do besides losing: a job reserved when it came is ready again (after a
# restart, or once its reservation ended), behind jobs delivered meanwhile
REDELIVERED = ("reservations are not logged", "is ready again behind jobs")

pytestmark = pytest.mark.skipif(not Path("/usr/bin/beanstalkd").exists() and not Path("/usr/sbin/beanstalkd").exists(),
                                reason="beanstalkd is not installed (apt-get install beanstalkd)")


def live(workload: str, tmp_path: Path, duration: float | None = None, **options):
    return peer_support.live("beanstalkd", workload, tmp_path, duration, **options)


def test_fsync_takes_its_flags_values_and_says_what_it_allows():
    check = BeanstalkdPeer.check_options
    assert check({})["fsync"] == 50 and check({})["ttr"] == 2
    assert check({"fsync": 0})["fsync"] == 0 and check({"fsync": "50"})["fsync"] == 50
    assert check({"fsync": "never"})["fsync"] == "never" and check({"fsync": 7})["fsync"] == 7
    assert fsync_flags(0) == ["-f", "0"] and fsync_flags(50) == ["-f", "50"] and fsync_flags("never") == ["-F"]
    for bad in (-1, True, "always", 2.5):
        with pytest.raises(BadOption, match="never"):
            check({"fsync": bad})


def test_promises_follow_the_fsync_setting():
    def crash_losses(fsync) -> list:
        promises = BeanstalkdPeer.promises(BeanstalkdPeer.check_options({"fsync": fsync}), True)
        return [a for a in promises.allowances if a.anomaly == "lost" and a.covers("crash")]

    assert crash_losses(0) == []
    (lazy,) = crash_losses(50)
    assert lazy.window_s is None and "no timer" in lazy.why  # the tail waits for a later write, not a clock
    (never,) = crash_losses("never")
    assert "fsync=never" in never.why
    promises = BeanstalkdPeer.promises(BeanstalkdPeer.check_options({"ttr": 3}), True)
    assert promises.lease_s == 3.0 and promises.hands_back_on_close
    assert not any(a.anomaly == "lost" and a.covers("kill") for a in promises.allowances)


def test_a_no_fault_run_is_valid_and_leaves_nothing_behind(tmp_path: Path):
    pids, mounts = peer_support.processes(b"beanstalkd"), peer_support.mounts("beanstalkd", tmp_path)
    result = live("steady", tmp_path, duration=2.0)
    assert result.verdict == "valid", result.check.line()
    assert result.check.counts.lost == 0 and result.check.counts.ok > 500
    assert peer_support.processes(b"beanstalkd") - pids == set()
    assert peer_support.mounts("beanstalkd", tmp_path) - mounts == set()


def test_a_power_loss_under_fsync_0_loses_nothing_acknowledged(tmp_path: Path):
    result = live("crash", tmp_path, fsync=0)
    peer_support.nothing_lost(result, *REDELIVERED)
    assert result.check.counts.ok > 500, result.check.line()


def test_a_power_loss_under_fsync_never_loses_the_unsynced_binlog_as_allowed(tmp_path: Path):
    result = live("crash", tmp_path, fsync="never")
    assert result.verdict == "allowed", result.check.line()
    assert result.check.counts.lost > 0
    assert "fsync=never" in result.check.line()


def test_kill_9_under_fsync_never_loses_nothing_the_page_cache_holds(tmp_path: Path):
    result = live("kill", tmp_path, fsync="never")
    check = result.check
    if check.verdict == "invalid" and check.counts.lost == 0:
        # beanstalkd's one invention: a kill between the writes of a job's binlog record
        # replays that job with the zeros of the preallocated file as its body (the test
        # below makes it on purpose); nothing else may make this run invalid
        ghosts = check.examples.get("unexpected", [])
        assert ghosts and all(g.startswith("?zeros-") for g in ghosts), check.line()
        assert "never sent" in check.line() and check.counts.duplicated == 0, check.line()
    else:
        peer_support.nothing_lost(result, *REDELIVERED)
    assert check.counts.ok > 500, (check.line(), result.warnings)


def test_a_binlog_record_whose_body_never_came_replays_as_a_job_of_zeros(tmp_path: Path):
    """beanstalkd writes a job's binlog record in four writes (tube name length, name, job
    struct, body: ``filewrjobfull`` in file.c) into a file preallocated with zeros, and its
    replay checks no sum: a kill between the struct and the body leaves a record that
    replays as a job whose body is zeros. Made here by zeroing a logged body by hand."""
    import signal
    import socket
    import subprocess

    from lab.worlds.live.external import free_ports

    port = free_ports(("beanstalkd",))["beanstalkd"]
    body = b"p0:1 123\n" + b"." * 20

    def start() -> tuple[subprocess.Popen, socket.socket]:
        server = subprocess.Popen([str(BeanstalkdPeer.executable()), "-l", "127.0.0.1", "-p", str(port),
                                   "-b", str(tmp_path), "-F"], stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                return server, socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                time.sleep(0.02)
        server.kill()
        raise AssertionError("beanstalkd did not listen")

    def say(conn: socket.socket, data: bytes, ending: bytes) -> bytes:
        conn.sendall(data)
        got = b""
        while not got.endswith(ending):
            got += conn.recv(4096)
        return got

    server, conn = start()
    try:
        say(conn, b"use q\r\n", b"\r\n")
        assert say(conn, b"put 0 0 5 %d\r\n%s\r\n" % (len(body), body), b"\r\n") == b"INSERTED 1\r\n"
    finally:
        conn.close()
        server.send_signal(signal.SIGKILL)
        server.wait()
    (binlog,) = tmp_path.glob("binlog.*")
    data = bytearray(binlog.read_bytes())
    at = data.find(body)
    assert at > 0
    data[at:at + len(body)] = bytes(len(body))  # the body's write never happened
    binlog.write_bytes(bytes(data))
    server, conn = start()
    try:
        say(conn, b"watch q\r\n", b"\r\n")
        reply = say(conn, b"reserve-with-timeout 0\r\n", b"\r\n")
        while reply.startswith(b"RESERVED") and len(reply) < len(b"RESERVED 1 29\r\n") + len(body) + 2:
            reply += conn.recv(4096)  # the job's data, and its \r\n
    finally:
        conn.close()
        server.send_signal(signal.SIGKILL)
        server.wait()
    header, _, rest = reply.partition(b"\r\n")
    assert header == b"RESERVED 1 %d" % len(body)
    assert message.decode(rest[:len(body)]) == (f"?zeros-{len(body)}", None)


def test_a_pause_loses_nothing(tmp_path: Path):
    result = live("gc-pause", tmp_path, duration=3.0)
    # SIGSTOP holds the replies; the 1 s client timeout outlasts the 400 ms pause
    peer_support.nothing_lost(result, *REDELIVERED)


def test_a_missing_binary_is_one_line_naming_the_package(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(Path, "exists", lambda self: False)  # nor /usr/sbin
    with pytest.raises(MissingBinary) as error:
        BeanstalkdPeer.executable()
    assert str(error.value) == ("beanstalkd: beanstalkd is not installed: apt-get install beanstalkd "
                                "(or `make brokers`)")


def test_the_locust_client_puts_gets_acks_and_releases(tmp_path: Path):
    from lab.peers.beanstalkd import load
    from lab.worlds.live import LiveWorld

    def round_trip(targets: dict) -> None:
        producer = load.make_client(targets, {"ttr": 5}, True, 0)
        consumer = load.make_client(targets, {"ttr": 5}, True, 1)
        plain = load.make_client(targets, {}, False, 2)
        try:
            assert consumer.get("q") is None  # empty
            for body in (b"one", b"two", b"three"):
                producer.put("q", body)
            body, token = consumer.get("q")
            assert body == b"one"
            consumer.release("q", token)  # back at the head
            body, token = consumer.get("q")
            assert body == b"one"
            consumer.ack("q", token)
            with pytest.raises(load.Refused, match="NotFound"):
                consumer.ack("q", token)  # deleted already
            assert plain.get("q") == (b"two", None)  # taken for good
            body, token = consumer.get("q")
            assert body == b"three"
            consumer.close()  # a closed connection hands its reservation back (once the proxy passes the close on)
            got, deadline = None, time.monotonic() + 1.0
            while got is None and time.monotonic() < deadline:
                got = plain.get("q")
            assert got == (b"three", None)
            assert plain.get("q") is None
        finally:
            for client in (producer, consumer, plain):
                client.close()

    world = LiveWorld(root=tmp_path / "world")
    peer = BeanstalkdPeer(world, {})

    async def main(control) -> None:
        await peer.start()
        try:
            host, port = world.address(peer.node, "beanstalkd", "client")
            await asyncio.to_thread(round_trip, {"beanstalkd": {"beanstalkd": f"{host}:{port}"}})
        finally:
            await peer.stop()

    pids = peer_support.processes(b"beanstalkd")
    world.run(main)
    assert peer_support.processes(b"beanstalkd") - pids == set()
    assert not any(str(tmp_path) in mount for mount in peer_support.mounts("beanstalkd", tmp_path))
