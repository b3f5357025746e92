"""CassieQ's planted bugs (``lab/backends/cassieq/mutants.py``): each is caught by its first scenario
at seed 1 — the verdict is invalid and names the promise it breaks — while the same run of
the unmutated CassieQ is not (no false alarm). Mutants with the same first scenario share
one control run; a CassieQ sim run after a fault drains through the
design's whole recovery time, so these are slow tests."""

from __future__ import annotations

import pytest

from lab.experiments.planting import catalogue, plant
from lab.experiments.runner import run
from lab.experiments.runner_manifest import RunResult
from lab.judge.findings import Verdict
from lab.workloads.spec import load_workload

#: mutant -> what its catching run's reason must say: the broken promise, in the verdict's words
BROKEN = {
    "cassieq-lease-cas-ignored": ("duplicate deliveries that no lease, release or fault explains",
                                  "promises at-least-once: a delivery comes again only after its lease of 5 s"),
    "cassieq-pointer-passes-leases": ("acknowledged message", "that no fault explains",
                                      "cassieq on cassandra, reliable acks promises no loss"),
    "cassieq-pointer-revives-leases": ("duplicate deliveries that no lease, release or fault explains",
                                       "promises at-least-once: a delivery comes again only after its lease of 5 s"),
}


def test_every_cassieq_mutant_is_checked_here():
    assert set(catalogue(["cassieq"])) == set(BROKEN)


@pytest.fixture(scope="module")
def controls(tmp_path_factory) -> dict[tuple[str, tuple], RunResult]:
    """The unmutated runs, one per first scenario and options (the mutants share them)."""
    runs: dict[tuple[str, tuple], RunResult] = {}
    for mutant in catalogue(["cassieq"]).values():
        key = (mutant.scenarios[0], tuple(sorted(mutant.options.items())))
        if key not in runs:
            runs[key] = run(load_workload(key[0]), "cassieq", "sim", seed=1, progress=False,
                            out=tmp_path_factory.mktemp("control"), options=dict(mutant.options))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_cassieq_mutant_is_caught_by_its_first_scenario_at_seed_1_and_the_design_is_not(tmp_path, controls, name):
    mutant = catalogue(["cassieq"])[name]
    with plant(name):
        caught = run(load_workload(mutant.scenarios[0]), "cassieq", "sim", seed=1, out=tmp_path, progress=False,
                     options=dict(mutant.options))
    assert caught.verdict == Verdict.INVALID, caught.check.line()
    for words in BROKEN[name]:
        assert words in caught.check.reason, (words, caught.check.line())
    control = controls[(mutant.scenarios[0], tuple(sorted(mutant.options.items())))]
    assert control.verdict != Verdict.INVALID, control.check.line()
