"""`lab mutants`: planted bugs hunted in every design, beside the same runs unmutated."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab mutants`'s flags."""
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


#: the subcommands this module adds, and the function each runs
COMMANDS = {"mutants": cmd_mutants}
