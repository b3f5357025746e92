"""The `lab` command: run a workload, list the backends, compare the designs.

A user's mistake (a missing file, an unknown backend, a bad workload field) prints one
line, ``lab: error: ...``, and exits 2 — no traceback. Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import yaml

from lab.design.registry import CONTROL, REGISTRY, UnknownBackend, backend_class, design_module
from lab.design.options import BadOption
from lab.experiments.compare import NothingToRun
from lab.experiments.planting import UnknownMutant
from lab.history.paths import BadRunDir
from lab.aggregate.spark import JavaMissing
from lab.judge.verdict import INVALID
from lab.workloads.spec import Workload, WorkloadError, load_workload


class UsageError(Exception):
    """A mistake in how the command was called."""


USER_ERRORS = (UsageError, WorkloadError, UnknownBackend, BadOption, BadRunDir, JavaMissing, NothingToRun, UnknownMutant)

RUN_LEGEND = """\
the summary, row by row; each op has two rows: phases "all" (warm-up to drain) and
"measured" (steady, fault and heal: what `lab compare` and `lab aggregate` report):
  put, get, ack, release  operations: count, then ok / fail / info, ok operations per second,
                          and the latency of the ok ones (one request's round trip)
  e2e      end to end, per delivered message: its put's start to its first delivery (in
           the phase of that delivery); unlike a get's latency it includes the time the
           message waited in the queue
  delay    publish delay: how late a scheduled put started behind its intended time; large
           when a stall held the producers back (hidden from put latency: coordinated omission)
outcomes:
  ok       the operation happened
  fail     it certainly did not happen (refused, unreachable; an empty get is fail "empty")
  info     its outcome is unknown (a timeout): it may or may not have happened
the checker: lost = acknowledged puts never delivered; the verdict holds the counts to what
the design promises under the run's options and faults (`lab backends`): valid, allowed (a
loss, duplicate or reordering the promises permit under one of the run's faults, named) or
invalid (a broken promise, named; or a run with no acknowledged put or nothing delivered).
exit status: 0 valid or allowed, 1 invalid, 2 a mistake in the command or the workload.
"""


def _seed(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None


def _option(text: str) -> tuple[str, Any]:
    """KEY=VALUE, the value read as a YAML scalar (so 100 is a number and always a word)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"use KEY=VALUE, got {text!r}")
    parsed = yaml.safe_load(value) if value.strip() else ""
    if isinstance(parsed, (dict, list)):
        parsed = value  # a scalar option; keep the text as given
    return key.strip(), parsed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lab", description="queue-lab: compare message-queue designs "
                                     "in a simulated and a live world.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run one workload against one backend", epilog=RUN_LEGEND,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", type=Path, help="workload file (YAML), or a standard workload's name (`lab workloads`)")
    p.add_argument("--backend", required=True, help="backend name (see `lab backends`)")
    p.add_argument("--world", choices=("sim", "live"), default="sim", help="simulated or live (default: sim)")
    p.add_argument("--seed", type=_seed, help="seed (default: the workload's)")
    p.add_argument("--out", type=Path, help="run directory (default: results/runs/<run_id>)")
    p.add_argument("--option", action="append", default=[], type=_option, metavar="KEY=VALUE",
                   help="a backend option, e.g. fsync=always (repeatable; `lab backends` lists them)")
    p.add_argument("--calibration", metavar="FILE|none",
                   help="sim world: the service-time model of the server nodes' CPU (a `lab calibrate` file), "
                        "or none for no CPU model (default: the design's committed calibration)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    sub.add_parser("backends", help="list the registered backends and what each supports")
    sub.add_parser("workloads", help="list the standard workloads (runnable by name)")

    p = sub.add_parser("compare", help="the standard workloads on every backend in both worlds")
    p.add_argument("--backends", help="comma-separated backend names (default: all)")
    p.add_argument("--worlds", default="sim,live", help="comma-separated worlds (default: sim,live)")
    p.add_argument("--workloads", nargs="+", type=Path, help="workload files or names (default: the standard set)")
    p.add_argument("--out", type=Path, help="output directory (default: results/runs/compare-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p = sub.add_parser("matrix", help="every design under every fault scenario over seeds, as one table (sim); "
                                      "exits 1 when a cell is INVALID (a broken promise), 0 when every cell is "
                                      "valid or allowed")
    p.add_argument("--backends", help="comma-separated backend names (default: all)")
    p.add_argument("--scenarios", help="comma-separated scenario names or files (default: every scenario)")
    p.add_argument("--seeds", type=int, default=5, help="seeds per cell, 1..K (default 5)")
    p.add_argument("--option-sets", type=Path, metavar="FILE",
                   help="YAML: {design: [{option: value, ...}, ...]} instead of each design's own option sets")
    p.add_argument("--jobs", type=int, help="runs at a time (default: one per core)")
    p.add_argument("--out", type=Path, help="output directory (default: results/runs/matrix-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p = sub.add_parser("fidelity", help="one workload live and in the calibrated sim: latency and saturation side by side")
    p.add_argument("backend", help="backend name (see `lab backends`)")
    p.add_argument("workload", type=Path, help="workload file (YAML), or a standard workload's name")
    p.add_argument("--calibration", metavar="FILE", help="the sim's service-time model (default: the design's committed one)")
    p.add_argument("--fractions", default="0.5,0.9",
                   help="load points, as fractions of the live saturation throughput (default 0.5,0.9; '' for none)")
    p.add_argument("--ramp-duration", type=float, default=3.0, help="seconds of load per ramp step and load point (default 3)")
    p.add_argument("--out", type=Path, help="output directory (default: results/runs/fidelity-<design>-<workload>-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p = sub.add_parser("report", help="runs as one self-contained HTML file: a table and latency charts")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (or folders of runs, "
                   "e.g. a `lab compare` output)")
    p.add_argument("--out", type=Path, help="the HTML file (default: results/runs/report-<time>.html)")
    p = sub.add_parser("regress", help="the regression gate: a short standard set in both worlds against the "
                                       "committed baseline (exit 1 on a regression)")
    p.add_argument("--baseline", type=Path, metavar="FILE",
                   help="the baseline JSON (default: results/baselines/standard.json)")
    p.add_argument("--update", action="store_true", help="write this run's figures into the baseline (needs --reason)")
    p.add_argument("--reason", help="with --update: why the figures changed (kept in the baseline's history)")
    p.add_argument("--designs", help="comma-separated designs (default: every registered one)")
    p.add_argument("--workloads", help="comma-separated workloads of the gate's set (default: steady,burst-reliable)")
    p.add_argument("--worlds", help="comma-separated worlds (default: sim,live)")
    p.add_argument("--repeats", type=int, help="live rounds (default 4)")
    p.add_argument("--out", type=Path, help="output folder (default: results/regress/<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p = sub.add_parser("aggregate", help="summarise the samples of runs with Spark")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (or compare folders)")
    p.add_argument("--out", type=Path, help="output directory (default: results/summaries/<time>)")
    p.add_argument("--master", help="Spark master: local[*] (default), local[N] or spark://HOST:7077")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting (repeatable)")

    p = sub.add_parser("serve", help="run a design's server (its real wire protocol)")
    serves = p.add_subparsers(dest="design", required=True, metavar="DESIGN")
    for name, module in _design_modules("serve"):
        module.add_arguments(serves.add_parser(name, help=module.HELP))
    for name, module in _design_modules("tools"):  # lab NAME TOOL ...
        module.add_arguments(sub.add_parser(name, help=module.HELP))

    p = sub.add_parser("cluster", help="run a design's cluster of local server processes")
    clusters = p.add_subparsers(dest="design", required=True, metavar="DESIGN")
    for name, module in _design_modules("cluster"):
        module.add_arguments(clusters.add_parser(name, help=module.HELP))

    p = sub.add_parser("load", help="Locust against a design's live servers, recorded and checked like a run",
                       epilog=RUN_LEGEND, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("backend", nargs="?", help="backend name (see `lab backends`); not with --worker")
    p.add_argument("--users", type=int, default=10, help="Locust users in all (default 10)")
    p.add_argument("--spawn-rate", type=float, default=10.0, help="users started per second (default 10)")
    p.add_argument("--duration", type=_seconds, default=10.0, help="how long the load lasts: 60, 60s or 2m (default 10s)")
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
    p.add_argument("--option", action="append", default=[], type=_option, metavar="KEY=VALUE",
                   help="a backend option (see `lab backends`); repeatable")
    p.add_argument("--seed", type=_seed, default=0, help="the seed of the fault schedule's picks (default 0)")
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

    p = sub.add_parser("swarm", help="a random fault mix per seed against one design (VOPR-style): "
                                     "invalid seeds, their replay commands, shrunk schedules")
    p.add_argument("--backend", required=True, help="backend name (see `lab backends`)")
    p.add_argument("--seeds", default="1..200", help="seeds A..B, both included, or one seed N (default 1..200)")
    p.add_argument("--budget", help="wall time for the whole swarm, shrinking included: 90, 90s, 10m or 1h "
                                    "(default: no limit); runs in flight then finish")
    p.add_argument("--jobs", type=int, help="worker processes (default: one per core)")
    p.add_argument("--option", action="append", default=[], type=_option, metavar="KEY=VALUE",
                   help="a backend option, e.g. fsync=always (repeatable; `lab backends` lists them)")
    p.add_argument("--workload", type=Path, help="base workload file or standard name; its faults are replaced "
                                                 "(default: 3 s at 1000 msg/s, 2 producers, 2 consumers, reliable)")
    p.add_argument("--world", choices=("sim", "live"), default="sim", help="sim only (a live run is no function "
                                                                          "of its seed)")
    p.add_argument("--faults-max", type=int, default=3, help="faults per seed: 1 to this (default 3)")
    p.add_argument("--shrink-runs", type=int, default=40, help="runs at most to shrink one seed (default 40)")
    p.add_argument("--no-shrink", action="store_true", help="do not shrink the invalid seeds")
    p.add_argument("--out", type=Path, help="swarm folder (default: results/runs/swarm-<time>-<backend>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("mutants", help="the lab's power: planted bugs in every design, each hunted through the "
                                       "scenarios and swarm seeds most likely to expose it, and the same runs unmutated")
    p.add_argument("--backends", help="designs whose mutants to hunt, comma-separated (default: all)")
    p.add_argument("--mutants", help="mutant names, comma-separated (default: every mutant of --backends)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per scenario, and swarm seeds, per mutant (default 3)")
    p.add_argument("--world", choices=("sim", "live"), default="sim", help="world to hunt in (default sim)")
    p.add_argument("--jobs", type=int, help="worker processes (default: one per core in the sim world, 1 live)")
    p.add_argument("--shrink-runs", type=int, default=6, help="runs at most to shrink a catching schedule (default 6)")
    p.add_argument("--out", type=Path, help="folder (default: results/runs/mutants-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--list", action="store_true", help="list the chosen mutants (promise, mistake, scenarios); run nothing")

    p = sub.add_parser("calibrate", help="measure a design's service times (in process) and loopback latency; "
                                         "write its calibration file (the sim world's CPU model)")
    p.add_argument("backend", help="backend name (see `lab backends`)")
    p.add_argument("--out", type=Path, help="the file to write (default: the design's committed "
                                            "lab/backends/<design>/calibration.yaml)")
    p.add_argument("--requests", type=int, default=None, metavar="N",
                   help="operation cycles per message size, and loopback round trips (default 1000)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("bench", help="benchmarks that print and save their figures")
    bench = p.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    from lab.experiments.bench import sim as bench_sim_module  # its flags are its own

    bench_sim_module.add_arguments(bench.add_parser("sim", help="the simulated world's cost against bare SimPy"))
    from lab.experiments.bench import checker as bench_checker_module

    bench_checker_module.add_arguments(bench.add_parser("checker", help=bench_checker_module.HELP))
    b = bench.add_parser("aggregate", help="the Spark pipeline on synthetic samples, beside DuckDB")
    b.add_argument("--rows", type=int, default=10_000_000, help="synthetic sample rows (default 10,000,000)")
    b.add_argument("--master", help="Spark master (default local[*])")
    b.add_argument("--cluster", action="store_true", help="start a standalone cluster (master + 2 workers) and use it")
    b.add_argument("--repeats", type=int, default=3, help="timed runs per case; the median is quoted (default 3)")
    b.add_argument("--out", type=Path, help="JSON file (default: results/bench/aggregate-<time>.json)")
    b = bench.add_parser("loadgen", help="the lab's Locust user against a minimal one, both on memcached")
    b.add_argument("--duration", type=float, default=10.0, help="seconds of each Locust run (default 10)")
    b.add_argument("--users", type=int, default=20, help="Locust users in one process, closed loop (default 20)")
    b.add_argument("--repeats", type=int, default=3, help="rounds of both runs; medians are quoted (default 3)")
    b.add_argument("--out", type=Path, help="JSON file (default: results/bench/loadgen-<time>.json)")
    for name, module in _design_modules("bench"):
        module.add_arguments(bench.add_parser(name, help=module.HELP))
    return parser


def _spark_conf(items: list[str]) -> dict[str, str]:
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf takes KEY=VALUE, got {item!r}")
        conf[key.strip()] = value.strip()
    return conf


def cmd_aggregate(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from lab.aggregate.pipeline import aggregate, files_by_run
    from lab.history.paths import results_dir
    from lab.aggregate.spark import spark_session
    from lab.judge.summary import format_spark_summary

    try:
        files_by_run(args.runs)  # a missing run or a torn file fails before a JVM starts
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    from lab.worlds.interrupt import skipped_line, split_interrupted

    for path, cut in split_interrupted(args.runs)[1]:  # folders an interrupt cut short: named, not read
        print(skipped_line(path, cut), file=sys.stderr)
    out = args.out or results_dir() / "summaries" / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    try:
        result = aggregate(spark_session(args.master, _spark_conf(args.conf)), args.runs, out)
    except ValueError as e:  # samples the pipeline can't take (unknown phases)
        raise UsageError(str(e)) from None
    print(format_spark_summary(result.summary))
    print()
    for _, c in result.checks.iterrows():
        verdict = c["verdict"].upper() + ("" if c["valid"] else f" ({c['reason']})")
        print(f"{c['run_id']}: {verdict}: {c['attempts']} attempted, {c['ok']} ok, {c['lost']} lost, "
              f"{c['unexpected']} unexpected, {c['duplicated']} duplicated, {c['recovered']} recovered")
    print(f"\nsummaries: {result.directory} (summary, throughput, checks as .parquet and .json)")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from lab.experiments.bench import save

    if args.repeats < 1:
        raise UsageError("--repeats must be >= 1")
    if args.bench == "sim":
        from lab.experiments.bench.sim import run as bench_sim

        try:
            results = bench_sim(args)
        except ValueError as e:
            raise UsageError(str(e)) from None
    elif args.bench == "checker":
        from lab.experiments.bench.checker import run as bench_checker

        try:
            results = bench_checker(args)
        except ValueError as e:  # a bad flag
            raise UsageError(str(e)) from None
    elif args.bench == "loadgen":
        from loadgen.bench import run as bench_loadgen  # the load generator's own benchmark, beside it

        try:
            results = bench_loadgen(args)
        except ValueError as e:  # a bad flag
            raise UsageError(str(e)) from None
    elif args.bench in REGISTRY:
        try:
            results = design_module(args.bench, "bench").run(args)
        except ValueError as e:  # a bad flag
            raise UsageError(str(e)) from None
    else:
        from lab.experiments.bench.aggregate import bench_aggregate

        if args.rows < 1000:
            raise UsageError("--rows must be at least 1000")
        if args.cluster and args.master:
            raise UsageError("--cluster starts its own master; leave out --master")
        print(f"Spark pipeline on {args.rows:,} synthetic samples (median of {args.repeats}):")
        results = bench_aggregate(args.rows, args.master, args.repeats, args.cluster)
    print(f"saved: {save(args.bench, results, args.out)}")
    return 0


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
    return _print_result(result)


def _yaml_file(flag: str, path: Path) -> Any:
    """A YAML file a flag names; a UsageError if it is missing or not YAML."""
    if not path.is_file():
        raise UsageError(f"{flag} {path}: no such file")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise UsageError(f"{flag} {path}: not YAML: {e}") from None


def _fault_file(path: Path) -> list:
    data = _yaml_file("--faults", path)
    faults = data.get("faults") if isinstance(data, dict) else data
    if not isinstance(faults, list):
        raise UsageError(f"--faults {path}: use a list of faults, or a mapping with a `faults:` list")
    return faults


def _seconds(text: str) -> float:
    """60, 60s, 2m or 1h as seconds."""
    scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], None)
    try:
        value = float(text[:-1] if scale else text) * (scale or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"use seconds (60, 60s, 2m or 1h), got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def cmd_swarm(args: argparse.Namespace) -> int:
    from lab.experiments.swarm import parse_seeds, report_lines, swarm

    if args.world != "sim":
        raise UsageError("lab swarm runs in the sim world only: a live run is no function of its seed, so a "
                         "failing seed could not be replayed or shrunk (run a seed's file with lab run --world live)")
    try:
        seeds = parse_seeds(args.seeds)
        budget = _seconds(args.budget) if args.budget is not None else None
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"--budget: {e}") from None
    except ValueError as e:
        raise UsageError(str(e)) from None
    for flag in ("jobs", "faults_max", "shrink_runs"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag.replace('_', '-')} {value}: use 1 or more")
    result = swarm(args.backend, seeds, budget=budget, jobs=args.jobs, options=dict(args.option),
                   workload=args.workload, out=args.out, shrink=not args.no_shrink, faults_max=args.faults_max,
                   shrink_runs=args.shrink_runs, progress=not args.no_progress)
    print("\n".join(report_lines(result)))
    return 1 if result.findings else 0


def cmd_mutants(args: argparse.Namespace) -> int:
    from lab.experiments.hunt import chosen_mutants, hunt, report_lines

    for flag in ("jobs", "seeds", "shrink_runs"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag.replace('_', '-')} {value}: use 1 or more")
    designs = [d.strip() for d in args.backends.split(",") if d.strip()] if args.backends else None
    names = [m.strip() for m in args.mutants.split(",") if m.strip()] if args.mutants else None
    if args.list:
        for m in chosen_mutants(designs, names):
            print(f"{m.name}  ({m.label})\n  breaks: {m.promise}\n  mistake: {m.mistake}\n"
                  f"  tried first: {', '.join(m.scenarios) or 'the swarm'}")
        return 0
    result = hunt(designs=designs, names=names, seeds=args.seeds, world=args.world, jobs=args.jobs,
                  shrink_runs=args.shrink_runs, out=args.out, progress=not args.no_progress)
    print("\n".join(report_lines(result)))
    return 0 if result.passed else 1


def cmd_calibrate(args: argparse.Namespace) -> int:
    from lab.experiments.calibrate import DEFAULT_REQUESTS, MIN_REQUESTS, calibrate

    cls = backend_class(args.backend)
    requests = DEFAULT_REQUESTS if args.requests is None else args.requests
    if requests < MIN_REQUESTS:
        raise UsageError(f"--requests {requests}: use {MIN_REQUESTS} or more")
    out = args.out if args.out is not None else cls.calibration_path()
    if out is None:
        raise UsageError(f"{args.backend} has no folder of its own: give --out FILE")
    if out.is_dir() or not out.parent.is_dir():
        raise UsageError(f"--out {out}: {'a folder' if out.is_dir() else 'no folder ' + str(out.parent)}; give a file path")
    calibration = calibrate(args.backend, requests, progress=not args.no_progress)
    calibration.write(out)
    print(calibration.table())
    print(f"\nwritten: {out} ({calibration.measured['seconds']} s)")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from lab.experiments.runner import run

    workload = with_calibration(load_workload(args.workload), args.calibration, args.world)
    backend_class(args.backend)
    result = run(workload, args.backend, args.world, seed=args.seed, out=args.out, progress=not args.no_progress,
                 options=dict(args.option))
    return _print_result(result)


def with_calibration(workload: Workload, calibration: str | None, world: str) -> Workload:
    """``workload`` with ``--calibration`` in its sim block (checked here: a bad file is a usage error)."""
    if calibration is None:
        return workload
    if world != "sim":
        raise UsageError("--calibration sets the sim world's CPU model; the live world has a real CPU")
    if calibration != "none":
        from lab.design.service import ServiceModel, ServiceModelError

        try:
            ServiceModel.load(calibration)
        except ServiceModelError as e:
            raise UsageError(f"--calibration: {e}") from None
        calibration = str(Path(calibration).resolve())
    return dataclasses.replace(workload, sim={**workload.sim, "calibration": calibration})


def cmd_fidelity(args: argparse.Namespace) -> int:
    from lab.experiments.fidelity import fidelity, format_table

    backend_class(args.backend)
    workload = load_workload(args.workload)
    try:
        fractions = tuple(float(f) for f in args.fractions.split(",") if f.strip())
    except ValueError:
        raise UsageError(f"--fractions {args.fractions!r}: use fractions such as 0.5,0.9") from None
    if any(not 0 < f <= 1.5 for f in fractions):
        raise UsageError(f"--fractions {args.fractions!r}: each fraction must be in (0, 1.5]")
    if not args.ramp_duration > 0:
        raise UsageError("--ramp-duration must be a number of seconds > 0")
    if args.calibration is not None:
        with_calibration(workload, args.calibration, "sim")  # a bad file is a usage error before anything runs
    try:
        table = fidelity(args.backend, workload, args.calibration, fractions, args.ramp_duration, args.out,
                         progress=not args.no_progress)
    except ValueError as e:
        if isinstance(e, USER_ERRORS):
            raise
        raise UsageError(str(e)) from None
    print()
    print(format_table(table))
    print(f"\nwritten: {table.directory / 'fidelity.json'}, {table.directory / 'fidelity.png'}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from lab.history.paths import runs_dir
    from lab.present.report import NoRuns, find_runs, render

    out = args.out
    if out is None:
        out = runs_dir() / f"report-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}.html"
    elif out.is_dir():
        raise UsageError(f"--out {out}: a folder; give a file path such as {out / 'report.html'}")
    skipped: list[str] = []
    try:
        page = render(find_runs(args.runs, skipped))
    except NoRuns as e:
        raise UsageError(str(e)) from None
    for line in skipped:  # folders an interrupt cut short: named, not read
        print(line, file=sys.stderr)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"--out {out}: cannot write: {e.strerror or e}") from None
    print(f"written: {out}")
    return 0


def _print_result(result) -> int:
    """A run's summary as `lab run` and `lab load` print it; the exit status its verdict gives."""
    from lab.judge.summary import format_table

    clock = "simulated" if result.world == "sim" else "live"
    rate = result.samples / result.wall_seconds if result.wall_seconds else float("nan")
    print(f"run {result.run_id}")
    print(f"{result.workload.name} on {result.backend}, {result.world} world, seed {result.seed}: "
          f"{result.world_seconds:.2f} s {clock} in {result.wall_seconds:.2f} s wall "
          f"({result.samples:,} operations, {rate:,.0f} per wall-second)")
    print()
    print(format_table(result.summary))
    print()
    print(f"checker: {result.verdict.line()}")
    print(f"samples: {result.samples_path}")
    for warning in result.warnings:
        print(f"lab: warning: {warning}", file=sys.stderr)
    return 1 if result.verdict.verdict == INVALID else 0  # allowed: what the design promises under its faults


def cmd_backends(args: argparse.Namespace) -> int:
    for name in [CONTROL] + sorted(n for n in REGISTRY if n != CONTROL):  # the control first: the floor
        cls = backend_class(name)
        print(f"{name}: {cls.summary}")
        print(f"    worlds: {', '.join(cls.worlds)}")
        defaults = cls.check_options({})
        print("    promises (default options; a run is judged by its own):")
        for reliable in (True, False):
            promises = cls.promises(defaults, reliable)
            first, *rest = promises.lines()
            print(f"      {promises.by}: {first}")
            for line in rest:
                print(f"        {line}")
        print("    options (--option KEY=VALUE):")
        for option in sorted(cls.options_declared, key=lambda o: o.name):
            print(f"      {option.name}: {option.describe()}")
    return 0


def cmd_workloads(args: argparse.Namespace) -> int:
    from lab.workloads.spec import scenario_files, standard_workload_files

    print("standard workloads (lab compare runs them; files: lab/workloads/):")
    for path in standard_workload_files():
        w = load_workload(path)
        print(f"  {w.name:<26} {w.description}")
    print("\nfault scenarios (lab matrix runs them; files: lab/workloads/scenarios/):")
    for path in scenario_files():
        w = load_workload(path)
        print(f"  {w.name:<26} {w.description}")
    print("\nrun one: lab run NAME --backend BACKEND [--world sim|live]")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from lab.experiments.compare import compare

    worlds = [w.strip() for w in args.worlds.split(",") if w.strip()]
    bad = [w for w in worlds if w not in ("sim", "live")]
    if bad or not worlds:
        raise UsageError(f"--worlds takes sim and/or live, got {args.worlds!r}")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends else None
    workloads = [load_workload(p) for p in args.workloads] if args.workloads else None
    print("running the comparison:")
    comparison = compare(backends, worlds, workloads, out=args.out, progress=not args.no_progress)
    print()
    print(comparison.markdown_path.read_text())
    print(f"table: {comparison.markdown_path} and {comparison.csv_path}")
    print(f"chart: {comparison.plot_path}")
    return 0


def cmd_regress(args: argparse.Namespace) -> int:
    from lab.experiments.regress import DEFAULT_REPEATS, RegressError, choose, default_baseline, regress, text_table, verdict_lines

    def names(text: str | None) -> list[str] | None:
        return [n.strip() for n in text.split(",") if n.strip()] if text is not None else None

    try:
        repeats = DEFAULT_REPEATS if args.repeats is None else args.repeats
        designs, workloads, worlds = choose(names(args.designs), names(args.workloads), names(args.worlds), repeats)
        outcome = regress(designs, workloads, worlds, repeats, args.baseline or default_baseline(),
                          update=args.update, reason=args.reason, out=args.out, progress=not args.no_progress)
    except RegressError as e:
        raise UsageError(str(e)) from None
    print()
    print(text_table(outcome.rows))
    print()
    for line in verdict_lines(outcome.rows, outcome.updated):
        print(line)
    print(f"written: {outcome.directory / 'regress.md'} and regress.json ({outcome.seconds:.0f} s)")
    return 0 if outcome.passed else 1


def cmd_matrix(args: argparse.Namespace) -> int:
    from lab.experiments.matrix import invalid_rows, run_matrix

    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: use 1 or more")
    overrides = _option_sets_file(args.option_sets) if args.option_sets else None
    backends = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends else None
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()] if args.scenarios else None
    matrix = run_matrix(backends, scenarios, args.seeds, overrides, args.jobs, args.out, not args.no_progress)
    print()
    print(matrix.markdown_path.read_text())
    print(f"table: {matrix.markdown_path} and {matrix.csv_path}")
    print(f"heat map: {matrix.heatmap_path}")
    invalid = invalid_rows(matrix.rows)
    for row in invalid:  # the exit status says so too: a script or CI gates on it
        print(f"INVALID: {' '.join(filter(None, [row['backend'], row['options']]))} under {row['scenario']}: "
              f"{row['reason']}")
    return 1 if invalid else 0


def _option_sets_file(path: Path) -> dict:
    data = _yaml_file("--option-sets", path)
    if not isinstance(data, dict) or not all(
            isinstance(sets, list) and all(isinstance(s, dict) for s in sets) for sets in data.values()):
        raise UsageError(f"--option-sets {path}: use {{design: [{{option: value, ...}}, ...]}}")
    return data


def cmd_serve(args: argparse.Namespace) -> int:
    from lab.worlds import interrupt
    from lab.experiments.planting import plant_from_environment

    plant_from_environment(args.design)  # the test hook QUEUE_LAB_MUTANT: off unless set
    try:
        design_module(args.design, "serve").serve(args)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except OSError as e:  # the port is taken, the folder is not writable...
        raise UsageError(f"cannot serve: {e}") from None
    interrupt.raise_if_received()  # stopped cleanly by Ctrl-C or SIGTERM: it still ends as interrupted
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    try:
        return design_module(args.design, "cluster").run(args)
    except ValueError as e:  # a bad flag, a node that did not start
        raise UsageError(str(e)) from None
    except OSError as e:  # the folder is not writable...
        raise UsageError(f"cannot start the cluster: {e}") from None


def cmd_design_tool(args: argparse.Namespace) -> int:
    try:
        return design_module(args.command, "tools").run(args)
    except ValueError as e:  # a missing file, a file of the wrong kind
        raise UsageError(str(e)) from None


def _design_modules(part: str):
    """(name, module) of every registered design that has a ``part`` module."""
    for name in REGISTRY:
        module = design_module(name, part)
        if module is not None:
            yield name, module


COMMANDS = {"run": cmd_run, "calibrate": cmd_calibrate, "serve": cmd_serve, "backends": cmd_backends, "workloads": cmd_workloads,
            "compare": cmd_compare, "aggregate": cmd_aggregate, "bench": cmd_bench, "cluster": cmd_cluster,
            "load": cmd_load, "matrix": cmd_matrix, "swarm": cmd_swarm, "mutants": cmd_mutants,
            "fidelity": cmd_fidelity, "report": cmd_report, "regress": cmd_regress}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("queue-lab")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    from lab.worlds import interrupt

    args = _parser().parse_args(argv)
    previous = interrupt.install()  # SIGTERM (a script's or CI's `kill`) stops a command as Ctrl-C does
    try:
        return COMMANDS.get(args.command, cmd_design_tool)(args)
    except USER_ERRORS as e:
        print(f"lab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        interrupt.restore(previous, ignore=True)
        interrupt.reap_descendants()  # what the command's own clean-up missed: no process outlives it
        print("lab: interrupted", file=sys.stderr)
        return interrupt.EXIT_CODE
    finally:
        interrupt.restore(previous)  # main may run inside another program (the tests)


if __name__ == "__main__":
    sys.exit(main())
