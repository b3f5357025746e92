"""`lab load`: Locust against live servers, recorded at nanosecond resolution in the lab's
schema, checked and written as a run folder; faults under load."""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pytest

from lab.cli import main
from lab.experiments.load import run_load, split_users
from lab.history.record import read_samples
from lab.judge.findings import Verdict
from lab.workloads.errors import WorkloadError


def _quiet(*_: object) -> None:
    pass


def test_a_short_load_on_kestrel_is_a_run_folder_with_locusts_csvs_and_ns_samples(tmp_path):
    result = run_load("kestrel", users=4, spawn_rate=50, duration=2, out=tmp_path / "run", echo=_quiet)
    assert result.check.judgement.verdict == Verdict.VALID, result.check.judgement.reason
    assert result.check.counts.enqueued > 500 and result.check.counts.lost == 0
    folder = result.run_dir
    for name in ("samples.parquet", "manifest.json", "locust/locust_stats.csv", "locust/locust_stats_history.csv",
                 "locust/locust_failures.csv"):
        assert (folder / name).is_file(), name
    samples = read_samples(folder)
    puts = samples.filter(pc.equal(samples["op"], "put"))
    latencies = puts["latency_ns"].to_pylist()
    assert min(latencies) > 0 and any(v % 1_000_000 for v in latencies)  # not whole milliseconds
    assert set(samples["client"].to_pylist()) >= {"drain"} or result.check.counts.dequeued == result.check.counts.enqueued
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["backend"] == "kestrel" and manifest["world"] == "live"
    assert manifest["workload"]["producers"] == 2 and manifest["workload"]["consumers"] == 2


def test_kestrel_with_sync_journal_always_loses_nothing_under_a_pause_and_a_kill(tmp_path):
    faults = [{"fault": "pause", "at": 0.8, "duration": 0.5, "target": "servers"},
              {"fault": "crash", "at": 2.0, "duration": 0.5, "target": "servers"}]
    result = run_load("kestrel", users=4, spawn_rate=50, duration=4, faults=faults, out=tmp_path / "run",
                      options={"syncJournal": "always"}, echo=_quiet)
    v = result.check
    assert v.counts.lost == 0 and v.counts.unexpected == 0 and v.judgement.verdict == Verdict.VALID, v.judgement.reason
    samples = read_samples(result.run_dir)
    fault_rows = samples.filter(pc.equal(samples["op"], "fault"))["error"].to_pylist()
    assert any(r.startswith("start faults[0] pause") for r in fault_rows)
    assert any(r.startswith("start faults[1] crash") for r in fault_rows)
    assert "crash" in result.check.facts.faults and "pause" in result.check.facts.faults
    not_ok = samples.filter(pc.and_(pc.equal(samples["op"], "put"), pc.equal(samples["phase"], "fault")))
    assert not_ok.num_rows > 0  # the faults hit the load


@pytest.mark.parametrize("backend", ["kestrel", "primer"])
def test_released_messages_come_back_once_and_the_run_stays_valid(tmp_path, backend):
    """A release hands the message back: its redelivery is no duplicate, and Kestrel's FIFO
    holds for every message that was not released (lab.judge.checker)."""
    result = run_load(backend, users=4, spawn_rate=50, duration=2, release_p=0.3, out=tmp_path / "run", echo=_quiet)
    v = result.check
    assert v.judgement.verdict == Verdict.VALID and v.counts.duplicated == 0 and v.counts.lost == 0, v.judgement.reason
    samples = read_samples(result.run_dir)
    assert samples.filter(pc.equal(samples["op"], "release")).num_rows > 20


def test_kestrel_monitor_consumers_with_releases_lose_nothing_under_a_kill(tmp_path):
    """--batch 4: consumers read with monitor and confirm each message, or abort a fifth of
    them back to the queue; a kill -9 aborts every open read of the dead connections (which
    come back: redeliveries are allowed under a crash, loss is not)."""
    faults = [{"fault": "crash", "at": 1.5, "duration": 0.5, "target": "servers"}]
    result = run_load("kestrel", users=4, spawn_rate=50, duration=4, batch=4, release_p=0.2, faults=faults,
                      options={"syncJournal": "always", "maxOpenTransactions": 4}, out=tmp_path / "run", echo=_quiet)
    v = result.check
    assert v.counts.lost == 0 and v.counts.unexpected == 0 and v.judgement.verdict in (Verdict.VALID, Verdict.ALLOWED), v.judgement.reason
    samples = read_samples(result.run_dir)
    locust = samples.filter(pc.equal(samples["node"], "locust"))
    ok = pc.equal(locust["outcome"], "ok")
    releases = locust.filter(pc.and_(pc.equal(locust["op"], "release"), ok)).num_rows
    acks = locust.filter(pc.and_(pc.equal(locust["op"], "ack"), ok)).num_rows
    # a fifth released at random (binomial: within four standard deviations), plus what the
    # kill aborted: up to every open read, 4 users x batch 4 (a busy machine settles few messages)
    settled = acks + releases
    assert 0 < releases <= 0.2 * settled + 4 * (settled * 0.2 * 0.8) ** 0.5 + 16, (releases, acks)
    gets = locust.filter(pc.and_(pc.equal(locust["op"], "get"), ok))["latency_ns"].to_pylist()
    assert sum(1 for ns in gets if ns < 100_000) > len(gets) / 2  # most gets come from a monitor's buffer


def test_two_locust_processes_write_their_own_samples(tmp_path):
    result = run_load("kestrel", users=4, spawn_rate=50, duration=2, processes=2, out=tmp_path / "run", echo=_quiet)
    assert result.check.judgement.verdict == Verdict.VALID, result.check.judgement.reason
    pids = {p.name.split("-")[1] for p in (result.run_dir / "locust").glob("samples-*.parquet")}
    assert len(pids) == 2  # each worker process wrote its own files


def test_users_split_between_producers_and_consumers():
    assert split_users(10, 1, 1) == (5, 5)
    assert split_users(4, 3, 1) == (3, 1)
    assert split_users(1, 1, 1) == (1, 0)
    assert split_users(5, 1, 0) == (5, 0)
    with pytest.raises(WorkloadError):
        split_users(0, 1, 1)
    with pytest.raises(WorkloadError):
        split_users(3, 0, 0)


@pytest.mark.parametrize("argv, words", [
    (["load", "kestrel", "--users", "0"], "--users must be at least 1"),
    (["load", "kestrel", "--duration", "abc"], "use seconds"),
    (["load", "kestrel", "--release-p", "2"], "--release-p 2.0"),
    (["load", "ideal"], "no load generator for 'ideal'"),
    (["load", "kestrel", "--faults", "/nonexistent.yaml"], "no such file"),
    (["load", "kestrel", "--option", "syncJournal=sometimes"], "syncJournal"),
])
def test_bad_load_arguments_are_one_line_errors(capsys, tmp_path, argv, words):
    try:
        code = main(argv + ["--out", str(tmp_path / "run")])
    except SystemExit as e:  # argparse's own refusals
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("backend, ack", [("queuefka", "reliable"), ("cassieq", "reliable"), ("primer", "reliable"),
                                          ("primer", "auto")])
def test_a_short_load_on_each_http_design_is_valid_and_recorded_in_nanoseconds(tmp_path, backend, ack):
    result = run_load(backend, users=4, spawn_rate=50, duration=2, ack=ack, out=tmp_path / "run", echo=_quiet)
    v = result.check
    # enqueued: evidence that the load ran (a busy CI machine's live CassieQ took 92 in 2 s)
    assert v.judgement.verdict == Verdict.VALID and v.counts.lost == 0 and v.counts.enqueued > 40, v.judgement.reason
    samples = read_samples(result.run_dir)
    locust_rows = samples.filter(pc.equal(samples["node"], "locust"))
    ops = set(locust_rows["op"].to_pylist())
    assert {"put", "get"} <= ops and (("ack" in ops) == (ack == "reliable"))
    latencies = locust_rows["latency_ns"].to_pylist()
    assert min(latencies) > 0 and any(v % 1_000 for v in latencies)  # nanoseconds, not rounded
