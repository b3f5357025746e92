"""Planted bugs (``lab.design.mutants``) and the hunt that measures the lab's power to catch them
(``lab mutants``): a mutant is planted and undone, reaches a server process only through
the test hook, is named in its runs' manifests; the hunt catches, shrinks, runs the
controls, and fails on a miss and on a false alarm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.experiments import planting as mutants
from lab.backends.ideal.core import IdealQueue
from lab.cli import main
from lab.experiments.planting import ENV, UnknownMutant, catalogue, plant, plant_from_environment
from lab.design.mutants import Mutant, Patch
from lab.experiments.hunt import hunt
from lab.experiments.hunt_report import report_lines
from lab.experiments.runner import run
from lab.workloads.spec import load_workload, parse_workload

SHORT = {"name": "short", "producers": 2, "consumers": 2, "rate": 1000, "duration": 1, "warmup": 0.2,
         "ack": "reliable", "seed": 1}


def test_every_design_has_mutants_and_each_names_its_promise_and_a_patch_that_fits():
    found = catalogue()
    for design in ("ideal", "kestrel", "queuefka", "cassieq", "primer"):
        mine = [m for m in found.values() if m.design == design]
        assert len(mine) >= (1 if design == "ideal" else 3), (design, list(found))
    for m in found.values():
        assert m.name.startswith(f"{m.design}-") and m.promise and m.mistake and m.patches, m
        for patch in m.patches:
            assert hasattr(patch.owner, patch.attribute), (m.name, patch)
        for scenario in m.scenarios:
            load_workload(scenario)


def test_a_planted_mutant_is_undone_on_the_way_out_and_one_at_a_time(tmp_path):
    before = IdealQueue.get
    with plant("ideal-skips-the-head") as m:
        assert IdealQueue.get is not before and os.environ[ENV] == m.name and mutants.planted_now == m.name
        with pytest.raises(RuntimeError, match="already planted"):
            with plant("ideal-ack-redelivers"):
                pass
    assert IdealQueue.get is before and ENV not in os.environ and mutants.planted_now is None
    with pytest.raises(UnknownMutant, match="ideal-skips-the-head"):
        with plant("ideal-no-such-bug"):
            pass


def test_a_run_with_a_planted_mutant_is_invalid_and_says_so_in_its_manifest_and_the_design_is_valid_again(tmp_path):
    w = parse_workload({**SHORT, "producers": 4, "consumers": 1, "consumer_delay": 0.3})  # a backlog: crowded gets
    with plant("ideal-skips-the-head"):
        broken = run(w, "ideal", "sim", out=tmp_path / "m", progress=False)
    assert broken.verdict == "invalid" and "FIFO per queue" in broken.check.reason, broken.check.line()
    assert json.loads((broken.run_dir / "manifest.json").read_text())["mutant"] == "ideal-skips-the-head"
    again = run(w, "ideal", "sim", out=tmp_path / "c", progress=False)
    assert again.verdict == "valid", again.check.line()
    assert "mutant" not in json.loads((again.run_dir / "manifest.json").read_text())


def test_the_hook_plants_in_a_server_process_only_the_mutant_of_its_own_design():
    probe = ("from lab.experiments.planting import plant_from_environment as p; from lab.backends.ideal.core import IdealQueue as Q;"
             "before = Q.get; print(p('kestrel'), Q.get is before, p('ideal'), Q.get is before)")
    env = {**os.environ, ENV: "ideal-skips-the-head"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["None", "True", "ideal-skips-the-head", "False"], done.stderr
    assert "lab: mutant ideal-skips-the-head planted" in done.stderr
    assert plant_from_environment("ideal") is None  # not set here: nothing planted


def test_the_hunt_catches_a_mutant_in_worker_processes_shrinks_its_schedule_and_runs_the_control(tmp_path):
    result = hunt(names=["ideal-ack-redelivers"], seeds=1, jobs=2, out=tmp_path / "h", progress=False,
                  echo=lambda _: None)
    (h,) = result.hunts
    assert h.caught is not None and h.caught[0].label == "base seed 1" and h.runs_to_catch == 1
    assert h.caught[1].verdict == "invalid" and "duplicate" in h.caught[1].reason
    assert h.shrunk == "no faults"  # caught with none: nothing to shrink
    (control,) = result.control_runs("ideal-ack-redelivers")
    assert control.verdict != "invalid", control.reason
    assert "mutant" not in json.loads((Path(control.run_dir) / "manifest.json").read_text())
    assert json.loads((Path(h.caught[1].run_dir) / "manifest.json").read_text())["mutant"] == "ideal-ack-redelivers"
    assert result.passed
    lines = report_lines(result)
    assert "caught 1 of 1, 0 false alarm(s) in 1 control run(s)" in lines[0]
    assert any(line.startswith("| ideal-ack-redelivers | no duplicate | yes | base seed 1 | 1 |") for line in lines)
    assert (tmp_path / "h" / "mutants.md").read_text().count("ideal-ack-redelivers") >= 1


def test_a_scenario_given_by_path_runs_under_the_hunts_folder_not_beside_its_file(tmp_path, monkeypatch):
    import dataclasses

    from lab.backends.ideal import mutants as ideal_mutants

    package = tmp_path / "my_design" / "scenarios"
    package.mkdir(parents=True)
    scenario = package / "crowded.yaml"
    scenario.write_text("name: crowded\nproducers: 2\nconsumers: 2\nrate: 1000\nduration: 1\nwarmup: 0.2\n"
                        "ack: reliable\nseed: 1\n")
    by_path = [dataclasses.replace(m, scenarios=(str(scenario),)) if m.name == "ideal-ack-redelivers" else m
               for m in ideal_mutants.MUTANTS]
    monkeypatch.setattr(ideal_mutants, "MUTANTS", by_path)
    result = hunt(names=["ideal-ack-redelivers"], seeds=2, jobs=1, out=tmp_path / "h", progress=False,
                  echo=lambda _: None)
    (h,) = result.hunts
    assert h.caught is not None and h.caught[0].label == f"{scenario} seed 1", [t.label for t, _ in h.runs]
    assert result.passed and not result.false_alarms
    assert sorted(p.name for p in package.iterdir()) == ["crowded.yaml"]  # nothing written beside it
    assert Path(h.caught[1].run_dir).is_relative_to(tmp_path / "h")
    for control in result.control_runs("ideal-ack-redelivers"):
        assert Path(control.run_dir).is_relative_to(tmp_path / "h")


def _harmless(self: IdealQueue, queue: str, body: bytes) -> None:
    return _PUT(self, queue, body)


_PUT = IdealQueue.put


def test_a_mutant_no_run_catches_fails_the_hunt_and_is_named(tmp_path, monkeypatch, capsys):
    from lab.backends.ideal import mutants as ideal

    harmless = Mutant("ideal-harmless", "ideal", "nothing", "a put that does what it always did",
                      (Patch(IdealQueue, "put", _harmless),))
    monkeypatch.setattr(ideal, "MUTANTS", [*ideal.MUTANTS, harmless])
    code = main(["mutants", "--mutants", "ideal-harmless", "--seeds", "1", "--jobs", "1", "--no-progress",
                 "--out", str(tmp_path / "h")])
    out = capsys.readouterr().out
    assert code == 1
    assert "caught 0 of 1" in out and "NOT CAUGHT: ideal-harmless" in out, out


def test_a_control_run_called_invalid_is_a_false_alarm_and_fails_the_hunt(tmp_path, monkeypatch):
    from lab.backends.ideal import mutants as ideal

    # the design itself broken: the unmutated runs must then raise the alarm
    monkeypatch.setattr(IdealQueue, "ack", ideal._ack_that_redelivers)
    harmless = Mutant("ideal-harmless", "ideal", "nothing", "a put that does what it always did",
                      (Patch(IdealQueue, "put", _harmless),))
    monkeypatch.setattr(ideal, "MUTANTS", [*ideal.MUTANTS, harmless])
    result = hunt(names=["ideal-harmless"], seeds=1, jobs=1, shrink_runs=1, out=tmp_path / "h", progress=False,
                  echo=lambda _: None)
    assert result.hunts[0].caught is not None
    assert len(result.false_alarms) == 1 and not result.passed
    assert any(line.startswith("FALSE ALARM: INVALID") for line in report_lines(result))


@pytest.mark.parametrize("argv, message", [
    (["--mutants", "ideal-no-such-bug"], "no mutant 'ideal-no-such-bug'"),
    (["--backends", "nosuch"], "unknown backend 'nosuch'"),
    (["--seeds", "0"], "--seeds 0: use 1 or more"),
])
def test_a_mistake_in_the_command_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "h"
    assert main(["mutants", *argv, "--no-progress", "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_scenario_whose_fault_start_is_a_range_becomes_the_time_its_seed_draws():
    from lab.experiments.hunt import scenario_mapping

    for seed in (1, 2):
        drawn = load_workload("crash-one").with_seed(seed).faults[0].at
        (entry,) = scenario_mapping("crash-one", seed)["faults"]
        assert entry["at"] == drawn and isinstance(drawn, float)
        assert parse_workload(scenario_mapping("crash-one", seed)).with_seed(seed).faults == \
            load_workload("crash-one").with_seed(seed).faults


def test_a_live_run_keeps_its_server_logs_and_they_show_the_mutant_planted_in_the_server_process(tmp_path):
    """The live world's server processes plant the mutant from the test hook, and the run
    keeps their logs beside its samples (the servers' folder is temporary)."""
    w = parse_workload({**SHORT, "duration": 0.5, "warmup": 0.1})
    with plant("kestrel-open-reads-time-out-at-once") as m:
        result = run(w, "kestrel", "live", seed=1, out=tmp_path / "m", progress=False, options=dict(m.options))
    log = (result.run_dir / "servers" / "kestrel.log").read_text()
    assert "lab: mutant kestrel-open-reads-time-out-at-once planted" in log
    assert result.verdict == "invalid" and "duplicate" in result.check.reason, result.check.line()
    control = run(w, "kestrel", "live", seed=1, out=tmp_path / "c", progress=False, options=dict(m.options))
    assert "planted" not in (control.run_dir / "servers" / "kestrel.log").read_text()
    assert control.verdict == "valid", control.check.line()


def test_the_list_names_each_mutant_its_promise_and_its_first_scenarios_and_runs_nothing(tmp_path, capsys):
    out = tmp_path / "h"
    assert main(["mutants", "--list", "--backends", "ideal", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ideal-skips-the-head  (ideal)\n  breaks: FIFO per queue\n" in text
    assert "tried first: burst-reliable" in text and "ideal-ack-redelivers" in text
    assert not out.exists()
