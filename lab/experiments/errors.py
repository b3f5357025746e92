"""The experiments' user mistakes that the command line names to print one line: kept apart
from the experiments themselves, whose modules import the runner, pandas and pyarrow, so that
every `lab` command — `lab serve` above all, started once per server and per restart — starts
without them."""

from __future__ import annotations


class NothingToRun(ValueError):
    """No (workload, backend, world) of a comparison can run."""
