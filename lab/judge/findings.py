"""The judge's values: the verdict, a run's counts, what explains an anomaly, and what the
verdict found — records, not sentences.

Everything the judge returns is one of these. Words are made from them in one place,
``lab.judge.words``, where they are printed or written; nothing here formats a sentence, so
a command, a chart or the Spark pass can ask *what* a run broke (``Finding.anomaly``) and
*why* something was allowed (``Explanation.cause``, ``.faults``) without parsing English.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Iterable, Mapping

LOST, DUPLICATED, REORDERED = "lost", "duplicated", "reordered"  # the anomalies an allowance may excuse
UNEXPECTED, REFUSED, FAILED = "unexpected", "refused", "failed"  # what else a finding may be about
#: among a run's failed operations (``Counts.failed``): the acks refused that nothing explains
#: (``lab.judge.refused_acks``), a broken promise under faults too
REFUSED_ACK = "refused ack"
#: among a run's failed operations: those the server answered with its own code's exception
#: (``lab.design.InternalError``), a broken promise whatever the faults
INTERNAL = "internal error"


class Verdict(StrEnum):
    """A run's verdict. A ``StrEnum``: it compares equal to its value, so a manifest's
    ``"valid"`` and ``Verdict.VALID`` are the same verdict."""

    VALID = "valid"  # every promise kept
    ALLOWED = "allowed"  # an anomaly happened that the promises permit under the run's faults
    INVALID = "invalid"  # a promise broken
    NO_EVIDENCE = "no evidence"  # nothing attempted, acknowledged or delivered: neither a pass nor a catch

    @property
    def evidence(self) -> bool:
        """Does the run say anything about the design? (A no-evidence run is counted apart.)"""
        return self is not Verdict.NO_EVIDENCE


#: how bad each verdict with evidence is, for the worst of several runs
SEVERITY = {Verdict.VALID: 0, Verdict.ALLOWED: 1, Verdict.INVALID: 2}


def worst(verdicts: Iterable[str]) -> Verdict:
    """The worst verdict among runs that gave evidence; no evidence only if none did."""
    judged = [Verdict(v) for v in verdicts]
    with_evidence = [v for v in judged if v.evidence]
    if with_evidence:
        return max(with_evidence, key=SEVERITY.__getitem__)
    return Verdict.NO_EVIDENCE


@dataclass(frozen=True)
class Counts:
    """What the checker counted in a run (``lab.judge.checker``), passed whole to the judge."""

    attempts: int  # puts invoked
    enqueued: int  # puts acknowledged
    dequeued: int  # deliveries (releases handed back left out)
    ok: int = 0  # deliveries of messages that were attempted
    lost: int = 0  # acknowledged puts never delivered
    unexpected: int = 0  # deliveries of messages never attempted
    duplicated: int = 0  # deliveries beyond a message's attempts
    recovered: int = 0  # delivered although no put of them was acknowledged
    inversions: int | None = None  # pairs out of real-time order; None: the order was not measured
    #: operations of the measured phases that failed or timed out, by what they were
    failed: Mapping[str, int] = field(default_factory=dict)

    def of(self, anomaly: str) -> int:
        """The count of ``anomaly`` (``LOST``, ``DUPLICATED``, ``REORDERED``)."""
        return {LOST: self.lost, DUPLICATED: self.duplicated, REORDERED: self.inversions or 0}[anomaly]

    def problem(self) -> str | None:
        """Why the counts cannot be evidence about delivery, whatever else they show, or None."""
        if self.attempts == 0:
            return "no put was attempted"
        if self.enqueued == 0:
            return "no put was acknowledged"
        return None


class Cause(StrEnum):
    """What in the history explains one anomalous message (``lab.judge.attribution``)."""

    FAULT = "fault"  # an allowance's fault could have hurt it (in force while it lived, or struck its holders)
    CUT_GET = "cut get"  # an allowance: a get whose reply never came could have taken it
    BROKEN_READ = "broken read"  # an allowance: a consumer's connection broke while it waited
    LEASE = "lease"  # a redelivery: the previous delivery's lease ran out unacknowledged
    HANDED_BACK = "handed back"  # a redelivery: its consumer's connection broke before the ack
    RECORDED = "recorded"  # read from a manifest of old: only its words are known


@dataclass(frozen=True)
class Explanation:
    """Why some of a run's ``anomaly`` happened: its cause, the fault kinds that struck (for
    ``FAULT``), the allowance's own words (the design's ``Allowance.why``; for ``RECORDED``,
    the old manifest's words) and the lease (for ``LEASE``)."""

    anomaly: str
    cause: Cause
    faults: tuple[str, ...] = ()
    allowance: str | None = None
    lease_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, ())}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Explanation":
        return cls(d["anomaly"], Cause(d["cause"]), tuple(d.get("faults") or ()), d.get("allowance"), d.get("lease_s"))


#: per explanation, how much of its anomaly's count it accounts for
Explained = Mapping[Explanation, int]


def explanations_to_list(explained: Explained) -> list[dict[str, Any]]:
    """As a manifest holds them: one entry per explanation, with its count."""
    return [{**e.to_dict(), "count": n} for e, n in explained.items()]


def explanations_from_manifest(verdict: Mapping[str, Any]) -> dict[Explanation, int] | None:
    """A manifest verdict's explanations: its ``explanations`` list; a manifest of old holds
    ``explained`` (per anomaly, each explanation's words and count), read as ``RECORDED``;
    None for a run recorded before anomalies were explained message by message."""
    if "explanations" in verdict:
        return {Explanation.from_dict(d): int(d["count"]) for d in verdict["explanations"]}
    old = verdict.get("explained")
    if old is None:
        return None
    return {Explanation(anomaly, Cause.RECORDED, allowance=words): int(n)
            for anomaly, by in old.items() for words, n in by.items()}


class Standing(StrEnum):
    """How a finding weighs in the verdict."""

    BROKEN = "broken"  # a broken promise: the run is invalid
    ALLOWED = "allowed"  # an anomaly the promises permit under a fault: the run is allowed at best
    NOTE = "note"  # part of what the design promises (a redelivery under at-least-once), or only reported


class Excuse(StrEnum):
    """Why a finding with no explanation is still no broken promise."""

    NO_ORDER = "no order promised"
    REDELIVERS = "at-least-once redelivers"  # the rule of a manifest of old
    FAULT_FREE = "with no fault in the run"  # a failed operation, reported


@dataclass(frozen=True)
class Finding:
    """One thing the verdict found: ``count`` of ``anomaly`` (an anomaly, ``UNEXPECTED``,
    ``REFUSED`` puts or ``FAILED`` operations, then ``operation`` names which), how it
    stands, and what explains it (None for a broken promise: nothing does)."""

    standing: Standing
    anomaly: str
    count: int
    explanation: Explanation | None = None
    excuse: Excuse | None = None
    operation: str | None = None
