"""Design cores reach time, randomness, disk and network only through the Runtime: a walk
of the imports proves it.

For every module of a ``lab/backends/*/core/`` package (and a single-file ``core.py``),
and of a ``wire/`` package (sans-IO: the same rule holds for protocol handlers),
the walk follows each import through the project's own modules (``lab.*``), including
the packages Python runs on the way (``lab/__init__.py``, ``lab/backends/__init__.py``,
...), lazy imports inside functions too, and refuses any module named in ``FORBIDDEN``
reached directly or through another project module. Imports under ``if TYPE_CHECKING:``
are skipped: they never run; so is a package's module-level ``__getattr__`` (PEP 562),
which runs only when a caller asks for a name it loads lazily (Queuefka's package loads
its plain-file library that way). Third-party and standard-library modules are not walked
into (``logging`` uses threads; a core may log).

``lab.design.runtime`` is the port and is walked like any module, with one exception: its
``from asyncio import CancelledError`` (the name of cancellation both worlds raise).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

FORBIDDEN = {"asyncio", "socket", "time", "random", "os", "threading", "gc", "simpy", "selectors", "uvloop",
             "models"}
#: (module, imported module, names): the only forbidden imports allowed, exactly as written.
ALLOWED = {("lab.design.runtime", "asyncio", ("CancelledError",))}
ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ROOT / "lab" / "backends"
PROJECT = ("lab",)  # walked into; "models" is refused before it would be


@dataclass(frozen=True)
class Import:
    module: str  # absolute name of what is imported
    names: tuple[str, ...]  # for ``from m import a, b``; () for ``import m``
    line: int


def core_files(backends: Path = BACKENDS) -> list[Path]:
    """Every module of a core/ or wire/ package, every single-file core.py, and the wire
    protocol the designs share (``lab/design/http.py`` and its rooms, ``http_*.py``)."""
    shared = sorted((backends.parent / "design").glob("http*.py")) if backends == BACKENDS else []
    return sorted(backends.glob("*/core/*.py")) + sorted(backends.glob("*/core.py")) + sorted(
        backends.glob("*/wire/*.py")) + shared


def module_name(path: Path, root: Path) -> str:
    parts = list(path.resolve().relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_file(name: str, root: Path) -> Path | None:
    """The source file of a project module, or None if it is no module of the project."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path, name: str) -> list[Import]:
    """Every import ``path`` runs (module-level or in a function), absolute; not the ones
    under ``if TYPE_CHECKING:``."""
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, top: bool = False) -> None:
        if top and isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, (), node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: from the package this module is in
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                module = ".".join(package + ([module] if module else []))
            found.append(Import(module, tuple(alias.name for alias in node.names), node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    for statement in ast.parse(path.read_text(), filename=str(path)).body:
        visit(statement, top=True)
    return found


def _run_modules(imported: Import, root: Path) -> list[str]:
    """The project modules an import runs: the module, the packages above it, and for
    ``from package import sub`` each submodule named."""
    parts = imported.module.split(".")
    out = [".".join(parts[: i + 1]) for i in range(len(parts))]
    out += [f"{imported.module}.{n}" for n in imported.names if module_file(f"{imported.module}.{n}", root)]
    return out


def forbidden_chains(start: Path, root: Path = ROOT, project: tuple[str, ...] = PROJECT) -> list[str]:
    """Each forbidden module ``start`` reaches, as ``start -> module -> ... -> forbidden``
    (the first path found to it); [] if the module is pure."""
    first = module_name(start, root)
    backends = (root / "lab" / "backends").resolve()
    label = str(start.resolve().relative_to(backends if start.resolve().is_relative_to(backends) else root))
    # the packages Python runs before the module itself
    parents = [".".join(first.split(".")[:i]) for i in range(1, len(first.split(".")))]
    todo: list[tuple[str, list[str]]] = [(p, [label, p]) for p in parents] + [(first, [label])]
    seen = set(parents) | {first}
    chains: list[str] = []
    while todo:
        name, chain = todo.pop(0)
        path = module_file(name, root)
        if path is None:
            continue
        for imported in imports_of(path, name):
            top = imported.module.split(".")[0]
            if top in FORBIDDEN:
                if (name, imported.module, imported.names) not in ALLOWED:
                    chains.append(" -> ".join(chain + [imported.module]) + f" (line {imported.line})")
                continue
            if top not in project:
                continue  # standard library or third party: not walked into
            for module in _run_modules(imported, root):
                if module not in seen:
                    seen.add(module)
                    todo.append((module, chain + [module]))
    return chains


def test_there_are_cores_to_scan():
    designs = {p.parent.parent.name if p.parent.name in ("core", "wire") else p.parent.name
               for p in core_files() if BACKENDS in p.parents}
    assert {"kestrel", "queuefka", "ideal"} <= designs


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_core_reaches_no_os_clock_or_world(path):
    assert forbidden_chains(path) == []


def test_the_port_is_walked_and_allows_only_the_name_of_cancellation():
    runs = [(i.module, i.names) for i in imports_of(ROOT / "lab" / "design" / "runtime.py", "lab.design.runtime")
            if i.module.split(".")[0] in FORBIDDEN]
    assert runs == [("asyncio", ("CancelledError",))]
    assert forbidden_chains(ROOT / "lab" / "design" / "runtime.py") == []


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "lab" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_walk_catches_an_indirect_import(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "backends/__init__.py": "",
        "backends/toy/__init__.py": "",
        "backends/toy/core/__init__.py": "",
        "backends/toy/core/queue.py": "from lab.backends.toy.core.journal import Journal\n",
        "backends/toy/core/journal.py": "from . import clock\nclass Journal: pass\n",
        "backends/toy/core/clock.py": "def now():\n    import time\n    return time.time()\n",
    })
    assert forbidden_chains(root / "lab/backends/toy/core/queue.py", root) == [
        "toy/core/queue.py -> lab.backends.toy.core.journal -> lab.backends.toy.core.clock -> time (line 2)"]


def test_the_walk_catches_a_package_run_on_the_way_and_models(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "import random\n",
        "backends/__init__.py": "",
        "backends/toy/__init__.py": "",
        "backends/toy/core/__init__.py": "",
        "backends/toy/core/queue.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import os\n"
                                      "from lab import helpers\n",
        "helpers.py": "from models.world import SimWorld\n",
    })
    assert forbidden_chains(root / "lab/backends/toy/core/queue.py", root) == [
        "toy/core/queue.py -> lab -> random (line 1)",
        "toy/core/queue.py -> lab.helpers -> models.world (line 1)",
    ]


def test_the_exception_is_one_import_of_the_port_only(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "design/__init__.py": "",
        "design/runtime.py": "from asyncio import CancelledError, sleep\n",
        "backends/__init__.py": "",
        "backends/toy/__init__.py": "",
        "backends/toy/core/__init__.py": "from asyncio import CancelledError\nfrom lab.design import runtime\n",
    })
    assert forbidden_chains(root / "lab/backends/toy/core/__init__.py", root) == [
        "toy/core/__init__.py -> asyncio (line 1)",
        "toy/core/__init__.py -> lab.design.runtime -> asyncio (line 1)",
    ]
