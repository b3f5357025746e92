"""The request listener: every request a lab user makes, as one row of the lab's sample
schema (``lab.history.record.SAMPLE_SCHEMA``), at nanosecond resolution, written to Parquet in
batches by each Locust process — nothing is held for the whole run.

Locust's own statistics round response times under 100 ms to whole milliseconds; a
queue's p50 is a few hundred microseconds, so the lab keeps its own rows beside Locust's
CSVs. A user fires ``events.request`` with a ``context`` carrying the row's fields (op,
queue, msg_id, start, node, client, outcome); ``Sink.on_request`` writes them — to the run
folder, or, on a Locust worker (which may be on another machine), as a message to the
master, which writes it there (``loadgen.distributed``).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from lab.history.record import SAMPLE_SCHEMA

BATCH = 20_000  # rows per Parquet file: a worker's memory stays small whatever the run's length
#: a row's fields, in the order a user's request event carries them
ROW = ("node", "client", "op", "queue", "msg_id", "t_start_ns", "latency_ns", "outcome", "error", "bytes",
       "phase", "delay_ns")
#: the name of a batch's file: ``samples-<process>-<n>.parquet`` (the master checks a worker's)
BATCH_NAME = re.compile(r"^samples-[0-9]+\.[0-9a-f]+-[0-9]{5}\.parquet$")
_tag: tuple[int, str] | None = None


def process_tag() -> str:
    """This process among every Locust process of a run, on any machine: its pid and a
    random suffix (two machines may run workers with the same pid). Message ids and
    sample files are named after it."""
    global _tag
    if _tag is None or _tag[0] != os.getpid():  # a forked worker gets its own
        _tag = (os.getpid(), f"{os.getpid()}.{secrets.token_hex(2)}")
    return _tag[1]


class Sink:
    """One process's rows, written every ``BATCH`` rows (and at the test's stop and the
    process's end) as a whole Parquet file of its own, ``samples-<process>-<n>.parquet``:
    a file is complete once it exists, so a process that ends abruptly loses only the rows
    it had not written yet. With ``ship``, a batch is handed to it (its file name and
    bytes) instead of written to ``folder``."""

    def __init__(self, folder: Path | None, run_id: str, backend: str, scenario: str, batch: int = BATCH,
                 ship: Callable[[str, bytes], None] | None = None):
        if ship is None:
            if folder is None:
                raise ValueError("a sink needs a folder or a ship")
            folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.ship = folder, ship
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
        table = self._table()
        self.files += 1
        name = f"samples-{process_tag()}-{self.files:05d}.parquet"
        if self.ship is not None:
            out = pa.BufferOutputStream()
            pq.write_table(table, out, compression="zstd")
            self.ship(name, out.getvalue().to_pybytes())
        else:
            assert self.folder is not None  # a sink with no ship has a folder (__init__, close)
            write_batch(self.folder, name, table)
        self.rows += n
        self.buffer.clear()

    def _table(self) -> pa.Table:
        n = len(self.buffer)
        columns = dict(zip(ROW, zip(*self.buffer)))
        arrays = [pa.array([self.run[f.name]] * n, f.type) if f.name in self.run
                  else pa.array(columns[f.name], f.type) for f in SAMPLE_SCHEMA]
        return pa.Table.from_arrays(arrays, schema=SAMPLE_SCHEMA)

    def close(self) -> None:
        """The process's end: what is left is written (a worker whose master has gone writes
        it to ``folder`` if that exists here, else says how many rows it lost)."""
        if self.ship is None or not self.buffer:
            self.flush()
        elif self.folder is not None and self.folder.is_dir():
            self.ship = None
            self.flush()
        else:
            logging.getLogger("queue-lab").error("queue-lab: %d rows not sent to the master", len(self.buffer))
            self.buffer.clear()


def write_batch(folder: Path, name: str, table: pa.Table) -> Path:
    """A batch's rows as ``folder/name``, whole or absent."""
    path = folder / name
    partial = path.with_suffix(".partial")
    pq.write_table(table, partial, compression="zstd")
    partial.rename(path)
    return path


def read_worker_samples(folder: Path) -> pa.Table:
    """Every worker's rows of a load run, as one table (empty if none were written)."""
    tables = [pq.read_table(p, schema=SAMPLE_SCHEMA) for p in sorted(folder.glob("samples-*.parquet"))]
    return pa.concat_tables(tables) if tables else SAMPLE_SCHEMA.empty_table()
