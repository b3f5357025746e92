"""What ideal promises, apart from its driver: the rule that gives its ``Promises`` for an
option set and read mode, and the option sets that change them (``lab matrix`` runs each).
"""

from __future__ import annotations

from typing import Any, Mapping

from lab.design import (ANY_FAULT, AT_MOST_ONCE, CUT, DISK_LOSS, EXACTLY_ONCE, FIFO, HOLDERS, Allowance, Promised,
                        Promises)


def promises(options: Mapping[str, Any], reliable: bool) -> Promises:
    """FIFO, nothing duplicated (it never redelivers): exactly-once with reliable reads,
    at-most-once with plain gets; in memory, so a crash loses everything, and a get whose
    reply a fault cuts is lost (a plain get removed its item; an open read stays open)."""
    cut = "a plain get removed its item" if not reliable else "an open read stays open: nothing redelivers"
    return Promises(f"ideal with {'reliable reads' if reliable else 'plain gets'}",
                    EXACTLY_ONCE if reliable else AT_MOST_ONCE, FIFO,
                    (Allowance("lost", ("crash", "kill", DISK_LOSS), "in memory: a crash loses everything", scope=HOLDERS),
                     Allowance("lost", (ANY_FAULT,), f"a get whose reply is cut is never delivered: {cut}",
                               scope=CUT)))


PROMISED = Promised(promises, option_sets=({},))
