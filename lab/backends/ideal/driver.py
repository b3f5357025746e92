"""The ideal backend's adapter: one server node running the core, clients that call it.

Both worlds use the Runtime's network: simulated links in the sim world, loopback TCP
between in-process nodes in the live world — so the live row shows the floor that a
Python TCP round trip puts under every design.
"""

from __future__ import annotations

from typing import Any, Mapping

from lab.design import (TIMEOUT, About, Backend, Boot, Cpu, Delivery, Option, Parts, QueueClient, Rejected, Runtime,
                        ServiceModel, ServiceTime)
from lab.backends.ideal.core import Ack, Get, IdealQueue, Item, Put, Release
from lab.backends.ideal.promises import PROMISED

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


class IdealCpu(Cpu):
    """The committed calibration, unless ``--option service=`` names one service time for
    every request (the queueing-theory checks)."""

    def model(self, design: type, options: Mapping[str, Any]) -> ServiceModel | None:
        service = options.get("service")
        if service is not None:
            return ServiceModel.uniform(ServiceTime.parse(service), f"--option service={service}")
        return super().model(design, options)


class IdealBackend(Backend):
    name = "ideal"
    parts = Parts(mutants="lab.backends.ideal.mutants")
    about = About("in-memory FIFO with reliable reads: the control row (no disk, no replicas)", colour="#7f7f7f")
    promised = PROMISED
    cpu = IdealCpu()
    options_declared = (
        TIMEOUT,
        Option("service", "the sim world's service time of every request, for queueing-theory checks",
               "const:50us, exp:50us (mean) or lognormal:50us:0.5 (median, sigma)", _service_spec,
               default_text="the committed calibration", only_in=lambda value: "sim"),
    )

    @property
    def server_nodes(self) -> list[str]:
        return [SERVER]

    def boot(self, node: str) -> Boot:
        async def boot(rt: Runtime) -> None:
            await rt.net.serve(IdealQueue(rt).handle)

        return boot

    def client(self, rt: Runtime, reliable: bool) -> IdealClient:
        return IdealClient(rt, SERVER, reliable, self.options["timeout"])
