"""Two broken promises the judge finds in any run, faults or not: an ack the design refused
that no lease, broken connection or fault explains (``lab.judge.refused_acks``), and a reply
saying the server's own code raised (``lab.design.InternalError``) — on hand-made histories,
through the HTTP drivers' reply check, and on two generated mutants of the lab's designs that
the swarm let through before these rules."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lab.design import InternalError, Rejected, http_body
from lab.design.promises import AT_LEAST_ONCE, FIFO, Promises
from lab.history.record import message_codes
from lab.judge.checker import check
from lab.judge.findings import INTERNAL, REFUSED_ACK, Counts, Verdict
from lab.judge.refused_acks import HEAL_GRACE_S, refused_acks
from lab.judge.verdict import RunFacts, judge
from tests.history import history, with_faults

MS = 1_000_000
LEASED = Promises("D", AT_LEAST_ONCE, FIFO, lease_s=0.5)
UNLEASED = Promises("D", AT_LEAST_ONCE, FIFO, hands_back_on_close=True)


def delivered_then(*rows: tuple, faults: tuple = ()) -> pa.Table:
    """p0:0 put at 0 ms and got by c0 at 10 ms, then ``rows`` (each as ``history`` takes it)."""
    h = history(("put", "p0", "p0:0", "ok", 0, MS), ("get", "c0", "p0:0", "ok", 10 * MS, MS), *rows)
    return with_faults(h, *faults) if faults else h


def unexplained(h: pa.Table, promises: Promises = LEASED) -> int:
    return refused_acks(h, message_codes(h)[1], promises)


def test_an_ack_refused_while_the_delivery_was_still_held_is_unexplained():
    assert unexplained(delivered_then(("ack", "c0", "p0:0", "fail", 20 * MS, MS))) == 1
    assert unexplained(delivered_then(("ack", "c0", "p0:0", "fail", 20 * MS, MS)), UNLEASED) == 1


def test_what_explains_a_refused_ack():
    refused = ("ack", "c0", "p0:0", "fail", 700 * MS, MS)
    assert unexplained(delivered_then(refused)) == 0  # the 0.5 s lease ran out first
    assert unexplained(delivered_then(refused), UNLEASED) == 1  # no lease to run out
    broke = ("get", "c0", None, "info", 300 * MS, MS)  # its connection broke in between
    assert unexplained(delivered_then(broke, refused), UNLEASED) == 0
    assert unexplained(delivered_then(("ack", "c0", "p0:0", "info", 20 * MS, MS))) == 0  # unknown: no refusal
    assert unexplained(delivered_then(("ack", "c0", "p0:0", "ok", 20 * MS, MS))) == 0
    other = ("ack", "c1", "p0:0", "fail", 20 * MS, MS)  # c1 never had it: no delivery to judge by
    assert unexplained(delivered_then(other)) == 0


@pytest.mark.parametrize("start_ms, heal_ms, explains", [
    (15, 18, True),  # in force between the get and the ack
    (5, 9, True),  # healed just before the get: within the grace
    (25, 30, False),  # began after the ack had ended
])
def test_a_fault_explains_a_refusal_only_near_it(start_ms: int, heal_ms: int, explains: bool):
    h = delivered_then(("ack", "c0", "p0:0", "fail", 20 * MS, MS), faults=(("crash", "server", start_ms * MS, heal_ms * MS),))
    assert unexplained(h) == (0 if explains else 1)
    assert HEAL_GRACE_S > 0.001


def test_a_fault_long_healed_before_the_delivery_explains_nothing():
    late = round((HEAL_GRACE_S + 0.1) * 1e9)
    h = history(("put", "p0", "p0:0", "ok", 0, MS), ("get", "c0", "p0:0", "ok", late, MS),
                ("ack", "c0", "p0:0", "fail", late + 10 * MS, MS))
    assert unexplained(with_faults(h, ("crash", "server", MS, 2 * MS))) == 1


def test_an_injected_fault_explains_every_refusal():
    injected = Promises("D", AT_LEAST_ONCE, FIFO, lease_s=0.5, injected=("loss",))
    assert unexplained(delivered_then(("ack", "c0", "p0:0", "fail", 20 * MS, MS)), injected) == 0


def test_the_checker_calls_a_run_with_an_unexplained_refusal_invalid_even_under_faults():
    refused = delivered_then(("ack", "c0", "p0:0", "fail", 20 * MS, MS),
                             faults=(("crash", "server", 200 * MS, 210 * MS),))
    facts = RunFacts("D", {}, True, ("crash",), LEASED)
    c = check(refused, facts)
    assert c.counts.failed[REFUSED_ACK] == 1 and c.verdict is Verdict.INVALID
    assert c.reason.startswith("1 ack refused that no lease, broken connection or fault explains")
    acked = delivered_then(("ack", "c0", "p0:0", "ok", 20 * MS, MS), faults=(("crash", "server", 200 * MS, 210 * MS),))
    assert check(acked, facts).verdict is Verdict.VALID


def test_an_internal_error_breaks_a_promise_whatever_the_faults():
    counts = Counts(attempts=2, enqueued=2, dequeued=2, ok=2, failed={INTERNAL: 1, "failed ack": 1})
    for faults in (frozenset(), frozenset({"crash"})):
        j = judge(LEASED, faults, counts, {})
        assert j.verdict is Verdict.INVALID and j.broken == ("failed",)
        assert "1 operation answered with an internal error (the server's own code raised)" in j.reason
    clean = Counts(attempts=2, enqueued=2, dequeued=2, ok=2, failed={"failed ack": 1})
    assert judge(LEASED, frozenset(), clean, {}).verdict is Verdict.VALID


def test_the_checker_counts_internal_errors_in_every_phase():
    h = delivered_then(("ack", "c0", "p0:0", "info", 20 * MS, MS))
    error = [None, None, "InternalError: commit q0: HTTP 500 {\"error\": \"internal error: TypeError: x\"}"]
    h = h.set_column(h.schema.get_field_index("error"), "error", pa.array(error, pa.string()))
    h = h.set_column(h.schema.get_field_index("phase"), "phase", pa.array(["steady", "steady", "drain"], pa.string()))
    c = check(h, RunFacts("D", {}, True, (), LEASED))
    assert c.counts.failed == {INTERNAL: 1} and c.verdict is Verdict.INVALID


@pytest.mark.parametrize("status, body, raised", [
    (200, b"{}", None),
    (409, b'{"error": "lease lost"}', Rejected),
    (500, b'{"error": "internal error: TypeError: unsupported operand"}', InternalError),
    (500, b'{"error": "the disk is full"}', RuntimeError),  # a 500 the router did not make: unknown
    (503, b'{"error": "a replica did not answer"}', RuntimeError),
])
def test_an_http_reply_becomes_what_the_runner_classifies(status: int, body: bytes, raised: type | None):
    if raised is None:
        assert http_body(status, body, "put q0") == body
        return
    with pytest.raises(raised, match=f"put q0: (HTTP )?{status}") as caught:
        http_body(status, body, "put q0")
    assert type(caught.value) is raised  # InternalError is a RuntimeError: the exact class counts


@pytest.mark.usefixtures("results")
@pytest.mark.parametrize("mutant", [
    "queuefka~gen~core.framing~Binary_Add_RShift~0",  # every group-commit write raises: a 500 for each commit
    "primer~gen~core.queues~Compare_Gt_LtE~1",  # receipts of normal length refused
])
def test_generated_mutants_the_swarm_let_through_are_now_caught(mutant: str, tmp_path):
    # each was VALID before, with a note of failed acks "with no fault in the run"
    from lab.experiments.generated.apply import strongest_options
    from lab.experiments.planting import plant
    from lab.experiments.runner import run
    from lab.experiments.swarm_draw import DEFAULT_WORKLOAD
    from lab.workloads.spec import parse_workload

    design = mutant.split("~")[0]
    options = strongest_options(design)
    workload = parse_workload(DEFAULT_WORKLOAD)
    control = run(workload, design, seed=1, out=tmp_path / "control", progress=False, options=options)
    assert control.check.verdict == "valid", control.check.line()
    with plant(mutant):
        mutated = run(workload, design, seed=1, out=tmp_path / "mutated", progress=False, options=options)
    assert mutated.check.verdict == "invalid", mutated.check.line()
    assert {"refused", "failed"} & set(mutated.check.judgement.broken), mutated.check.line()
