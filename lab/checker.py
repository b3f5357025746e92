"""The delivery checker: Jepsen's total-queue verdict plus per-producer reordering.

Reads a run's samples (puts and gets with their outcomes) and answers "what went in,
what came out":

- attempts: every put invoked; enqueued: puts that returned ok;
- ok: dequeued values that were attempted (multiset intersection);
- unexpected: dequeued values never attempted; duplicated: dequeued more often than
  attempted; lost: ok puts never dequeued; recovered: dequeued although the put's
  outcome was not ok (Jepsen: ok minus enqueued);
- valid iff nothing is lost and nothing unexpected — duplicates are counted, not
  failed, since at-least-once designs promise them — and the run is evidence at all: a
  run where no put was acknowledged, or where nothing was ever delivered, is never valid
  (a client timeout shorter than the network's round trip must not pass as a clean run).

Reordering is measured per (producer, consumer) stream, the one order every FIFO
queue keeps however many consumers share it: each consumer must see a producer's
messages in increasing sequence. For each stream, the first deliveries in completion
order give inversions (pairs out of order) and the largest displacement (how far a
message landed from its place in sequence order).

The checker needs a complete drain, like Jepsen's: the runner drains every queue
before it stops.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lab.message import split_id
from lab.record import ok_ops

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

    @property
    def problem(self) -> str | None:
        """Why the run shows nothing about delivery, or None."""
        return delivery_problem(self.attempts, self.enqueued, self.dequeued)

    @property
    def valid(self) -> bool:
        return is_valid(self.attempts, self.enqueued, self.dequeued, self.lost, self.unexpected)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["valid"] = self.valid
        d["problem"] = self.problem
        return d

    def line(self) -> str:
        verdict = "VALID" if self.valid else "INVALID"
        if self.problem:
            verdict = f"{verdict} ({self.problem})"
        r = self.reordering
        return (
            f"{verdict}: {self.attempts} attempted, {self.ok} ok, {self.lost} lost, "
            f"{self.unexpected} unexpected, {self.duplicated} duplicated, {self.recovered} recovered; "
            f"{r.inversions} inversions ({r.reordered_streams} of {r.streams} streams reordered, "
            f"largest displacement {r.max_displacement})"
        )


def delivery_problem(attempts: int, enqueued: int, dequeued: int) -> str | None:
    """Why a run's counts are no evidence about delivery, or None."""
    if attempts == 0:
        return "no put was attempted"
    if enqueued == 0:
        return "no put was acknowledged"
    if dequeued == 0:
        return "nothing was delivered"
    return None


def is_valid(attempts: int, enqueued: int, dequeued: int, lost: int, unexpected: int) -> bool:
    """The verdict rule, one place for the checker and the Spark pipeline."""
    return lost == 0 and unexpected == 0 and delivery_problem(attempts, enqueued, dequeued) is None


def check(samples: pa.Table) -> Verdict:
    """The verdict of one run's samples (a table with the sample schema)."""
    ops = samples.column("op")
    puts = samples.filter(pc.equal(ops, "put"))
    gets = ok_ops(samples, "get")

    attempts = Counter(puts.column("msg_id").to_pylist())
    attempts.pop(None, None)
    put_ok = puts.filter(pc.equal(puts.column("outcome"), "ok"))
    enqueued = Counter(put_ok.column("msg_id").to_pylist())
    dequeued = Counter(gets.column("msg_id").to_pylist())

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
        reordering=reordering(gets, attempts),
        examples=examples,
    )


def reordering(gets: pa.Table, attempts: Counter) -> Reordering:
    """Inversions and largest displacement over every (producer, consumer) stream."""
    done = pc.add(gets.column("t_start_ns"), gets.column("latency_ns")).to_numpy()
    order = np.argsort(done, kind="stable")  # completion order; ties keep record order
    clients = gets.column("client").to_pylist()
    ids = gets.column("msg_id").to_pylist()

    streams: dict[tuple[str, str], list[int]] = {}
    seen: set[tuple[str, str]] = set()
    for row in order.tolist():
        msg_id, consumer = ids[row], clients[row]
        if msg_id not in attempts or (consumer, msg_id) in seen:
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
