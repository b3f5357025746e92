"""The one error of this layer: a workload file or field that cannot be used. Both the
workload's reading (``spec``) and the fault schedule's (``nemesis``) raise it."""

from __future__ import annotations


class WorkloadError(ValueError):
    """A workload file or field that cannot be used; the message says which and why."""
