"""The delivery checker: Jepsen's total-queue verdict plus per-producer reordering.

Reads a run's samples (puts and gets with their outcomes) and answers "what went in,
what came out":

- attempts: every put invoked; enqueued: puts that returned ok;
- ok: dequeued values that were attempted (multiset intersection);
- unexpected: dequeued values never attempted; duplicated: dequeued more often than
  attempted; lost: ok puts never dequeued; recovered: dequeued although the put's
  outcome was not ok (Jepsen: ok minus enqueued);
- the verdict holds these counts and the reordering to what the design promises under
  the run's options, read mode and faults (``lab.verdict.judge_run``): ``valid``,
  ``allowed`` (an anomaly the promises permit under one of the run's faults) or
  ``invalid`` (a broken promise, named). A run that is no evidence at all — no put
  acknowledged, nothing ever delivered — is invalid (a client timeout shorter than the
  network's round trip must not pass as a clean run). Without the run's facts (a bare
  history) the rule is Jepsen's: nothing lost, nothing unexpected.

Reordering is measured per (producer, consumer) stream, the one order every FIFO
queue keeps however many consumers share it: each consumer must see a producer's
messages in increasing sequence. For each stream, the first deliveries in completion
order give inversions (pairs out of order) and the largest displacement (how far a
message landed from its place in sequence order).

A get whose consumer then released the message (a ``release`` row, whatever its outcome:
a release refused or lost still leaves the message to come back) is no delivery: the
message was handed back, and its next delivery is the one that counts. A released message
is left out of the reordering: it comes back behind later ones by design.

The checker needs a complete drain, like Jepsen's: the runner drains every queue
before it stops.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lab.message import split_id
from lab.record import ok_ops
from lab.verdict import NO_ANOMALY, Judgement, RunFacts, delivery_problem, judge_run

EXAMPLES = 10  # how many ids of each anomaly the verdict lists


@dataclass
class Reordering:
    streams: int = 0
    reordered_streams: int = 0
    inversions: int = 0
    max_displacement: int = 0


@dataclass
class Verdict:
    attempts: int
    enqueued: int
    dequeued: int
    ok: int
    lost: int
    unexpected: int
    duplicated: int
    recovered: int
    reordering: Reordering
    examples: dict[str, list[str]] = field(default_factory=dict)
    #: the design, options, read mode and faults the counts are judged against (None: Jepsen's rule)
    facts: RunFacts | None = None

    @property
    def problem(self) -> str | None:
        """Why the run shows nothing about delivery, or None."""
        return delivery_problem(self.attempts, self.enqueued, self.dequeued)

    @cached_property
    def judgement(self) -> Judgement:
        return judge_run(self.facts, attempts=self.attempts, enqueued=self.enqueued, dequeued=self.dequeued,
                         lost=self.lost, unexpected=self.unexpected, duplicated=self.duplicated,
                         inversions=self.reordering.inversions)

    @property
    def verdict(self) -> str:
        """valid, allowed or invalid (``lab.verdict``)."""
        return self.judgement.verdict

    @property
    def reason(self) -> str:
        return self.judgement.reason

    @property
    def valid(self) -> bool:
        return self.judgement.valid

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("facts")  # the manifest holds them: backend, options, workload, fault_kinds
        d.update(verdict=self.verdict, reason=self.reason, valid=self.valid, problem=self.problem)
        return d

    def line(self) -> str:
        verdict = self.verdict.upper()
        note = self.problem or (None if self.reason == NO_ANOMALY else self.reason)
        if note:
            verdict = f"{verdict} ({note})"
        r = self.reordering
        return (
            f"{verdict}: {self.attempts} attempted, {self.ok} ok, {self.lost} lost, "
            f"{self.unexpected} unexpected, {self.duplicated} duplicated, {self.recovered} recovered; "
            f"{r.inversions} inversions ({r.reordered_streams} of {r.streams} streams reordered, "
            f"largest displacement {r.max_displacement})"
        )


def check(samples: pa.Table, facts: RunFacts | None = None) -> Verdict:
    """The verdict of one run's samples (a table with the sample schema), judged against
    the promises ``facts`` name (None: Jepsen's total-queue rule)."""
    ops = samples.column("op")
    puts = samples.filter(pc.equal(ops, "put"))
    gets = ok_ops(samples, "get")

    attempts = Counter(puts.column("msg_id").to_pylist())
    attempts.pop(None, None)
    put_ok = puts.filter(pc.equal(puts.column("outcome"), "ok"))
    enqueued = Counter(put_ok.column("msg_id").to_pylist())
    released = Counter(samples.filter(pc.equal(ops, "release")).column("msg_id").to_pylist())
    released.pop(None, None)
    dequeued = Counter(gets.column("msg_id").to_pylist()) - released  # handed back: not delivered

    ok = dequeued & attempts
    unexpected = Counter({v: n for v, n in dequeued.items() if v not in attempts})
    duplicated = dequeued - attempts - unexpected
    lost = enqueued - dequeued
    recovered = ok - enqueued

    examples = {
        name: sorted(c)[:EXAMPLES]
        for name, c in (("lost", lost), ("unexpected", unexpected), ("duplicated", duplicated), ("recovered", recovered))
        if c
    }
    return Verdict(
        attempts=sum(attempts.values()),
        enqueued=sum(enqueued.values()),
        dequeued=sum(dequeued.values()),
        ok=sum(ok.values()),
        lost=sum(lost.values()),
        unexpected=sum(unexpected.values()),
        duplicated=sum(duplicated.values()),
        recovered=sum(recovered.values()),
        reordering=reordering(gets, attempts, set(released)),
        examples=examples,
        facts=facts,
    )


def reordering(gets: pa.Table, attempts: Counter, released: set[str] = frozenset()) -> Reordering:
    """Inversions and largest displacement over every (producer, consumer) stream, without
    the ``released`` messages."""
    done = pc.add(gets.column("t_start_ns"), gets.column("latency_ns")).to_numpy()
    order = np.argsort(done, kind="stable")  # completion order; ties keep record order
    clients = gets.column("client").to_pylist()
    ids = gets.column("msg_id").to_pylist()

    streams: dict[tuple[str, str], list[int]] = {}
    seen: set[tuple[str, str]] = set()
    for row in order.tolist():
        msg_id, consumer = ids[row], clients[row]
        if msg_id not in attempts or (consumer, msg_id) in seen or msg_id in released:
            continue  # unexpected values and redeliveries are counted elsewhere
        seen.add((consumer, msg_id))
        producer, seq = split_id(msg_id)
        streams.setdefault((producer, consumer), []).append(seq)

    result = Reordering(streams=len(streams))
    for key in sorted(streams):
        seqs = np.asarray(streams[key])
        if len(seqs) < 2 or bool(np.all(seqs[1:] > seqs[:-1])):
            continue
        inversions = count_inversions(seqs.tolist())
        if inversions:
            result.reordered_streams += 1
            result.inversions += inversions
            ranks = np.empty(len(seqs), dtype=np.int64)
            ranks[np.argsort(seqs, kind="stable")] = np.arange(len(seqs))
            result.max_displacement = max(result.max_displacement, int(np.abs(ranks - np.arange(len(seqs))).max()))
    return result


def count_inversions(values: list[int]) -> int:
    """Pairs i < j with values[i] > values[j], by merge sort in O(n log n)."""
    inversions = 0
    width, n = 1, len(values)
    current = list(values)
    while width < n:
        merged: list[int] = []
        for lo in range(0, n, 2 * width):
            left = current[lo : lo + width]
            right = current[lo + width : lo + 2 * width]
            i = j = 0
            while i < len(left) and j < len(right):
                if left[i] <= right[j]:
                    merged.append(left[i])
                    i += 1
                else:
                    merged.append(right[j])
                    inversions += len(left) - i
                    j += 1
            merged.extend(left[i:])
            merged.extend(right[j:])
        current = merged
        width *= 2
    return inversions
