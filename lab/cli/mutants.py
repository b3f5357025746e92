"""`lab mutants`: planted bugs hunted in every design, beside the same runs unmutated; with
`--generate`, mutants the lab did not write (``lab.experiments.generated``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import UsageError, parse_option, parse_seconds


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab mutants`'s flags."""
    p = sub.add_parser("mutants", help="the lab's power: planted bugs in every design, each hunted through the "
                                       "scenarios and swarm seeds most likely to expose it, and the same runs unmutated")
    p.add_argument("--backends", help="designs whose mutants to hunt, comma-separated (default: all)")
    p.add_argument("--mutants", help="mutant names, comma-separated (default: every mutant of --backends; with "
                                     "--generate, generated mutants' names instead of a sample)")
    p.add_argument("--seeds", type=int, help="seeds per scenario, and swarm seeds, per mutant (default 3; "
                                             "with --generate 200)")
    p.add_argument("--world", choices=("sim", "live"), default="sim", help="world to hunt in (default sim)")
    p.add_argument("--jobs", type=int, help="worker processes (default: one per core in the sim world, 1 live)")
    p.add_argument("--shrink-runs", type=int, default=6, help="runs at most to shrink a catching schedule (default 6)")
    p.add_argument("--budget", help="wall time for the whole hunt: 90, 90s, 10m or 1h (default: no limit); "
                                    "runs in flight and the controls of runs made then finish")
    p.add_argument("--out", type=Path, help="folder (default: results/runs/mutants-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--list", action="store_true", help="list the chosen mutants (promise, mistake, scenarios), or with "
                                                       "--generate the sampled sites; run nothing")
    g = p.add_argument_group("generated mutants (docs/mutants.md#generated-mutants)")
    g.add_argument("--generate", action="store_true", help="hunt mutants generated from each design's core and wire "
                                                           "code by mutation operators (sim only)")
    g.add_argument("--sample", type=int, default=40, help="sites drawn per design (default 40)")
    g.add_argument("--sample-seed", type=int, default=1, help="the draw's seed (default 1)")
    g.add_argument("--option", action="append", default=[], type=parse_option, metavar="KEY=VALUE",
                   help="a backend option for the generated mutants' runs (repeatable; default: the design's "
                        "strongest promised option set)")
    g.add_argument("--screen", type=int, default=0, metavar="N",
                   help="stop a mutant as likely equivalent once its first N runs all matched their controls "
                        "(default 0: it runs every seed)")


def cmd_mutants(args: argparse.Namespace) -> int:
    from lab.experiments.hunt import chosen_mutants, hunt
    from lab.experiments.hunt_report import report_lines

    for flag in ("jobs", "seeds", "shrink_runs", "sample"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag.replace('_', '-')} {value}: use 1 or more")
    designs = [d.strip() for d in args.backends.split(",") if d.strip()] if args.backends else None
    names = [m.strip() for m in args.mutants.split(",") if m.strip()] if args.mutants else None
    budget = parse_seconds(args.budget) if args.budget else None
    if args.generate:
        return _generate(args, designs, budget)
    if args.option:
        raise UsageError("--option is for --generate (a planted mutant runs with the options its author chose)")
    if args.list:
        for m in chosen_mutants(designs, names):
            print(f"{m.name}  ({m.label})\n  breaks: {m.promise}\n  mistake: {m.mistake}\n"
                  f"  tried first: {', '.join(m.scenarios) or 'the swarm'}")
        return 0
    result = hunt(designs=designs, names=names, seeds=args.seeds or 3, world=args.world, jobs=args.jobs,
                  shrink_runs=args.shrink_runs, out=args.out, progress=not args.no_progress, budget=budget)
    print("\n".join(report_lines(result)))
    return 0 if result.passed else 1


def _generate(args: argparse.Namespace, designs: list[str] | None, budget: float | None) -> int:
    from lab.experiments.generated import report
    from lab.experiments.generated.plan import Generate, LiveRefused, NotMutable, plan
    from lab.experiments.generated.sites import NoSuchSite
    from lab.experiments.hunt import chosen_mutants, hunt

    names = tuple(m.strip() for m in args.mutants.split(",") if m.strip()) if args.mutants else ()
    if args.screen < 0:
        raise UsageError(f"--screen {args.screen}: use 0 (no screen) or more")
    spec = Generate(args.sample, args.sample_seed, dict(args.option) or None, names, args.screen)
    try:
        if args.list:
            chosen_mutants(designs, [])  # an unknown design is refused here
            drawn = plan(spec, designs, args.world)
            made = {m.name: m for m in drawn.mutants}
            for site in (site for design_sites in drawn.sites.values() for site in design_sites):
                m = made.get(site.name)
                print(f"{site.name}\n  " + (f"{m.mistake}  ({m.label})" if m else
                                             f"{site.where} {site.operator}: cannot be planted: "
                                             f"{drawn.unplantable.get(site.name, '')}"))
            return 0
        result = hunt(designs=designs, seeds=args.seeds or 200, world=args.world, jobs=args.jobs,
                      shrink_runs=args.shrink_runs, out=args.out, progress=not args.no_progress, generate=spec,
                      budget=budget)
    except (LiveRefused, NotMutable, NoSuchSite) as e:
        raise UsageError(str(e)) from e
    print("\n".join(report.lines(result)))
    return 0 if not (result.interrupted or result.false_alarms or result.without_evidence) else 1


#: the subcommands this module adds, and the function each runs
COMMANDS = {"mutants": cmd_mutants}
