"""Acknowledgements the design refused that nothing in the history explains.

A consumer's ack says "I have handled this delivery: do not hand it out again". A design
may rightly refuse one — the delivery's lease ran out first, the consumer's connection broke
and the read went back, a fault struck the servers meanwhile — but an ack refused outright
(``fail``: the design said no, or it was certainly never sent) with none of those is a broken
promise: its message will come again although its consumer handled it, and a design that
refuses every ack delivers every message forever while each run looks like at-least-once.

An acknowledgement whose outcome is unknown (``info``: sent, no reply) is no refusal: it is
reported with the failed operations (``lab.judge.attribution.failed_operations``), not
judged. The warm-up and the final drain are left out, as there.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa

from lab.design.promises import Promises
from lab.history.record import MEASURED_PHASES, mask
from lab.judge.attribution import broken_connections
from lab.judge.fault_scopes import faults_of, plus

#: seconds after a fault's heal during which a refusal is still laid to it: a design may take
#: a moment to settle its reads after a restart or a cut
HEAL_GRACE_S = 0.5


def refused_acks(samples: pa.Table, codes: np.ndarray, promises: Promises) -> int:
    """How many of the run's acks, refused (``fail``) in its measured phases, nothing
    explains: not the lease of their delivery running out (it is counted from the get's
    start, the earliest the design could have begun it), not a break of the consumer's
    connection since that get, not a fault in force (or healed less than ``HEAL_GRACE_S``
    before) at any time from the get to the ack's end, not a fault the options inject.
    An ack whose delivery the history does not hold is not judged."""
    if promises.injected:
        return 0  # a fault the options inject is in force from the first instant to the last
    refused = np.flatnonzero(mask(samples, "op", "ack") & mask(samples, "outcome", "fail")
                             & mask(samples, "phase", *MEASURED_PHASES) & (codes >= 0))
    if not refused.size:
        return 0
    chosen = np.zeros(int(codes.max()) + 1, dtype=bool)
    chosen[codes[refused]] = True
    gets = np.flatnonzero(mask(samples, "op", "get") & mask(samples, "outcome", "ok") & (codes >= 0))
    gets = gets[chosen[codes[gets]]]
    starts_of: dict[tuple[int, str], list[int]] = defaultdict(list)  # (message, client) -> its gets' starts
    clients, starts = samples.column("client"), samples.column("t_start_ns")
    for code, client, start in zip(codes[gets].tolist(),
                                        clients.take(pa.array(gets)).to_pylist(),
                                        starts.take(pa.array(gets)).to_pylist()):
        starts_of[(code, client)].append(start)
    faults = faults_of(samples)
    broke = broken_connections(samples)
    lease = None if promises.lease_s is None else round(promises.lease_s * 1e9)
    latencies = samples.column("latency_ns")
    unexplained = 0
    for code, client, start, latency in zip(codes[refused].tolist(), clients.take(pa.array(refused)).to_pylist(),
                                            starts.take(pa.array(refused)).to_pylist(),
                                            latencies.take(pa.array(refused)).to_pylist()):
        before = [t for t in starts_of.get((code, client), ()) if t <= start]
        if not before:
            continue
        got, end = max(before), start + latency
        if lease is not None and end >= got + lease:
            continue
        failures = broke.get(client)
        if failures is not None and len(failures):
            i = int(np.searchsorted(failures, got, side="left"))
            if i < len(failures) and failures[i] < start:
                continue
        if any(f.start <= end and plus(f.heal, HEAL_GRACE_S) >= got for f in faults):
            continue
        unexplained += 1
    return unexplained

