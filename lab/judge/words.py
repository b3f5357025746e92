"""The judge's sentences: every word a verdict is printed or written in, made here and only
here, from the records of ``lab.judge.findings``.

A reason reads, broken promises first: "lost 7 acknowledged messages that no fault explains
(the run had no fault); kestrel promises no loss of an acknowledged message but under a
fault that could have hurt it; 3 duplicate deliveries after a lease of 5 s ran out
unacknowledged".
"""

from __future__ import annotations

from typing import Iterable

from lab.design.promises import AT_LEAST_ONCE, Promises
from lab.judge.findings import (DUPLICATED, FAILED, INTERNAL, LOST, REFUSED, REORDERED, UNEXPECTED, Cause, Counts, Excuse,
                                Explanation, Finding, Standing, Verdict)
from lab.judge.order import Reordering

NO_ANOMALY = "nothing lost, unexpected, duplicated or reordered"


def count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def anomaly(what: str, n: int) -> str:
    """``n`` of an anomaly: "lost 3 acknowledged messages", "1 duplicate delivery"."""
    if what == LOST:
        return f"lost {count(n, 'acknowledged message')}"
    if what == DUPLICATED:
        return count(n, "duplicate delivery", "duplicate deliveries")
    if what == REORDERED:
        return f"{count(n, 'inversion')} of the real-time order"
    raise ValueError(f"no words for the anomaly {what!r}")


def explanation(e: Explanation, allowed: bool = True) -> str:
    """What explains an anomaly: "under crash: allowed, syncJournal=never loses the unsynced
    tail". ``allowed`` False: the anomaly is one the promises expect (a note of a valid run,
    such as a duplicate of an at-least-once design), so it is not called allowed."""
    said = "allowed, " if allowed else "as promised, "
    if e.cause is Cause.FAULT:
        return f"under {', '.join(e.faults)}: {said}{e.allowance}"
    if e.cause is Cause.CUT_GET:
        return f"after a get whose reply never came: {said}{e.allowance}"
    if e.cause is Cause.BROKEN_READ:
        return f"after a consumer's connection broke: {said}{e.allowance}"
    if e.cause is Cause.LEASE:
        return f"after a lease of {e.lease_s:g} s ran out unacknowledged"
    if e.cause is Cause.HANDED_BACK:
        return "handed back unacknowledged when its consumer's connection broke"
    return e.allowance or "explained"  # RECORDED: the words an old manifest holds


def promise(what: str, promises: Promises) -> str:
    """What the design promises about anomaly ``what``, in words."""
    if what == LOST:
        return "no loss of an acknowledged message but under a fault that could have hurt it"
    if what == DUPLICATED:
        if promises.delivery != AT_LEAST_ONCE:
            return promises.delivery
        back = ([f"its lease of {promises.lease_s:g} s expires"] if promises.lease_s is not None else []) + (
            ["its consumer's connection closes"] if promises.hands_back_on_close else [])
        return f"{promises.delivery}: a delivery comes again only after {' or '.join(back + ['a release or a fault'])}"
    return promises.order


def finding(f: Finding, promises: Promises, faults: frozenset[str]) -> str:
    """One finding as the reason says it."""
    if f.anomaly == UNEXPECTED:
        return f"delivered {count(f.count, 'message')} never sent; no design may invent messages"
    if f.anomaly == REFUSED and f.operation == "ack":
        return (f"{count(f.count, 'ack')} refused that no lease, broken connection or fault explains; "
                "a design must take the acknowledgement of a delivery it still holds for its consumer")
    if f.anomaly == REFUSED:
        return (f"{count(f.count, 'put')} refused with no fault in the run; every design promises "
                "to take puts while nothing is wrong")
    if f.anomaly == FAILED and f.operation == INTERNAL:
        return (f"{count(f.count, 'operation')} answered with an {INTERNAL} (the server's own code raised); "
                "a design must answer every request it takes, under faults too")
    if f.anomaly == FAILED:
        return f"{count(f.count, f.operation or 'operation')} {Excuse.FAULT_FREE}"
    said = anomaly(f.anomaly, f.count)
    if f.explanation is not None:
        return f"{said} {explanation(f.explanation, allowed=f.standing is not Standing.NOTE)}"
    if f.excuse is not None:
        return f"{said} ({f.excuse})"
    during = f" (the run's faults: {', '.join(sorted(faults))})" if faults else " (the run had no fault)"
    cause = "lease, release or fault" if f.anomaly == DUPLICATED else "fault"
    return f"{said} that no {cause} explains{during}; {promises.by} promises {promise(f.anomaly, promises)}"


def reason(findings: Iterable[Finding], promises: Promises, faults: frozenset[str], problem: str | None) -> str:
    """A verdict's reason: broken promises first, then what was allowed, then the notes; "no
    evidence: ..." first of all for a run that cannot be evidence."""
    findings = list(findings)
    said = [finding(f, promises, faults) for standing in (Standing.BROKEN, Standing.ALLOWED, Standing.NOTE)
            for f in findings if f.standing is standing]
    if problem is not None:
        said.insert(0, f"no evidence: {problem}")
    return "; ".join(said) or NO_ANOMALY


def line(verdict: Verdict, note: str, counts: Counts, r: Reordering) -> str:
    """A run's verdict in one line, as `lab run` prints it: the verdict, its reason, the counts."""
    note = note.removeprefix("no evidence: ") if verdict is Verdict.NO_EVIDENCE else note
    said = verdict.upper() if note == NO_ANOMALY else f"{verdict.upper()} ({note})"
    return (f"{said}: {counts.attempts} attempted, {counts.ok} ok, {counts.lost} lost, "
            f"{counts.unexpected} unexpected, {counts.duplicated} duplicated, {counts.recovered} recovered; "
            f"{r.inversions} inversions ({r.overtaken} of {r.checked} messages overtaken, at most by "
            f"{r.most_overtakers}; order per {r.scope})")
