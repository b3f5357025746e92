"""What a design gives the load generator, looked up by the design's name: the ``LoadPart``
its load module declares (``LOAD``; ``lab.design.load`` says what it holds), the module
found through the registry (``Backend.parts.load``), so a design installed as a plug-in brings
its own Locust client.

``Refused``, ``Targets``, ``LoadClient`` and ``split_address`` are the design API's
(``lab.design.load``), named here too for the load generator's own modules.
"""

from __future__ import annotations

from typing import Any, Callable

from lab.design.backend import UnknownBackend
from lab.design.load import LoadClient, LoadPart, Refused, Targets, split_address
from lab.design.registry import REGISTRY, backend_class, design_module

__all__ = ["LoadClient", "LoadPart", "Refused", "Targets", "check_load", "client_factory", "client_ports",
           "load_part", "reads_in_batches", "releases", "split_address"]

PART = "load"  # the part of a design (``Backend.parts``) that holds its Locust client


def _has_client(name: str) -> bool:
    """Whether the design declares a load part, without importing it (nor its wire's
    dependencies): the list in an error must not fail on another design's import."""
    try:
        return backend_class(name).parts.load is not None
    except UnknownBackend:  # a design that cannot be used has no client to offer
        return False


def load_part(backend: str) -> LoadPart:
    """The ``LoadPart`` the design's load module declares as ``LOAD``; ValueError naming the
    designs that have one when it declares no load part, or naming the line to add when its
    module lacks the declaration (UnknownBackend, a ValueError, for a design not installed)."""
    module = design_module(backend, PART)
    if module is None:
        have = [name for name in sorted(REGISTRY) if _has_client(name)]
        raise ValueError(f"no load generator for {backend!r} (there is one for: {', '.join(have)})")
    try:
        declared = module.LOAD
    except AttributeError:  # the one name the lab reads: said once here, not found by probing
        declared = None
    if not isinstance(declared, LoadPart):
        raise ValueError(f"{backend}'s load module {module.__name__} declares no LOAD = LoadPart(...) "
                         f"(lab.design.load)")
    return declared


def client_factory(backend: str) -> Callable[..., LoadClient]:
    """The design's ``make_client``; ValueError naming the designs that have one."""
    return load_part(backend).make_client


def client_ports(backend: str) -> tuple[str, ...]:
    """The named ports of each server node the design's load client uses, the main one first."""
    return tuple(load_part(backend).ports)


def releases(backend: str) -> bool:
    """Whether the design's consumers can hand a message back for another (``release``)."""
    return load_part(backend).releases


def check_load(backend: str, options: dict[str, Any], reliable: bool, batch: int) -> None:
    """ValueError for a load the design's client cannot make, from its declared ``check``:
    asked before Locust starts, where it would fail each user on its own."""
    check = load_part(backend).check
    if check is not None:
        check(options, reliable, batch)


def reads_in_batches(backend: str) -> bool:
    """Whether the design's consumers can read several messages per request (``batch``)."""
    return load_part(backend).batches
