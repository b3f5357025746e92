"""The locustfile of every load run: ``locust -f loadgen/locustfile.py --lab-backend NAME ...``
(``lab load`` writes the command). Its ``--lab-*`` options say what to load and where; on
each Locust process it sets up the users (how many producers and consumers, their rate)
and a sink that writes the process's samples (``loadgen.recording``)."""

from __future__ import annotations

import atexit
import json
import time
from pathlib import Path

from locust import constant, constant_throughput, events

from loadgen.client import client_factory
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
    lab.add_argument("--lab-run-dir", default="", help="where each process writes its samples")
    lab.add_argument("--lab-run-id", default="load", help="the run's id in every sample row")
    lab.add_argument("--lab-scenario", default="load", help="the run's name in every sample row")
    lab.add_argument("--lab-queues", type=int, default=1, help="queues q0, q1, ...")
    lab.add_argument("--lab-size", type=int, default=100, help="message size in bytes")
    lab.add_argument("--lab-ack", default="reliable", choices=("reliable", "auto"), help="read mode")
    lab.add_argument("--lab-rate", type=float, default=0.0, help="puts/s per producer (0: closed loop)")
    lab.add_argument("--lab-release-p", type=float, default=0.0, help="probability a consumer releases")
    lab.add_argument("--lab-producers", type=int, default=1, help="producers among the users")
    lab.add_argument("--lab-consumers", type=int, default=1, help="consumers among the users")


@events.init.add_listener
def _setup(environment, **_) -> None:
    o = environment.parsed_options
    if o is None or not o.lab_backend:
        return
    environment.lab = Settings(o.lab_backend, client_factory(o.lab_backend), json.loads(o.lab_targets),
                               json.loads(o.lab_options), [f"q{i}" for i in range(o.lab_queues)], o.lab_size,
                               o.lab_ack == "reliable", o.lab_release_p)
    Producer.fixed_count, Consumer.fixed_count = o.lab_producers, o.lab_consumers
    Producer.wait_time = constant_throughput(o.lab_rate) if o.lab_rate > 0 else constant(0)
    if o.lab_run_dir:
        # the run's clock starts when the users do: `lab load` waits for this file to time the faults
        started = Path(o.lab_run_dir) / STARTED
        environment.events.test_start.add_listener(lambda **_: started.write_text(str(time.time_ns())))
        sink = Sink(Path(o.lab_run_dir), o.lab_run_id, o.lab_backend, o.lab_scenario)
        environment.events.request.add_listener(sink.on_request)
        environment.events.quitting.add_listener(lambda **_: sink.close())
        environment.events.test_stop.add_listener(lambda **_: sink.flush())
        atexit.register(sink.close)  # however the process ends, what it holds is written
