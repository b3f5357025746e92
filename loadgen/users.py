"""The lab's Locust users: producers that put messages carrying their id and put time, and
consumers that get them (and, with reliable reads, ack — or release at a chosen rate).
One pair for every design: each design's wire is its ``LoadClient`` (``lab.design.load``),
made by the design's ``load.py``.

Every operation fires Locust's ``events.request`` once (Locust's statistics and CSVs see
it, named ``put q0``, ``get q0``, ...) with the lab's row in its ``context``, which the
sink (``loadgen.recording``) writes: start on the wall clock, latency from the
performance counter, both in nanoseconds, and the outcome as the lab classifies it
(``fail`` for a refusal or an empty get, ``info`` when the outcome is unknown).
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import gevent
from locust import User, constant, task

from lab.design.load import LoadClient, Refused, Targets
from lab.design.message import decode, encode, message_id
from loadgen.recording import process_tag

EMPTY_POLL = 0.001  # seconds a consumer waits after an empty get (the design's get may wait longer itself)
ERROR_PAUSE = 0.01  # seconds a user waits after an operation that failed or timed out
_numbers = itertools.count(1)


@dataclass
class Settings:
    """One load run, as the locustfile's ``--lab-*`` options give it."""

    backend: str
    make_client: Callable[..., LoadClient]
    targets: Targets
    options: dict[str, Any]
    queues: list[str]
    size: int
    reliable: bool
    release_p: float = 0.0
    batch: int = 1  # messages a consumer's client reads per request (a design's batched read)
    rng: random.Random = field(default_factory=random.Random)


class Measure:
    """Times one operation and fires its request event (with the lab's row) when it ends."""

    __slots__ = ("user", "op", "queue", "msg_id", "bytes", "empty", "start_ns", "start_perf")

    def __init__(self, user: "LabUser", op: str, queue: str, msg_id: str | None, nbytes: int):
        self.user, self.op, self.queue, self.msg_id, self.bytes = user, op, queue, msg_id, nbytes
        self.empty = False

    def __enter__(self) -> "Measure":
        self.start_ns = time.time_ns()
        self.start_perf = time.perf_counter_ns()
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        latency = time.perf_counter_ns() - self.start_perf
        interrupted = error is not None and not isinstance(error, Exception)
        text: str | None
        if interrupted:  # the greenlet killed at the run's end (or Ctrl-C): the request may have
            # reached the server all the same (a put waiting for its confirm), so it is recorded,
            # its outcome unknown; then the interruption goes on
            outcome, text = "info", f"interrupted ({type(error).__name__}) before its reply"
        elif error is None:
            outcome, text = ("fail", "empty") if self.empty else ("ok", None)
        else:
            outcome, text = ("fail" if isinstance(error, Refused) else "info"), f"{type(error).__name__}: {error}"[:200]
        row = ("locust", self.user.client_name, self.op, self.queue, self.msg_id, self.start_ns, latency, outcome,
               text, self.bytes, None, None)  # loadgen.recording.ROW
        name = f"{self.op} {self.queue}" + (" (empty)" if self.empty else "")
        self.user.environment.events.request.fire(
            request_type=self.op, name=name, response_time=latency / 1e6, response_length=self.bytes,
            exception=error, context={"lab": row})
        if interrupted:
            return False
        if error is not None:  # a server that is down refuses at once: a client pauses before it tries again
            self.user.pause(ERROR_PAUSE)
        return True  # recorded: the user goes on, as Locust's own measure does


class LabUser(User):
    abstract = True
    wait_time = constant(0)
    role = "u"

    def on_start(self) -> None:
        settings: Settings = self.environment.lab
        self.settings = settings
        number = next(_numbers)
        self.client_name = f"{self.role}{process_tag()}x{number}"  # unique across machines: message ids carry it
        batch = {"batch": settings.batch} if settings.batch > 1 else {}
        self.lab_client = settings.make_client(settings.targets, settings.options, settings.reliable, number, **batch)
        self.turn = itertools.cycle(settings.queues[number % len(settings.queues):] +
                                    settings.queues[:number % len(settings.queues)])

    def on_stop(self) -> None:
        self.lab_client.close()

    def measure(self, op: str, queue: str, msg_id: str | None = None, nbytes: int = 0) -> Measure:
        return Measure(self, op, queue, msg_id, nbytes)

    def pause(self, seconds: float) -> None:
        gevent.sleep(seconds)


class Producer(LabUser):
    """Puts messages into the queues in turn, as fast as its wait time lets it."""

    abstract = False
    role = "p"
    seq = 0

    @task
    def put(self) -> None:
        queue = next(self.turn)
        self.seq += 1
        msg_id = message_id(self.client_name, self.seq)
        body = encode(msg_id, time.time_ns(), self.settings.size)
        with self.measure("put", queue, msg_id, len(body)):
            self.lab_client.put(queue, body)


class Consumer(LabUser):
    """Gets from the queues in turn; with reliable reads, acks each message (or releases it
    with probability ``--release-p``: it comes back for another consumer)."""

    abstract = False
    role = "c"

    def on_stop(self) -> None:
        """Hand out what the client fetched and holds before it goes: a log's group commit
        covers the records of every consumer of the group, so a record fetched and never
        handed out would be skipped for good (a Kafka consumer drains its buffer too)."""
        for queue in self.settings.queues:
            while self.lab_client.buffered(queue):  # every LoadClient says (0: it holds none)
                self._get(queue)
        super().on_stop()

    @task
    def get(self) -> None:
        self._get(next(self.turn))

    def _get(self, queue: str) -> None:
        got = None
        with self.measure("get", queue) as m:
            got = self.lab_client.get(queue)
            if got is None:
                m.empty = True
            else:
                m.msg_id, _ = decode(got[0])
                m.bytes = len(got[0])
        if got is None:
            self.pause(EMPTY_POLL)
            return
        body, token = got
        if token is None or not self.settings.reliable:
            return
        if self.settings.release_p and self.settings.rng.random() < self.settings.release_p:
            with self.measure("release", queue, m.msg_id):
                self.lab_client.release(queue, token)
        else:
            with self.measure("ack", queue, m.msg_id):
                self.lab_client.ack(queue, token)

