"""What kestrel promises, apart from its driver: the rule that gives its ``Promises`` for an
option set and read mode, and the option sets that change them (``lab matrix`` runs each).
"""

from __future__ import annotations

from typing import Any, Mapping

from lab.backends.kestrel.config import QUEUE_OPTIONS
from lab.design import (ANY_FAULT, AT_LEAST_ONCE, AT_MOST_ONCE, CUT, DISK_LOSS, FIFO, FIFO_PER_CONSUMER,
                        FSYNC_MARGIN_S, HOLDERS, Allowance, Promised, Promises)


def promises(options: Mapping[str, Any], reliable: bool) -> Promises:
    """At-least-once with reliable reads (/open then /close), at-most-once with plain gets;
    FIFO per queue; a crash loses what the journal had not fsynced (spec 4.6)."""
    given = options.get("syncJournal", "never")
    sync = QUEUE_OPTIONS["syncJournal"][1](given, "syncJournal")  # None never, 0 always, P a period
    # a write is undone by a crash before the next fsync: the period, and an fsync's worth of margin
    window = None if sync is None else sync + FSYNC_MARGIN_S
    allowances = []
    if reliable:
        aborted = "an aborted or rolled-back read returns to the head"
        allowances += [Allowance("reordered", (ANY_FAULT,), aborted),
                       Allowance("reordered", (ANY_FAULT,), aborted, scope=CUT)]
    if sync is None:
        allowances.append(Allowance("lost", ("crash",), f"syncJournal={given} loses the unsynced tail",
                                    scope=HOLDERS))
    elif sync > 0:
        allowances.append(Allowance("lost", ("crash",), f"syncJournal={given} may lose the puts of the last {given}",
                                    scope=HOLDERS, window_s=window))
    if sync != 0:  # a crash may forget unsynced removals (a get, a /close): their items come again
        allowances += [Allowance(anomaly, ("crash",), f"syncJournal={given} loses unsynced removals",
                                 scope=HOLDERS, window_s=window) for anomaly in ("duplicated", "reordered")]
    allowances.append(Allowance("lost", (DISK_LOSS,), "one server: its journal is every item's only copy, and "
                                "a destroyed disk loses them all", scope=HOLDERS))
    if not reliable:
        allowances.append(Allowance("lost", (ANY_FAULT,), "at-most-once: a get whose reply is cut loses its item",
                                    scope=CUT))
    return Promises(f"kestrel with syncJournal={given}, {'reliable reads' if reliable else 'plain gets'}",
                    AT_LEAST_ONCE if reliable else AT_MOST_ONCE,
                    # several open reads per connection: a consumer holds items ahead of the others
                    FIFO if options.get("maxOpenTransactions", 1) == 1 else FIFO_PER_CONSUMER, tuple(allowances),
                    hands_back_on_close=reliable)


PROMISED = Promised(promises, option_sets=({"syncJournal": "never"}, {"syncJournal": "always"}))
