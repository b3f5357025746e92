"""The one rule that holds a run's counts to its design's promises (``lab.design.promises``).

A design says, per option set and read mode, what it promises (``Promises``): its
delivery (at-most-once, at-least-once, exactly-once), its order (FIFO per queue, FIFO per
consumer, or none), how an unacknowledged delivery comes back (a lease that expires, a
connection that closes), and the anomalies it permits under which faults (``Allowance``),
each with the messages such a fault could have hurt (its ``scope``).

Which anomaly each fault, lease or release explains is worked out per message from the
history (``lab.judge.attribution``: ``Explanation`` records); ``judge`` turns a run's
``Counts``, those explanations and the promises into a ``Judgement`` — a ``Verdict`` and
the ``Finding``s behind it (``lab.judge.findings``), whose words ``lab.judge.words`` makes:

- ``valid``: every promise kept. Duplicates that a lease, a closed connection or a fault
  explains are part of at-least-once, and reordering is part of no promised order, so
  they leave a run valid; the reason names them.
- ``allowed``: an anomaly happened that the promises permit, every one of them explained
  by a fault that could have hurt that message.
- ``invalid``: a promise broken, named — an anomaly that no fault, lease or release
  explains.
- ``no evidence``: nothing was attempted or acknowledged, or nothing delivered and no
  promise broken — such a run shows nothing about delivery, so it is neither a pass nor a
  catch, and every command counts it apart.

The checker (``lab.judge.checker``) and the Spark pass (``lab.aggregate.pipeline``) both call
``judge_run``; ``RunFacts`` is what either knows about a run (design, options, read
mode, fault kinds), from the runner or from a run's ``manifest.json``, whose verdict also
holds the checker's explanations. It imports no design: a design's promises are found
through the registry when a run is judged from its manifest alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from lab.design.promises import AT_LEAST_ONCE, NO_ORDER, Promises, total_queue
from lab.judge import words
from lab.judge.findings import (DUPLICATED, FAILED, INTERNAL, LOST, REFUSED, REFUSED_ACK, REORDERED, UNEXPECTED, Cause, Counts, Excuse,
                                Explained, Explanation, Finding, Standing, Verdict)


@dataclass(frozen=True)
class Judgement:
    """A verdict and what it rests on: the findings, the promises and the run's fault kinds
    they were judged against, and why the run is no evidence (None if it is)."""

    verdict: Verdict
    findings: tuple[Finding, ...]
    promises: Promises
    faults: frozenset[str]
    problem: str | None = None

    @property
    def valid(self) -> bool:
        return self.verdict is Verdict.VALID

    @property
    def reason(self) -> str:
        return words.reason(self.findings, self.promises, self.faults, self.problem)

    @property
    def broken(self) -> tuple[str, ...]:
        """What the run broke: each anomaly of a broken promise once (lost, duplicated,
        reordered, unexpected, refused)."""
        return tuple(dict.fromkeys(f.anomaly for f in self.findings if f.standing is Standing.BROKEN))


def judge(promises: Promises, faults: frozenset[str], counts: Counts, explained: Explained | None = None,
          *, with_failures: bool = True) -> Judgement:
    """The verdict of a run's ``counts`` against ``promises``, given the run's fault kinds.

    ``explained``: how many of each anomaly's count each explanation accounts for
    (``lab.judge.attribution``); what no explanation accounts for is a broken promise. None:
    a run recorded before anomalies were explained message by message, judged by the rule
    of its time — an allowance naming one of the run's fault kinds excuses the whole
    anomaly, and duplicates are part of at-least-once. ``with_failures``: in a run with no
    fault, a put the design refused is a broken promise too (Jepsen's rule, for a bare
    history, judges delivery alone)."""
    faults = faults | frozenset(promises.injected)
    findings: list[Finding] = []
    if counts.unexpected:
        findings.append(Finding(Standing.BROKEN, UNEXPECTED, counts.unexpected))
    problem = counts.problem()
    if problem is not None and not findings:
        return Judgement(Verdict.NO_EVIDENCE, (), promises, faults, problem)
    promised = {LOST: "none",  # no delivery promise loses an acknowledged message unless a fault explains it
                DUPLICATED: promises.delivery,
                REORDERED: None if promises.order == NO_ORDER else promises.order}
    for what in (LOST, DUPLICATED, REORDERED):
        n = counts.of(what)
        if not n:
            continue
        if promised[what] is None:  # no order promised: reordering is part of the promise
            findings.append(Finding(Standing.NOTE, what, n, excuse=Excuse.NO_ORDER))
            continue
        # at-least-once redelivers: a duplicate a lease, a close or a fault explains is part of it
        kept = Standing.NOTE if what == DUPLICATED and promises.delivery == AT_LEAST_ONCE else Standing.ALLOWED
        if explained is None:  # the rule of its time: an allowance under one of the run's faults excuses all
            if kept is Standing.NOTE:
                findings.append(Finding(Standing.NOTE, what, n, excuse=Excuse.REDELIVERS))
                continue
            excuse = next((Explanation(what, Cause.FAULT, tuple(under), a.why) for a in promises.allowances
                           if a.anomaly == what for under in [a.under(faults)] if under), None)
            reasons = {excuse: n} if excuse is not None else {}
        else:
            reasons = {e: c for e, c in explained.items() if e.anomaly == what and c}
        findings += [Finding(kept, what, c, e) for e, c in reasons.items()]
        unexplained = n - sum(reasons.values())
        if unexplained > 0:
            findings.append(Finding(Standing.BROKEN, what, unexplained))
    if with_failures and (refused_acks := counts.failed.get(REFUSED_ACK, 0)):  # scoped message by message
        findings.append(Finding(Standing.BROKEN, REFUSED, refused_acks, operation="ack"))
    if with_failures and (internal := counts.failed.get(INTERNAL, 0)):  # a bug in the design's code, faults or not
        findings.append(Finding(Standing.BROKEN, FAILED, internal, operation=INTERNAL))
    if not faults and with_failures:
        refused = counts.failed.get("put", 0)
        if refused:
            findings.append(Finding(Standing.BROKEN, REFUSED, refused, operation="put"))
        findings += [Finding(Standing.NOTE, FAILED, c, operation=what) for what, c in sorted(counts.failed.items())
                     if c and what not in ("put", REFUSED_ACK, INTERNAL)]
    standings = {f.standing for f in findings}
    if Standing.BROKEN in standings:
        verdict = Verdict.INVALID
    elif counts.dequeued == 0:  # nothing delivered, nothing broken: what it lost tells nothing of delivery
        verdict, problem = Verdict.NO_EVIDENCE, "nothing was delivered"
    else:
        verdict = Verdict.ALLOWED if Standing.ALLOWED in standings else Verdict.VALID
    return Judgement(verdict, tuple(findings), promises, faults, problem if verdict is Verdict.NO_EVIDENCE else None)


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
    """What judging a run needs to know besides its counts: the design, its checked options,
    the read mode, the fault kinds that started, and — from the runner, which has them at
    hand — the promises those give."""

    backend: str
    options: Mapping[str, Any]  # the design's checked options (defaults filled in)
    reliable: bool  # reliable reads (get, then ack) or plain gets
    faults: tuple[str, ...]  # the run's fault kinds, sorted
    known: Promises | None = None  # the promises, when the caller has them; else found by the design's name

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> "RunFacts":
        """From a run's manifest.json: the promises it was judged by, which the manifest holds,
        so that it is judged again from the manifest alone (a manifest of old holds none:
        they are found by the design's name; one from before options were written: the
        design's defaults)."""
        workload = manifest.get("workload") or {}
        known = Promises.from_dict(manifest["promises"]) if manifest.get("promises") else None
        return cls(manifest["backend"], dict(manifest.get("options") or {}), workload.get("ack") == "reliable",
                   tuple(sorted(fault_kinds(manifest))), known)

    def promises(self) -> Promises:
        """The design's promises for these options and this read mode; Jepsen's total-queue
        rule, named, for a design no longer registered or options it no longer takes."""
        if self.known is not None:
            return self.known
        from lab.design.options import BadOption
        from lab.design.registry import UnknownBackend, backend_class  # only when judged from a manifest alone

        try:
            cls = backend_class(self.backend)
            return cls.promises(cls.check_options(self.options), self.reliable)
        except (UnknownBackend, BadOption) as e:
            return total_queue(f"no promises known ({e})")


def judge_run(facts: RunFacts | None, counts: Counts, explained: Explained | None = None) -> Judgement:
    """``judge`` for a run: its design's promises and fault kinds from ``facts``; without
    facts (a bare history), Jepsen's total-queue rule, which judges delivery alone."""
    if facts is None:
        return judge(total_queue("no declared promises"), frozenset(), counts, explained, with_failures=False)
    return judge(facts.promises(), frozenset(facts.faults), counts, explained)
