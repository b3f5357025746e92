"""What keeps long sim runs fast and lean: the recorder's spilled batches, the vectorised
checker and summary, and their agreement with the plain definitions."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import numpy as np
import pytest

from lab.experiments.bench.checker import count_inversions  # the old per-stream check, now the benchmark's peer
from lab.judge.checker import check
from lab.history.record import SAMPLE_SCHEMA, Recorder, read_samples
from lab.experiments.runner import run
from lab.experiments.runner_manifest import SPILL_FILE
from lab.judge.summary import end_to_end_ns
from lab.workloads.spec import parse_workload
from tests.history import history


def test_an_unexpected_body_without_an_id_is_counted_and_not_ordered():
    v = check(history(("put", "p0", "p0:0", "ok"), ("put", "p0", "p0:1", "ok"), ("get", "c0", "p0:1", "ok", 10),
                      ("get", "c0", "?0123456789abcdef", "ok", 20), ("get", "c0", "p0:0", "ok", 30)))
    assert v.counts.unexpected == 1 and v.examples["unexpected"] == ["?0123456789abcdef"]
    assert v.reordering.inversions == 1 and v.reordering.checked == 2


def plain_counts(ops):
    """Jepsen's total-queue counts with Counters, as the checker defined them first."""
    attempts = Counter(m for op, _, m, _, *_ in ops if op == "put")
    enqueued = Counter(m for op, _, m, outcome, *_ in ops if op == "put" and outcome == "ok")
    # a release hands its delivery back unless it certainly did not happen (fail)
    released = Counter(m for op, _, m, outcome, *_ in ops if op == "release" and outcome != "fail")
    dequeued = Counter(m for op, _, m, outcome, *_ in ops if op == "get" and outcome == "ok" and m) - released
    ok = dequeued & attempts
    unexpected = Counter({v: n for v, n in dequeued.items() if v not in attempts})
    duplicated = dequeued - attempts - unexpected
    lost = enqueued - dequeued
    return tuple(sum(c.values()) for c in (attempts, enqueued, dequeued, ok, lost, unexpected, duplicated,
                                           ok - enqueued))


@pytest.mark.parametrize("seed", range(8))
def test_the_vectorised_checker_counts_as_counters_do(seed):
    rng = random.Random(seed)
    ops = []
    for _ in range(300):
        kind = rng.choice(["put", "put", "get", "get", "release"])
        msg = f"p{rng.randrange(3)}:{rng.randrange(40)}" if kind == "put" or rng.random() > 0.05 else "?feed"
        if kind == "get" and rng.random() < 0.1:
            msg = None
        ops.append((kind, f"c{rng.randrange(2)}" if kind != "put" else "p", msg,
                    rng.choice(["ok", "ok", "ok", "fail", "info"]), rng.randrange(1000), rng.randrange(50)))
    v = check(history(*ops))
    assert (v.counts.attempts, v.counts.enqueued, v.counts.dequeued, v.counts.ok, v.counts.lost, v.counts.unexpected, v.counts.duplicated, v.counts.recovered) == \
        plain_counts(ops)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 64, 1000])
def test_count_inversions_matches_brute_force_on_random_values(n):
    values = np.random.default_rng(n).integers(0, max(1, n // 3), n).tolist()
    brute = sum(1 for i, j in itertools.combinations(range(n), 2) if values[i] > values[j])
    assert count_inversions(values) == brute


def test_the_recorder_spills_batches_and_reads_them_back_in_order(tmp_path):
    rec = Recorder("r", "sim", "b", "s", spill=tmp_path / "spill.arrow", batch_rows=10)
    for i in range(35):
        rec.record(node="n", client="c", op="put" if i % 3 else "fault", queue="q", msg_id=f"p:{i}", t_start_ns=i,
                   latency_ns=1, outcome="ok", nbytes=1)
    assert len(rec) == 35 and rec.spilled == 30 and len(rec.rows) == 5  # three batches out, five rows held
    table = rec.table()
    assert table.schema == SAMPLE_SCHEMA and table.column("t_start_ns").to_pylist() == list(range(35))
    assert rec.fault_table().column("t_start_ns").to_pylist() == list(range(0, 35, 3))
    rec.discard()
    assert not (tmp_path / "spill.arrow").exists()


def test_a_run_spills_and_leaves_only_its_samples(tmp_path, monkeypatch):
    import lab.history.record

    monkeypatch.setattr(lab.history.record, "BATCH_ROWS", 500)
    w = parse_workload({"name": "spill", "producers": 2, "consumers": 2, "rate": 4000, "duration": 0.5,
                        "warmup": 0.1, "ack": "reliable", "seed": 4,
                        "faults": [{"fault": "pause", "at": 0.3, "duration": 0.1, "target": "server"}]})
    a = run(w, "ideal", "sim", out=tmp_path / "a", progress=False)
    assert not (tmp_path / "a" / SPILL_FILE).exists()
    table = read_samples(a.run_dir)
    assert table.num_rows == a.samples > 5000
    assert set(table.column("phase").to_pylist()) == {"warmup", "steady", "fault", "heal", "drain"}
    monkeypatch.setattr(lab.history.record, "BATCH_ROWS", 1 << 30)  # nothing spilled: the same samples
    b = run(w, "ideal", "sim", out=tmp_path / "b", progress=False)
    assert table.drop_columns(["run_id"]).equals(read_samples(b.run_dir).drop_columns(["run_id"]))
    assert a.check.to_dict() == b.check.to_dict() and a.check.valid


def test_end_to_end_is_put_start_to_first_delivery(tmp_path):
    t = history(("put", "p0", "p0:0", "ok", 100, 5), ("put", "p0", "p0:1", "ok", 110, 5),
                ("get", "c0", "p0:1", "ok", 200, 10), ("get", "c1", "p0:0", "ok", 300, 10),
                ("get", "c0", "p0:0", "ok", 250, 10), ("get", "c0", "p9:9", "ok", 400, 10))
    assert sorted(end_to_end_ns(t).tolist()) == [210 - 110, 260 - 100]
