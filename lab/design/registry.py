"""The registry of designs: every design the lab can run, found by entry point, and the
lookups every command makes by a design's name (``backend_class``, ``design_module``).

A design is a distribution that declares an entry point in the group ``queue_lab.designs``:
its name, and the Backend class (``pkg.driver:MyBackend``) or a ``Registration`` object.
The lab's own designs are declared the same way, in its ``pyproject.toml``, so a design
installed with ``pip install`` is found exactly as they are.

Nothing is imported to list the names: a design's modules are imported on first use, so one
design's dependencies never slow down or break another's, and no room below the commands
imports a design. A design that cannot be used — its module fails to import, its name
clashes with another's, its object is not a Backend — is one line of ``problems()`` and is
refused, with that line, by whatever asks for it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import zlib
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

from lab.design.backend import UnknownBackend as UnknownBackend  # re-exported: what backend_class raises

if TYPE_CHECKING:
    from lab.design.backend import Backend

#: the entry-point group a design declares itself in
GROUP = "queue_lab.designs"
#: the distribution whose designs are the lab's own: a plug-in never takes one of their names
OWN_DISTRIBUTION = "queue-lab"
#: the control row: an in-memory FIFO, the floor every design is compared with
CONTROL = "ideal"
#: the order the lab's own designs are listed in (the order their specs came); plug-ins
#: follow, by name
ORDER = (CONTROL, "kestrel", "queuefka", "cassieq", "primer", "redis", "rabbitmq", "nats", "beanstalkd")
#: colours for a design that declares none, after the ones the lab's own designs take
SPARE_COLOURS = ("#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
# a name every command line, file name and chart legend can carry as it is
NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")


@dataclass(frozen=True)
class Registration:
    """One design: its package, its Backend class and the colour every chart draws it in.

    ``backend`` is ``module:Class``, or a class name in ``package.driver``. Its further parts
    (``lab serve NAME``, its Locust client, planted bugs, benchmark, tools, cluster command)
    are the Backend class's ``parts`` (``lab.design.Parts``). ``colour`` None: the Backend
    class's ``about.colour``, else a spare one. A plug-in may declare one of these as its entry
    point instead of the Backend class."""

    package: str
    backend: str
    colour: str | None = None
    #: the distribution that declares it, and its version ("" when registered by hand)
    origin: str = ""
    version: str = ""
    name: str = field(default="", compare=False)

    @property
    def module(self) -> str:
        return self.backend.partition(":")[0] if ":" in self.backend else f"{self.package}.driver"

    def load(self) -> object:
        """What the entry point names: the Backend class, or a plug-in's own Registration
        (``backend_class`` checks which); ImportError or AttributeError as the import raises them."""
        attr = self.backend.rpartition(":")[2]
        return getattr(importlib.import_module(self.module), attr)

    @property
    def drawn_in(self) -> str:
        """The colour charts use: declared here, else by the Backend class's ``about``, else a spare
        chosen by the name (stable from run to run)."""
        if self.colour:
            return self.colour
        try:
            loaded = self.load()
            declared = loaded.about.colour if isinstance(loaded, type) and hasattr(loaded, "about") else None
        except Exception:
            declared = None
        return declared or SPARE_COLOURS[zlib.crc32(self.name.encode()) % len(SPARE_COLOURS)]

    @property
    def where(self) -> str:
        """Where the design comes from, for `lab backends`: ``queue-lab 0.1.0 (built in)``."""
        if not self.origin:
            return f"{self.package} (registered by hand)"
        own = " (built in)" if _canonical(self.origin) == OWN_DISTRIBUTION else ""
        return f"{self.origin} {self.version}{own}".replace("  ", " ")


@dataclass(frozen=True)
class Problem:
    """A design that is refused: its name, where it comes from, and why (one line)."""

    name: str
    where: str
    reason: str

    def line(self) -> str:
        return f"{self.name} ({self.where}): {self.reason}"


def _from_entry_point(ep: importlib.metadata.EntryPoint) -> Registration:
    """Read without importing anything: the design's package is the module's parent (its
    serve, tools, load ... modules sit beside the Backend's), or the module when it is
    top-level."""
    dist = ep.dist
    origin = dist.metadata["Name"] if dist is not None else "?"
    version = dist.version if dist is not None else ""
    module = ep.value.partition(":")[0].strip()
    return Registration(module.rpartition(".")[0] or module, ep.value.replace(" ", ""), None, origin, version, ep.name)


def _canonical(origin: str) -> str:
    return re.sub(r"[-_.]+", "-", origin).lower()


def _discover() -> tuple[dict[str, Registration], list[Problem]]:
    """Every design the installed distributions declare, and the ones refused."""
    declared: dict[str, list[Registration]] = {}
    problems: list[Problem] = []
    for ep in importlib.metadata.entry_points(group=GROUP):
        entry = _from_entry_point(ep)
        if not NAME.fullmatch(ep.name):
            problems.append(Problem(ep.name, entry.where, "refused: a design's name is lower-case letters, digits, "
                                                          "'-' and '_', starting with a letter, at most 40"))
            continue
        declared.setdefault(ep.name, []).append(entry)
    entries: dict[str, Registration] = {}
    for name, candidates in declared.items():
        own = [c for c in candidates if _canonical(c.origin) == OWN_DISTRIBUTION]
        if len(candidates) == 1:
            entries[name] = candidates[0]
        elif len(own) == 1:  # the lab's own design keeps its name; the newcomer is refused
            entries[name] = own[0]
            problems.extend(Problem(name, c.where, f"refused: {name!r} is the lab's own design")
                            for c in candidates if c is not own[0])
        else:
            others = " and ".join(sorted(c.where for c in candidates))
            problems.extend(Problem(name, c.where, f"refused: the name is declared by {others}") for c in candidates)
    return entries, problems


# designs found but refused when first loaded (the import failed, or the object is no Backend)
_load_problems: dict[str, "Problem"] = {}


class Designs(MutableMapping[str, Registration]):
    """Name → Registration of every design found (a name clash left out), discovered on first
    use (``refresh()`` looks again, after an install); one that fails to import is refused
    when first loaded. Writable, so a test can register a design by hand."""

    def __init__(self) -> None:
        self._entries: dict[str, Registration] | None = None
        self._problems: list[Problem] = []

    def _loaded(self) -> dict[str, Registration]:
        if self._entries is None:
            self._entries, self._problems = _discover()
        return self._entries

    def refresh(self) -> None:
        importlib.invalidate_caches()
        self._entries, self._problems = None, []
        _load_problems.clear()

    def problems(self) -> list[Problem]:
        self._loaded()
        return list(self._problems)

    def __getitem__(self, name: str) -> Registration:
        return self._loaded()[name]

    def __setitem__(self, name: str, entry: Registration) -> None:
        self._loaded()[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        rank = {name: i for i, name in enumerate(ORDER)}
        return iter(sorted(self._loaded(), key=lambda name: (rank.get(name, len(rank)), name)))

    def __len__(self) -> int:
        return len(self._loaded())


REGISTRY = Designs()


def refresh() -> None:
    """Look for designs again (a plug-in installed since the first look)."""
    REGISTRY.refresh()


def own() -> list[str]:
    """The lab's own designs (the regression gate's), in the order they are listed; not the
    real brokers it also ships (``peers``)."""
    return [name for name in REGISTRY if _canonical(REGISTRY[name].origin) == OWN_DISTRIBUTION and not is_peer(name)]


def is_peer(name: str) -> bool:
    """Is ``name`` a real broker (``lab.design.peer.Peer``: its own binary, the live world
    only) rather than a design? False for one that cannot be loaded."""
    try:
        return backend_class(name).is_peer
    except UnknownBackend:
        return False


def peers() -> list[str]:
    """The real brokers installed, in the order they are listed."""
    return [name for name in REGISTRY if is_peer(name)]


def usable(with_peers: bool = False) -> list[str]:
    """Every design that can be used, in the order they are listed: what a command runs when
    it is not told which (a design that fails to import is left out, and named by
    ``problems()``, rather than stopping the others). The real brokers only ``with_peers``:
    they need their servers installed, and run in one world."""
    names = []
    for name in REGISTRY:
        try:
            backend_class(name)
        except UnknownBackend:
            continue
        if with_peers or not is_peer(name):
            names.append(name)
    return names


def design_packages() -> frozenset[str]:
    """The packages of every design found (what the live world's frames may build classes
    from, beside the lab's own)."""
    return frozenset(entry.package for entry in REGISTRY.values())


def problems() -> list[Problem]:
    """The designs refused, each with why: an import error, a name clash, a bad object."""
    return REGISTRY.problems() + list(_load_problems.values())


def _refused(name: str) -> UnknownBackend:
    for problem in problems():
        if problem.name == name:
            return UnknownBackend(f"design {problem.line()}")
    if not REGISTRY:  # not even the lab's own: an install from before designs were entry points
        return UnknownBackend(f"unknown backend {name!r}: no design is installed, not even the lab's own "
                              f"(reinstall queue-lab: `pip install -e .`, or `make` does it)")
    usable = ", ".join(sorted(REGISTRY))
    return UnknownBackend(f"unknown backend {name!r} (registered: {usable}; `lab backends` lists them)")


def registration(name: str) -> Registration:
    """The design's registration; UnknownBackend when there is none, or it was refused."""
    entry = REGISTRY.get(name)
    if entry is None or name in _load_problems:
        raise _refused(name)
    return entry


def backend_class(name: str) -> type[Backend]:
    """The Backend class registered as ``name``; UnknownBackend, naming why, for a design
    that is not installed or cannot be used."""
    from lab.design.backend import Backend

    entry = registration(name)
    try:
        loaded = entry.load()
    except Exception as e:
        _load_problems[name] = Problem(name, entry.where, f"refused: cannot be imported: {type(e).__name__}: {e}")
        raise _refused(name) from e
    if isinstance(loaded, Registration):  # a plug-in that registers with an object of its own
        entry = REGISTRY[name] = Registration(loaded.package, loaded.backend, loaded.colour, entry.origin,
                                              entry.version, name)
        return backend_class(name)
    if not (isinstance(loaded, type) and issubclass(loaded, Backend)):
        _load_problems[name] = Problem(name, entry.where, f"refused: {entry.backend} is not a Backend class")
        raise _refused(name)
    if getattr(loaded, "name", name) != name:
        _load_problems[name] = Problem(name, entry.where,
                                       f"refused: its Backend calls itself {loaded.name!r}, not {name!r}")
        raise _refused(name)
    if (undeclared := _undeclared_parts(entry, loaded)):
        declare = ", ".join(f'{part}="{entry.package}.{part}"' for part in undeclared)
        _load_problems[name] = Problem(name, entry.where, (
            f"refused: its package has {', '.join(f'{part}.py' for part in undeclared)} but its Backend declares "
            f"no parts: add `parts = Parts({declare})` to {loaded.__name__} (from lab.design import Parts)"))
        raise _refused(name)
    return loaded


def _undeclared_parts(entry: Registration, cls: type[Backend]) -> list[str]:
    """The modules a design written before ``Backend.parts`` keeps beside its driver
    (``serve.py``, ``load.py`` ...) and does not declare: found by name only to say so, once,
    when it is loaded."""
    from lab.design.backend import PARTS, Parts

    if cls.parts != Parts():
        return []
    return [part for part in PARTS if _has_module(f"{entry.package}.{part}")]


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # the package is a lone module: it has no submodules
        return False


def colour(name: str) -> str:
    """A design's colour, the same in every chart; a name the registry does not know gets a
    stable spare."""
    entry = REGISTRY.get(name)
    if entry is None:
        return SPARE_COLOURS[zlib.crc32(name.encode()) % len(SPARE_COLOURS)]
    return entry.drawn_in


def design_module(name: str, part: str) -> ModuleType | None:
    """The module the design declares for ``part`` (``serve``, ``load``, ``mutants``,
    ``bench``, ``tools``, ``cluster``: ``Backend.parts``), or None if it declares none;
    UnknownBackend, naming why, for a design that cannot be used."""
    module = backend_class(name).parts.module(part)
    if module is None:
        return None
    entry = registration(name)
    try:
        return importlib.import_module(module)
    except Exception as e:
        _load_problems[name] = Problem(name, entry.where, f"refused: cannot be imported: {type(e).__name__}: {e}")
        raise _refused(name) from e
