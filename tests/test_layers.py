"""The lab's rooms stand one above the other (issue 31): every import between modules of
``lab``, ``models`` and ``loadgen`` is walked — at module level, inside functions and under
``TYPE_CHECKING`` alike, since an annotation-only import still ties two rooms — and the test
fails on an import circle, on an arrow that points up a layer, and on a design reaching past
the design API, naming the import. ``docs/architecture.md`` explains the layers. A module is
private or public as a whole (h11's convention): no module imports an underscore name of another."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lab", "models", "loadgen")

#: The layers, lowest first: a module may import its own layer and those below it. The
#: longest prefix that matches a module's name gives its layer.
LAYERS: dict[str, int] = {
    "lab": 0,  # the package's own docstring and version
    "lab.design": 1,  # the design API: the port, the driver interface, promises, options, wire
    "lab.worlds": 2,  # the worlds that implement the port
    "models": 2,  # ... the sim world among them
    "lab.design.worlds": 3,  # the design API's room above the worlds (server entries, embedded modes)
    "lab.backends": 4,  # the designs
    "lab.peers": 4,  # the real brokers, driven as designs are
    "lab.history": 5,  # what a run records
    "lab.workloads": 6,  # what a run asks for: workloads, faults, the nemesis
    "lab.judge": 7,  # judging a history
    "lab.aggregate": 8,  # Spark over many runs
    "lab.present": 9,  # charts and the report: how results look, drawn by experiments and the report
    "lab.experiments": 10,  # experiments built on runs, and the notebooks' helpers
    "loadgen": 10,  # Locust load: an experiment's load generator
    "lab.cli": 11,  # the commands
}
#: A design's benchmark (``lab bench NAME``) is an experiment that lives in the design's folder.
DESIGN_BENCH = "bench"
DESIGN_API = ("lab.design",)  # what a design may import of the lab, with its own package


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line})"


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def import_base(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` in module ``name`` (at ``path``) imports from, relative levels resolved."""
    base = node.module or ""
    if node.level:
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        here = here[:len(here) - node.level + 1]
        base = ".".join(here + ([node.module] if node.module else []))
    return base


def arrows(known: dict[str, Path]) -> list[Arrow]:
    """Every import from one module of the project to another, resolved to a module."""
    found = []
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = import_base(name, path, node)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in known and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in known and target != name:
                    found.append(Arrow(name, target, node.lineno))
    return found


def layer(module: str) -> int:
    parts = module.split(".")
    if parts[:2] in (["lab", "backends"], ["lab", "peers"]) and len(parts) > 3 and parts[3] == DESIGN_BENCH:
        return LAYERS["lab.experiments"]
    best = max((prefix for prefix in LAYERS if module == prefix or module.startswith(prefix + ".")), key=len)
    return LAYERS[best]


def circles(found: list[Arrow]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for arrow in found:
        graph.setdefault(arrow.source, set()).add(arrow.target)
        graph.setdefault(arrow.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def upward(found: list[Arrow]) -> list[str]:
    return [f"{arrow}: layer {layer(arrow.source)} imports layer {layer(arrow.target)}"
            for arrow in found if layer(arrow.target) > layer(arrow.source)]


def past_the_api(found: list[Arrow]) -> list[str]:
    """Imports of the lab by a design's modules that are neither its own package nor the API."""
    bad = []
    for arrow in found:
        parts = arrow.source.split(".")
        if parts[:2] not in (["lab", "backends"], ["lab", "peers"]) or len(parts) < 3 or layer(arrow.source) != 4:
            continue
        own = ".".join(parts[:3])
        target = arrow.target
        if target == own or target.startswith(own + "."):
            continue
        if any(target == api or target.startswith(api + ".") for api in DESIGN_API) and target != "lab.design.registry":
            continue
        bad.append(f"{arrow}: a design imports only lab.design and its own package")
    return bad


def private(name: str) -> bool:
    """An underscore name; a dunder (``__version__``) is not one."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def underscore_imports(known: dict[str, Path]) -> list[str]:
    """Every ``from M import _x`` and every ``M._x`` on an imported module ``M``, where ``M`` is another
    module of the project (at module level or inside a function). A private submodule is no such name."""
    bad = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        bound: dict[str, str] = {}  # a name in this file -> the module it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    module = alias.name if alias.asname else alias.name.split(".")[0]  # import a.b binds a
                    bound[alias.asname or module] = module
            elif isinstance(node, ast.ImportFrom):
                base = import_base(name, path, node)
                for alias in node.names:
                    if f"{base}.{alias.name}" in known:
                        bound[alias.asname or alias.name] = f"{base}.{alias.name}"
                    elif private(alias.name) and base in known and base != name:
                        bad.append(f"{name} (line {node.lineno}): from {base} import {alias.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and private(node.attr):
                chain, value = [], node.value
                while isinstance(value, ast.Attribute):
                    chain.append(value.attr)
                    value = value.value
                if isinstance(value, ast.Name) and value.id in bound:
                    module = ".".join([bound[value.id], *reversed(chain)])
                    if module in known and module != name:
                        bad.append(f"{name} (line {node.lineno}): {module}.{node.attr}")
    return bad


KNOWN = modules()
ARROWS = arrows(KNOWN)


def test_the_walk_sees_the_project():
    assert len(KNOWN) > 150 and len(ARROWS) > 500
    assert {"lab.design", "lab.experiments.runner", "models.world", "loadgen.locustfile"} <= set(KNOWN)


def test_no_import_circle():
    assert circles(ARROWS) == []


def test_no_arrow_points_up_a_layer():
    assert upward(ARROWS) == []


def test_a_design_imports_only_the_design_api():
    assert past_the_api(ARROWS) == []


def test_no_module_imports_an_underscore_name_of_another():
    """Modules are private or public as a whole (h11's convention): a name another module needs is
    part of its module's interface, and has a public name there."""
    assert underscore_imports(KNOWN) == []


def test_every_module_has_a_layer():
    assert all(layer(name) >= 0 for name in KNOWN)
    assert [p for p in sorted((ROOT / "lab").iterdir()) if p.name != "__pycache__"].__len__() <= 12


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {k: v for k, v in modules(tmp_path).items()}


def test_the_walk_names_a_circle_an_upward_arrow_and_a_design_past_the_api(tmp_path):
    known = _tree(tmp_path, {
        "lab/__init__.py": "",
        "lab/design/__init__.py": "",
        "lab/design/runtime.py": "",
        "lab/judge/__init__.py": "",
        "lab/judge/verdict.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lab.judge import order\n",
        "lab/judge/order.py": "from .verdict import x\n",
        "lab/history/__init__.py": "",
        "lab/history/record.py": "def f():\n    from lab.judge.verdict import judge\n",
        "lab/backends/__init__.py": "",
        "lab/backends/toy/__init__.py": "",
        "lab/backends/toy/driver.py": "from lab.design import runtime\nfrom lab.history.record import f\n",
        "lab/backends/toy/bench.py": "from lab.history.record import f\n",
    })
    found = arrows(known)
    assert circles(found) == [["lab.judge.order", "lab.judge.verdict"]]
    assert sorted(upward(found)) == ["lab.backends.toy.driver -> lab.history.record (line 2): layer 4 imports layer 5",
                                     "lab.history.record -> lab.judge.verdict (line 2): layer 5 imports layer 7"]
    assert past_the_api(found) == ["lab.backends.toy.driver -> lab.history.record (line 2): "
                                   "a design imports only lab.design and its own package"]


def test_the_walk_names_an_underscore_import(tmp_path):
    known = _tree(tmp_path, {
        "lab/__init__.py": "__version__ = '1'\n",
        "lab/design/__init__.py": "from lab import __version__\n",
        "lab/design/http.py": "_HEAD = 0\nclass _Message:\n    pass\nx = _Message()._slot\n",
        "lab/design/_private.py": "",
        "lab/design/http_server.py": "from lab.design.http import _HEAD, x\nfrom lab.design import _private\n"
                                     "from . import http as wire\ny = wire._Message\n",
        "lab/cli/__init__.py": "def f():\n    import lab.design.http\n"
                               "    return lab.design.http._HEAD, lab.design.http.x\n",
    })
    assert sorted(underscore_imports(known)) == ["lab.cli (line 3): lab.design.http._HEAD",
                                                 "lab.design.http_server (line 1): from lab.design.http import _HEAD",
                                                 "lab.design.http_server (line 4): lab.design.http._Message"]


@pytest.mark.parametrize("path", sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_source_file_over_450_lines(path):
    assert len(path.read_text().splitlines()) <= 450
