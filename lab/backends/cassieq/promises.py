"""What cassieq promises, apart from its driver: the rule that gives its ``Promises`` for an
option set and read mode, and the option sets that change them (``lab matrix`` runs each).
"""

from __future__ import annotations

from typing import Any, Mapping

from lab.design import ANY_FAULT, AT_LEAST_ONCE, CUT, DISK_LOSS, HOLDERS, NO_ORDER, Allowance, Promised, Promises


def promises(options: Mapping[str, Any], reliable: bool) -> Promises:
    """At-least-once with reliable acks ("you may get a message more than once"); order is
    best effort (late writes are republished at the tail, expired leases interleave); with
    auto acks a get whose reply is cut, or an ack that fails, may lose a message."""
    allowances = [Allowance("duplicated", (ANY_FAULT,), "a republish racing a read"),
                  Allowance("lost", (DISK_LOSS,), "the store's disk holds every message (the simulated "
                            "Cassandra's replicas are one node): destroyed, the store is gone", scope=HOLDERS)]
    if not reliable:
        allowances.append(Allowance("lost", (ANY_FAULT,), "auto acks: a leased message whose ack is cut",
                                    scope=CUT))
    return Promises(f"cassieq on {options.get('store', 'its store')}, {'reliable' if reliable else 'auto'} acks",
                    AT_LEAST_ONCE, NO_ORDER, tuple(allowances), lease_s=options.get("invisibility"),
                    injected=("late-writes",) if options.get("cassandra_late_write_p")
                    or options.get("cassandra_ghost_write_p") else ())


PROMISED = Promised(promises, option_sets=({},))
