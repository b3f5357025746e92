"""The delivery checker: Jepsen's total-queue verdict plus real-time order.

Reads a run's samples (puts and gets with their outcomes) and answers "what went in,
what came out":

- attempts: every put invoked; enqueued: puts that returned ok;
- ok: dequeued values that were attempted (multiset intersection);
- unexpected: dequeued values never attempted; duplicated: dequeued more often than
  attempted; lost: ok puts never dequeued; recovered: dequeued although the put's
  outcome was not ok (Jepsen: ok minus enqueued);
- the verdict holds these counts and the reordering to what the design promises under
  the run's options, read mode and faults (``lab.judge.verdict.judge_run``): ``valid``,
  ``allowed`` (an anomaly the promises permit under one of the run's faults),
  ``invalid`` (a broken promise, named) or ``no evidence`` (no put acknowledged, nothing
  ever delivered: a client timeout shorter than the network's round trip must not pass as
  a clean run, nor count as a catch). Without the run's facts (a bare history) the rule is
  Jepsen's: nothing lost, nothing unexpected.

Order is real-time order (``lab.judge.order``): message B overtook message A of the same queue
when A's put was acknowledged before B's put was invoked and B's get returned before A's
get was invoked, whichever producers and consumers; each such pair is an inversion, and
calls that overlap promise nothing. A design that promises order per consumer only
(``FIFO_PER_CONSUMER``) is checked per consumer. Messages delivered more than once are left
out of the order (the duplicates count them).

A get whose consumer then released the message (a ``release`` row whose outcome is ok or
unknown: a release lost on its way may still have happened) is no delivery: the message
was handed back, and its next delivery is the one that counts. A release that failed
(``fail``: it certainly did not happen) hands nothing back, so the delivery before it
stands and a later one is a duplicate. A released message is left out of the reordering:
it comes back behind later ones by design.

The checker needs a complete drain, like Jepsen's: the runner drains every queue
before it stops.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lab.judge import words
from lab.judge.attribution import attribute, failed_operations
from lab.judge.findings import REFUSED_ACK, Counts, Explanation, Verdict, explanations_to_list
from lab.judge.order import Reordering, check_order
from lab.judge.refused_acks import refused_acks
from lab.history.record import HANDING_BACK, mask, message_codes
from lab.design.promises import FIFO_PER_CONSUMER, NO_ORDER, total_queue
from lab.judge.verdict import Judgement, RunFacts, judge_run

EXAMPLES = 10  # how many ids of each anomaly the verdict lists


@dataclass
class Check:
    """What the checker found in one run: the counts, the reordering's summary, example ids
    of each anomaly, the explanations, and the judgement of them against ``facts``."""

    counts: Counts
    reordering: Reordering
    examples: dict[str, list[str]] = field(default_factory=dict)
    #: each explanation -> how much of its anomaly's count it accounts for (``lab.judge.attribution``)
    explained: dict[Explanation, int] = field(default_factory=dict)
    #: the design, options, read mode and faults the counts are judged against (None: Jepsen's rule)
    facts: RunFacts | None = None

    @cached_property
    def judgement(self) -> Judgement:
        return judge_run(self.facts, self.counts, self.explained)

    @property
    def verdict(self) -> Verdict:
        return self.judgement.verdict

    @property
    def reason(self) -> str:
        return self.judgement.reason

    @property
    def valid(self) -> bool:
        return self.judgement.valid

    def to_dict(self) -> dict[str, Any]:
        """As a run's manifest holds it (the facts are the manifest's own: backend, options,
        workload, fault_kinds)."""
        counts = asdict(self.counts)
        del counts["inversions"]  # the reordering's summary holds them
        return {**counts, "reordering": asdict(self.reordering), "examples": self.examples,
                "explanations": explanations_to_list(self.explained),
                "verdict": str(self.verdict), "reason": self.reason, "valid": self.valid,
                "broken": list(self.judgement.broken), "problem": self.judgement.problem}

    def line(self) -> str:
        return words.line(self.verdict, self.reason, self.counts, self.reordering)


@dataclass(frozen=True)
class Tallies:
    """Per message (indexed by ``message_codes``' distinct ids): puts invoked, puts
    acknowledged, and deliveries less those handed back (a failed release hands back none)."""

    attempts: np.ndarray
    enqueued: np.ndarray
    dequeued: np.ndarray

    @property
    def lost(self) -> np.ndarray:
        lost: np.ndarray = np.maximum(self.enqueued - self.dequeued, 0)
        return lost

    @property
    def duplicated(self) -> np.ndarray:
        return np.where(self.attempts > 0, np.maximum(self.dequeued - self.attempts, 0), 0)


def tallies(samples: pa.Table, codes: np.ndarray, n: int) -> Tallies:
    """The per-message counts every anomaly is made of (``codes``: each row's message index)."""
    put = mask(samples, "op", "put")
    ok_outcome = mask(samples, "outcome", "ok")
    got = mask(samples, "op", "get") & ok_outcome & (codes >= 0)  # deliveries, not empty polls

    def counts(rows: np.ndarray) -> np.ndarray:
        chosen = codes[rows]
        return np.bincount(chosen[chosen >= 0], minlength=n).astype(np.int32)

    released = counts(mask(samples, "op", *HANDING_BACK) & ~mask(samples, "outcome", "fail"))  # a failed one: none
    return Tallies(counts(put), counts(put & ok_outcome), np.maximum(counts(got) - released, 0))  # handed back: not delivered


def check(samples: pa.Table, facts: RunFacts | None = None) -> Check:
    """The verdict of one run's samples (a table with the sample schema, or at least its op,
    client, msg_id, t_start_ns, latency_ns and outcome columns; string columns may be
    dictionary-encoded), judged against the promises ``facts`` name (None: Jepsen's
    total-queue rule).

    The counts are multisets of message ids, kept as numpy counts over the run's distinct
    ids (Arrow hashes them), so a long run's check holds no Python object per message."""
    ids, codes = message_codes(samples)
    n = len(ids)
    tally_of = tallies(samples, codes, n)
    attempts, enqueued, dequeued = tally_of.attempts, tally_of.enqueued, tally_of.dequeued

    totals: dict[str, int] = {}
    examples: dict[str, list[str]] = {}

    def tally(name: str, c: np.ndarray) -> None:  # one anomaly array at a time: a long run has millions of ids
        totals[name] = int(c.sum(dtype=np.int64))
        chosen = np.flatnonzero(c)
        if chosen.size and name in ("lost", "unexpected", "duplicated", "recovered"):
            names = ids.take(pa.array(chosen))
            examples[name] = names.take(pc.sort_indices(names)[:EXAMPLES]).to_pylist()

    ok = np.minimum(dequeued, attempts)
    tally("ok", ok)
    tally("recovered", np.maximum(ok - enqueued, 0))
    del ok
    tally("unexpected", np.where(attempts == 0, dequeued, 0))
    duplicated = tally_of.duplicated
    tally("duplicated", duplicated)
    lost = tally_of.lost
    tally("lost", lost)
    examples = {name: examples[name] for name in ("lost", "unexpected", "duplicated", "recovered") if name in examples}
    promises = facts.promises() if facts is not None else total_queue("no declared promises")
    order = check_order(samples, codes, n, per_consumer=promises.order == FIFO_PER_CONSUMER)
    attribution = attribute(samples, codes, promises, lost=lost, duplicated=duplicated,
                            overtaken=order.counts if promises.order != NO_ORDER else None)
    failed = failed_operations(samples)
    if refused := refused_acks(samples, codes, promises):
        failed[REFUSED_ACK] = refused
    for anomaly, chosen in attribution.unexplained.items():
        names = ids.take(pa.array(chosen))
        examples[f"unexplained {anomaly}"] = names.take(pc.sort_indices(names)[:EXAMPLES]).to_pylist()
    return Check(
        counts=Counts(attempts=int(attempts.sum(dtype=np.int64)), enqueued=int(enqueued.sum(dtype=np.int64)),
                      dequeued=int(dequeued.sum(dtype=np.int64)), ok=totals["ok"], lost=totals["lost"],
                      unexpected=totals["unexpected"], duplicated=totals["duplicated"], recovered=totals["recovered"],
                      inversions=order.summary.inversions, failed=failed),
        reordering=order.summary,
        examples=examples,
        explained=dict(attribution.explained),
        facts=facts,
    )
