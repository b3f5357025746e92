"""Open-loop Poisson producers and producer-only workloads (``consumers: 0``), in the sim world."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pytest

from lab.history.record import read_samples
from lab.experiments.runner import run
from lab.experiments.runner_clients import DRAIN_CONSUMER
from lab.workloads.errors import WorkloadError
from lab.workloads.spec import parse_workload

# 20,000 puts/s on one producer: a mean gap of 50 µs against a round trip of about 200 µs
OPEN = {"name": "open", "producers": 1, "consumers": 1, "rate": 20_000, "arrivals": "poisson", "duration": 0.3,
        "seed": 7}


def puts_of(table):
    return table.filter(pc.equal(table.column("op"), "put"))


def most_in_flight(puts) -> int:
    """The largest number of puts in flight at once (starts +1, ends -1, ends first at a tie)."""
    start = puts.column("t_start_ns").to_numpy()
    end = start + puts.column("latency_ns").to_numpy()
    times = np.concatenate([end, start])
    steps = np.concatenate([-np.ones(len(end), np.int64), np.ones(len(start), np.int64)])
    order = np.lexsort((steps, times))
    return int(np.cumsum(steps[order]).max())


def test_poisson_puts_start_on_schedule_and_overlap(tmp_path):
    result = run(parse_workload(OPEN), "ideal", "sim", out=tmp_path, progress=False)
    puts = puts_of(read_samples(result.run_dir))
    assert 5000 < puts.num_rows < 7000  # 20,000/s for 0.3 s
    assert pc.all(pc.equal(puts.column("outcome"), "ok")).as_py()
    assert pc.max(puts.column("delay_ns")).as_py() == 0  # nothing holds an open-loop producer back
    assert most_in_flight(puts) > 1  # a closed loop never has two puts of one producer in flight
    starts = np.sort(puts.column("t_start_ns").to_numpy())
    gaps = np.diff(starts) / 1e9
    assert np.mean(gaps) == pytest.approx(1 / 20_000, rel=0.05)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.1)  # exponential gaps
    v = result.check  # puts in flight together promise no order between them
    assert v.valid and v.counts.attempts == v.counts.ok == puts.num_rows and v.counts.lost == 0 and v.reordering.inversions == 0, v.line()


def test_a_closed_loop_producer_has_one_put_in_flight(tmp_path):
    w = parse_workload({**OPEN, "arrivals": "constant"})
    result = run(w, "ideal", "sim", out=tmp_path, progress=False)
    puts = puts_of(read_samples(result.run_dir))
    assert most_in_flight(puts) == 1
    assert result.verdict == "valid" and result.check.reordering.inversions == 0, result.check.line()
    assert pc.max(puts.column("delay_ns")).as_py() > 0  # it falls behind its schedule instead


def test_open_loop_runs_are_identical_row_for_row_for_one_seed(tmp_path):
    w = parse_workload({**OPEN, "producers": 2, "consumers": 2, "queues": 2, "ack": "reliable",
                        "sim": {"latency": {"dist": "lognormal", "ms": 0.2, "sigma": 0.8}, "fifo_links": False}})
    runs = [run(w, "ideal", "sim", out=tmp_path / "a", progress=False),
            run(w, "ideal", "sim", out=tmp_path / "b", progress=False),
            run(w, "ideal", "sim", seed=8, out=tmp_path / "c", progress=False)]
    for r in runs:
        assert r.verdict == "valid" and r.check.reordering.inversions == 0, r.check.line()
    a, b, c = (read_samples(r.run_dir) for r in runs)
    assert a.num_rows > 10_000
    assert a.drop_columns(["run_id"]).equals(b.drop_columns(["run_id"]))
    assert not a.drop_columns(["run_id"]).equals(c.drop_columns(["run_id"]))


def test_poisson_with_a_message_count_sends_exactly_that_many(tmp_path):
    w = parse_workload({"name": "count", "producers": 3, "consumers": 1, "rate": 5000, "arrivals": "poisson",
                        "messages": 301, "seed": 2})
    result = run(w, "ideal", "sim", out=tmp_path, progress=False)
    assert result.check.counts.attempts == 301 and result.check.valid and result.check.reordering.inversions == 0


@pytest.mark.parametrize("backend, ack", [("ideal", "auto"), ("ideal", "reliable"), ("kestrel", "reliable")])
def test_no_consumers_puts_alone_then_one_drain_consumer_checks_every_put(tmp_path, backend, ack):
    w = parse_workload({"name": "puts-only", "producers": 2, "consumers": 0, "queues": 2, "rate": 4000,
                        "arrivals": "poisson", "duration": 0.5, "warmup": 0.1, "ack": ack, "seed": 3})
    assert w.consumers == 0
    result = run(w, backend, "sim", out=tmp_path, progress=False)
    table = read_samples(result.run_dir)
    gets = table.filter(pc.equal(table.column("op"), "get"))
    assert set(gets.column("client").to_pylist()) == {DRAIN_CONSUMER}
    assert set(gets.column("phase").to_pylist()) == {"drain"}  # no get while the load ran
    puts = puts_of(table)
    assert set(puts.column("phase").to_pylist()) == {"warmup", "steady"}
    v = result.check
    assert v.verdict == "valid", v.line()
    assert v.counts.attempts == v.counts.enqueued == v.counts.ok == puts.num_rows > 1500
    assert (v.counts.lost, v.counts.duplicated, v.counts.unexpected, v.reordering.inversions) == (0, 0, 0, 0)
    assert result.summary["put"]["ops_per_s"] == pytest.approx(4000, rel=0.1)
    assert "get" not in result.summary["measured"]  # the drain is not measured


def test_consumers_may_be_zero_but_not_negative():
    assert parse_workload({"name": "w", "consumers": 0, "duration": 1}).consumers == 0
    with pytest.raises(WorkloadError, match="consumers.*>= 0"):
        parse_workload({"name": "w", "consumers": -1, "duration": 1})
