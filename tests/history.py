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
        rec.record(node="n", client=client, op=kind, queue="q0", msg_id=msg_id, t_start_ns=start, latency_ns=latency,
                   outcome=outcome, nbytes=1, phase="steady")
    return rec.table()


def with_faults(table: pa.Table, *faults: tuple) -> pa.Table:
    """``table`` with fault rows (``lab.history.phases``): each (kind, nodes, start_ns, heal_ns
    or None), and optionally the row's detail (a partition's sides, ``"n1 | n2"``; default:
    the nodes)."""
    from lab.history.phases import HEAL, NEMESIS, START, fault_text
    from lab.history.record import FAULT_OP

    rec = Recorder("test-run", "sim", "hand", "hand-made")
    for number, (kind, nodes, start, heal, *detail) in enumerate(faults):
        for event, t in ((START, start), (HEAL, heal)):
            if t is not None:
                rec.record(node=nodes, client=NEMESIS, op=FAULT_OP, queue=None, t_start_ns=t, latency_ns=0,
                           outcome="info", error=fault_text(event, number, kind, detail[0] if detail else nodes),
                           phase="fault")
    return pa.concat_tables([table, rec.table()])
