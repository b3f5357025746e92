"""Promises and the verdict: each class on hand-made counts, each design's promises as
declared, and real sim runs with a crash (Kestrel's syncJournal, Queuefka's fsync)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.design.registry import backend_class
from lab.judge.checker import check
from lab.history.record import Recorder
from lab.experiments.run_spec import RunSpec
from lab.experiments.runner import run
from lab.history.phases import fault_kinds as started
from lab.judge.findings import (Cause, Counts, Explanation, Finding, Standing, Verdict, explanations_from_manifest,
                                explanations_to_list, worst)
from lab.judge.verdict import RunFacts, fault_kinds, judge, judge_run
from lab.design.promises import (ANY_FAULT, AT_LEAST_ONCE, AT_MOST_ONCE, EXACTLY_ONCE, FIFO, NO_ORDER, Allowance, Promises)
from lab.workloads.spec import parse_workload
from tests.history import history, with_faults

CLEAN = dict(attempts=10, enqueued=10, dequeued=10, lost=0, unexpected=0, duplicated=0, inversions=0)
CRASH_LOSES = Allowance("lost", ("crash",), "never fsyncs: a crash loses the unsynced tail")
PROMISES = Promises("design X", AT_LEAST_ONCE, FIFO, (CRASH_LOSES,))
NONE = frozenset()


def counts(**changed) -> Counts:
    return Counts(**{**CLEAN, **changed})


def test_a_clean_run_is_valid():
    j = judge(PROMISES, frozenset({"crash"}), counts())
    assert (j.verdict, j.valid, j.findings) == (Verdict.VALID, True, ()) and "nothing lost" in j.reason


CRASH_EXPLAINS = Explanation("lost", Cause.FAULT, ("crash",), CRASH_LOSES.why)
CRASH_WORDS = "under crash: allowed, never fsyncs: a crash loses the unsynced tail"


def test_a_loss_each_message_of_which_a_fault_explains_is_allowed_and_named():
    j = judge(PROMISES, frozenset({"crash", "pause"}), counts(lost=40, dequeued=6), {CRASH_EXPLAINS: 40})
    assert j.verdict == Verdict.ALLOWED and not j.valid
    assert j.findings == (Finding(Standing.ALLOWED, "lost", 40, CRASH_EXPLAINS),)  # a value: no sentence to parse
    assert j.reason == f"lost 40 acknowledged messages {CRASH_WORDS}"


@pytest.mark.parametrize("faults", [NONE, frozenset({"crash"})])
def test_a_loss_no_fault_explains_is_invalid_even_in_a_run_with_a_fault_that_permits_some(faults):
    j = judge(PROMISES, faults, counts(lost=12), {CRASH_EXPLAINS: 5} if faults else None)
    assert j.verdict == Verdict.INVALID and j.broken == ("lost",)
    unexplained = 7 if faults else 12
    assert j.reason.startswith(f"lost {unexplained} acknowledged messages that no fault explains")
    assert "design X promises no loss of an acknowledged message" in j.reason
    assert ("(the run's faults: crash)" in j.reason) == bool(faults)
    assert (f"lost 5 acknowledged messages {CRASH_WORDS}" in j.reason) == bool(faults)


def test_duplicates_need_a_lease_a_close_or_a_fault_even_under_at_least_once():
    leased = Promises("L", AT_LEAST_ONCE, FIFO, lease_s=5.0)
    lease = Explanation("duplicated", Cause.LEASE, lease_s=5.0)
    j = judge(leased, NONE, counts(duplicated=3), {lease: 3})
    assert j.verdict == Verdict.VALID and j.reason == "3 duplicate deliveries after a lease of 5 s ran out unacknowledged"
    j = judge(leased, NONE, counts(duplicated=3), {lease: 1})
    assert j.verdict == Verdict.INVALID and j.reason.startswith("2 duplicate deliveries that no lease, release or fault explains")
    assert "L promises at-least-once: a delivery comes again only after its lease of 5 s expires" in j.reason
    for delivery in (EXACTLY_ONCE, AT_MOST_ONCE):
        j = judge(Promises("Y", delivery, FIFO), frozenset({"crash"}), counts(duplicated=1), {})
        assert j.verdict == Verdict.INVALID and j.reason.endswith(f"; Y promises {delivery}")


def test_duplicates_a_fault_explains_under_at_most_once_are_allowed():
    promises = Promises("Z", AT_MOST_ONCE, FIFO, (Allowance("duplicated", ("crash",), "unsynced removals"),))
    j = judge(promises, frozenset({"crash"}), counts(duplicated=2),
              {Explanation("duplicated", Cause.FAULT, ("crash",), "unsynced removals"): 2})
    assert j.verdict == Verdict.ALLOWED and j.reason == "2 duplicate deliveries under crash: allowed, unsynced removals"


def test_reordering_breaks_fifo_unless_a_fault_explains_it_and_is_not_judged_without_an_order():
    assert judge(PROMISES, NONE, counts(inversions=5), {}).reason == (
        "5 inversions of the real-time order that no fault explains (the run had no fault); "
        "design X promises FIFO per queue")
    allowing = Promises("R", AT_LEAST_ONCE, FIFO, (Allowance("reordered", (ANY_FAULT,), "aborted reads"),))
    paused = Explanation("reordered", Cause.FAULT, ("pause",), "aborted reads")
    assert judge(allowing, frozenset({"pause"}), counts(inversions=5), {paused: 5}).verdict == Verdict.ALLOWED
    assert judge(allowing, frozenset({"pause"}), counts(inversions=5), {}).verdict == Verdict.INVALID  # none
    assert judge(allowing, frozenset({"pause"}), counts(inversions=5)).verdict == Verdict.ALLOWED  # a run of old: by kind
    assert judge(Promises("N", AT_LEAST_ONCE, NO_ORDER), NONE, counts(inversions=5)).verdict == Verdict.VALID
    assert judge(PROMISES, NONE, counts(inversions=None)).verdict == Verdict.VALID  # order not measured


def test_a_broken_promise_outweighs_an_allowed_anomaly_and_both_are_named():
    j = judge(PROMISES, frozenset({"crash"}), counts(lost=4, unexpected=1), {CRASH_EXPLAINS: 4})
    assert j.verdict == Verdict.INVALID and j.broken == ("unexpected",)
    assert j.reason.startswith("delivered 1 message never sent") and f"lost 4 acknowledged messages {CRASH_WORDS}" in j.reason


def test_failed_operations_in_a_run_with_no_fault_are_reported_and_a_refused_put_breaks_a_promise():
    j = judge(PROMISES, NONE, counts(failed={"timed-out put": 2, "failed ack": 1}))
    assert j.verdict == Verdict.VALID and j.reason == ("1 failed ack with no fault in the run; "
                                                       "2 timed-out puts with no fault in the run")
    j = judge(PROMISES, NONE, counts(failed={"put": 38}))
    assert j.verdict == Verdict.INVALID and j.reason.startswith("38 puts refused with no fault in the run")
    assert j.broken == ("refused",)
    assert judge(PROMISES, frozenset({"partition"}), counts(failed={"put": 38})).verdict == Verdict.VALID  # a fault's doing


@pytest.mark.parametrize("changed, problem", [(dict(attempts=0, enqueued=0, dequeued=0), "no put was attempted"),
                                              (dict(enqueued=0), "no put was acknowledged"),
                                              (dict(dequeued=0, lost=10), "nothing was delivered")])
def test_a_run_that_is_no_evidence_is_neither_valid_nor_invalid_whatever_the_promises_permit(changed, problem):
    j = judge(PROMISES, frozenset({"crash"}), counts(**changed), {CRASH_EXPLAINS: changed.get("lost", 0)})
    assert (j.verdict, j.problem, j.broken) == (Verdict.NO_EVIDENCE, problem, ())
    assert j.reason.startswith(f"no evidence: {problem}") and not j.valid and not j.verdict.evidence


def test_nothing_delivered_with_a_loss_no_fault_explains_is_a_broken_promise_not_a_lack_of_evidence():
    # a design that drops every message in a run with no fault: that is evidence, of a broken promise
    j = judge(PROMISES, NONE, counts(dequeued=0, lost=10), {})
    assert (j.verdict, j.broken) == (Verdict.INVALID, ("lost",))
    # and invented messages are a broken promise even when nothing was acknowledged
    assert judge(PROMISES, NONE, counts(enqueued=0, dequeued=3, unexpected=3)).verdict == Verdict.INVALID


def test_the_worst_verdict_of_several_runs_counts_no_evidence_apart():
    assert worst(["valid", "no evidence", "allowed"]) is Verdict.ALLOWED
    assert worst(["no evidence", "no evidence"]) is Verdict.NO_EVIDENCE
    assert worst(["valid", "invalid", "no evidence"]) is Verdict.INVALID


def test_explanations_round_trip_through_a_manifest_and_old_manifests_keep_their_words():
    lease = Explanation("duplicated", Cause.LEASE, lease_s=5.0)
    manifest = {"explanations": explanations_to_list({CRASH_EXPLAINS: 4, lease: 2})}
    assert explanations_from_manifest(manifest) == {CRASH_EXPLAINS: 4, lease: 2}
    old = explanations_from_manifest({"explained": {"lost": {CRASH_WORDS: 3}}})
    assert old == {Explanation("lost", Cause.RECORDED, allowance=CRASH_WORDS): 3}
    assert judge(PROMISES, frozenset({"crash"}), counts(lost=3), old).reason == f"lost 3 acknowledged messages {CRASH_WORDS}"
    assert explanations_from_manifest({}) is None  # before explanations: the rule of its time


def test_promises_refuse_words_they_do_not_know():
    with pytest.raises(ValueError, match="delivery 'once-ish'"):
        Promises("W", "once-ish", FIFO)
    with pytest.raises(ValueError, match="anomalies are lost, duplicated, reordered"):
        Allowance("slow", ("crash",), "why")
    with pytest.raises(ValueError, match="scopes are in force, holders, cut"):
        Allowance("lost", ("crash",), "why", scope="nearby")


def test_each_design_declares_its_durability_per_option_set():
    def lose_under(name: str, options: dict, reliable: bool = True) -> list[str]:
        cls = backend_class(name)
        p = cls.promises(cls.check_options(options), reliable)
        return sorted(f for a in p.allowances if a.anomaly == "lost" for f in a.faults)

    # one server: a destroyed disk loses everything, whatever the fsync policy
    assert lose_under("kestrel", {}) == lose_under("kestrel", {"syncJournal": "100ms"}) == ["crash", "disk-loss"]
    assert lose_under("kestrel", {"syncJournal": "always"}) == ["disk-loss"]
    assert lose_under("kestrel", {"syncJournal": "always"}, reliable=False) == [ANY_FAULT, "disk-loss"]  # at-most-once
    assert lose_under("queuefka", {}) == lose_under("queuefka", {"fsync": "1000records"}) == ["crash", "disk-loss"]
    assert lose_under("queuefka", {"fsync": "always"}) == ["disk-loss"]
    assert lose_under("ideal", {}) == [ANY_FAULT, "crash", "disk-loss", "kill"]  # in memory: a kill loses it too
    assert lose_under("primer", {"persistence": "aof"}) == ["disk-loss"]
    kestrel = backend_class("kestrel")
    assert kestrel.promises(kestrel.check_options({}), True).delivery == AT_LEAST_ONCE
    assert kestrel.promises(kestrel.check_options({}), False).delivery == AT_MOST_ONCE


def test_run_facts_come_from_the_manifest_and_fault_kinds_from_what_started():
    manifest = {"backend": "kestrel", "options": {"syncJournal": "always"},
                "workload": {"ack": "reliable", "faults": [{"fault": "crash"}, {"fault": "pause"}, {"fault": "crash"}]}}
    assert fault_kinds(manifest) == {"crash", "pause"}  # a run recorded before fault_kinds: its schedule
    assert fault_kinds({**manifest, "fault_kinds": ["pause"]}) == {"pause"}  # the kinds that started
    facts = RunFacts.from_manifest(manifest)
    assert facts == RunFacts("kestrel", {"syncJournal": "always"}, True, ("crash", "pause"))
    assert facts.promises().by == "kestrel with syncJournal=always, reliable reads"
    assert RunFacts.from_manifest({**manifest, "backend": "gone"}).promises().by.startswith("no promises known")


def test_in_the_runner_fault_kinds_are_those_whose_start_is_in_the_history():
    rec = Recorder("r", "sim", "kestrel", "s")
    rec.record(node="p0", client="p0", op="put", queue="q0", msg_id="p0:0", t_start_ns=0, latency_ns=5, outcome="ok",
               nbytes=1, phase="steady")
    rec.record(node="kestrel", client="nemesis", op="fault", queue=None, t_start_ns=10, latency_ns=0, outcome="info",
               error="start faults[1] crash: kestrel", phase="fault")
    workload = parse_workload({**CRASH, "faults": [{"fault": "pause", "at": 1.5, "duration": 0.1}, CRASH["faults"][0]]})
    spec = RunSpec.resolve(workload, "kestrel")
    facts = spec.facts(started(rec.table()))
    assert facts.faults == ("crash",)  # the pause is scheduled, but no row says it started
    assert facts.promises() is spec.promises  # resolved once, at the run's door


def test_without_facts_the_rule_is_jepsens_total_queue():
    h = history(("put", "p0", "p0:0", "ok"), ("put", "p0", "p0:1", "ok"), ("get", "c0", "p0:1", "ok"),
                ("get", "c0", "p0:0", "ok"), ("get", "c1", "p0:0", "ok"))
    v = check(h)  # a duplicate and a reordering: counted, not judged
    assert (v.counts.duplicated, v.verdict) == (1, Verdict.VALID), v.line()
    assert judge_run(None, counts(lost=1)).verdict == Verdict.INVALID


def test_the_checker_judges_a_history_against_the_facts_it_is_given():
    h = with_faults(history(("put", "p0", "p0:0", "ok"), ("put", "p0", "p0:1", "ok"), ("get", "c0", "p0:1", "ok")),
                    ("crash", "kestrel", 15, 18))
    crash = RunFacts("kestrel", {}, True, ("crash",))
    v = check(h, crash)
    assert (v.verdict, v.valid) == (Verdict.ALLOWED, False)
    assert v.line().startswith("ALLOWED (lost 1 acknowledged message under crash: allowed, syncJournal=never")
    assert v.to_dict()["verdict"] == Verdict.ALLOWED and "facts" not in v.to_dict()
    assert check(h, RunFacts("kestrel", {"syncJournal": "always"}, True, ("crash",))).verdict == Verdict.INVALID
    assert check(h).verdict == Verdict.INVALID  # no facts: Jepsen's rule


# A real run in the sim world: one consumer behind two producers, so a backlog sits in the
# queue when the server dies (tests/test_kestrel_core.py's crash workload).
CRASH = {"name": "crash", "queues": 2, "producers": 2, "consumers": 1, "message_size": 100, "rate": 4000,
         "duration": 2.0, "warmup": 0.2, "ack": "reliable", "seed": 4,
         "faults": [{"fault": "crash", "at": 1.0, "duration": 0.2, "target": "servers"}]}


@pytest.mark.parametrize("backend, option", [("kestrel", "syncJournal"), ("queuefka", "fsync")])
def test_a_crash_loss_is_allowed_when_the_log_never_fsyncs_and_none_happens_when_it_always_does(
        tmp_path: Path, backend: str, option: str):
    never = run(parse_workload(CRASH), backend, "sim", out=tmp_path / "never", progress=False,
                options={option: "never"})
    always = run(parse_workload(CRASH), backend, "sim", out=tmp_path / "always", progress=False,
                 options={option: "always"})
    assert never.check.counts.lost > 0 and never.verdict == Verdict.ALLOWED, never.check.line()
    assert f"under crash: allowed, {option}=never loses the unsynced tail" in never.check.reason
    assert always.check.counts.lost == 0 and always.verdict == Verdict.VALID, always.check.line()


def test_the_ideal_control_with_plain_gets_loses_a_get_whose_reply_a_dropped_message_cuts(tmp_path: Path):
    lossy = {"name": "lossy", "queues": 2, "producers": 2, "consumers": 2, "message_size": 100, "rate": 2000,
             "duration": 2.0, "warmup": 0.2, "ack": "auto", "seed": 5,
             "faults": [{"fault": "loss", "at": 1.0, "duration": 0.5, "p": 0.3, "target": "servers"}]}
    v = run(parse_workload(lossy), "ideal", "sim", out=tmp_path / "r", progress=False).check
    assert v.counts.lost > 0 and v.verdict == Verdict.ALLOWED, v.line()  # it was invalid while the ideal promised no loss
    assert "after a get whose reply never came: allowed, a get whose reply is cut is never delivered" in v.reason
