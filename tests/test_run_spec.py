"""One run, resolved once (``lab.experiments.run_spec``): a `lab run` resolves the design's
class, checks its options and asks its promises once; the manifest is the spec written out,
and a judged run is judged again from its folder alone; and nothing outside the registry
asks a world or a design whether it has a member (an AST walk)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from lab.cli import main
from lab.design import backend as backend_module
from lab.design.promises import Promised, Promises
from lab.design.registry import REGISTRY
from lab.experiments.run_spec import RunSpec
from lab.history.record import read_samples
from lab.judge.checker import check
from lab.judge.findings import Verdict
from lab.judge.verdict import RunFacts
from lab.workloads.errors import WorkloadError
from lab.workloads.spec import load_workload

ROOT = Path(__file__).resolve().parents[1]
SHORT = {"name": "short", "queues": 1, "producers": 1, "consumers": 1, "message_size": 100, "rate": 500,
         "duration": 0.5, "warmup": 0.1, "ack": "reliable", "seed": 3}


def test_one_lab_run_resolves_the_design_once_and_checks_its_options_once(tmp_path, monkeypatch, capsys):
    import sys

    import lab.cli
    import lab.experiments.runner  # noqa: F401  (imported, so that its lookups are counted too)
    from lab.design import registry

    counts = {"resolved": 0, "checked": 0, "promised": 0}
    running = [False]  # counted from the command's start: the parser lists every design's commands first
    resolve, check_options = registry.backend_class, backend_module.check

    def counting_resolve(name):
        counts["resolved"] += running[0] and name == "kestrel"
        cls = resolve(name)
        if name == "kestrel" and not hasattr(cls.promised.rule, "counted"):
            original = cls.promised

            def rule(options, reliable):
                counts["promised"] += running[0]
                return original.under(options, reliable, cls.name)

            rule.counted = True
            monkeypatch.setattr(cls, "promised", Promised(rule, original.option_sets))
        return cls

    def counting_check(*args, **kwargs):
        counts["checked"] += running[0]
        return check_options(*args, **kwargs)

    for module in list(sys.modules.values()):  # every module that bound the registry's lookup by name
        if getattr(module, "backend_class", None) is resolve and module.__name__.startswith("lab"):
            monkeypatch.setattr(module, "backend_class", counting_resolve)
    monkeypatch.setattr(backend_module, "check", counting_check)
    command = lab.cli.COMMANDS["run"]

    def counted(args):
        running[0] = True
        return command(args)

    monkeypatch.setitem(lab.cli.COMMANDS, "run", counted)
    workload = tmp_path / "short.yaml"
    workload.write_text(json.dumps(SHORT))
    assert main(["run", str(workload), "--backend", "kestrel", "--option", "syncJournal=always", "--no-progress",
                 "--out", str(tmp_path / "run")]) == 0
    assert "checker: VALID" in capsys.readouterr().out
    assert counts == {"resolved": 1, "checked": 1, "promised": 1}


def test_the_manifest_is_the_spec_written_out_and_a_run_is_judged_again_from_its_folder_alone(tmp_path):
    from lab.experiments.runner import run

    result = run(load_workload("crash"), "kestrel", "sim", out=tmp_path / "run", progress=False)
    assert result.verdict is Verdict.ALLOWED, result.check.line()
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert {k: manifest[k] for k in ("backend", "options", "world", "seed")} == {
        "backend": "kestrel", "options": dict(result.spec.options), "world": "sim", "seed": 3}
    assert Promises.from_dict(manifest["promises"]) == result.spec.promises
    assert manifest["calibration"].endswith("kestrel/calibration.yaml")
    entry = REGISTRY["kestrel"]
    del REGISTRY["kestrel"]  # the design is gone: the manifest alone must do
    try:
        again = check(read_samples(result.run_dir), RunFacts.from_manifest(manifest))
    finally:
        REGISTRY["kestrel"] = entry
    assert (again.verdict, again.reason) == (result.verdict, result.check.reason)
    assert json.loads(json.dumps(again.to_dict()["explanations"])) == manifest["verdict"]["explanations"]


def test_the_seed_is_applied_once_to_the_workload_and_the_calibration_loaded_once(tmp_path):
    spec = RunSpec.resolve(load_workload("crash"), "kestrel", seed=11, calibration="none")
    assert spec.seed == spec.workload.seed == 11 and spec.calibration.model is None
    default = RunSpec.resolve(load_workload("steady"), "kestrel")
    assert default.calibration.model is not None and default.calibration.source.endswith("calibration.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("not: a calibration\n")
    with pytest.raises(WorkloadError, match="calibration"):
        RunSpec.resolve(load_workload("steady"), "kestrel", calibration=str(bad))
    with pytest.raises(WorkloadError, match="live world has a real CPU"):
        RunSpec.resolve(load_workload("steady"), "kestrel", "live", calibration="none")


# ----------------------------------------------------------------------------- no getattr on worlds or designs

# what names a world or a design (its class, an instance, one of its modules) where code asks of one
SUBJECT = re.compile(r"\b(world|the_world|worlds|design|designs|backend|peer|world_class|backend_class|design_module|"
                     r"registration)\b|self\.world\b")


def _asked(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and node.args and SUBJECT.search(ast.unparse(node.args[0]))):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_nothing_outside_the_registry_asks_a_world_or_a_design_whether_it_has_a_member():
    files = [p for folder in ("lab", "models", "loadgen") for p in (ROOT / folder).rglob("*.py")
             if p != ROOT / "lab/design/registry.py"]
    asked = [line for path in files for line in _asked(path)]
    assert asked == [], "ask through a declared interface (lab.design.world.World, Backend.parts ...):\n" + "\n".join(asked)


def test_the_walk_finds_such_a_question(tmp_path):
    (tmp_path / "x.py").write_text("def f(world):\n    return getattr(world, 'settle', None)\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert len(_asked(tmp_path / "x.py")) == 1
    finally:
        ROOT = saved
