"""The ideal queue's core: in-memory FIFOs with reliable reads, and nothing else.

No disk and no replication: what it shows in a comparison is the cost of the harness
and the transport, and what a queue with no design trade-offs delivers (nothing lost,
nothing duplicated, strict FIFO) — while its node stays up. It only touches the
Runtime (events and clock), so it runs unchanged in both worlds.

Requests are plain frozen dataclasses; ``handle`` answers them.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

from lab.design.runtime import Event, Runtime


@dataclass(frozen=True)
class Put:
    queue: str
    body: bytes


@dataclass(frozen=True)
class Get:
    queue: str
    wait: float  # seconds to wait for an item
    reliable: bool  # True: the item stays open until Ack or Release


@dataclass(frozen=True)
class Ack:
    xid: int


@dataclass(frozen=True)
class Release:
    xid: int


@dataclass(frozen=True)
class Item:
    body: bytes
    xid: int | None  # set for reliable reads


class IdealQueue:
    """Named FIFO queues; blocked readers are served first come, first served."""

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.queues: dict[str, deque[bytes]] = {}
        self.waiters: dict[str, deque[Event]] = {}
        self.open: dict[int, tuple[str, bytes]] = {}
        self._xids = itertools.count(1)

    async def handle(self, source: str, request: object) -> object:
        if isinstance(request, Put):
            self.put(request.queue, request.body)
            return True
        if isinstance(request, Get):
            return await self.get(request.queue, request.wait, request.reliable)
        if isinstance(request, Ack):
            return self.ack(request.xid)
        if isinstance(request, Release):
            return self.release(request.xid)
        raise ValueError(f"ideal: unknown request {type(request).__name__}")

    def put(self, queue: str, body: bytes) -> None:
        waiters = self.waiters.get(queue)
        if waiters:
            waiters.popleft().set(body)  # hand over directly: the longest waiter gets it
        else:
            self.queues.setdefault(queue, deque()).append(body)

    async def get(self, queue: str, wait: float, reliable: bool) -> Item | None:
        items = self.queues.get(queue)
        if items:
            return self._deliver(queue, items.popleft(), reliable)
        if wait <= 0:
            return None
        handoff = self.rt.event()
        waiters = self.waiters.setdefault(queue, deque())
        waiters.append(handoff)
        await self.rt.wait(handoff, wait)
        if not handoff.is_set():
            waiters.remove(handoff)
            return None
        # Set, even if at the very moment the wait timed out: the item is ours.
        return self._deliver(queue, await handoff.wait(), reliable)

    def _deliver(self, queue: str, body: bytes, reliable: bool) -> Item:
        if not reliable:
            return Item(body, None)
        xid = next(self._xids)
        self.open[xid] = (queue, body)
        return Item(body, xid)

    def ack(self, xid: int) -> bool:
        return self.open.pop(xid, None) is not None

    def release(self, xid: int) -> bool:
        """Put an open item back at the head of its queue (or hand it to a waiter)."""
        opened = self.open.pop(xid, None)
        if opened is None:
            return False
        queue, body = opened
        waiters = self.waiters.get(queue)
        if waiters:
            waiters.popleft().set(body)
        else:
            self.queues.setdefault(queue, deque()).appendleft(body)
        return True
