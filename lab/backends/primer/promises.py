"""What primer promises, apart from its driver: the rule that gives its ``Promises`` for an
option set and read mode, and the option sets that change them (``lab matrix`` runs each).
"""

from __future__ import annotations

from typing import Any, Mapping

from lab.design import (ANY_FAULT, AT_LEAST_ONCE, AT_MOST_ONCE, CUT, DISK_LOSS, HOLDERS, NO_ORDER, Allowance, Promised,
                        Promises)


def promises(options: Mapping[str, Any], reliable: bool) -> Promises:
    """At-least-once with leases and acks, order best effort (slide S8: "best effort to
    order"). AP: in a split both sides serve the copies they hold, so a message may be
    delivered on each side (a duplicate); after the heal anti-entropy settles the acks.
    Without files a crash loses the copies on the crashed nodes: a message whose W
    replicas all crashed is lost. At-most-once gets lose a message whose reply is cut."""
    setting = f"replicas={options['replicas']}, {options['replication']}, persistence={options['persistence']}"
    copies = options["replicas"]  # W of the nodes hold a message: it is gone once W of them lose their copies
    allowances = [Allowance("duplicated", (ANY_FAULT,), "AP: a replica that has not yet heard a read's ACK "
                                                        "(a split, a pause, a crash) serves its copy again")]
    if options["persistence"] == "off":
        allowances.append(Allowance("lost", ("crash", "kill", DISK_LOSS), "persistence=off: copies are in memory, and "
                                    f"a crash of all {copies} of a message's replicas loses it",
                                    scope=HOLDERS, copies=copies))
    else:
        allowances.append(Allowance("lost", (DISK_LOSS,), f"a message is gone once all {copies} of its replicas "
                                    "lose their disks", scope=HOLDERS, copies=copies))
    if reliable:
        return Promises(f"primer with {setting}, at-least-once consumers", AT_LEAST_ONCE, NO_ORDER,
                        tuple(allowances), lease_s=options["lease"])
    allowances.append(Allowance("lost", (ANY_FAULT,), "at-most-once: a get whose reply is cut loses its message",
                                scope=CUT))
    return Promises(f"primer with {setting}, at-most-once consumers", AT_MOST_ONCE, NO_ORDER, tuple(allowances))


PROMISED = Promised(promises, option_sets=({"replicas": 2}, {"replicas": 3, "persistence": "aof"}))
