"""Samples: the row schema every run writes, the recorder, and the log-bucket histogram.

One operation is one sample row (schema in DESIGN.md): who did what, when it started,
how long it took and how it ended. Runs in either world, and Locust, write this schema
to Parquet; the checker and the Spark pipeline read it back.

``LogHistogram`` is the quick, mergeable latency summary: DDSketch's logarithmic
buckets, so any quantile it returns is within 1 % of a value in that bucket's range
(relative error ``ALPHA``), histograms add bucket by bucket, and they serialise to a
small JSON-able dict. ``bucket_index`` is the one mapping from a latency to its bucket;
the Spark pipeline uses the same formula so their counts agree.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

OPS = ("put", "get", "ack", "release", "abandon")
#: ops that hand a delivery back, so that its next delivery is the one that counts: a release
#: (unless it failed), and an abandon — a consumer that died holding a delivery it never
#: acknowledged (``lab.workloads.clients``' ``dies``): it sent nothing, and the design's
#: promise (a lease, or a hand-back when its connection closes) brings the message back. A
#: death between operations is an abandon without a message: its connection closed all the same
HANDING_BACK = ("release", "abandon")
FAULT_OP = "fault"  # a fault's start or heal (lab.history.phases), a row of the history but not an operation
OUTCOMES = ("ok", "fail", "info")  # info: outcome unknown (timeout), as in Jepsen
PHASES = ("warmup", "steady", "fault", "heal", "drain")
MEASURED_PHASES = ("steady", "fault", "heal")  # not warm-up, not the final drain

SAMPLE_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("world", pa.string()),
        ("backend", pa.string()),
        ("scenario", pa.string()),
        ("node", pa.string()),
        ("client", pa.string()),
        ("op", pa.string()),  # one of OPS, or FAULT_OP
        ("queue", pa.string()),
        ("msg_id", pa.string()),  # "<producer>:<seq>"; null only for a get that found nothing
        # ... which is outcome "fail" with error "empty": an ok get always has a msg_id.
        ("t_start_ns", pa.int64()),
        ("latency_ns", pa.int64()),
        ("outcome", pa.string()),
        ("error", pa.string()),
        ("bytes", pa.int64()),
        ("phase", pa.string()),
        # How late the operation started against its schedule (OMB's "publish delay"):
        # with a fixed rate, a stalled producer's later puts start late, and latency alone
        # would hide the stall (coordinated omission). Null when the op had no schedule.
        ("delay_ns", pa.int64()),
    ]
)

_PER_RUN = ("run_id", "world", "backend", "scenario")
_PER_ROW = ("node", "client", "op", "queue", "msg_id", "t_start_ns", "latency_ns", "outcome", "error", "bytes",
            "phase", "delay_ns")


BATCH_ROWS = 65_536  # rows a Recorder holds before it spills them as one batch


class Recorder:
    """Collects the samples of one run, a row tuple each (cheap on the hot path).

    ``measure`` times and records one operation, as Locust's ``events.request.measure()``
    does: ``classify`` turns an exception the operation raised into its outcome (``fail``
    or ``info``). Measured rows carry no phase: the runner sets every row's phase afterwards
    from the run's fault rows (``lab.history.phases``).

    With ``spill`` (a file path), every ``batch_rows`` rows go to that file as one Arrow
    batch (an IPC stream), so memory holds one batch however long the run; ``batches()``
    reads them back in order, then the rows not yet spilled. Fault rows are also kept
    apart (``fault_table``): the phases are derived from them.
    """

    def __init__(self, run_id: str, world: str, backend: str, scenario: str,
                 classify: Callable[[BaseException], str] = lambda error: "info",
                 spill: str | Path | None = None, batch_rows: int = BATCH_ROWS):
        self.run = {"run_id": run_id, "world": world, "backend": backend, "scenario": scenario}
        self.classify = classify
        self.rows: list[tuple] = []
        self.faults: list[tuple] = []
        self.spill = Path(spill) if spill is not None else None
        self.batch_rows = batch_rows
        self.spilled = 0
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._sink: Any = None

    def measure(self, clock: Callable[[], int], node: str, client: str, op: str, queue: str | None,
                msg_id: str | None = None, nbytes: int = 0, delay_ns: int | None = None) -> "Measurement":
        """``with recorder.measure(rt.now_ns, ...) as m: await ...`` records one sample when
        the block ends: ok if it returns, ``m.fail(why)`` for a definite failure found in a
        reply, the classified outcome if it raises (the exception is recorded and
        swallowed, as Locust's measure does; cancellation passes through unrecorded)."""
        return Measurement(self, clock, node, client, op, queue, msg_id, nbytes, delay_ns)

    def failure(self, error: Exception) -> tuple[str, str]:
        """The outcome and error text ``measure`` records for an operation that raised ``error``."""
        return self.classify(error), f"{type(error).__name__}: {error}"[:200]

    def record(
        self,
        *,
        node: str,
        client: str,
        op: str,
        queue: str | None,
        t_start_ns: int,
        latency_ns: int,
        outcome: str,
        msg_id: str | None = None,
        error: str | None = None,
        nbytes: int = 0,
        phase: str | None = None,
        delay_ns: int | None = None,
    ) -> None:
        """One sample row, every field by name (the schema's order is the row's, not the call's);
        a measured row leaves ``phase`` unset: the runner sets it afterwards."""
        row = (node, client, op, queue, msg_id, t_start_ns, latency_ns, outcome, error, nbytes, phase, delay_ns)
        if op == FAULT_OP:
            self.faults.append(row)
        rows = self.rows
        rows.append(row)
        if len(rows) >= self.batch_rows and self.spill is not None:
            self._spill()

    def __len__(self) -> int:
        return self.spilled + len(self.rows)

    def _batch(self, rows: list[tuple]) -> pa.RecordBatch:
        n = len(rows)
        columns = list(zip(*rows)) if rows else [()] * len(_PER_ROW)
        per_row = dict(zip(_PER_ROW, columns))
        arrays = [pa.array([self.run[f.name]] * n, f.type) if f.name in _PER_RUN else pa.array(per_row[f.name], f.type)
                  for f in SAMPLE_SCHEMA]
        return pa.RecordBatch.from_arrays(arrays, schema=SAMPLE_SCHEMA)

    def _spill(self) -> None:
        if self._writer is None:
            self._sink = pa.OSFile(str(self.spill), "wb")
            self._writer = pa.ipc.new_stream(self._sink, SAMPLE_SCHEMA,
                                             options=pa.ipc.IpcWriteOptions(compression="lz4"))
        self._writer.write_batch(self._batch(self.rows))
        self.spilled += len(self.rows)
        self.rows = []

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Every row recorded so far, in record order, one batch at a time."""
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = None
        if self.spilled:
            with pa.memory_map(str(self.spill)) as source:
                reader = pa.ipc.open_stream(source)
                for batch in reader:
                    yield batch
        if self.rows:
            yield self._batch(self.rows)

    def table(self) -> pa.Table:
        """Every row recorded so far, as one table."""
        batches = list(self.batches())
        return pa.Table.from_batches(batches, schema=SAMPLE_SCHEMA) if batches else \
            pa.Table.from_batches([self._batch([])], schema=SAMPLE_SCHEMA)

    def fault_table(self) -> pa.Table:
        """The fault rows alone (``lab.history.phases``)."""
        return pa.Table.from_batches([self._batch(self.faults)], schema=SAMPLE_SCHEMA)

    def discard(self) -> None:
        """Remove the spill file (after the samples are written)."""
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = None
        if self.spill is not None:
            self.spill.unlink(missing_ok=True)


class Measurement:
    """One operation being timed; the block sets ``msg_id`` and ``bytes`` as it learns them."""

    __slots__ = ("recorder", "clock", "node", "client", "op", "queue", "msg_id", "bytes", "delay_ns",
                 "start_ns", "end_ns", "outcome", "error")

    def __init__(self, recorder: Recorder, clock: Callable[[], int], node: str, client: str, op: str, queue: str | None,
                 msg_id: str | None, nbytes: int, delay_ns: int | None):
        self.recorder, self.clock = recorder, clock
        self.node, self.client, self.op, self.queue = node, client, op, queue
        self.msg_id, self.bytes, self.delay_ns = msg_id, nbytes, delay_ns
        self.start_ns = self.end_ns = 0
        self.outcome = "ok"
        self.error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def fail(self, error: str) -> None:
        """The operation returned, but definitely did not happen (an empty get: "empty")."""
        self.outcome, self.error = "fail", error

    def __enter__(self) -> "Measurement":
        self.start_ns = self.clock()
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        if error is not None and not isinstance(error, Exception):
            return False  # cancellation, KeyboardInterrupt: not an outcome of the operation
        self.end_ns = self.clock()
        if error is not None:
            self.outcome, self.error = self.recorder.failure(error)
        self.recorder.record(node=self.node, client=self.client, op=self.op, queue=self.queue, msg_id=self.msg_id,
                             t_start_ns=self.start_ns, latency_ns=self.end_ns - self.start_ns, outcome=self.outcome,
                             error=self.error, nbytes=self.bytes, delay_ns=self.delay_ns)
        return True


def write_samples(table: pa.Table, path: str | Path) -> None:
    pq.write_table(table, path, compression="zstd")


def write_sample_batches(batches: Iterable[pa.RecordBatch], path: str | Path) -> int:
    """Write batches of samples to one Parquet file as they come (one row group each, so
    memory holds one batch); the number of rows written."""
    rows = 0
    with pq.ParquetWriter(str(path), SAMPLE_SCHEMA, compression="zstd") as writer:
        for batch in batches:
            writer.write_batch(batch)
            rows += batch.num_rows
    return rows


#: the columns whose values repeat (op, outcome, a few nodes, clients, queues and phases;
#: a message id once or twice):
#: read back dictionary-encoded by ``read_samples(..., lean=True)``
REPEATING = ("run_id", "world", "backend", "scenario", "node", "client", "op", "queue", "msg_id", "outcome", "error",
             "phase")


def read_samples(path: str | Path, columns: Iterable[str] | None = None, lean: bool = False) -> pa.Table:
    """Samples of a run directory (its samples.parquet) or of one Parquet file; ``columns``:
    only those; ``lean``: the repeating string columns dictionary-encoded (a fraction of
    the memory; ``pyarrow.compute`` takes them as it takes strings)."""
    path = Path(path)
    if path.is_dir():
        path = path / "samples.parquet"
    if not path.exists():
        raise FileNotFoundError(f"no samples at {path}")
    if columns is None and not lean:
        return pq.read_table(path, schema=SAMPLE_SCHEMA)
    names = list(columns) if columns is not None else SAMPLE_SCHEMA.names
    if not lean:
        return pq.read_table(path, columns=names)
    # a row group at a time, without threads: the read's buffers stay one row group's
    source = pq.ParquetFile(path, read_dictionary=[c for c in REPEATING if c in names])
    batches = list(source.iter_batches(columns=names, use_threads=False))
    table = pa.Table.from_batches(batches) if batches else source.read(columns=names)
    pa.default_memory_pool().release_unused()  # hand the read's scratch back before the checks allocate
    return table


def message_codes(samples: pa.Table) -> tuple[pa.Array, np.ndarray]:
    """The distinct message ids of ``samples`` and each row's index among them (-1 where the
    row has none): one Arrow hash pass, so that a long run's checks count integers."""
    column = samples.column("msg_id")
    if pa.types.is_dictionary(column.type):
        column = pa.table({"m": column}).unify_dictionaries().column("m")
    else:
        column = column.cast(pa.string()).dictionary_encode()
    if column.num_chunks == 0:
        return pa.array([], pa.string()), np.zeros(0, np.int32)
    ids = column.chunk(0).dictionary
    codes = np.concatenate([chunk.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
                            for chunk in column.chunks])
    return ids, codes


def mask(samples: pa.Table, name: str, *values: str) -> np.ndarray:
    """Rows of ``samples`` whose column ``name`` is one of ``values``, as a numpy mask. A
    dictionary-encoded column (``read_samples(..., lean=True)``) is matched in its small
    dictionary and the answer looked up by each row's index, not row by row."""
    column = samples.column(name)
    wanted = pa.array(values, pa.string())
    if not pa.types.is_dictionary(column.type):
        return pc.is_in(column, value_set=wanted).to_numpy(zero_copy_only=False).astype(bool)
    parts = []
    for chunk in column.chunks:
        hit = np.append(pc.is_in(chunk.dictionary, value_set=wanted).to_numpy(zero_copy_only=False), False)
        parts.append(hit[chunk.indices.fill_null(-1).to_numpy(zero_copy_only=False)])  # null: index -1, no hit
    return np.concatenate(parts) if parts else np.zeros(0, bool)


def ok_ops(samples: pa.Table, op: str, measured_only: bool = False) -> pa.Table:
    """The ok operations ``op`` (for gets: deliveries only, not empty polls)."""
    mask = pc.and_(pc.equal(samples.column("op"), op), pc.equal(samples.column("outcome"), "ok"))
    if op == "get":
        mask = pc.and_(mask, pc.is_valid(samples.column("msg_id")))
    if measured_only:
        mask = pc.and_(mask, pc.is_in(samples.column("phase"), value_set=pa.array(MEASURED_PHASES)))
    return samples.filter(mask)



# ------------------------------------------------------------------ log-bucket histogram

ALPHA = 0.01  # the relative error of any quantile
GAMMA = (1 + ALPHA) / (1 - ALPHA)
LOG_GAMMA = math.log(GAMMA)


def bucket_index(value: float) -> int:
    """The bucket of a positive value: bucket i holds (GAMMA**(i-1), GAMMA**i]."""
    return math.ceil(math.log(value) / LOG_GAMMA)


def bucket_value(index: int) -> float:
    """The value that represents bucket ``index`` within ``ALPHA`` of anything in it."""
    return 2.0 * GAMMA**index / (GAMMA + 1.0)


class LogHistogram:
    """A mergeable histogram of non-negative values with 1 % relative error."""

    __slots__ = ("counts", "zeros", "count", "min", "max")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.zeros = 0
        self.count = 0
        self.min = math.inf
        self.max = -math.inf

    def add(self, value: float, n: int = 1) -> None:
        if value < 0:
            raise ValueError(f"histogram values must be >= 0, got {value}")
        if value == 0:
            self.zeros += n
        else:
            i = bucket_index(value)
            self.counts[i] = self.counts.get(i, 0) + n
        self.count += n
        self.min = min(self.min, value)
        self.max = max(self.max, value)

    def add_many(self, values: Iterable[float] | np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float64)
        if values.size == 0:
            return
        if (values < 0).any():
            raise ValueError("histogram values must be >= 0")
        positive = values[values > 0]
        self.zeros += int(values.size - positive.size)
        if positive.size:
            idx, n = np.unique(np.ceil(np.log(positive) / LOG_GAMMA).astype(np.int64), return_counts=True)
            for i, c in zip(idx.tolist(), n.tolist()):
                self.counts[i] = self.counts.get(i, 0) + c
        self.count += int(values.size)
        self.min = min(self.min, float(values.min()))
        self.max = max(self.max, float(values.max()))

    def merge(self, other: "LogHistogram") -> "LogHistogram":
        for i, c in other.counts.items():
            self.counts[i] = self.counts.get(i, 0) + c
        self.zeros += other.zeros
        self.count += other.count
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        return self

    def quantile(self, q: float) -> float:
        """The value at quantile ``q`` (0..1); NaN when empty."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile must be within [0, 1], got {q}")
        if self.count == 0:
            return math.nan
        if q == 1:
            return self.max  # the extremes are tracked exactly
        if q == 0:
            return self.min
        rank = q * (self.count - 1)
        seen = self.zeros
        if rank < seen:
            return 0.0
        for i in sorted(self.counts):
            seen += self.counts[i]
            if seen > rank:
                return min(max(bucket_value(i), self.min), self.max)
        return self.max

    def to_dict(self) -> dict[str, Any]:
        return {
            "alpha": ALPHA,
            "zeros": self.zeros,
            "min": None if self.count == 0 else self.min,
            "max": None if self.count == 0 else self.max,
            "buckets": {str(i): c for i, c in sorted(self.counts.items())},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LogHistogram":
        if data.get("alpha") != ALPHA:
            raise ValueError(f"histogram was made with alpha={data.get('alpha')}, this code uses {ALPHA}")
        h = cls()
        h.counts = {int(i): int(c) for i, c in data["buckets"].items()}
        h.zeros = int(data["zeros"])
        h.count = h.zeros + sum(h.counts.values())
        if h.count:
            h.min, h.max = float(data["min"]), float(data["max"])
        return h
