"""What `primary_backup` promises, apart from its driver: the checker holds every run to it, so
declare what is true — a promise too strong makes a correct design INVALID, one too weak
lets a broken one pass.

Every acknowledged put is on both nodes, unless the backup was away (down, or cut off from
the primary) when it was acknowledged: then the primary alone held it, and a crash of that
primary before the backup was in step again loses it — a DEGRADED allowance, not a blanket
one. Both nodes are in memory, so a crash of both loses what they held. A get whose reply a
fault cuts leaves its message open for good (reliable) or gone (plain). In a split both nodes
may lead for a while (the backup promotes itself, the old primary has not heard yet): then
both may hand out the same message, and the messages the old primary took in go to the tail
of the new primary's queue when it steps down.
"""

from __future__ import annotations

from typing import Any, Mapping

from lab.design import (ANY_FAULT, AT_MOST_ONCE, CUT, DEGRADED, DISK_LOSS, EXACTLY_ONCE, FIFO, HOLDERS, Allowance,
                        Promised, Promises)

#: the faults that take the backup away from the primary (it acknowledges alone meanwhile)
AWAY = ("crash", "kill", "partition", "pause", "gc", "loss", "link-delay", DISK_LOSS)
#: the faults that make both nodes lead at once for a while (a silent primary that still lives)
TWO_LEADERS = ("partition", "pause", "gc", "loss", "link-delay")


def promises(options: Mapping[str, Any], reliable: bool) -> Promises:
    lone = Allowance("lost", ("crash", "kill", DISK_LOSS), "acknowledged by a primary whose backup was away, "
                     "then that lone copy's node crashed", scope=DEGRADED, after=AWAY)
    both = Allowance("lost", ("crash", "kill", DISK_LOSS), "in memory: a crash of both nodes loses what they held",
                     scope=HOLDERS, copies=2)
    twice = Allowance("duplicated", TWO_LEADERS, "two primaries for a while: each may hand out the same message")
    behind = Allowance("reordered", TWO_LEADERS + ("crash", "kill"), "a stepped-down primary's messages go to "
                       "the tail of the new primary's queue; a failover may overtake a message in flight")
    if reliable:
        return Promises("primary_backup with reliable reads", EXACTLY_ONCE, FIFO,
                        (lone, both, twice, behind,
                         Allowance("lost", (ANY_FAULT,), "a get whose reply is cut leaves its message open for good",
                                   scope=CUT)))
    return Promises("primary_backup with plain gets", AT_MOST_ONCE, FIFO,
                    (lone, both, twice, behind,
                     Allowance("lost", (ANY_FAULT,), "a get whose reply is cut is never delivered", scope=CUT)))


# the option sets that change what it promises (`lab matrix` runs each): one, as it has none
PROMISED = Promised(promises, option_sets=({},))
