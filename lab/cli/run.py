"""`lab run`: one workload against one backend; and the summary a run prints (`lab load` prints
its run the same way).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.cli.common import RUN_LEGEND, UsageError, parse_option, parse_seed
from lab.judge.findings import Verdict
from lab.workloads.spec import load_workload


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab run`'s flags."""
    p = sub.add_parser("run", help="run one workload against one backend", epilog=RUN_LEGEND,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", type=Path, help="workload file (YAML), or a standard workload's name (`lab workloads`)")
    p.add_argument("--backend", required=True, help="backend name (see `lab backends`)")
    p.add_argument("--world", choices=("sim", "live"), default="sim", help="simulated or live (default: sim)")
    p.add_argument("--seed", type=parse_seed, help="seed (default: the workload's)")
    p.add_argument("--out", type=Path, help="run directory (default: results/runs/<run_id>)")
    p.add_argument("--option", action="append", default=[], type=parse_option, metavar="KEY=VALUE",
                   help="a backend option, e.g. fsync=always (repeatable; `lab backends` lists them)")
    p.add_argument("--calibration", metavar="FILE|none",
                   help="sim world: the service-time model of the server nodes' CPU (a `lab calibrate` file), "
                        "or none for no CPU model (default: the design's committed calibration)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def cmd_run(args: argparse.Namespace) -> int:
    from lab.experiments.runner import run

    if args.calibration is not None and args.world != "sim":
        raise UsageError("--calibration sets the sim world's CPU model; the live world has a real CPU")
    # the run resolves the design, checks its options and loads the calibration once, at its door
    result = run(load_workload(args.workload), args.backend, args.world, seed=args.seed, out=args.out,
                 progress=not args.no_progress, options=dict(args.option), calibration=args.calibration)
    return print_result(result)


def print_result(result) -> int:
    """A run's summary as `lab run` and `lab load` print it; the exit status its verdict gives."""
    from lab.judge.summary import format_table

    clock = "simulated" if result.world == "sim" else "live"
    rate = result.samples / result.wall_seconds if result.wall_seconds else float("nan")
    print(f"run {result.run_id}")
    print(f"{result.workload.name} on {result.backend}, {result.world} world, seed {result.seed}: "
          f"{result.world_seconds:.2f} s {clock} in {result.wall_seconds:.2f} s wall "
          f"({result.samples:,} operations, {rate:,.0f} per wall-second)")
    if result.world == "sim":  # the CPU model the sim ran on: the design's, a file, none or the lab's default
        print(f"calibration: {result.spec.calibration.source}")
    print()
    print(format_table(result.summary))
    print()
    print(f"checker: {result.check.line()}")
    print(f"samples: {result.samples_path}")
    for warning in result.warnings:
        print(f"lab: warning: {warning}", file=sys.stderr)
    # allowed: what the design promises under its faults; no evidence: neither a pass nor a catch, said above
    return 1 if result.verdict is Verdict.INVALID else 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"run": cmd_run}
