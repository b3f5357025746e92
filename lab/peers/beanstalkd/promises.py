"""What beanstalkd promises, apart from its driver: the rule that gives its ``Promises`` for an
option set and read mode, and the option sets that change them (``lab matrix`` runs each).
"""

from __future__ import annotations

from typing import Any, Mapping

from lab.design import (ANY_FAULT, AT_LEAST_ONCE, AT_MOST_ONCE, CUT, DISK_LOSS, FIFO, HOLDERS, Allowance, Promised,
                        Promises)


def parse_fsync(value: Any) -> int | str:
    """``fsync``: ``never`` (``-F``) or a whole number of milliseconds >= 0 (``-f MS``),
    as an int or its digits (YAML reads ``fsync=50`` as 50)."""
    if value == "never":
        return "never"
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not never or a whole number of milliseconds")
    return value


def promises(options: Mapping[str, Any], reliable: bool) -> Promises:
    """At-least-once with reserve/delete (at-most-once with a delete before the hand-out);
    FIFO per tube by (priority, id); what a power loss may take depends on ``fsync``; a
    kill -9 takes nothing acknowledged, but undoes every reservation."""
    fsync = parse_fsync(options.get("fsync", 50))
    allowances = [Allowance("lost", (DISK_LOSS,), "one server: its binlog is every job's only copy",
                            scope=HOLDERS)]
    if fsync == "never":
        allowances.append(Allowance("lost", ("crash",), "fsync=never (-F): beanstalkd never fsyncs its "
                                    "binlog, and a power loss takes what the kernel had not written",
                                    scope=HOLDERS))
    elif fsync:
        # window None on purpose: the fsync waits for a later write, with no timer
        allowances.append(Allowance("lost", ("crash",), f"fsync={fsync} (-f {fsync}): beanstalkd fsyncs "
                                    f"only when a write comes {fsync} ms or more after its last fsync, with no "
                                    f"timer, so a power loss takes the unsynced tail of the last burst "
                                    f"however long ago it was acknowledged", scope=HOLDERS))
    if fsync != 0:  # deletes are in the same binlog: one undone comes again
        allowances += [Allowance(anomaly, ("crash",), f"fsync={fsync}: a power loss may undo deletes and "
                                 f"releases", scope=HOLDERS) for anomaly in ("duplicated", "reordered")]
    allowances += [Allowance(anomaly, ("crash", "kill"), "reservations are not logged: after a restart every "
                             "reserved job is ready again", scope=HOLDERS) for anomaly in ("duplicated", "reordered")]
    if reliable:
        allowances.append(Allowance("reordered", (ANY_FAULT,), "a job whose reservation ended (time-to-run, a "
                                    "closed connection) is ready again behind jobs delivered meanwhile"))
    else:
        allowances.append(Allowance("lost", (ANY_FAULT,), "a plain get deletes the job before handing it out: "
                                    "a get whose reply is cut took it", scope=CUT))
    return Promises(f"beanstalkd with fsync={fsync}, {'reserve and delete' if reliable else 'delete on get'}",
                    AT_LEAST_ONCE if reliable else AT_MOST_ONCE, FIFO, tuple(allowances),
                    lease_s=float(options.get("ttr", 2)) if reliable else None,
                    hands_back_on_close=reliable)


PROMISED = Promised(promises, option_sets=({"fsync": 0}, {"fsync": 50}, {"fsync": "never"}))
