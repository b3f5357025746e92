"""The fault scenarios (lab/workloads/scenarios/*.yaml) and the fault kinds they added (gc,
late-writes): every scenario runs on every design in the sim world and gives a verdict that
is evidence; each fault does what it claims, measured from the run's samples (a pause
completes nothing on the paused node, a split stops traffic across it and only across it, a
crash loses only what was not durable, a late write arrives late); the same scenario and
seed give the same samples, row for row, for every design."""

from __future__ import annotations

import dataclasses
import random
import re
import statistics

import pytest

from lab.design.registry import usable
from lab.workloads.fault_base import Cast, FieldError
from lab.workloads.fault_kinds import GC_PRESETS, GcPlacement
from lab.workloads.faults import kinds_in, parse_fault
from lab.history.phases import fault_events
from lab.history.record import read_samples
from lab.experiments.runner import fault_refusal, run
from lab.experiments.runner_manifest import RunResult
from lab.workloads.spec import (SCENARIO_DIR, Workload, load_workload, parse_workload, scenario_files, standard_workload_files)
from lab.workloads.errors import WorkloadError
from models.world import SimWorld

SCENARIOS = [p.stem for p in scenario_files()]
DESIGNS = sorted(usable())  # the designs (the real brokers run live only: tests/test_peer_*.py)
CLIENTS = ("p0", "p1", "c0", "c1")  # the scenarios' producers and consumers, as the runner names them
QUICK = 2  # runs on every design go at half the scenario's rate: the same faults, fewer messages
US = 1_000  # ns
#: INVALID verdicts that are findings about a design, not mistakes of a scenario, and why.
KNOWN_INVALID: dict[str, re.Pattern] = {}


def quick(name: str) -> Workload:
    w = load_workload(name)
    return dataclasses.replace(w, rate=w.rate / QUICK)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``runs(workload, backend, options)``: the run, made once per module."""
    done: dict[tuple, RunResult] = {}

    def get(workload, backend: str, options: dict | None = None, again: bool = False) -> RunResult:
        key = (repr(workload), backend, tuple(sorted((options or {}).items())))
        if again or key not in done:
            out = tmp_path_factory.mktemp(f"{workload.name}-{backend}")
            result = run(workload, backend, "sim", out=out / "r", progress=False, options=options)
            if again:
                return result
            done[key] = result
        return done[key]

    return get


def samples_of(result: RunResult):
    return read_samples(result.run_dir).to_pandas()


def placement(workload: Workload, number: int, servers: tuple[str, ...]):
    """Where the run's nemesis placed fault ``number`` (the same seeded draw)."""
    clients = [f"p{i}" for i in range(workload.producers)] + [f"c{i}" for i in range(workload.consumers)]
    cast = Cast(servers, tuple(clients))
    return workload.faults[number].place(cast, random.Random(f"{workload.seed}:fault:{number}"))


def fault_window(samples, number: int = 0) -> tuple[int, int, str]:
    """(start ns, heal ns, detail) of fault ``number`` from the history's fault rows."""
    rows = samples[samples.op == "fault"]
    start = rows[rows.error.str.startswith(f"start faults[{number}] ")].iloc[0]
    heal = rows[rows.error.str.startswith(f"heal faults[{number}] ")].iloc[0]
    return int(start.t_start_ns), int(heal.t_start_ns), start.error.split(": ", 1)[1]


def ends(samples):
    return samples.t_start_ns + samples.latency_ns


# ----------------------------------------------------------------------------- the files


def test_scenarios_are_short_named_by_family_and_leave_a_healed_phase():
    standard = {p.stem for p in standard_workload_files()}
    families = ("split-", "gc-", "fsync-", "ack-before-durable-", "late-", "replication-", "crash-", "disk-loss-",
                "backlog-", "kill")
    assert len(SCENARIOS) >= 16
    for name in SCENARIOS:
        path = SCENARIO_DIR / f"{name}.yaml"
        assert path.read_text().startswith("# "), f"{name}: a comment header says what it shows"
        w = load_workload(name)  # found by name
        assert w.name == name and w.source == str(path) and name not in standard and name.startswith(families)
        assert w.load_seconds <= 5 and w.rate <= 2000, name  # lab matrix runs each 5 times per design
        if name.startswith("backlog-"):  # the situation with no fault, where no allowance excuses an anomaly
            assert w.description and not w.faults and w.recover_within is None and w.consumer_delay > 0, name
            continue
        assert w.description and w.faults and w.recover_within, name
        assert all(f.at >= w.warmup for f in w.faults), name
        assert max(f.latest + f.duration for f in w.faults) <= w.load_seconds - 1, f"{name}: no healed phase"
        # a fault that strikes an instant of the write path (a crash, a split, a slow fsync)
        # starts at a time drawn per seed, over many of a producer's put periods: not always
        # at the same step of it, whatever the seed
        period = w.producers / w.rate
        assert all(f.at_to is not None and f.at_to - f.at >= 10 * period
                   for f in w.faults if f.kind in ("crash", "partition", "disk-delay")), name


def test_a_name_is_looked_up_among_the_standard_workloads_then_the_scenarios():
    assert load_workload("steady").source.endswith("workloads/steady.yaml")
    assert load_workload("split-one.yaml").name == "split-one"
    with pytest.raises(WorkloadError) as e:
        load_workload("split-nine")
    message = str(e.value)
    assert "nor a standard workload (burst-reliable, crash, gc-pause, net-split, steady)" in message
    assert f"or a scenario ({', '.join(SCENARIOS)})" in message and "\n" not in message


def test_recover_within_is_seconds_after_a_heal():
    base = {"name": "r", "duration": 2, "faults": [{"fault": "pause", "at": 0.5, "duration": 0.1}]}
    assert parse_workload(base).recover_within is None
    assert parse_workload({**base, "recover_within": 2.5}).recover_within == 2.5
    for bad, problem in ((0, "must be > 0"), ("3s", "must be a number"), (True, "must be a number")):
        with pytest.raises(WorkloadError, match=f"field 'recover_within': {problem}"):
            parse_workload({**base, "recover_within": bad})
    with pytest.raises(WorkloadError, match="field 'recover_within': counts from the last heal"):
        parse_workload({"name": "r", "duration": 2, "recover_within": 1})


# ----------------------------------------------------------------------------- the gc kind


def gc(**fields):
    return parse_fault({"fault": "gc", "at": 0, "duration": 1, **fields})  # fields may override the duration


def test_gc_fields_come_from_the_preset_unless_given_and_bad_ones_are_named():
    jvm = gc()
    assert (jvm.preset, jvm.young_every, jvm.young_ms, jvm.full_every, jvm.full_ms, jvm.sigma) == \
        ("jvm", *GC_PRESETS["jvm"].values())
    assert gc(full_ms=900, young_every=0).full_ms == 900.0 and gc(young_every=0).young_ms == jvm.young_ms
    for fields, name in (({"preset": "go"}, "preset"), ({"young_ms": 0}, "young_ms"),
                         ({"full_every": -1}, "full_every"), ({"sigma": "wide"}, "sigma"),
                         ({"young_every": 0, "full_every": 0}, "young_every"), ({"ms": 5}, "ms")):
        with pytest.raises(FieldError) as e:
            gc(**fields)
        assert e.value.field == name and "\n" not in str(e.value)


def test_gc_pauses_follow_the_documented_distributions_per_node_from_the_seed():
    fault = parse_fault({"fault": "gc", "at": 0, "duration": 600, "target": ["a", "b"]})
    cast = Cast(("a", "b"), ("p0",))
    placed = fault.place(cast, random.Random("7:fault:0"))
    assert isinstance(placed, GcPlacement) and placed.nodes == ("a", "b")
    assert placed == fault.place(cast, random.Random("7:fault:0"))  # same seed, same pauses
    assert placed.pauses != fault.place(cast, random.Random("8:fault:0")).pauses
    alone = parse_fault({"fault": "gc", "at": 0, "duration": 600, "target": ["a"]}).place(cast,
                                                                                        random.Random("7:fault:0"))
    assert alone.pauses == tuple(p for p in placed.pauses if p.node == "a")  # a node's pauses are its own
    for node in ("a", "b"):
        mine = [p for p in placed.pauses if p.node == node]
        assert all(p.start + p.length <= q.start for p, q in zip(mine, mine[1:]))  # one collector: no overlap
        assert all(0 <= p.start and p.start + p.length <= 600 for p in mine)
        young = [p.length for p in mine if p.kind == "young"]
        full = [p.length for p in mine if p.kind == "full"]
        preset = GC_PRESETS["jvm"]
        assert 600 / len(young) == pytest.approx(preset["young_every"], rel=0.1)  # uniform gaps around their mean
        assert 600 / len(full) == pytest.approx(preset["full_every"], rel=0.25)
        assert statistics.median(young) * 1e3 == pytest.approx(preset["young_ms"], rel=0.1)  # lognormal medians
        assert statistics.median(full) * 1e3 == pytest.approx(preset["full_ms"], rel=0.15)
    only_full = gc(young_every=0, full_every=0.5, full_ms=300, sigma=0, duration=20).place(Cast(("a",)),
                                                                                         random.Random(1))
    assert {p.kind for p in only_full.pauses} == {"full"}
    assert {round(p.length, 9) for p in only_full.pauses[:-1]} == {0.3}  # sigma 0: the median, but the last is cut


def test_gc_composes_with_other_pauses_and_its_heal_leaves_no_pause_in_force():
    world = SimWorld(seed=1)
    world.node("s0")
    cast = Cast(("s0",))
    long_full = gc(young_every=0, full_every=0.01, full_ms=5000, sigma=0, target=["s0"])
    pause = parse_fault({"fault": "pause", "at": 0, "duration": 1, "target": ["s0"]})

    async def main(rt):
        heal_gc = long_full.start(world, long_full.place(cast, random.Random(1)), rt)
        await rt.sleep(0.5)
        in_gc = world.nodes["s0"].paused
        heal_pause = pause.start(world, pause.place(cast, random.Random(1)), rt)
        heal_gc()  # mid-pause: the pause fault still holds the node
        still = world.nodes["s0"].paused
        heal_pause()
        after = world.nodes["s0"].paused
        await rt.sleep(2)  # the collector's task is gone: nothing pauses the node again
        return in_gc, still, after, world.nodes["s0"].paused, world.nodes["s0"].pauses

    assert world.run(main) == (True, True, False, False, 0)


def test_the_live_world_applies_gc_to_server_processes_only_and_late_writes_not_at_all():
    def schedule(fault):
        return parse_workload({"name": "x", "duration": 2, "faults": [{"at": 0.5, "duration": 0.5, **fault}]})

    assert "gc" in kinds_in("sim") and "late-writes" in kinds_in("sim") and "gc" in kinds_in("live")
    assert fault_refusal(schedule({"fault": "gc", "target": "servers"}), "live", "kestrel") is None
    assert "target all may hit a client" in fault_refusal(schedule({"fault": "gc", "target": "all"}), "live", "kestrel")
    assert fault_refusal(schedule({"fault": "late-writes"}), "live", "cassieq") == \
        "the live world cannot apply faults[0] (late-writes); late-writes faults run in the sim world only"


def test_late_writes_fields_and_the_world_verb_compose():
    for fields, name in (({"late_p": 0}, "late_p"), ({"late_p": 0.8, "ghost_p": 0.3}, "late_p"),
                         ({"ghost_p": -0.1}, "ghost_p"), ({"late_s": 0}, "late_s")):
        with pytest.raises(FieldError) as e:
            parse_fault({"fault": "late-writes", "at": 0, "duration": 1, **fields})
        assert e.value.field == name
    world = SimWorld(seed=1)
    world.node("store")
    fault = parse_fault({"fault": "late-writes", "at": 0, "duration": 1, "target": ["store"], "late_p": 0.5})

    async def main(rt):
        placed = fault.place(Cast(("store",)), random.Random(1))
        first, second = fault.start(world, placed, rt), fault.start(world, placed, rt)
        first()
        held = list(world.nodes["store"].late_writes)
        second()
        return held, world.nodes["store"].late_writes

    assert world.run(main) == ([(0.5, 1.0, 0.0)], [])


# ----------------------------------------------------------------------------- every scenario, every design


@pytest.mark.parametrize("backend", DESIGNS)
@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_runs_on_every_design_with_a_verdict_that_is_evidence(runs, name, backend):
    w = quick(name)
    assert fault_refusal(w, "sim", backend) is None
    result = runs(w, backend)
    v = result.check
    assert v.judgement.problem is None and v.counts.unexpected == 0, v.line()
    assert not [line for line in result.warnings if "never started" in line]
    events = fault_events(read_samples(result.run_dir))
    assert sorted((e.number, e.event) for e in events) == [(i, x) for i in range(len(w.faults))
                                                          for x in ("heal", "start")]
    if v.verdict == "invalid":  # a broken promise: only the known findings about a design
        assert backend in KNOWN_INVALID and KNOWN_INVALID[backend].search(v.reason), v.line()


@pytest.mark.parametrize("backend", DESIGNS)
def test_the_same_scenario_and_seed_give_the_same_samples_for_every_design(runs, backend):
    w = quick("gc-jvm")
    first, again = runs(w, backend), runs(w, backend, again=True)
    a, b = read_samples(first.run_dir).drop_columns(["run_id"]), read_samples(again.run_dir).drop_columns(["run_id"])
    assert a.num_rows > 500 and a.equals(b)
    other = run(dataclasses.replace(w, seed=w.seed + 1), backend, "sim", out=first.run_dir.parent / "other",
                progress=False)
    assert not read_samples(other.run_dir).drop_columns(["run_id"]).equals(a)


# ----------------------------------------------------------------------------- each fault has its effect


def test_a_gc_pause_completes_nothing_on_the_paused_node_and_lasts_its_drawn_length(runs):
    """gc-jvm (sim): while the server is paused no operation completes; and with every node
    paused, clients included, no operation of a paused client starts or ends inside its
    pause, and a producer's first put after a pause starts at its end, as late as the pause
    was long."""
    scenario = load_workload("gc-jvm")
    everyone = dataclasses.replace(scenario, faults=(dataclasses.replace(scenario.faults[0], target=("all",)),))
    for w in (scenario, everyone):
        samples = samples_of(runs(w, "kestrel"))
        t0, _, detail = fault_window(samples)
        placed = placement(w, 0, ("kestrel",))
        assert detail == placed.detail  # the run's own pauses
        assert {p.kind for p in placed.pauses} == {"young", "full"}
        ops = samples[samples.op != "fault"]
        gap = 2e9 / w.rate  # ns between one producer's sends
        for pause in placed.pauses:
            start, end = t0 + round(pause.start * 1e9), t0 + round((pause.start + pause.length) * 1e9)

            def inside(t, start=start, end=end):  # this pause's window, bound here
                return (t > start + US) & (t < end - US)

            if pause.node == "kestrel":
                if w is scenario:  # (a reply that reached a paused client before the server paused ends later)
                    done = ops[inside(ends(ops)) & (ops.outcome == "ok") & (ends(ops) > start + 1_000 * US)]
                    assert done.empty, f"{len(done)} operations completed in a {pause.length * 1e3:.0f} ms pause"
                continue
            mine = ops[ops.node == pause.node]
            assert not (inside(mine.t_start_ns).any() or inside(ends(mine)).any()), pause
            if pause.node.startswith("p") and pause.length * 1e9 > 2 * gap:
                # the sends due in the pause wait for its end: the first is as late as the pause, less a gap
                first = mine[(mine.op == "put") & (mine.t_start_ns >= end - US)].iloc[0]
                assert first.delay_ns >= pause.length * 1e9 - gap - US, pause
                if (ends(mine[mine.t_start_ns < start]) < start).all():  # it was waiting for its next send
                    assert abs(first.t_start_ns - end) <= US, pause  # which starts the instant the pause ends


def test_a_split_stops_traffic_across_it_and_only_across_it(runs):
    """split-majority on Kestrel: clients on the other side from the server complete nothing
    while it holds; clients on the server's side go on as before."""
    w = load_workload("split-majority")
    samples = samples_of(runs(w, "kestrel"))
    start, heal, detail = fault_window(samples)
    placed = placement(w, 0, ("kestrel",))
    assert detail == placed.detail
    cut = {c for c in CLIENTS if (c, "kestrel") in placed.links and ("kestrel", c) in placed.links}
    assert cut and cut < set(CLIENTS)  # both sides have clients
    ops = samples[(samples.op != "fault") & (samples.outcome == "ok")]
    during = ops[(ends(ops) > start) & (ends(ops) < heal)]
    assert not set(during.node) & cut
    windows = range(start, heal - 100_000 * US, 100_000 * US)  # every 100 ms of the split
    for client in set(CLIENTS) - cut:  # a producer's puts at its rate; a consumer's gets, waiting at most 0.1 s each
        mine = samples[(samples.node == client) & (samples.op != "fault")]
        least = 0.1 * w.rate / w.producers / 2 if client.startswith("p") else 1
        assert all(((ends(mine) >= t) & (ends(mine) < t + 100_000 * US)).sum() >= least for t in windows), client


def test_a_one_way_split_lets_requests_in_and_no_answer_out(runs):
    """split-one-way on Kestrel: the server takes the puts it hears while no client hears an
    answer (their messages are delivered after the heal); cut both ways, the same split lets
    no put sent during it in."""
    one_way = load_workload("split-one-way")
    both_ways = dataclasses.replace(one_way, faults=(dataclasses.replace(one_way.faults[0], mode="isolate"),))
    for w, recovered in ((one_way, True), (both_ways, False)):
        samples = samples_of(runs(w, "kestrel"))
        start, heal, _ = fault_window(samples)
        ops = samples[samples.op != "fault"]
        assert ops[(ends(ops) > start) & (ends(ops) < heal) & (ops.outcome == "ok")].empty
        sent = set(ops[(ops.op == "put") & (ops.t_start_ns > start) & (ops.t_start_ns < heal)].msg_id)
        delivered = set(ops[(ops.op == "get") & (ops.outcome == "ok")].msg_id)
        assert sent and bool(sent & delivered) is recovered, w.faults[0]


def lost_ids(samples) -> set[str]:
    puts = samples[(samples.op == "put") & (samples.outcome == "ok")]
    return set(puts.msg_id) - set(samples[(samples.op == "get") & (samples.outcome == "ok")].msg_id)


@pytest.mark.parametrize("backend, durable, not_durable", [
    ("kestrel", {"syncJournal": "always"}, {"syncJournal": "never"}),
    ("queuefka", {"fsync": "always"}, {"fsync": "never"}),
    ("primer", {"replicas": 3, "persistence": "aof"}, {"replicas": 2, "persistence": "off"}),
])
def test_a_crash_loses_only_what_was_not_durable(runs, backend, durable, not_durable):
    """ack-before-durable-crash: a design that makes a write durable before it acknowledges it
    loses nothing; one that acknowledges first loses acknowledged messages, all of them put
    before the crash, and its promises allow it."""
    w = load_workload("ack-before-durable-crash")
    kept = runs(w, backend, durable)
    assert kept.check.valid and kept.check.counts.lost == 0, kept.check.line()
    gone = runs(w, backend, not_durable)
    samples = samples_of(gone)
    crash, _, _ = fault_window(samples)
    lost = lost_ids(samples)
    assert gone.verdict == "allowed" and len(lost) == gone.check.counts.lost > 0, gone.check.line()
    assert samples[samples.msg_id.isin(lost) & (samples.op == "put")].t_start_ns.max() < crash


@pytest.mark.parametrize("backend, options", [
    ("kestrel", {"syncJournal": "never"}),
    ("queuefka", {"fsync": "never"}),
])
def test_a_crash_loses_nothing_put_after_the_restart(runs, backend, options):
    w = load_workload("crash-all")
    samples = samples_of(runs(w, backend, options))
    _, restart, _ = fault_window(samples)
    lost = lost_ids(samples)
    assert (samples[samples.msg_id.isin(lost) & (samples.op == "put")].t_start_ns < restart).all()


def test_a_late_write_arrives_late(runs):
    """late-writes on CassieQ: a message write the store delays times out at the API node (the
    put's outcome is unknown) and its message is delivered no earlier than late_s after the
    put; before the fault no put's outcome is unknown."""
    w = quick("late-writes")
    fault = w.faults[0]
    samples = samples_of(runs(w, "cassieq"))
    start, heal, _ = fault_window(samples)
    puts = samples[samples.op == "put"].set_index("msg_id")
    gets = samples[(samples.op == "get") & (samples.outcome == "ok")]
    first = ends(gets).groupby(gets.msg_id).min()
    unknown = puts[(puts.outcome == "info") & (puts.t_start_ns > start) & (puts.t_start_ns < heal)]
    landed = unknown.index.intersection(first.index)
    assert len(landed) >= 1
    assert (first[landed] - unknown.t_start_ns[landed] >= fault.late_s * 1e9).all()
    assert not puts[puts.t_start_ns < start].outcome.eq("info").any()  # before the fault the store is prompt
