"""Promises a design declares, and the one rule that holds a run's counts to them.

A design says, per option set and read mode, what it promises (``Promises``): its
delivery (at-most-once, at-least-once, exactly-once), its order (FIFO per queue or
none), and the anomalies it permits under which kinds of fault (``Allowance``: "a crash
may lose acknowledged messages: syncJournal=never loses the unsynced tail"). ``judge``
turns a run's counts, those promises and the run's fault kinds into one verdict:

- ``valid``: every promise kept. Duplicates under at-least-once and reordering under no
  promised order are part of the promise (as in Jepsen's total-queue checker), so they
  leave a run valid; the reason names them.
- ``allowed``: an anomaly happened that the promises permit under one of the run's
  faults; the reason names it and why it is permitted.
- ``invalid``: a promise broken, named; or a run that is no evidence about delivery at
  all (nothing attempted, nothing acknowledged, nothing delivered).

The checker (``lab.checker``) and the Spark pass (``lab.aggregate``) both call
``judge_run``; ``RunFacts`` is what either knows about a run (design, options, read
mode, fault kinds), from the runner or from a run's ``manifest.json``. It imports no
design: a design's promises are found through the registry when a run is judged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

AT_MOST_ONCE, AT_LEAST_ONCE, EXACTLY_ONCE = "at-most-once", "at-least-once", "exactly-once"
DELIVERIES = (AT_MOST_ONCE, AT_LEAST_ONCE, EXACTLY_ONCE)
FIFO, NO_ORDER = "FIFO per queue", "none"
ORDERS = (FIFO, NO_ORDER)
ANOMALIES = ("lost", "duplicated", "reordered")
ANY_FAULT = "any fault"  # an Allowance's fault kinds: whatever fault the run had
VALID, ALLOWED, INVALID = "valid", "allowed", "invalid"
NO_ANOMALY = "nothing lost, unexpected, duplicated or reordered"


@dataclass(frozen=True)
class Allowance:
    """An anomaly the design permits while one of ``faults`` is in the run, and why."""

    anomaly: str  # one of ANOMALIES
    faults: tuple[str, ...]  # fault kinds ("crash", "partition", ...), or (ANY_FAULT,)
    why: str

    def __post_init__(self) -> None:
        if self.anomaly not in ANOMALIES:
            raise ValueError(f"allowance for {self.anomaly!r}: the anomalies are {', '.join(ANOMALIES)}")
        if not self.faults:
            raise ValueError("an allowance names at least one fault kind (or ANY_FAULT)")

    def under(self, faults: frozenset[str]) -> list[str]:
        """The run's fault kinds that permit the anomaly (empty: none do)."""
        return sorted(faults) if ANY_FAULT in self.faults else sorted(faults & set(self.faults))


@dataclass(frozen=True)
class Promises:
    """What a design promises under one option set and read mode."""

    by: str  # who promises, under which options: "kestrel with syncJournal=always, reliable reads"
    delivery: str  # one of DELIVERIES
    order: str  # one of ORDERS
    allowances: tuple[Allowance, ...] = ()

    def __post_init__(self) -> None:
        if self.delivery not in DELIVERIES:
            raise ValueError(f"{self.by}: delivery {self.delivery!r} is not one of {', '.join(DELIVERIES)}")
        if self.order not in ORDERS:
            raise ValueError(f"{self.by}: order {self.order!r} is not one of {', '.join(ORDERS)}")

    def lines(self) -> list[str]:
        """For people (``lab backends``): delivery and order, then one line per allowance."""
        verbs = {"lost": "may lose acknowledged messages", "duplicated": "may deliver twice",
                 "reordered": "may reorder"}
        return [f"{self.delivery}, order: {self.order}"] + [
            f"{verbs[a.anomaly]} under {', '.join(a.faults)}: {a.why}" for a in self.allowances]


def total_queue(by: str) -> Promises:
    """Jepsen's total-queue rule, for a run whose design promises are unknown: nothing lost,
    nothing unexpected; duplicates and order are counted, not judged."""
    return Promises(by, AT_LEAST_ONCE, NO_ORDER)


@dataclass(frozen=True)
class Judgement:
    verdict: str  # VALID, ALLOWED or INVALID
    reason: str

    @property
    def valid(self) -> bool:
        return self.verdict == VALID


def delivery_problem(attempts: int, enqueued: int, dequeued: int) -> str | None:
    """Why a run's counts are no evidence about delivery, or None."""
    if attempts == 0:
        return "no put was attempted"
    if enqueued == 0:
        return "no put was acknowledged"
    if dequeued == 0:
        return "nothing was delivered"
    return None


def judge(promises: Promises, faults: frozenset[str], *, attempts: int, enqueued: int, dequeued: int,
          lost: int, unexpected: int, duplicated: int, inversions: int | None = None) -> Judgement:
    """The verdict of a run's counts against ``promises``, given the run's fault kinds.

    ``inversions`` None: the run's order was not measured, so it is not judged."""
    problem = delivery_problem(attempts, enqueued, dequeued)
    if problem is not None:
        return Judgement(INVALID, f"no evidence: {problem}")
    broken, allowed, notes = [], [], []
    if unexpected:
        broken.append(f"delivered {_count(unexpected, 'message')} never sent; no design may invent messages")
    anomalies = {"lost": (lost, f"lost {_count(lost, 'acknowledged message')}"),
                 "duplicated": (duplicated, f"{_count(duplicated, 'duplicate delivery', 'duplicate deliveries')}"),
                 "reordered": (inversions or 0, f"{_count(inversions or 0, 'inversion')} of a producer's order")}
    promised = {"lost": "none",  # no delivery promise loses an acknowledged message unless allowed below
                "duplicated": None if promises.delivery == AT_LEAST_ONCE else promises.delivery,
                "reordered": None if promises.order == NO_ORDER else promises.order}
    for anomaly, (count, what) in anomalies.items():
        if not count:
            continue
        if promised[anomaly] is None:  # part of the promise itself: at-least-once, no order
            notes.append(f"{what} ({'at-least-once redelivers' if anomaly == 'duplicated' else 'no order promised'})")
            continue
        excuse = next(((a, under) for a in promises.allowances if a.anomaly == anomaly
                       for under in [a.under(faults)] if under), None)
        if excuse is None:
            during = f" under {', '.join(sorted(faults))}" if faults else ""
            broken.append(f"{what}{during}; {promises.by} promises {promised[anomaly]}")
        else:
            allowance, under = excuse
            allowed.append(f"{what} under {', '.join(under)}: allowed, {allowance.why}")
    if broken:
        return Judgement(INVALID, "; ".join(broken + allowed + notes))
    if allowed:
        return Judgement(ALLOWED, "; ".join(allowed + notes))
    return Judgement(VALID, "; ".join(notes) or NO_ANOMALY)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


# ----------------------------------------------------------------------------- a run's facts


def fault_kinds(manifest: Mapping[str, Any]) -> frozenset[str]:
    """The kinds of fault a run had, as its manifest says: ``fault_kinds``, the kinds that
    started (the runner reads them from the run's fault rows, ``op = "fault"``); for a run
    recorded before that, the kinds its workload scheduled."""
    if "fault_kinds" in manifest:
        return frozenset(manifest["fault_kinds"])
    return frozenset(f["fault"] for f in (manifest.get("workload") or {}).get("faults") or ())


@dataclass(frozen=True)
class RunFacts:
    """What judging a run needs to know besides its counts."""

    backend: str
    options: dict[str, Any]  # the design's checked options (defaults filled in)
    reliable: bool  # reliable reads (get, then ack) or plain gets
    faults: tuple[str, ...]  # the run's fault kinds, sorted

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> "RunFacts":
        """From a run's manifest.json (a manifest from before options were written: the
        design's defaults)."""
        workload = manifest.get("workload") or {}
        return cls(manifest["backend"], dict(manifest.get("options") or {}), workload.get("ack") == "reliable",
                   tuple(sorted(fault_kinds(manifest))))

    @classmethod
    def of(cls, backend: str, options: Mapping[str, Any], workload: Any, samples: Any) -> "RunFacts":
        """In the runner, before the manifest exists: the same reading as ``from_manifest``,
        the fault kinds those that started in ``samples`` (its fault rows, ``lab.phases``)."""
        from lab.phases import fault_kinds as started  # pyarrow: only where a run's samples are at hand

        return cls.from_manifest({"backend": backend, "options": options, "workload": dataclasses.asdict(workload),
                                  "fault_kinds": sorted(started(samples))})

    def promises(self) -> Promises:
        """The design's promises for these options and this read mode; Jepsen's total-queue
        rule, named, for a design no longer registered or options it no longer takes."""
        from lab.backends import BadOption, UnknownBackend, backend_class  # the registry imports this module

        try:
            cls = backend_class(self.backend)
            return cls.promises(cls.check_options(self.options), self.reliable)
        except (UnknownBackend, BadOption) as e:
            return total_queue(f"no promises known ({e})")


def judge_run(facts: RunFacts | None, *, attempts: int, enqueued: int, dequeued: int, lost: int,
              unexpected: int, duplicated: int, inversions: int | None = None) -> Judgement:
    """``judge`` for a run: its design's promises and fault kinds from ``facts``; without
    facts (a bare history), Jepsen's total-queue rule."""
    promises = facts.promises() if facts is not None else total_queue("no declared promises")
    faults = frozenset(facts.faults) if facts is not None else frozenset()
    return judge(promises, faults, attempts=attempts, enqueued=enqueued, dequeued=dequeued, lost=lost,
                 unexpected=unexpected, duplicated=duplicated, inversions=inversions)
