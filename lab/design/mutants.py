"""Planted bugs, as a design declares them: a ``Mutant`` is one small, realistic implementation
mistake in one design — a reply sent before the fsync, a commit past what was delivered, a
compare-and-set whose result is ignored — that breaks a promise the design still declares. It
is a set of ``Patch``es: an attribute of a class or module replaced by a buggy copy.

Each design lists its mutants in its folder's ``mutants.py`` as ``MUTANTS``; planting them
is ``lab.experiments.planting``, and the hunt that runs them ``lab.experiments.hunt``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class Patch:
    """``owner.attribute`` replaced by ``replacement`` while the mutant is planted."""

    owner: Any  # a class or a module
    attribute: str
    replacement: Any


@dataclass(frozen=True)
class Mutant:
    """One planted bug in ``design``, run with ``options``.

    ``promise`` is what it breaks, in the words of the design's promises; ``mistake`` what
    the code does wrong; ``scenarios`` the scenario or workload names most likely to expose
    it, most likely first (the hunt tries them before swarm seeds)."""

    name: str
    design: str
    promise: str
    mistake: str
    patches: tuple[Patch, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    scenarios: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return " ".join([self.design, *(f"{k}={v}" for k, v in self.options.items())])
