"""`lab swarm`: the draw (a pure function of the seed, every kind the sim world applies, every
fault one the world accepts), a short swarm on a real design, the invalid path end to end on
a design with a deliberate bug (found, replayed row for row, shrunk), a run that raises in a
worker reported with its real exception whatever its class, and the one-line mistakes of
the command."""

from __future__ import annotations

import pickle
import random
import shlex
import subprocess
import sys
import types
from collections import deque
from pathlib import Path

import pytest
import yaml

from lab.workloads import faults

from lab.experiments import swarm, swarm_draw, swarm_worker
from lab.design.registry import REGISTRY, Registration
from lab.backends.cassieq.core.errors import ExistingMonoton
from lab.backends.ideal.core import IdealQueue, Item
from lab.backends.ideal.driver import IdealBackend
from lab.cli import main
from lab.workloads.fault_base import SHAPES, Cast, Fault
from lab.workloads.faults import parse_fault
from lab.history.record import read_samples
from lab.experiments.runner import fault_refusal
from lab.design.about import About
from lab.design.runtime import Boot, Runtime
from lab.workloads.spec import parse_workload

#: a short base load: each run takes a fraction of a second of wall time
TINY = {"name": "tiny", "producers": 2, "consumers": 2, "rate": 400, "duration": 1.5, "warmup": 0.2,
        "ack": "reliable"}


pytestmark = pytest.mark.usefixtures("results")  # runs go to the test's own folder (conftest)


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def without_run_id(run_dir) -> list[dict]:
    return read_samples(run_dir).drop_columns(["run_id"]).to_pylist()


# ----------------------------------------------------------------------------- the draw

CASTS = {"one server": Cast(("s0",), ("p0", "p1", "c0", "c1")),
         "five servers": Cast(("s0", "s1", "s2", "s3", "s4"), ("p0", "c0"))}


def test_the_draw_is_a_pure_function_of_the_seed():
    window, kinds, cast = swarm_draw.load_window(TINY), swarm_draw.world_kinds("sim"), CASTS["five servers"]
    first = [swarm_draw.draw_schedule(seed, window, kinds, cast) for seed in range(50)]
    assert first == [swarm_draw.draw_schedule(seed, window, kinds, cast) for seed in range(50)]
    assert len({repr(s) for s in first}) == 50
    assert {len(s) for s in first} == {1, 2, 3}
    assert max(len(swarm_draw.draw_schedule(seed, window, kinds, cast, faults_max=5)) for seed in range(50)) == 5


@pytest.mark.parametrize("cast", CASTS.values(), ids=CASTS)
def test_the_draw_covers_every_kind_the_sim_world_applies_and_the_world_accepts_every_fault(cast):
    applies = set(faults.kinds_in("sim"))
    kinds = swarm_draw.world_kinds("sim")
    assert set(kinds) == applies & set(faults.REGISTRY)
    start, end = window = swarm_draw.load_window(TINY)
    seen, shapes = set(), set()
    for seed in range(300):
        entries = swarm_draw.draw_schedule(seed, window, kinds, cast)
        workload = parse_workload(swarm_draw.seed_workload(TINY, seed, entries))
        assert fault_refusal(workload, "sim") is None
        for number, (entry, fault) in enumerate(zip(entries, workload.faults)):
            assert parse_fault(entry) == fault
            assert start <= fault.at and fault.at + fault.duration <= end + 1e-9  # the last quarter stays healed
            fault.place(cast, random.Random(f"{seed}:fault:{number}"))  # cuts something, hits known nodes
            seen.add(fault.kind)
            shapes.add(getattr(fault, "shape", None))
    assert seen == set(kinds)
    if len(cast.servers) >= 3:
        assert set(SHAPES) <= shapes


def test_a_registered_kind_the_swarm_cannot_draw_fails_loudly(monkeypatch):
    class Meteor(Fault):
        kind = "meteor"

    monkeypatch.setitem(faults.REGISTRY, "meteor", Meteor)  # applied by the sim world, as every kind by default
    with pytest.raises(swarm_draw.UndrawableKind, match="'meteor'.*FIELD_DRAWS"):
        swarm_draw.world_kinds("sim")


# ----------------------------------------------------------------------------- a real design


def test_a_short_swarm_on_kestrel_runs_in_workers_writes_its_summary_and_finds_nothing_invalid(tmp_path, tiny):
    result = swarm.swarm("kestrel", range(1, 6), jobs=2, workload=tiny, out=tmp_path / "sw", progress=False)
    assert [r.seed for r in result.runs] == [1, 2, 3, 4, 5] and not result.stopped_by_budget
    assert result.findings == [] and result.counts["invalid"] == result.counts["error"] == 0
    assert all((Path(r.run_dir) / "samples.parquet").exists() for r in result.runs)
    csv_rows = result.csv_path.read_text().splitlines()
    assert csv_rows[0].startswith("seed,load,faults,verdict,reason,lost,duplicated") and len(csv_rows) == 6
    assert "| 5 |" in result.markdown_path.read_text()

    # A seed's workload replayed by `lab run` in a process of its own gives its samples, row for row.
    replay = tmp_path / "seed-3.yaml"
    replay.write_text(yaml.safe_dump(swarm.draws("kestrel", [3], workload=tiny)[3]))
    subprocess.run([sys.executable, "-m", "lab.cli", "run", str(replay), "--backend", "kestrel", "--seed", "3",
                    "--out", str(tmp_path / "replay"), "--no-progress"], check=True, capture_output=True)
    assert without_run_id(tmp_path / "replay") == without_run_id(result.runs[2].run_dir)


def test_a_budget_stops_the_swarm_and_says_how_many_seeds_ran(tmp_path, tiny):
    result = swarm.swarm("ideal", range(1, 500), budget=0.5, jobs=1, workload=tiny, out=tmp_path / "sw",
                         progress=False)
    assert result.stopped_by_budget and 1 <= len(result.runs) < 499
    assert f"{len(result.runs)} of 499 seeds ran" in swarm.report_lines(result)[0]


# ----------------------------------------------------------------------------- a deliberate bug


class StaleCursorQueue(IdealQueue):
    """The ideal queue with a deliberate bug: the first message it hands out after a quiet
    spell — no request for ``QUIET`` seconds, as when its clients were cut off, it was paused
    or it restarted — stays at the head of its queue as well, so it is delivered twice.
    The ideal promises exactly-once with reliable reads: a duplicate is a broken promise."""

    QUIET = 0.25

    def __init__(self, rt: Runtime):
        super().__init__(rt)
        self.last = rt.now_ns()
        self.stale = False

    async def handle(self, source: str, request: object) -> object:
        now = self.rt.now_ns()
        self.stale |= now - self.last >= self.QUIET * 1e9
        self.last = now
        return await super().handle(source, request)

    def _deliver(self, queue: str, body: bytes, reliable: bool) -> Item:
        if self.stale:
            self.stale = False
            self.queues.setdefault(queue, deque()).appendleft(body)  # the bug: the read cursor did not move
        return super()._deliver(queue, body, reliable)


class StaleBackend(IdealBackend):
    name = "stale-ideal"
    about = About("the ideal queue with a stale read cursor after a quiet spell (a test's deliberate bug)")

    def boot(self, node: str) -> Boot:
        async def boot(rt: Runtime) -> None:
            await rt.net.serve(StaleCursorQueue(rt).handle)

        return boot


@pytest.fixture
def stale_design(monkeypatch) -> str:
    """`stale-ideal` registered as any design is: a package whose ``driver`` module (this one)
    holds its Backend class."""
    package = types.ModuleType("stale_ideal_design")
    package.__path__ = []  # a package with no serve, tools or bench module
    monkeypatch.setitem(sys.modules, "stale_ideal_design", package)
    monkeypatch.setitem(sys.modules, "stale_ideal_design.driver", sys.modules[__name__])
    monkeypatch.setitem(REGISTRY, "stale-ideal", Registration("stale_ideal_design", "StaleBackend", "#000000"))
    return "stale-ideal"


def crash_seeds(backend: str, tiny: Path, count: int, faults_at_least: int = 1) -> list[int]:
    """The first seeds whose schedule crashes or kills the server for a quiet spell's length at least
    (``StaleCursorQueue.QUIET``), among ``faults_at_least`` faults or more."""
    schedules = ((seed, workload["faults"]) for seed, workload in swarm.draws(backend, range(1, 1000),
                                                                             workload=tiny).items())
    return [seed for seed, entries in schedules
            if len(entries) >= faults_at_least
            and any(e["fault"] in ("crash", "kill") and e["duration"] >= StaleCursorQueue.QUIET for e in entries)][:count]


def test_the_swarm_finds_the_deliberate_bug_replays_each_finding_and_shrinks_it(stale_design, tmp_path, tiny,
                                                                               capsys):
    seeds = crash_seeds(stale_design, tiny, 3, faults_at_least=2)
    result = swarm.swarm(stale_design, seeds, jobs=1, workload=tiny, out=tmp_path / "sw", progress=False)
    printed = capsys.readouterr().out
    assert result.findings, "a crash makes a quiet spell: the swarm must find the stale cursor"
    for finding in result.findings:
        run = finding.run
        assert run.verdict == "invalid" and run.broken == ("duplicated",) and run.duplicated >= 1
        assert finding.command in printed
        assert finding.command == f"lab run {finding.file} --backend stale-ideal --seed {run.seed}"
        written = yaml.safe_load(finding.file.read_text())
        assert written["seed"] == run.seed and len(written["faults"]) == len(run.faults.split("; "))
        # The printed command replays the seed's run row for row, and so does the shrunk one's.
        for command, run_dir, out in ((finding.command, run.run_dir, "replay"),
                                      (finding.shrunk_command, finding.shrunk.run_dir, "replay-shrunk")):
            assert main([*shlex.split(command)[1:], "--out", str(tmp_path / f"{out}-{run.seed}"),
                         "--no-progress"]) == 1
            assert without_run_id(tmp_path / f"{out}-{run.seed}") == without_run_id(run_dir)
        shrunk = yaml.safe_load(finding.shrunk_file.read_text())
        assert finding.shrunk.verdict == "invalid" and "duplicated" in finding.shrunk.broken
        assert len(shrunk["faults"]) < len(written["faults"])
        assert 0 < finding.shrink_runs <= 40
    lines = swarm.report_lines(result)
    assert f"invalid {len(result.findings)}" in lines[1]
    assert sum("shrunk in" in line for line in lines) == len(result.findings)
    csv_text = result.csv_path.read_text()
    assert all(f"\n{f.run.seed}," in csv_text for f in result.findings)


# ----------------------------------------------------------------------------- the command


def test_lab_swarm_prints_its_findings_and_exits_1_when_a_seed_is_invalid(stale_design, tmp_path, tiny, capsys):
    [seed] = crash_seeds(stale_design, tiny, 1)
    code = main(["swarm", "--backend", stale_design, "--seeds", str(seed), "--jobs", "1", "--workload", str(tiny),
                 "--out", str(tmp_path / "sw"), "--no-shrink", "--no-progress"])
    out = capsys.readouterr().out
    assert (code, "invalid 1" in out) == (1, True), out
    assert f"replay: lab run {tmp_path / 'sw' / f'seed-{seed}.yaml'} --backend stale-ideal --seed {seed}" in out
    assert not (tmp_path / "sw" / f"seed-{seed}-shrunk.yaml").exists()


@pytest.mark.parametrize("args, says", [
    (["--backend", "nope"], "unknown backend 'nope'"),
    (["--backend", "ideal", "--seeds", "5..2"], "--seeds 5..2: the last seed is before the first"),
    (["--backend", "ideal", "--seeds", "abc"], "--seeds takes A..B"),
    (["--backend", "ideal", "--seeds", "1..x"], "--seeds takes A..B"),
    (["--backend", "ideal", "--budget", "soon"], "--budget: use seconds"),
    (["--backend", "ideal", "--budget", "0"], "--budget: must be > 0"),
    (["--backend", "ideal", "--option", "timeout=-1"], "option timeout=-1: must be a number of seconds > 0"),
    (["--backend", "kestrel", "--option", "fsync=always"], "has no option 'fsync'"),
    (["--backend", "ideal", "--jobs", "0"], "--jobs 0: use 1 or more"),
    (["--backend", "ideal", "--faults-max", "0"], "--faults-max 0: use 1 or more"),
    (["--backend", "ideal", "--world", "live"], "sim world only"),
    (["--backend", "ideal", "--workload", "no-such-workload"], "no such workload file"),
])
def test_bad_arguments_are_one_line_errors_and_write_nothing(args, says, results, capsys):
    assert main(["swarm", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lab: error: ") and "\n" not in err and says in err, err
    assert not results.exists() or not any(results.rglob("*"))


def test_a_closed_loop_base_workload_is_refused_in_one_line(tmp_path, results, capsys):
    path = tmp_path / "closed.yaml"
    path.write_text("name: closed\nmessages: 100\n")
    assert main(["swarm", "--backend", "ideal", "--workload", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "known length" in err and "\n" not in err
    assert not results.exists()


# ----------------------------------------------------------------------------- a worker's exception


class Unpicklable(Exception):
    """An exception whose constructor takes arguments of its own: it pickles, and does not
    unpickle (its message alone is not what its constructor takes)."""

    def __init__(self, what: str, code: int):
        super().__init__(f"{what} failed with code {code}")


def raise_unpicklable(*args) -> None:
    """A seed's run that raises (it runs in a worker process)."""
    raise Unpicklable("the seed's run", 7)


def test_a_worker_hands_back_its_real_exception_whatever_its_class():
    with pytest.raises(TypeError, match="code"):  # the premise: the exception itself cannot cross back
        pickle.loads(pickle.dumps(Unpicklable("x", 1)))
    pool = swarm_worker.process_pool(1)
    try:
        error = pool.submit(swarm_worker.in_worker, raise_unpicklable, 1).result()
        assert isinstance(error, swarm_worker.WorkerError)
        assert (error.type, error.message) == ("Unpicklable", "the seed's run failed with code 7")
        assert "in raise_unpicklable" in error.traceback
        assert error.traceback.rstrip().endswith("Unpicklable: the seed's run failed with code 7")
        assert pool.submit(swarm_worker.in_worker, abs, -3).result() == 3  # the pool is not broken
    finally:
        pool.shutdown()
    # the CassieQ refusal that showed it crosses back whole now
    monoton = pickle.loads(pickle.dumps(ExistingMonoton("q7", 12)))
    assert (type(monoton), monoton.queue_id, monoton.index) == (ExistingMonoton, "q7", 12)
    assert str(monoton) == str(ExistingMonoton("q7", 12))


def test_a_seed_whose_run_raises_in_a_worker_is_an_error_with_the_real_exception(monkeypatch, tmp_path, tiny):
    monkeypatch.setattr(swarm, "run_seed", raise_unpicklable)  # what the workers are handed to run
    result = swarm.swarm("ideal", [1, 2], jobs=2, workload=tiny, out=tmp_path / "sw", progress=False)
    assert [(r.seed, r.verdict, r.reason) for r in result.runs] == [
        (seed, "error", "Unpicklable: the seed's run failed with code 7") for seed in (1, 2)]
    assert [f.run.seed for f in result.findings] == [1, 2]
    text = (tmp_path / "sw" / "seed-1.error.txt").read_text()
    assert "in raise_unpicklable" in text and text.rstrip().endswith("Unpicklable: the seed's run failed with code 7")
    lines = swarm.report_lines(result)
    assert "error 2" in lines[1] and "seed 1: ERROR (Unpicklable: the seed's run failed with code 7)" in lines
    assert f"  traceback: {tmp_path / 'sw' / 'seed-1.error.txt'}" in lines
