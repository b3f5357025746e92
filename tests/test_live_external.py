"""The live world's handling of a broker's process (``lab.worlds.live.external``), apart from
any one broker: the ports it picks, and a clean-up command that hangs."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest

from lab.design.about import About
from lab.design.peer import Launch, Peer, Place
from lab.worlds.live import LiveWorld
from lab.worlds.live.external import AFTER_STOP_TIMEOUT, free_ports, quiet_ports
from tests.own_processes import own_mounts, own_processes


def test_picked_ports_are_free_different_and_below_the_ephemeral_range():
    """Outgoing connections take ports of the kernel's ephemeral range: a port picked there
    could be taken in the seconds before the broker binds it."""
    pool = quiet_ports()
    for _ in range(20):
        ports = free_ports(("a", "b", "c"))
        assert len(set(ports.values())) == 3
        if pool is not None:
            assert all(port in pool for port in ports.values())
        for port in ports.values():  # released: the broker can bind each
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))


class ExitsAtOnce(Peer):
    """A "broker" that exits as it starts, and whose clean-up command never ends — what an
    ``epmd -kill`` against a foreign listener on its port does."""

    name = "exits-at-once"
    about = About("a broker that exits as it starts (a test's)")
    binary, package = "sh", "dash"
    ports = ("main",)
    node = "broker"

    def launch(self, place: Place) -> Launch:
        return Launch(["sh", "-c", "echo 'cannot start'; exit 3"], ready=lambda: False,
                      after_stop=[["sleep", "300"]])

    def client(self, rt, reliable):
        raise AssertionError("never started")


def test_a_clean_up_command_that_hangs_is_cut_logged_and_the_mount_still_goes(caplog):
    world = LiveWorld(seed=1)
    peer = ExitsAtOnce(world, {})
    roots: list[Path] = []

    async def main(control):
        roots.append(world.root)
        await peer.start()

    began = time.monotonic()
    with caplog.at_level(logging.WARNING), pytest.raises(RuntimeError, match=r"did not start \(exit code 3\)"):
        world.run(main)
    took = time.monotonic() - began
    assert took < AFTER_STOP_TIMEOUT + 5, took  # cut, and run once however many clean-ups call it
    assert sum("after it stopped, sleep 300 failed" in r.getMessage() for r in caplog.records) == 1
    assert own_processes(lambda argv: argv[:2] == [b"sleep", b"300"]) == {}
    assert own_mounts(roots[0], "/broker/data") == set()
    assert not roots[0].exists()  # the run's temporary folder went too
