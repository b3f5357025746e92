"""What nats promises, apart from its driver: the rule that gives its ``Promises`` for an
option set and read mode, and the option sets that change them (``lab matrix`` runs each).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from lab.design import (ANY_FAULT, AT_LEAST_ONCE, AT_MOST_ONCE, CUT, DISK_LOSS, FIFO_PER_CONSUMER, FSYNC_MARGIN_S,
                        HOLDERS, Allowance, Promised, Promises)

DEFAULT_SYNC = "2m"  # the server's own: stream.go sets SyncInterval = 2 * time.Minute for file streams
DURATION = re.compile(r"^(\d+)(ms|s|m|h)$")
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def sync_seconds(value: str) -> float | None:
    """A ``sync_interval`` in seconds; None for ``always`` (an fsync before every PubAck)."""
    if value == "always":
        return None
    match = DURATION.match(value)
    if match is None:
        raise ValueError(f"not always or a duration: {value!r}")
    amount, unit = match.groups()
    return int(amount) * UNITS[unit]


def promises(options: Mapping[str, Any], reliable: bool) -> Promises:
    """At-least-once with the explicit-ack consumer (a plain get acks right after its fetch,
    so a fetch whose reply is cut still comes back after AckWait), at-most-once with
    AckNone; stream order per consumer; a power loss may take the publishes of the last
    ``sync_interval`` and the whole stream; a kill -9 may undo consumer acks, no publish."""
    sync = options.get("sync_interval", DEFAULT_SYNC)
    acks = options.get("ack", "explicit") == "explicit"
    period = sync_seconds(sync)
    allowances = [Allowance("lost", (DISK_LOSS,), "one server: its file store is every message's only copy",
                            scope=HOLDERS)]
    if period is not None:
        allowances.append(Allowance(
            "lost", ("crash",), f"sync_interval={sync}: the file store fsyncs every {period:g} s, after the "
            f"PubAck; a power loss takes the publishes since the last sync, and may take the whole stream "
            f"(its metadata is not synced either)", scope=HOLDERS, window_s=period + FSYNC_MARGIN_S))
    # consumer state (acks, the work queue's deletions) is written without sync: brokers.md §3 saw
    # 50/50 ack_sync'd messages come again after a kill -9
    allowances += [Allowance(anomaly, ("kill", "crash"), "a kill -9 or power loss may undo consumer acks "
                             "(even ack_sync'd ones): acknowledged messages are delivered again",
                             scope=HOLDERS) for anomaly in ("duplicated", "reordered")]
    if acks:
        allowances.append(Allowance("reordered", (ANY_FAULT,), "a message whose AckWait ran out (its fetch "
                                    "reply lost, its consumer stopped) is redelivered ahead of newer ones"))
    else:
        allowances.append(Allowance("lost", (ANY_FAULT,), "AckNone: a fetch whose reply is cut is gone",
                                    scope=CUT))
    how = "explicit acks (ack_sync), AckWait" if acks else "AckNone"
    # FIFO per consumer, not per queue: the server serves pull requests in stream order, but
    # a pull request outlives the client's fetch timeout, so a message sent just after the
    # client gave up waits in its subscription for that client's next fetch, behind newer
    # ones other consumers got meanwhile (seen in fault-free runs, 10 Locust users)
    return Promises(f"nats JetStream with sync_interval={sync}, {how}",
                    AT_LEAST_ONCE if acks else AT_MOST_ONCE, FIFO_PER_CONSUMER, tuple(allowances),
                    lease_s=options.get("ack_wait_ms", 2000) / 1000 if acks and reliable else None)


PROMISED = Promised(promises, option_sets=({},))
