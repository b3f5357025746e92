"""The real-time order check (``lab.judge.order``): against its definition by brute force on random
histories, on hand-made ones, and on runs — the open-loop runs that the per-stream check
called invalid, and a planted bug (the mutant ``ideal-skips-the-head``) it must catch."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from lab.experiments.bench.checker import peer_stream_reordering, synthetic_history
from lab.judge.checker import check
from lab.judge.order import _argsort, _dominance, check_order, overtakers, reordering
from lab.history.record import Recorder, message_codes, read_samples
from lab.experiments.runner import run
from lab.experiments.runner_manifest import CHECKED_COLUMNS
from lab.design.promises import FIFO_PER_CONSUMER
from lab.judge.verdict import RunFacts
from lab.workloads.spec import parse_workload
from lab.experiments.planting import plant

COLUMNS = ("op", "client", "queue", "msg_id", "t_start_ns", "latency_ns", "outcome")


def table(rows: list[tuple]) -> pa.Table:
    """Rows of (op, client, queue, msg_id, t_start_ns, latency_ns, outcome), as a run's samples."""
    rec = Recorder("test-run", "sim", "hand", "hand-made")
    for kind, client, queue, msg, start, latency, outcome in rows:
        rec.record(node="n", client=client, op=kind, queue=queue, msg_id=msg, t_start_ns=start, latency_ns=latency,
                   outcome=outcome, nbytes=1, phase="steady")
    return rec.table()


def before(end: int, began: int, other: int, mine: tuple = (None, 0), theirs: tuple = (None, 1)) -> bool:
    """A call [began, end] (ns) came before a call invoked at ``other``: it ended earlier, or
    in that very nanosecond having taken time (``lab.judge.order``: a client's next call begins in
    the nanosecond its last one returned), or having taken none when both are calls of one
    client, in its order: ``mine`` and ``theirs`` are each call's (client, row)."""
    return end < other or (end == other and (end > began or (mine[0] == theirs[0] and mine[1] < theirs[1])))


def brute_force(rows: list[tuple], per_consumer: bool) -> dict[str, int]:
    """The definition, pair by pair: for each message, how many messages overtook it."""
    puts: dict[str, list[tuple]] = {}
    gets: dict[str, list[tuple]] = {}
    released = set()
    for row, (op, client, queue, msg, start, latency, outcome) in enumerate(rows):
        if msg is None:
            continue
        if op == "put":
            puts.setdefault(msg, []).append((queue, start, start + latency, outcome, (client, row)))
        elif op == "get" and outcome == "ok":
            gets.setdefault(msg, []).append((client, start, start + latency, (client, row)))
        elif op == "release" and outcome != "fail":  # a failed release did not happen
            released.add(msg)
    checked = {}
    for msg, ps in puts.items():
        if len(gets.get(msg, ())) != 1 or msg in released:
            continue
        acks = [(start, done, who) for _, start, done, outcome, who in ps if outcome == "ok"]
        first = min(ps, key=lambda p: (p[1], p[4][1]))  # the first invocation (in its client's order at a tie)
        checked[msg] = (ps[0][0], first[1], first[4], acks, *gets[msg][0])
    counts = {}
    for a, (qa, _, _, acks, ca, get_start, _, a_get) in checked.items():
        counts[a] = sum(1 for b, (qb, put_start, b_put, _, cb, b_get_start, get_done, b_get) in checked.items()
                        if qb == qa and (cb == ca or not per_consumer)
                        and any(before(done, began, put_start, who, b_put) for began, done, who in acks)
                        and before(get_done, b_get_start, get_start, b_get, a_get))
    return counts


@st.composite
def histories(draw) -> list[tuple]:
    """Messages over a few queues and consumers on a coarse clock (ties and overlaps are
    common): each put zero to two times (zero: any delivery is unexpected) with any outcome,
    delivered zero to three times (a redelivery), sometimes released; and empty gets."""
    rows = []
    times, later = st.integers(0, 40), st.integers(0, 80)  # puts, gets
    for i in range(draw(st.integers(0, 16))):
        msg, queue = f"p{i % 3}:{i}", f"q{draw(st.integers(0, 1))}"
        for _ in range(draw(st.sampled_from([0, 1, 1, 1, 1, 2]))):
            rows.append(("put", f"p{i % 3}", queue, msg, draw(times), draw(st.integers(0, 8)),
                         draw(st.sampled_from(["ok", "ok", "ok", "ok", "info", "fail"]))))
        for _ in range(draw(st.sampled_from([0, 1, 1, 1, 1, 1, 1, 2, 3]))):
            client = f"c{draw(st.integers(0, 1))}"
            rows.append(("get", client, queue, msg, draw(later), draw(st.integers(0, 8)),
                         draw(st.sampled_from(["ok", "ok", "ok", "ok", "ok", "info"]))))
            if draw(st.integers(0, 9)) == 0:
                rows.append(("release", client, queue, msg, draw(later), 1, draw(st.sampled_from(["ok", "info", "fail"]))))
    rows += [("get", "c0", "q0", None, draw(later), 3, "fail")] * draw(st.integers(0, 2))
    return draw(st.permutations(rows))


@settings(max_examples=300, deadline=None)
@given(histories(), st.booleans())
def test_the_check_matches_the_definition_pair_by_pair(rows, per_consumer):
    samples = table(rows)
    ids, codes = message_codes(samples)
    result = check_order(samples, codes, len(ids), per_consumer)
    expected = brute_force(rows, per_consumer)
    got = dict(zip(ids.to_pylist(), result.counts.tolist()))
    assert {m: got[m] for m in expected} == expected
    assert all(n == 0 for m, n in got.items() if m not in expected)  # out of the check: never overtaken
    r = result.summary
    assert (r.checked, r.inversions, r.overtaken, r.most_overtakers) == (
        len(expected), sum(expected.values()), sum(1 for n in expected.values() if n),
        max(expected.values(), default=0))
    assert r.queues == len({q for op, _, q, m, *_ in rows if op == "put" and m in expected})
    # huge instants (and so many groups that they no longer fold into one int64): the same counts
    scaled = samples
    for name in ("t_start_ns", "latency_ns"):
        scaled = scaled.set_column(scaled.schema.get_field_index(name), name,
                                   pa.array(np.array(scaled[name]) << 55))
    assert overtakers(scaled, codes, len(ids), per_consumer).tolist() == result.counts.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=1, max_size=40),
       st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=1, max_size=40))
def test_dominance_counting_matches_brute_force(points, queries):
    px, py = (np.array(c, np.int64) for c in zip(*points))
    qx, qy = (np.array(c, np.int64) for c in zip(*queries))
    expected = [sum(1 for x, y in points if x > a and y < b) for a, b in queries]
    assert _dominance(px, py, qx, qy).tolist() == expected


def test_the_packed_argsort_is_a_stable_argsort_and_falls_back_beyond_64_bits():
    rng = np.random.default_rng(3)
    for high in (50, 2**40, 2**62):
        keys = rng.integers(0, high, 5000)
        assert np.array_equal(_argsort(keys), np.argsort(keys, kind="stable"))


def op(kind: str, client: str, msg: str | None, start: int, latency: int = 5, queue: str = "q0",
       outcome: str = "ok") -> tuple:
    return (kind, client, queue, msg, start, latency, outcome)


def test_overlapping_puts_or_gets_promise_nothing():
    # B's put began before A's returned: no order between them
    overlapping = [op("put", "p0", "a", 0, 20), op("put", "p1", "b", 10), op("get", "c0", "b", 30), op("get", "c0", "a", 40)]
    assert reordering(table(overlapping), *codes_of(overlapping)).inversions == 0
    # B's put after A's returned, but A's get began before B's returned
    gets = [op("put", "p0", "a", 0), op("put", "p1", "b", 10), op("get", "c0", "b", 30, 20), op("get", "c1", "a", 40)]
    assert reordering(table(gets), *codes_of(gets)).inversions == 0
    # neither overlaps: b overtook a
    late = [op("put", "p0", "a", 0), op("put", "p1", "b", 10), op("get", "c0", "b", 30), op("get", "c1", "a", 40)]
    counts = overtakers(table(late), *codes_of(late))
    assert dict(zip(message_codes(table(late))[0].to_pylist(), counts.tolist())) == {"a": 1, "b": 0}


def codes_of(rows: list[tuple]) -> tuple[np.ndarray, int]:
    ids, codes = message_codes(table(rows))
    return codes, len(ids)


def test_queues_are_checked_apart_and_per_consumer_only_within_a_consumer():
    rows = [op("put", "p0", "a", 0, queue="q0"), op("put", "p0", "b", 10, queue="q1"),
            op("put", "p0", "c", 20, queue="q0"),
            op("get", "c1", "b", 30, queue="q1"), op("get", "c1", "c", 40), op("get", "c0", "a", 50)]
    per_queue = reordering(table(rows), *codes_of(rows))
    assert (per_queue.inversions, per_queue.queues, per_queue.scope) == (1, 2, "queue")  # c overtook a; b is q1's
    per_consumer = reordering(table(rows), *codes_of(rows), per_consumer=True)
    assert (per_consumer.inversions, per_consumer.scope) == (0, "consumer")  # a went to c0, c to c1


def test_released_redelivered_undelivered_and_unexpected_messages_stay_out():
    rows = [op("put", "p0", f"m{i}", 10 * i) for i in range(5)]
    rows += [op("get", "c0", "m4", 100),  # overtakes whatever is checked
             op("get", "c0", "m0", 110), op("release", "c0", "m0", 115), op("get", "c0", "m0", 200),  # released
             op("get", "c0", "m1", 120), op("get", "c1", "m1", 210),  # redelivered
             # m2 never delivered
             op("get", "c0", "x9", 90),  # unexpected: never put
             op("get", "c0", "m3", 130)]
    ids, codes = message_codes(table(rows))
    result = check_order(table(rows), codes, len(ids))
    counts = dict(zip(ids.to_pylist(), result.counts.tolist()))
    assert counts == {"m0": 0, "m1": 0, "m2": 0, "m3": 1, "m4": 0, "x9": 0}
    assert (result.summary.checked, result.summary.inversions) == (2, 1)


def test_records_one_consumer_got_in_the_same_instant_in_the_wrong_order_count_as_an_inversion():
    # a prefetching consumer hands out the records of one fetch from its buffer: no time passes
    # in the sim, and yet its second get came after its first
    rows = [op("put", "p0", "a", 0), op("put", "p0", "b", 10),
            op("get", "c0", "b", 100, latency=0), op("get", "c0", "a", 100, latency=0)]
    ids, codes = message_codes(table(rows))
    counts = dict(zip(ids.to_pylist(), check_order(table(rows), codes, len(ids)).counts.tolist()))
    assert counts == {"a": 1, "b": 0}
    # the same instants on two consumers: calls of different clients at one instant are not ordered
    apart = rows[:3] + [op("get", "c1", "a", 100, latency=0)]
    ids, codes = message_codes(table(apart))
    assert check_order(table(apart), codes, len(ids)).summary.inversions == 0
    # and in the right order, nothing
    right = rows[:2] + [op("get", "c0", "a", 100, latency=0), op("get", "c0", "b", 100, latency=0)]
    ids, codes = message_codes(table(right))
    assert check_order(table(right), codes, len(ids)).summary.inversions == 0


def test_puts_one_producer_made_in_the_same_instant_are_ordered_by_its_sequence():
    # a producer whose client acknowledges at once (a buffered send): a's put came first
    rows = [op("put", "p0", "a", 0, latency=0), op("put", "p0", "b", 0, latency=0),
            op("get", "c0", "b", 100), op("get", "c0", "a", 110)]
    ids, codes = message_codes(table(rows))
    assert dict(zip(ids.to_pylist(), check_order(table(rows), codes, len(ids)).counts.tolist())) == {"a": 1, "b": 0}
    both = rows[:2] + [op("get", "c0", "b", 100, latency=0), op("get", "c0", "a", 100, latency=0)]
    ids, codes = message_codes(table(both))
    assert check_order(table(both), codes, len(ids)).summary.inversions == 1  # both sides in one tick


def test_a_message_whose_release_failed_stays_in_the_order_check():
    rows = [op("put", "p0", "a", 0), op("put", "p0", "b", 10), op("get", "c0", "b", 100),
            op("get", "c0", "a", 110), op("release", "c0", "a", 115, outcome="fail")]
    ids, codes = message_codes(table(rows))
    assert check_order(table(rows), codes, len(ids)).summary.inversions == 1
    rows[-1] = op("release", "c0", "a", 115, outcome="info")  # may have happened: the message may come back
    ids, codes = message_codes(table(rows))
    assert check_order(table(rows), codes, len(ids)).summary.checked == 1


def test_a_put_never_acknowledged_owes_no_place_but_may_overtake():
    rows = [op("put", "p0", "a", 0, outcome="info"), op("put", "p0", "b", 10), op("put", "p0", "c", 20),
            op("get", "c0", "c", 30), op("get", "c0", "b", 40), op("get", "c0", "a", 50)]
    ids, codes = message_codes(table(rows))
    assert dict(zip(ids.to_pylist(), overtakers(table(rows), codes, len(ids)).tolist())) == {"a": 0, "b": 1, "c": 0}


def test_the_synthetic_history_of_the_benchmark_agrees_with_brute_force():
    samples = synthetic_history(1500, producers=3, queues=2, consumers=3, late=0.02, seed=4)
    rows = list(zip(*(samples.column(c).to_pylist() for c in COLUMNS)))
    ids, codes = message_codes(samples)
    expected = brute_force(rows, per_consumer=False)
    got = dict(zip(ids.to_pylist(), overtakers(samples, codes, len(ids)).tolist()))
    assert got == expected and sum(expected.values()) > 0
    assert peer_stream_reordering(samples, codes, ids).inversions > 0  # the old check: puts that overlapped


# ----------------------------------------------------------------------------- runs

# the example, shorter: 8 open-loop producers on an M/M/2 ideal (the per-stream
# check called this run INVALID with 335 inversions: puts whose calls overlapped)
OPEN_LOOP = {"name": "mm2", "producers": 8, "consumers": 0, "rate": 8000, "arrivals": "poisson", "duration": 0.5,
             "warmup": 0.2, "ack": "auto", "seed": 7, "sim": {"latency": {"dist": "constant", "ms": 0}, "cores": 2}}


def test_open_loop_producers_on_the_ideal_queue_keep_real_time_order(tmp_path):
    result = run(parse_workload(OPEN_LOOP), "ideal", "sim", out=tmp_path / "r", progress=False,
                 options={"service": "exp:200us"})
    v = result.check
    assert v.verdict == "valid" and v.reordering.inversions == 0, v.line()
    assert v.reordering.checked == v.counts.attempts > 5000
    samples = read_samples(result.run_dir, CHECKED_COLUMNS, lean=True)
    ids, codes = message_codes(samples)
    assert peer_stream_reordering(samples, codes, ids).inversions > 0  # what the old check counted


def test_an_open_loop_mm1_queue_keeps_real_time_order(tmp_path):
    w = parse_workload({"name": "mm1", "producers": 1, "consumers": 0, "rate": 16_000, "arrivals": "poisson",
                        "messages": 20_000, "warmup": 0, "seed": 1,
                        "sim": {"latency": {"dist": "constant", "ms": 0}, "cores": 1}})
    v = run(w, "ideal", "sim", out=tmp_path / "r", progress=False, options={"service": "exp:50us"}).check
    assert v.verdict == "valid" and v.reordering.inversions == 0 and v.reordering.checked == 20_000, v.line()


BROKEN_RUNS = {
    "closed-loop backlog": {"name": "backlog", "producers": 1, "consumers": 1, "rate": 2000, "duration": 1.0,
                            "warmup": 0.1, "consumer_delay": 0.3, "ack": "auto", "seed": 3},
    "open-loop, reliable": {"name": "open", "producers": 4, "consumers": 2, "queues": 2, "rate": 4000,
                            "arrivals": "poisson", "duration": 1.0, "warmup": 0.1, "consumer_delay": 0.2,
                            "ack": "reliable", "seed": 4},
}


@pytest.mark.parametrize("fields", BROKEN_RUNS.values(), ids=BROKEN_RUNS.keys())
def test_a_queue_that_serves_a_later_message_first_breaks_its_order_promise(tmp_path, fields):
    w = parse_workload(fields)
    with plant("ideal-skips-the-head"):
        v = run(w, "ideal", "sim", out=tmp_path / "broken", progress=False).check
    assert v.verdict == "invalid" and v.reordering.inversions > 0, v.line()
    assert "inversion" in v.reason and "promises FIFO per queue" in v.reason, v.reason
    assert (v.counts.lost, v.counts.duplicated, v.counts.unexpected) == (0, 0, 0)  # nothing else is wrong with it
    ideal = run(w, "ideal", "sim", out=tmp_path / "ideal", progress=False).check
    assert ideal.verdict == "valid" and ideal.reordering.inversions == 0, ideal.line()


def test_a_design_that_promises_order_per_consumer_is_checked_per_consumer():
    rows = [op("put", "p0", f"m{i}", 10 * i) for i in range(4)]
    # c1 ran ahead with m1 and m3 before c0 asked for m0 and m2 (two buffers of one fetch each)
    rows += [op("get", "c1", "m1", 100), op("get", "c1", "m3", 110), op("get", "c0", "m0", 120), op("get", "c0", "m2", 130)]
    samples = table(rows)
    queuefka = RunFacts("queuefka", {}, True, ())
    assert queuefka.promises().order == FIFO_PER_CONSUMER
    v = check(samples, queuefka)
    assert v.reordering.scope == "consumer" and v.reordering.inversions == 0
    one_at_a_time = RunFacts("queuefka", {"prefetch": 1}, True, ())  # no buffer: real time across consumers
    w = check(samples, one_at_a_time)
    assert w.reordering.scope == "queue" and w.reordering.inversions == 3 and w.verdict == "invalid"
    assert "promises FIFO per queue" in w.reason
