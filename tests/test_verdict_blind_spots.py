"""The verdict's blind spots of issue 29, each closed: a small deliberate bug the lab called
valid or allowed before is invalid now, its reason naming the broken promise, and the
unbroken design over the same runs raises no alarm.

- an allowance excuses only the messages its fault could have hurt: Primer without files
  may lose a message once *all* of its replicas crash, not when a put kept one copy too
  few and the one node that held it crashed;
- at-least-once excuses a redelivery only after a lease, a release, a broken connection or
  a fault: a CassieQ consume that ignores whether its compare-and-set applied hands one
  message to two readers at once;
- a run with no fault reports its failed operations: a design that refuses puts breaks a
  promise.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from lab.backends.cassieq.core import queue_data
from lab.backends.ideal import core as ideal_core
from lab.experiments.planting import plant
from lab.experiments.runner import run
from lab.judge.findings import Verdict
from lab.workloads.spec import load_workload, parse_workload

SCENARIOS = Path(__file__).resolve().parent.parent / "lab" / "workloads" / "scenarios"
WORKLOADS = Path(__file__).resolve().parent.parent / "lab" / "workloads"


@pytest.mark.parametrize("seed", [1, 2])
def test_a_put_one_copy_short_loses_to_one_crash_and_is_invalid_where_primer_is_not(tmp_path, seed):
    # crash-one with the consumers held back, so that a backlog sits on the nodes when one crashes
    workload = dataclasses.replace(load_workload(SCENARIOS / "crash-one.yaml"), consumer_delay=2.6)
    primer = run(workload, "primer", "sim", seed=seed, out=tmp_path / "primer", progress=False).check
    assert primer.verdict != Verdict.INVALID and primer.counts.lost == 0, primer.line()
    with plant("primer-one-copy-short"):  # the same design and options, its put one copy short
        short = run(workload, "primer", "sim", seed=seed, out=tmp_path / "short", progress=False).check
    # before: "lost N acknowledged messages under crash: allowed, persistence=off ..." for any crash
    assert short.counts.lost > 0 and short.verdict == Verdict.INVALID, short.line()
    assert f"lost {short.counts.lost} acknowledged messages that no fault explains (the run's faults: crash)" in short.reason


def test_a_consume_that_ignores_its_compare_and_set_duplicates_with_no_fault_and_is_invalid(tmp_path, monkeypatch):
    workload = load_workload(WORKLOADS / "burst-reliable.yaml").scaled(0.25)
    clean = run(workload, "cassieq", "sim", out=tmp_path / "clean", progress=False).check
    assert clean.verdict == Verdict.VALID and clean.counts.duplicated == 0, clean.line()

    consume = queue_data.QueueData.consume

    async def ignoring_the_result(self, message, invisibility):  # the bug: a lost CAS still leases
        return await consume(self, message, invisibility) or message.with_version(message.version + 1)

    monkeypatch.setattr(queue_data.QueueData, "consume", ignoring_the_result)
    broken = run(workload, "cassieq", "sim", out=tmp_path / "broken", progress=False).check
    # before: "VALID (N duplicate deliveries (at-least-once redelivers))"
    assert broken.counts.duplicated > 0 and broken.verdict == Verdict.INVALID, broken.line()
    assert broken.reason.startswith(f"{broken.counts.duplicated} duplicate deliveries that no lease, release or fault "
                                    "explains (the run had no fault)")
    assert "at-least-once: a delivery comes again only after its lease of" in broken.reason


def test_puts_refused_with_no_fault_in_the_run_break_a_promise(tmp_path, monkeypatch):
    workload = parse_workload({"name": "refusing", "queues": 1, "producers": 2, "consumers": 2, "message_size": 100,
                               "rate": 2000, "duration": 1.0, "warmup": 0.2, "ack": "reliable", "seed": 3})
    clean = run(workload, "ideal", "sim", out=tmp_path / "clean", progress=False).check
    assert clean.verdict == Verdict.VALID and clean.counts.failed == {}, clean.line()

    handle = ideal_core.IdealQueue.handle
    puts = iter(range(10**9))

    async def refusing(self, source, request):  # the bug: more than a third of puts turned away
        if isinstance(request, ideal_core.Put) and next(puts) % 8 < 3:
            raise RuntimeError("queue busy")
        return await handle(self, source, request)

    monkeypatch.setattr(ideal_core.IdealQueue, "handle", refusing)
    broken = run(workload, "ideal", "sim", out=tmp_path / "broken", progress=False).check
    # before: VALID, not a word about the puts that failed
    refused = broken.counts.failed["put"]
    assert refused > 0.3 * broken.counts.attempts and broken.verdict == Verdict.INVALID, broken.line()
    assert broken.reason.startswith(f"{refused} puts refused with no fault in the run")
