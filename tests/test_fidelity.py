"""`lab fidelity`: one workload live and in the calibrated sim, side by side, with each
world's saturation and load points at fractions of the live one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lab.cli import main
from lab.experiments.fidelity import GOAL, fidelity, format_table
from lab.workloads.spec import parse_workload

CALIBRATION = {"cores": 1, "default": {"dist": "const", "us": 40},
               "network": {"dist": "constant", "ms": 0.03}}


@pytest.fixture
def calibration(tmp_path):
    path = tmp_path / "calibration.yaml"
    path.write_text(yaml.safe_dump(CALIBRATION))
    return path


def test_fidelity_runs_both_worlds_and_holds_each_row_to_the_goal(tmp_path, calibration):
    workload = parse_workload({"name": "tiny", "rate": 500, "duration": 0.6, "warmup": 0.2, "seed": 2}, "<test>")
    table = fidelity("ideal", workload, str(calibration), fractions=(0.5,), ramp_duration=0.4,
                     out=tmp_path / "fid", progress=False, echo=lambda line: None)
    assert [p.name for p in table.points] == ["tiny", "50% of sat."]
    saved = json.loads((tmp_path / "fid" / "fidelity.json").read_text())
    assert (tmp_path / "fid" / "fidelity.png").stat().st_size > 10_000
    for point, row in zip(table.points, saved["points"]):
        assert row["name"] == point.name
        for world in ("live", "sim"):
            manifest = json.loads((Path(row["runs"][world]) / "manifest.json").read_text())
            assert manifest["world"] == world
            assert row[world]["put_p50_ns"] == manifest["summary"]["measured"]["put"]["p50_ns"]
        ratio = row["sim"]["put_p50_ns"] / row["live"]["put_p50_ns"]
        assert row["ratio"]["put_p50"] == pytest.approx(ratio)
        assert row["meets_goal"]["put_p50"] == (abs(ratio - 1) <= GOAL["p50"])
    # the sim's put is two constant 30 µs hops and a 40 µs service when nothing queues
    assert saved["points"][0]["sim"]["put_p50_ns"] == 100_000
    # the load point runs at half the live saturation throughput, in both worlds
    live_sat = saved["saturation"]["live"]["per_s"]
    assert saved["points"][1]["rate"] == pytest.approx(0.5 * live_sat, rel=0.01)
    # the sim's one core serves a put and a get per message, 40 µs each: at most 12,500 puts/s
    assert 0 < saved["saturation"]["sim"]["per_s"] <= 12_500
    text = format_table(table)
    assert "saturation" in text and "tiny" in text and ("✓" in text or "✗" in text)


def test_fidelity_refuses_a_folder_that_is_not_empty_before_it_runs_anything(tmp_path, calibration):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    workload = parse_workload({"name": "tiny", "duration": 0.2}, "<test>")
    with pytest.raises(ValueError, match="not empty"):
        fidelity("ideal", workload, str(calibration), out=tmp_path / "out", progress=False)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


def test_fidelity_refuses_a_workload_with_faults(tmp_path, calibration):
    workload = parse_workload({"name": "f", "duration": 1, "faults": [{"fault": "pause", "at": 0.1, "duration": 0.1}]},
                              "<test>")
    with pytest.raises(ValueError, match="fault-free"):
        fidelity("ideal", workload, str(calibration), out=tmp_path / "x", progress=False)


@pytest.mark.parametrize("args, error", [
    (["--fractions", "half"], "--fractions"),
    (["--fractions", "0,0.5"], "in (0, 1.5]"),
    (["--ramp-duration", "0"], "--ramp-duration"),
    (["--calibration", "/nonexistent.yaml"], "No such file"),
])
def test_bad_fidelity_arguments_are_one_line_errors(capsys, args, error):
    assert main(["fidelity", "ideal", "steady", *args]) == 2
    err = capsys.readouterr().err
    assert error in err and len(err.strip().splitlines()) == 1
