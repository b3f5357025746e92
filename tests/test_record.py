"""Samples and the log-bucket histogram: schema, Parquet round trip, error bound, merging."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from lab.history.record import ALPHA, SAMPLE_SCHEMA, LogHistogram, Recorder, read_samples, write_samples


def test_recorder_writes_the_sample_schema_to_parquet(tmp_path):
    rec = Recorder("r1", "sim", "ideal", "steady")
    rec.record(node="p0", client="p0", op="put", queue="q0", msg_id="p0:0", t_start_ns=10, latency_ns=5, outcome="ok",
               nbytes=100, phase="steady", delay_ns=0)
    rec.record(node="c0", client="c0", op="get", queue="q0", t_start_ns=20, latency_ns=7, outcome="fail", error="empty",
               phase="drain")
    write_samples(rec.table(), tmp_path / "samples.parquet")
    table = read_samples(tmp_path)
    assert table.schema == SAMPLE_SCHEMA
    rows = table.to_pylist()
    assert rows[0]["run_id"] == "r1" and rows[0]["msg_id"] == "p0:0" and rows[0]["delay_ns"] == 0
    assert rows[1]["msg_id"] is None and rows[1]["error"] == "empty" and rows[1]["delay_ns"] is None
    with pytest.raises(TypeError):  # every field by name: a row's twelve fields are never a positional list
        rec.record("p0", "p0", "put", "q0", "p0:1", 30, 5, "ok")


def test_read_samples_of_a_missing_run_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no samples"):
        read_samples(tmp_path / "nope")


@pytest.mark.parametrize("q", [0.0, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0])
def test_quantiles_are_within_one_percent_of_exact(q):
    rng = np.random.default_rng(1)
    values = np.round(rng.lognormal(11, 1.2, 200_000))  # ns-ish latencies with a heavy tail
    h = LogHistogram()
    h.add_many(values)
    exact = np.quantile(values, q, method="lower")
    assert abs(h.quantile(q) - exact) <= ALPHA * exact + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**12), min_size=1, max_size=300),
       st.floats(min_value=0, max_value=1))
def test_any_quantile_is_within_alpha_of_a_value_of_the_right_rank(values, q):
    h = LogHistogram()
    for v in values:
        h.add(v)
    ordered = sorted(values)
    exact = ordered[int(q * (len(values) - 1))]  # the value at the histogram's rank rule
    assert abs(h.quantile(q) - exact) <= ALPHA * exact + 1e-6


def test_merging_equals_adding_the_union():
    rng = np.random.default_rng(2)
    a, b = rng.exponential(1e5, 5000), rng.exponential(3e6, 7000)
    ha, hb, hu = LogHistogram(), LogHistogram(), LogHistogram()
    ha.add_many(a)
    hb.add_many(b)
    hu.add_many(np.concatenate([a, b]))
    merged = ha.merge(hb)
    assert merged.counts == hu.counts and merged.count == hu.count and merged.max == hu.max
    assert [merged.quantile(q) for q in (0.5, 0.99, 0.999)] == [hu.quantile(q) for q in (0.5, 0.99, 0.999)]


def test_serialisation_round_trips_and_zeros_are_kept():
    h = LogHistogram()
    h.add_many([0, 0, 1, 10, 1000, 123456789])
    back = LogHistogram.from_dict(h.to_dict())
    assert back.counts == h.counts and back.zeros == 2 and back.count == 6
    assert back.quantile(0) == 0 and back.quantile(1) == 123456789
    with pytest.raises(ValueError, match="alpha"):
        LogHistogram.from_dict({**h.to_dict(), "alpha": 0.05})


def test_empty_and_negative():
    assert np.isnan(LogHistogram().quantile(0.5))
    with pytest.raises(ValueError):
        LogHistogram().add(-1)
    with pytest.raises(ValueError):
        LogHistogram().quantile(1.5)


def test_measure_times_classifies_and_records_one_operation():
    import asyncio

    from lab.design.backend import Rejected, outcome_of

    ticks = iter(range(100, 10_000, 10))
    rec = Recorder("r", "sim", "ideal", "s", classify=outcome_of)
    clock = lambda: next(ticks)  # noqa: E731
    with rec.measure(clock, "p0", "p0", "put", "q0", "p0:0", 100, delay_ns=3) as put:
        pass
    with rec.measure(clock, "c0", "c0", "get", "q0") as get:
        get.fail("empty")
    with rec.measure(clock, "c0", "c0", "ack", "q0", "p0:0") as refused:
        raise Rejected("no such xid")
    with rec.measure(clock, "c0", "c0", "ack", "q0", "p0:0") as lost:
        raise TimeoutError("no reply")
    assert (put.ok, get.ok, refused.outcome, lost.outcome) == (True, False, "fail", "info")
    with pytest.raises(asyncio.CancelledError):  # cancellation is no outcome: not recorded
        with rec.measure(clock, "c0", "c0", "get", "q0"):
            raise asyncio.CancelledError()
    rows = rec.table().to_pylist()
    assert [(r["op"], r["outcome"], r["error"], r["phase"], r["t_start_ns"], r["latency_ns"]) for r in rows] == [
        ("put", "ok", None, None, 100, 10),  # the phase is set afterwards, from the fault rows
        ("get", "fail", "empty", None, 120, 10),
        ("ack", "fail", "Rejected: no such xid", None, 140, 10),
        ("ack", "info", "TimeoutError: no reply", None, 160, 10),
    ]
    assert (rows[0]["msg_id"], rows[0]["bytes"], rows[0]["delay_ns"]) == ("p0:0", 100, 3)
