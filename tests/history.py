"""Hand-made histories for checker tests: a few lines of ops become a sample table."""

from __future__ import annotations

import pyarrow as pa

from lab.history.record import Recorder


def history(*ops: tuple) -> pa.Table:
    """Each op: (op, client, msg_id, outcome[, t_start_ns[, latency_ns]]); queue q0."""
    rec = Recorder("test-run", "sim", "hand", "hand-made")
    for i, op in enumerate(ops):
        kind, client, msg_id, outcome = op[:4]
        start = op[4] if len(op) > 4 else i * 10
        latency = op[5] if len(op) > 5 else 5
        rec.record("n", client, kind, "q0", msg_id, start, latency, outcome, None, 1, "steady")
    return rec.table()


def with_faults(table: pa.Table, *faults: tuple[str, str, int, int | None]) -> pa.Table:
    """``table`` with fault rows (``lab.history.phases``): each (kind, nodes, start_ns, heal_ns or None)."""
    from lab.history.phases import HEAL, NEMESIS, START, fault_text
    from lab.history.record import FAULT_OP

    rec = Recorder("test-run", "sim", "hand", "hand-made")
    for number, (kind, nodes, start, heal) in enumerate(faults):
        for event, t in ((START, start), (HEAL, heal)):
            if t is not None:
                rec.record(nodes, NEMESIS, FAULT_OP, None, None, t, 0, "info",
                           fault_text(event, number, kind, nodes), 0, "fault")
    return pa.concat_tables([table, rec.table()])
