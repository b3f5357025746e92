"""A consumer that dies holding its reads (``dies`` in a workload's ``clients:`` block): the
runner records an ``abandon`` of what it held and goes on as a new client; the checker
counts an abandoned delivery as handed back, so the message must be delivered again or it is
lost; a design that promises no way back is refused before anything runs; the swarm draws
deaths, some timed inside a restarting fault's strike on the read held. And the reason it
exists: Kestrel with its replay's rollback of open reads removed (a generated mutant the
swarm had left alive) loses the dead consumer's message, and the lab says INVALID."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.experiments import swarm
from lab.experiments.planting import plant
from lab.experiments.runner import run
from lab.history.record import read_samples
from lab.workloads.errors import WorkloadError
from lab.workloads.spec import load_workload, parse_workload

pytestmark = pytest.mark.usefixtures("results")

NO_ROLLBACK = "kestrel~gen~core.queue~ZeroIterationForLoop~1"  # replay keeps the last run's open reads open
ALWAYS = {"syncJournal": "always"}


def dying(dies: list | None, faults: list | None = None) -> dict:
    """One producer, one slow consumer (each message held 200 ms before its ack) that dies
    at ``dies``, a crash of the server at 1.5 s for 0.1 s."""
    c0 = {"work_ms": 200, **({"dies": dies} if dies else {})}
    return {"name": "dying", "producers": 1, "consumers": 1, "rate": 100, "duration": 3, "warmup": 0.5,
            "ack": "reliable", "clients": {"c0": c0},
            "faults": [{"fault": "crash", "target": "server", "at": 1.5, "duration": 0.1}] if faults is None
            else faults}


def test_a_bad_dies_entry_names_the_field():
    data = dying([[1.0]])
    with pytest.raises(WorkloadError, match=r"clients.c0.dies': must be a list of \[at, seconds\] pairs"):
        parse_workload(data, "w.yaml")
    with pytest.raises(WorkloadError, match=r"clients.c0.dies': \[at, seconds\] must be numbers >= 0"):
        parse_workload(dying([[1.0, -1]]), "w.yaml")


def test_a_dead_consumers_read_is_abandoned_and_delivered_again(tmp_path):
    result = run(parse_workload(dying([[1.55, 0.2]])), "kestrel", seed=1, out=tmp_path / "r", progress=False,
                 options=ALWAYS)
    assert result.check.verdict != "invalid", result.check.line()
    rows = read_samples(result.run_dir).to_pylist()
    (abandon,) = [r for r in rows if r["op"] == "abandon"]
    assert abandon["client"] == "c0" and abandon["outcome"] == "ok"
    gets = [r for r in rows if r["op"] == "get" and r["outcome"] == "ok" and r["msg_id"] == abandon["msg_id"]]
    assert len(gets) == 2 and gets[1]["t_start_ns"] > abandon["t_start_ns"]  # handed back, then delivered again
    assert not [r for r in rows if r["op"] == "ack" and r["msg_id"] == abandon["msg_id"]
                and r["t_start_ns"] < gets[1]["t_start_ns"]]  # the dead one never acknowledged it
    assert result.check.counts.lost == 0 and result.check.counts.duplicated == 0


def test_a_replay_that_keeps_open_reads_loses_the_dead_consumers_message_and_is_invalid(tmp_path):
    with plant(NO_ROLLBACK):
        died = run(parse_workload(dying([[1.55, 0.2]])), "kestrel", seed=1, out=tmp_path / "died", progress=False,
                   options=ALWAYS)
        lived = run(parse_workload(dying(None)), "kestrel", seed=1, out=tmp_path / "lived", progress=False,
                    options=ALWAYS)
    assert died.check.verdict == "invalid" and died.check.counts.lost >= 1, died.check.line()
    # the consumer that lived acknowledged its read after the restart, on a new connection: the same
    # bug, and nothing a history without a death can show
    assert lived.check.verdict != "invalid", lived.check.line()


def test_an_ack_on_a_new_connection_after_a_restart_settles_nothing_the_restart_handed_back(tmp_path):
    # the slow consumer's read of a message got before the crash is rolled back by the replay; its
    # ack after the restart, on a new connection, succeeds (the server knows no such read) and the
    # message comes again: handed back by the restart, not a broken promise (it was called INVALID)
    result = run(parse_workload(dying(None)), "kestrel", seed=1, out=tmp_path / "r", progress=False, options=ALWAYS)
    assert result.check.verdict == "valid", result.check.line()
    assert result.check.counts.duplicated == 1 and "handed back" in result.check.line()


def test_a_death_is_a_broken_connection_for_the_order_check_too(tmp_path):
    # Queuefka hands a broken reader's prefetched batch out again behind later records: a dead
    # consumer's connection broke as a failed get's does (16 inversions called INVALID, seed 172)
    workload = load_workload(Path(__file__).parent / "data" / "queuefka-dying-consumer.yaml")
    result = run(workload, "queuefka", out=tmp_path / "r", progress=False, options={"fsync": "always"})
    assert result.check.counts.inversions > 0 and result.check.verdict == "allowed", result.check.line()
    assert "connection broke" in result.check.line()
    assert any(r["op"] == "abandon" for r in read_samples(result.run_dir).to_pylist())


def test_deaths_are_refused_where_nothing_brings_a_read_back(tmp_path):
    with pytest.raises(WorkloadError, match="die holding reads, but ideal with reliable reads hands"):
        run(parse_workload(dying([[1.0, 0.1]], faults=[])), "ideal", out=tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists()
    plain = {**dying([[1.0, 0.1]], faults=[]), "ack": "auto"}  # plain gets hold nothing: a death is a reconnect
    assert run(parse_workload(plain), "ideal", out=tmp_path / "p", progress=False).check.verdict == "valid"


def test_the_swarm_draws_deaths_some_inside_a_restarts_strike_and_none_where_reads_stay():
    drawn = swarm.draws("kestrel", range(1, 201), options=ALWAYS)
    with_deaths = [w for w in drawn.values() if "; deaths: " in w["description"]]
    assert 20 <= len(with_deaths) <= 120
    struck = 0
    for w in with_deaths:
        parse_workload(w, w["name"])
        (name,) = [c for c, plan in w["clients"].items() if "dies" in plan]
        assert w["clients"][name]["work_ms"] >= 20  # it is holding a read when it dies
        struck += "holding the read" in w["description"]
    assert struck >= 5
    assert not any("; deaths: " in w["description"] for w in swarm.draws("ideal", range(1, 101)).values())
