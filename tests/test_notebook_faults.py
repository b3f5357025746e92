"""The fault notebooks' shared logic: families of scenarios and the length of each phase."""

from __future__ import annotations

import pytest

from lab.notebook_faults import FAMILIES, family_scenarios, phase_seconds
from lab.workload import load_workload, scenario_files


def test_every_scenario_belongs_to_exactly_one_family_by_its_fault_kinds():
    members = {family: family_scenarios(family) for family in FAMILIES}
    assert "split-one" in members["net-splits"] and "gc-long" in members["gc-pauses"]
    assert "late-writes" in members["delayed-writes"] and "crash-torn" in members["crashes"]
    named = [name for names in members.values() for name in names]
    assert sorted(named) == sorted(load_workload(p).name for p in scenario_files())  # each once


def schedule(faults, warmup=0.5, duration=3.5):
    return {"warmup": warmup, "duration": duration, "faults": [{"at": a, "duration": d} for a, d in faults]}


@pytest.mark.parametrize("faults,expected", [
    ([], {"steady": 3.5, "fault": 0.0, "heal": 0.0}),
    ([(1.5, 1.0)], {"steady": 1.0, "fault": 1.0, "heal": 1.5}),
    ([(0.5, 2.5)], {"steady": 0.0, "fault": 2.5, "heal": 1.0}),  # from the warm-up's end
    ([(1.2, 0.2), (1.7, 0.2), (2.2, 0.2)], {"steady": 0.7, "fault": 0.6, "heal": 2.2}),  # gaps between bursts heal
    ([(1.0, 1.0), (1.5, 1.0)], {"steady": 0.5, "fault": 1.5, "heal": 1.5}),  # overlapping: one fault phase
    ([(3.0, 5.0)], {"steady": 2.5, "fault": 1.0, "heal": 0.0}),  # past the end of the load
])
def test_phase_seconds_follow_the_phase_rules(faults, expected):
    assert phase_seconds(schedule(faults)) == pytest.approx(expected)
