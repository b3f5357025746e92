"""The locustfile of every load run: ``locust -f loadgen/locustfile.py --lab-backend NAME ...``
(``lab load`` writes the command). Its ``--lab-*`` options say what to load and where; on
each Locust process it sets up the users (how many producers and consumers, their rate)
and a sink that writes the process's samples (``loadgen.recording``).

A worker (``--processes``, or ``lab load --worker`` on another machine, started without
the ``--lab-*`` options) gets them from the master with its first spawn, and sends its
samples to the master (``loadgen.distributed``)."""

from __future__ import annotations

import atexit
import json
import time
from pathlib import Path

from locust import constant, constant_throughput, events
from locust.runners import MasterRunner, WorkerRunner

from loadgen.client import client_factory
from loadgen.clock import fresh_clock
from loadgen.distributed import Collector, Shipper
from loadgen.recording import Sink
from loadgen.users import Consumer, Producer, Settings

__all__ = ["Producer", "Consumer"]

STARTED = "started"  # written in --lab-run-dir when the test starts


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    lab = parser.add_argument_group("queue-lab")
    lab.add_argument("--lab-backend", default="", help="the design under load")
    lab.add_argument("--lab-targets", default="{}", help="JSON: {node: {port: host:port}}")
    lab.add_argument("--lab-options", default="{}", help="JSON: the design's checked options")
    lab.add_argument("--lab-run-dir", default="", help="where the samples are written")
    lab.add_argument("--lab-run-id", default="load", help="the run's id in every sample row")
    lab.add_argument("--lab-scenario", default="load", help="the run's name in every sample row")
    lab.add_argument("--lab-queues", type=int, default=1, help="queues <prefix>q0, <prefix>q1, ...")
    lab.add_argument("--lab-queue-prefix", default="", help="the queues' names start with it")
    lab.add_argument("--lab-size", type=int, default=100, help="message size in bytes")
    lab.add_argument("--lab-ack", default="reliable", choices=("reliable", "auto"), help="read mode")
    lab.add_argument("--lab-batch", type=int, default=1, help="messages a consumer reads per request")
    lab.add_argument("--lab-rate", type=float, default=0.0, help="puts/s per producer (0: closed loop)")
    lab.add_argument("--lab-release-p", type=float, default=0.0, help="probability a consumer releases")
    lab.add_argument("--lab-producers", type=int, default=1, help="producers among the users")
    lab.add_argument("--lab-consumers", type=int, default=1, help="consumers among the users")


events.init.add_listener(fresh_clock)  # before Locust arms --run-time (loadgen.clock)


@events.init.add_listener
def _setup(environment, **_) -> None:
    o = environment.parsed_options
    if o is None:
        return
    if isinstance(environment.runner, WorkerRunner):
        shipper = Shipper(environment)
        environment.events.test_start.add_listener(lambda **_: _users(environment, shipper))
        return
    if not o.lab_backend:
        return
    Producer.fixed_count, Consumer.fixed_count = o.lab_producers, o.lab_consumers  # the master dispatches them
    if o.lab_run_dir:
        # the run's clock starts when the users do: `lab load` waits for this file to time the faults
        started = Path(o.lab_run_dir) / STARTED
        environment.events.test_start.add_listener(lambda **_: started.write_text(str(time.time_ns())))
    if isinstance(environment.runner, MasterRunner):
        if o.lab_run_dir:
            Collector(environment, Path(o.lab_run_dir))
    else:
        _users(environment, None)


def _users(environment, shipper: Shipper | None) -> None:
    """The users' settings and this process's sink (once: a worker may be spawned again)."""
    o = environment.parsed_options
    if getattr(environment, "lab", None) is not None or not o.lab_backend:
        return
    environment.lab = Settings(o.lab_backend, client_factory(o.lab_backend), json.loads(o.lab_targets),
                               json.loads(o.lab_options), [f"{o.lab_queue_prefix}q{i}" for i in range(o.lab_queues)], o.lab_size,
                               o.lab_ack == "reliable", o.lab_release_p, o.lab_batch)
    Producer.wait_time = constant_throughput(o.lab_rate) if o.lab_rate > 0 else constant(0)
    if shipper is None and not o.lab_run_dir:
        return
    folder = Path(o.lab_run_dir) if o.lab_run_dir else None
    sink = Sink(folder, o.lab_run_id, o.lab_backend, o.lab_scenario, ship=shipper.ship if shipper else None)
    if shipper is not None:
        shipper.sink = sink
    environment.events.request.add_listener(sink.on_request)
    environment.events.quitting.add_listener(lambda **_: sink.close())
    environment.events.test_stop.add_listener(lambda **_: sink.flush())
    atexit.register(sink.close)  # however the process ends, what it holds is written
