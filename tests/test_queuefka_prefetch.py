"""Queuefka's client holds what it prefetched only while the connection it was leased to
lives: a consumer that pauses with records in hand across the broker's restart drops them
(the broker hands them out again, to another consumer), rather than delivering them a
second time. Found by the swarm's drawn load (seed 47, fsync=always: a pausing consumer and
a crash); this is its situation written out."""

from __future__ import annotations

from lab.experiments.runner import run
from lab.workloads.spec import parse_workload

PAUSED_ACROSS_A_RESTART = {
    "name": "paused-across-a-restart", "producers": 1, "consumers": 2, "rate": 150, "duration": 4.5,
    "ack": "reliable", "seed": 47,
    # c0 fetches a batch, works slowly, then pauses holding it across the crash; c1 starts late and
    # reads what the restarted broker hands out again
    "clients": {"c0": {"work_ms": 14, "pauses": [[2.676, 1.2]]}, "c1": {"start": 2.554}},
    "faults": [{"fault": "crash", "at": 3.355, "duration": 0.057, "target": "server"}],
}


def test_a_consumer_paused_across_the_brokers_restart_hands_out_nothing_it_no_longer_holds(tmp_path):
    # held records handed out after the restart were a duplicate nothing explains (INVALID); what
    # the crash itself hands back — a read c0 was working on — is at-least-once, and allowed
    result = run(parse_workload(PAUSED_ACROSS_A_RESTART), "queuefka", out=tmp_path / "r", progress=False,
                 options={"fsync": "always"})
    assert result.check.verdict in ("valid", "allowed"), result.check.line()
    assert result.check.counts.ok > 300 and result.check.counts.lost == 0
