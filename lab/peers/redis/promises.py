"""What redis promises, apart from its driver: the rule that gives its ``Promises`` for an
option set and read mode, and the option sets that change them (``lab matrix`` runs each).
"""

from __future__ import annotations

from typing import Any, Mapping

from lab.design import (ANY_FAULT, AT_LEAST_ONCE, AT_MOST_ONCE, CUT, DISK_LOSS, FIFO, FSYNC_MARGIN_S, HOLDERS,
                        IN_FORCE, Allowance, Promised, Promises)


def promises(options: Mapping[str, Any], reliable: bool) -> Promises:
    """At-least-once with a consumer group and XACK (at-most-once with NOACK); entries in
    ID order; what a power loss may take depends on ``appendfsync``; a kill -9 takes
    nothing the server acknowledged."""
    fsync = options.get("appendfsync", "everysec")
    allowances = [Allowance("lost", (DISK_LOSS,), "one server: its AOF is every entry's only copy",
                            scope=HOLDERS)]
    if fsync == "no":
        allowances.append(Allowance("lost", ("crash",), "appendfsync=no: the kernel decides when the AOF "
                                    "reaches the disk, and a power loss takes what it had not", scope=HOLDERS))
    elif fsync == "everysec":
        allowances.append(Allowance("lost", ("crash",), "appendfsync=everysec: a power loss takes up to the "
                                    "last second of the AOF", scope=HOLDERS, window_s=2.0 + FSYNC_MARGIN_S))
        allowances.append(Allowance("lost", ("disk-delay",), "appendfsync=everysec: while a slow fsync runs, "
                                    "Redis postpones the AOF write up to 2 s and still replies", scope=IN_FORCE))
    if fsync != "always":  # consumer state is in the same AOF: an XACK undone comes again
        allowances += [Allowance(anomaly, ("crash",), f"appendfsync={fsync}: a power loss may undo acks and "
                                 f"reads", scope=HOLDERS) for anomaly in ("duplicated", "reordered")]
    if reliable:
        allowances.append(Allowance("reordered", (ANY_FAULT,), "a claimed entry comes back behind newer ones"))
    else:
        allowances.append(Allowance("lost", (ANY_FAULT,), "NOACK: a read whose reply is cut is gone",
                                    scope=CUT))
    return Promises(f"redis with appendfsync={fsync}, {'XACK' if reliable else 'NOACK'}",
                    AT_LEAST_ONCE if reliable else AT_MOST_ONCE, FIFO, tuple(allowances),
                    lease_s=options.get("claim_ms", 2000) / 1000 if reliable else None)


PROMISED = Promised(promises, option_sets=({"appendfsync": "always"}, {"appendfsync": "everysec"}, {"appendfsync": "no"}))
