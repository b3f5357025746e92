"""What rabbitmq promises, apart from its driver: the rule that gives its ``Promises`` for an
option set and read mode, and the option sets that change them (``lab matrix`` runs each).
"""

from __future__ import annotations

from typing import Any, Mapping

from lab.design import (ANY_FAULT, AT_LEAST_ONCE, AT_MOST_ONCE, CUT, DISK_LOSS, FIFO, FIFO_PER_CONSUMER, HOLDERS,
                        NO_ORDER, Allowance, Promised, Promises)

RESTART_S = 12.0  # the longest a restart was seen to take here (a loaded 2-core machine), and some:
# how long after a crash heals a publish without confirms may still have gone nowhere


def promises(options: Mapping[str, Any], reliable: bool) -> Promises:
    """At-least-once with manual acks (at-most-once with no_ack); FIFO per queue for a
    basic.get reader (per consumer with a prefetch); what a crash may take depends on the
    queue type, confirms and the delivery mode."""
    queue_type = options.get("queue_type", "classic")
    confirms = options.get("confirms", "on") == "on"
    persistent = options.get("persistent", "on") == "on" or queue_type == "quorum"  # a QQ persists every message
    prefetch = options.get("prefetch", 1)
    allowances = [Allowance("lost", (DISK_LOSS,), "one node: its disk holds every message's only copy",
                            scope=HOLDERS)]
    if not confirms:
        allowances.append(Allowance("lost", ("crash", "kill"), "confirms=off: a publish is only sent, and one "
                                    "the broker had not yet written is gone when it dies", scope=HOLDERS))
        # a put's ok is the socket write: one sent on a connection whose broker is dead
        # (before the client sees the close) or still starting again is gone too
        allowances.append(Allowance("lost", ("crash", "kill"), "confirms=off: a publish sent while the broker "
                                    "was down or restarting went nowhere, and said ok", grace_s=RESTART_S))
    if not persistent:
        allowances.append(Allowance("lost", ("crash", "kill"), "persistent=off: a transient message on a classic "
                                    "queue does not survive a restart of the broker", scope=HOLDERS))
    # an ack is not confirmed to the consumer: one the broker had not written when it died comes again
    allowances.append(Allowance("duplicated", ("crash", "kill"), "an ack the broker had not yet made durable is "
                                "undone by a restart: the message is delivered again", scope=HOLDERS))
    if reliable:
        allowances.append(Allowance("reordered", (ANY_FAULT,), "a delivery handed back (its channel closed) comes "
                                    "again behind newer ones"))
        if queue_type == "quorum":
            allowances.append(Allowance("reordered", (ANY_FAULT,), "queue_type=quorum: a nacked message goes "
                                        "back to the tail of the queue"))
    else:
        allowances.append(Allowance("lost", (ANY_FAULT,), "no_ack: a basic.get whose reply is cut is gone",
                                    scope=CUT))
    # without confirms a put's ok is the socket write: two producers' messages enter the
    # queue in an order their puts' replies do not tell
    order = NO_ORDER if not confirms else FIFO_PER_CONSUMER if reliable and prefetch else FIFO
    settings = f"queue_type={queue_type}, confirms={options.get('confirms', 'on')}, " \
               f"persistent={options.get('persistent', 'on')}"
    return Promises(f"rabbitmq with {settings}, {'manual acks' if reliable else 'no_ack'}",
                    AT_LEAST_ONCE if reliable else AT_MOST_ONCE,
                    order, tuple(allowances),
                    lease_s=None, hands_back_on_close=reliable)


PROMISED = Promised(promises, option_sets=({"queue_type": "classic"}, {"queue_type": "quorum"}, {"confirms": "off"},
                       {"persistent": "off"}))
