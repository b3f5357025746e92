"""A deliberately broken design (``tests.broken``): Queuefka with
``fsync=always`` whose produce acknowledges a record as soon as it is written and makes it
durable in a background task ``LAG`` seconds later — "ack 1-2 ms before durable". It
promises what Queuefka with ``fsync=always`` promises (no loss under a crash), so a crash
that falls in the gap between a put's reply and its fsync breaks that promise; a crash
anywhere else does not.
"""

from __future__ import annotations

import dataclasses

from lab.backends.queuefka.core.broker import GROUP_SUFFIX, QueuefkaCore, _is_segment
from lab.backends.queuefka.driver import QueuefkaBackend
from lab.backends.queuefka.wire.http import accept_http
from lab.runtime import Boot, Runtime

NAME = "ack-early-queuefka"
LAG = 0.0015  # seconds between a put's reply and the fsync that makes its record durable


class AckEarlyCore(QueuefkaCore):
    """The broker with the bug: ``produce`` does not wait for the fsync."""

    async def produce(self, name: str, payloads: tuple[bytes, ...] | list[bytes]) -> list[int]:
        topic = self.topic(name)
        if topic.recovered:
            await topic.store.settle(lambda file: file.endswith(GROUP_SUFFIX))
            topic.recovered = False
        addresses = [topic.writer.write(payload) for payload in payloads]  # the writer's policy: never
        topic.writer.flush()
        self.rt.spawn(self._durable_later(topic), name="late fsync")  # the bug: the reply goes first
        arrived, topic.arrived = topic.arrived, self.rt.event()
        arrived.set()
        return addresses

    async def _durable_later(self, topic) -> None:  # noqa: ANN001 (the broker's private _Topic)
        await self.rt.sleep(LAG)
        topic.writer.sync()
        await topic.store.settle(_is_segment)


class AckEarlyBackend(QueuefkaBackend):
    name = NAME
    summary = "queuefka fsync=always that replies before its fsync (a test's deliberate bug)"

    @classmethod
    def calibration_path(cls):  # noqa: ANN206
        return QueuefkaBackend.calibration_path()  # Queuefka's CPU model: the same timing as the real one

    def boot(self, node: str) -> Boot:
        config = dataclasses.replace(self.config, fsync="never")  # the background task syncs instead

        async def boot(rt: Runtime) -> None:
            core = AckEarlyCore(rt, config)
            await rt.net.listen("http", accept_http(core))
            rt.spawn(core.run_retention(), name="retention")

        return boot


BACKEND = AckEarlyBackend
