"""`lab matrix`: every design under every fault scenario over seeds; a broken promise exits 1."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import UsageError, yaml_file


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab matrix`'s flags."""
    p = sub.add_parser("matrix", help="every design under every fault scenario over seeds, as one table (sim, or live); "
                                      "exits 1 when a cell is INVALID (a broken promise), 0 when every cell is "
                                      "valid or allowed")
    p.add_argument("--backends", help="comma-separated backend names (default: all)")
    p.add_argument("--scenarios", help="comma-separated scenario names or files (default: every scenario)")
    p.add_argument("--seeds", type=int, default=5, help="seeds per cell, 1..K (default 5)")
    p.add_argument("--world", choices=("sim", "live"), default="sim",
                   help="sim (default), or live: real processes, one run at a time unless --jobs; the only world "
                        "of the real brokers (redis, rabbitmq, nats, beanstalkd)")
    p.add_argument("--option-sets", type=Path, metavar="FILE",
                   help="YAML: {design: [{option: value, ...}, ...]} instead of each design's own option sets")
    p.add_argument("--jobs", type=int, help="runs at a time (default: one per core; with --spark, twice the "
                                            "cluster's cores)")
    p.add_argument("--spark", metavar="MASTER", help="run each run as a Spark task, and the table on the same "
                                                    "cluster: local[N] or spark://HOST:PORT (sim world; the "
                                                    "workers need the lab: docs/spark.md)")
    p.add_argument("--out", type=Path, help="output directory (default: results/runs/matrix-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def cmd_matrix(args: argparse.Namespace) -> int:
    from lab.experiments.matrix import invalid_rows, run_matrix

    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: use 1 or more")
    if args.spark is not None:
        from lab.experiments.spark_runs import check_master

        if args.world != "sim":
            raise UsageError("--spark runs the sim world only (a live run needs the brokers on this machine)")
        try:
            check_master(args.spark)
        except ValueError as e:
            raise UsageError(str(e)) from None
    overrides = _option_sets_file(args.option_sets) if args.option_sets else None
    backends = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends else None
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()] if args.scenarios else None
    matrix = run_matrix(backends, scenarios, args.seeds, overrides, args.jobs, args.out, not args.no_progress,
                        world=args.world, spark=args.spark)
    print()
    print(matrix.markdown_path.read_text())
    print(f"table: {matrix.markdown_path} and {matrix.csv_path}")
    print(f"heat map: {matrix.heatmap_path}")
    invalid = invalid_rows(matrix.rows)
    for row in invalid:  # the exit status says so too: a script or CI gates on it
        print(f"INVALID: {' '.join(filter(None, [row['backend'], row['options']]))} under {row['scenario']}: "
              f"{row['reason']}")
    for row in matrix.rows:  # neither a pass nor a catch: counted apart, and no reason to exit 1
        if row["no_evidence"]:
            print(f"no evidence in {row['no_evidence']} of {row['seeds']} seed(s): "
                  f"{' '.join(filter(None, [row['backend'], row['options']]))} under {row['scenario']}")
    return 1 if invalid else 0


def _option_sets_file(path: Path) -> dict:
    data = yaml_file("--option-sets", path)
    if not isinstance(data, dict) or not all(
            isinstance(sets, list) and all(isinstance(s, dict) for s in sets) for sets in data.values()):
        raise UsageError(f"--option-sets {path}: use {{design: [{{option: value, ...}}, ...]}}")
    return data


#: the subcommands this module adds, and the function each runs
COMMANDS = {"matrix": cmd_matrix}
