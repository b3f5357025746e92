"""The sim world's Task and Event ports on SimPy, and its deadlines.

A ``SimTask`` is the driver that runs a coroutine (``models.driver``,
``models.runtime``); the interrupt causes and the driver's return values for a cancelled or
crashed coroutine live here too, so a task can read them. ``Deadlines`` gives a call's or a
wait's timeout without a SimPy timeout of its own. These stand below the runtime, the network
and the streams, which all make or read tasks and deadlines.
"""

from __future__ import annotations

from collections import deque
from typing import Any, cast

import simpy
from simpy.events import Event as SimPyEvent

from lab.design.runtime import Cancelled, NodeDown
from models.awaitables import Await


class _Crash:
    """Interrupt cause: the node crashed; drop the coroutine without resuming it."""


class _Cancel:
    """Interrupt cause: the task was cancelled; raise Cancelled inside it."""


# Shared with the driver (``models.runtime``) and ``SimWorld.run``, which read a task's end:
CRASH = _Crash()
CANCEL = _Cancel()
CANCELLED = object()  # a driver's return value for a coroutine that ended by Cancelled
CRASHED = object()  # ... and for one whose node crashed under it


class SimEvent:
    """The Event port on a SimPy event."""

    __slots__ = ("_event",)

    def __init__(self, env: simpy.Environment):
        self._event = env.event()

    def set(self, value: Any = None) -> None:
        if not self._event.triggered:
            self._event.succeed(value)

    def is_set(self) -> bool:
        return self._event.triggered

    def wait(self) -> Await:
        return Await(self._event)


class SimTask:
    """The Task port on a coroutine's driver (``models.driver.Drive``)."""

    __slots__ = ("process",)

    def __init__(self, process: Any):  # a models.driver.Drive (which reads this module)
        self.process = process

    def cancel(self) -> None:
        if self.process.is_alive:
            self.process.interrupt(CANCEL)

    def done(self) -> bool:
        return not self.process.is_alive

    def __await__(self):
        value = yield self.process
        if value is CANCELLED:
            raise Cancelled()
        if value is CRASHED:
            raise NodeDown("the task's node crashed")
        return value


class Deadlines:
    """Timeouts that seldom fire: ``add(delay, event, value)`` succeeds ``event`` with
    ``value`` ``delay`` ns from now unless something else triggered it first.

    A call's or a wait's timeout is nearly always beaten by its reply, so instead of one
    SimPy timeout per deadline (each pushed on and popped off the event heap), the
    deadlines of one length wait in arrival order — which is deadline order — behind a
    single timer, armed for the earliest one not yet answered. Each expires at its exact
    instant, as its own timeout would."""

    __slots__ = ("env", "queues")

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.queues: dict[int, deque] = {}  # delay -> (deadline, event, value), while its timer is armed

    def add(self, delay_ns: int, event: SimPyEvent, value: Any) -> None:
        queue = self.queues.get(delay_ns)
        if queue is not None:
            queue.append((self.env.now + delay_ns, event, value))
            return
        self.queues[delay_ns] = deque([(self.env.now + delay_ns, event, value)])
        self.env.timeout(delay_ns, delay_ns).callbacks.append(self._expire)

    def _expire(self, timer: SimPyEvent) -> None:
        delay = cast(int, timer.value)  # the timer's value is its delay (add, below); SimPy types it Any | None
        queue = self.queues[delay]
        now = self.env.now
        while queue and (queue[0][0] <= now or queue[0][1].triggered):
            _, event, value = queue.popleft()
            if not event.triggered:
                event.succeed(value)
        if queue:
            self.env.timeout(queue[0][0] - now, delay).callbacks.append(self._expire)
        else:
            del self.queues[delay]
