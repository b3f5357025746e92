"""Where a design's code can be mutated: its sites, and the seeded sample a hunt runs.

A design's mutable code is its package's ``core`` and ``wire`` (a module or a subpackage of
each: ``lab/backends/kestrel/core/queue.py`` is module ``core.queue``); a design with neither
offers every module of its package but its harness parts (serve, load, tools, bench,
cluster, mutants, promises, calibration). A **site** is one change one operator (``operators``) can make there,
named by the module, the operator and the index of the change among that operator's positions
in the module (counted over the whole module, in parso's tree order), with its line. Only a
change inside a function's or method's body is a site: a module's or class's constants are
often imported by name elsewhere, and a copy taken at import would never see the change.

``sites(design)`` lists them in a fixed order (module, operator, index); ``sample`` draws
``n`` of them with a seeded generator, spread round-robin over modules and, within a
module, over operator families; ``mutation(site)`` makes the change and says it in one line.
A site's ``name`` (``kestrel~gen~core.queue~Binary_Add_Sub~17``) re-creates it in any process.
"""

from __future__ import annotations

import functools
import importlib.util
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import parso
from cosmic_ray.ast import ast_nodes

from lab.design.registry import registration
from lab.experiments.generated import operators

MARK = "gen"  # a generated mutant's name: <design>~gen~<module>~<operator>~<index>
SEP = "~"
SURFACES = ("core", "wire")
#: a design's modules that are the harness's, not its algorithm's (``Backend.parts``, promises, calibration)
#: functions that are the sim's, not the design's: a server connection's name for a request in
#: the CPU model (``ServerConnection.request_kind``) changes simulated service times and never
#: what a client sees, so each of its mutants would be a differing survivor that breaks nothing
HARNESS_FUNCTIONS = frozenset({"request_kind"})
HARNESS_PARTS = frozenset({"serve", "load", "tools", "bench", "cluster", "mutants", "promises", "calibration"})


class NoSuchSite(ValueError):
    """A site's name that names no change inside a function body."""


@dataclass(frozen=True)
class Site:
    """One change: ``operator``'s ``index``-th position in ``design``'s module ``module``."""

    design: str
    module: str  # relative to the design's package: "core.queue"
    operator: str
    index: int
    line: int  # where the change is (1-based)
    path: str  # the module's file

    @property
    def name(self) -> str:
        return SEP.join((self.design, MARK, self.module, self.operator, str(self.index)))

    @property
    def where(self) -> str:
        """``lab/backends/kestrel/core/queue.py:120`` (relative to the working folder when under it)."""
        path = Path(self.path)
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            pass
        return f"{path}:{self.line}"


@dataclass(frozen=True)
class Mutation:
    """A site's change made: the mutated module's source, the outermost function around the
    change (``owner_path``: the classes from the module down, then its name), and the change
    in one line."""

    site: Site
    source: str
    mutated: str
    owner_path: tuple[str, ...]
    def_line: int  # the line of its ``def`` (or ``async def``) keyword
    def_column: int
    def_code: str  # the mutated function alone, from its ``def`` (no decorators, no indent on line one)
    decorated_line: int  # its first decorator's line (its code's co_firstlineno), else def_line
    before: str
    after: str

    @property
    def change(self) -> str:
        return f"{self.before} -> {self.after}"


def is_generated(name: str) -> bool:
    return f"{SEP}{MARK}{SEP}" in name


def parse_name(name: str) -> tuple[str, str, str, int]:
    """``kestrel~gen~core.queue~NumberReplacer~17`` -> (design, module, operator, index); NoSuchSite if malformed."""
    parts = name.split(SEP)
    if len(parts) != 5 or parts[1] != MARK or not parts[4].isdigit():
        raise NoSuchSite(f"{name!r} is not a generated mutant's name (<design>~gen~<module>~<operator>~<index>, "
                         f"e.g. kestrel~gen~core.queue~NumberReplacer~17)")
    return parts[0], parts[2], parts[3], int(parts[4])


def design_modules(design: str) -> dict[str, Path]:
    """The design's mutable modules, relative name -> file, in name order."""
    spec = importlib.util.find_spec(registration(design).package)
    if spec is None or not spec.submodule_search_locations:
        return {}  # a lone module, not a package: no core or wire to find
    root = Path(list(spec.submodule_search_locations)[0])  # a namespace package has no __init__.py
    found = {name: path for surface in SURFACES for name, path in _modules_under(root, surface).items()}
    if not found:  # a design laid out otherwise: all of it but the harness's parts
        found = {name: path for name, path in _modules_under(root, "").items()
                 if name.split(".")[0] not in HARNESS_PARTS and name != "__init__"}
    return dict(sorted(found.items()))


def _modules_under(root: Path, surface: str) -> dict[str, Path]:
    if surface and (root / f"{surface}.py").is_file():
        return {surface: root / f"{surface}.py"}
    base = root / surface if surface else root
    if not base.is_dir():
        return {}
    found = {}
    for path in sorted(base.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1] or ["__init__"]
        found[".".join(parts)] = path
    return found


def sites(design: str) -> list[Site]:
    """Every site of ``design``: module by module, operator by operator, index by index."""
    found: list[Site] = []
    for module, path in design_modules(design).items():
        found += _module_sites(design, module, str(path), path.stat().st_mtime_ns)
    return found


def _module_sites(design: str, module: str, path: str, mtime: int) -> list[Site]:
    return [site for name in operators.names() for site in _operator_sites(design, module, path, mtime, name)]


@functools.cache
def _operator_sites(design: str, module: str, path: str, mtime: int, op_name: str) -> tuple[Site, ...]:
    op, index, found = operators.operator(op_name), 0, []
    for node in _nodes(path, mtime):
        for start, _end in op.mutation_positions(node):
            outer = _outermost_def(node)
            if outer is not None and outer.name.value not in HARNESS_FUNCTIONS and not _unpacking(op_name, node):
                found.append(Site(design, module, op_name, index, start[0], path))
            index += 1  # counted as cosmic-ray counts, so that a name's index is its position
    return tuple(found)


@functools.cache
def _nodes(path: str, _mtime: int) -> tuple[Any, ...]:
    """The module's parse tree, every node in tree order (read only: a mutation parses afresh)."""
    return tuple(ast_nodes(parso.parse(_read(path))))


def sample(design: str, n: int, seed: int) -> list[Site]:
    """``n`` sites of ``design`` (all of them if it has fewer), drawn by
    ``random.Random(f"generate:{design}:{seed}")``: modules in turn, and in each module its
    operator families in turn, a random site of the family each time; listed in site order."""
    every = sites(design)
    rng = random.Random(f"generate:{design}:{seed}")
    by_module: dict[str, dict[str, list[Site]]] = {}
    for site in every:
        by_module.setdefault(site.module, {}).setdefault(operators.family(site.operator), []).append(site)
    order_of: dict[str, list[str]] = {}
    for module, families in by_module.items():
        for group in families.values():
            rng.shuffle(group)
        order_of[module] = sorted(families)
        rng.shuffle(order_of[module])
    modules = list(by_module)
    rng.shuffle(modules)
    chosen: list[Site] = []
    while len(chosen) < n and modules:
        for module in list(modules):
            queue = order_of[module]  # this module's families, the next one first
            if not queue:
                modules.remove(module)
                continue
            if len(chosen) == n:
                break
            family = queue.pop(0)
            chosen.append(by_module[module][family].pop())
            if by_module[module][family]:
                queue.append(family)  # to the back of the queue
    order = {site: i for i, site in enumerate(every)}
    return sorted(chosen, key=order.__getitem__)


def find(name: str) -> Site:
    """The site a generated mutant's name names; NoSuchSite saying why not."""
    design, module, op_name, index = parse_name(name)
    path = design_modules(design).get(module)
    if path is None:
        raise NoSuchSite(f"{name}: {design} has no mutable module {module!r} "
                         f"(it has: {', '.join(design_modules(design)) or 'none'})")
    if op_name not in operators.names():
        raise NoSuchSite(f"{name}: no operator {op_name!r} (e.g. {', '.join(operators.names()[-5:])})")
    for site in _operator_sites(design, module, str(path), path.stat().st_mtime_ns, op_name):
        if site.index == index:
            return site
    raise NoSuchSite(f"{name}: {op_name} has no position {index} inside a function body of {module}")


def mutation(site: Site) -> Mutation:
    """Make ``site``'s change on a fresh parse of its module."""
    source = _read(site.path)
    module = parso.parse(source)
    op, count = operators.operator(site.operator), 0
    for node in list(ast_nodes(module)):
        for position, _ in enumerate(op.mutation_positions(node)):
            if count == site.index:
                try:
                    new = op.mutate(node, position)
                except Exception as e:  # noqa: BLE001 (an operator that offers a change it cannot make)
                    raise NoSuchSite(f"{site.name}: {site.operator} cannot make this change "
                                     f"({type(e).__name__}: {e})") from e
                return _made(site, source, module, node, new)
            count += 1
    raise NoSuchSite(f"{site.name}: the module has changed since the site was listed")


def _made(site: Site, source: str, module: Any, node: Any, new: Any) -> Mutation:
    function = _outermost_def(node)
    if function is None:
        raise NoSuchSite(f"{site.name}: not inside a function body")
    parent = node.parent
    if new is not node:
        at = parent.children.index(node)
        if new is None:
            del parent.children[at]
        else:
            new.parent = parent
            parent.children[at] = new
    mutated = module.get_code()
    head = function.parent if function.parent.type in ("async_funcdef", "async_stmt") else function
    decorated = head.parent if head.parent.type == "decorated" else None
    before, after = _first_difference(source.splitlines(), mutated.splitlines(), site.line)
    return Mutation(site, source, mutated, _owner_path(function), head.start_pos[0], head.start_pos[1],
                    head.get_code(include_prefix=False), decorated.start_pos[0] if decorated else head.start_pos[0],
                    before, after)


def _outermost_def(node: Any) -> Any:
    """The outermost function whose body holds ``node`` (None: module or class level)."""
    outermost, child, parent = None, node, node.parent
    while parent is not None:
        if parent.type == "funcdef" and child is parent.children[-1]:
            outermost = parent
        child, parent = parent, parent.parent
    return outermost


def _unpacking(op_name: str, node: Any) -> bool:
    """A dict display's ``**mapping``, which cosmic-ray takes for the power operator (its
    replacement would not compile)."""
    return op_name.startswith("Binary_Pow_") and node.parent is not None and node.parent.type == "dictorsetmaker"


def _owner_path(function: Any) -> tuple[str, ...]:
    path = [function.name.value]
    parent = function.parent
    while parent is not None:
        if parent.type == "classdef":
            path.append(parent.name.value)
        parent = parent.parent
    return tuple(reversed(path))


def _first_difference(old: list[str], new: list[str], near: int) -> tuple[str, str]:
    """The first line that differs, from the change's own line on, before and after (stripped)."""
    start = max(near - 1, 0)
    for i in range(start, max(len(old), len(new))):
        a = old[i] if i < len(old) else ""
        b = new[i] if i < len(new) else ""
        if a != b:
            return a.strip(), b.strip()
    return (old[start].strip() if start < len(old) else ""), (new[start].strip() if start < len(new) else "")


def _read(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")
