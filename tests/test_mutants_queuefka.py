"""Queuefka's mutants (``lab/backends/queuefka/mutants.py``) are caught where the hunt looks first:
each one's first scenario at seed 1 is INVALID with the broken promise in the reason, and
the same run of the unmutated design is not (no false alarm). Three lose acknowledged puts
under a fault; one reorders with no fault at all (a backlog handed out newest first)."""

from __future__ import annotations

import pytest

from lab.experiments.planting import catalogue, plant
from lab.experiments.runner import run
from lab.judge.findings import Verdict
from lab.workloads.spec import load_workload

MUTANTS = catalogue(["queuefka"])
DURABLE = {"fsync": "always"}
REORDERS = "queuefka-serves-the-buffer-tail"  # the one that loses nothing: it breaks the order


def test_queuefka_has_its_four_kinds_of_mutant():
    assert set(MUTANTS) == {"queuefka-ack-before-fsync", "queuefka-commits-the-whole-fetch",
                            "queuefka-commit-passes-other-leases", REORDERS}
    assert all(m.options == {"fsync": "always"} and m.scenarios for m in MUTANTS.values())


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_the_first_scenario_at_seed_1_catches_the_mutant_and_not_the_design(name, tmp_path):
    mutant = MUTANTS[name]
    workload = load_workload(mutant.scenarios[0])
    with plant(name):
        caught = run(workload, "queuefka", "sim", seed=1, out=tmp_path / "mutant", progress=False,
                     options=dict(mutant.options)).check
    assert caught.verdict == Verdict.INVALID, caught.line()
    if name == REORDERS:  # a backlog with no fault: no allowance excuses a single inversion
        assert caught.counts.lost == 0 and caught.reordering.inversions > 0, caught.line()
        assert "inversions of the real-time order that no fault explains (the run had no fault)" in caught.reason
        assert "queuefka with fsync=always, reliable acks promises FIFO per consumer" in caught.reason, caught.line()
    else:  # the others lose acknowledged puts that no fault explains, under fsync=always
        assert caught.counts.lost > 0 and "lost" in caught.reason and "acknowledged message" in caught.reason, caught.line()
        assert "queuefka with fsync=always, reliable acks promises no loss" in caught.reason, caught.line()
    control = run(workload, "queuefka", "sim", seed=1, out=tmp_path / "control", progress=False,
                  options=dict(mutant.options)).check
    assert control.verdict != Verdict.INVALID and control.counts.lost == 0, control.line()
    if name == REORDERS:
        assert control.valid and control.reordering.inversions == 0, control.line()


def test_a_fault_excuses_the_reordering_only_of_records_a_broken_connection_handed_back(tmp_path):
    """The reorder allowance holds for a reader whose connection broke, not for any fault:
    ack-before-durable-crash crashes the broker before a consumer has connected, so the
    mutant's reordered backlog is unexplained; the real design's reorderings after a split
    are each explained by a consumer's broken connection (CLOSED), as before."""
    workload = load_workload("ack-before-durable-crash")
    with plant(REORDERS):
        caught = run(workload, "queuefka", "sim", seed=1, out=tmp_path / "mutant", progress=False,
                     options=dict(DURABLE)).check
    assert caught.verdict == Verdict.INVALID and caught.reordering.inversions > 0, caught.line()
    assert "inversions of the real-time order that no fault explains (the run's faults: crash)" in caught.reason
    control = run(workload, "queuefka", "sim", seed=1, out=tmp_path / "control", progress=False,
                  options=dict(DURABLE)).check
    assert control.valid and control.reordering.inversions == 0, control.line()
    split = run(load_workload("split-majority"), "queuefka", "sim", seed=2, out=tmp_path / "split", progress=False,
                options=dict(DURABLE)).check
    assert split.verdict == "allowed" and split.reordering.inversions > 0, split.line()
    assert "inversions of the real-time order after a consumer's connection broke: allowed" in split.reason
    assert "no fault explains" not in split.reason, split.line()
