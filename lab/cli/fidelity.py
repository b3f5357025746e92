"""`lab fidelity`: one workload live and in the calibrated sim, side by side."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import USER_ERRORS, UsageError
from lab.design.registry import backend_class
from lab.workloads.spec import load_workload


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab fidelity`'s flags."""
    p = sub.add_parser("fidelity", help="one workload live and in the calibrated sim: latency and saturation side by side")
    p.add_argument("backend", help="backend name (see `lab backends`)")
    p.add_argument("workload", type=Path, help="workload file (YAML), or a standard workload's name")
    p.add_argument("--calibration", metavar="FILE", help="the sim's service-time model (default: the design's committed one)")
    p.add_argument("--fractions", default="0.5,0.9",
                   help="load points, as fractions of the live saturation throughput (default 0.5,0.9; '' for none)")
    p.add_argument("--ramp-duration", type=float, default=3.0, help="seconds of load per ramp step and load point (default 3)")
    p.add_argument("--out", type=Path, help="output directory (default: results/runs/fidelity-<design>-<workload>-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


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


#: the subcommands this module adds, and the function each runs
COMMANDS = {"fidelity": cmd_fidelity}
