"""`lab swarm`: a random fault mix per seed against one design; invalid seeds exit 1."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import UsageError, parse_option, parse_seconds


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab swarm`'s flags."""
    p = sub.add_parser("swarm", help="a random fault mix per seed against one design (VOPR-style): "
                                     "invalid seeds, their replay commands, shrunk schedules")
    p.add_argument("--backend", required=True, help="backend name (see `lab backends`)")
    p.add_argument("--seeds", default="1..200", help="seeds A..B, both included, or one seed N (default 1..200)")
    p.add_argument("--budget", help="wall time for the whole swarm, shrinking included: 90, 90s, 10m or 1h "
                                    "(default: no limit); runs in flight then finish")
    p.add_argument("--jobs", type=int, help="worker processes (default: one per core); with --spark, runs in flight "
                                            "(default: twice the cluster's cores)")
    p.add_argument("--spark", metavar="MASTER", help="run each seed as a Spark task: local[N] or spark://HOST:PORT "
                                                    "(the workers need the lab: docs/spark.md)")
    p.add_argument("--option", action="append", default=[], type=parse_option, metavar="KEY=VALUE",
                   help="a backend option, e.g. fsync=always (repeatable; `lab backends` lists them)")
    p.add_argument("--workload", type=Path, help="base workload file or standard name; its faults are replaced "
                                                 "(default: a reliable load drawn per seed)")
    p.add_argument("--world", choices=("sim", "live"), default="sim", help="sim only (a live run is no function "
                                                                          "of its seed)")
    p.add_argument("--load", choices=("drawn", "fixed"), help="draw each seed's load as well as its faults, or keep "
                                                             "the base workload's (default: drawn, fixed with --workload)")
    p.add_argument("--draws", action="store_true", help="print each seed's drawn load and faults and run nothing")
    p.add_argument("--faults-max", type=int, default=3, help="faults per seed: 1 to this (default 3)")
    p.add_argument("--shrink-runs", type=int, default=40, help="runs at most to shrink one seed (default 40)")
    p.add_argument("--no-shrink", action="store_true", help="do not shrink the invalid seeds")
    p.add_argument("--out", type=Path, help="swarm folder (default: results/runs/swarm-<time>-<backend>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def cmd_swarm(args: argparse.Namespace) -> int:
    from lab.experiments.swarm import draw_lines, draws, parse_seeds, report_lines, swarm

    if args.world != "sim":
        raise UsageError("lab swarm runs in the sim world only: a live run is no function of its seed, so a "
                         "failing seed could not be replayed or shrunk (run a seed's file with lab run --world live)")
    try:
        if args.spark is not None:
            from lab.experiments.spark_runs import check_master

            check_master(args.spark)
        seeds = parse_seeds(args.seeds)
        budget = parse_seconds(args.budget) if args.budget is not None else None
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"--budget: {e}") from None
    except ValueError as e:
        raise UsageError(str(e)) from None
    for flag in ("jobs", "faults_max", "shrink_runs"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag.replace('_', '-')} {value}: use 1 or more")
    load = None if args.load is None else args.load == "drawn"
    if args.draws:
        for seed, workload in draws(args.backend, seeds, options=dict(args.option), workload=args.workload,
                                    faults_max=args.faults_max, load=load).items():
            print("\n".join(draw_lines(seed, workload)))
        return 0
    result = swarm(args.backend, seeds, budget=budget, jobs=args.jobs, options=dict(args.option),
                   workload=args.workload, out=args.out, shrink=not args.no_shrink, faults_max=args.faults_max,
                   shrink_runs=args.shrink_runs, progress=not args.no_progress, spark=args.spark, load=load)
    print("\n".join(report_lines(result)))
    return 1 if result.findings else 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"swarm": cmd_swarm}
