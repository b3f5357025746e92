"""The request listener: every request a lab user makes, as one row of the lab's sample
schema (``lab.record.SAMPLE_SCHEMA``), at nanosecond resolution, written to Parquet in
batches by each Locust process — nothing is held for the whole run.

Locust's own statistics round response times under 100 ms to whole milliseconds; a
queue's p50 is a few hundred microseconds, so the lab keeps its own rows beside Locust's
CSVs. A user fires ``events.request`` with a ``context`` carrying the row's fields (op,
queue, msg_id, start, node, client, outcome); ``Sink.on_request`` writes them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lab.record import SAMPLE_SCHEMA

BATCH = 20_000  # rows per Parquet row group: a worker's memory stays small whatever the run's length
#: a row's fields, in the order a user's request event carries them
ROW = ("node", "client", "op", "queue", "msg_id", "t_start_ns", "latency_ns", "outcome", "error", "bytes",
       "phase", "delay_ns")


class Sink:
    """One process's rows, written every ``BATCH`` rows (and at the test's stop and the
    process's end) as a whole Parquet file of its own, ``<folder>/samples-<pid>-<n>.parquet``:
    a file is complete once it exists, so a process that ends abruptly loses only the rows
    it had not written yet."""

    def __init__(self, folder: Path, run_id: str, backend: str, scenario: str, batch: int = BATCH):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.run = {"run_id": run_id, "world": "live", "backend": backend, "scenario": scenario}
        self.batch = batch
        self.buffer: list[tuple] = []  # rows as the users made them: one append per request
        self.rows = 0
        self.files = 0

    def on_request(self, request_type: str, name: str, response_time: float, response_length: int,
                   exception: BaseException | None = None, context: dict[str, Any] | None = None,
                   **_: Any) -> None:
        """Locust's request event; rows only for requests a lab user fired (``context["lab"]``,
        a tuple in the order of ``ROW``)."""
        row = context.get("lab") if context else None
        if row is not None:
            self.add(row)

    def add(self, row: tuple) -> None:
        self.buffer.append(row)
        if len(self.buffer) >= self.batch:
            self.flush()

    def flush(self) -> None:
        n = len(self.buffer)
        if n == 0:
            return
        columns = dict(zip(ROW, zip(*self.buffer)))
        arrays = [pa.array([self.run[f.name]] * n, f.type) if f.name in self.run
                  else pa.array(columns[f.name], f.type) for f in SAMPLE_SCHEMA]
        self.rows += n
        self.files += 1
        path = self.folder / f"samples-{os.getpid()}-{self.files:05d}.parquet"
        partial = path.with_suffix(".partial")
        pq.write_table(pa.Table.from_arrays(arrays, schema=SAMPLE_SCHEMA), partial, compression="zstd")
        partial.rename(path)  # whole or absent
        self.buffer.clear()

    def close(self) -> None:
        self.flush()


def read_worker_samples(folder: Path) -> pa.Table:
    """Every worker's rows of a load run, as one table (empty if none were written)."""
    tables = [pq.read_table(p, schema=SAMPLE_SCHEMA) for p in sorted(folder.glob("samples-*.parquet"))]
    return pa.concat_tables(tables) if tables else SAMPLE_SCHEMA.empty_table()
