"""One registry: a design is named outside its own folder only in ``lab.design.registry.REGISTRY``,
and the `lab` command finds its servers, tools and benchmarks there."""

from __future__ import annotations

import ast
from pathlib import Path

from lab.design.registry import REGISTRY, backend_class, design_module
from lab.cli import build_parser

LAB = Path(__file__).resolve().parents[1] / "lab"
MODELS = LAB.parent / "models"


def mentions(path: Path, designs: set[str]) -> list[str]:
    """Imports of a design's modules and string constants that are a design's name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                parts = name.split(".")
                if parts[:2] == ["lab", "backends"] and len(parts) > 2 and parts[2] in designs:
                    found.append(f"{path.name}:{node.lineno} imports {name}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in designs:
            found.append(f"{path.name}:{node.lineno} names {node.value!r}")
    return found


def test_only_the_registry_names_a_design_outside_its_folder():
    designs = set(REGISTRY)
    registry = LAB / "design" / "registry.py"
    own = {(room, d) for d in designs for room in ("backends", "peers")}
    outside = [p for p in sorted(LAB.rglob("*.py")) + sorted(MODELS.rglob("*.py"))
               if p != registry and p.relative_to(LAB.parent).parts[1:3] not in own]
    assert len(outside) > 20
    assert [m for p in outside for m in mentions(p, designs)] == []


def test_the_scan_sees_an_import_and_a_name(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("from lab.backends.kestrel.client import C\ncolour = {'queuefka': 1}\n")
    assert mentions(bad, {"kestrel", "queuefka"}) == ["x.py:1 imports lab.backends.kestrel.client",
                                                       "x.py:2 names 'queuefka'"]


def test_the_cli_is_built_from_the_registry():
    parser = build_parser()
    commands = next(a for a in parser._subparsers._group_actions).choices
    serve = commands["serve"]._subparsers._group_actions[0].choices
    bench = commands["bench"]._subparsers._group_actions[0].choices
    for name in REGISTRY:
        backend_class(name)  # every entry names a real Backend
        assert (name in serve) == (design_module(name, "serve") is not None)
        assert (name in bench) == (design_module(name, "bench") is not None)
        assert (name in commands) == (design_module(name, "tools") is not None)
    assert {"kestrel", "queuefka"} <= set(serve) and "kestrel" in commands
