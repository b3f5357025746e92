"""A simulated node's CPU: cores that requests queue for and hold for a service time.

Each request a server node handles (a stream request, or a message from a peer or a
client) first takes one of the node's cores, first come first served, and holds it for a
time drawn from the design's service-time model (``lab.design.service``) for the request's kind;
then the design's code runs, at no further cost in simulated time. Waits inside the
handler (a blocking read, an fsync, a call to a peer) hold no core: the calibration
measures CPU time, and the disk and the network have their own models. So queueing for
cores shows in latency and throughput, as it does on a loaded server.

Each frame a node receives (a stream's chunk, a message) also costs the calibration's
``transport_ns`` (sockets, event loop, framing), charged with its first request. With
``sim: {latency: calibrated}`` the clients share one more CPU, the load generator's
process, where each round trip costs the calibration's ``client`` time, and every
process also needs one of the machine's cores (as many as the calibration's machine had):
on one machine, servers and load generator compete for them.

A paused node's cores stop with it: a request that finishes its service during a pause
resumes, and releases its core, only when the pause ends (the driver's gate,
``models.runtime``). A crash frees every core; the next incarnation starts with a fresh CPU.
"""

from __future__ import annotations

import random
from collections import deque
from typing import TYPE_CHECKING

from lab.design.service import ServiceModel
from models.awaitables import Await, Due

if TYPE_CHECKING:
    import simpy


class Cores:
    """A number of cores, handed out first come, first served."""

    __slots__ = ("env", "free", "waiting")

    def __init__(self, env: "simpy.Environment", cores: int):
        self.env = env
        self.free = cores
        self.waiting: deque = deque()

    async def take(self) -> None:
        if self.free:
            self.free -= 1
            return
        turn = self.env.event()
        self.waiting.append(turn)
        try:
            await Await(turn)
        except BaseException:  # cancelled or crashed while queued
            if turn.triggered:
                self.release()  # the core was handed over already: pass it on
            else:
                self.waiting.remove(turn)
            raise

    def release(self) -> None:
        if self.waiting:
            self.waiting.popleft().succeed()  # hand the core to the longest waiter
        else:
            self.free += 1


class NodeCpu:
    """``cores`` cores of one node incarnation, serving requests in arrival order; with a
    ``host``, each request also needs one of the machine's cores, which every process on
    it shares (the loopback set-up: servers and load generator on one machine)."""

    __slots__ = ("env", "model", "rng", "cores", "host", "busy_ns", "served")

    def __init__(self, env: "simpy.Environment", cores: int, model: ServiceModel, rng: random.Random,
                 host: Cores | None = None):
        self.env = env
        self.model = model
        self.rng = rng
        self.cores = Cores(env, cores)
        self.host = host
        self.busy_ns = 0  # service time handed out, for utilisation
        self.served = 0

    async def serve(self, kind: str, nbytes: int = 0, extra_ns: int = 0) -> None:
        """Queue for a core, hold it for ``kind``'s service time (plus ``extra_ns``: the
        transport's share of a request), release it."""
        service = self.model.for_kind(kind)
        ns = extra_ns if service is None else service.sample_ns(self.rng, nbytes) + extra_ns
        if not ns:
            return
        await self.cores.take()
        try:
            if self.host is not None:
                await self.host.take()
            try:
                self.busy_ns += ns
                self.served += 1
                await Await(Due(self.env, ns))
            finally:
                if self.host is not None:
                    self.host.release()
        finally:
            self.cores.release()
