"""Real-time order: which delivered messages overtook which, in one queue (or one consumer).

The order a FIFO queue owes its clients is real-time order, as linearizability defines it.
Each message of a run has a put, invoked at ``put_start`` and, if it returned ok,
acknowledged at ``put_acked``; and a delivery, its one ok get, invoked at ``get_start`` and
returned at ``get_done``. Message B *overtook* message A, in the same queue (whichever
producers put them), when

    A.put_acked < B.put_start   (A was acknowledged before B's put was invoked), and
    B.get_done  < A.get_start   (B was delivered before A's get was invoked).

Each such pair (A, B) is one inversion. Calls that overlap promise nothing about each
other, so two puts in flight at once (open-loop producers, a pool of clients) or two gets
in flight at once are never counted, across producers and consumers alike. A design that
promises order per consumer only (a client that serves its gets from the buffer of one
fetch) is checked with ``per_consumer``: then A and B must also have been delivered to the
same consumer.

Instants are whole nanoseconds, and the sim's clients begin their next operation in the very
nanosecond the last one returned: so an operation that took time and ended in the nanosecond
another began counts as before it (its effect lay inside its call, strictly before that
instant, unless the network and the server took no time at all); one that took no time does
not. In "ticks" of half a nanosecond (``Timeline``): a call begins at ``2 t`` and ends at
``2 t - 1`` if it took time, ``2 t`` if not, and "before" is ``<`` on ticks.

One client's calls are a sequence whatever their instants: a call it made after another
ended came after it, even when the clock did not move between them (a prefetching client
handing out the records of one fetch from its buffer takes no time in the sim). So a call
that took no time is also before the calls its own client made next in the same tick — the
client's order is its rows' order, the recorder's — while calls of different clients at the
same instant stay unordered (``_tied`` counts the pairs that only this orders).

What is checked: messages attempted (a put row) and delivered exactly once, never released
(a release that failed, ``fail``, did not happen).
A released message comes back behind later ones by design; a redelivered one has no single
delivery to order; an unexpected one (never attempted) has no put. The delivery and
duplicate counts of ``lab.judge.checker`` speak for all of those.

How: for every A, counting the B with ``put_start > A.put_acked`` and ``get_done <
A.get_start`` is two-dimensional dominance counting. The queue (or queue and consumer) is
folded into both coordinates (``group * span + time``), so a pair of different groups can
never satisfy both inequalities and one count serves every group at once. A first pass
finds, with one sort per side and a running minimum (maximum), the messages overtaken at
all, then (against those alone) the messages that overtook any; a run that keeps its order
ends there. The rest are
counted exactly by a bottom-up merge sort over the first coordinate, one vectorised numpy
pass per level: each level counts, for each message in the right half of a block, the
overtakers in the left half below it in the second coordinate, then partitions each block
stably by half. Everything is a numpy array over the messages; nothing is a Python object
per message.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lab.history.record import HANDING_BACK, mask

PER_QUEUE, PER_CONSUMER = "queue", "consumer"  # what two messages share for their order to count
_NONE = np.iinfo(np.int64).max  # no such instant (a put never acknowledged)


@dataclass
class Reordering:
    """The order check's summary (``lab.judge.checker``'s ``Verdict.reordering``)."""

    scope: str = PER_QUEUE  # PER_QUEUE, or PER_CONSUMER for a design that promises no more
    queues: int = 0  # queues with a message in the check
    checked: int = 0  # messages in the check: attempted, delivered exactly once, never released
    overtaken: int = 0  # messages that at least one message overtook
    inversions: int = 0  # pairs (A, B) where B overtook A
    most_overtakers: int = 0  # the most messages that overtook one message


@dataclass(frozen=True)
class Timeline:
    """The checked messages of a run, one array entry each; instants in ticks (see above)."""

    index: np.ndarray  # the message's index among the run's distinct ids (the checker's codes)
    group: np.ndarray  # its queue (with per_consumer: its queue and the consumer it went to), coded
    put_start: np.ndarray  # its first put's invocation
    put_acked: np.ndarray  # its first put's acknowledgement; _NONE where no put of it returned ok
    get_start: np.ndarray  # its delivery's invocation
    get_done: np.ndarray  # its delivery's return
    queues: int  # distinct queues among them
    # where each call stands in its client's sequence (its row) and which client made it: for
    # calls of one client in one tick (``_tied``)
    put_start_row: np.ndarray  # the row of its first put
    put_acked_row: np.ndarray  # the row of its first acknowledged put; -1 where none
    get_row: np.ndarray  # the row of its delivery
    put_start_client: np.ndarray
    put_acked_client: np.ndarray
    get_client: np.ndarray


@dataclass(frozen=True)
class OrderCheck:
    """What ``check_order`` finds: per message, and in sum."""

    counts: np.ndarray  # per message index (length n): how many messages overtook it
    summary: Reordering


def timeline(samples: pa.Table, codes: np.ndarray, n: int, per_consumer: bool = False) -> Timeline:
    """The checked messages of ``samples`` (the sample schema's op, client, msg_id,
    t_start_ns, latency_ns and outcome columns, and queue if present: without it, one queue),
    ``codes`` each row's message index (-1: none) among ``n`` distinct ids."""
    start = samples.column("t_start_ns").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    latency = samples.column("latency_ns").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    ok = mask(samples, "outcome", "ok")
    op = _encode(samples.column("op"), ("put", "get"))
    op[mask(samples, "op", *HANDING_BACK)] = 2  # a release, or an abandon: handed back
    op[codes < 0] = -1  # a row with no message (an empty get) is none of them
    op[(op == 2) & mask(samples, "outcome", "fail")] = -1  # a release that failed handed nothing back
    client = _encode(samples.column("client"))
    put_rows = np.flatnonzero(op == 0)
    got_rows = np.flatnonzero((op == 1) & ok)

    # per message: its first put's invocation, and its first acknowledgement (in ticks)
    put_codes = codes[put_rows]
    put_start = _least(n, put_codes, 2 * start[put_rows])
    acked = ok[put_rows]
    acked_rows = put_rows[acked]
    put_acked = _least(n, put_codes[acked], _ticks_done(start[acked_rows], latency[acked_rows]))
    # the row of the put that holds each instant (the first such in its client's order, at a tie)
    first_put = _first_row(n, put_codes, 2 * start[put_rows], put_rows)
    first_ack = _first_row(n, put_codes[acked], _ticks_done(start[acked_rows], latency[acked_rows]), acked_rows)
    del acked, acked_rows, ok

    # checked: put, delivered exactly once, never released
    checked = (put_start != _NONE) & (np.bincount(codes[got_rows], minlength=n) == 1)
    checked[codes[op == 2]] = False
    del op
    rows = got_rows[checked[codes[got_rows]]]  # each checked message's one delivery
    del got_rows, checked
    index = codes[rows].astype(np.int64)
    queue_of = np.zeros(n, np.int64)
    if "queue" in samples.column_names:
        queue_of[put_codes] = _encode(samples.column("queue"))[put_rows]  # a message's puts share its queue
    del put_rows, put_codes
    group = queue_of[index]
    queues = int(np.count_nonzero(np.bincount(group))) if group.size else 0
    if per_consumer and rows.size:
        consumer = client[rows]
        group = group * (int(consumer.max()) + 1) + consumer
    put_row, ack_row = first_put[index], first_ack[index]
    no_ack = ack_row == _NONE
    ack_row = np.where(no_ack, -1, ack_row)
    return Timeline(index, group, put_start[index], put_acked[index], 2 * start[rows],
                    _ticks_done(start[rows], latency[rows]), queues, put_row, ack_row, rows.astype(np.int64),
                    client[put_row], np.where(no_ack, -1, client[np.maximum(ack_row, 0)]), client[rows])


def _ticks_done(start: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """When calls ended, in ticks: one that took time ended before its last nanosecond."""
    ticks: np.ndarray = 2 * (start + latency) - (latency > 0)  # numpy's stubs type this Any
    return ticks


def _least(n: int, codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per code (``n`` of them): the least of its ``values``; ``_NONE`` where it has none."""
    out = np.full(n, _NONE, np.int64)
    if codes.size == 0 or np.bincount(codes).max() == 1:  # each code once (a put each): a plain scatter,
        out[codes] = values  # several times faster than ``np.minimum.at``
    else:
        np.minimum.at(out, codes, values)
    return out


def _first_row(n: int, codes: np.ndarray, ticks: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per code (``n`` of them): the row of its least tick, the first row among equal ones;
    ``_NONE`` where it has none."""
    out = np.full(n, _NONE, np.int64)
    if codes.size == 0 or np.bincount(codes).max() == 1:  # each code once: a plain scatter
        out[codes] = rows
        return out
    order = np.lexsort((rows, ticks, codes))
    ordered = codes[order]
    first = order[np.r_[True, ordered[1:] != ordered[:-1]]]
    out[codes[first]] = rows[first]
    return out


def check_order(samples: pa.Table, codes: np.ndarray, n: int, per_consumer: bool = False) -> OrderCheck:
    """The order check of a run's samples (``timeline``'s arguments): how many messages
    overtook each message, and the summary."""
    t = timeline(samples, codes, n, per_consumer)
    per_checked = overtakers_of(t) + _tied(t)
    counts = np.zeros(n, np.int64)
    counts[t.index] = per_checked
    summary = Reordering(scope=PER_CONSUMER if per_consumer else PER_QUEUE, queues=t.queues, checked=int(t.index.size),
                         overtaken=int(np.count_nonzero(per_checked)), inversions=int(per_checked.sum()),
                         most_overtakers=int(per_checked.max(initial=0)))
    return OrderCheck(counts, summary)


def overtakers(samples: pa.Table, codes: np.ndarray, n: int, per_consumer: bool = False) -> np.ndarray:
    """Per message index (an int64 array of length ``n``, aligned with ``codes``' ids): how
    many messages overtook it; 0 for a message outside the check."""
    return check_order(samples, codes, n, per_consumer).counts


def reordering(samples: pa.Table, codes: np.ndarray, n: int, per_consumer: bool = False) -> Reordering:
    """The summary the checker reports."""
    return check_order(samples, codes, n, per_consumer).summary


def overtakers_of(t: Timeline) -> np.ndarray:
    """Per checked message of ``t``: how many checked messages overtook it."""
    m = t.index.size
    counts = np.zeros(m, np.int64)
    if m < 2:
        return counts
    # a message as the one overtaken ("query"): (put_acked, get_start); as the one that
    # overtakes ("point"): (put_start, get_done); B overtakes A when B's point is right of
    # and below A's query
    queries = np.flatnonzero(t.put_acked != _NONE)  # never acknowledged: no message owed it its place
    px, py, qx, qy = _keys(t.group, t.put_start, t.get_done, t.put_acked[queries], t.get_start[queries],
                           group_of_queries=t.group[queries])
    overtaken, overtook = _involved(px, py, qx, qy)
    if overtaken.any():
        counts[queries[overtaken]] = _dominance(px[overtook], py[overtook], qx[overtaken], qy[overtaken])
    return counts


def _tied(t: Timeline) -> np.ndarray:
    """Per checked message of ``t``: the checked messages that overtook it only by a client's
    own sequence — a call that took no time before that client's next call in the same tick,
    which ticks alone leave unordered. Ticks already order every other pair, and such a tie
    needs equal ticks on one side at least, so the pairs counted here and by
    ``overtakers_of`` are disjoint:

    - its delivery and the overtaker's are calls of one consumer in one tick, the
      overtaker's first, and its put was acknowledged before the overtaker's was invoked;
    - its put's acknowledgement and the overtaker's put are calls of one producer in one
      tick, its own first, and the overtaker was delivered before its get was invoked;
    - both at once.
    """
    m = t.index.size
    counts = np.zeros(m, np.int64)
    if m < 2:
        return counts
    acked = t.put_acked != _NONE
    zero_get = t.get_done == t.get_start  # a delivery that took no time: it may precede a call of its tick
    zero_ack = acked & (t.put_acked % 2 == 0)  # an acknowledgement that took no time, likewise
    after_zero_get = acked & np.isin(t.get_start, t.get_done[zero_get])
    after_zero_ack = np.isin(t.put_start, t.put_acked[zero_ack])
    get_tick = (t.get_client, t.get_done), (t.get_client, t.get_start)  # (the overtaker's, the overtaken's)
    put_tick = (t.put_start_client, t.put_start), (t.put_acked_client, t.put_acked)
    cases = (  # points (overtakers), queries (overtaken), the keys they share, and the two orders
        (zero_get, after_zero_get, [get_tick], (-t.get_row, -t.put_start), (-t.get_row, -t.put_acked)),
        (after_zero_ack, zero_ack, [put_tick], (t.put_start_row, t.get_done), (t.put_acked_row, t.get_start)),
        (zero_get & after_zero_ack, zero_ack & after_zero_get, [put_tick, get_tick],
         (t.put_start_row, t.get_row), (t.put_acked_row, t.get_row)),
    )
    for points, queries, ticks, (px, py), (qx, qy) in cases:
        p, q = np.flatnonzero(points), np.flatnonzero(queries)
        if not p.size or not q.size:
            continue
        point_key = np.stack([t.group[p], *(a[p] for tick in ticks for a in tick[0])], axis=1)
        query_key = np.stack([t.group[q], *(a[q] for tick in ticks for a in tick[1])], axis=1)
        _, key = np.unique(np.concatenate([point_key, query_key]), axis=0, return_inverse=True)
        key = key.reshape(-1)
        folded = _keys(key[:p.size], px[p], py[p], qx[q], qy[q], group_of_queries=key[p.size:])
        counts[q] += _dominance(*folded)
    return counts


def _keys(group: np.ndarray, px: np.ndarray, py: np.ndarray, qx: np.ndarray, qy: np.ndarray,
          group_of_queries: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each instant as ``group * span + (instant - first)``: comparisons within a group are
    the instants', and a smaller group is always smaller. Instants are replaced by their ranks
    where that would overflow (very long runs with very many groups)."""
    arrays = [a for a in (px, py, qx, qy) if a.size]
    first = min(int(a.min()) for a in arrays)
    span = max(int(a.max()) for a in arrays) - first + 1
    groups = max(int(group.max(initial=0)), int(group_of_queries.max(initial=0))) + 1
    if groups * span >= 2**62:  # ranks keep order and ties, in a span of at most 4m
        values, ranks = np.unique(np.concatenate([px, py, qx, qy]), return_inverse=True)
        first, span = 0, values.size
        px, py, qx, qy = np.split(ranks.astype(np.int64), np.cumsum([px.size, py.size, qx.size]))
    base_p, base_q = group * span - first, group_of_queries * span - first
    return px + base_p, py + base_p, qx + base_q, qy + base_q


def _involved(px: np.ndarray, py: np.ndarray, qx: np.ndarray, qy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Masks: the queries some point dominates (a point right of and below it), and the
    points that dominate some query. A point of another group never qualifies (``_keys``)."""
    by_px, by_qx = _argsort(px), _argsort(qx)
    below = np.append(np.minimum.accumulate(py[by_px][::-1])[::-1], _NONE)  # the lowest point at or right of each
    # sorted needles: numpy's binary search starts each from the one before, several times faster
    overtaken = np.empty(qx.size, bool)
    overtaken[by_qx] = below[np.searchsorted(px[by_px], qx[by_qx], side="right")] < qy[by_qx]
    del by_px, by_qx, below
    # a point dominates some query only if it dominates an overtaken one: few, in a run that
    # keeps (nearly all) its order, so the search below runs in cache
    x, y = qx[overtaken], qy[overtaken]
    by_x = np.argsort(x, kind="stable")
    above = np.insert(np.maximum.accumulate(y[by_x]), 0, np.iinfo(np.int64).min)  # the highest query up to each
    overtook = above[np.searchsorted(x[by_x], px, side="left")] > py
    return overtaken, overtook


def _argsort(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys)`` for non-negative keys; when each key and its index fit in 64 bits
    together, by sorting them packed into one unsigned word: numpy sorts plain integers with
    SIMD, several times faster than it argsorts them."""
    if keys.size == 0:
        return np.zeros(0, np.int64)
    shift = int(keys.size - 1).bit_length()
    if int(keys.max()).bit_length() + shift > 64:
        return np.argsort(keys, kind="stable")
    packed = keys.astype(np.uint64) << np.uint64(shift)
    packed |= np.arange(keys.size, dtype=np.uint64)
    packed.sort()
    packed &= np.uint64((1 << shift) - 1)
    return packed.astype(np.int64)


def _dominance(px: np.ndarray, py: np.ndarray, qx: np.ndarray, qy: np.ndarray) -> np.ndarray:
    """For each query: the points with x > its x and y < its y (both strict)."""
    kp, k = px.size, px.size + qx.size
    is_point = np.zeros(k, bool)
    is_point[:kp] = True
    x, y = np.concatenate([px, qx]), np.concatenate([py, qy])
    # the sequence: descending x, and at equal x queries first, so that the points earlier
    # in it are exactly those strictly right of a query
    position = np.empty(k, np.int64)
    position[np.lexsort((is_point, -x))] = np.arange(k)
    # every block of the merge sort in ascending y, queries first at equal y (strictly below)
    arr = np.lexsort((is_point, y))
    del x, y
    counts = np.zeros(k, np.int64)
    index = np.arange(k)
    level = max(1, int(k - 1).bit_length())
    for bit in range(level, 0, -1):
        # ``arr`` is sorted by (position >> bit, y): block j is arr[j * size : (j + 1) * size]
        size, half = 1 << bit, 1 << (bit - 1)
        block_start = index & ~(size - 1)
        left = (position[arr] & half) == 0  # the block's first half: earlier in the sequence
        points = is_point[arr]
        left_points = left & points
        seen = np.cumsum(left_points) - left_points  # left points before each, in y order
        right_queries = ~left & ~points
        counts[arr[right_queries]] += (seen - seen[block_start])[right_queries]
        # partition each block stably: its left half first, so that the halves are the next
        # level's blocks, each still in y order
        lefts = np.cumsum(left) - left
        lefts_before = lefts - lefts[block_start]
        left_size = np.minimum(half, k - block_start)
        target = block_start + np.where(left, lefts_before, left_size + (index - block_start) - lefts_before)
        nxt = np.empty_like(arr)
        nxt[target] = arr
        arr = nxt
    return counts[kp:]


def _encode(column: pa.ChunkedArray, values: tuple[str, ...] | None = None) -> np.ndarray:
    """Each row's code: with ``values``, its position among them (-1: none of them);
    without, its code among the column's values (a dictionary column's own indices: a code
    may then stand for no row, which costs nothing here). A dictionary column is read by
    its indices, a row never decoded."""
    if pa.types.is_dictionary(column.type):
        column = pa.table({"c": column}).unify_dictionaries().column("c")
    else:
        column = column.cast(pa.string()).fill_null("").dictionary_encode()
    if column.num_chunks == 0:
        return np.zeros(0, np.int64)
    dictionary = column.chunk(0).dictionary
    if values is not None:  # -1 for a row whose value is none of them (or null)
        where = {v: i for i, v in enumerate(values)}
        lookup = np.array([where.get(v, -1) for v in dictionary.to_pylist()] + [-1], np.int8)
        return np.concatenate([lookup[chunk.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False)]
                               for chunk in column.chunks])
    return np.concatenate([chunk.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
                           for chunk in column.chunks])
