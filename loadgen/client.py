"""What a design gives the load generator, looked up by the design's name: its module
``load.py`` (``lab.design.load`` says what it defines), found through the registry, so a
design installed as a plug-in brings its own Locust client.

``Refused``, ``Targets``, ``LoadClient`` and ``split_address`` are the design API's
(``lab.design.load``), named here too for the load generator's own modules.
"""

from __future__ import annotations

import importlib.util
import inspect
from types import ModuleType
from typing import Any

from lab.design.load import LoadClient, Refused, Targets, split_address
from lab.design.registry import REGISTRY, design_module

__all__ = ["LoadClient", "Refused", "Targets", "check_load", "client_factory", "client_ports", "reads_in_batches",
           "releases", "split_address"]

PART = "load"  # the module of a design's package that holds its Locust client


def _has_client(name: str) -> bool:
    """Whether the design has a ``load`` module, without importing it (nor its wire's
    dependencies): the list in an error must not fail on another design's import."""
    try:
        return importlib.util.find_spec(f"{REGISTRY[name].package}.{PART}") is not None
    except ImportError:  # its package itself does not import: it has no client to offer
        return False


def _design(backend: str) -> ModuleType:
    module = design_module(backend, PART)  # UnknownBackend (a ValueError) for a design not installed
    if module is None:
        have = [name for name in sorted(REGISTRY) if _has_client(name)]
        raise ValueError(f"no load generator for {backend!r} (there is one for: {', '.join(have)})")
    return module


def client_factory(backend: str):
    """The design's ``make_client``; ValueError naming the designs that have one."""
    return _design(backend).make_client


def client_ports(backend: str) -> tuple[str, ...]:
    """The named ports of each server node the design's load client uses, the main one first."""
    return tuple(_design(backend).PORTS)


def releases(backend: str) -> bool:
    """Whether the design's consumers can hand a message back for another (``release``)."""
    return bool(getattr(_design(backend), "RELEASES", True))


def check_load(backend: str, options: dict[str, Any], reliable: bool, batch: int) -> None:
    """ValueError for a load the design's client cannot make, from its optional
    ``check(options, reliable, batch)``: asked before Locust starts, where it would fail
    each user on its own."""
    check = getattr(_design(backend), "check", None)
    if check is not None:
        check(options, reliable, batch)


def reads_in_batches(backend: str) -> bool:
    """Whether the design's consumers can read several messages per request (``batch``)."""
    return "batch" in inspect.signature(client_factory(backend)).parameters
