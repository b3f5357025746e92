"""Conformance, the static room: a design's core/ and wire/ reach time, randomness, disk and
network only through the Runtime — proved by a walk of their imports, without running them.

For every module of a design's ``core/`` package (or single-file ``core.py``) and ``wire/``
package (sans-IO: the same rule holds for protocol handlers), the walk follows each import
through the project's own modules — the lab's (``lab.*``) and the design's own package —
including the packages Python runs on the way and lazy imports inside functions, and refuses
any module named in ``FORBIDDEN`` reached directly or through another project module. Imports
under ``if TYPE_CHECKING:`` never run and are skipped; so is a package's module-level
``__getattr__`` (PEP 562), which runs only when a caller asks for a name it loads lazily.
Third-party and standard-library modules are not walked into (``logging`` uses threads; a core
may log). ``lab.design.runtime`` is the port and is walked like any module, with one exception
(``ALLOWED``): its ``from asyncio import CancelledError``, the name of cancellation both worlds
raise. ``tests/test_core_purity.py`` runs the same walk over every built-in design.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

FORBIDDEN = {"asyncio", "socket", "time", "random", "os", "threading", "gc", "simpy", "selectors", "uvloop",
             "models"}
#: (module, imported module, names): the only forbidden imports allowed, exactly as written.
ALLOWED = {("lab.design.runtime", "asyncio", ("CancelledError",))}
ROOT = Path(__file__).resolve().parents[3]  # the folder that holds the ``lab`` package
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


def design_core_files(package_dir: Path) -> list[Path]:
    """One design's modules held to the rule: its core/ (or core.py) and wire/."""
    return sorted(package_dir.glob("core/*.py")) + sorted(package_dir.glob("core.py")) + sorted(
        package_dir.glob("wire/*.py"))


def module_name(path: Path, root: Path) -> str:
    parts = list(path.resolve().relative_to(root.resolve()).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_file(name: str, root: Path | tuple[Path, ...]) -> Path | None:
    """The source file of a project module under ``root`` (or the first of several roots),
    or None if it is no module of the project."""
    for base_root in (root,) if isinstance(root, Path) else root:
        base = base_root.joinpath(*name.split("."))
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
            for branch in node.orelse:
                visit(branch)
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


def _run_modules(imported: Import, roots: tuple[Path, ...]) -> list[str]:
    """The project modules an import runs: the module, the packages above it, and for
    ``from package import sub`` each submodule named."""
    parts = imported.module.split(".")
    out = [".".join(parts[: i + 1]) for i in range(len(parts))]
    out += [f"{imported.module}.{n}" for n in imported.names if module_file(f"{imported.module}.{n}", roots)]
    return out


def forbidden_chains(start: Path, root: Path = ROOT, project: tuple[str, ...] = PROJECT,
                     also: tuple[Path, ...] = ()) -> list[str]:
    """Each forbidden module ``start`` (a module under ``root``) reaches, as
    ``start -> module -> ... -> forbidden`` (the first path found to it); [] if it is pure.
    ``also``: more folders that hold project packages (the lab's, for a design installed
    elsewhere)."""
    roots = (root, *also)
    first = module_name(start, root)
    backends = (root / "lab" / "backends").resolve()
    resolved = start.resolve()
    label = str(resolved.relative_to(backends if resolved.is_relative_to(backends) else root.resolve()))
    # the packages Python runs before the module itself
    parents = [".".join(first.split(".")[:i]) for i in range(1, len(first.split(".")))]
    todo: list[tuple[str, list[str]]] = [(p, [label, p]) for p in parents] + [(first, [label])]
    seen = set(parents) | {first}
    chains: list[str] = []
    while todo:
        name, chain = todo.pop(0)
        path = module_file(name, roots)
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
            for module in _run_modules(imported, roots):
                if module not in seen:
                    seen.add(module)
                    todo.append((module, chain + [module]))
    return chains


def package_dir(package: str) -> Path:
    """The folder of an importable package (a namespace package's first folder), found
    without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{package!r} is no importable package")
    return Path(list(spec.submodule_search_locations)[0])


def purity(package: str, folder: Path | None = None) -> tuple[list[Path], list[str]]:
    """The core/wire files of the design in ``package`` (found by import, or ``folder``) and
    every forbidden import chain among them."""
    folder = folder if folder is not None else package_dir(package)
    files = design_core_files(folder)
    depth = len(package.split("."))
    root = folder.resolve().parents[depth - 1]  # the folder ``package``'s first name lives in
    top = package.split(".")[0]
    project = tuple(dict.fromkeys((*PROJECT, top)))
    chains = [c for f in files for c in forbidden_chains(f, root, project, also=(ROOT,))]
    return files, chains
