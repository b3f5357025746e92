"""How simulated time meets ``async def`` code: integer-nanosecond time and ``Await``.

``Await(event)`` is what every awaitable of the sim world boils down to: awaiting it
yields the SimPy event to the driver in ``models.runtime``, which sends back its value.
"""

from __future__ import annotations

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

    def __init__(self, event: SimPyEvent):
        self.event = event

    def __await__(self):
        return (yield self.event)
