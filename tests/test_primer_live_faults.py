"""The live fault schedule on a real Primer cluster (three ``lab serve primer`` processes
whose links to each other run through the live world's proxies): a split of the servers
stops what needs both sides and only for the split; a pause and a crash of one node
cost what the promises allow."""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lab.experiments.runner import run
from lab.judge.findings import Verdict
from lab.workloads.spec import parse_workload


def _workload(faults, **fields):
    base = {"name": "primer-live-fault", "queues": 1, "producers": 2, "consumers": 2, "message_size": 100,
            "rate": 300, "duration": 3.5, "warmup": 0.5, "ack": "reliable", "seed": 23, "faults": faults}
    base.update(fields)
    return parse_workload(base)


def _puts(result, phase: str) -> tuple[int, int]:
    """(ok, not ok) puts in ``phase``."""
    table = pq.read_table(result.samples_path, columns=["op", "phase", "outcome"])
    rows = table.filter(pc.and_(pc.equal(table["op"], "put"), pc.equal(table["phase"], phase)))
    ok = int(pc.sum(pc.equal(rows["outcome"], "ok")).as_py() or 0)
    return ok, rows.num_rows - ok


#: seconds into a split after which no put that needs every node can be acknowledged: the
#: failure detector's suspect_after (1 s), and half a second for a loaded machine's late
#: partition and heartbeats
DETECTED_S = 1.5


def _acknowledged_after(result, seconds: float) -> list[float]:
    """When (seconds into the split) each put acknowledged that started ``seconds`` or more
    after the split began and before it healed."""
    table = pq.read_table(result.samples_path, columns=["op", "outcome", "t_start_ns", "error"]).to_pylist()
    faults = sorted(r["t_start_ns"] for r in table if r["op"] == "fault")
    begun, healed = faults[0], faults[-1]
    return [(r["t_start_ns"] - begun) / 1e9 for r in table if r["op"] == "put" and r["outcome"] == "ok"
            and begun + seconds * 1e9 <= r["t_start_ns"] < healed]


def test_a_split_of_the_servers_stops_puts_that_need_every_node_only_while_it_lasts(tmp_path):
    """W=3 needs all three nodes: with the servers split into a majority and a minority no
    node sees three members, so puts fail during the split (whichever node a client asks:
    clients are not cut) and succeed again after the heal."""
    split = [{"fault": "partition", "at": 1.0, "duration": 2.5, "target": "servers", "shape": "majority"}]
    result = run(_workload(split, duration=4.0), "primer", "live", out=tmp_path / "run", progress=False,
                 options={"replicas": 3})
    fault_ok, fault_not_ok = _puts(result, "fault")
    heal_ok, heal_not_ok = _puts(result, "heal")
    steady_ok, steady_not_ok = _puts(result, "steady")
    # a loaded 2-core machine stalled a node's heartbeats past the failure detector's former
    # 0.5 s, refusing a put before the split (seen once in CI); suspect_after is 1 s now, with
    # margin (tests/test_primer_failure_detector.py), and a few puts stay allowed here
    assert steady_ok > 50 and steady_not_ok <= 5
    # after the failure detector's delay nothing goes in. How many puts the split sees depends on
    # the machine (on a loaded one, CI's, two producers stalled through most of it, 2 ok and 0
    # refused), so the check is on when acknowledged puts started, not on how many were refused
    assert not _acknowledged_after(result, DETECTED_S), f"{fault_ok} ok, {fault_not_ok} not ok in the split"
    assert fault_not_ok + steady_not_ok >= 1  # the puts under way at the split, at least, got no answer
    assert heal_ok > 50 and heal_not_ok <= 5  # calls in flight at the heal may still time out
    assert result.check.counts.lost == 0 and result.check.judgement.verdict != Verdict.INVALID, result.check.judgement.reason


def test_a_pause_of_one_node_loses_nothing(tmp_path):
    pause = [{"fault": "pause", "at": 1.0, "duration": 1.0, "target": "n2"}]
    result = run(_workload(pause), "primer", "live", out=tmp_path / "run", progress=False)
    v = result.check
    assert v.counts.lost == 0 and v.counts.unexpected == 0 and v.judgement.verdict == Verdict.VALID, v.judgement.reason


@pytest.mark.slow  # 82 s in CI, the slowest of the fast tier: three live processes, a crash, AOF replay, the drain
def test_a_crash_of_one_node_with_files_and_w_2_loses_nothing_acknowledged(tmp_path):
    crash = [{"fault": "crash", "at": 1.0, "duration": 0.5, "target": "n2"}]
    result = run(_workload(crash, consumer_delay=1.5), "primer", "live", out=tmp_path / "run", progress=False,
                 options={"replicas": 2, "persistence": "aof"})
    v = result.check
    assert v.counts.lost == 0 and v.judgement.verdict == Verdict.VALID, v.judgement.reason
