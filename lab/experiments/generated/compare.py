"""A generated mutant's runs held to their controls: did the mutation change what happened?

A sim run is a function of its workload, seed, options and code, so a mutant's run and its
control (the same run unmutated) have the same history digest (``SeedRun.digest``) unless the
mutation changed some operation's outcome or timing. A mutant none of whose runs differed from
its control is **likely equivalent**: the runs never reached the change, or it changes nothing
these workloads can see (a bound never hit, an error message's wording). "Likely", because a
longer or different run might still reach it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from lab.experiments.swarm_worker import ERROR, SeedRun

KILLED = "killed"
DIFFERING = "survivor: differing"
EQUIVALENT = "survivor: likely equivalent (no history differed)"
UNKNOWN = "survivor: not compared"  # no run, or none with a control to hold it to


def differs(run: SeedRun, control: SeedRun | None) -> bool | None:
    """Whether ``run``'s history differs from ``control``'s: None when it cannot be told (no
    control yet, both raised, or no digest on either side, as in a live run)."""
    if control is None or (run.verdict == ERROR and control.verdict == ERROR):
        return None
    if ERROR in (run.verdict, control.verdict):
        return True  # one raised, the other finished
    if not run.digest or not control.digest:
        return None
    return run.digest != control.digest or run.verdict != control.verdict


@dataclass(frozen=True)
class Judged:
    """One generated mutant's runs against their controls."""

    runs: int
    differing: int  # runs whose history differed from their control's
    compared: int  # runs that could be held to a control
    killed: bool

    @property
    def status(self) -> str:
        if self.killed:
            return KILLED
        if self.differing:
            return DIFFERING
        if self.compared and self.compared == self.runs:
            return EQUIVALENT
        return UNKNOWN


def screened(pairs: list[tuple[SeedRun, SeedRun | None]], after: int) -> bool:
    """Whether a mutant's runs so far (each with its control, None while it runs) show it
    likely equivalent by the screen: ``after`` of them held to a finished control, and none
    of those differing (a control still running is not waited for: the hunt stops starting
    runs, and the report holds that run to its control once it is done)."""
    outcomes = [differs(run, control) for run, control in pairs if control is not None]
    return bool(after) and len(outcomes) >= after and all(o is False for o in outcomes)


def raised(run: SeedRun, control: SeedRun | None) -> bool:
    """The mutant's run raised where its control did not: the design itself broke (a
    server that cannot start, a client that throws), which `lab swarm` reports as a finding."""
    return run.verdict == ERROR and control is not None and control.verdict != ERROR


def judge(pairs: Iterable[tuple[SeedRun, SeedRun | None]], killed: bool) -> Judged:
    """``pairs``: each run of the mutant with its control (None if it has none). A run that
    raised where its control did not kills the mutant too (``raised``)."""
    pairs = list(pairs)
    outcomes = [differs(run, control) for run, control in pairs]
    killed = killed or any(raised(run, control) for run, control in pairs)
    return Judged(len(outcomes), sum(1 for o in outcomes if o), sum(1 for o in outcomes if o is not None), killed)
