"""`lab compare`: the standard workloads on every backend in both worlds, as one table."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import UsageError
from lab.workloads.spec import load_workload


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab compare`'s flags."""
    p = sub.add_parser("compare", help="the standard workloads on every backend in both worlds")
    p.add_argument("--backends", help="comma-separated backend names (default: all)")
    p.add_argument("--worlds", default="sim,live", help="comma-separated worlds (default: sim,live)")
    p.add_argument("--workloads", nargs="+", type=Path, help="workload files or names (default: the standard set)")
    p.add_argument("--out", type=Path, help="output directory (default: results/runs/compare-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


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
    print(f"answer: {comparison.answer_path}")
    print()
    print("The answer:")
    print(comparison.answer_path.read_text(), end="")
    return 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"compare": cmd_compare}
