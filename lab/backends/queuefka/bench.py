"""`lab bench queuefka`: the segment log on the original's benchmark shapes, beside its peers.

Mirrors the Go harness (spec §3, §5): 20-byte payloads, a 10 MiB segment hint, writes
without a per-write flush (closing the writer is inside the timing), reads from a
pre-filled log with a fixed count. Peers measured in the same run, round-robin: sqlite3
inserts in one transaction, LMDB puts in one write transaction (as the Bolt case), one
unbuffered ``os.write`` of 28 bytes per op (fewer ops: a syscall each), and buffered
28-byte writes. The original's figures (2-core x86_64, Go 1.19): write 111 ns/record,
read 90 ns/record (median of its runs).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from lab.backends.queuefka import Reader, Writer

HELP = "the segment log against the original's table (20-byte records)"

PAYLOAD = b"This is only a test."  # the original's 20-byte fixture
HINT = 10 << 20
BATCH = 4096
ORIGINAL_NS = {"write": 111.0, "read": 90.0}  # medians of the spec's §3 runs
GOALS = {"write (single)": ("write", 5.0), "write_many": ("write", 1.0),
         "read (single)": ("read", 5.0), "read_many": ("read", 1.0)}


def _timed(fn: Callable[[], int]) -> float:
    start = time.perf_counter_ns()
    ops = fn()
    return (time.perf_counter_ns() - start) / ops


def bench_queuefka(records: int, repeats: int) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="bench-queuefka-"))
    try:
        return _bench(scratch, records, repeats)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _bench(scratch: Path, records: int, repeats: int) -> dict:
    syscall_ops = min(records, 200_000)
    filled = scratch / "filled"
    with Writer(filled, HINT) as w:  # the read cases' pre-filled log
        w.write_many([PAYLOAD] * records)

    def write_single() -> int:
        topic = scratch / "w1"
        shutil.rmtree(topic, ignore_errors=True)
        w = Writer(topic, HINT)
        write, payload = w.write, PAYLOAD
        for _ in range(records):
            write(payload)
        w.close()
        return records

    def write_many() -> int:
        topic = scratch / "wm"
        shutil.rmtree(topic, ignore_errors=True)
        w = Writer(topic, HINT)
        batch = [PAYLOAD] * BATCH
        for done in range(0, records, BATCH):
            w.write_many(batch if records - done >= BATCH else batch[: records - done])
        w.close()
        return records

    def read_single() -> int:
        with Reader(filled) as r:
            read = r.read
            for _ in range(records):
                read()
        return records

    def read_many() -> int:
        got = 0
        with Reader(filled) as r:
            while got < records:
                got += len(r.read_many(min(BATCH, records - got)))
        return records

    def sqlite_insert() -> int:
        path = scratch / "bench.sqlite"
        path.unlink(missing_ok=True)
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE log (key INTEGER PRIMARY KEY, value BLOB)")
        with db:  # one transaction, committed inside the timing
            db.executemany("INSERT INTO log VALUES (?, ?)", ((i, PAYLOAD) for i in range(records)))
        db.close()
        return records

    def lmdb_put() -> int:
        import lmdb

        path = scratch / "bench.lmdb"
        shutil.rmtree(path, ignore_errors=True)
        env = lmdb.open(str(path), map_size=4 << 30)
        with env.begin(write=True) as txn:  # one write transaction, as the Bolt case
            put = txn.put
            for i in range(records):
                put(i.to_bytes(8, "little"), PAYLOAD)
        env.close()
        return records

    def os_write() -> int:
        fd = os.open(scratch / "raw", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        record = bytes(8) + PAYLOAD
        for _ in range(syscall_ops):
            os.write(fd, record)
        os.close(fd)
        return syscall_ops

    def buffered_write() -> int:
        record = bytes(8) + PAYLOAD
        with open(scratch / "buffered", "wb") as f:
            write = f.write
            for _ in range(records):
                write(record)
        return records

    cases = {"write (single)": write_single, "write_many": write_many, "read (single)": read_single,
             "read_many": read_many, "sqlite3 insert (1 txn)": sqlite_insert, "lmdb put (1 txn)": lmdb_put,
             "os.write 28 B": os_write, "buffered write 28 B": buffered_write}
    runs: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):  # round-robin: a noisy neighbour hits every case alike
        for name, fn in cases.items():
            runs[name].append(_timed(fn))
    results: dict[str, Any] = {"records": records, "payload_bytes": len(PAYLOAD), "segment_hint": HINT, "batch": BATCH,
               "repeats": repeats, "original_ns": ORIGINAL_NS, "cases": {}}
    print(f"{'case':<24}{'ns/op':>10}{'vs original':>14}   goal")
    for name, samples in runs.items():
        median = statistics.median(samples)
        row = {"ns_per_op": median, "runs": samples}
        line = f"{name:<24}{median:>10.1f}"
        if name in GOALS:
            kind, bound = GOALS[name]
            ratio = median / ORIGINAL_NS[kind]
            row.update(ratio_to_original=ratio, goal_ratio=bound, goal_met=ratio <= bound)
            line += f"{ratio:>13.2f}x   <= {bound:g}x: {'met' if ratio <= bound else 'NOT met'}"
        print(line)
        results["cases"][name] = row
    return results


def add_arguments(b) -> None:
    """``lab bench queuefka``'s flags."""
    b.add_argument("--records", type=int, default=2_000_000, help="records per write/read case (default 2,000,000)")
    b.add_argument("--repeats", type=int, default=5, help="runs per case; the median is quoted (default 5)")
    b.add_argument("--out", type=Path, help="JSON file (default: results/bench/queuefka-<time>.json)")


def run(args) -> dict:
    """``lab bench queuefka``: prints as it goes and returns the figures; ValueError for bad flags."""
    if args.records < 1000:
        raise ValueError("--records must be at least 1000")
    print(f"queuefka vs the original's table ({args.records:,} records of 20 bytes, median of {args.repeats}):")
    return bench_queuefka(args.records, args.repeats)
