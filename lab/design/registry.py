"""The registry of designs: each design's package, its Backend class and its colour, and the
lookups every command makes by a design's name (``backend_class``, ``design_module``).

Modules are imported on first use, by name, so one design's dependencies never slow down or
break another's, and no room below the commands imports a design.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.design.backend import Backend


@dataclass(frozen=True)
class Registration:
    """One design: its package, the Backend class in its ``driver`` module, and the colour
    every chart draws it in. The package may also hold ``serve.py`` (``lab serve NAME``),
    ``tools.py`` (``lab NAME TOOL ...``) and ``bench.py`` (``lab bench NAME``), each with
    ``HELP``, ``add_arguments(parser)`` and ``serve(args)`` / ``run(args)``."""

    package: str
    backend: str
    colour: str


# The one place a design is named outside its folder: adding a design is a folder and a
# line here. Modules are imported on first use, so one design's dependencies never slow
# down or break another's.
REGISTRY: dict[str, Registration] = {
    "ideal": Registration("lab.backends.ideal", "IdealBackend", "#7f7f7f"),
    "kestrel": Registration("lab.backends.kestrel", "KestrelBackend", "#1f77b4"),
    "queuefka": Registration("lab.backends.queuefka", "QueuefkaBackend", "#d62728"),
    "cassieq": Registration("lab.backends.cassieq", "CassieqBackend", "#2ca02c"),
    "primer": Registration("lab.backends.primer", "PrimerBackend", "#9467bd"),
}

#: The control row: an in-memory FIFO, the floor every design is compared with.
CONTROL = "ideal"


def design_module(name: str, part: str) -> ModuleType | None:
    """The design's ``serve``, ``tools`` or ``bench`` module, or None if it has none."""
    module = f"{REGISTRY[name].package}.{part}"
    return importlib.import_module(module) if importlib.util.find_spec(module) is not None else None


class UnknownBackend(ValueError):
    pass


def backend_class(name: str) -> type[Backend]:
    """The Backend class registered as ``name``."""
    entry = REGISTRY.get(name)
    if entry is None:
        raise UnknownBackend(f"unknown backend {name!r} (registered: {', '.join(sorted(REGISTRY))})")
    return getattr(importlib.import_module(f"{entry.package}.driver"), entry.backend)
