"""What queuefka promises, apart from its driver: the rule that gives its ``Promises`` for an
option set and read mode, and the option sets that change them (``lab matrix`` runs each).
"""

from __future__ import annotations

from typing import Any, Mapping

from lab.backends.queuefka.core.broker_api import Config
from lab.backends.queuefka.core.writer import FsyncPolicy
from lab.design import (ANY_FAULT, AT_LEAST_ONCE, AT_MOST_ONCE, CLOSED, CUT, DISK_LOSS, FIFO, FIFO_PER_CONSUMER,
                        HOLDERS, Allowance, Promised, Promises)


def promises(options: Mapping[str, Any], reliable: bool) -> Promises:
    """At-least-once with reliable acks (commit after the get; a commit never passes
    records leased to another reader, and a reader's unacknowledged records come back
    when its session ends), at-most-once with auto acks (commit before); FIFO per topic
    (one log); a crash loses what the log had not fsynced (commits always wait for theirs)."""
    given = options.get("fsync", "never")
    policy = FsyncPolicy.parse(given)
    allowances = []
    if reliable:
        again = ("records fetched by a reader whose connection closed or idled before it committed are handed "
                 "out again, after later ones")
        # only a reader whose connection broke (a get or ack of it failed or timed out
        # while the record waited) hands records back: a fault alone reorders nothing
        allowances += [Allowance("reordered", (ANY_FAULT,), again, scope=CLOSED),
                       Allowance("reordered", (ANY_FAULT,), again, scope=CUT, per_get=None)]
    if policy.mode == "never":
        allowances.append(Allowance("lost", ("crash",), f"fsync={given} loses the unsynced tail of the log",
                                    scope=HOLDERS))
    elif policy.mode == "interval":
        # no time bound: the fsync waits for the next write after the interval, however late
        allowances.append(Allowance("lost", ("crash",), f"fsync={given} may lose the records since the last fsync",
                                    scope=HOLDERS))
    allowances.append(Allowance("lost", (DISK_LOSS,), "one broker: its log is every record's only copy, and a "
                                "destroyed disk loses them all", scope=HOLDERS))
    if not reliable:
        allowances.append(Allowance("lost", (ANY_FAULT,), "at-most-once: a fetch whose reply is cut loses its records",
                                    scope=CUT, per_get=options.get("prefetch")))
    return Promises(f"queuefka with fsync={given}, {'reliable acks' if reliable else 'auto acks'}",
                    AT_LEAST_ONCE if reliable else AT_MOST_ONCE,
                    # a client hands out its fetch's records one get at a time: with several
                    # consumers one may run ahead of another's buffer, so the order is each
                    # consumer's (real time across consumers only when it fetches one at a time)
                    FIFO if options.get("prefetch") == 1 else FIFO_PER_CONSUMER, tuple(allowances),
                    lease_s=(options.get("session_timeout") or Config.session_timeout) if reliable else None, hands_back_on_close=reliable)


PROMISED = Promised(promises, option_sets=({"fsync": "never"}, {"fsync": "always"}))
