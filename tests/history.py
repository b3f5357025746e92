"""Hand-made histories for checker tests: a few lines of ops become a sample table."""

from __future__ import annotations

import pyarrow as pa

from lab.record import Recorder


def history(*ops: tuple) -> pa.Table:
    """Each op: (op, client, msg_id, outcome[, t_start_ns[, latency_ns]]); queue q0."""
    rec = Recorder("test-run", "sim", "hand", "hand-made")
    for i, op in enumerate(ops):
        kind, client, msg_id, outcome = op[:4]
        start = op[4] if len(op) > 4 else i * 10
        latency = op[5] if len(op) > 5 else 5
        rec.record("n", client, kind, "q0", msg_id, start, latency, outcome, None, 1, "steady")
    return rec.table()
