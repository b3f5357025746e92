"""Deliberately broken designs: test fixtures, never shipped and never registered outside a
test. Each module is one small, realistic implementation mistake in a copy (or subclass) of
a design that still declares that design's promises, so the lab must call its runs invalid:
it names the fixture (``NAME``) and its Backend class (``BACKEND``).

``register(monkeypatch, module)`` registers one for a test's duration the way any design is
registered — a package whose ``driver`` module holds its Backend class — and returns its
name for ``lab.runner.run``.
"""

from __future__ import annotations

import sys
import types

from lab.backends import REGISTRY, Registration


def register(monkeypatch, module: types.ModuleType) -> str:  # noqa: ANN001 (pytest's MonkeyPatch)
    package = types.ModuleType(f"{module.__name__.rpartition('.')[2]}_design")
    package.__path__ = []  # no serve, tools or bench module: the sim world only
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setitem(sys.modules, f"{package.__name__}.driver", module)
    monkeypatch.setitem(REGISTRY, module.NAME, Registration(package.__name__, module.BACKEND.__name__, "#000000"))
    return module.NAME
