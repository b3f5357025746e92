"""Distributed Locust runs, as the lab needs them: a worker (forked by ``--processes``, or
on another machine: ``lab load --worker``) sends each batch of its samples to the master
over Locust's own channel, and the master writes it into the run folder — so no folder is
shared between machines.

When the master's test stops, it asks each worker to stop its users and send what it
still holds, and waits until every worker has said it is done: a headless Locust master
quits half a second after telling its workers to, too soon for their last batches.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import gevent
import pyarrow as pa
import pyarrow.parquet as pq
from locust.runners import STATE_MISSING

from lab.history.record import SAMPLE_SCHEMA
from loadgen.recording import BATCH_NAME, Sink

SAMPLES, STOP, DONE = "lab_samples", "lab_stop", "lab_done"  # Locust custom message types
DONE_GRACE = 30.0  # seconds past the stop timeout the master waits for the workers' last batches

log = logging.getLogger("queue-lab")


class Collector:
    """The master's side: writes the batches its workers send into ``folder``."""

    def __init__(self, environment: Any, folder: Path):
        self.environment, self.folder = environment, folder
        self.done: set[str] = set()
        self.batches = 0
        folder.mkdir(parents=True, exist_ok=True)
        runner = environment.runner
        runner.register_message(SAMPLES, self.on_samples)
        runner.register_message(DONE, self.on_done)
        environment.events.test_stop.add_listener(self.on_test_stop)

    def on_samples(self, environment: Any, msg: Any) -> None:
        data = msg.data if isinstance(msg.data, dict) else {}
        name, payload = data.get("name"), data.get("data")
        if not isinstance(name, str) or not BATCH_NAME.match(name) or not isinstance(payload, bytes):
            log.error("queue-lab: a worker (%s) sent samples the lab cannot take; dropped", msg.node_id)
            return
        try:
            schema = pq.ParquetFile(pa.BufferReader(payload)).schema_arrow
        except (pa.ArrowInvalid, OSError) as e:
            log.error("queue-lab: %s from %s is not Parquet (%s); dropped", name, msg.node_id, e)
            return
        if not schema.equals(SAMPLE_SCHEMA):
            log.error("queue-lab: %s from %s is not in the lab's sample schema; dropped", name, msg.node_id)
            return
        partial = (self.folder / name).with_suffix(".partial")
        partial.write_bytes(payload)
        partial.rename(self.folder / name)  # whole or absent
        self.batches += 1

    def on_done(self, environment: Any, msg: Any) -> None:
        self.done.add(msg.node_id)

    def on_test_stop(self, environment: Any, **_: Any) -> None:
        runner = environment.runner
        workers = {c.id for c in runner.clients.all if c.state != STATE_MISSING}
        self.done.clear()
        for worker in workers:
            runner.send_message(STOP, None, client_id=worker)
        deadline = time.monotonic() + (environment.stop_timeout or 0) + DONE_GRACE
        while not workers <= self.done and time.monotonic() < deadline:
            gevent.sleep(0.05)
        if not workers <= self.done:
            log.error("queue-lab: workers %s did not send their last samples in time",
                      ", ".join(sorted(workers - self.done)))


class Shipper:
    """A worker's side: its sink's batches go to the master; the master's ``STOP`` stops
    this worker's users, sends what the sink holds, and answers ``DONE``."""

    def __init__(self, environment: Any):
        self.environment = environment
        self.sink: Sink | None = None
        environment.runner.register_message(STOP, self.on_stop, concurrent=True)

    def ship(self, name: str, data: bytes) -> None:
        self.environment.runner.send_message(SAMPLES, {"name": name, "data": data})

    def on_stop(self, environment: Any, msg: Any) -> None:
        environment.runner.stop()  # the users finish (the stop timeout); test_stop flushes the sink
        if self.sink is not None:
            self.sink.flush()
        environment.runner.send_message(DONE, None)
