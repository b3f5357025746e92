"""`lab conform NAME`: the battery every design passes — the control and the four designs,
and one a design author runs while working (also from pytest: ``assert_conforms``).

Each group of checks is a room of its own: ``static`` (core purity by imports), ``sim``
(determinism, no-fault runs, declared options, promises over a short fault matrix and a
small swarm), ``live`` (no-fault live runs; the server starts, answers, survives malformed
bytes, stops on SIGTERM and SIGINT and leaves no process), ``mutants`` (the planted bugs are
still caught) and ``report`` (the checklist). ``suite`` runs them in order into a temporary
folder that is removed afterwards.
"""

from __future__ import annotations

from lab.experiments.conform.report import FAIL, PASS, SKIP, Line, Report
from lab.experiments.conform.suite import CHECKS, QUICK, assert_conforms, conform

__all__ = ["CHECKS", "QUICK", "FAIL", "PASS", "SKIP", "Line", "Report", "assert_conforms", "conform"]
