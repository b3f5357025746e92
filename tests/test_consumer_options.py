"""A consumer's own values of a design's per-consumer options (``options:`` in a workload's
``clients:`` entry; ``Option.per_consumer``): checked against the design before anything
runs, refused where they would change what the run is judged by, given to that consumer's
client alone, and drawn by the swarm. And why it exists: Queuefka with a partly re-taken
handed-back lease dropped (a generated mutant the swarm had left alive) loses records only
when a consumer fetches fewer records than the one that held them."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.design.registry import backend_class
from lab.experiments.swarm_draw import DEFAULT_WORKLOAD, draw_seed
from lab.experiments.planting import plant
from lab.experiments.run_spec import RunSpec
from lab.experiments.runner import run
from lab.workloads.errors import WorkloadError
from lab.workloads.spec import load_workload, parse_workload
from models.world import SimWorld

pytestmark = pytest.mark.usefixtures("results")

ALWAYS = {"fsync": "always"}
SMALL_FETCH = Path(__file__).parent / "data" / "queuefka-small-fetch-after-a-death.yaml"
PARTIAL_RETAKE_DROPPED = "queuefka~gen~core.leases~AddNot~9"


def with_own(options: object) -> dict:
    return {"name": "own", "producers": 1, "consumers": 2, "rate": 100, "duration": 1, "warmup": 0.2,
            "ack": "reliable", "clients": {"c1": {"options": options}}}


def resolve(data: dict, backend: str = "queuefka", options: dict | None = None) -> RunSpec:
    return RunSpec.resolve(parse_workload(data, "w.yaml"), backend, options=options or ALWAYS)


def test_own_options_are_refused_with_the_field_named():
    with pytest.raises(WorkloadError, match=r"clients.c1.options': must be a mapping"):
        parse_workload(with_own([3]), "w.yaml")
    with pytest.raises(WorkloadError, match=r"clients.c1.options': 'fsync' is not an option a consumer of "
                                            r"queuefka may set for itself \(those are: prefetch\)"):
        resolve(with_own({"fsync": "never"}))
    with pytest.raises(WorkloadError, match=r"clients.c1.options': .*prefetch=0: must be a whole number >= 1"):
        resolve(with_own({"prefetch": 0}))
    with pytest.raises(WorkloadError, match=r"those are: none"):
        resolve(with_own({"timeout": 2}), "kestrel", {"syncJournal": "always"})


def test_an_own_value_that_changes_the_promises_is_refused():
    # one record per fetch promises real-time order across consumers; the run's 100 does not
    with pytest.raises(WorkloadError, match=r"prefetch=1 changes what queuefka promises"):
        resolve(with_own({"prefetch": 1}))
    assert resolve(with_own({"prefetch": 3})).workload.clients["c1"].options == (("prefetch", 3),)


def test_a_consumer_client_gets_its_own_value_and_the_others_the_runs():
    backend = backend_class("queuefka")(SimWorld(0), ALWAYS)
    mine = backend.for_consumer({"prefetch": 3})
    rt = SimWorld(0).node("c1")
    assert mine.client(rt, True).prefetch == 3 and backend.client(rt, True).prefetch == 100
    assert mine.options["fsync"] == "always" and backend.options["prefetch"] == 100


def test_the_swarm_draws_own_values_that_keep_the_promises():
    drawn = [draw_seed(DEFAULT_WORKLOAD, seed, "queuefka", ALWAYS) for seed in range(1, 41)]
    own = [plan["options"]["prefetch"] for w in drawn for plan in (w.get("clients") or {}).values()
           if "options" in plan]
    assert own and set(own) <= {3, 10, 100} and len(set(own)) > 1  # never 1: it would change the promises
    assert draw_seed(DEFAULT_WORKLOAD, 7, "queuefka", ALWAYS) == drawn[6]  # a pure function of the seed
    assert not any("options" in plan for seed in range(1, 41)
                   for plan in (draw_seed(DEFAULT_WORKLOAD, seed, "kestrel").get("clients") or {}).values())


def test_a_small_fetch_of_a_handed_back_lease_loses_nothing_and_the_mutant_that_drops_it_is_caught(tmp_path):
    workload = load_workload(SMALL_FETCH)
    control = run(workload, "queuefka", out=tmp_path / "control", progress=False, options=ALWAYS)
    assert control.check.verdict != "invalid" and control.check.counts.lost == 0, control.check.line()
    with plant(PARTIAL_RETAKE_DROPPED):
        mutated = run(workload, "queuefka", out=tmp_path / "mutated", progress=False, options=ALWAYS)
        same_fetch = run(parse_workload({**_raw(SMALL_FETCH), "clients": {
            name: {**plan, "options": {"prefetch": 100}} for name, plan in _raw(SMALL_FETCH)["clients"].items()}},
            "same-fetch.yaml"), "queuefka", out=tmp_path / "same", progress=False, options=ALWAYS)
    assert mutated.check.verdict == "invalid" and mutated.check.counts.lost > 0, mutated.check.line()
    # the same load with both consumers fetching 100: every re-take is whole, and the bug hides
    assert same_fetch.check.verdict != "invalid", same_fetch.check.line()


def _raw(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())
