"""Kestrel's planted bugs (``lab/backends/kestrel/mutants.py``): each is caught by its first scenario
at seed 1 — the verdict is invalid and names the promise it breaks — while the same run of
the unmutated Kestrel, with the same options, is not (no false alarm)."""

from __future__ import annotations

import pytest

from lab.experiments.planting import catalogue, plant
from lab.experiments.runner import run
from lab.judge.findings import Verdict
from lab.workloads.spec import load_workload

#: mutant -> what its catching run's reason must say: the broken promise, in the verdict's words
BROKEN = {
    "kestrel-reply-then-sync": ("acknowledged message", "that no fault explains",
                                "kestrel with syncJournal=always, reliable reads promises no loss"),
    "kestrel-confirm-journals-a-remove": ("duplicate deliveries that no lease, release or fault explains",
                                          "(the run's faults: crash)", "promises at-least-once"),
    "kestrel-open-reads-time-out-at-once": ("duplicate deliveries that no lease, release or fault explains",
                                            "(the run had no fault)", "promises at-least-once"),
    "kestrel-read-behind-rereads": ("acknowledged messages that no fault explains", "(the run had no fault)",
                                    "promises no loss"),
}


def test_every_kestrel_mutant_is_checked_here():
    assert set(catalogue(["kestrel"])) == set(BROKEN)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_kestrel_mutant_is_caught_by_its_first_scenario_at_seed_1_and_the_design_is_not(tmp_path, name):
    mutant = catalogue(["kestrel"])[name]
    workload = load_workload(mutant.scenarios[0])
    with plant(name):
        caught = run(workload, "kestrel", "sim", seed=1, out=tmp_path / "mutant", progress=False,
                     options=dict(mutant.options))
    assert caught.verdict == Verdict.INVALID, caught.check.line()
    for words in BROKEN[name]:
        assert words in caught.check.reason, (words, caught.check.line())
    control = run(workload, "kestrel", "sim", seed=1, out=tmp_path / "control", progress=False,
                  options=dict(mutant.options))
    assert control.verdict != Verdict.INVALID, control.check.line()
