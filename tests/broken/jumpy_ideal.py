"""A deliberately broken design (``tests.broken``): the ideal queue
whose every ``EVERY``-th get that finds two or more items waiting hands out the second one,
not the head — with no fault, no release and no redelivery. It promises what the ideal
promises (FIFO per queue), so the real-time order check must call its runs invalid.
"""

from __future__ import annotations

from lab.backends.ideal.core import IdealQueue, Item
from lab.backends.ideal.driver import IdealBackend
from lab.runtime import Boot, Runtime

NAME = "jumpy-ideal"
EVERY = 40  # one get in this many (of those that find two items or more) skips the head


class JumpyQueue(IdealQueue):
    """The ideal queue with the bug: now and then the head's successor goes first."""

    def __init__(self, rt: Runtime):
        super().__init__(rt)
        self.crowded_gets = 0

    async def get(self, queue: str, wait: float, reliable: bool) -> Item | None:
        items = self.queues.get(queue)
        if items is not None and len(items) >= 2:
            self.crowded_gets += 1
            if self.crowded_gets % EVERY == 0:  # the bug: a later message first
                body = items[1]
                del items[1]
                return self._deliver(queue, body, reliable)
        return await super().get(queue, wait, reliable)


class JumpyBackend(IdealBackend):
    name = NAME
    summary = "the ideal queue that now and then serves a later message first (a test's deliberate bug)"

    @classmethod
    def calibration_path(cls):  # noqa: ANN206
        return IdealBackend.calibration_path()  # the ideal's CPU model: the same timing as the real one

    def boot(self, node: str) -> Boot:
        async def boot(rt: Runtime) -> None:
            await rt.net.serve(JumpyQueue(rt).handle)

        return boot


BACKEND = JumpyBackend
