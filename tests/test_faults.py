"""Fault kinds (lab.workloads.faults) applied to and healed in the sim world: partition shapes cut
exactly their links, targets come from the seed, faults compose, a world refuses the kinds
it cannot apply before a run starts, and a fault's start given as a range is drawn per seed
and fault number, refused by name when it is not a range of seconds."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from lab.workloads.fault_base import Cast, FieldError
from lab.workloads.faults import REGISTRY, kinds_in, parse_fault
from lab.workloads.nemesis import Nemesis, timed
from lab.history.record import PHASES, Recorder, read_samples
from lab.experiments.runner import fault_refusal, run
from lab.design.runtime import CallTimeout
from lab.workloads.errors import WorkloadError
from lab.workloads.spec import parse_workload
from models.config import SimConfig
from models.disk import DiskModel
from models.latency import LatencyModel
from models.world import SimWorld

MS = 1_000_000
SERVERS = ("s0", "s1", "s2", "s3", "s4")
SERVER_CAST = Cast(SERVERS)


def partition(**fields):
    return parse_fault({"fault": "partition", "at": 0, "duration": 1, **fields})


def world_with(nodes=SERVERS, **config) -> SimWorld:
    world = SimWorld(seed=1, config=SimConfig(latency=LatencyModel(dist="constant", ms=1.0), **config))
    for name in nodes:
        world.node(name)
    return world


def cut_by(fault, cast=SERVER_CAST, seed=1) -> set[tuple[str, str]]:
    """The links ``fault`` blocks in a sim world, checked to be unblocked again by its heal."""
    world = world_with(cast.all)
    placement = fault.place(cast, random.Random(seed))

    async def main(rt):
        heal = fault.start(world, placement, rt)
        cut = set(world.net.blocked)
        heal()
        return cut

    cut = world.run(main)
    assert not world.net.blocked
    return cut


def reach(cut: set, nodes=SERVERS) -> dict[str, frozenset]:
    return {a: frozenset(b for b in nodes if b != a and (a, b) not in cut) for a in nodes}


def both_ways(side, other) -> set:
    return {(a, b) for a in side for b in other} | {(b, a) for a in side for b in other}


def test_one_isolates_a_single_node_both_ways():
    cut = cut_by(partition(shape="one"))
    [alone] = [n for n, seen in reach(cut).items() if not seen]
    assert cut == both_ways([alone], [n for n in SERVERS if n != alone])


@pytest.mark.parametrize("shape", ["minority", "majority", "halves"])
def test_minority_and_halves_split_two_from_three(shape):
    cut = cut_by(partition(shape=shape))
    small = {n for n, seen in reach(cut).items() if len(seen) == 1}
    assert len(small) == 2 and cut == both_ways(small, set(SERVERS) - small)


def test_majorities_ring_leaves_each_node_its_own_majority():
    cut = cut_by(partition(shape="majorities-ring"))
    seen = reach(cut)
    assert all(len(others) == 2 for others in seen.values())  # itself and two: 3 of 5
    assert len({others | {n} for n, others in seen.items()}) == 5  # no two the same majority
    assert all((b, a) in cut for a, b in cut) and len(cut) == 10


def test_bridge_keeps_one_node_talking_to_both_halves():
    cut = cut_by(partition(shape="bridge"))
    seen = reach(cut)
    [bridge] = [n for n, others in seen.items() if len(others) == 4]
    left = {n for n in SERVERS if n != bridge and len(seen[n]) == 2}
    assert len(left) == 4
    halves = {frozenset({n, *seen[n]} - {bridge}) for n in left}
    assert len(halves) == 2 and all(len(h) == 2 for h in halves)
    a, b = halves
    assert cut == both_ways(a, b)


def test_one_way_modes_and_clients_from_servers():
    cast = Cast(("s0", "s1"), ("p0", "c0"))
    assert cut_by(partition(target=["s0"], mode="one-way-in"), cast) == {(n, "s0") for n in ("s1", "p0", "c0")}
    assert cut_by(partition(target=["s0"], mode="one-way-out"), cast) == {("s0", n) for n in ("s1", "p0", "c0")}
    assert cut_by(partition(shape="clients"), cast) == both_ways(["p0", "c0"], ["s0", "s1"])
    assert cut_by(partition(target="clients"), cast) == both_ways(["p0", "c0"], ["s0", "s1"])


def test_a_shape_that_cuts_nothing_is_refused_by_name():
    with pytest.raises(FieldError, match="shape one cuts no link"):
        partition(shape="one").place(Cast(("s0",), ("p0",)), random.Random(1))


def test_targets_and_shapes_are_drawn_from_the_seed():
    cast = Cast(SERVERS, ("p0", "c0"))
    faults = [parse_fault({"fault": "pause", "at": 0, "duration": 1, "target": t})
              for t in ("server", "one", "minority", "majority")] + [partition(shape="halves")]

    def placed(seed):
        nemesis = Nemesis(world_with(cast.all), cast, faults, seed, Recorder("r", "sim", "b", "s"))
        return [(p.nodes, p.links) for p in nemesis.placements]

    assert placed(7) == placed(7)
    assert len({tuple(map(str, placed(seed))) for seed in range(8)}) > 1
    first = placed(7)
    sizes = [len(nodes) for nodes, _ in first[:4]]
    assert sizes == [1, 1, 3, 4]  # of 7 nodes: one, one, a minority, a majority
    assert set(first[0][0]) <= set(SERVERS)
    # adding a fault does not move the others
    more = Nemesis(world_with(cast.all), cast, faults + [partition(shape="one")], 7, Recorder("r", "sim", "b", "s"))
    assert [(p.nodes, p.links) for p in more.placements[:5]] == first


def test_a_flapping_partition_switches_every_flap_seconds_until_healed():
    world = world_with(("s0", "s1"))
    fault = partition(target=["s0"], flap=0.1)
    placement = fault.place(Cast(("s0", "s1")), random.Random(1))

    async def main(rt):
        heal = fault.start(world, placement, rt)
        states = []
        await rt.sleep(0.05)  # look between the switches
        for _ in range(5):
            states.append(bool(world.net.blocked))
            await rt.sleep(0.1)
        heal()
        after = bool(world.net.blocked)
        await rt.sleep(0.3)  # the flapper is gone: nothing cuts again
        return states, after, bool(world.net.blocked)

    states, after, later = world.run(main)
    assert states == [True, False, True, False, True] and not after and not later


async def _echo(world: SimWorld, name: str) -> None:
    async def boot(node):
        async def handler(source, message):
            return message

        await node.net.serve(handler)

    await world.start(name, boot)


def test_link_delay_adds_latency_with_jitter_and_loss_drops_until_healed():
    world = world_with(("client",))
    cast = Cast(("server",), ("client",))
    delay = parse_fault({"fault": "link-delay", "at": 0, "duration": 1, "ms": 10, "jitter_ms": 2})
    loss = parse_fault({"fault": "loss", "at": 0, "duration": 1, "p": 1.0})

    async def rtt(rt, client) -> int:
        start = rt.now_ns()
        await client.net.call("server", "x", timeout=1.0)
        return rt.now_ns() - start

    async def main(rt):
        await _echo(world, "server")
        client = world.node("client")
        before = await rtt(rt, client)
        heal = delay.start(world, delay.place(cast, random.Random(1)), rt)
        during = [await rtt(rt, client) for _ in range(20)]
        heal()
        after = await rtt(rt, client)
        heal = loss.start(world, loss.place(cast, random.Random(1)), rt)
        with pytest.raises(CallTimeout):
            await client.net.call("server", "y", timeout=0.1)
        heal()
        return before, during, after, await rtt(rt, client)

    before, during, after, healed = world.run(main)
    assert before == after == healed == 2 * MS  # 1 ms each way
    assert all(22 * MS <= d <= 26 * MS for d in during)  # +10 ms each way, plus 0..2 ms jitter each way
    assert len(set(during)) > 1


def test_disk_delay_slows_every_fsync_until_healed():
    world = world_with((), disk=DiskModel(fsync=LatencyModel(dist="constant", ms=1.0)))
    fault = parse_fault({"fault": "disk-delay", "at": 0, "duration": 1, "ms": 20, "target": ["db"]})

    async def main(rt):
        db = world.node("db")
        f = db.disk.open("log")

        async def fsync_ns():
            f.append(b"x")
            start = rt.now_ns()
            await f.fsync()
            return rt.now_ns() - start

        before = await fsync_ns()
        heal = fault.start(world, fault.place(Cast(("db",)), random.Random(1)), rt)
        during = await fsync_ns()
        heal()
        return before, during, await fsync_ns()

    assert world.run(main) == (1 * MS, 21 * MS, 1 * MS)


def test_overlapping_faults_each_mend_only_what_they_broke():
    world = world_with(("s0", "s1", "s2"))
    cast = Cast(("s0", "s1", "s2"))
    a, b = partition(target=["s0"]), partition(target=["s0", "s1"])
    pause = parse_fault({"fault": "pause", "at": 0, "duration": 1, "target": ["s1"]})
    crash = parse_fault({"fault": "crash", "at": 0, "duration": 1, "target": ["s2"]})

    async def main(rt):
        heal_a = a.start(world, a.place(cast, random.Random(1)), rt)
        heal_b = b.start(world, b.place(cast, random.Random(1)), rt)
        heal_a()
        left = set(world.net.blocked)  # b's cut stays, including the links a also cut
        heal_b()
        pauses = [pause.start(world, pause.place(cast, random.Random(1)), rt) for _ in range(2)]
        pauses[0]()
        still_paused = world.nodes["s1"].paused
        pauses[1]()
        crashes = [crash.start(world, crash.place(cast, random.Random(1)), rt) for _ in range(2)]
        crashes[0]()
        still_down = not world.is_up("s2")
        crashes[1]()
        return left, still_paused, world.nodes["s1"].paused, still_down, world.is_up("s2")

    left, still_paused, paused_after, still_down, up_after = world.run(main)
    assert left == both_ways(["s0", "s1"], ["s2"]) and not world.net.blocked
    assert still_paused and not paused_after
    assert still_down and up_after


def test_every_kind_is_registered_and_the_sim_world_applies_them_all():
    assert set(REGISTRY) == {"pause", "crash", "kill", "partition", "link-delay", "loss", "disk-delay", "gc", "late-writes",
                             "disk-loss"}
    assert kinds_in("sim") == tuple(REGISTRY)
    assert set(REGISTRY) - set(kinds_in("live")) == {"late-writes"}  # no live store has a hook


def test_a_kind_the_world_cannot_apply_is_refused_before_the_run(tmp_path, monkeypatch):
    w = parse_workload({"name": "f", "duration": 0.2, "faults": [
        {"fault": "disk-delay", "at": 0.05, "duration": 0.1, "ms": 1},
        {"fault": "pause", "at": 0.1, "duration": 0.1}]})
    assert fault_refusal(w, "sim") is None
    # a kind fewer worlds apply (as disk-delay was before the live world had a disk hook)
    monkeypatch.setattr(REGISTRY["disk-delay"], "worlds", ("sim",))
    line = fault_refusal(w, "live")
    assert line == "the live world cannot apply faults[0] (disk-delay); disk-delay faults run in the sim world only"
    with pytest.raises(WorkloadError) as e:
        run(w, "kestrel", "live", out=tmp_path / "r", progress=False)
    assert str(e.value) == f"<workload>: {line}" and "\n" not in str(e.value)
    assert not (tmp_path / "r").exists()  # nothing ran, nothing written


def test_aggregate_counts_no_fault_row_as_an_operation(spark, tmp_path):
    from lab.aggregate.pipeline import aggregate

    w = parse_workload({"name": "agg", "producers": 2, "consumers": 1, "rate": 2000, "duration": 0.5, "seed": 3,
                        "faults": [{"fault": "pause", "at": 0.2, "duration": 0.1}]})
    result = run(w, "ideal", "sim", out=tmp_path / "r", progress=False)
    summary = aggregate(spark, [result.run_dir], tmp_path / "summary").summary
    assert "fault" not in set(summary.op) and {"steady", "fault", "heal"} <= set(summary.phase)
    puts = summary[(summary.op == "put") & summary.phase.isin(PHASES)]
    assert puts["count"].sum() == result.summary["put"]["count"] == result.check.counts.attempts


# ----------------------------------------------------------------------------- when a fault starts


def test_a_start_given_as_a_range_is_drawn_per_seed_and_fault_number():
    w = parse_workload({"name": "r", "duration": 3, "faults": [
        {"fault": "crash", "at": [1.9, 2.1], "duration": 0.5},
        {"fault": "pause", "at": 1.0, "duration": 0.1},
        {"fault": "partition", "at": [0.5, 0.6], "duration": 0.2, "target": "server"}]})
    crash, pause, split = w.faults[2], w.faults[1], w.faults[0]  # sorted by their earliest start
    assert (crash.at, crash.at_to, crash.latest) == (1.9, 2.1, 2.1) and (pause.at_to, pause.latest) == (None, 1.0)
    drawn = {seed: timed(w.faults, seed) for seed in range(50)}
    assert drawn[7] == timed(w.faults, 7)  # a function of the seed
    assert all(f.at_to is None for fs in drawn.values() for f in fs)  # a fixed time each
    assert {fs[1] for fs in drawn.values()} == {pause}  # a fixed time stays
    crashes = [fs[2].at for fs in drawn.values()]
    assert all(1.9 <= at <= 2.1 for at in crashes) and len(set(crashes)) == 50
    assert min(crashes) < 1.95 and max(crashes) > 2.05  # the whole range, not a corner of it
    assert all(0.5 <= fs[0].at <= 0.6 for fs in drawn.values())
    # another target does not move a fault's time, nor does another fault
    moved = dataclasses.replace(split, target=("all",))
    assert timed((moved, pause, crash), 7)[0].at == drawn[7][0].at
    assert timed((split, pause, crash, crash), 7)[:3] == drawn[7]
    # the nemesis strikes at the drawn times, placed as before
    cast = Cast(("s0",), ("p0",))
    nemesis = Nemesis(world_with(cast.all), cast, w.faults, 7, Recorder("r", "sim", "b", "s"))
    assert tuple(nemesis.faults) == drawn[7]
    assert nemesis.placements[0] == split.place(cast, random.Random("7:fault:0"))


@pytest.mark.parametrize("at, problem", [
    ([2.1, 1.9], "range [2.1, 1.9]: from (2.1 s) is after to (1.9 s)"),
    ([-0.5, 1], "range [-0.5, 1]: from must be >= 0 seconds"),
    ([1, "2"], "a range is [from, to]: two numbers of seconds, got [1, '2']"),
    ([1, 2, 3], "a range is [from, to]: two numbers of seconds, got [1, 2, 3]"),
    ([True, 2], "a range is [from, to]: two numbers of seconds, got [True, 2]"),
    ([], "a range is [from, to]: two numbers of seconds, got []"),
    ("2s", "required, a number of seconds >= 0 or a range [from, to] of them, got '2s'"),
    (-1, "required, a number of seconds >= 0 or a range [from, to] of them, got -1"),
    ([2.5, 3.5], "the range's end, 3.5 s, is at or past the end of the load (3 s): the fault would never start "
                 "in some runs"),
])
def test_a_bad_start_or_range_is_refused_naming_the_field(at, problem):
    with pytest.raises(WorkloadError) as e:
        parse_workload({"name": "r", "duration": 3, "faults": [
            {"fault": "pause", "at": 0.5, "duration": 0.1}, {"fault": "crash", "at": at, "duration": 0.5}]})
    assert str(e.value) == f"<workload>: field 'faults[1].at': {problem}"


def test_a_range_of_one_instant_is_a_fixed_time_and_scaling_scales_the_range():
    assert parse_fault({"fault": "pause", "at": [1, 1], "duration": 1}) == parse_fault(
        {"fault": "pause", "at": 1, "duration": 1})
    w = parse_workload({"name": "r", "duration": 4, "faults": [{"fault": "pause", "at": [1, 2], "duration": 1}]})
    assert (w.scaled(0.5).faults[0].at, w.scaled(0.5).faults[0].at_to) == (0.5, 1.0)


def test_a_run_strikes_at_its_drawn_time_and_its_manifest_and_warnings_say_so(tmp_path):
    w = parse_workload({"name": "drawn", "producers": 1, "consumers": 1, "rate": 1000, "duration": 0.5,
                        "faults": [{"fault": "pause", "at": [0.1, 0.3], "duration": 0.05}]})
    starts = {}
    for seed in (1, 2):
        result = run(w, "ideal", "sim", seed=seed, out=tmp_path / f"s{seed}", progress=False)
        assert result.check.valid, result.check.line()
        at = timed(w.faults, seed)[0].at
        rows = read_samples(result.run_dir).to_pandas()
        t0 = rows[rows.op == "put"].t_start_ns.min()  # the first put starts with the run
        start = rows[(rows.op == "fault") & rows.error.str.startswith("start ")].t_start_ns.iloc[0]
        assert (start - t0) / 1e9 == pytest.approx(at, abs=1e-6)
        manifest = json.loads((result.run_dir / "manifest.json").read_text())
        assert manifest["workload"]["faults"][0]["at"] == at and manifest["workload"]["faults"][0]["at_to"] is None
        starts[seed] = at
    assert starts[1] != starts[2]
    # a fault drawn past the end of a load whose length only the run knows never starts: the
    # runner's warning names the drawn time
    late = parse_workload({"name": "late", "producers": 1, "consumers": 1, "messages": 50,
                           "faults": [{"fault": "pause", "at": [30, 40], "duration": 1}]})
    result = run(late, "ideal", "sim", seed=3, out=tmp_path / "late", progress=False)
    at = timed(late.faults, 3)[0].at
    assert result.warnings[0].startswith(f"fault 0 (pause at {at:g} s) never started") and 30 < at < 40


def test_a_kill_keeps_what_a_crash_loses_in_the_sim_world(tmp_path):
    """kill -9 with the machine up: the unsynced tail survives, so Kestrel with syncJournal=never
    loses nothing; a crash (power loss) of the same run loses it, as the design allows."""
    from lab.workloads.spec import load_workload

    killed = run(load_workload("kill"), "kestrel", "sim", out=tmp_path / "kill", progress=False,
                 options={"syncJournal": "never"})
    assert killed.verdict == "valid" and killed.check.counts.lost == 0, killed.check.line()
    crash = dataclasses.replace(load_workload("kill"), faults=load_workload("crash").faults)
    crashed = run(crash, "kestrel", "sim", out=tmp_path / "crash", progress=False, options={"syncJournal": "never"})
    assert crashed.verdict == "allowed" and crashed.check.counts.lost > 0, crashed.check.line()


def test_a_crash_of_a_real_broker_is_refused_where_fuse_cannot_mount(monkeypatch):
    """Without the power-loss file system a broker's crash would be a kill -9 in disguise:
    refused before the run, in one line, pointing at kill."""
    import lab.worlds.live.powerfs as powerfs
    from lab.workloads.spec import load_workload

    monkeypatch.setattr(powerfs, "unavailable", lambda: "no /dev/fuse")
    line = fault_refusal(load_workload("crash"), "live", "redis")
    assert line is not None and "no /dev/fuse" in line and "kill" in line
    assert fault_refusal(load_workload("kill"), "live", "redis") is None
