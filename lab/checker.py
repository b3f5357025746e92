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

from lab.record import mask, message_codes
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
    """The verdict of one run's samples (a table with the sample schema, or at least its op,
    client, msg_id, t_start_ns, latency_ns and outcome columns; string columns may be
    dictionary-encoded), judged against the promises ``facts`` name (None: Jepsen's
    total-queue rule).

    The counts are multisets of message ids, kept as numpy counts over the run's distinct
    ids (Arrow hashes them), so a long run's check holds no Python object per message."""
    ids, codes = message_codes(samples)
    n = len(ids)
    put = mask(samples, "op", "put")
    ok_outcome = mask(samples, "outcome", "ok")
    got = mask(samples, "op", "get") & ok_outcome & (codes >= 0)  # deliveries, not empty polls

    def counts(rows: np.ndarray) -> np.ndarray:
        chosen = codes[rows]
        return np.bincount(chosen[chosen >= 0], minlength=n).astype(np.int32)

    attempts = counts(put)
    enqueued = counts(put & ok_outcome)
    released = counts(mask(samples, "op", "release"))
    dequeued = np.maximum(counts(got) - released, 0)  # handed back: not delivered
    del put, ok_outcome

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
    tally("duplicated", np.where(attempts > 0, np.maximum(dequeued - attempts, 0), 0))
    tally("lost", np.maximum(enqueued - dequeued, 0))
    examples = {name: examples[name] for name in ("lost", "unexpected", "duplicated", "recovered") if name in examples}
    rows = np.flatnonzero(got)
    gets = samples.select(["client", "t_start_ns", "latency_ns"]).take(pa.array(rows))
    return Verdict(
        attempts=int(attempts.sum(dtype=np.int64)),
        enqueued=int(enqueued.sum(dtype=np.int64)),
        dequeued=int(dequeued.sum(dtype=np.int64)),
        ok=totals["ok"],
        lost=totals["lost"],
        unexpected=totals["unexpected"],
        duplicated=totals["duplicated"],
        recovered=totals["recovered"],
        reordering=_reordering(gets, codes[rows], ids, attempts > 0, released > 0),
        examples=examples,
        facts=facts,
    )


def reordering(gets: pa.Table, attempts: Counter, released: set[str] = frozenset()) -> Reordering:
    """Inversions and largest displacement over every (producer, consumer) stream of the
    deliveries ``gets``, counting only messages in ``attempts`` and not ``released``."""
    gets = gets.filter(pc.is_valid(gets.column("msg_id")))
    ids, codes = message_codes(gets)
    names = ids.to_pylist()
    return _reordering(gets, codes, ids, np.array([m in attempts for m in names], dtype=bool),
                       np.array([m in released for m in names], dtype=bool))


def _reordering(gets: pa.Table, codes: np.ndarray, ids: pa.Array, attempted: np.ndarray,
                released: np.ndarray) -> Reordering:
    """``reordering`` on message codes: ``codes`` each delivery's index in ``ids`` (the
    distinct ids), ``attempted`` and ``released`` flags by index. Streams are in completion
    order (ties keep record order); a consumer's redelivery of a message is left out (the
    duplicates count it)."""
    if gets.num_rows == 0:
        return Reordering()
    done = pc.add(gets.column("t_start_ns"), gets.column("latency_ns")).to_numpy(zero_copy_only=False)
    consumers = pc.dictionary_encode(gets.column("client")).combine_chunks()
    consumer = consumers.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    keep = attempted[codes] & ~released[codes]
    order = np.argsort(done, kind="stable")  # completion order
    order = order[keep[order]]
    if order.size == 0:
        return Reordering()
    # the first delivery of each (consumer, message), in completion order
    pair = consumer[order] * len(ids) + codes[order]
    _, first = np.unique(pair, return_index=True)
    order = order[np.sort(first)]
    # producer and sequence number of each message id (``lab.message.split_id``)
    # (attempted ids only: the lab wrote them; an unexpected one need not parse)
    chosen = np.flatnonzero(attempted)
    parts = pc.split_pattern(ids.take(pa.array(chosen)), ":", max_splits=1, reverse=True)
    producers = np.zeros(len(ids), dtype=np.int64)
    seqs = np.zeros(len(ids), dtype=np.int64)
    producers[chosen] = pc.dictionary_encode(pc.list_element(parts, 0)).indices.to_numpy(zero_copy_only=False)
    seqs[chosen] = pc.cast(pc.list_element(parts, 1), pa.int64()).to_numpy(zero_copy_only=False)
    code = codes[order]
    stream = producers[code] * (int(consumer.max()) + 1) + consumer[order]
    seq = seqs[code]
    by_stream = np.argsort(stream, kind="stable")  # each stream's deliveries, still in completion order
    stream, seq = stream[by_stream], seq[by_stream]
    bounds = np.flatnonzero(np.diff(stream)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(stream)]])
    result = Reordering(streams=len(starts))
    falls = np.flatnonzero(np.diff(seq) <= 0) + 1  # positions where a stream's sequence goes down
    disordered = np.unique(np.searchsorted(starts, falls, side="right") - 1)
    for k in disordered.tolist():
        values = seq[starts[k]:ends[k]]
        if values.size < 2 or bool(np.all(values[1:] > values[:-1])):
            continue
        inversions = count_inversions(values)
        if inversions:
            result.reordered_streams += 1
            result.inversions += inversions
            ranks = np.empty(len(values), dtype=np.int64)
            ranks[np.argsort(values, kind="stable")] = np.arange(len(values))
            result.max_displacement = max(result.max_displacement, int(np.abs(ranks - np.arange(len(values))).max()))
    return result


def count_inversions(values: list[int] | np.ndarray) -> int:
    """Pairs i < j with values[i] > values[j]: a bottom-up merge sort whose every level is
    one vectorised pass (each element of a right half counts the larger ones of its left
    half), O(n log² n) in numpy."""
    current = np.asarray(values, dtype=np.int64)
    n = current.size
    if n < 2:
        return 0
    # ranks make the values dense, so that each block can be lifted into a range of its own
    current = np.unique(current, return_inverse=True)[1].astype(np.int64).reshape(-1)
    span = int(current.max()) + 1
    inversions = 0
    width = 1
    position = np.arange(n)
    while width < n:
        block = position // (2 * width)
        right = (position // width) % 2 == 1
        # each left half is sorted: lift block b's values by b * span and search them at once
        lifted = current + block * span
        left_sorted = lifted[~right]  # left halves, in order, each sorted, blocks ascending
        queries = lifted[right]
        # larger elements of its own left half = (end of that left half) - (first index > value)
        left_block = block[~right]
        left_end = np.searchsorted(left_block, block[right], side="right")
        inversions += int((left_end - np.searchsorted(left_sorted, queries, side="right")).sum())
        current = _merge_blocks(lifted, block, span)
        width *= 2
    return inversions


def _merge_blocks(lifted: np.ndarray, block: np.ndarray, span: int) -> np.ndarray:
    """The values sorted within each block of ``2 * width`` (lifted values sort by block first)."""
    return np.sort(lifted) - block * span
