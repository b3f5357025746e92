"""`lab conform NAME`: the battery every design passes; a checklist, and exit 1 on any FAIL."""

from __future__ import annotations

import argparse

from lab.cli.common import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab conform`'s flags."""
    p = sub.add_parser("conform", help="the battery every design passes: core purity, determinism, no-fault runs "
                                       "in both worlds, options, promises over faults, the live server, mutants; "
                                       "exits 1 on any failed check")
    p.add_argument("design", help="design name (see `lab backends`)")
    p.add_argument("--quick", action="store_true", help="the static, determinism, no-fault, option, client-error "
                                                        "and server checks only (no fault matrix, swarm or mutants)")
    p.add_argument("--only", action="append", metavar="CHECK",
                   help="run this check only (repeatable): purity, determinism, no-fault-sim, options, "
                        "errors, no-fault-live, server, fault-matrix, swarm, mutants")
    p.add_argument("--jobs", type=int, help="runs at a time (default: one per core)")
    p.add_argument("--seeds", type=int, metavar="N",
                   help="seed budget of the mutant and fault lines: each mutant's scenarios and swarm at seeds "
                        "1..N, the fault matrix at seeds 1..N, N swarm seeds per option set (default: 2 for "
                        "mutants, 1 for the matrix, 3 for the swarm)")
    p.add_argument("--keep", action="store_true", help="keep the runs' folder (named in each line) afterwards")


def cmd_conform(args: argparse.Namespace) -> int:
    from lab.experiments.conform import conform

    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: use 1 or more")
    if args.seeds is not None and args.seeds < 1:
        raise UsageError(f"--seeds {args.seeds}: use 1 or more")
    try:
        report = conform(args.design, quick=args.quick, only=args.only, jobs=args.jobs, seeds=args.seeds,
                         keep=args.keep)
    except ValueError as e:
        if type(e) is not ValueError:  # UnknownBackend, BadOption: the lab's own one-line errors
            raise
        raise UsageError(str(e)) from None
    print()
    print(report.text())
    return report.exit_code


#: the subcommands this module adds, and the function each runs
COMMANDS = {"conform": cmd_conform}
