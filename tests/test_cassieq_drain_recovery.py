"""The CassieQ drain question (issue 29): ``split-flapping`` came out INVALID once for CassieQ,
an acknowledged put never delivered. Not a loss: the drain ended too early. A get whose
reply the flapping split cut had leased the message (for the lab's 5 s invisibility), and
the drain, finding the queue empty and CassieQ's size statistic at 0 (a counter that
drifts when its updates are cut), stopped at 5.8 s; the lease ran out and the message came
back at 7.2 s. Now each design declares ``recovery_s`` — the longest its own recovery may
take (for CassieQ the lease, or a late write's repair: the manager's refresh, the worker's
start jitter, its poll and the finalize timeout) — and the runner's drain ends, empty or
not, only after that long without a delivery."""

from __future__ import annotations

from pathlib import Path

import yaml

from lab.backends.cassieq.driver import CassieqBackend
from lab.history.record import read_samples
from lab.experiments.runner import run
from models.world import SimWorld
from lab.workloads.spec import parse_workload

ROOT = Path(__file__).resolve().parents[1]
# Seed 6 showed it first; since CassieQ's client waits for a queue another client is still
# creating, the histories moved, and seed 9 shows the same situation.
SEED = 9
LOST = "p0:155"  # put at 2.02 s, leased by a get cut at 2.2 s, back at 7.2 s


def _split_flapping_at_1s():
    """The scenario as it was run (the split from 1.0 s), whatever its draw of the start is now."""
    spec = yaml.safe_load((ROOT / "lab/workloads/scenarios/split-flapping.yaml").read_text())
    spec["seed"] = SEED
    spec["faults"] = [{"fault": "partition", "at": 1.0, "duration": 2.0, "target": "server", "flap": 0.2}]
    return parse_workload(spec, "split-flapping")


def _delivered(run_dir: Path) -> dict[str, float]:
    """msg_id -> when (s from the first sample) it was first delivered."""
    samples = read_samples(run_dir).to_pandas()
    t0 = samples.t_start_ns.min()
    gets = samples[(samples.op == "get") & (samples.outcome == "ok")]
    return {m: (t - t0) / 1e9 for m, t in gets.groupby("msg_id").t_start_ns.min().items()}


def test_split_flapping_the_drain_that_ended_before_the_lease_ran_out_called_it_lost(tmp_path, monkeypatch):
    """The original situation: a drain that trusts the size statistic at once (no recovery
    time) ends before the lease runs out, and the verdict calls the leased message lost."""
    monkeypatch.setattr(CassieqBackend, "recovery_seconds", staticmethod(lambda options: 0.0))
    result = run(_split_flapping_at_1s(), "cassieq", "sim", seed=SEED, out=tmp_path / "run", progress=False)
    assert result.verdict == "invalid" and result.check.counts.lost == 1, result.check.line()
    assert LOST not in _delivered(result.run_dir)
    assert result.world_seconds < 7.2  # it stopped before the message came back


def test_split_flapping_the_drain_waits_out_the_designs_recovery_and_nothing_is_lost(tmp_path):
    result = run(_split_flapping_at_1s(), "cassieq", "sim", seed=SEED, out=tmp_path / "run", progress=False)
    verdict = result.check
    assert verdict.verdict != "invalid" and verdict.counts.lost == 0, verdict.line()
    delivered = _delivered(result.run_dir)
    assert 7 < delivered[LOST] < 7 + 1  # back when its lease ran out, by the design's own recovery
    recovery = CassieqBackend(SimWorld(0), {}).recovery_s
    assert result.world_seconds >= max(delivered.values()) + recovery  # the drain stayed that long after it
    assert not any("gave up" in w for w in result.warnings)  # and then found the queue empty


def test_cassieq_declares_the_longest_of_its_lease_and_its_repair_timeline():
    world = SimWorld(0)
    default = CassieqBackend(world, {}).recovery_s
    assert default > 5 + 15  # past the lease, and past a sealed bucket's finalize timeout
    assert CassieqBackend(world, {"repair_refresh": 1.0}).recovery_s == default - 4  # the manager looks sooner
    assert CassieqBackend(world, {"invisibility": 300}).recovery_s == 301  # a lease longer than the repair
