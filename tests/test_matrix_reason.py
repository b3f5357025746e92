"""A matrix cell's reason and its figures agree: the counts are summed over the seeds, so a
reason quoting one seed's counts says which seed it is (lab.experiments.matrix.seed_reason)."""

from __future__ import annotations

from lab.experiments.matrix import SeedRun, seed_reason


def _run(seed: int, lost: int, reason: str) -> SeedRun:
    return SeedRun(run_id=f"r{seed}", run_dir="", seed=seed, verdict="invalid", reason=reason, lost=lost,
                   duplicated=0, unexpected=0, inversions=0, most_overtakers=0, recover_s=None, undelivered=0,
                   wall_seconds=0.0)


def test_a_reason_of_one_seed_among_several_names_that_seed() -> None:
    worst = _run(7, 3, "3 acknowledged messages lost")
    reason = seed_reason(worst, 4)
    assert reason.startswith("seed 7 (of 4; the counts are summed over all): ")
    assert reason.endswith("3 acknowledged messages lost")


def test_a_single_seed_reason_is_its_own() -> None:
    worst = _run(1, 3, "3 acknowledged messages lost")
    assert seed_reason(worst, 1) == "3 acknowledged messages lost"
    assert seed_reason(_run(1, 0, ""), 3) == ""
