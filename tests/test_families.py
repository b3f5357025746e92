"""The fault notebooks' shared logic: families of scenarios and the length of each phase."""

from __future__ import annotations

import pytest

from lab.experiments.families import FAMILIES, family_scenarios, phase_seconds
from lab.workloads.spec import load_workload, scenario_files


def test_every_scenario_belongs_to_exactly_one_family_by_its_fault_kinds():
    members = {family: family_scenarios(family) for family in FAMILIES}
    assert "split-one" in members["net-splits"] and "gc-long" in members["gc-pauses"]
    assert "late-writes" in members["delayed-writes"] and "crash-torn" in members["crashes"]
    assert "crash-slow-disk" in members["crashes"]  # a disk delay and a crash: the crash is what it shows
    named = [name for names in members.values() for name in names]
    # a fault-free scenario (backlog-) belongs to no fault family
    faulty = [w.name for w in map(load_workload, scenario_files()) if w.faults]
    assert sorted(named) == sorted(faulty) and len(faulty) < len(scenario_files())  # each once


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


def fake_result(rows):
    import pandas as pd

    from lab.experiments.matrix import Matrix
    from lab.experiments.families import FamilyRun

    runs = pd.DataFrame([{"run_id": f"{r['backend']}-{r['scenario']}-s{s}", "label": r["backend"],
                          "scenario": r["scenario"], "seed": s} for r in rows for s in (1, 2)])
    return FamilyRun("crashes", Matrix(None, {}, rows), runs, pd.DataFrame(), pd.DataFrame(), pd.DataFrame())


def cell(backend, scenario, verdict="valid", lost=0, duplicated=0, inversions=0, late=None, reason=""):
    return {"backend": backend, "options": "", "scenario": scenario, "verdict": verdict, "reason": reason,
            "lost": lost, "duplicated": duplicated, "inversions": inversions, "recovered_in_time": late}


def test_the_answer_says_who_lost_duplicated_and_how_the_fault_phase_compares():
    import pandas as pd

    from lab.experiments.families import answer

    result = fake_result([cell("kestrel", "crash-all", "allowed", lost=600), cell("kestrel", "crash-one"),
                          cell("primer", "crash-all", duplicated=3, inversions=40, late=False),
                          cell("primer", "crash-one", late=False),
                          cell("queuefka", "crash-all", "invalid", lost=2, reason="acknowledged message lost")])
    latency = pd.DataFrame([{"label": d, "backend": d, "op": op, "phase": ph, "p50_ns": v / 10, "p99_ns": v}
                            for d, fault in (("kestrel", 4e8), ("primer", 2e6), ("queuefka", None))
                            for op in ("put", "e2e")
                            for ph, v in (("steady", 1e6), ("fault", fault), ("heal", 2e6))
                            if v is not None])
    throughput = pd.DataFrame([{"label": d, "backend": d, "op": "get", "phase": ph, "ops_per_s": v}
                               for d, fault in (("kestrel", 150.0), ("primer", 300.0), ("queuefka", 0.0))
                               for ph, v in (("steady", 300.0), ("fault", fault), ("heal", 300.0))])
    text = answer(result, latency, throughput)
    assert "2 seed(s)" in text and "`crash-all`, `crash-one`" in text
    assert "**Broken promises**: queuefka (acknowledged message lost)" in text
    assert "**Lost**: kestrel 600 (allowed); queuefka 2 (invalid)" in text
    assert "**Duplicated**: primer 3." in text and "**Reordered** (inversions): primer 40." in text
    assert "**Late to recover** (past the scenario's budget): primer in `crash-all`, `crash-one`." in text
    assert "the highest ratio is kestrel's, 400 ms against 2 ms (200×), the lowest primer's" in text
    assert "**Deliveries in the fault phase**: none on queuefka." in text
    assert ("the lowest share kestrel's, 50% (150/s against 300/s), the highest primer's, 100% (300/s against "
            "300/s)") in text
    assert "no put completed on queuefka" in text
