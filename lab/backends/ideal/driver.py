"""The ideal backend's adapter: one server node running the core, clients that call it.

Both worlds use the Runtime's network: simulated links in the sim world, loopback TCP
between in-process nodes in the live world — so the live row shows the floor that a
Python TCP round trip puts under every design.
"""

from __future__ import annotations

from typing import Any, Mapping

from lab.design import TIMEOUT
from lab.design import Parts
from lab.design import Backend, Delivery, QueueClient, Rejected
from lab.design import Option
from lab.backends.ideal.core import Ack, Get, IdealQueue, Item, Put, Release
from lab.design import Boot, Runtime
from lab.design import ServiceModel, ServiceTime
from lab.design import (ANY_FAULT, AT_MOST_ONCE, CUT, DISK_LOSS, EXACTLY_ONCE, FIFO, HOLDERS, Allowance, Promises)

SERVER = "ideal-0"


class IdealClient(QueueClient):
    def __init__(self, rt: Runtime, server: str, reliable: bool, timeout: float):
        self.rt = rt
        self.server = server
        self.reliable = reliable
        self.timeout = timeout

    async def put(self, queue: str, body: bytes) -> None:
        await self.rt.net.call(self.server, Put(queue, body), self.timeout)

    async def get(self, queue: str, wait: float) -> Delivery | None:
        item: Item | None = await self.rt.net.call(self.server, Get(queue, wait, self.reliable), wait + self.timeout)
        if item is None:
            return None
        return Delivery(queue, item.body, item.xid)

    async def ack(self, delivery: Delivery) -> None:
        if not await self.rt.net.call(self.server, Ack(delivery.token), self.timeout):
            raise Rejected(f"ack of unknown xid {delivery.token}")

    async def release(self, delivery: Delivery) -> None:
        if not await self.rt.net.call(self.server, Release(delivery.token), self.timeout):
            raise Rejected(f"release of unknown xid {delivery.token}")


def _service_spec(value: Any) -> str:
    """The spec as given (options stay plain values, for manifests), once it parses."""
    ServiceTime.parse(value)  # ServiceModelError (a ValueError) says what is wrong
    return value


class IdealBackend(Backend):
    name = "ideal"
    parts = Parts(mutants="lab.backends.ideal.mutants")
    colour = "#7f7f7f"  # every chart draws it in this
    summary = "in-memory FIFO with reliable reads: the control row (no disk, no replicas)"
    options_declared = (
        TIMEOUT,
        Option("service", "the sim world's service time of every request, for queueing-theory checks",
               "const:50us, exp:50us (mean) or lognormal:50us:0.5 (median, sigma)", _service_spec,
               default_text="the committed calibration", only_in=lambda value: "sim"),
    )

    @classmethod
    def promises(cls, options: Mapping[str, Any], reliable: bool) -> Promises:
        """FIFO, nothing duplicated (it never redelivers): exactly-once with reliable reads,
        at-most-once with plain gets; in memory, so a crash loses everything, and a get whose
        reply a fault cuts is lost (a plain get removed its item; an open read stays open)."""
        cut = "a plain get removed its item" if not reliable else "an open read stays open: nothing redelivers"
        return Promises(f"ideal with {'reliable reads' if reliable else 'plain gets'}",
                        EXACTLY_ONCE if reliable else AT_MOST_ONCE, FIFO,
                        (Allowance("lost", ("crash", "kill", DISK_LOSS), "in memory: a crash loses everything", scope=HOLDERS),
                         Allowance("lost", (ANY_FAULT,), f"a get whose reply is cut is never delivered: {cut}",
                                   scope=CUT)))

    @property
    def server_nodes(self) -> list[str]:
        return [SERVER]

    @classmethod
    def service_model(cls, options: Mapping[str, Any]) -> ServiceModel | None:
        service = options.get("service")
        if service is not None:
            return ServiceModel.uniform(ServiceTime.parse(service), f"--option service={service}")
        return super().service_model(options)

    def boot(self, node: str) -> Boot:
        async def boot(rt: Runtime) -> None:
            await rt.net.serve(IdealQueue(rt).handle)

        return boot

    def client(self, rt: Runtime, reliable: bool) -> IdealClient:
        return IdealClient(rt, SERVER, reliable, self.options["timeout"])
