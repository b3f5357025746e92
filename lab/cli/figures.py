"""`lab figures` (`make figures`): the documentation's figures made from runs
(``lab.experiments.figures``), copied into docs/ and stamped with the command and date that
made them in docs/figures.json."""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

from lab.cli.common import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab figures`' flags."""
    from lab.experiments.figures import FIGURES

    p = sub.add_parser("figures", help="make the documentation's figures from runs (compare, matrix, brokers), copy "
                                       "them into docs/ and stamp each with the command and date that made it "
                                       "(docs/figures.json)")
    p.add_argument("--only", help=f"comma-separated figures to make (default: all: {','.join(FIGURES)})")
    p.add_argument("--docs", type=Path, help="where the figures and figures.json go (default: docs/; with --quick: "
                                             "the runs' folder, so a quick figure never replaces a real one)")
    p.add_argument("--out", type=Path, help="the runs' folder (default: results/runs/figures-<time>)")
    p.add_argument("--quick", action="store_true", help="the quick set: one design, one scenario, one seed, a short "
                                                        "workload; checks the plumbing in a minute or two")


def cmd_figures(args: argparse.Namespace) -> int:
    from lab.experiments.figures import FIGURES, make_figures
    from lab.history.paths import runs_dir

    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown or not names:
        raise UsageError(f"--only {args.only!r}: choose from {', '.join(FIGURES)}")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    work = args.out or runs_dir() / f"figures-{stamp}"
    docs = args.docs or (work / "docs" if args.quick else Path("docs"))
    if not args.docs and not args.quick and not Path("mkdocs.yml").exists():
        raise UsageError("run `lab figures` from the repository's root (where mkdocs.yml is), or give --docs")
    # the command line as typed (the stamp names it); `lab figures` when called from another program
    made_by = " ".join(["lab", *map(shlex.quote, sys.argv[1:])]) if sys.argv[1:2] == ["figures"] else "lab figures"
    make_figures(names, docs, work, quick=args.quick, made_by=made_by)
    print(f"stamps: {docs / 'figures.json'}")
    return 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"figures": cmd_figures}
