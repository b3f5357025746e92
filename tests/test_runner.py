"""The runner end to end with the ideal backend, in both worlds."""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pytest

from lab.history.record import read_samples
from lab.experiments.runner import run
from lab.workloads.errors import WorkloadError
from lab.workloads.spec import parse_workload

BUSY_SIM = {
    "name": "busy", "queues": 2, "producers": 3, "consumers": 2, "message_size": 200, "rate": 3000,
    "duration": 1.0, "warmup": 0.2, "ack": "reliable", "seed": 5,
    "faults": [{"fault": "pause", "at": 0.5, "duration": 0.1, "target": "server"},
               {"fault": "loss", "at": 0.8, "duration": 0.1, "p": 0.05, "target": "clients"}],
    "sim": {"latency": {"dist": "lognormal", "ms": 0.2, "sigma": 0.8}, "fifo_links": False},
}


def without_run_id(table):
    return table.drop_columns(["run_id"]).to_pylist()


def test_same_workload_and_seed_give_identical_samples_row_for_row(tmp_path):
    w = parse_workload(BUSY_SIM)
    a = run(w, "ideal", "sim", out=tmp_path / "a", progress=False)
    b = run(w, "ideal", "sim", out=tmp_path / "b", progress=False)
    c = run(w, "ideal", "sim", seed=6, out=tmp_path / "c", progress=False)
    rows_a, rows_b = without_run_id(read_samples(a.run_dir)), without_run_id(read_samples(b.run_dir))
    assert len(rows_a) > 5000
    assert rows_a == rows_b
    assert without_run_id(read_samples(c.run_dir)) != rows_a


@pytest.mark.parametrize("world", ["sim", "live"])
@pytest.mark.parametrize("ack", ["auto", "reliable"])
def test_the_ideal_backend_is_valid_with_nothing_lost_duplicated_or_reordered(tmp_path, world, ack):
    w = parse_workload({"name": "ideal-check", "queues": 2, "producers": 3, "consumers": 2, "rate": 1500,
                        "duration": 1.0, "warmup": 0.2, "ack": ack, "seed": 1})
    result = run(w, "ideal", world, out=tmp_path, progress=False)
    v = result.check
    assert v.valid and v.counts.attempts == v.counts.ok == v.counts.enqueued > 1000
    assert (v.counts.lost, v.counts.duplicated, v.counts.unexpected, v.reordering.inversions) == (0, 0, 0, 0)
    rate = result.summary["put"]["ops_per_s"]
    if world == "sim":
        assert rate == pytest.approx(1500, rel=0.1)
    else:  # paced, never faster; a machine busy with other tests may keep it behind the pace
        assert 0.5 * 1500 <= rate <= 1.1 * 1500
    if ack == "reliable":
        assert result.summary["ack"]["ok"] == v.counts.ok
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["verdict"]["valid"] and manifest["world"] == world and manifest["seed"] == 1
    assert {"python", "simpy", "pyarrow"} <= set(manifest["versions"])


def test_messages_mode_sends_exactly_that_many(tmp_path):
    w = parse_workload({"name": "count", "producers": 3, "consumers": 1, "messages": 100, "seed": 2})
    result = run(w, "ideal", "sim", out=tmp_path, progress=False)
    assert result.check.counts.attempts == 100 and result.check.valid


def test_a_crashed_ideal_server_loses_what_it_held_and_the_checker_says_so(tmp_path):
    # The ideal keeps messages in memory only: a crash loses whatever it held.
    w = parse_workload({"name": "crash", "producers": 4, "consumers": 1, "rate": 8000, "duration": 1.0,
                        "seed": 3, "faults": [{"fault": "crash", "at": 0.5, "duration": 0.1}]})
    result = run(w, "ideal", "sim", out=tmp_path, progress=False)
    v = result.check
    assert not v.valid and v.counts.lost > 0
    phases = set(read_samples(tmp_path).column("phase").to_pylist())
    assert {"steady", "fault", "heal", "drain"} <= phases


def test_a_pause_shows_up_as_publish_delay_and_latency(tmp_path):
    w = parse_workload({"name": "pause", "producers": 1, "consumers": 1, "rate": 1000, "duration": 1.0,
                        "seed": 4, "faults": [{"fault": "pause", "at": 0.4, "duration": 0.2}]})
    result = run(w, "ideal", "sim", out=tmp_path, progress=False)
    assert result.check.valid
    assert result.summary["put"]["max_ns"] >= 190e6  # the put caught by the pause
    assert result.summary["delay"]["max_ns"] >= 190e6  # and the ones held back behind it
    samples = read_samples(tmp_path)
    late = samples.filter(pc.greater(samples.column("delay_ns"), 100_000_000))
    assert late.num_rows > 50


def test_faults_in_the_live_world_and_bad_targets_are_refused(tmp_path):
    w = parse_workload({"name": "f", "duration": 0.2, "faults": [{"fault": "pause", "at": 0.1, "duration": 0.1}]})
    with pytest.raises(WorkloadError, match=r"live world applies faults to server processes, and ideal has none"):
        run(w, "ideal", "live", out=tmp_path, progress=False)  # the control runs in the runner's process
    w = parse_workload({"name": "f", "duration": 0.2,
                        "faults": [{"fault": "pause", "at": 0.1, "duration": 0.1, "target": ["nobody"]}]})
    with pytest.raises(WorkloadError, match="nobody"):
        run(w, "ideal", "sim", out=tmp_path, progress=False)


def test_the_progress_bar_covers_the_drain(tmp_path):
    import io
    import re

    # consumers slower than producers (reliable reads, one consumer): a backlog left to drain
    w = parse_workload({"name": "backlog", "producers": 2, "consumers": 1, "rate": 0, "duration": 0.3,
                        "ack": "reliable", "seed": 4})
    shown = io.StringIO()
    result = run(w, "ideal", "sim", out=tmp_path / "r", progress=shown)
    text = shown.getvalue()
    assert "backlog (sim time)" in text and "backlog: draining" in text
    last = text.rstrip().rsplit("\r", 1)[-1]
    assert "100%" in last, last  # the bar ends when the drain has delivered everything
    done, left = re.search(r"\| (\d+)/(\d+) ", last).groups()
    assert done == left and int(left) > 100  # there was a backlog to drain
    assert result.check.valid


@pytest.mark.parametrize("arrivals, cv_range", [("constant", (0.0, 0.05)), ("poisson", (0.85, 1.15))])
def test_arrivals_constant_or_poisson(tmp_path, arrivals, cv_range):
    import numpy as np

    w = parse_workload({"name": "arrivals", "rate": 2000, "duration": 2.0, "arrivals": arrivals, "seed": 11})
    puts = read_samples(run(w, "ideal", "sim", out=tmp_path / "a", progress=False).run_dir)
    puts = puts.filter(pc.equal(puts.column("op"), "put"))
    # the scheduled send times: when each put started, less how late it started
    intended = np.sort(puts.column("t_start_ns").to_numpy() - puts.column("delay_ns").to_numpy())
    gaps = np.diff(intended) / 1e9
    assert 3600 < len(puts) < 4400  # the rate holds on average
    assert np.mean(gaps) == pytest.approx(1 / 2000, rel=0.05)
    cv = np.std(gaps) / np.mean(gaps)  # 0 for constant gaps, 1 for exponential ones
    assert cv_range[0] <= cv <= cv_range[1]
    again = read_samples(run(w, "ideal", "sim", out=tmp_path / "b", progress=False).run_dir)
    assert without_run_id(again.filter(pc.equal(again.column("op"), "put"))) == without_run_id(puts)


def test_poisson_arrivals_need_a_rate():
    with pytest.raises(WorkloadError, match="arrivals.*need a 'rate'"):
        parse_workload({"name": "x", "arrivals": "poisson", "duration": 1})
    with pytest.raises(WorkloadError, match="arrivals.*constant, poisson"):
        parse_workload({"name": "x", "rate": 10, "arrivals": "bursty", "duration": 1})


def test_each_fault_start_and_heal_is_a_row_and_the_phases_come_from_those_rows(tmp_path):
    from lab.history.phases import fault_events, fault_kinds, phases_of

    w = parse_workload(BUSY_SIM)
    result = run(w, "ideal", "sim", out=tmp_path, progress=False)
    samples = read_samples(tmp_path)
    events = fault_events(samples)
    assert [(e.event, e.number, e.kind) for e in events] == [
        ("start", 0, "pause"), ("heal", 0, "pause"), ("start", 1, "loss"), ("heal", 1, "loss")]
    t0 = events[0].t_ns - round(0.5e9)  # the pause starts 0.5 s into the run
    assert events[1].t_ns - events[0].t_ns == round(0.1e9) and events[2].t_ns - t0 == round(0.8e9)
    assert len(events[0].nodes) == 1 and events[0].nodes[0].startswith("ideal") and set(events[2].nodes) == {"p0", "p1", "p2", "c0", "c1"}
    assert fault_kinds(samples) == {"pause", "loss"}
    faults = samples.filter(pc.equal(samples.column("op"), "fault"))
    assert set(faults.column("client").to_pylist()) == {"nemesis"} and set(faults.column("outcome").to_pylist()) == {"info"}
    # The stored phases are the ones the fault rows give (warm-up and drain bound them).
    warmup_end = t0 + round(0.2e9)
    drain = min(t for t, p in zip(samples.column("t_start_ns").to_pylist(), samples.column("phase").to_pylist())
                if p == "drain")
    assert phases_of(samples, warmup_end, drain).to_pylist() == samples.column("phase").to_pylist()
    phase_at = dict(zip(samples.column("t_start_ns").to_pylist(), samples.column("phase").to_pylist()))
    assert phase_at[events[0].t_ns] == "fault" and phase_at[events[1].t_ns] == "heal"
    # ... and no checker or summary counts them as operations
    puts = samples.filter(pc.equal(samples.column("op"), "put")).num_rows
    assert result.check.counts.attempts == result.summary["put"]["count"] == puts and "fault" not in result.summary


def test_consumers_start_after_the_consumer_delay_and_still_drain_everything(tmp_path):
    w = parse_workload({"name": "late", "producers": 1, "consumers": 1, "rate": 200, "duration": 1.0,
                        "consumer_delay": 0.5, "ack": "reliable", "seed": 2})
    result = run(w, "ideal", "sim", out=tmp_path / "r", progress=False)
    table = read_samples(result.run_dir)
    gets = table.filter(pc.equal(table["op"], "get"))
    first_get = pc.min(gets["t_start_ns"]).as_py()
    first_put = pc.min(table.filter(pc.equal(table["op"], "put"))["t_start_ns"]).as_py()
    assert (first_get - first_put) / 1e9 >= 0.5
    assert result.verdict == "valid" and result.check.counts.lost == 0 and result.check.counts.ok == 200


def test_a_negative_consumer_delay_is_named():
    with pytest.raises(WorkloadError, match="consumer_delay"):
        parse_workload({"name": "bad", "duration": 1, "consumer_delay": -1})


def test_a_restart_that_outlasts_the_load_is_said_and_one_within_it_is_not():
    from lab.experiments.runner import _late_restarts

    s = 1_000_000_000
    t0, end = 100 * s, 103 * s
    restarts = [("n1", t0 + s, t0 + 2 * s),  # back within the load: nothing to say
                ("n2", t0 + 2 * s, t0 + 5 * s),  # back after it
                ("n3", t0 + 2 * s, None),  # never back
                ("n4", end + s, end + 2 * s)]  # restarted by the final heal: the workload's own doing
    warnings = _late_restarts(restarts, t0, end)
    assert warnings == [
        "n2 restarted at 2.00 s and was back only at 5.00 s, after the load ended at 3.00 s: no put after its "
        "crash was checked (a longer duration gives a slow restart time)",
        "n3 restarted at 2.00 s and was never back, after the load ended at 3.00 s: no put after its "
        "crash was checked (a longer duration gives a slow restart time)"]
