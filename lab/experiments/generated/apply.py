"""A site made a ``Mutant``: its one patch replaces the ``__code__`` of the function the change
is in.

The mutated module's source (``sites.mutation``) gives the outermost ``def`` around the change;
that ``def`` alone is compiled with the module's file name and at its own line (blank lines
before it), a method inside a stand-in ``class <its class's name>:`` so that private names are
mangled as in the real class and a zero-argument ``super()`` gets its ``__class__`` cell, and
with the module's ``__future__`` flags. The real function is found by walking module, class,
attribute, and unwrapping ``staticmethod``, ``classmethod``, ``property`` and decorators
(``__wrapped__``, or a closure holding it), checked by its first line. Its ``__code__`` is then
what the patch replaces: every reference to the function runs the mutant, a ``from x import f``
made elsewhere before the planting included. Decorators stay as they are (the change is in a
body). A change that alters the function's free variables cannot be assigned to its
``__code__``: such a site ``CannotPlant``.

A generated mutant runs with the design's strongest promises: the last of its
``promised.option_sets`` (they go weakest to strongest), unless told otherwise.
"""

from __future__ import annotations

import __future__
import importlib
import os
import warnings
from types import CodeType, FunctionType, ModuleType
from typing import Any, Iterator, Mapping

from lab.design.mutants import Mutant, Patch
from lab.design.registry import backend_class, registration
from lab.experiments.generated import sites
from lab.experiments.generated.sites import Mutation, Site

PROMISE = "any it declares (a generated mutant)"


class CannotPlant(ValueError):
    """A site whose change cannot be planted as a new ``__code__``, and why."""


def strongest_options(design: str) -> dict[str, Any]:
    """The last (strongest) of the design's promised option sets; {} if it lists none."""
    option_sets = backend_class(design).promised.option_sets
    return dict(option_sets[-1]) if option_sets else {}


def build(site: Site, options: Mapping[str, Any] | None = None) -> Mutant:
    """``site`` as a ``Mutant`` run with ``options`` (default: the design's strongest); CannotPlant if it cannot be."""
    made = sites.mutation(site)
    module = importlib.import_module(f"{registration(site.design).package}.{site.module}")
    function = original(module, made)
    code = compiled(made, function, module)
    if code.co_freevars != function.__code__.co_freevars:
        raise CannotPlant(f"{site.name}: the change alters {made.owner_path[-1]}'s free variables "
                          f"({function.__code__.co_freevars} -> {code.co_freevars})")
    return Mutant(site.name, site.design, PROMISE, f"{site.where} {site.operator}: {made.change}",
                  (Patch(function, "__code__", code),),
                  options=dict(options) if options is not None else strongest_options(site.design))


def named(name: str) -> Mutant:
    """The generated mutant ``name`` names (``sites.NoSuchSite`` or ``CannotPlant`` saying why not)."""
    return build(sites.find(name))


def original(module: ModuleType, made: Mutation) -> FunctionType:
    """The function object the mutated ``def`` was compiled into when ``module`` was imported."""
    owner: Any = module
    *classes, name = made.owner_path
    for cls in classes:
        owner = vars(owner).get(cls)
        if not isinstance(owner, type):
            raise CannotPlant(f"{made.site.name}: {module.__name__} has no class {'.'.join(classes)} at import")
    want = os.path.realpath(made.site.path)
    for candidate in _unwrapped(vars(owner).get(name)):
        code = candidate.__code__
        if (code.co_name == name and code.co_firstlineno in (made.def_line, made.decorated_line)
                and os.path.realpath(code.co_filename) == want):
            return candidate
    raise CannotPlant(f"{made.site.name}: no function {'.'.join(made.owner_path)} from line {made.def_line} "
                      f"is reachable from {module.__name__} (defined twice, or hidden by a decorator)")


def _unwrapped(value: Any, depth: int = 0) -> Iterator[FunctionType]:
    """The functions behind a class or module attribute: itself, or what a staticmethod,
    classmethod, property, ``functools.wraps`` decorator or closure holds."""
    if value is None or depth > 6:
        return
    if isinstance(value, FunctionType):
        yield value
        for cell in value.__closure__ or ():
            try:
                held = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(held, FunctionType):
                yield from _unwrapped(held, depth + 1)
    inner = [getattr(value, attr, None) for attr in ("__func__", "fget", "fset", "fdel", "func", "__wrapped__")]
    for held in inner:
        if held is not None and held is not value:
            yield from _unwrapped(held, depth + 1)


def compiled(made: Mutation, function: FunctionType, module: ModuleType) -> CodeType:
    """The mutated ``def``'s code object, compiled where the real one was (file, line, class)."""
    body = " " * made.def_column + made.def_code
    if len(made.owner_path) > 1:
        header = f"class {made.owner_path[-2]}:"  # the method's class: name mangling, super()'s __class__
    elif made.def_column:
        header = "if True:"  # a function defined in a block (an if, a try) of the module
    else:
        header = ""
    padding = made.def_line - 1 - (1 if header else 0)
    if padding < 0:
        raise CannotPlant(f"{made.site.name}: no line above its def for the class it is in")
    source = "\n" * padding + (f"{header}\n" if header else "") + body + "\n"
    try:
        with warnings.catch_warnings():  # a mutant's `x is 0` warns once per compile: noise, not news
            warnings.simplefilter("ignore", SyntaxWarning)
            unit = compile(source, function.__code__.co_filename, "exec", flags=_future_flags(module),
                           dont_inherit=True)
    except SyntaxError as e:
        raise CannotPlant(f"{made.site.name}: the change does not compile ({e.msg}, line {e.lineno})") from e
    found = _code_named(unit, function.__code__.co_name, made.def_line)
    if found is None:
        raise CannotPlant(f"{made.site.name}: compiled, but no code for {made.owner_path[-1]} at line {made.def_line}")
    return found


def _future_flags(module: ModuleType) -> int:
    """The compiler flags of the module's ``from __future__ import ...`` (each leaves the feature in its namespace)."""
    features = [getattr(__future__, name) for name in __future__.all_feature_names]
    flag_of = {id(feature): int(feature.compiler_flag) for feature in features}
    flags = 0
    for value in vars(module).values():
        flags |= flag_of.get(id(value), 0)
    return flags


def _code_named(code: CodeType, name: str, line: int) -> CodeType | None:
    for const in code.co_consts:
        if isinstance(const, CodeType):
            if const.co_name == name and const.co_firstlineno == line:
                return const
            found = _code_named(const, name, line)
            if found is not None:
                return found
    return None
