"""Which fault, lease or release explains each anomaly of a run, message by message.

The checker (``lab.judge.checker``) counts what was lost, delivered twice or overtaken; this
room says, for each of those messages, what in the history could have caused it, by the
design's promises (``lab.design.Promises``):

- a lost message: an allowance whose fault could have hurt *that* message — its holder
  crashed after the put and within the unsynced window (``HOLDERS``), a fault was in force
  while it lived (``IN_FORCE``), or a get whose reply never came could have taken it
  (``CUT``, matched one get to ``per_get`` messages);
- a redelivery (a delivery after the message's previous one, releases left out): the
  previous delivery's lease ran out unacknowledged, its consumer's connection broke before
  it was acknowledged (a design that hands such reads back: a failed read of that consumer's,
  or a server's restart, shows it), or an allowance's fault —
  a crash that undid the removal within its window, a fault in force in between;
- an overtaken message (``lab.judge.order``): an allowance's fault while it waited, a get whose
  reply never came (``CUT``), or a consumer's connection that broke (``CLOSED``) meanwhile.

What nothing explains stays unexplained, and the verdict calls it a broken promise. The
count of each explanation (an ``Explanation`` record: the anomaly, its cause, the fault
kinds, the allowance's words) goes to ``lab.judge.verdict.judge``. Only anomalous
messages are looked at one by one: a clean run costs one pass over the history.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lab.history.record import FAULT_OP, HANDING_BACK, MEASURED_PHASES, mask
from lab.design.backend import InternalError
from lab.design.promises import CLOSED, CUT, HOLDERS, Allowance, Promises
from lab.judge.fault_scopes import NEVER, Fault, before_it, faults_of, hurt, plus, under
from lab.judge.findings import DUPLICATED, INTERNAL, Cause, Explanation
from lab.workloads.faults import RESTARTING  # each closes every connection to the servers it stops

@dataclass
class Attribution:
    #: each explanation -> how much of its anomaly's count it explains
    explained: Counter[Explanation] = field(default_factory=Counter)
    #: per anomaly, the codes of messages nothing explains
    unexplained: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class _Op:
    client: str
    start: int
    end: int
    outcome: str


@dataclass
class _Message:
    queue: str | None = None
    put_start: int = NEVER
    put_end: int = NEVER
    gets: list[_Op] = field(default_factory=list)  # ok gets, in start order
    acks: list[_Op] = field(default_factory=list)
    releases: list[_Op] = field(default_factory=list)


def attribute(samples: pa.Table, codes: np.ndarray, promises: Promises, *, lost: np.ndarray,
              duplicated: np.ndarray, overtaken: np.ndarray | None = None) -> Attribution:
    """Explain the anomalies of a run: ``lost``, ``duplicated`` and ``overtaken`` count them
    per message (indexed like the checker's distinct ids; ``codes`` each row's index, -1
    for none), ``samples`` the run's rows (op, client, node, queue, msg_id, t_start_ns,
    latency_ns, outcome, error; fault rows among them)."""
    result = Attribution()
    anomalous = (lost > 0) | (duplicated > 0)
    if overtaken is not None:
        anomalous |= overtaken > 0
    if not anomalous.any():
        return result
    # a fault the options inject is in force from the first instant to the last, on no node in particular
    faults = faults_of(samples) + [Fault(kind, frozenset(), 0, NEVER) for kind in promises.injected]
    is_op = ~mask(samples, "op", FAULT_OP)
    clients = set(pc.unique(samples.filter(pa.array(is_op)).column("node")).to_pylist())
    cuts = _cut_gets(samples)
    broke = broken_connections(samples)
    messages = _messages(samples, codes, anomalous)
    allowances = {anomaly: [a for a in promises.allowances if a.anomaly == anomaly]
                  for anomaly in ("lost", "duplicated", "reordered")}

    def explain(anomaly: str, code: int, why: Explanation | None, n: int) -> None:
        if why is None:
            result.unexplained.setdefault(anomaly, []).append(code)
        else:
            result.explained[why] += n

    # lost: each allowance in its declared order; CUT ones match gets to messages at the end
    waiting_for_cut: list[int] = []
    for code in np.flatnonzero(lost).tolist():
        m = messages[code]
        why = next((w for a in allowances["lost"] if a.scope != CUT
                    for w in [hurt(a, faults, clients, m.put_start, m.put_end, NEVER)] if w), None)
        if why is None and any(a.scope == CUT for a in allowances["lost"]):
            waiting_for_cut.append(code)
        else:
            explain("lost", code, why, int(lost[code]))
    if waiting_for_cut:
        cut = next(a for a in allowances["lost"] if a.scope == CUT)
        taken = _match_cut_gets(cut, [messages[c] for c in waiting_for_cut], cuts)
        for code, was_taken in zip(waiting_for_cut, taken):
            explain("lost", code, _cut(cut) if was_taken else None, int(lost[code]))

    # duplicated: every redelivery against the delivery before it
    for code in np.flatnonzero(duplicated).tolist():
        m = messages[code]
        counted = _counted_deliveries(m)
        left = int(duplicated[code])
        for previous, again in zip(counted, counted[1:]):
            if left == 0:
                break
            why = _redelivery(promises, allowances["duplicated"], faults, clients, cuts, broke, m, previous, again)
            explain("duplicated", code, why, 1)
            left -= 1
        for _ in range(left):  # more duplicates than deliveries seen: nothing to explain them by
            explain("duplicated", code, None, 1)

    # overtaken: an allowance's fault while the message waited for its delivery
    if overtaken is not None:
        reads_broke = _broken_reads(samples)
        for code in np.flatnonzero(overtaken).tolist():
            m = messages[code]
            first = m.gets[0] if m.gets else None
            until = first.end if first is not None else NEVER
            why = next((w for a in allowances["reordered"]
                        for w in [_cut(a) if a.scope == CUT and _cut_between(cuts, m.queue, m.put_start, until)
                                  else _closed(a) if a.scope == CLOSED
                                  and _cut_between(reads_broke, None, m.put_start, until)
                                  else hurt(a, faults, clients, m.put_start, m.put_start, until)
                                  if a.scope not in (CUT, CLOSED) else None] if w), None)
            explain("reordered", code, why, int(overtaken[code]))
    return result


def _cut(a: Allowance) -> Explanation:
    return Explanation(a.anomaly, Cause.CUT_GET, allowance=a.why)


def _closed(a: Allowance) -> Explanation:
    return Explanation(a.anomaly, Cause.BROKEN_READ, allowance=a.why)


# ----------------------------------------------------------------------------- cut gets


def _cut_gets(samples: pa.Table) -> dict[str | None, np.ndarray]:
    """Gets whose outcome is unknown (the reply never came), per queue: an (n, 2) array of
    (start, end) in start order."""
    rows = samples.filter(pa.array(mask(samples, "op", "get") & mask(samples, "outcome", "info")))
    by_queue: dict[str | None, list[tuple[int, int]]] = defaultdict(list)
    for queue, start, latency in zip(rows.column("queue").to_pylist(), rows.column("t_start_ns").to_pylist(),
                                     rows.column("latency_ns").to_pylist()):
        by_queue[queue].append((start, start + latency))
    return {q: np.array(sorted(spans), dtype=np.int64).reshape(-1, 2) for q, spans in by_queue.items()}


def _cut_between(cuts: dict[str | None, np.ndarray], queue: str | None, since: int, until: int) -> bool:
    spans = cuts.get(queue)
    if spans is None or not len(spans):
        return False
    return bool(((spans[:, 1] >= since) & (spans[:, 0] <= until)).any())


def _match_cut_gets(a: Allowance, lost: list[_Message], cuts: dict[str | None, np.ndarray]) -> list[bool]:
    """Which lost messages a cut get could have taken, each get at most ``a.per_get`` of
    them: a get can take a message put before it ended. Gets in the order they ended,
    each taking the earliest-put messages still unmatched — the most messages matched."""
    taken = [False] * len(lost)
    by_queue: dict[str | None, list[int]] = defaultdict(list)
    for i, m in enumerate(lost):
        by_queue[m.queue].append(i)
    for queue, members in by_queue.items():
        spans = cuts.get(queue)
        if spans is None or not len(spans):
            continue
        members.sort(key=lambda i: lost[i].put_start)
        nxt = 0
        for end in np.sort(spans[:, 1]).tolist():
            room = a.per_get if a.per_get is not None else len(members)
            while room and nxt < len(members) and lost[members[nxt]].put_start < end:
                taken[members[nxt]] = True
                nxt += 1
                room -= 1
    return taken


# ----------------------------------------------------------------------------- redeliveries


def _broken_reads(samples: pa.Table) -> dict[str | None, np.ndarray]:
    """The gets, acks and releases that failed or timed out (not empty gets), and the deaths
    of consumers (``abandon``), any client's, as ``_cut_gets`` gives them under the key None:
    where a consumer's connection broke, and what it had fetched went back to the design (a
    producer's failed put hands back nothing)."""
    bad = ~mask(samples, "outcome", "ok") & mask(samples, "op", "get", "ack", "release")
    bad &= ~mask(samples, "error", "empty")
    bad |= mask(samples, "op", "abandon")
    rows = samples.filter(pa.array(bad))
    spans = sorted((start, start + latency) for start, latency in zip(rows.column("t_start_ns").to_pylist(),
                                                                      rows.column("latency_ns").to_pylist()))
    return {None: np.array(spans, dtype=np.int64).reshape(-1, 2)}


def broken_connections(samples: pa.Table) -> dict[str, np.ndarray]:
    """Per client, the start times of its operations that failed or timed out (not empty
    gets), and of its deaths (``abandon``): where its client dropped its connection and began
    a new one."""
    bad = ~mask(samples, "outcome", "ok") & ~mask(samples, "op", FAULT_OP)
    bad &= ~mask(samples, "error", "empty")
    bad |= mask(samples, "op", "abandon")
    rows = samples.filter(pa.array(bad))
    per: dict[str, list[int]] = defaultdict(list)
    for client, start in zip(rows.column("client").to_pylist(), rows.column("t_start_ns").to_pylist()):
        per[client].append(start)
    return {c: np.sort(np.array(t, dtype=np.int64)) for c, t in per.items()}


def _counted_deliveries(m: _Message) -> list[_Op]:
    """The message's deliveries less those its consumer handed back: a release hands back
    that consumer's latest delivery before it (``_messages`` keeps no release that failed:
    it certainly did not happen, so the delivery before it stands)."""
    gets = list(m.gets)
    for release in sorted(m.releases, key=lambda r: r.start):
        mine = [g for g in gets if g.client == release.client and g.start <= release.start]
        if mine:
            gets.remove(mine[-1])
    return gets


def _redelivery(promises: Promises, allowances: list[Allowance], faults: list[Fault], clients: set[str],
                cuts: dict[str | None, np.ndarray], broke: dict[str, np.ndarray], m: _Message,
                previous: _Op, again: _Op) -> Explanation | None:
    """Why ``again`` delivered the message once more after ``previous``, or None."""
    acked = [a.end for a in m.acks if a.client == previous.client and a.outcome == "ok" and a.start >= previous.start]
    if promises.lease_s is not None:
        expiry = previous.start + round(promises.lease_s * 1e9)
        if again.end >= expiry and not any(t < expiry for t in acked):
            return Explanation(DUPLICATED, Cause.LEASE, lease_s=promises.lease_s)
    if promises.hands_back_on_close:
        failures = broke.get(previous.client)
        if failures is not None and len(failures) and not any(t <= again.start for t in acked):
            i = np.searchsorted(failures, previous.start, side="left")
            if i < len(failures) and failures[i] <= again.end:
                return Explanation(DUPLICATED, Cause.HANDED_BACK)
        # A server's restart breaks every connection to it, whether or not the consumer
        # noticed: one that was working on the message and acknowledged it only on a new
        # connection afterwards met no failure, and the read was handed back all the same —
        # an ack of a read the restarted server no longer knows can succeed, even before the
        # redelivery, so only an ack that ended before the restart settled it.
        if any(f.kind in RESTARTING and f.nodes - clients and previous.start <= f.start <= again.end
               and not any(t <= f.start for t in acked) for f in faults):
            return Explanation(DUPLICATED, Cause.HANDED_BACK)
    for a in allowances:
        if a.scope == CUT:
            if _cut_between(cuts, m.queue, previous.start, again.end):
                return _cut(a)
        elif a.scope == HOLDERS:
            why = hurt(a, faults, clients, previous.start, previous.end, again.start)
            if why:
                return why
        else:
            why = _in_force_between(a, faults, previous, again, acked)
            if why:
                return why
    return None


def _in_force_between(a: Allowance, faults: list[Fault], previous: _Op, again: _Op,
                      acked: list[int]) -> Explanation | None:
    """An ``IN_FORCE`` allowance's explanation of a redelivery: a fault in force (or healed
    less than ``grace_s`` before) at some time between the previous delivery and the moment
    it was settled (its first acknowledgement, with ``grace_s``; not acknowledged, the
    redelivery). A fault that began only after the delivery was acknowledged did not cause
    it to come again. (The redelivery itself is not bounded by the fault's heal: a link delay
    keeps messages in flight past its heal by as long as its delay, which the history's fault
    rows do not hold.)"""
    settled = min((t for t in acked if t <= again.start), default=None)
    until = again.end if settled is None else min(again.end, plus(settled, a.grace_s))
    for f in faults:
        if a.covers(f.kind) and f.start <= until and plus(f.heal, a.grace_s) >= previous.start:
            before = before_it(a, faults, f)
            if before is not None:
                return under(before + (f.kind,), a)
    return None


# ----------------------------------------------------------------------------- the history


def _messages(samples: pa.Table, codes: np.ndarray, chosen: np.ndarray) -> dict[int, _Message]:
    """Puts, deliveries, acks and releases of the ``chosen`` messages (a flag per code)."""
    rows = np.flatnonzero((codes >= 0) & chosen[np.maximum(codes, 0)])
    part = samples.select(["op", "client", "queue", "t_start_ns", "latency_ns", "outcome"]).take(pa.array(rows))
    messages: dict[int, _Message] = defaultdict(_Message)
    for code, op, client, queue, start, latency, outcome in zip(
            codes[rows].tolist(), *(part.column(c).to_pylist() for c in part.column_names)):
        m = messages[code]
        end = start + latency
        if op == "put":
            if outcome == "ok" or m.put_start == NEVER:
                m.queue, m.put_start, m.put_end = queue, start, end
        elif op == "get" and outcome == "ok":
            m.gets.append(_Op(client, start, end, outcome))
        elif op == "ack":
            m.acks.append(_Op(client, start, end, outcome))
        elif op in HANDING_BACK and outcome != "fail":
            m.releases.append(_Op(client, start, end, outcome))
    for m in messages.values():
        m.gets.sort(key=lambda g: g.start)
    return messages


def failed_operations(samples: pa.Table) -> dict[str, int]:
    """Operations of the measured phases that did not succeed, by what they were: ``put``
    refused (the design said no), ``timed-out put`` (outcome unknown), ``failed ack``,
    ``failed get`` (not an empty poll). The warm-up is left out: it is where clients set
    themselves up (a queue just made, not yet known to every node), and so is the drain —
    but not from ``internal error``: operations of any phase the server answered with its
    own code's exception (``lab.design.InternalError``)."""
    measured = mask(samples, "phase", *MEASURED_PHASES)
    op_put, op_ack, op_get = (mask(samples, "op", o) & measured for o in ("put", "ack", "get"))
    fail, info = mask(samples, "outcome", "fail"), mask(samples, "outcome", "info")
    empty = mask(samples, "error", "empty")
    counts = Counter({"put": int((op_put & fail).sum()), "timed-out put": int((op_put & info).sum()),
                      "failed ack": int((op_ack & (fail | info)).sum()),
                      "failed get": int((op_get & (fail | info) & ~empty).sum()),
                      INTERNAL: int(pc.sum(pc.starts_with(samples.column("error").cast(pa.string()),
                                                          f"{InternalError.__name__}:")).as_py() or 0)})
    return {k: v for k, v in counts.items() if v}
