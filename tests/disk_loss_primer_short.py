"""A deliberately broken design for tests (never registered outside a test): Primer whose
put is acknowledged with one copy too few — each node is booted with ``replicas`` one less
than the cluster's option says (the off-by-one of ``peers[:w - 2]``), so a put stores the
message on W-1 nodes and answers. It promises what Primer with those options promises (a
message survives until all W of its replicas lose their copies), so losing the one disk
that held a message's only copy breaks that promise. ``register(monkeypatch)`` registers it.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any

from lab.backends import REGISTRY, Registration
from lab.backends.primer.driver import PrimerBackend

NAME = "primer-one-copy-short"


class OneCopyShortPrimer(PrimerBackend):
    name = NAME
    summary = "Primer acknowledging a put after W-1 copies (a test's deliberate bug)"

    def _config(self, node: str) -> Any:
        config = super()._config(node)
        return dataclasses.replace(config, replicas=max(1, config.replicas - 1))  # the bug


def register(monkeypatch) -> str:
    """Register the fixture as any design is: a package whose ``driver`` module (this one)
    holds its Backend class; the monkeypatch undoes it after the test."""
    package = types.ModuleType("disk_loss_primer_short_design")
    package.__path__ = []  # no serve, tools or bench module: the sim world only
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setitem(sys.modules, f"{package.__name__}.driver", sys.modules[__name__])
    monkeypatch.setitem(REGISTRY, NAME, Registration(package.__name__, "OneCopyShortPrimer", "#000000"))
    return NAME
