"""Planted bugs: the lab's own test fixtures, used to measure its power to catch a real one.

A ``Mutant`` is one small, realistic implementation mistake in one design — a reply sent
before the fsync, a commit past what was delivered, a compare-and-set whose result is
ignored — that breaks a promise the design still declares. It is a set of patches (an
attribute of a class or module replaced by a buggy copy) planted into the running
process, so the same mistake runs in the sim world, in the live world's own process, and
in the live world's server processes.

No user option reaches a mutant: ``lab run`` and ``lab serve`` take no flag for one. It is
switched on by ``plant(name)`` (``lab mutants`` and the tests), which also sets the test
hook ``QUEUE_LAB_MUTANT=<name>`` in the environment, so every server process the live world
starts meanwhile plants it at start-up (``plant_from_environment``); a run's manifest
names the mutant planted while it ran.

The mutants themselves (``Mutant``, ``Patch``) are part of the design API,
``lab.design.mutants``. Each design's mutants are listed in its folder's ``mutants.py`` as ``MUTANTS`` (beside its
``serve``, ``tools`` and ``bench``: a design's planted bugs live with its code); the hunt
that runs them is ``lab.experiments.hunt``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterable, Iterator

from lab.design.mutants import Mutant
from lab.design.registry import REGISTRY, UnknownBackend, design_module, registration, usable

ENV = "QUEUE_LAB_MUTANT"  # the test hook: a server process plants this mutant at start-up
_MISSING = object()

#: the mutant planted in this process now, if any (the runner writes it into the manifest)
planted_now: str | None = None


class UnknownMutant(ValueError):
    pass


def catalogue(designs: Iterable[str] | None = None) -> dict[str, Mutant]:
    """Every mutant of ``designs`` (default: every usable design), by name, in the
    registry's order; a design with no ``mutants`` module has none."""
    mutants: dict[str, Mutant] = {}
    for design in designs if designs is not None else usable():
        module = design_module(design, "mutants")
        if module is None:
            continue
        for mutant in module.MUTANTS:
            if mutant.design != design or mutant.name in mutants:
                raise ValueError(f"{module.__name__}: mutant {mutant.name!r} is not {design}'s or is listed twice")
            mutants[mutant.name] = mutant
    return mutants


def mutant(name: str) -> Mutant:
    """The mutant called ``name``: a design's own, or a generated one
    (``<design>~gen~<module>~<operator>~<index>``, re-created from its site: every process
    makes the same mutant from the name); UnknownMutant lists them, or says why the name
    makes no mutant."""
    from lab.experiments.generated import apply, sites

    if sites.is_generated(name):
        try:
            return apply.named(name)
        except (sites.NoSuchSite, apply.CannotPlant, UnknownBackend) as e:
            raise UnknownMutant(f"no generated mutant {name!r}: {e}") from e
    design = next((d for d in sorted(REGISTRY, key=len, reverse=True) if name.startswith(f"{d}-")), None)
    found = catalogue([design]) if design is not None else {}
    if name not in found:
        raise UnknownMutant(f"no mutant {name!r}; there are: {', '.join(catalogue())}")
    return found[name]


@contextlib.contextmanager
def plant(name: str) -> Iterator[Mutant]:
    """Plant mutant ``name`` in this process (and, through ``QUEUE_LAB_MUTANT``, in every
    server process started meanwhile); every patch is undone on the way out."""
    global planted_now
    if planted_now is not None:
        raise RuntimeError(f"mutant {planted_now!r} is already planted: one at a time")
    chosen = mutant(name)
    undo = _apply(chosen)
    before = os.environ.get(ENV)
    os.environ[ENV] = name
    planted_now = name
    try:
        yield chosen
    finally:
        planted_now = None
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before
        for owner, attribute, old in reversed(undo):
            if old is _MISSING:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, old)
        _forget_cached(chosen.design)  # what the mutant computed is not the design's


def plant_from_environment(design: str) -> str | None:
    """The test hook of a server process: plant the mutant ``QUEUE_LAB_MUTANT`` names, for the
    process's life, if it is one of ``design``'s; its name (None if none). Said on stderr,
    so a server's log shows it ran with a planted bug."""
    global planted_now
    name = os.environ.get(ENV)
    if not name or planted_now == name:
        return planted_now
    chosen = mutant(name)
    if chosen.design != design:
        return None
    _apply(chosen)
    planted_now = name
    print(f"lab: mutant {name} planted (a test hook: {chosen.mistake})", file=sys.stderr)
    return name


def _apply(chosen: Mutant) -> list[tuple[Any, str, Any]]:
    undo = []
    for patch in chosen.patches:
        if not hasattr(patch.owner, patch.attribute):
            raise AttributeError(f"mutant {chosen.name}: {patch.owner!r} has no {patch.attribute!r} to replace")
        undo.append((patch.owner, patch.attribute, _current(patch.owner, patch.attribute)))
        setattr(patch.owner, patch.attribute, patch.replacement)
    _forget_cached(chosen.design)  # an answer the design cached before must not stand in for the mutant's
    return undo


def _forget_cached(design: str) -> None:
    """Empty every ``functools`` cache of the design's loaded modules (module functions and
    methods): a cached result would hide a patched function from its callers, and, the patch
    undone, keep answering with what the mutant computed."""
    package = registration(design).package
    for name, module in list(sys.modules.items()):
        if module is None or not (name == package or name.startswith(f"{package}.")):
            continue
        for value in list(vars(module).values()):
            for held in [value, *(vars(value).values() if isinstance(value, type) else ())]:
                kind = type(held)  # asked of the type: an object's own __getattr__ is not called
                if callable(getattr(kind, "cache_clear", None)) and callable(getattr(kind, "cache_info", None)):
                    held.cache_clear()


def _current(owner: Any, attribute: str) -> Any:
    """What undoing a patch of ``owner.attribute`` puts back: the owner's own value; for a
    class, _MISSING when it inherits the attribute (deleting the patch restores the base's);
    for an attribute kept outside the owner's ``__dict__`` (a function's ``__code__``), its value."""
    own = getattr(owner, "__dict__", {})
    if attribute in own:
        return own[attribute]
    if isinstance(owner, type):
        return _MISSING
    return getattr(owner, attribute)
