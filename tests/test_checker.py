"""The checker on hand-made histories: every category of Jepsen's total-queue, and real-time order."""

from __future__ import annotations

import itertools

from hypothesis import given, strategies as st

from lab.experiments.bench.checker import count_inversions  # the old per-stream check, now the benchmark's peer
from lab.judge.checker import check
from lab.judge.findings import Verdict
from lab.judge.verdict import RunFacts
from tests.history import history, with_faults


def test_a_clean_history_is_valid():
    v = check(history(("put", "p0", "p0:0", "ok"), ("put", "p0", "p0:1", "ok"),
                      ("get", "c0", "p0:0", "ok"), ("get", "c0", "p0:1", "ok"), ("get", "c0", None, "fail")))
    assert v.valid
    assert (v.counts.attempts, v.counts.enqueued, v.counts.dequeued, v.counts.ok, v.counts.lost, v.counts.unexpected, v.counts.duplicated, v.counts.recovered) == (2, 2, 2, 2, 0, 0, 0, 0)
    assert (v.reordering.inversions, v.reordering.checked, v.reordering.queues) == (0, 2, 1)


def test_an_acknowledged_put_never_delivered_is_lost():
    v = check(history(("put", "p0", "p0:0", "ok"), ("put", "p0", "p0:1", "ok"), ("get", "c0", "p0:1", "ok")))
    assert not v.valid and v.counts.lost == 1 and v.examples["lost"] == ["p0:0"]


def test_a_failed_or_unknown_put_that_never_arrives_is_not_lost():
    v = check(history(("put", "p0", "p0:0", "fail"), ("put", "p0", "p0:1", "info"),
                      ("put", "p0", "p0:2", "ok"), ("get", "c0", "p0:2", "ok")))
    assert v.valid and v.counts.lost == 0 and v.counts.attempts == 3 and v.counts.enqueued == 1


def test_a_run_where_no_put_was_acknowledged_is_no_evidence_never_valid():
    # e.g. a client timeout shorter than a round trip: every put "info", nothing lost
    v = check(history(("put", "p0", "p0:0", "info"), ("put", "p0", "p0:1", "info"), ("get", "c0", None, "info")))
    assert (v.counts.lost, v.counts.unexpected) == (0, 0)
    assert v.verdict is Verdict.NO_EVIDENCE and not v.valid and v.judgement.problem == "no put was acknowledged"
    assert v.line().startswith("NO EVIDENCE (no put was acknowledged): 2 attempted")
    nothing = check(history(("get", "c0", None, "fail")))  # nothing attempted either
    assert (nothing.verdict, nothing.judgement.problem) == (Verdict.NO_EVIDENCE, "no put was attempted")


def test_a_run_that_delivered_nothing_says_so():
    crash = RunFacts("kestrel", {}, True, ("crash",))  # syncJournal=never: a crash may lose it, as it did
    h = with_faults(history(("put", "p0", "p0:0", "ok"), ("get", "c0", None, "fail")), ("crash", "kestrel", 7, 8))
    v = check(h, crash)
    assert v.verdict is Verdict.NO_EVIDENCE and v.judgement.problem == "nothing was delivered" and v.counts.lost == 1
    assert v.to_dict()["problem"] == "nothing was delivered" and v.to_dict()["verdict"] == "no evidence"
    # without a fault that explains it, losing everything is a broken promise, not a lack of evidence
    lost = check(history(("put", "p0", "p0:0", "ok"), ("get", "c0", None, "fail")))
    assert (lost.verdict, lost.judgement.broken) == (Verdict.INVALID, ("lost",))


def test_a_delivery_from_nowhere_is_unexpected():
    v = check(history(("put", "p0", "p0:0", "ok"), ("get", "c0", "p0:0", "ok"), ("get", "c0", "p9:4", "ok")))
    assert not v.valid and v.counts.unexpected == 1 and v.examples["unexpected"] == ["p9:4"]


def test_a_second_delivery_is_duplicated_but_valid():
    v = check(history(("put", "p0", "p0:0", "ok"), ("get", "c0", "p0:0", "ok"), ("get", "c1", "p0:0", "ok")))
    assert v.valid and v.counts.duplicated == 1 and v.counts.ok == 1


def test_a_second_delivery_is_valid_under_at_least_once_only_when_something_handed_it_back():
    h = history(("put", "p0", "p0:0", "ok"), ("get", "c0", "p0:0", "ok"), ("ack", "c0", "p0:0", "info"),
                ("get", "c1", "p0:0", "ok"))
    kestrel = check(h, RunFacts("kestrel", {}, True, ()))
    assert kestrel.verdict == "valid" and kestrel.line().startswith(
        "VALID (1 duplicate delivery handed back unacknowledged when its consumer's connection broke; "
        "1 failed ack with no fault in the run)")
    acked = history(("put", "p0", "p0:0", "ok"), ("get", "c0", "p0:0", "ok"), ("ack", "c0", "p0:0", "ok"),
                    ("get", "c1", "p0:0", "ok"))
    again = check(acked, RunFacts("kestrel", {}, True, ()))
    assert again.verdict == "invalid" and again.reason.startswith(
        "1 duplicate delivery that no lease, release or fault explains (the run had no fault)")
    assert again.examples["unexplained duplicated"] == ["p0:0"]
    ideal = check(h, RunFacts("ideal", {}, True, ("pause",)))
    assert ideal.verdict == "invalid" and ideal.reason == (
        "1 duplicate delivery that no lease, release or fault explains (the run's faults: pause); "
        "ideal with reliable reads promises exactly-once")


def test_reordering_breaks_fifo_unless_a_fault_of_the_run_could_have_caused_it():
    ops = [("put", "p0", f"p0:{i}", "ok") for i in range(3)]
    h = history(*ops, *[("get", "c0", f"p0:{i}", "ok", 100 + k * 10) for k, i in enumerate([2, 0, 1])])
    assert check(h, RunFacts("kestrel", {}, True, ())).verdict == "invalid"
    split = with_faults(h, ("partition", "kestrel", 50, 60))
    allowed = check(split, RunFacts("kestrel", {}, True, ("partition",)))
    assert allowed.verdict == "allowed" and allowed.reason == (
        "2 inversions of the real-time order under partition: allowed, an aborted or rolled-back read returns to "
        "the head")
    assert check(h, RunFacts("kestrel", {}, True, ("partition",))).verdict == "invalid"  # no partition in the rows
    assert check(h).verdict == "valid"  # no facts: Jepsen's rule does not judge order


def test_an_unknown_put_that_was_delivered_is_recovered():
    v = check(history(("put", "p0", "p0:0", "info"), ("put", "p0", "p0:1", "ok"),
                      ("get", "c0", "p0:0", "ok"), ("get", "c0", "p0:1", "ok")))
    assert v.valid and v.counts.recovered == 1 and v.counts.lost == 0


def test_failed_and_unknown_gets_are_not_deliveries():
    v = check(history(("put", "p0", "p0:0", "ok"), ("get", "c0", "p0:0", "info"), ("get", "c0", "p0:0", "fail")))
    assert not v.valid and v.counts.lost == 1 and v.counts.dequeued == 0


def test_each_message_that_overtook_another_is_one_inversion():
    ops = [("put", "p0", f"p0:{i}", "ok") for i in range(5)]  # one after another: each acknowledged before the next
    # c0 sees 3, 0, 1, 2, 4: message 3 overtook 0, 1 and 2
    ops += [("get", "c0", f"p0:{i}", "ok", 100 + k * 10) for k, i in enumerate([3, 0, 1, 2, 4])]
    v = check(history(*ops))
    assert v.valid
    r = v.reordering
    assert (r.inversions, r.overtaken, r.most_overtakers, r.checked, r.scope) == (3, 3, 1, 5, "queue")
    assert v.line().endswith("3 inversions (3 of 5 messages overtaken, at most by 1; order per queue)")


def test_a_consumer_that_runs_ahead_of_another_overtakes_across_consumers():
    ops = [("put", "p0", f"p0:{i}", "ok") for i in range(6)]
    # delivered alternately; c1's gets all end before c0's begin: in real time c1 got 1, 3 and
    # 5 before anybody asked for 0, 2 and 4
    ops += [("get", "c0" if i % 2 == 0 else "c1", f"p0:{i}", "ok", 100 + (i % 2) * -50 + i, 1) for i in range(6)]
    h = history(*ops)
    kestrel = check(h, RunFacts("kestrel", {}, True, ()))  # FIFO per queue
    assert kestrel.reordering.inversions == 3 + 2 + 1 and kestrel.verdict == "invalid"
    assert "FIFO per queue" in kestrel.reason
    queuefka = check(h, RunFacts("queuefka", {}, True, ()))  # FIFO per consumer: each consumer's are in order
    assert queuefka.reordering.inversions == 0 and queuefka.reordering.scope == "consumer"
    assert queuefka.verdict == "valid", queuefka.reason


def test_gets_that_overlap_promise_no_order():
    ops = [("put", "p0", "p0:0", "ok"), ("put", "p0", "p0:1", "ok"),
           ("get", "c0", "p0:1", "ok", 100, 50),  # returns at 150, after p0:0's get began
           ("get", "c1", "p0:0", "ok", 110, 10)]
    assert check(history(*ops)).reordering.inversions == 0


def test_puts_that_overlap_promise_no_order():
    ops = [("put", "p0", "p0:0", "ok", 0, 20), ("put", "p1", "p1:0", "ok", 10, 5),  # p1:0 began before p0:0 returned
           ("get", "c0", "p1:0", "ok", 100, 5), ("get", "c0", "p0:0", "ok", 110, 5)]
    assert check(history(*ops)).reordering.inversions == 0
    ops[1] = ("put", "p1", "p1:0", "ok", 21, 5)  # after it returned: p1:0 overtook p0:0
    assert check(history(*ops)).reordering.inversions == 1


def test_redeliveries_do_not_count_as_reordering():
    ops = [("put", "p0", f"p0:{i}", "ok") for i in range(3)]
    ops += [("get", "c0", m, "ok") for m in ("p0:0", "p0:1", "p0:0", "p0:2")]
    v = check(history(*ops))
    assert v.counts.duplicated == 1 and v.reordering.inversions == 0


@given(st.lists(st.integers(min_value=0, max_value=50), max_size=60))
def test_count_inversions_matches_brute_force(values):
    brute = sum(1 for i, j in itertools.combinations(range(len(values)), 2) if values[i] > values[j])
    assert count_inversions(values) == brute


def test_a_released_get_is_no_delivery_and_its_message_is_left_out_of_the_order():
    # c0 takes p0:0 and hands it back; c1 takes p0:1, then p0:0 again; c0's release of p0:2
    # was lost (info): the message comes back all the same
    v = check(history(("put", "p0", "p0:0", "ok"), ("put", "p0", "p0:1", "ok"), ("put", "p0", "p0:2", "ok"),
                      ("get", "c0", "p0:0", "ok"), ("release", "c0", "p0:0", "ok"),
                      ("get", "c1", "p0:1", "ok"), ("get", "c1", "p0:0", "ok"),
                      ("get", "c0", "p0:2", "ok"), ("release", "c0", "p0:2", "info"), ("get", "c1", "p0:2", "ok")),
              RunFacts("kestrel", {}, True, ()))
    assert (v.counts.dequeued, v.counts.duplicated, v.counts.lost) == (3, 0, 0)
    assert v.reordering.inversions == 0 and v.verdict == "valid"


def test_a_released_message_that_never_comes_back_is_lost():
    v = check(history(("put", "p0", "p0:0", "ok"), ("get", "c0", "p0:0", "ok"), ("release", "c0", "p0:0", "ok")))
    assert v.counts.lost == 1 and not v.valid


def test_a_failed_release_leaves_its_delivery_counted_and_the_next_one_is_a_duplicate():
    # a release that failed certainly did not happen: the message was delivered, and delivered again
    failed = check(history(("put", "p0", "p0:0", "ok"), ("get", "c0", "p0:0", "ok"), ("release", "c0", "p0:0", "fail"),
                           ("get", "c1", "p0:0", "ok")))
    assert (failed.counts.dequeued, failed.counts.duplicated) == (2, 1), failed.line()
    # one that went through (or may have: unknown) handed it back, and the next delivery is the one
    for outcome in ("ok", "info"):
        handed = check(history(("put", "p0", "p0:0", "ok"), ("get", "c0", "p0:0", "ok"),
                               ("release", "c0", "p0:0", outcome), ("get", "c1", "p0:0", "ok")))
        assert (handed.counts.dequeued, handed.counts.duplicated) == (1, 0), handed.line()
