"""`lab load`: Locust against a design's live servers, recorded and checked like a run."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import RUN_LEGEND, USER_ERRORS, UsageError, parse_option, parse_seconds, parse_seed, yaml_file
from lab.cli.run import print_result


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab load`'s flags: the load, the faults, the hosts, and a master with its workers."""
    p = sub.add_parser("load", help="Locust against a design's live servers, recorded and checked like a run",
                       epilog=RUN_LEGEND, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("backend", nargs="?", help="backend name (see `lab backends`); not with --worker")
    p.add_argument("--users", type=int, default=10, help="Locust users in all (default 10)")
    p.add_argument("--spawn-rate", type=float, default=10.0, help="users started per second (default 10)")
    p.add_argument("--duration", type=parse_seconds, default=10.0,
                   help="how long the load lasts: 60, 60s or 2m (default 10s)")
    p.add_argument("--processes", type=int, default=1,
                   help="Locust processes on this machine (default 1); with --worker, worker processes")
    p.add_argument("--producers", type=int, default=1, help="weight of producers among the users (default 1)")
    p.add_argument("--consumers", type=int, default=1, help="weight of consumers among the users (default 1)")
    p.add_argument("--ack", choices=("reliable", "auto"), default="reliable",
                   help="reliable: get then ack (default); auto: plain gets")
    p.add_argument("--release-p", type=float, default=0.0,
                   help="probability a reliable consumer releases a message instead of acking it (default 0)")
    p.add_argument("--queues", type=int, default=1, help="queues q0, q1, ... (default 1)")
    p.add_argument("--size", type=int, default=100, help="message size in bytes (default 100)")
    p.add_argument("--rate", type=float, default=0.0, help="puts/s per producer (default 0: as fast as it can)")
    p.add_argument("--batch", type=int, default=1,
                   help="messages a consumer reads per request (default 1; kestrel: more is monitor/confirm)")
    p.add_argument("--faults", type=Path, help="a YAML file with a fault schedule (a workload's `faults:` list)")
    p.add_argument("--option", action="append", default=[], type=parse_option, metavar="KEY=VALUE",
                   help="a backend option (see `lab backends`); repeatable")
    p.add_argument("--seed", type=parse_seed, default=0, help="the seed of the fault schedule's picks (default 0)")
    p.add_argument("--out", type=Path, help="run folder (default: results/runs/<run id>)")
    p.add_argument("--web", action="store_true",
                   help="serve Locust's web UI instead of running headless: start the load from the page, "
                        "end the run with Ctrl-C here")
    p.add_argument("--web-port", type=int, default=8089, help="the web UI's port (default 8089)")
    p.add_argument("--host", action="append", default=[], metavar="[NODE[.PORT]=]HOST:PORT",
                   help="load servers already running there instead of starting them (repeatable: every server "
                        "node's client ports; HOST:PORT alone is the next node's main port)")
    p.add_argument("--master", action="store_true",
                   help="run Locust as a master here; its users run in --workers K `lab load --worker` processes")
    p.add_argument("--workers", type=int, default=1, help="with --master: the worker processes to wait for (default 1)")
    p.add_argument("--master-bind-port", type=int, default=5557, help="with --master: its port (default 5557)")
    p.add_argument("--advertise", metavar="HOST",
                   help="with --master: this machine's name as workers on other machines reach it (the servers' "
                        "proxies then listen on every interface)")
    p.add_argument("--worker", action="store_true",
                   help="be a worker of a `lab load --master` run (its settings come from the master)")
    p.add_argument("--master-host", help="with --worker: where the master runs")
    p.add_argument("--master-port", type=int, default=5557, help="with --worker: the master's port (default 5557)")


def cmd_load(args: argparse.Namespace) -> int:
    from lab.experiments.load import Master, run_load, run_worker

    if args.worker:
        if args.backend or args.master:
            raise UsageError("lab load --worker takes no BACKEND and no --master: the master gives the run")
        if not args.master_host:
            raise UsageError("lab load --worker needs --master-host HOST (where `lab load BACKEND --master` runs)")
        return run_worker(args.master_host, args.master_port, args.processes)
    if not args.backend:
        raise UsageError("lab load needs a BACKEND (see `lab backends`), or --worker --master-host HOST")
    if not args.master and (args.advertise or args.workers != 1 or args.master_bind_port != 5557):
        raise UsageError("--workers, --master-bind-port and --advertise go with --master")
    if args.master_host:
        raise UsageError("--master-host goes with --worker")
    master = Master(args.workers, bind_port=args.master_bind_port, advertise=args.advertise) if args.master else None
    faults = _fault_file(args.faults) if args.faults else []
    if not 0 <= args.release_p <= 1:
        raise UsageError(f"--release-p {args.release_p}: use a probability from 0 to 1")
    for flag in ("queues", "size", "processes"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} {getattr(args, flag)}: use 1 or more")
    try:
        result = run_load(args.backend, users=args.users, spawn_rate=args.spawn_rate, duration=args.duration,
                          processes=args.processes, producers=args.producers, consumers=args.consumers,
                          ack=args.ack, queues=args.queues, size=args.size, rate=args.rate,
                          release_p=args.release_p, batch=args.batch, faults=faults, options=dict(args.option),
                          seed=args.seed, out=args.out, hosts=args.host, master=master,
                          web_port=args.web_port if args.web else None)
    except ValueError as e:  # a design without a load generator
        if isinstance(e, USER_ERRORS):
            raise
        raise UsageError(str(e)) from None
    return print_result(result)


def _fault_file(path: Path) -> list:
    data = yaml_file("--faults", path)
    faults = data.get("faults") if isinstance(data, dict) else data
    if not isinstance(faults, list):
        raise UsageError(f"--faults {path}: use a list of faults, or a mapping with a `faults:` list")
    return faults


#: the subcommands this module adds, and the function each runs
COMMANDS = {"load": cmd_load}
