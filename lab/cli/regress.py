"""`lab regress`: the regression gate against the committed baseline; a regression exits 1."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab regress`'s flags."""
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


#: the subcommands this module adds, and the function each runs
COMMANDS = {"regress": cmd_regress}
