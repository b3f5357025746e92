"""Synthetic samples at scale, for benchmarking the pipeline: no simulation, just numbers.

Each run has messages that are put, got and acked (three sample rows each, sharing a
msg_id), lognormal latencies with a heavy tail (0.1 % of operations 20-200x slower),
a few failed and unknown outcomes, warm-up and drain phases. Several backends and both
worlds, so the pipeline groups the way it does on real runs. Written as Parquet with the
sample schema, a few million rows per file, reused when the same shape was made before.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lab.history.record import SAMPLE_SCHEMA

BACKENDS = tuple(f"design-{c}" for c in "abcd")  # four designs' labels: only their count matters
WORLDS = ("sim", "live")
ROWS_PER_FILE = 4_000_000
RATE = 50_000  # messages per second of a run


def _strings(value: str, n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value])).cast(pa.string())


def _chunk(rng: np.random.Generator, run_id: str, backend: str, world: str, first: int, count: int,
           total: int) -> pa.Table:
    """``count`` messages (3 rows each) of one run, starting at message ``first``."""
    seq = np.arange(first, first + count, dtype=np.int64)
    put_start = seq * (1_000_000_000 // RATE)

    def latencies(median_ns: float, sigma: float) -> np.ndarray:
        values = rng.lognormal(np.log(median_ns), sigma, count)
        tail = rng.random(count) < 0.001
        values[tail] *= rng.uniform(20, 200, int(tail.sum()))
        return np.maximum(values, 1).astype(np.int64)

    put_latency = latencies(200_000, 0.6)
    wait = latencies(400_000, 1.0)
    get_start = put_start + put_latency + wait
    get_latency = latencies(250_000, 0.6)
    ack_start = get_start + get_latency
    ack_latency = latencies(180_000, 0.5)

    producer = (seq % 8).astype(str)
    msg_id = pc.binary_join_element_wise(pc.binary_join_element_wise("p", pa.array(producer), ""),
                                         pa.array(seq.astype(str)), ":")
    fraction = seq / total
    phase = np.where(fraction < 0.05, "warmup", np.where(fraction > 0.98, "drain", "steady"))
    draw = rng.random(count)
    outcome = np.where(draw < 0.0005, "fail", np.where(draw < 0.001, "info", "ok"))

    n = 3 * count
    columns = {
        "run_id": _strings(run_id, n), "world": _strings(world, n), "backend": _strings(backend, n),
        "scenario": _strings("synthetic", n), "node": _strings("n0", n),
        "client": pa.array(np.concatenate([np.char.add("p", producer), np.full(2 * count, "c0")])),
        "op": pa.array(np.repeat(np.array(["put", "get", "ack"]), count)),
        "queue": _strings("q0", n),
        "msg_id": pa.concat_arrays([msg_id, msg_id, msg_id]),
        "t_start_ns": pa.array(np.concatenate([put_start, get_start, ack_start])),
        "latency_ns": pa.array(np.concatenate([put_latency, get_latency, ack_latency])),
        "outcome": pa.array(np.concatenate([outcome, np.full(2 * count, "ok")])),
        "error": pa.nulls(n, pa.string()),
        "bytes": pa.array(np.full(n, 100, dtype=np.int64)),
        "phase": pa.array(np.tile(phase, 3)),
        "delay_ns": pa.nulls(n, pa.int64()),
    }
    return pa.table([columns[f.name] for f in SAMPLE_SCHEMA], schema=SAMPLE_SCHEMA)


def make_samples(rows: int, directory: Path, seed: int = 1) -> list[Path]:
    """About ``rows`` sample rows over 8 runs (4 backends x 2 worlds), as Parquet files."""
    marker = directory / f".complete-{rows}-{seed}"
    files = sorted(directory.glob("*/samples-*.parquet"))
    if marker.exists():
        return files
    rng = np.random.default_rng(seed)
    runs = [(b, w) for b in BACKENDS for w in WORLDS]
    per_run = max(1, rows // (3 * len(runs)))
    written = []
    for backend, world in runs:
        run_id = f"synthetic-{backend}-{world}"
        run_dir = directory / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        step = ROWS_PER_FILE // 3
        for part, first in enumerate(range(0, per_run, step)):
            table = _chunk(rng, run_id, backend, world, first, min(step, per_run - first), per_run)
            path = run_dir / f"samples-{part:03d}.parquet"
            pq.write_table(table, path, compression="snappy")
            written.append(path)
    marker.touch()
    return written
