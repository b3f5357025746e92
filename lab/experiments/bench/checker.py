"""`lab bench checker`: the real-time order check (``lab.judge.order``) on a synthetic history,
beside the per-stream check it replaced, in the same run.

The history: N messages from several producers over several queues, each producer an open
loop (Poisson starts, exponential put latencies, so puts overlap), each queue a FIFO that
hands its messages out in the order their puts took effect, to several consumers whose gets
overlap too; a small share of messages is handed out late (overtaken, as a redelivery after
a fault would be). Puts and gets become sample rows in completion order, the string columns
dictionary-encoded as the runner reads them back (``read_samples(lean=True)``).

Three figures, each the median of ``--repeats`` timed runs: the order check on the samples
and the checker's message codes (what ``lab.judge.checker.check`` calls); the peer, the old
per-(producer, consumer)-stream inversion count (``peer_stream_reordering``, kept here
since it left the checker); and, unless ``--no-whole``, the whole ``check()`` of the
samples. Peak resident memory of the process is reported with them.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

HELP = "the real-time order check on a synthetic history, beside the old per-stream check"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``lab bench checker``'s flags."""
    parser.add_argument("--messages", type=int, default=10_000_000, help="messages in the history (default 10,000,000)")
    parser.add_argument("--producers", type=int, default=8, help="producers (default 8)")
    parser.add_argument("--queues", type=int, default=4, help="queues (default 4)")
    parser.add_argument("--consumers", type=int, default=8, help="consumers (default 8)")
    parser.add_argument("--late", type=float, default=1e-4, help="share of messages handed out late (default 1e-4)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per case; the median is quoted (default 3)")
    parser.add_argument("--no-whole", action="store_true", help="do not time the whole check()")
    parser.add_argument("--seed", type=int, default=1, help="the history's seed (default 1)")
    parser.add_argument("--out", type=Path, help="JSON file (default: results/bench/checker-<time>.json)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """``lab bench checker`` with its parsed flags: the figures to save."""
    if args.messages < 1000:
        raise ValueError("--messages must be at least 1000")
    if min(args.producers, args.queues, args.consumers) < 1:
        raise ValueError("--producers, --queues and --consumers must be >= 1")
    if not 0 <= args.late < 1:
        raise ValueError("--late must be in [0, 1)")
    return bench_checker(args.messages, args.producers, args.queues, args.consumers, args.late, args.repeats,
                         whole=not args.no_whole, seed=args.seed)


def bench_checker(messages: int, producers: int = 8, queues: int = 4, consumers: int = 8, late: float = 1e-4,
                  repeats: int = 3, whole: bool = True, seed: int = 1,
                  echo: Callable[[str], None] = print) -> dict[str, Any]:
    from lab.judge.checker import check
    from lab.judge.order import reordering
    from lab.history.record import message_codes

    echo(f"order check on {messages:,} synthetic messages ({producers} producers, {queues} queues, "
         f"{consumers} consumers; median of {repeats}):")
    start = time.perf_counter()
    samples = synthetic_history(messages, producers, queues, consumers, late, seed)
    echo(f"  history: {samples.num_rows:,} rows in {time.perf_counter() - start:.1f} s")
    ids, codes = message_codes(samples)
    cases: dict[str, Callable[[], Any]] = {
        "order_check": lambda: reordering(samples, codes, len(ids)),
        "peer_stream_check": lambda: peer_stream_reordering(samples, codes, ids),
    }
    if whole:
        cases["whole_check"] = lambda: check(samples)
    results: dict[str, Any] = {"messages": messages, "rows": samples.num_rows, "producers": producers,
                               "queues": queues, "consumers": consumers, "late": late, "seed": seed}
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    inversions: dict[str, int] = {}
    for _ in range(repeats):  # round-robin, so that drift in a shared machine's speed hits every case alike
        for name, fn in cases.items():
            begin = time.perf_counter()
            value = fn()
            seconds[name].append(time.perf_counter() - begin)
            inversions[name] = (value.reordering if name == "whole_check" else value).inversions
    for name, runs in seconds.items():
        median = statistics.median(runs)
        results[name] = {"median_s": median, "runs_s": runs, "inversions": inversions[name],
                         "messages_per_s": messages / median}
        echo(f"  {name:<18} {median:8.2f} s   {messages / median:>12,.0f} messages/s   {inversions[name]:,} inversions"
             f"   (runs: {', '.join(f'{s:.2f}' for s in runs)})")
    results["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    echo(f"  peak RSS {results['peak_rss_bytes'] / 2**20:,.0f} MiB")
    return results


def synthetic_history(messages: int, producers: int, queues: int, consumers: int, late: float, seed: int):
    """Sample rows (op, client, queue, msg_id, t_start_ns, latency_ns, outcome) of a
    FIFO-per-queue run with overlapping puts and gets; ``late`` of the messages handed out
    late."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    n = messages
    # puts: an open loop at 100,000 puts/s in all, 200 us mean latency: about 20 in flight
    put_start = np.cumsum(rng.exponential(10_000, n)).astype(np.int64)
    put_latency = rng.exponential(200_000, n).astype(np.int64) + 1
    producer = rng.integers(0, producers, n)
    queue = producer % queues
    effect = put_start + (rng.random(n) * put_latency).astype(np.int64)  # when the put took effect
    # each queue hands its messages out in the order their puts took effect, to its consumers
    fifo = np.lexsort((effect, queue))
    handed = np.empty(n, np.int64)
    wait = rng.exponential(1_000_000, n).astype(np.int64)
    bounds = np.flatnonzero(np.diff(queue[fifo])) + 1
    for part in np.split(fifo, bounds):  # one pass per queue: strictly increasing hand-out instants
        handed[part] = np.maximum.accumulate(effect[part] + wait[part]) + np.arange(part.size)
    handed[rng.random(n) < late] += 5_000_000  # a few handed out 5 ms late: overtaken
    get_latency = rng.exponential(300_000, n).astype(np.int64) + 1
    get_start = handed - (rng.random(n) * get_latency).astype(np.int64)
    mine = [np.arange(c, consumers, queues) if c < consumers else np.array([c % consumers])
            for c in range(queues)]  # queue q's consumers, as the runner assigns them
    consumer = np.empty(n, np.int64)
    for q, readers in enumerate(mine):
        chosen = queue == q
        consumer[chosen] = readers[rng.integers(0, readers.size, int(chosen.sum()))]
    seq = np.empty(n, np.int64)
    for p in range(producers):
        chosen = np.flatnonzero(producer == p)
        seq[chosen] = np.arange(chosen.size)  # producer order: start order
    names = pc.binary_join_element_wise(
        pa.DictionaryArray.from_arrays(pa.array(producer.astype(np.int32)),
                                       pa.array([f"p{p}" for p in range(producers)])).cast(pa.string()),
        pc.cast(pa.array(seq), pa.string()), ":")
    # rows in completion order, as the recorder writes them
    done = np.concatenate([put_start + put_latency, get_start + get_latency])
    order = np.argsort(done, kind="stable")
    del done

    def coded(values: np.ndarray, labels: list[str]) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(values[order].astype(np.int32)), pa.array(labels))

    op = np.concatenate([np.zeros(n, np.int64), np.ones(n, np.int64)])
    client = np.concatenate([producer, producers + consumer])
    return pa.table({
        "op": coded(op, ["put", "get"]),
        "client": coded(client, [f"p{p}" for p in range(producers)] + [f"c{c}" for c in range(consumers)]),
        "queue": coded(np.concatenate([queue, queue]), [f"q{q}" for q in range(queues)]),
        "msg_id": pc.dictionary_encode(pa.concat_arrays([names, names]).take(pa.array(order))),
        "t_start_ns": pa.array(np.concatenate([put_start, get_start])[order]),
        "latency_ns": pa.array(np.concatenate([put_latency, get_latency])[order]),
        "outcome": coded(np.zeros(2 * n, np.int64), ["ok"]),
        # the rest of what the runner hands the checker (``lab.experiments.runner_manifest.CHECKED_COLUMNS``)
        "node": coded(client, [f"p{p}" for p in range(producers)] + [f"c{c}" for c in range(consumers)]),
        "error": pa.nulls(2 * n, pa.string()),
        "phase": coded(np.zeros(2 * n, np.int64), ["steady"]),
        "delay_ns": pa.nulls(2 * n, pa.int64()),
    })


# ----------------------------------------------------------------------------- the peer
# The checker's reordering until the real-time order check replaced it: inversions per
# (producer, consumer) stream, in the producer's issue order (which counts two puts whose
# calls overlapped as an inversion). Kept as it was, as this benchmark's peer.


def peer_stream_reordering(samples, codes: np.ndarray, ids) -> Any:
    """The old check from a run's samples, as ``check()`` called it: (streams, reordered
    streams, inversions, largest displacement) as a namespace."""
    import pyarrow as pa

    from lab.history.record import mask

    n = len(ids)
    ok = mask(samples, "outcome", "ok")
    got = mask(samples, "op", "get") & ok & (codes >= 0)
    attempted = np.bincount(codes[mask(samples, "op", "put")], minlength=n) > 0
    released = np.bincount(codes[mask(samples, "op", "release") & (codes >= 0)], minlength=n) > 0
    rows = np.flatnonzero(got)
    gets = samples.select(["client", "t_start_ns", "latency_ns"]).take(pa.array(rows))
    return _peer_streams(gets, codes[rows], ids, attempted, released)


def _peer_streams(gets, codes: np.ndarray, ids, attempted: np.ndarray, released: np.ndarray) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    result = argparse.Namespace(streams=0, reordered_streams=0, inversions=0, max_displacement=0)
    if gets.num_rows == 0:
        return result
    done = pc.add(gets.column("t_start_ns"), gets.column("latency_ns")).to_numpy(zero_copy_only=False)
    consumers = pc.dictionary_encode(gets.column("client")).combine_chunks()
    consumer = consumers.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    keep = attempted[codes] & ~released[codes]
    order = np.argsort(done, kind="stable")  # completion order
    order = order[keep[order]]
    if order.size == 0:
        return result
    # the first delivery of each (consumer, message), in completion order
    pair = consumer[order] * len(ids) + codes[order]
    _, first = np.unique(pair, return_index=True)
    order = order[np.sort(first)]
    # producer and sequence number of each message id (attempted ids only)
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
    result.streams = len(starts)
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
        current = np.sort(lifted) - block * span  # the values sorted within each block of 2 * width
        width *= 2
    return inversions
