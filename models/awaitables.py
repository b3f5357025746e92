"""How simulated time meets ``async def`` code: integer-nanosecond time and ``Await``.

``Await(event)`` is what every awaitable of the sim world boils down to: awaiting it
yields the SimPy event to the driver in ``models.runtime``, which sends back its value.
"""

from __future__ import annotations

from heapq import heappush
from typing import Any, Callable

from simpy.core import SimTime
from simpy.events import NORMAL
from simpy.events import Event as SimPyEvent

NS = 1_000_000_000


def to_ns(seconds: float) -> int:
    """Simulated time is integer nanoseconds; negative durations are zero.

    A positive duration is at least 1 ns: rounding it to zero would let a loop
    that waits out "the time remaining" spin forever at one instant.
    """
    if seconds <= 0:
        return 0
    return max(1, round(seconds * NS))


class Await:
    """Turns a SimPy event into an awaitable: the driver receives the event itself."""

    __slots__ = ("event",)

    def __init__(self, event: SimPyEvent | Due):
        self.event = event

    def __await__(self):
        return (yield self.event)


class Due:
    """What ``env.timeout(delay, value)`` is to the event loop, and no more: an event already
    triggered with ``value``, processed ``delay`` ns from now. SimPy's step (and
    ``models.world.run_events``) reads only ``callbacks``, ``_ok`` and ``_value`` of an event,
    and a process that waits on one appends to ``callbacks``; this skips ``Timeout``'s
    constructor chain for the frames and service times a run schedules by the million. It
    takes its place in the queue exactly as the timeout would (same time, priority and id
    from the environment's counter), so the order of events is unchanged."""

    __slots__ = ("callbacks", "_ok", "_value")

    def __init__(self, env: Any, delay: SimTime, value: Any = None, callback: Callable[[Any], None] | None = None):
        self.callbacks: list | None = [callback] if callback is not None else []
        self._ok = True
        self._value = value
        heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), self))

    @property
    def value(self) -> Any:
        return self._value

    @property
    def triggered(self) -> bool:
        return True

    @property
    def processed(self) -> bool:
        return self.callbacks is None
