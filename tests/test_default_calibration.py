"""An uncalibrated design runs on the lab's stated default CPU model (ideal's calibration), not
on zero CPU time; ``--calibration none`` still means no CPU model; a calibrated design keeps its own."""

from __future__ import annotations

from lab.experiments.run_spec import RunSpec
from lab.workloads.spec import load_workload

from tests.plugins import installed
from tests.test_conform import _toy


def test_a_design_without_calibration_runs_on_the_lab_default_and_says_so(tmp_path):
    with installed(_toy(tmp_path)):
        spec = RunSpec.resolve(load_workload("steady"), "toyq")
        none = RunSpec.resolve(load_workload("steady"), "toyq", calibration="none")
    model, source = spec.calibration.model, spec.calibration.source
    assert model is not None and model.for_kind("Put") is not None
    assert model.for_kind("a kind ideal never measured") is not None  # the default covers every kind
    assert source.startswith("the lab's default CPU model: ideal's calibration")
    assert "toyq has no calibration.yaml — run `lab calibrate toyq`" in source
    assert none.calibration.model is None and none.calibration.source == "none"


def test_a_calibrated_design_keeps_its_own():
    spec = RunSpec.resolve(load_workload("steady"), "kestrel")
    assert spec.calibration.source.endswith("kestrel/calibration.yaml")
