"""What every command shares: the usage error and the mistakes that print as one line, the
legend of a run's summary, and the argument types and file readers of several commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import yaml

from lab.design.registry import REGISTRY, UnknownBackend, design_module
from lab.design.options import BadOption
from lab.experiments.errors import NothingToRun
from lab.experiments.planting import UnknownMutant
from lab.history.paths import BadRunDir
from lab.aggregate.spark import JavaMissing
from lab.workloads.errors import WorkloadError


class UsageError(Exception):
    """A mistake in how the command was called."""


USER_ERRORS = (UsageError, WorkloadError, UnknownBackend, BadOption, BadRunDir, JavaMissing, NothingToRun, UnknownMutant)


RUN_LEGEND = """\
the summary, row by row; each op has two rows: phases "all" (warm-up to drain) and
"measured" (steady, fault and heal: what `lab compare` and `lab aggregate` report):
  put, get, ack, release  operations: count, then ok / fail / info, ok operations per second,
                          and the latency of the ok ones (one request's round trip)
  e2e      end to end, per delivered message: its put's start to its first delivery (in
           the phase of that delivery); unlike a get's latency it includes the time the
           message waited in the queue
  delay    publish delay: how late a scheduled put started behind its intended time; large
           when a stall held the producers back (hidden from put latency: coordinated omission)
outcomes:
  ok       the operation happened
  fail     it certainly did not happen (refused, unreachable; an empty get is fail "empty")
  info     its outcome is unknown (a timeout): it may or may not have happened
the checker: lost = acknowledged puts never delivered; the verdict holds the counts to what
the design promises under the run's options and faults (`lab backends`): valid, allowed (a
loss, duplicate or reordering the promises permit under one of the run's faults, named) or
invalid (a broken promise, named; or a run with no acknowledged put or nothing delivered).
exit status: 0 valid or allowed, 1 invalid, 2 a mistake in the command or the workload.
"""


def parse_seed(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None


def parse_option(text: str) -> tuple[str, Any]:
    """KEY=VALUE, the value read as a YAML scalar (so 100 is a number and always a word)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"use KEY=VALUE, got {text!r}")
    parsed = yaml.safe_load(value) if value.strip() else ""
    if isinstance(parsed, (dict, list)):
        parsed = value  # a scalar option; keep the text as given
    return key.strip(), parsed


def parse_seconds(text: str) -> float:
    """60, 60s, 2m or 1h as seconds."""
    scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], None)
    try:
        value = float(text[:-1] if scale else text) * (scale or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"use seconds (60, 60s, 2m or 1h), got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def yaml_file(flag: str, path: Path) -> Any:
    """A YAML file a flag names; a UsageError if it is missing or not YAML."""
    if not path.is_file():
        raise UsageError(f"{flag} {path}: no such file")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise UsageError(f"{flag} {path}: not YAML: {e}") from None


def declared_part(name: str, part: str) -> ModuleType:
    """Design ``name``'s ``part`` module, where the parser offered the design for that part
    (``design_parts``: it declares one)."""
    module = design_module(name, part)
    if module is None:
        raise UsageError(f"{name} declares no {part} part")
    return module


def design_parts(part: str) -> Iterator[tuple[str, ModuleType]]:
    """(name, module) of every registered design that has a ``part`` module."""
    for name in REGISTRY:
        try:
            module = design_module(name, part)
        except UnknownBackend:
            continue  # refused: `lab backends` says why, and so does a command that asks for it
        if module is not None:
            yield name, module
