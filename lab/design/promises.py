"""Promises a design declares: its delivery (at-most-once, at-least-once, exactly-once), its
order (FIFO per queue, FIFO per consumer, or none), how an unacknowledged delivery comes back
(a lease that expires, a connection that closes), and the anomalies it permits under which
faults (``Allowance``: "a crash may lose acknowledged messages: syncJournal=never loses the
unsynced tail"), each with the messages such a fault could have hurt (its ``scope``: the
message's holder crashed within its unsynced window, a get whose reply was cut could have
taken it, the fault was in force while the message lived).

A design declares them apart from its driver, as one ``Promised`` on its Backend: the rule
that gives its ``Promises`` for an option set and read mode, and the option sets that change
them (``lab matrix`` runs each). Part of the design API (``lab.design``); the verdict that
holds a run to them is ``lab.judge.verdict``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

AT_MOST_ONCE, AT_LEAST_ONCE, EXACTLY_ONCE = "at-most-once", "at-least-once", "exactly-once"
DELIVERIES = (AT_MOST_ONCE, AT_LEAST_ONCE, EXACTLY_ONCE)
FIFO, NO_ORDER = "FIFO per queue", "none"  # FIFO per queue: real-time order, across consumers (``lab.judge.order``)
FIFO_PER_CONSUMER = "FIFO per consumer"  # real-time order among the messages one consumer got (a prefetching client)
ORDERS = (FIFO, FIFO_PER_CONSUMER, NO_ORDER)
ANOMALIES = ("lost", "duplicated", "reordered")
ANY_FAULT = "any fault"  # an Allowance's fault kinds: whatever fault the run had
# An Allowance's scope: which messages a fault could have hurt (``lab.judge.attribution`` reads them).
IN_FORCE = "in force"  # the fault was in force (or healed less than ``grace_s`` before) while the message lived
HOLDERS = "holders"  # the fault struck ``copies`` of the nodes that held the message, within its ``window_s``
CUT = "cut"  # a get whose reply never came (outcome unknown) could have taken the message; no fault needed
CLOSED = "closed"  # a consumer's connection broke (a read of it failed) while the message waited; no fault needed
# the message was acknowledged while a fault of ``after`` had taken out a server node (fewer copies than promised
# existed), and a fault of the allowance's kinds then struck a server node that one had not taken out
DEGRADED = "degraded"
SCOPES = (IN_FORCE, HOLDERS, CUT, CLOSED, DEGRADED)
GRACE_S = 2.0  # seconds after a heal during which a fault still explains an anomaly (retries, anti-entropy)
FSYNC_MARGIN_S = 0.5  # what a periodic fsync's window adds to its period: the fsync's own time, delayed or not
DISK_LOSS = "disk-loss"  # the fault kind that destroys a node's disk (``lab.workloads.faults``)


@dataclass(frozen=True)
class Allowance:
    """An anomaly the design permits while one of ``faults`` is in the run, and why — for
    the messages that fault could have hurt (``scope``):

    - ``IN_FORCE``: the fault was in force, or healed less than ``grace_s`` before, at some
      time while the message lived (put to last delivery);
    - ``HOLDERS``: a fault of these kinds struck at least ``copies`` of the nodes that held
      the message (any server node), after the write it undoes was made (the put for a
      loss, the removal for a redelivery) and, with ``window_s``, at most that long after
      it (the unsynced window; None: whatever was never synced);
    - ``CUT``: a get on the message's queue whose reply never came (outcome unknown) could
      have taken it, ``per_get`` messages at most each (None: a whole batch); ``faults``
      then only names when this happens, any cause of a cut reply explains it;
    - ``CLOSED`` (reordering only): a consumer's get, ack or release failed or timed out
      (its connection broke) while the message waited, so what that consumer had fetched
      could have been handed out again behind later messages; as with ``CUT``, any cause;
    - ``DEGRADED`` (loss only): *degraded acknowledgements* of a replicated design — the
      message was put while a fault of one of ``after``'s kinds was in force on a server node
      (a backup down or cut off: the put was acknowledged with fewer copies than promised),
      and afterwards a fault of ``faults`` struck ``copies`` of the server nodes that fault
      had not taken out (the lone copy's holder crashed). A crash or a pause takes out its
      own nodes; a partition takes out, for a node on one side, the servers on the other
      (either side may have acknowledged: each is tried), so a clients' partition degrades
      nothing. A message acknowledged while every node was up is not excused, whatever
      crashed later.

    ``after`` on an ``IN_FORCE`` or ``HOLDERS`` allowance makes it an *ordered combination*:
    its fault counts only if it began while a fault of one of ``after``'s kinds was in force
    (or had healed less than ``grace_s`` before) — "a partition, then a crash".
    """

    anomaly: str  # one of ANOMALIES
    faults: tuple[str, ...]  # fault kinds ("crash", "partition", ...), or (ANY_FAULT,)
    why: str
    scope: str = IN_FORCE
    window_s: float | None = None  # HOLDERS: how long after the write a fault still undoes it
    copies: int = 1  # HOLDERS: how many of the message's holders the fault must strike
    per_get: int | None = 1  # CUT: messages one cut get may take (None: any number)
    grace_s: float = GRACE_S  # IN_FORCE: how long after its heal a fault still explains
    #: DEGRADED: the kinds that take a copy away while a put is acknowledged; IN_FORCE, HOLDERS:
    #: the kinds that must be in force when the allowance's fault begins (an ordered combination)
    after: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.anomaly not in ANOMALIES:
            raise ValueError(f"allowance for {self.anomaly!r}: the anomalies are {', '.join(ANOMALIES)}")
        if not self.faults:
            raise ValueError("an allowance names at least one fault kind (or ANY_FAULT)")
        if self.scope not in SCOPES:
            raise ValueError(f"allowance scope {self.scope!r}: the scopes are {', '.join(SCOPES)}")
        if self.scope == CLOSED and self.anomaly != "reordered":
            raise ValueError(f"allowance scope {CLOSED!r} explains reordering only, not {self.anomaly!r}")
        if self.scope == DEGRADED and (self.anomaly != "lost" or not self.after):
            raise ValueError(f"allowance scope {DEGRADED!r} explains losses, and names the fault kinds that degrade "
                             "an acknowledgement in after=(...)")
        if self.after and self.scope in (CUT, CLOSED):
            raise ValueError(f"after=(...) orders faults; scope {self.scope!r} needs no fault")

    def under(self, faults: frozenset[str]) -> list[str]:
        """The run's fault kinds that permit the anomaly (empty: none do)."""
        return sorted(faults) if ANY_FAULT in self.faults else sorted(faults & set(self.faults))

    def hurts(self) -> str:
        """Which messages the allowance's faults may hurt, in words (``lab backends``)."""
        if self.scope == CUT:
            return "after a get whose reply never came" + (f" ({self.per_get} each)" if self.per_get else "")
        if self.scope == CLOSED:
            return "after a consumer's connection broke while it waited"
        under = ", ".join(self.faults)
        if self.scope == DEGRADED:
            held = "the node that held it" if self.copies == 1 else f"{self.copies} of the nodes that held it"
            return f"acknowledged while {' or '.join(self.after)} had taken a copy away, then under {under} of {held}"
        if self.after:
            under = f"{' or '.join(self.after)}, then {under}"
        if self.scope == HOLDERS:
            held = "the node that held it" if self.copies == 1 else f"{self.copies} of the nodes that held it"
            within = f", within {self.window_s:g} s of the write" if self.window_s is not None else ""
            return f"under {under} of {held}{within}"
        return f"under {under} while it waited"

    def covers(self, kind: str) -> bool:
        """Whether a fault of ``kind`` is one this allowance names."""
        return ANY_FAULT in self.faults or kind in self.faults


@dataclass(frozen=True)
class Promises:
    """What a design promises under one option set and read mode."""

    by: str  # who promises, under which options: "kestrel with syncJournal=always, reliable reads"
    delivery: str  # one of DELIVERIES
    order: str  # one of ORDERS
    allowances: tuple[Allowance, ...] = ()
    #: seconds after which an unacknowledged delivery is handed out again (None: no timed lease)
    lease_s: float | None = None
    #: an unacknowledged delivery comes back when its consumer's connection closes (after an error)
    hands_back_on_close: bool = False
    #: fault kinds the options themselves inject, in force the whole run (a simulated store's late writes)
    injected: tuple[str, ...] = ()

    @property
    def brings_back(self) -> bool:
        """Whether an unacknowledged delivery ever comes back on its own (a dead consumer's)."""
        return self.lease_s is not None or self.hands_back_on_close

    def __post_init__(self) -> None:
        if self.delivery not in DELIVERIES:
            raise ValueError(f"{self.by}: delivery {self.delivery!r} is not one of {', '.join(DELIVERIES)}")
        if self.order not in ORDERS:
            raise ValueError(f"{self.by}: order {self.order!r} is not one of {', '.join(ORDERS)}")

    def to_dict(self) -> dict[str, Any]:
        """As a run's manifest holds them, so that the run can be judged again from it alone."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Promises":
        allowances = tuple(Allowance(**{**a, "faults": tuple(a["faults"]), "after": tuple(a.get("after") or ())})
                           for a in d.get("allowances") or ())
        return cls(**{**d, "allowances": allowances, "injected": tuple(d.get("injected") or ())})

    def lines(self) -> list[str]:
        """For people (``lab backends``): delivery and order, then one line per allowance."""
        verbs = {"lost": "may lose acknowledged messages", "duplicated": "may deliver twice",
                 "reordered": "may reorder"}
        back = [f"its lease of {self.lease_s:g} s runs out"] if self.lease_s is not None else []
        back += ["its consumer's connection closes"] if self.hands_back_on_close else []
        return ([f"{self.delivery}, order: {self.order}"]
                + [f"an unacknowledged delivery comes back once {' or '.join(back)}"] * bool(back)
                + [f"{verbs[a.anomaly]} {a.hurts()}: {a.why}" for a in self.allowances])


def total_queue(by: str) -> Promises:
    """Jepsen's total-queue rule, for a run whose design promises are unknown: nothing lost,
    nothing unexpected; duplicates and order are counted, not judged (a lease of 0 s: any
    delivery not yet acknowledged may come again at once)."""
    return Promises(by, AT_LEAST_ONCE, NO_ORDER, lease_s=0.0)


#: a design's rule: its promises under ``options`` (checked, defaults filled in) with reliable
#: reads (True) or plain gets (False)
Rule = Callable[[Mapping[str, Any], bool], Promises]


@dataclass(frozen=True)
class Promised:
    """What a design promises, declared apart from its driver: its ``rule`` (None: it declares
    nothing, and is held to Jepsen's total-queue rule) and the option sets that change what
    it promises, which ``lab matrix``, ``lab brokers`` and ``lab conform`` run one by one."""

    rule: Rule | None = None
    option_sets: tuple[Mapping[str, Any], ...] = ({},)

    def under(self, options: Mapping[str, Any], reliable: bool, by: str) -> Promises:
        """The promises under ``options`` (checked) and this read mode; ``by`` names the
        design, for one that declares none."""
        if self.rule is None:
            return total_queue(f"{by} (no declared promises)")
        return self.rule(options, reliable)
