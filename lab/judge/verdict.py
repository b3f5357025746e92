"""The one rule that holds a run's counts to its design's promises (``lab.design.promises``).

A design says, per option set and read mode, what it promises (``Promises``): its
delivery (at-most-once, at-least-once, exactly-once), its order (FIFO per queue, FIFO per
consumer, or none), how an unacknowledged delivery comes back (a lease that expires, a
connection that closes), and the anomalies it permits under which faults (``Allowance``:
"a crash may lose acknowledged messages: syncJournal=never loses the unsynced tail"),
each with the messages such a fault could have hurt (its ``scope``: the message's holder
crashed within its unsynced window, a get whose reply was cut could have taken it, the
fault was in force while the message lived).

Which anomaly each fault, lease or release explains is worked out per message from the
history (``lab.judge.attribution``); ``judge`` turns a run's counts, those explanations and the
promises into one verdict:

- ``valid``: every promise kept. Duplicates that a lease, a closed connection or a fault
  explains are part of at-least-once, and reordering is part of no promised order, so
  they leave a run valid; the reason names them.
- ``allowed``: an anomaly happened that the promises permit, every one of them explained
  by a fault that could have hurt that message; the reason names them and why.
- ``invalid``: a promise broken, named — an anomaly that no fault, lease or release
  explains — or a run that is no evidence about delivery at all (nothing attempted,
  nothing acknowledged, nothing delivered).

The checker (``lab.judge.checker``) and the Spark pass (``lab.aggregate.pipeline``) both call
``judge_run``; ``RunFacts`` is what either knows about a run (design, options, read
mode, fault kinds), from the runner or from a run's ``manifest.json``, whose verdict also
holds the checker's explanations. It imports no design: a design's promises are found
through the registry when a run is judged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from lab.design.promises import (AT_LEAST_ONCE, NO_ORDER, Promises, total_queue)

VALID, ALLOWED, INVALID = "valid", "allowed", "invalid"
NO_ANOMALY = "nothing lost, unexpected, duplicated or reordered"


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
          lost: int, unexpected: int, duplicated: int, inversions: int | None = None,
          explained: Mapping[str, Mapping[str, int]] | None = None,
          failed: Mapping[str, int] | None = None) -> Judgement:
    """The verdict of a run's counts against ``promises``, given the run's fault kinds.

    ``explained``: per anomaly ("lost", "duplicated", "reordered"), how many of its count
    each explanation accounts for, by its words (``lab.judge.attribution``: "under crash:
    allowed, ..." for an allowance; "after its lease expired" and the like for a
    redelivery); what no explanation accounts for is a broken promise. None: a run
    recorded before anomalies were explained (a manifest without them, or none): judged
    by the rule of its time, an allowance naming one of the run's fault kinds excusing the
    whole anomaly, and duplicates part of at-least-once. ``failed``: per operation, how many failed or timed out — in
    a run with no fault, a put the design refused is a broken promise too.
    ``inversions`` None: the run's order was not measured, so it is not judged."""
    problem = delivery_problem(attempts, enqueued, dequeued)
    if problem is not None:
        return Judgement(INVALID, f"no evidence: {problem}")
    faults = faults | frozenset(promises.injected)
    legacy = explained is None  # a run recorded before its anomalies were explained message by message
    explained = explained or {}
    broken, allowed, notes = [], [], []
    if unexpected:
        broken.append(f"delivered {_count(unexpected, 'message')} never sent; no design may invent messages")
    anomalies = {"lost": (lost, lambda n: f"lost {_count(n, 'acknowledged message')}"),
                 "duplicated": (duplicated, lambda n: _count(n, 'duplicate delivery', 'duplicate deliveries')),
                 "reordered": (inversions or 0, lambda n: f"{_count(n, 'inversion')} of the real-time order")}
    promised = {"lost": "none",  # no delivery promise loses an acknowledged message unless a fault explains it
                "duplicated": promises.delivery,
                "reordered": None if promises.order == NO_ORDER else promises.order}
    during = f" (the run's faults: {', '.join(sorted(faults))})" if faults else " (the run had no fault)"
    for anomaly, (count, what) in anomalies.items():
        if not count:
            continue
        if promised[anomaly] is None:  # no order promised: reordering is part of the promise
            notes.append(f"{what(count)} (no order promised)")
            continue
        if legacy:  # the rule of its time: an allowance under one of the run's fault kinds excuses all of it
            if anomaly == "duplicated" and promises.delivery == AT_LEAST_ONCE:
                notes.append(f"{what(count)} (at-least-once redelivers)")
                continue
            excuse = next(((a, under) for a in promises.allowances if a.anomaly == anomaly
                           for under in [a.under(faults)] if under), None)
            explained = {**explained, anomaly: {f"under {', '.join(excuse[1])}: allowed, {excuse[0].why}": count}
                         if excuse else {}}
        reasons = {why: n for why, n in (explained.get(anomaly) or {}).items() if n}
        unexplained = count - sum(reasons.values())
        # at-least-once redelivers: a duplicate a lease, a close or a fault explains is part of it
        kept = notes if anomaly == "duplicated" and promises.delivery == AT_LEAST_ONCE else allowed
        kept += [f"{what(n)} {why}" for why, n in reasons.items()]
        if unexplained > 0:
            cause = "lease, release or fault" if anomaly == "duplicated" else "fault"
            broken.append(f"{what(unexplained)} that no {cause} explains{during}; "
                          f"{promises.by} promises {_promise(anomaly, promised[anomaly], promises)}")
    if not faults and failed:
        refused = failed.get("put", 0)
        if refused:
            broken.append(f"{_count(refused, 'put')} refused with no fault in the run; every design promises "
                          "to take puts while nothing is wrong")
        notes += [f"{_count(n, what)} with no fault in the run" for what, n in sorted(failed.items())
                  if n and what != "put"]
    if broken:
        return Judgement(INVALID, "; ".join(broken + allowed + notes))
    if allowed:
        return Judgement(ALLOWED, "; ".join(allowed + notes))
    return Judgement(VALID, "; ".join(notes) or NO_ANOMALY)


def _promise(anomaly: str, promised: str, promises: Promises) -> str:
    """What the design promises about ``anomaly``, in words."""
    if anomaly == "lost":
        return "no loss of an acknowledged message but under a fault that could have hurt it"
    if anomaly == "duplicated" and promised == AT_LEAST_ONCE:
        back = ([f"its lease of {promises.lease_s:g} s expires"] if promises.lease_s is not None else []) + (
            ["its consumer's connection closes"] if promises.hands_back_on_close else [])
        return f"{promised}: a delivery comes again only after {' or '.join(back + ['a release or a fault'])}"
    return promised


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
        the fault kinds those that started in ``samples`` (its fault rows, ``lab.history.phases``)."""
        from lab.history.phases import fault_kinds as started  # pyarrow: only where a run's samples are at hand

        return cls.from_manifest({"backend": backend, "options": options, "workload": dataclasses.asdict(workload),
                                  "fault_kinds": sorted(started(samples))})

    def promises(self) -> Promises:
        """The design's promises for these options and this read mode; Jepsen's total-queue
        rule, named, for a design no longer registered or options it no longer takes."""
        from lab.design.options import BadOption
        from lab.design.registry import UnknownBackend, backend_class  # the registry imports this module

        try:
            cls = backend_class(self.backend)
            return cls.promises(cls.check_options(self.options), self.reliable)
        except (UnknownBackend, BadOption) as e:
            return total_queue(f"no promises known ({e})")


def judge_run(facts: RunFacts | None, *, attempts: int, enqueued: int, dequeued: int, lost: int,
              unexpected: int, duplicated: int, inversions: int | None = None,
              explained: Mapping[str, Mapping[str, int]] | None = None,
              failed: Mapping[str, int] | None = None) -> Judgement:
    """``judge`` for a run: its design's promises and fault kinds from ``facts``; without
    facts (a bare history), Jepsen's total-queue rule."""
    promises = facts.promises() if facts is not None else total_queue("no declared promises")
    faults = frozenset(facts.faults) if facts is not None else frozenset()
    return judge(promises, faults, attempts=attempts, enqueued=enqueued, dequeued=dequeued, lost=lost,
                 unexpected=unexpected, duplicated=duplicated, inversions=inversions, explained=explained,
                 failed=failed if facts is not None else None)  # Jepsen's rule judges delivery alone
