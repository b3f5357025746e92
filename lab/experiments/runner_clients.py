"""The run's load: its producers and consumers, as tasks on the world's client nodes.

Producers with constant arrivals follow OMB's rate limiter (``produce``): one client,
closed loop, with intended send times at a fixed interval. With ``arrivals: poisson`` a
producer is open-loop (``produce_open``): each put is its own task on an idle client of
the producer's pool (``ClientPool``) or a new one. Consumers (``consume``) read their
queues until the drain finds them empty. ``LoadState`` is what they share with the runner's
main loop and its progress bar. Every operation of every client is timed and recorded one
way, by ``timed``. ``lab.experiments.runner`` starts them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterator

from lab.design import message
from lab.design.backend import Backend, Delivery, QueueClient
from lab.history.record import Measurement, Recorder
from lab.design.runtime import Runtime

POLL_WAIT = 0.1  # seconds a consumer's get waits for a message
RETRY_PAUSE = 0.01  # seconds a client backs off after a failed operation
DRAIN_STALL = 30.0  # seconds the final drain goes on without a delivery before it gives up
DRAIN_CAP = 600.0  # seconds the final drain may take at most, deliveries or not
DRAIN_CONSUMER = "drain"  # the node and client of the drain consumer of a workload with no consumers


class LoadState:
    """What producers, consumers and the progress bar share."""

    def __init__(self, t0: int, warmup_ns: int):
        self.t0 = t0
        self.warmup_end = t0 + warmup_ns
        self.draining = False
        self.puts = 0
        self.enqueued = 0  # puts that returned ok
        self.delivered = 0  # gets that returned a message
        self.last_delivery = t0  # when a consumer last got a message
        self.last_unknown_get: int | None = None  # when a get last ended with an unknown outcome (it may have leased one)
        self.last_abandon: int | None = None  # when a consumer last died holding a delivery: a lease may hide it
        self.faulted = False  # the run had a fault schedule: the design's recovery may still be under way
        self.recovery_ns = 0  # the design's ``recovery_s``: the drain's shortest quiet before it ends
        self.drain_gave_up = False


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` whole shares that differ by at most one, the larger ones first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def send_gaps(rt: Runtime, rate: float, arrivals: str) -> Iterator[int] | None:
    """Nanoseconds between a producer's scheduled sends: constant, or exponential (Poisson
    arrivals) drawn from the node's seeded random source; None for a closed loop."""
    if not rate:
        return None
    if arrivals == "poisson":
        return (round(rt.random.expovariate(rate) * 1e9) for _ in itertools.count())
    return itertools.repeat(round(1e9 / rate))


def timed(recorder: Recorder, rt: Runtime, client: str, op: str, queue: str | None, *, msg_id: str | None = None,
          delay_ns: int | None = None) -> Measurement:
    """``with timed(...) as m: await ...``: one operation of ``client`` on node ``rt``, timed on
    its clock and recorded when the block ends (``Recorder.measure``): ok if the block returns,
    ``m.fail(why)`` for a definite failure found in a reply, the recorder's classified outcome
    if it raises — recorded and swallowed, so the client goes on; cancellation passes through
    unrecorded. The block sets ``m.msg_id`` and ``m.bytes`` as it learns them."""
    return recorder.measure(rt.now_ns, rt.node, client, op, queue, msg_id=msg_id, delay_ns=delay_ns)


async def wait_until(rt: Runtime, when: int | None) -> None:
    """Sleep until ``when`` on ``rt``'s clock (None, or past: not at all)."""
    if when is not None and when > (now := rt.now_ns()):
        await rt.sleep((when - now) / 1e9)


async def produce(rt: Runtime, client: QueueClient, name: str, queue: str, size: int, gaps: Iterator[int] | None,
                  stop_at: int | None, quota: int | None, recorder: Recorder, state: LoadState,
                  start_at: int | None = None) -> None:
    """Closed loop: one put after another on ``client``, each at its scheduled time (or at
    once, behind schedule or without one), from ``start_at`` until ``stop_at`` or the ``quota``."""
    await wait_until(rt, start_at)
    intended = rt.now_ns()
    seq = 0
    while quota is None or seq < quota:
        if gaps is not None:
            now = rt.now_ns()
            if intended > now:
                await rt.sleep((intended - now) / 1e9)
        start = rt.now_ns()
        if stop_at is not None and (intended if gaps is not None else start) >= stop_at:
            break
        delay = start - intended if gaps is not None else None
        intended += next(gaps) if gaps is not None else 0
        msg_id = f"{name}:{seq}"  # message.message_id
        with timed(recorder, rt, name, "put", queue, msg_id=msg_id, delay_ns=delay) as put:
            body = message.encode(msg_id, put.start_ns, size)  # the body carries the put's start
            put.bytes = len(body)
            await client.put(queue, body)
        state.puts += 1
        seq += 1
        if put.ok:
            state.enqueued += 1
        elif put.end_ns == put.start_ns:
            await rt.sleep(RETRY_PAUSE)  # an instant failure must not spin the clock in place
    await client.close()


class ClientPool:
    """An open-loop producer's clients: an idle one for each put, or a new one when every
    client is busy (a stream client takes one request at a time); most recently idle first."""

    def __init__(self, backend: Backend, rt: Runtime, reliable: bool):
        self.backend, self.rt, self.reliable = backend, rt, reliable
        self.idle: list[QueueClient] = []
        self.made = 0

    def take(self) -> QueueClient:
        if self.idle:
            return self.idle.pop()
        self.made += 1
        return self.backend.client(self.rt, self.reliable)

    def give_back(self, client: QueueClient) -> None:
        self.idle.append(client)

    async def close(self) -> None:
        while self.idle:
            await self.idle.pop().close()


async def produce_open(rt: Runtime, pool: ClientPool, name: str, queue: str, size: int, gaps: Iterator[int],
                       stop_at: int | None, quota: int | None, recorder: Recorder, state: LoadState,
                       start_at: int | None = None) -> None:
    """Open loop: each put is a task of its own, started at its scheduled time on a client of
    ``pool``, whether the puts before it have finished or not, from ``start_at`` on."""
    in_flight = 0
    all_done = None  # an event while the producer waits for its last puts

    async def put_one(client: QueueClient, seq: int, delay: int) -> None:
        nonlocal in_flight
        try:
            msg_id = f"{name}:{seq}"  # message.message_id
            with timed(recorder, rt, name, "put", queue, msg_id=msg_id, delay_ns=delay) as put:
                body = message.encode(msg_id, put.start_ns, size)
                put.bytes = len(body)
                await client.put(queue, body)
            state.puts += 1
            state.enqueued += put.ok
        finally:
            pool.give_back(client)
            in_flight -= 1
            if in_flight == 0 and all_done is not None:
                all_done.set()

    await wait_until(rt, start_at)
    intended = rt.now_ns()
    seq = 0
    while quota is None or seq < quota:
        now = rt.now_ns()
        if intended > now:
            await rt.sleep((intended - now) / 1e9)
        if stop_at is not None and intended >= stop_at:
            break
        delay = rt.now_ns() - intended
        intended += next(gaps)
        in_flight += 1
        rt.spawn(put_one(pool.take(), seq, delay), name=f"{name} put")
        seq += 1
    if in_flight:
        all_done = rt.event()
        await all_done.wait()
    await pool.close()


@dataclass(frozen=True)
class Pace:
    """How a consumer reads: from ``start`` seconds after the run began, ``work`` seconds
    between a delivery and its ack, ``pauses`` ((from, length) in ns on the run's clock)
    in which it reads nothing and holds what it leased, and ``deaths`` ((at, down) in ns) at
    which it dies holding what it holds and comes back as a new client (``lab.workloads.clients``)."""

    start: float = 0.0
    work: float = 0.0
    pauses: tuple[tuple[int, int], ...] = ()
    deaths: tuple[tuple[int, int], ...] = ()

    def paused_until(self, now: int) -> int | None:
        """The end of the pause ``now`` falls in, or None."""
        return next((begin + length for begin, length in self.pauses if begin <= now < begin + length), None)


class _Incarnation:
    """A consumer's client and the deaths it has still to die (``Pace.deaths``): a death
    abandons what it holds — recorded, never acknowledged — and closes the client without a
    word, as a crashed process's sockets close; ``renew`` makes the next incarnation's client."""

    def __init__(self, rt: Runtime, client: QueueClient, renew: Callable[[], QueueClient] | None, pace: Pace):
        self.rt, self.client, self.renew = rt, client, renew
        self.deaths = list(pace.deaths)

    def next_death(self) -> int | None:
        return self.deaths[0][0] if self.deaths and self.renew is not None else None

    async def die(self, recorder: Recorder, name: str, state: LoadState, held: Delivery | None,
                  msg_id: str | None) -> None:
        assert self.renew is not None
        _, down = self.deaths.pop(0)
        # it sent nothing: the row says when it died and what delivery it held (none between
        # operations), for the judge — its client may have held more (a prefetched batch)
        with timed(recorder, self.rt, name, "abandon", held.queue if held is not None else None, msg_id=msg_id):
            pass
        state.last_abandon = self.rt.now_ns()
        await self.client.close()
        await self.rt.sleep(down / 1e9)
        self.client = self.renew()


async def consume(rt: Runtime, client: QueueClient, name: str, queues: list[str], reliable: bool,
                  recorder: Recorder, state: LoadState, pace: Pace = Pace(),
                  renew: Callable[[], QueueClient] | None = None) -> None:
    """Get (and ack) until the drain finds every queue empty — an empty get, and no backlog
    where the design can tell one (``QueueClient.backlog``: leased or not yet visible
    messages), once the design's ``recovery_s`` has passed since the last delivery (or get
    that may have leased one) — or gives up: no delivery for ``DRAIN_STALL`` seconds (or
    ``recovery_s``, if longer), or ``DRAIN_CAP`` in all. Its ``pace`` holds until the drain;
    its deaths need ``renew``, which makes the client of its next incarnation."""
    me = _Incarnation(rt, client, renew, pace)
    empty: set[str] = set()
    drain_start: int | None = None
    await wait_until(rt, state.t0 + round(pace.start * 1e9))  # a late consumer: a backlog builds first
    turn = 0
    while True:
        queue = queues[turn % len(queues)]
        draining = state.draining
        turn += 1
        if not draining and pace.pauses and (resume := pace.paused_until(rt.now_ns())) is not None:
            await wait_until(rt, resume)
            continue
        if not draining and (death := me.next_death()) is not None and death <= rt.now_ns():
            await me.die(recorder, name, state, None, None)  # between operations: it held nothing
            continue
        if draining:
            now = rt.now_ns()
            drain_start = drain_start or now
            quiet = now - max(drain_start, state.last_delivery)
            if quiet >= max(DRAIN_STALL * 1e9, state.recovery_ns) or now - drain_start >= DRAIN_CAP * 1e9:
                if len(empty) < len(queues):  # not a drain that was waiting out the recovery of empty queues
                    state.drain_gave_up = True
                break
        delivery = None
        with timed(recorder, rt, name, "get", queue) as get:
            delivery = await me.client.get(queue, POLL_WAIT)
            if delivery is None:
                get.fail("empty")
            else:
                get.msg_id = message.decode(delivery.body)[0]
                get.bytes = len(delivery.body)
        if get.outcome == "info":  # it raised, and may have leased a message all the same
            state.last_unknown_get = rt.now_ns()
        if not get.ok:
            delivery = None  # a body that would not decode is no delivery either
        if delivery is None:
            if get.error != "empty":
                await rt.sleep(RETRY_PAUSE)  # the get failed: back off
            elif draining:
                try:
                    held = await me.client.backlog(queue)
                except Exception:  # unknown: ask again at the next empty get
                    held = 1
                if held:
                    empty.discard(queue)
                    await rt.sleep(RETRY_PAUSE)  # not empty yet: what it holds comes back later
                else:
                    empty.add(queue)
                    if len(empty) == len(queues):
                        # Empty as far as a get and the backlog can tell; but a message a lease
                        # or a repair pass still holds may be invisible to both (CassieQ's size
                        # is a counter that drifts): believe it once the design's own recovery
                        # has had its time since anything was, or may have been, delivered.
                        # Only a fault or a cut get can leave such a message: a clean run's empty
                        # queues are empty (a live CassieQ run must not idle out its recovery).
                        causes = [t for t in (drain_start if state.faulted else None, state.last_unknown_get,
                                              state.last_abandon) if t is not None]
                        if not causes or rt.now_ns() - max(*causes, state.last_delivery) >= state.recovery_ns:
                            break
                        await rt.sleep(POLL_WAIT)  # look again now and then meanwhile
            continue
        empty.discard(queue)
        if draining:  # the drain stays on a queue while it delivers: a poll of each empty one between
            turn -= 1  # two deliveries would make a backlog on one of many queues take minutes
        state.delivered += 1
        state.last_delivery = rt.now_ns()
        if pace.work and not draining:  # the work a message takes: the read stays open meanwhile
            death = me.next_death()
            if reliable and death is not None and death < rt.now_ns() + round(pace.work * 1e9):
                await wait_until(rt, death)  # it dies at its work, holding the message
                await me.die(recorder, name, state, delivery, get.msg_id)
                continue
            await rt.sleep(pace.work)
        if reliable:
            with timed(recorder, rt, name, "ack", delivery.queue, msg_id=get.msg_id):
                await me.client.ack(delivery)
    await me.client.close()
